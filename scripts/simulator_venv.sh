#!/usr/bin/env bash
# Build (once) or reuse the cached venv of a heavy simulator's test tier.
#
# Heavy simulators (mjlab on MuJoCo Warp, Brax / MuJoCo Playground, ManiSkill3, Newton, JaxMARL, Genesis) make
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

spec_brax() {
    # Brax and MuJoCo Playground (the `playground` package: mujoco_playground) on JAX's CPU
    # build. They would install beside the main venv's jax 0.10.2 without changing a version,
    # but bring MuJoCo 4, MJX, Warp and an IPython stack, and importing them takes 20-30 s,
    # which `gpu-envs list` would pay in every main-suite test that lists ids.
    LABEL=brax-0.14.2-playground-0.2.0
    PY_VERSION=3.11
    PINS=(
        torch==2.13.0
        brax==0.14.2
        playground==0.2.0
        jax==0.10.2
        jaxlib==0.10.2
        flax==0.12.8
        optax==0.2.8
        orbax-checkpoint==0.12.8
        mujoco==4.0.0
        mujoco-mjx==3.17.0
        warp-lang==1.19.0
        ml_collections==1.1.0
        gym==0.26.2
        tensordict==0.14.3
        gymnasium==1.4.0
        numpy==2.4.6
        pytest==9.2.0
    )
    # gym: Brax's gym wrappers (brax.envs.wrappers.gym) import it; the tier checks they are refused
    PACKAGES=(brax playground gym gymnasium tensordict pytest)
}

spec_maniskill() {
    # ManiSkill3 with CPU physics (PhysX) and its SAPIEN renderer on a software Vulkan
    # device: SAPIEN builds every scene's visual materials on a rendering device, even
    # with render_backend="none", so without one no task can be built at all.
    LABEL=maniskill-3.0.1
    PY_VERSION=3.11
    PINS=(
        torch==2.13.0
        mani-skill==3.0.1
        sapien==3.0.3
        tensordict==0.14.3
        gymnasium==1.4.0
        numpy==2.4.6
        pytest==9.2.0
    )
    PACKAGES=(mani-skill gymnasium tensordict pytest)
}

spec_newton() {
    # Newton (the physics of Isaac Lab 3) alone: newton 1.8.0 needs only Warp; its optional
    # extras (viewers, importers, USD) stay out. Warp compiles its CPU kernels into
    # ~/.cache/warp on first use (~3 min idle), which later runs reuse.
    LABEL=newton-1.8.0
    PY_VERSION=3.11
    PINS=(
        torch==2.13.0
        newton==1.8.0
        warp-lang==1.19.0
        tensordict==0.14.3
        gymnasium==1.4.0
        numpy==2.4.6
        pytest==9.2.0
    )
    PACKAGES=(newton warp-lang gymnasium tensordict pytest)
}

spec_jaxmarl() {
    # JaxMARL (multi-agent JAX envs: MPE, SMAX, Overcooked, Hanabi, ...) on JAX's CPU build, at the
    # main venv's jax 0.10.2. It cannot go in the main venv: it needs gymnax, whose metadata caps
    # gymnasium < 1.4 (the main venv has 1.4.0), so pip resolves gymnasium 1.3.0 here. The others
    # are what `pip install jaxmarl==0.2.0` resolved to beside them; 1.8 GB in all.
    LABEL=jaxmarl-0.2.0
    PY_VERSION=3.11
    PINS=(
        torch==2.13.0
        jaxmarl==0.2.0
        jax==0.10.2
        jaxlib==0.10.2
        flax==0.12.8
        chex==0.1.92
        gymnax==1.0.1
        jaxtyping==0.3.11
        optax==0.2.8
        orbax-checkpoint==0.12.8
        ml_dtypes==0.7.0
        safetensors==0.8.0
        matplotlib==3.11.2
        seaborn==0.13.2
        pillow==13.0.0
        scipy==1.17.1
        tensordict==0.14.3
        six==1.17.0
        gymnasium==1.3.0
        numpy==2.4.6
        pytest==9.2.0
    )
    # six: gymnax imports it without declaring it (JaxMARL's wrappers import gymnax; the tier checks they are refused)
    PACKAGES=(jaxmarl six gymnasium tensordict pytest)
}

spec_genesis() {
    # Genesis (genesis-world) on its CPU backend: 4.1 GB, since it brings a mesh and rendering
    # stack (VTK, OpenCV, pymeshlab, libigl, ...). mujoco is held at 3.10.0, the version Genesis'
    # own test extra pins (it parses MJCF with it; pip alone would take mujoco 4). The others are
    # what `pip install genesis-world==1.4.5` resolved to beside them. Genesis compiles its
    # Quadrants kernels on first use (~30 s on 2 cores for the tier's cart-pole) into Quadrants'
    # offline cache, ~/.cache/quadrants (outside the clone, shared by every checkout and kept
    # between runs), written when the process exits; later runs only load them.
    LABEL=genesis-1.4.5
    PY_VERSION=3.11
    PINS=(
        torch==2.13.0
        genesis-world==1.4.5
        quadrants==1.3.3
        mujoco==3.10.0
        numba==0.68.1
        llvmlite==0.50.0
        scipy==1.17.1
        trimesh==5.2.0
        pydantic==2.14.4
        libigl==2.6.3
        coacd==1.0.14
        gs-madrona==0.0.10
        vtk==9.7.2
        opencv-python==5.1.0.95
        pymeshlab==2025.7.post1
        pillow==11.3.0
        tensordict==0.14.3
        gymnasium==1.4.0
        numpy==2.4.6
        pytest==9.2.0
    )
    PACKAGES=(genesis-world gymnasium tensordict pytest)
}

post_install_maniskill() {
    # Lavapipe (Mesa's CPU Vulkan driver) into $VENV/lavapipe, without touching the system:
    # SAPIEN needs VK_KHR_external_semaphore_fd, which lavapipe has from Mesa 24.3 on; Debian
    # 12 ships 22.3, its backports 25.x. The .deb is fetched with apt-get from the machine's
    # own Debian archive (its backports suite) through a private apt state folder and
    # unpacked with dpkg-deb; tests/maniskill/conftest.py points VK_ICD_FILENAMES at
    # $VENV/lavapipe/lvp_icd.json.
    local dir="$VENV/lavapipe" codename uri keyring deb lib
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [[ -z "$codename" ]] || ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
        log "no Debian apt here: install a Vulkan driver with VK_KHR_external_semaphore_fd (Mesa >= 24.3 lavapipe) and set VK_ICD_FILENAMES."
        return 1
    fi
    # the archive this machine already uses for $codename (deb822 or one-line sources)
    uri=$(awk -v s="$codename" '/^URIs:/{u=$2} /^Suites:/{for(i=2;i<=NF;i++) if($i==s) {print u; exit}}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    if [[ -z "$uri" ]]; then
        uri=$(awk -v s="$codename" '$1=="deb" && $3==s {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
    fi
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    if [[ -z "$uri" ]]; then
        log "found no apt source for $codename to take lavapipe's backport from."
        return 1
    fi
    rm -rf "$dir" && mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/root"
    printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\nSigned-By: %s\n' "$uri" "$codename" "$keyring" >"$dir/apt/backports.sources"
    local apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$dir/apt" -o "Dir::State::Lists=$dir/apt/lists"
        -o "Dir::Cache=$dir/apt/cache" -o "Debug::NoLocking=1")
    apt-get "${apt_opts[@]}" -qq update >&2
    (cd "$dir" && apt-get "${apt_opts[@]}" -qq download "mesa-vulkan-drivers/$codename-backports" >&2)
    deb=$(ls "$dir"/mesa-vulkan-drivers_*.deb)
    dpkg-deb -x "$deb" "$dir/root"
    lib=$(find "$dir/root" -name libvulkan_lvp.so | head -n 1)
    if [[ -z "$lib" ]]; then
        log "the mesa-vulkan-drivers package had no libvulkan_lvp.so"
        return 1
    fi
    printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s", "api_version": "1.3.0"}}\n' "$lib" >"$dir/lvp_icd.json"
    rm -rf "$dir/apt" "$deb"
    log "lavapipe $(basename "$deb" .deb) unpacked in $dir"
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
# gpu_envs' own dependencies (pyproject's `dependencies`), where the simulator did not bring them.
missing=$(cd "$CACHE" && "$VENV/bin/python" -c 'import importlib.util as u; print(" ".join(n for n in ["torch", "tensordict", "gymnasium", "numpy", "packaging", "rich"] if u.find_spec(n) is None))')
if [[ -n "$missing" ]]; then
    log "installing gpu_envs' missing dependencies: $missing"
    # shellcheck disable=SC2086
    "${pip[@]}" install -c "$REPO/constraints-ci.txt" $missing >&2
fi
echo "$VENV"
