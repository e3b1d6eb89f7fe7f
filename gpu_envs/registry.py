"""Which backend makes or wraps what: the table behind ``make`` and ``wrap``.

Each backend module exposes a ``PLUGIN`` object with ``name``, ``available()``,
``env_ids()``, ``can_make(env_id)``, ``make(env_id, num_envs, device, **kw)``,
``detect(obj)`` and ``wrap(obj, device, **kw)``, and ``accepts_env_index_offset = True``
when its ``make`` takes ``env_index_offset=k`` (env ``i`` gets the seed stream of global
env ``k + i``: what ``make(..., distributed=True)`` needs to shard seeds across
processes). Modules are imported lazily, so an optional dependency (isaaclab, mjlab, jax,
stable_baselines3, gym, mo_gymnasium, minigrid, ray) is only imported when its backend
is used: detectors look at class modules and attributes.

Which backend owns an env id is decided here, not by the backends: a plugin that alone
may make some ids -- Isaac Lab tasks and gymnasium's functional JAX envs are listed in
gymnasium's registry too, but stepped as plain gymnasium envs their transitions would be
wrong, or they would not build -- says so with ``claims(env_id)``; :func:`may_make`
lets no other backend make a claimed id (:data:`CLAIMING` lists who is asked), so no
backend module imports another to find out.

Example::

    plugin = get_plugin("gymnasium")
    backend = plugin.make("CartPole-v1", num_envs=8, device=torch.device("cpu"))
    may_make(plugin, "Isaac-Cartpole-Direct-v0")   # False: the isaaclab backend owns it
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from gpu_envs.contract.errors import UnknownBackendError
from gpu_envs.contract.protocols import BackendPlugin, OptionalPluginHooks

# make(backend="auto") tries these in order: built-in torch envs first; jax before gymnasium
# because gymnasium's registry also lists its functional JAX envs (phys2d/...), which only
# the jax backend steps exactly (it declines every other gymnasium id); mo_gymnasium and
# minigrid before gymnasium because their ids are in gymnasium's registry too, but need
# their vector rewards / text missions handled (ManiSkill's, once mani_skill is imported, need its
# vector env: the bare one batches behind a single-env interface); envpool last: it makes the ids no other backend
# does (Pong-v5), while ids gymnasium also has keep gymnasium's version unless backend="envpool".
MAKE_ORDER = (
    "torch",
    "jax",
    "mo_gymnasium",
    "minigrid",
    "maniskill",
    "gymnasium",
    "isaaclab",
    "mjlab",
    "envpool",
    "vmas",
    "pettingzoo",
)
# wrap() asks these in order; the most specific detectors come first: SB3 VecEnvs and legacy
# gym envs before torch (a gym 0.26 VectorEnv has the shape of the torch protocol), MO and
# minigrid envs before gymnasium (they are gymnasium envs with a vector reward / a text mission);
# EnvPool pools before gymnasium too (gymnasium VectorEnvs that reset on the next step), ManiSkill's
# envs before torch and gymnasium (its vector env has the torch protocol's shape, its bare env gymnasium's).
# mjlab's RL envs are recognised by their class (like Isaac Lab's), before torch; rsl_rl-style VecEnvs
# (legged_gym, Genesis tasks) by their interface, before torch too (they have no gymnasium spaces).
# "foreign" first of all: envs that have a backend's shape but an auto-reset none handles (PufferLib's
# vector envs, pre-0.26 gym vector envs), refused with the fix before a backend claims them by their shape.
WRAP_ORDER = (
    "foreign",
    "isaaclab",
    "mjlab",
    "vmas",
    "pettingzoo",
    "jax",
    "envpool",
    "maniskill",
    "sb3",
    "legacy_gym",
    "rsl_rl_vec",
    "torch",
    "mo_gymnasium",
    "minigrid",
    "gymnasium",
)

# Backends whose plugin claims ids that other backends must not make (``claims(env_id)``).
CLAIMING = ("jax", "isaaclab")

# the hooks a plugin may leave out (plugin_hook supplies the default)
OPTIONAL_HOOKS = frozenset(
    name for name in (*OptionalPluginHooks.__annotations__, *vars(OptionalPluginHooks)) if not name.startswith("_")
)

_MODULES = {
    "torch": "gpu_envs.backends.torch_envs",
    "gymnasium": "gpu_envs.backends.gymnasium_envs",
    "isaaclab": "gpu_envs.backends.isaaclab",
    "jax": "gpu_envs.backends.jax",
    "sb3": "gpu_envs.backends.sb3",
    "legacy_gym": "gpu_envs.backends.legacy_gym",
    "mo_gymnasium": "gpu_envs.backends.mo_gymnasium",
    "minigrid": "gpu_envs.backends.minigrid",
    "envpool": "gpu_envs.backends.envpool",
    "maniskill": "gpu_envs.backends.maniskill",
    "mjlab": "gpu_envs.backends.mjlab",
    "vmas": "gpu_envs.backends.vmas",  # agent groups: VMAS's vectorised multi-agent scenarios
    "pettingzoo": "gpu_envs.backends.pettingzoo",  # agent groups: PettingZoo ParallelEnvs, N of them on the CPU
    "rsl_rl_vec": "gpu_envs.backends.rsl_rl_vec",  # wrap only: rsl_rl-style VecEnvs, by their interface
    "foreign": "gpu_envs.backends.foreign",  # wrap only: recognises and refuses (see the module)
    "ray": "gpu_envs.backends.ray",  # by name only: make(id, backend="ray"), gpu_envs.wrap_ray
}


# What to install for a backend, or for a package an env id imports (ModuleNotFoundError.name).
INSTALL_HINTS = {
    "jax": "pip install '.[jax]' in the gpu_envs clone",
    "jaxlib": "pip install '.[jax]' in the gpu_envs clone",
    "flax": "pip install '.[jax]' in the gpu_envs clone",
    "gymnax": "pip install '.[jax]' in the gpu_envs clone && pip install --no-deps gymnax",
    "isaaclab": "pip install '.[isaaclab]' in the gpu_envs clone (Isaac Lab 3.0 needs Python 3.12; see docker/README.md)",
    "isaaclab_tasks": "pip install '.[isaaclab]' in the gpu_envs clone (Isaac Lab 3.0 needs Python 3.12; see docker/README.md)",
    "mjlab": "pip install '.[mjlab]' in the gpu_envs clone (or the tested venv: scripts/simulator_venv.sh mjlab)",
    "cupy": "pip install '.[cupy]' in the gpu_envs clone",
    "torchrl": "pip install '.[torchrl]' in the gpu_envs clone",
    "ray": "pip install '.[ray]' in the gpu_envs clone",
    "vmas": "pip install '.[vmas]' in the gpu_envs clone",
    "pettingzoo": "pip install '.[pettingzoo]' in the gpu_envs clone",
    "mpe2": "pip install '.[pettingzoo]' in the gpu_envs clone (it brings mpe2)",
    "envpool": "pip install '.[envpool]' in the gpu_envs clone",
    "maniskill": "pip install mani-skill (scripts/simulator_venv.sh maniskill builds a venv with a CPU Vulkan driver)",
    "mani_skill": "pip install mani-skill (scripts/simulator_venv.sh maniskill builds a venv with a CPU Vulkan driver)",
    "brax": "pip install brax (scripts/simulator_venv.sh brax builds a venv with Brax and MuJoCo Playground)",
    "mujoco_playground": "pip install playground (scripts/simulator_venv.sh brax builds a venv with Brax and MuJoCo Playground)",
    "jaxmarl": "pip install jaxmarl in a venv of its own: its gymnax caps gymnasium < 1.4 (scripts/simulator_venv.sh jaxmarl builds one)",
    "Box2D": "pip install 'gymnasium[box2d]'",
    "mujoco": "pip install 'gymnasium[mujoco]'",
    "ale_py": "pip install 'gymnasium[atari]'",
    "pygame": "pip install 'gymnasium[classic-control]'",
}


def install_hint(name: str) -> str:
    """The install command for backend or package ``name`` (``pip install <name>`` when unknown)."""
    return INSTALL_HINTS.get(name, f"pip install {name}")


def backend_names() -> list[str]:
    """Names of every backend this version knows (installed or not)."""
    return [name for name in _MODULES if _module_exists(name)]


def _module_exists(name: str) -> bool:
    return importlib.util.find_spec(_MODULES[name]) is not None


def get_plugin(name: str) -> BackendPlugin:
    """The plugin of backend ``name``; a clear error listing the known names otherwise."""
    if name not in _MODULES or not _module_exists(name):
        raise UnknownBackendError(
            f"unknown backend {name!r}; available backends: {', '.join(backend_names())} (or 'auto')."
        )
    return importlib.import_module(_MODULES[name]).PLUGIN


def plugin_hook(plugin: BackendPlugin, hook: str, default: Any = None) -> Any:
    """One of a plugin's optional hooks (:class:`~gpu_envs.contract.protocols.OptionalPluginHooks`), or ``default``.

    The one place the registry's callers look optional hooks up by name: a plugin
    that lacks ``make_kwargs`` (say) gets the default, never an ``AttributeError``.

    Example::

        plugin_hook(get_plugin("torch"), "accepts_env_index_offset", False)   # True
    """
    if hook not in OPTIONAL_HOOKS:
        raise ValueError(f"{hook!r} is not an optional plugin hook; they are {sorted(OPTIONAL_HOOKS)}.")
    return getattr(plugin, hook, default)


def plugins(order: tuple[str, ...]) -> list[BackendPlugin]:
    """The installed plugins among ``order``, in that order."""
    return [get_plugin(name) for name in order if name in _MODULES and _module_exists(name)]


def owner_of(env_id: str) -> str | None:
    """The backend that alone may make ``env_id`` (its plugin claims it), or None."""
    for name in CLAIMING:
        claims = plugin_hook(get_plugin(name), "claims") if name in _MODULES and _module_exists(name) else None
        if callable(claims) and claims(env_id):
            return name
    return None


def may_make(plugin: Any, env_id: str) -> bool:
    """True if ``plugin`` can make ``env_id`` and no other backend owns the id."""
    if not plugin.can_make(env_id):
        return False
    owner = owner_of(env_id)
    return owner is None or owner == plugin.name
