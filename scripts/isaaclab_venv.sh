#!/usr/bin/env bash
# Build (once) or reuse the Python 3.12 venv that runs the real Isaac Lab test tier.
#
# Isaac Lab 3.0.0 needs Python 3.12 and makes a ~7.8 GB venv, so it lives OUTSIDE the
# clone, in a cache folder keyed by the pinned versions, and is reused across runs:
#
#     ${GPU_ENVS_CACHE:-$HOME/.cache/gpu_envs}/isaaclab-3.0.0-py312
#
# The marker file `.complete` in that folder says the (slow) Isaac Lab install
# finished; without it the install is (re)run. pytest and this repository (editable,
# --no-deps: Isaac Lab's own torch must stay) are checked on every call and
# installed when missing, which takes a few seconds.
#
# Usage (prints the venv path on the last line of stdout; logs go to stderr):
#
#     VENV=$(scripts/isaaclab_venv.sh)
#     "$VENV/bin/python" -m pytest tests/isaaclab -q
#
# Environment: GPU_ENVS_CACHE (cache root), ISAACLAB_VENV (use this folder instead),
# PYTHON312 (a python3.12 to build with).
set -euo pipefail

ISAACLAB_VERSION=3.0.0
PY_TAG=py312
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${GPU_ENVS_CACHE:-$HOME/.cache/gpu_envs}
VENV=${ISAACLAB_VENV:-$CACHE/isaaclab-$ISAACLAB_VERSION-$PY_TAG}
LOCK=$CACHE/isaaclab-$ISAACLAB_VERSION-$PY_TAG.lock

log() { echo "[isaaclab_venv] $*" >&2; }

find_python312() {
    # `python3.12` may be a pyenv shim that only works where a 3.12 is selected.
    local candidate
    if [[ -n "${PYTHON312:-}" ]] && "$PYTHON312" --version >/dev/null 2>&1; then
        echo "$PYTHON312"; return 0
    fi
    if python3.12 --version >/dev/null 2>&1; then
        command -v python3.12; return 0
    fi
    if command -v pyenv >/dev/null 2>&1; then
        for candidate in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.|$)' | sort -V -r); do
            if PYENV_VERSION=$candidate pyenv which python3.12 >/dev/null 2>&1; then
                PYENV_VERSION=$candidate pyenv which python3.12; return 0
            fi
        done
    fi
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12; do
        if [[ -x "$candidate" ]] && "$candidate" --version >/dev/null 2>&1; then
            echo "$candidate"; return 0
        fi
    done
    return 1
}

mkdir -p "$CACHE"
exec 9>"$LOCK"
if ! flock -w 3600 9; then
    log "another build of $VENV holds $LOCK for over an hour; giving up."
    exit 1
fi

if [[ ! -f "$VENV/.complete" ]]; then
    PY=$(find_python312) || {
        log "no working Python 3.12 found: install one (e.g. pyenv install 3.12) or set PYTHON312=/path/to/python3.12."
        exit 1
    }
    log "building $VENV with $PY (isaaclab==$ISAACLAB_VERSION, ~3 min, ~8 GB)"
    [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q -U pip wheel setuptools >&2
    "$VENV/bin/python" -m pip install -q "isaaclab==$ISAACLAB_VERSION" >&2
    touch "$VENV/.complete"
fi

# The test runner and this checkout. `--no-deps`: our dependencies (torch, tensordict,
# gymnasium, numpy, packaging, rich) are checked below, never re-resolved by pip, which
# could otherwise swap Isaac Lab's torch build for another one.
if ! "$VENV/bin/python" -c "import pytest" >/dev/null 2>&1; then
    log "installing pytest"
    "$VENV/bin/python" -m pip install -q pytest >&2
fi
# find_spec locates the package without importing it (and torch with it).
installed_from=$(cd "$CACHE" && "$VENV/bin/python" -c "import importlib.util as u, os; s = u.find_spec('gpu_envs'); print(os.path.dirname(os.path.dirname(s.origin)))" 2>/dev/null || true)
if [[ "$installed_from" != "$REPO" ]]; then
    log "installing $REPO (editable, --no-deps)"
    (cd "$CACHE" && "$VENV/bin/python" -m pip install -q --no-deps -e "$REPO" >&2)
fi
missing=$(cd "$CACHE" && "$VENV/bin/python" - <<'EOF'
import importlib.util
needed = ["torch", "tensordict", "gymnasium", "numpy", "packaging", "rich"]
print(" ".join(n for n in needed if importlib.util.find_spec(n) is None))
EOF
)
if [[ -n "$missing" ]]; then
    log "installing missing dependencies: $missing"
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install -q $missing >&2
fi
# rl_games, for the tier's to_rl_games tests: the versions constraints-ci.txt pins, (re)installed when the
# venv lacks them or has others, so an existing cache is extended in place. `--no-deps`: rl-games' metadata
# caps psutil < 6 (which it never imports) and must not move Isaac Lab's packages; PyYAML and protobuf
# (tensorboardX's) come with Isaac Lab.
pins=$(grep -E '^(rl-games|tensorboardX)==' "$REPO/constraints-ci.txt" | tr '\n' ' ')
# shellcheck disable=SC2086
wrong=$(cd "$CACHE" && "$VENV/bin/python" - $pins <<'EOF'
import sys
from importlib import metadata
wrong = []
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    try:
        if metadata.version(name) != version:
            wrong.append(pin)
    except metadata.PackageNotFoundError:
        wrong.append(pin)
print(" ".join(wrong))
EOF
)
if [[ -n "$wrong" ]]; then
    log "installing $wrong (--no-deps)"
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install -q --no-deps $wrong >&2
fi
echo "$VENV"
