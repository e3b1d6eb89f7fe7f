"""The gymnasium backend's registry entry: ``make`` by gymnasium id, ``wrap`` of Env/VectorEnv.

``make(env_id, num_envs, device, ...)`` builds the vector env itself, in the mode the
backend handles best: SAME_STEP auto-reset, ``copy=False`` (the backend copies each
result once anyway), without gymnasium's ``PassiveEnvChecker`` layer (it only checks the
first calls, then costs a wrapper call per sub-env step; ``BatchedEnv`` validates the
first step itself -- pass ``disable_env_checker=False`` to keep it), as a
``SyncVectorEnv``, or an ``AsyncVectorEnv`` with ``vectorization="async"`` or
``num_workers=k`` (one process per sub-env, as gymnasium does; at most ``k`` of them
stepping at once). ``wrap`` takes a gymnasium ``VectorEnv`` as it is, or a single
``Env`` as a batch of one.

Example::

    backend = PLUGIN.make("Acrobot-v1", num_envs=8, device=torch.device("cpu"), num_workers=4)
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import torch

from gpu_envs.backends.gymnasium.backend import GymnasiumBackend, wrap_single
from gpu_envs.backends.gymnasium.wrappers import FrameSkip, add_pixels
from gpu_envs.backends.inbound import check_options
from gpu_envs.errors import InvalidArgumentError, NotAnEnvError
from gpu_envs.specs import Composite

__all__ = ["PLUGIN", "GymnasiumPlugin"]

AutoresetMode = gym.vector.AutoresetMode
_BACKEND_KWARGS = ("one_hot_actions", "info_spec", "env_index_offset")
_PER_ENV_KWARGS = ("from_pixels", "pixels_only", "frame_skip")


class GymnasiumPlugin:
    """Registry entry: gymnasium ids for ``make``, gymnasium Env/VectorEnv objects for ``wrap``."""

    name = "gymnasium"
    accepts_env_index_offset = True  # make(..., distributed=True) can shard its seeds

    def available(self) -> bool:
        return True

    def env_ids(self) -> list[str]:
        return sorted(gym.registry.keys())

    def can_make(self, env_id: str) -> bool:
        """Ids in gymnasium's registry, except Isaac Lab tasks and functional JAX envs.

        Those belong to the isaaclab and jax backends: stepped as plain gymnasium envs,
        their transitions would be wrong (or they would not build at all).
        """
        from gpu_envs.backends.isaaclab import is_isaaclab_spec
        from gpu_envs.backends.jax import is_functional_jax_id

        if env_id not in gym.registry or is_functional_jax_id(env_id):
            return False
        return not is_isaaclab_spec(gym.registry[env_id])

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
        **env_kwargs: Any,
    ) -> Any:
        """Build ``num_envs`` copies of ``env_id`` as a SAME_STEP Sync/AsyncVectorEnv."""
        if vectorization not in (None, "sync", "async"):
            raise InvalidArgumentError(f"vectorization must be 'sync' or 'async', got {vectorization!r}.")
        if num_workers is not None and (
            not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0
        ):
            raise InvalidArgumentError(
                f"num_workers must be an int >= 0 (0: no worker processes), got {num_workers!r}."
            )
        if vectorization == "sync" and num_workers:
            raise InvalidArgumentError("num_workers needs worker processes: drop vectorization='sync' or num_workers.")
        use_async = vectorization == "async" or bool(num_workers)
        per_env = list(wrappers or [])
        if frame_skip != 1:
            if not isinstance(frame_skip, int) or isinstance(frame_skip, bool) or frame_skip < 1:
                raise InvalidArgumentError(f"frame_skip must be an int >= 1, got {frame_skip!r}.")
            per_env.append(functools.partial(FrameSkip, skip=frame_skip))
        if from_pixels:
            env_kwargs.setdefault("render_mode", "rgb_array")
            per_env.append(functools.partial(add_pixels, pixels_only=pixels_only))
        # gymnasium's PassiveEnvChecker only checks the first calls, then stays as a pass-through layer in
        # every sub-env step; the BatchedEnv validates the first step itself.
        env_kwargs.setdefault("disable_env_checker", True)
        vkw = {"autoreset_mode": AutoresetMode.SAME_STEP, "copy": False, **(vector_kwargs or {})}
        if use_async and num_workers:
            vkw.setdefault("max_concurrency", num_workers)
        try:
            venv = gym.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode="async" if use_async else "sync",
                vector_kwargs=vkw,
                wrappers=per_env,
                **env_kwargs,
            )
        except TypeError as err:
            raise InvalidArgumentError(
                f"gymnasium could not build {env_id!r} with {sorted(env_kwargs)}: {err}. Pass only arguments the env "
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
            )
        except BaseException:
            venv.close()
            raise

    def detect(self, obj: Any) -> bool:
        return isinstance(obj, (gym.Env, gym.vector.VectorEnv))

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Any:
        """A gymnasium VectorEnv, or a single Env as a batch of one."""
        if isinstance(obj, gym.vector.VectorEnv):
            check_options(kwargs, _BACKEND_KWARGS + _PER_ENV_KWARGS, "wrap(VectorEnv)", self.name)
            if kwargs.get("from_pixels") or kwargs.get("frame_skip", 1) != 1:
                raise InvalidArgumentError(
                    "from_pixels and frame_skip act on each sub-env before vectorisation (to stay exact at episode "
                    "ends), so they cannot be added to an existing VectorEnv. Pass them to gpu_envs.make(id, ...), or "
                    "build the vector env with gymnasium.make_vec(id, n, wrappers=[functools.partial("
                    "gpu_envs.backends.gymnasium.FrameSkip, skip=k), gpu_envs.backends.gymnasium.add_pixels], "
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
