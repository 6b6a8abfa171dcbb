"""Scripts that run inside Blender's Python (the bpy venv), started by ``python -m training``
commands through :mod:`training.blender.run`; nothing here is imported by the dev venv.

``BLENDER_USER_RESOURCES`` must point to a temp dir before ``bpy`` is first imported, or
``import bpy`` reads and writes the user's own Blender config: the launcher sets it, and
this package refuses to load without it (it is imported before any of its modules).
"""

import os

USER_RESOURCES_ENV = "BLENDER_USER_RESOURCES"

if USER_RESOURCES_ENV not in os.environ:
    raise RuntimeError(f"{USER_RESOURCES_ENV} is not set: start these scripts through "
                       "`python -m training benchmark-blender` / `render-walkthrough`, which "
                       "isolate Blender's user config")
