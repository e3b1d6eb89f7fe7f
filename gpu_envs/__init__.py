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

from gpu_envs.devices import default_device
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
    SpecError,
    UnknownBackendError,
    UnknownEnvError,
    UnsupportedSpaceError,
)
from gpu_envs.registry import MAKE_ORDER, WRAP_ORDER, get_plugin, plugins

__version__ = "0.1.0"

# gymnasium.make_vec("gpu_envs/CartPole-v1", ...) builds the built-in envs once gpu_envs is imported
register_gymnasium_ids()

# Keyword arguments consumed by BatchedEnv itself; the rest go to the backend.
_ENV_KWARGS = ("missing_obs_value", "validate")

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
    "SpecError",
    "UnknownBackendError",
    "UnknownEnvError",
    "UnsupportedSpaceError",
    "available_envs",
    "default_device",
    "make",
    "wrap",
    "wrap_ray",
]


def _split_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    env_kwargs = {k: kwargs.pop(k) for k in _ENV_KWARGS if k in kwargs}
    return env_kwargs, kwargs


def available_envs() -> dict[str, list[str]]:
    """Env ids ``make`` accepts, per installed backend (``{"torch": [...], ...}``)."""
    return {p.name: p.env_ids() for p in plugins(MAKE_ORDER) if p.available()}


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
    ``seed`` seeds the first ``reset()``. Other keyword arguments go to the backend
    (e.g. ``expose_final_obs`` for built-in envs), except ``missing_obs_value`` and
    ``validate``, which configure the :class:`BatchedEnv`.

    ``distributed=True`` (under torchrun, see :mod:`gpu_envs.distributed`) builds this
    process's shard: ``num_envs`` envs per process, on ``cuda:LOCAL_RANK`` (or the CPU)
    unless ``device`` is given, env ``i`` seeded as global env ``rank * num_envs + i``;
    ``env.rank`` and ``env.world_size`` say which shard. Outside a torchrun job it
    changes nothing.

    Example::

        env = gpu_envs.make("Pendulum-v1", num_envs=1024, device="cpu", seed=0)
    """
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise InvalidArgumentError(f"num_envs must be an int >= 1, got {num_envs!r}.")
    shard = None
    if distributed:
        from gpu_envs.distributed import init

        shard = init()
        if device is None and shard.is_distributed:
            device = shard.device
    device = torch.device(device) if device is not None else default_device()
    env_kwargs, backend_kwargs = _split_kwargs(dict(kwargs))
    candidates = plugins(MAKE_ORDER) if backend == "auto" else [_installed(get_plugin(backend))]
    for plugin in candidates:
        if plugin.available() and plugin.can_make(env_id):
            if shard is not None and shard.is_distributed:
                backend_kwargs = _shard_kwargs(plugin, backend_kwargs, shard.env_index_offset(num_envs))
            raw = plugin.make(env_id, num_envs, device, **backend_kwargs)
            try:
                env = BatchedEnv(raw, seed=seed, **env_kwargs)
            except BaseException:
                raw.close()  # a backend with processes (async gymnasium, Ray) leaves none behind
                raise
            if shard is not None:
                env.rank, env.world_size = shard.rank, shard.world_size
            return env
    known = "; ".join(
        f"{name}: {', '.join(ids[:12])}{' ...' if len(ids) > 12 else ''}" for name, ids in available_envs().items() if ids
    )
    where = "any backend" if backend == "auto" else f"backend {backend!r}"
    raise UnknownEnvError(f"unknown env id {env_id!r} for {where}. Available ids -- {known}. `gpu-envs list` prints them all.")


def _installed(plugin: Any) -> Any:
    """``plugin``, or a clear error when the library behind it is not installed."""
    if not plugin.available():
        extra = getattr(plugin, "extra", None)  # the pyproject extra that installs it, where a plugin names one
        how = f": pip install 'gpu-envs[{extra}]'" if extra else ""
        raise MissingComponentError(f"the {plugin.name} backend needs a library that is not installed{how}.")
    return plugin


def _shard_kwargs(plugin: Any, backend_kwargs: dict[str, Any], offset: int) -> dict[str, Any]:
    """The backend's keyword arguments with this shard's ``env_index_offset`` added."""
    if not getattr(plugin, "accepts_env_index_offset", False):
        raise InvalidArgumentError(
            f"the {plugin.name} backend cannot give each process its own seed stream (it takes no "
            "env_index_offset), so make(..., distributed=True) cannot shard it. Use the torch (built-in) or "
            "gymnasium backend, or build the env yourself on every rank with a seed of its own."
        )
    return {**backend_kwargs, "env_index_offset": backend_kwargs.get("env_index_offset", 0) + offset}


def wrap(obj: Any, device: torch.device | str | None = None, backend: str = "auto", **kwargs: Any) -> BatchedEnv:
    """Put an existing env object behind a :class:`BatchedEnv`, detecting its backend.

    Accepts torch vector envs (see ``gpu_envs.backends.torch``), gymnasium ``Env`` and
    ``VectorEnv``, Isaac Lab envs, JAX envs, and the envs of other libraries:
    Stable-Baselines3 ``VecEnv`` s, legacy ``gym`` 0.26 envs, MO-Gymnasium envs (vector
    rewards) and minigrid envs (``mission=``, ``mission_length=``); see their modules in
    ``gpu_envs.backends``. ``device=None`` keeps a device-resident env where it lives
    (CPU backends default to CUDA when available).

    Example::

        env = gpu_envs.wrap(MyTorchVectorEnv(num_envs=4096, device="cuda"))
    """
    env_kwargs, backend_kwargs = _split_kwargs(dict(kwargs))
    candidates = plugins(WRAP_ORDER) if backend == "auto" else [get_plugin(backend)]
    for plugin in candidates:
        if plugin.detect(obj):
            return BatchedEnv(plugin.wrap(obj, None if device is None else torch.device(device), **backend_kwargs), **env_kwargs)
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
    ``env_index_offset``, plus ``missing_obs_value``/``validate``. Needs
    ``pip install 'gpu-envs[ray]'``; see :mod:`gpu_envs.backends.ray`.

    Example::

        env = gpu_envs.wrap_ray(lambda: gym.make("Pendulum-v1"), num_envs=64, num_workers=8, seed=0)
    """
    from gpu_envs.backends.ray import wrap_env_fns

    _installed(get_plugin("ray"))
    env_kwargs, backend_kwargs = _split_kwargs(dict(kwargs))
    raw = wrap_env_fns(env_fn, num_envs, None if device is None else torch.device(device), num_workers=num_workers, **backend_kwargs)
    try:
        return BatchedEnv(raw, seed=seed, **env_kwargs)
    except BaseException:
        raw.close()
        raise
