#!/usr/bin/env bash
# The tensordict tier: the main suite's TensorDict-heavy tests against the NEWEST tensordict a
# fresh `pip install gpu-envs` resolves today (CI's main venv pins tensordict; users get the newest).
#
# gpu_envs reads tensordict's internals in one module only (gpu_envs/utils/tensordicts.py), on
# the versions whose layout it knows (DIRECT_VERSIONS), and uses the public API on any other:
# this tier proves the package works on whatever release is newest, on either path.
#
# The venv lives in the cache folder (torch pinned to the CPU build first, as everywhere), and
# tensordict is upgraded to the newest release on every run (a no-op when it already is).
# Usage: scripts/tensordict_newest.sh [pytest args]   (prints the installed version first)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${GPU_ENVS_CACHE:-$HOME/.cache/gpu_envs}"
venv="${GPU_ENVS_TENSORDICT_VENV:-$cache/tensordict-newest-py311}"
python="${PYTHON:-python3}"
mkdir -p "$cache"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
    "${pip[@]}" install -U pip wheel >/dev/null
fi
pins="$venv/torch-pin.txt"
grep -E '^torch==' "$root/constraints-ci.txt" > "$pins"
"${pip[@]}" install -c "$pins" torch
# everything else at CI's pins, but tensordict: the newest release compatible with that torch
grep -vE '^(tensordict|torchrl)==' "$root/constraints-ci.txt" > "$venv/constraints.txt"
"${pip[@]}" install -c "$venv/constraints.txt" gymnasium numpy packaging rich pytest hypothesis av  # av: the video extra (tests/test_snapshot.py records)
"${pip[@]}" install -U -c "$pins" tensordict
"$venv/bin/python" -c "import tensordict; print('tensordict', tensordict.__version__)"
cd "$root"
PYTHONPATH="$root" exec "$venv/bin/python" -m pytest -q -m "slow or not slow" \
    tests/test_step_path.py tests/test_rollout.py tests/test_snapshot.py tests/test_transforms.py \
    tests/test_live_state.py tests/test_misuse.py tests/test_sync_guard.py tests/test_specs_batched.py \
    tests/test_final_obs_property.py tests/test_env_specs.py "$@"
