#!/usr/bin/env bash
# The main job from a fresh clone: set up .venv, then roll out the built-in CartPole-v1
# with a progress bar and a summary table. Extra arguments go to `gpu-envs rollout`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log="$(mktemp)"
echo "setting up $root/.venv (the first run installs the pinned packages; log: $log)" >&2
if ! bash "$root/scripts/setup_venv.sh" >"$log" 2>&1; then
    cat "$log" >&2
    echo "quickstart: setting up .venv failed (see above)" >&2
    exit 1
fi
exec "$root/.venv/bin/gpu-envs" rollout "$@"
