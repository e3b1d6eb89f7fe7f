#!/usr/bin/env bash
# Create (or reuse) .venv at the repository root and install gpu_envs into it, editable,
# with the versions CI pins (constraints-ci.txt). Usage: scripts/setup_venv.sh [EXTRAS]
#   scripts/setup_venv.sh              -> runtime only (enough for `gpu-envs rollout`)
#   scripts/setup_venv.sh test,jax,torchrl,plot
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
extras="${1:-}"
python="${PYTHON:-python3}"
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install -U pip wheel >/dev/null
# torch first, alone: the pinned CPU build, never a multi-GB CUDA build pulled in by a dependency
"${pip[@]}" install -c "$root/constraints-ci.txt" torch
target="$root"
[ -n "$extras" ] && target="$root[$extras]"
"${pip[@]}" install -c "$root/constraints-ci.txt" -e "$target"
if [[ ",$extras," == *",jax,"* ]]; then
    # gymnax's metadata caps gymnasium < 1.4 although the API we use works with 1.4:
    # install it without its dependencies (jax and flax come from the jax extra).
    "${pip[@]}" install -c "$root/constraints-ci.txt" --no-deps gymnax
fi
if [[ ",$extras," == *",puffer,"* ]]; then
    # pufferlib-core pins torch==2.9.0 (a different torch): install it without its dependencies; the
    # vector envs the tests refuse need only numpy, gymnasium and psutil (the puffer extra).
    "${pip[@]}" install -c "$root/constraints-ci.txt" --no-deps pufferlib-core
fi
if [[ ",$extras," == *",rl-games,"* || ",$extras," == *",rl_games,"* ]]; then  # (the old spelling too)
    # rl-games' metadata caps psutil < 6 although it never imports psutil (installing it normally would
    # downgrade psutil): install it without its dependencies; the rl-games extra brings those it imports.
    "${pip[@]}" install -c "$root/constraints-ci.txt" --no-deps rl-games
fi
echo "$venv"
