#!/usr/bin/env bash
# The whole test suite from a fresh clone (the README's test command, and CI's):
#  1. create or refresh .venv (dev), .venv-bpy42, .venv-bpy45 and .venv-bpy50 from their pinned
#     requirement files (scripts/venvs.py: reinstalls only when a pin changes);
#  2. build this machine's compiled kernels (scripts/build_native.py --platform host): the
#     tests hold them to the numpy code and fail, not skip, where they are missing;
#  3. ruff check .;
#  4. pytest in .venv on tests/ except tests/blender (extra arguments go to this run);
#  5. the engine's test files again with the kernels' baseline code (NPE_NATIVE_BASELINE=1:
#     the networks' plain code, as on a processor without AVX2) and with the kernels off
#     (NPE_NATIVE=0: numpy alone; the kernels' own tests skip);
#  6. pytest tests/blender once per Blender venv, each in its own process under a timeout
#     (bpy 4.5 can hang at exit when a handler stays registered).
# Fails when any step fails or a pytest run collects nothing (exit 5).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
BLENDER_TIMEOUT_S=${BLENDER_TIMEOUT_S:-900}
BLENDER_VENVS=(bpy42 bpy45 bpy50)

ensure() {  # ensure DIR REQUIREMENTS...
    "$PYTHON" scripts/venvs.py "$@" || { echo "test.sh: could not set up $1" >&2; exit 1; }
}
ensure .venv requirements.txt requirements-dev.txt
for v in "${BLENDER_VENVS[@]}"; do ensure ".venv-$v" "requirements-$v.txt"; done

summary=()
failed=0
record() {  # record NAME RC SECONDS
    local status=passed
    case $2 in
        0) ;;
        5) status="FAILED: collected no tests"; failed=1 ;;
        124|137) status="FAILED: timed out"; failed=1 ;;
        *) status="FAILED (exit $2)"; failed=1 ;;
    esac
    summary+=("$(printf '%-34s %s in %ss' "$1" "$status" "$3")")
}

start=$SECONDS
"$PYTHON" scripts/build_native.py --platform host
record "build_native.py --platform host" $? $((SECONDS - start))
export NPE_REQUIRE_NATIVE=1

start=$SECONDS
.venv/bin/ruff check .
record "ruff check ." $? $((SECONDS - start))

start=$SECONDS
.venv/bin/python -m pytest tests --ignore=tests/blender "$@"
record "pytest (.venv)" $? $((SECONDS - start))

# The engine's files: the solve, its stages and the kernels (the rest runs no kernel).
ENGINE_TESTS=(tests/test_pipeline.py tests/test_refine.py tests/test_solve_kernels.py
              tests/test_native.py tests/test_compiled_networks.py tests/test_rig_ik.py
              tests/test_exact_reach.py tests/test_rigid_branches.py tests/test_reach_bounds.py
              tests/test_rotations.py tests/test_rotations_reference.py tests/test_models.py)
start=$SECONDS
NPE_NATIVE_BASELINE=1 .venv/bin/python -m pytest -q "${ENGINE_TESTS[@]}"
record "pytest engine, baseline kernels" $? $((SECONDS - start))
start=$SECONDS
env -u NPE_REQUIRE_NATIVE NPE_NATIVE=0 .venv/bin/python -m pytest -q "${ENGINE_TESTS[@]}"
record "pytest engine, NPE_NATIVE=0" $? $((SECONDS - start))

for v in "${BLENDER_VENVS[@]}"; do
    start=$SECONDS
    timeout "$BLENDER_TIMEOUT_S" ".venv-$v/bin/python" -m pytest tests/blender
    record "pytest tests/blender (.venv-$v)" $? $((SECONDS - start))
done

echo
printf '%s\n' "${summary[@]}"
exit $failed
