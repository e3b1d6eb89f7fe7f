"""The Ray backend's registry entry (``make(id, backend="ray")``) and :func:`wrap_env_fns` (``wrap_ray``).

``make`` splits ``num_envs`` gymnasium envs of a registered id among ``num_workers``
actors (each a SAME_STEP ``SyncVectorEnv`` built by the gymnasium backend's own
``make``, so ``frame_skip``, ``from_pixels``, ``one_hot_actions``, env keyword
arguments... all work); :func:`wrap_env_fns` does the same for envs built by your
own functions. ``make(backend="auto")`` and ``wrap`` never pick Ray: it is asked for
by name.

Example::

    backend = PLUGIN.make("Pendulum-v1", num_envs=16, device=torch.device("cpu"), num_workers=2, frame_skip=50)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from gymnasium.envs.registration import load_env_creator

from gpu_envs.backends.gymnasium_envs import PLUGIN as GYMNASIUM
from gpu_envs.backends.gymnasium_envs.plugin import check_sub_env_args
from gpu_envs.backends.ray.backend import RayBackend, RayOptions, split_rows
from gpu_envs.backends.ray.worker import make_share, registering, wrap_share
from gpu_envs.contract.errors import InvalidArgumentError, NotAnEnvError
from gpu_envs.utils.arguments import as_int

_OWN_GYMNASIUM_KWARGS = ("vectorization", "num_workers")  # the gymnasium backend's, meaningless inside a worker


def _default_workers(num_envs: int) -> int:
    return max(1, min(num_envs, os.cpu_count() or 1))


def _check_offset(env_index_offset: Any) -> int:
    return as_int(env_index_offset, "env_index_offset", minimum=0)


class RayPlugin:
    """Registry entry: gymnasium ids spread over Ray actors (asked for by name only)."""

    name = "ray"
    accepts_env_index_offset = True

    def available(self) -> bool:
        return importlib.util.find_spec("ray") is not None

    def env_ids(self) -> list[str]:
        return GYMNASIUM.env_ids()

    def can_make(self, env_id: str) -> bool:
        return GYMNASIUM.can_make(env_id)

    def make(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | None,
        *,
        num_workers: int | None = None,
        env_index_offset: int = 0,
        **kwargs: Any,
    ) -> RayBackend:
        """``num_envs`` envs of a gymnasium id over ``num_workers`` actors (default: one per local core).

        ``kwargs``: the :class:`RayOptions`, the rest goes to the gymnasium backend's ``make``.
        """
        options = RayOptions.take(kwargs)
        clash = sorted(set(kwargs) & set(_OWN_GYMNASIUM_KWARGS))
        if clash:
            raise InvalidArgumentError(
                f"backend='ray' runs a SyncVectorEnv in each Ray worker, so {clash} do not apply; "
                "num_workers= sets the number of Ray workers."
            )
        offset = _check_offset(env_index_offset)
        check_sub_env_args(
            kwargs.get("vector_kwargs"), kwargs.get("wrappers"), kwargs.get("frame_skip", 1)
        )  # before Ray
        return _backend(
            num_envs, num_workers, offset, device, options,
            lambda start, size, first: functools.partial(make_share, env_id, size, first, kwargs),
        )  # fmt: skip

    def detect(self, obj: Any) -> bool:
        # asked only for wrap(obj, backend="ray") (Ray is not in wrap()'s automatic order): answer
        # for gymnasium envs, so that wrap() explains that wrap_ray is the way
        return GYMNASIUM.detect(obj)

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Any:
        raise NotAnEnvError(
            "the ray backend builds its envs inside its workers, so it cannot wrap an existing env object: "
            "use gpu_envs.wrap_ray(env_fn, num_envs=N, num_workers=W) with a function that builds one env."
        )


def wrap_env_fns(
    env_fns: Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]],
    num_envs: int | None,
    device: torch.device | str | None,
    *,
    num_workers: int | None = None,
    autoreset_mode: Any = gym.vector.AutoresetMode.SAME_STEP,
    one_hot_actions: bool = False,
    info_spec: Any = None,
    env_index_offset: int = 0,
    **options: Any,
) -> RayBackend:
    """A :class:`RayBackend` over envs built by ``env_fns`` (one function for all, or one per env).

    ``options``: the :class:`RayOptions` (``step_timeout``, ``address``, ...).
    """
    if callable(env_fns):
        if num_envs is None:
            raise InvalidArgumentError("wrap_ray(env_fn, num_envs=N) needs num_envs, an int >= 1; got None.")
        num_envs = as_int(num_envs, "wrap_ray(env_fn, num_envs=N): num_envs", minimum=1)
        fns = [env_fns] * num_envs
    elif isinstance(env_fns, Sequence) and env_fns and all(callable(f) for f in env_fns):
        fns = list(env_fns)
        if num_envs is not None and num_envs != len(fns):
            raise InvalidArgumentError(f"wrap_ray got {len(fns)} env functions but num_envs={num_envs}.")
    else:
        raise NotAnEnvError(
            "wrap_ray takes a function that builds one gymnasium env (called once per env), or a list of such "
            f"functions (one per env); got {type(env_fns).__name__}."
        )
    unknown = sorted(set(options) - {f.name for f in dataclasses.fields(RayOptions)})
    if unknown:
        raise InvalidArgumentError(
            f"wrap_ray got unknown keyword arguments {unknown}; it takes num_workers, autoreset_mode, one_hot_actions, "
            f"info_spec, env_index_offset, {', '.join(f.name for f in dataclasses.fields(RayOptions))}, "
            "missing_obs_value, validate and seed."
        )
    backend_kwargs = {"one_hot_actions": one_hot_actions, "info_spec": info_spec}
    return _backend(
        len(fns), num_workers, _check_offset(env_index_offset), device, RayOptions(**options),
        lambda start, size, first: functools.partial(wrap_share, fns[start : start + size], first, autoreset_mode, backend_kwargs),
    )  # fmt: skip


def _backend(
    num_envs: int,
    num_workers: int | None,
    offset: int,
    device: torch.device | str | None,
    options: RayOptions,
    builder: Callable[[int, int, int], Callable[[], Any]],
) -> RayBackend:
    """Split the rows among the workers: ``builder(first row, rows, global index of the first env)`` each."""
    sizes = split_rows(num_envs, _default_workers(num_envs) if num_workers is None else num_workers)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    specs = script_specs()
    builders = [
        functools.partial(registering, specs, builder(start, size, offset + start))
        for start, size in zip(starts, sizes, strict=True)
    ]
    return RayBackend(builders, sizes, device, options)


def script_specs() -> list[Any]:
    """The gymnasium ids the driver's script (``__main__``) registered, as specs a Ray worker can register.

    A worker imports modules, never the driver's script, so an id registered there is
    unknown in it. Entry points defined in the script travel by value (cloudpickle
    pickles ``__main__``'s classes and functions so); a ``"__main__:Name"`` string is
    resolved here first (the worker's ``__main__`` is not the driver's script). Ids of
    installed packages are found by the worker itself.
    """
    specs = []
    for spec in list(gym.registry.values()):
        entry = spec.entry_point
        if isinstance(entry, str) and entry.startswith("__main__:"):
            specs.append(dataclasses.replace(spec, entry_point=load_env_creator(entry)))
        elif callable(entry) and getattr(entry, "__module__", None) == "__main__":
            specs.append(spec)
    return specs


PLUGIN = RayPlugin()
