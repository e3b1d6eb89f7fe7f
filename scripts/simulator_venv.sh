#!/usr/bin/env bash
# Build (once) or reuse the cached venv of a heavy simulator's test tier.
#
# Heavy simulators (mjlab on MuJoCo Warp, Brax / MuJoCo Playground, ManiSkill3) make
# venvs of several GB with pinned dependency trees of their own, so each lives OUTSIDE
# the clone, in a cache folder keyed by its pinned versions, and is reused across runs:
#
#     ${GPU_ENVS_CACHE:-$HOME/.cache/gpu_envs}/<label>-<hash of the pins>-<python tag>
#     e.g. ~/.cache/gpu_envs/mjlab-1.6.0-3f9c2a1b-py311
#
# Changing a pin (or the Python version) changes the hash, hence the folder: a stale
# venv is never reused. The marker `.complete` in the folder says the (slow) install
# finished; without it the install is (re)run. A lock file (flock) serialises builds of
# one venv, so two test runs started together build it once. pytest and this checkout
# (editable, --no-deps: the simulator's own torch must stay) are checked on every call
# and installed when missing, which takes a few seconds.
#
# Usage (prints the venv path on the LAST line of stdout; logs go to stderr):
#
#     VENV=$(scripts/simulator_venv.sh mjlab | tail -n 1)
#     PYTHONPATH=$PWD "$VENV/bin/python" -m pytest tests/mjlab -q
#     scripts/simulator_venv.sh mjlab --path    # only print where it is (or would be)
#
# Environment: GPU_ENVS_CACHE (cache root), GPU_ENVS_<NAME>_VENV (use this folder
# instead, e.g. GPU_ENVS_MJLAB_VENV), PYTHON311 / PYTHON312 (the interpreter to build with).
#
# Adding a simulator: write a `spec_<name>` function below that sets
#   LABEL       first part of the folder name (the simulator and its version),
#   PY_VERSION  the Python it needs ("3.11": the CPU torch 2.13.0 wheel CI caches),
#   PINS        every version that matters, as pip requirements (they become a
#               constraints file, so transitive dependencies are pinned too),
#   PACKAGES    what to install (names; versions come from PINS),
# and, if the install needs more than `pip install PACKAGES`, a `post_install_<name>`
# function (run inside the venv build, before `.complete` is written).
set -euo pipefail

# ------------------------------------------------------------------ the simulators
spec_mjlab() {
    LABEL=mjlab-1.6.0
    PY_VERSION=3.11
    # torch first: a bare `torch` request would pull a multi-GB CUDA build. The others are
    # what `pip install mjlab==1.6.0` resolved to here (mjlab pins rsl-rl-lib itself), plus
    # gpu_envs' own dependencies at the versions constraints-ci.txt gives the main suite.
    PINS=(
        torch==2.13.0
        torchvision==0.28.0
        mjlab==1.6.0
        mujoco==3.11.0
        mujoco-warp==3.11.0
        warp-lang==1.19.0
        rsl-rl-lib==5.4.2
        tensordict==0.14.3
        gymnasium==1.4.0
        numpy==2.4.6
        pytest==9.2.0
    )
    PACKAGES=(mjlab gymnasium tensordict pytest)
}

# ------------------------------------------------------------------ the machinery
NAME=${1:-}
if [[ -z "$NAME" || "$(type -t "spec_$NAME")" != "function" ]]; then
    known=$(declare -F | awk '{print $3}' | sed -n 's/^spec_//p' | tr '\n' ' ')
    echo "usage: $0 NAME   (NAME one of: ${known% })" >&2
    exit 2
fi
"spec_$NAME"

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${GPU_ENVS_CACHE:-$HOME/.cache/gpu_envs}
PY_TAG=py${PY_VERSION/./}
PIN_HASH=$(printf '%s\n' "$PY_VERSION" "${PINS[@]}" | sha256sum | cut -c1-8)
override_var=GPU_ENVS_$(echo "$NAME" | tr '[:lower:]-' '[:upper:]_')_VENV
VENV=${!override_var:-$CACHE/$LABEL-$PIN_HASH-$PY_TAG}
LOCK=$CACHE/$LABEL-$PIN_HASH-$PY_TAG.lock

log() { echo "[simulator_venv $NAME] $*" >&2; }

if [[ "${2:-}" == "--path" ]]; then  # where the venv is (or would be), without building anything
    echo "$VENV"
    exit 0
fi

find_python() {
    # The interpreter for PY_VERSION: $PYTHON3XX, pythonX.Y on PATH (which may be a pyenv
    # shim that only works where that version is selected), pyenv's installs, system ones.
    local version=$1 override_name candidate
    override_name=PYTHON${version/./}
    if [[ -n "${!override_name:-}" ]] && "${!override_name}" --version >/dev/null 2>&1; then
        echo "${!override_name}"; return 0
    fi
    if "python$version" --version >/dev/null 2>&1; then
        command -v "python$version"; return 0
    fi
    if command -v pyenv >/dev/null 2>&1; then
        for candidate in $(pyenv versions --bare 2>/dev/null | grep -E "^${version//./\\.}(\\.|$)" | sort -V -r); do
            if PYENV_VERSION=$candidate pyenv which "python$version" >/dev/null 2>&1; then
                PYENV_VERSION=$candidate pyenv which "python$version"; return 0
            fi
        done
    fi
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version"*/bin/python"$version" \
        /usr/bin/python"$version" /usr/local/bin/python"$version"; do
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

pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
if [[ ! -f "$VENV/.complete" ]]; then
    PY=$(find_python "$PY_VERSION") || {
        log "no working Python $PY_VERSION found: install one (e.g. pyenv install $PY_VERSION) or set PYTHON${PY_VERSION/./}=/path/to/python$PY_VERSION."
        exit 1
    }
    log "building $VENV with $PY (${PINS[*]})"
    started=$SECONDS
    [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
    printf '%s\n' "${PINS[@]}" >"$VENV/constraints.txt"
    "${pip[@]}" install -U pip wheel setuptools >&2
    # torch alone first, from the constraints: the pinned CPU build, never a CUDA one.
    "${pip[@]}" install -c "$VENV/constraints.txt" torch >&2
    "${pip[@]}" install -c "$VENV/constraints.txt" "${PACKAGES[@]}" >&2
    if [[ "$(type -t "post_install_$NAME")" == "function" ]]; then
        "post_install_$NAME"
    fi
    touch "$VENV/.complete"
    log "built in $((SECONDS - started)) s ($(du -sh "$VENV" | cut -f1))"
fi

# pytest and this checkout, on every call (another checkout may have installed itself).
# `--no-deps`: gpu_envs' dependencies come from the pins above, never re-resolved by pip.
if ! "$VENV/bin/python" -c "import pytest" >/dev/null 2>&1; then
    log "installing pytest"
    "${pip[@]}" install -c "$VENV/constraints.txt" pytest >&2
fi
# find_spec locates the package without importing it (and torch with it); run from the
# cache folder so that a gpu_envs/ in the current directory is not the one found.
installed_from=$(cd "$CACHE" && "$VENV/bin/python" -c "import importlib.util as u, os; s = u.find_spec('gpu_envs'); print(os.path.dirname(os.path.dirname(s.origin)))" 2>/dev/null || true)
if [[ "$installed_from" != "$REPO" ]]; then
    log "installing $REPO (editable, --no-deps)"
    (cd "$CACHE" && "${pip[@]}" install --no-deps -e "$REPO" >&2)
fi
echo "$VENV"
