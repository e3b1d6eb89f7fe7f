"""The gymnasium backend's registry entry: ``make`` by gymnasium id, ``wrap`` of Env/VectorEnv.

``make(env_id, num_envs, device, ...)`` builds the vector env itself, in the mode the
backend handles best: SAME_STEP auto-reset, ``copy=False`` (the backend copies each
result once anyway), without gymnasium's ``PassiveEnvChecker`` layer (it only checks the
first calls, then costs a wrapper call per sub-env step; ``BatchedEnv`` validates the
first step itself -- pass ``disable_env_checker=False`` to keep it), as a
``SyncVectorEnv``, or an ``AsyncVectorEnv`` with ``vectorization="async"`` or
``num_workers=k`` (one process per sub-env, as gymnasium does; at most ``k`` of them
stepping at once). Async workers are built with
:func:`~gpu_envs.backends.gymnasium_envs.workers.guarded_worker` (they ignore SIGINT and die
with this process) and every call waits at most ``step_timeout`` seconds (default 60;
``None``: no limit). ``wrap`` takes a gymnasium ``VectorEnv`` as it is, or a single
``Env`` as a batch of one.

Before building, ``make`` checks that the envs can fit: a lower bound of the memory
they need (a few KiB per Python env, a few MiB per worker process) against the memory
available, and, for async envs, the file descriptors and processes this user may
open, so ``num_envs=10**12`` is a clear error instead of a machine running out of memory.

Example::

    backend = PLUGIN.make("Acrobot-v1", num_envs=8, device=torch.device("cpu"), num_workers=4)
"""

from __future__ import annotations

import functools
import os
from typing import Any

import gymnasium as gym
import torch

from gpu_envs.backends.gymnasium_envs.backend import GymnasiumBackend, wrap_single
from gpu_envs.backends.gymnasium_envs.workers import DEFAULT_STEP_TIMEOUT, guarded_worker
from gpu_envs.backends.gymnasium_envs.wrappers import FrameSkip, add_pixels
from gpu_envs.backends.inbound import check_options
from gpu_envs.contract.errors import InvalidArgumentError, NotAnEnvError
from gpu_envs.contract.specs import Composite
from gpu_envs.utils.arguments import as_int, optional_seconds
from gpu_envs.utils.memory import ensure_fits

__all__ = ["PLUGIN", "GymnasiumPlugin", "check_sub_env_args"]

AutoresetMode = gym.vector.AutoresetMode
_BACKEND_KWARGS = ("one_hot_actions", "info_spec", "env_index_offset", "step_timeout")
# Lower bounds of what one sub-env costs (measured: ~3.8 KiB for a CartPole in a SyncVectorEnv,
# ~4 MiB of private memory and 3-4 file descriptors per AsyncVectorEnv worker).
SYNC_ENV_BYTES = 2 * 1024
ASYNC_WORKER_BYTES = 2 * 1024 * 1024
ASYNC_WORKER_FDS = 4


def check_capacity(env_id: str, num_envs: int, use_async: bool) -> None:
    """Refuse ``num_envs`` sub-envs that cannot fit in memory (or, async, in fd/process limits)."""
    what = f"make({env_id!r}, num_envs={num_envs}, backend='gymnasium'{', async' if use_async else ''})"
    per_env = ASYNC_WORKER_BYTES if use_async else SYNC_ENV_BYTES
    kind = "one Python env and one worker process per sub-env" if use_async else "one Python env per sub-env"
    ensure_fits(num_envs * per_env, torch.device("cpu"), what, f"The gymnasium backend builds {kind}: use fewer envs.")
    if not use_async:
        return
    try:
        import resource

        soft_fds = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        soft_procs = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        open_fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    except (ImportError, OSError, ValueError):
        return
    need = open_fds + ASYNC_WORKER_FDS * num_envs
    if soft_fds != resource.RLIM_INFINITY and need > soft_fds:
        raise InvalidArgumentError(
            f"{what} needs about {need} open file descriptors ({ASYNC_WORKER_FDS} per worker process), but this "
            f"process may open {soft_fds} (ulimit -n). Use fewer envs, vectorization='sync', or raise the limit."
        )
    if soft_procs != resource.RLIM_INFINITY and num_envs > soft_procs:
        raise InvalidArgumentError(
            f"{what} starts {num_envs} worker processes, more than this user may run ({soft_procs}, ulimit -u). "
            "Use fewer envs or vectorization='sync'."
        )


_PER_ENV_KWARGS = ("from_pixels", "pixels_only", "frame_skip")


def check_sub_env_args(vector_kwargs: Any, wrappers: Any, frame_skip: Any) -> int:
    """Refuse bad ``vector_kwargs``/``wrappers``/``frame_skip`` before anything is built; returns ``frame_skip``.

    The Ray backend asks this too, before it starts a cluster whose workers would refuse them.
    """
    if vector_kwargs is not None and not isinstance(vector_kwargs, dict):
        raise InvalidArgumentError(f"vector_kwargs must be a dict, got {type(vector_kwargs).__name__}.")
    if wrappers is not None and (not isinstance(wrappers, (list, tuple)) or not all(callable(w) for w in wrappers)):
        raise InvalidArgumentError("wrappers must be a list of callables env -> wrapped env (per sub-env).")
    return as_int(frame_skip, "frame_skip", minimum=1)


class GymnasiumPlugin:
    """Registry entry: gymnasium ids for ``make``, gymnasium Env/VectorEnv objects for ``wrap``."""

    name = "gymnasium"
    accepts_env_index_offset = True  # make(..., distributed=True) can shard its seeds

    def available(self) -> bool:
        return True

    def env_ids(self) -> list[str]:
        return sorted(gym.registry.keys())

    def can_make(self, env_id: str) -> bool:
        """Ids in gymnasium's registry (the registry keeps the ids other backends own from it:
        Isaac Lab tasks, functional JAX envs; see :func:`gpu_envs.registry.may_make`)."""
        return env_id in gym.registry

    def make(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | None,
        *,
        vectorization: str | None = None,
        num_workers: int | None = None,
        one_hot_actions: bool = False,
        info_spec: Composite | None = None,
        env_index_offset: int = 0,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int = 1,
        vector_kwargs: dict | None = None,
        wrappers: list | None = None,
        step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
        **env_kwargs: Any,
    ) -> Any:
        """Build ``num_envs`` copies of ``env_id`` as a SAME_STEP Sync/AsyncVectorEnv."""
        if vectorization not in (None, "sync", "async"):
            raise InvalidArgumentError(f"vectorization must be 'sync' or 'async', got {vectorization!r}.")
        if num_workers is not None:
            num_workers = as_int(num_workers, "num_workers", minimum=0, hint="(0: no worker processes)")
        frame_skip = check_sub_env_args(vector_kwargs, wrappers, frame_skip)
        step_timeout = optional_seconds(step_timeout, "step_timeout")  # before any worker starts
        if vectorization == "sync" and num_workers:
            raise InvalidArgumentError("num_workers needs worker processes: drop vectorization='sync' or num_workers.")
        if vectorization == "async" and num_workers == 0:
            raise InvalidArgumentError(
                "num_workers=0 means no worker processes, but vectorization='async' runs the sub-envs in them: drop "
                "num_workers (one process per sub-env), give num_workers=k (at most k stepping at once), or use "
                "vectorization='sync'."
            )
        use_async = vectorization == "async" or bool(num_workers)
        if not use_async and step_timeout != DEFAULT_STEP_TIMEOUT:
            raise InvalidArgumentError(
                "step_timeout applies to worker processes (vectorization='async'); a SyncVectorEnv steps in this "
                "process, where a hang cannot be interrupted safely: pass watchdog_s= for the stacks of a hung call."
            )
        per_env = list(wrappers or [])
        if frame_skip != 1:
            per_env.append(functools.partial(FrameSkip, skip=frame_skip))
        if from_pixels:
            env_kwargs.setdefault("render_mode", "rgb_array")
            per_env.append(functools.partial(add_pixels, pixels_only=pixels_only))
        # gymnasium's PassiveEnvChecker only checks the first calls, then stays as a pass-through layer in
        # every sub-env step; the BatchedEnv validates the first step itself.
        env_kwargs.setdefault("disable_env_checker", True)
        vkw = {"autoreset_mode": AutoresetMode.SAME_STEP, "copy": False, **(vector_kwargs or {})}
        if use_async:
            vkw.setdefault("worker", guarded_worker())  # ignores SIGINT, dies with this process
            if num_workers:
                vkw.setdefault("max_concurrency", num_workers)
        check_capacity(env_id, num_envs, use_async)
        try:
            venv = gym.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode="async" if use_async else "sync",
                vector_kwargs=vkw,
                wrappers=per_env,
                **env_kwargs,
            )
        except (TypeError, ValueError) as err:
            raise InvalidArgumentError(
                f"gymnasium could not build {env_id!r} with {sorted(k for k in env_kwargs if k != 'disable_env_checker')}: {err}. Pass only arguments the env "
                f"accepts, plus the gymnasium backend's own: {sorted(_BACKEND_KWARGS + _PER_ENV_KWARGS)}, "
                "vectorization, num_workers, vector_kwargs, wrappers."
            ) from err
        default_key = "pixels" if from_pixels and pixels_only else "observation"
        try:
            return GymnasiumBackend(
                venv,
                device,
                one_hot_actions=one_hot_actions,
                info_spec=info_spec,
                default_key=default_key,
                env_index_offset=env_index_offset,
                step_timeout=step_timeout,
            )
        except BaseException:
            venv.close()
            raise

    def detect(self, obj: Any) -> bool:
        return isinstance(obj, (gym.Env, gym.vector.VectorEnv))

    def wrap_kwargs(self, obj: Any) -> list[str]:
        return sorted(_BACKEND_KWARGS + _PER_ENV_KWARGS)

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Any:
        """A gymnasium VectorEnv, or a single Env as a batch of one."""
        if isinstance(obj, gym.vector.VectorEnv):
            check_options(kwargs, _BACKEND_KWARGS + _PER_ENV_KWARGS, "wrap(VectorEnv)", self.name)
            if kwargs.get("from_pixels") or kwargs.get("frame_skip", 1) != 1:
                raise InvalidArgumentError(
                    "from_pixels and frame_skip act on each sub-env before vectorisation (to stay exact at episode "
                    "ends), so they cannot be added to an existing VectorEnv. Pass them to gpu_envs.make(id, ...), or "
                    "build the vector env with gymnasium.make_vec(id, n, wrappers=[functools.partial("
                    "gpu_envs.backends.gymnasium_envs.FrameSkip, skip=k), gpu_envs.backends.gymnasium_envs.add_pixels], "
                    "render_mode='rgb_array')."
                )
            kwargs.pop("pixels_only", None)
            kwargs.pop("from_pixels", None)
            kwargs.pop("frame_skip", None)
            return GymnasiumBackend(obj, device, **kwargs)
        if isinstance(obj, gym.Env):
            check_options(kwargs, _BACKEND_KWARGS + _PER_ENV_KWARGS, "wrap(Env)", self.name)
            return wrap_single(obj, device, **kwargs)
        raise NotAnEnvError(
            f"the gymnasium backend wraps gymnasium.Env or gymnasium.vector.VectorEnv objects, got "
            f"{type(obj).__module__}.{type(obj).__name__}."
        )


PLUGIN = GymnasiumPlugin()
