"""gpu_envs: batched RL environments as TensorDicts on the learner's device.

Two entry points pick the backend for you::

    import gpu_envs
    env = gpu_envs.make("CartPole-v1", num_envs=4096)         # built-in torch env
    env = gpu_envs.wrap(my_vector_env)                         # any supported env object
    td = env.reset(seed=0)
    traj = env.rollout(steps=64)                               # TensorDict [N, T]
"""

from __future__ import annotations

from typing import Any

import torch

from gpu_envs.arguments import as_bool, as_int, as_seed
from gpu_envs.building import MIN_BYTES_PER_ENV, batched, build, check_kwargs, env_options, make_plugin, require_plugin
from gpu_envs.devices import default_device, resolve_device
from gpu_envs.env import BatchedEnv
from gpu_envs.envs.gymnasium_ids import register_gymnasium_ids
from gpu_envs.errors import (
    ActionError,
    AutoresetModeError,
    BackendError,
    ClosedEnvError,
    DeviceMismatchError,
    GpuEnvsError,
    InterruptedStepError,
    InvalidArgumentError,
    MissingComponentError,
    NotAnEnvError,
    ObservationError,
    ResetMaskError,
    ResetNeededError,
    RolloutError,
    SpecError,
    StepTimeoutError,
    UnknownBackendError,
    UnknownEnvError,
    UnsupportedSpaceError,
)
from gpu_envs.memory import ensure_fits
from gpu_envs.registry import MAKE_ORDER, WRAP_ORDER, plugins
from gpu_envs.watchdog import watchdog

__version__ = "0.1.0"

# gymnasium.make_vec("gpu_envs/CartPole-v1", ...) builds the built-in envs once gpu_envs is imported
register_gymnasium_ids()

__all__ = [
    "ActionError",
    "AutoresetModeError",
    "BackendError",
    "BatchedEnv",
    "ClosedEnvError",
    "DeviceMismatchError",
    "GpuEnvsError",
    "InterruptedStepError",
    "InvalidArgumentError",
    "MissingComponentError",
    "NotAnEnvError",
    "ObservationError",
    "ResetMaskError",
    "ResetNeededError",
    "RolloutError",
    "SpecError",
    "StepTimeoutError",
    "UnknownBackendError",
    "UnknownEnvError",
    "UnsupportedSpaceError",
    "available_envs",
    "default_device",
    "make",
    "watchdog",
    "wrap",
    "wrap_ray",
]


def available_envs() -> dict[str, list[str]]:
    """Env ids ``make`` accepts, per installed backend (``{"torch": [...], ...}``)."""
    return {p.name: p.env_ids() for p in plugins(MAKE_ORDER) if p.available()}


def _backend_name(backend: Any) -> str:
    if not isinstance(backend, str):
        raise InvalidArgumentError(f"backend must be a backend name such as 'torch' or 'gymnasium' (or 'auto'), got {type(backend).__name__}.")
    return backend


def make(
    env_id: str,
    num_envs: int = 1,
    device: torch.device | str | None = None,
    backend: str = "auto",
    seed: int | None = None,
    *,
    distributed: bool = False,
    **kwargs: Any,
) -> BatchedEnv:
    """Build ``num_envs`` copies of ``env_id`` behind a :class:`BatchedEnv`.

    ``backend="auto"`` prefers a built-in torch implementation of the id, then
    gymnasium's registry, then Isaac Lab's. ``device=None`` means CUDA when available.
    ``seed`` (an int >= 0) seeds the first ``reset()``. Other keyword arguments go to the
    backend (e.g. ``expose_final_obs`` and ``max_episode_steps`` for built-in envs;
    ``vectorization``, ``num_workers``, ``step_timeout`` for gymnasium), except
    ``missing_obs_value``, ``validate`` and ``watchdog_s``, which configure the
    :class:`BatchedEnv`. Every argument is checked before anything is built: a bad
    one raises a :class:`GpuEnvsError` naming it (unknown keyword arguments list the
    accepted ones; a backend whose library is missing names the ``pip install``;
    ``num_envs`` that cannot fit in the device's memory is refused up front).

    ``distributed=True`` (under torchrun, see :mod:`gpu_envs.distributed`) builds this
    process's shard: ``num_envs`` envs per process, on ``cuda:LOCAL_RANK`` (or the CPU)
    unless ``device`` is given, env ``i`` seeded as global env ``rank * num_envs + i``;
    ``env.rank`` and ``env.world_size`` say which shard. Outside a torchrun job it
    changes nothing.

    Example::

        env = gpu_envs.make("Pendulum-v1", num_envs=1024, device="cpu", seed=0)
    """
    if not isinstance(env_id, str) or not env_id:
        raise InvalidArgumentError(
            f"env_id must be an env id string such as 'CartPole-v1' (`gpu-envs list` prints them), got {env_id!r}; "
            "to put an env object behind a BatchedEnv, use gpu_envs.wrap(obj)."
        )
    num_envs = as_int(num_envs, "num_envs", minimum=1)
    shard = None
    if as_bool(distributed, "distributed"):
        from gpu_envs.distributed import init

        shard = init()
        if device is None and shard.is_distributed:
            device = shard.device
    device = resolve_device(device)
    seed = as_seed(seed)
    backend_kwargs = dict(kwargs)
    options = env_options(backend_kwargs)
    plugin = make_plugin(env_id, _backend_name(backend))
    check_kwargs(plugin, "make", env_id, backend_kwargs)
    if shard is not None and shard.is_distributed:
        backend_kwargs = _shard_kwargs(plugin, backend_kwargs, shard.env_index_offset(num_envs))
    per_env = getattr(plugin, "min_bytes_per_env", None)
    what = f"make({env_id!r}, num_envs={num_envs}, backend={plugin.name!r})"
    need = num_envs * (per_env(env_id) if callable(per_env) else MIN_BYTES_PER_ENV)
    ensure_fits(need, device, what, "Use fewer envs (num_envs), or a device with more memory.")
    raw = build(what, lambda: plugin.make(env_id, num_envs, device, **backend_kwargs), device)
    env = batched(raw, owned=True, seed=seed, options=options)
    if shard is not None:
        env.rank, env.world_size = shard.rank, shard.world_size
    return env


def _shard_kwargs(plugin: Any, backend_kwargs: dict[str, Any], offset: int) -> dict[str, Any]:
    """The backend's keyword arguments with this shard's ``env_index_offset`` added."""
    if not getattr(plugin, "accepts_env_index_offset", False):
        raise InvalidArgumentError(
            f"the {plugin.name} backend cannot give each process its own seed stream (it takes no "
            "env_index_offset), so make(..., distributed=True) cannot shard it. Use the torch (built-in) or "
            "gymnasium backend, or build the env yourself on every rank with a seed of its own."
        )
    return {**backend_kwargs, "env_index_offset": backend_kwargs.get("env_index_offset", 0) + offset}


def wrap(
    obj: Any,
    device: torch.device | str | None = None,
    backend: str = "auto",
    seed: int | None = None,
    **kwargs: Any,
) -> BatchedEnv:
    """Put an existing env object behind a :class:`BatchedEnv`, detecting its backend.

    Accepts torch vector envs (see ``gpu_envs.backends.torch``), gymnasium ``Env`` and
    ``VectorEnv``, Isaac Lab envs, JAX envs, and the envs of other libraries:
    Stable-Baselines3 ``VecEnv`` s, legacy ``gym`` 0.26 envs, MO-Gymnasium envs (vector
    rewards) and minigrid envs (``mission=``, ``mission_length=``); see their modules in
    ``gpu_envs.backends``. ``device=None`` keeps a device-resident env where it lives
    (CPU backends default to CUDA when available). ``seed`` seeds the first ``reset()``,
    as in :func:`make`; ``missing_obs_value``, ``validate`` and ``watchdog_s`` configure
    the :class:`BatchedEnv`, other keyword arguments go to the backend. One env object
    is driven by one BatchedEnv at a time.

    Example::

        env = gpu_envs.wrap(MyTorchVectorEnv(num_envs=4096, device="cuda"))
    """
    if isinstance(obj, BatchedEnv) or (hasattr(obj, "step_and_maybe_reset") and hasattr(obj, "root")):
        raise NotAnEnvError(
            f"wrap() was given a {type(obj).__name__}, which already has the BatchedEnv API; use it as it is "
            "(or TransformedEnv(env, ...) to add transforms)."
        )
    device = None if device is None else resolve_device(device)
    seed = as_seed(seed)
    backend_kwargs = dict(kwargs)
    options = env_options(backend_kwargs)
    candidates = plugins(WRAP_ORDER) if _backend_name(backend) == "auto" else [require_plugin(backend)]
    for plugin in candidates:
        if plugin.detect(obj):
            check_kwargs(plugin, "wrap", obj, backend_kwargs)
            what = f"wrap({type(obj).__name__}, backend={plugin.name!r})"
            raw = build(what, lambda plugin=plugin: plugin.wrap(obj, device, **backend_kwargs), device)
            return batched(raw, owned=False, seed=seed, options=options)
    raise NotAnEnvError(
        f"wrap() does not know how to wrap a {type(obj).__module__}.{type(obj).__name__}. It accepts "
        "gymnasium Env/VectorEnv objects, Isaac Lab envs, JAX envs, Stable-Baselines3 VecEnvs, gym 0.26 envs, "
        "MO-Gymnasium and minigrid envs, and torch vector envs "
        "(reset/step/num_envs/single_observation_space/single_action_space; see gpu_envs.backends.torch)."
    )


def wrap_ray(
    env_fn: Any,
    num_envs: int | None = None,
    num_workers: int | None = None,
    device: torch.device | str | None = None,
    seed: int | None = None,
    **kwargs: Any,
) -> BatchedEnv:
    """``num_envs`` envs built by ``env_fn`` on ``num_workers`` Ray actors, as one :class:`BatchedEnv`.

    ``env_fn`` builds one gymnasium env (it is called once per env, inside the actors;
    a list of ``num_envs`` functions builds env ``i`` with the ``i``-th). Each actor
    steps its share as a SAME_STEP ``SyncVectorEnv`` (``autoreset_mode=`` for another
    mode), all in parallel; the batch reaches ``device`` in one staged copy. Options:
    ``step_timeout`` (seconds, default 60), ``start_timeout``, ``cpus_per_worker``,
    ``address`` (a Ray cluster; default: the one this process uses, ``RAY_ADDRESS``,
    or a new local one), ``ray_init_kwargs``, ``one_hot_actions``, ``info_spec``,
    ``env_index_offset``, plus ``missing_obs_value``/``validate``/``watchdog_s``. Needs
    ``pip install 'gpu-envs[ray]'``; see :mod:`gpu_envs.backends.ray`.

    Example::

        env = gpu_envs.wrap_ray(lambda: gym.make("Pendulum-v1"), num_envs=64, num_workers=8, seed=0)
    """
    require_plugin("ray")
    from gpu_envs.backends.ray import wrap_env_fns

    device = None if device is None else resolve_device(device)
    seed = as_seed(seed)
    backend_kwargs = dict(kwargs)
    options = env_options(backend_kwargs)
    what = f"wrap_ray(num_envs={num_envs!r}, num_workers={num_workers!r})"
    raw = build(what, lambda: wrap_env_fns(env_fn, num_envs, device, num_workers=num_workers, **backend_kwargs), device)
    return batched(raw, owned=True, seed=seed, options=options)
