#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: creates .venv (and the Blender venvs once
# the add-on tests exist) from the pinned requirements, then lint and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3

ensure_venv() {  # ensure_venv DIR REQUIREMENTS...: (re)install only when the pins change
    local dir=$1; shift
    local stamp; stamp=$(cat "$@" | sha256sum | cut -c1-16)
    if [ ! -x "$dir/bin/python" ] || [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
        echo "setting up $dir ..."
        "$PYTHON" -m venv "$dir"
        "$dir/bin/python" -m pip install -q --disable-pip-version-check $(printf -- '-r %s ' "$@")
        echo "$stamp" > "$dir/.stamp"
    fi
}

ensure_venv .venv requirements.txt requirements-dev.txt
.venv/bin/ruff check .
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
