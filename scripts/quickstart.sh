#!/usr/bin/env bash
# The main job from a fresh clone: set up .venv, then roll out the built-in CartPole-v1
# with a progress bar and a summary table. Extra arguments go to `gpu-envs rollout`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_venv.sh" >/dev/null
exec "$root/.venv/bin/gpu-envs" rollout "$@"
