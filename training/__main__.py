"""``python -m training <command>``."""

import sys

from training.cli import main

sys.exit(main())
