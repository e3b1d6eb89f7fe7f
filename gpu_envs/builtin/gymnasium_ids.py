"""The built-in envs in gymnasium's registry, as ``gpu_envs/<id>`` vector entry points.

gymnasium 1.x discovers no plugins (it reads no entry-point group), so ``import
gpu_envs`` registers the ids; an id written ``"gpu_envs:gpu_envs/CartPole-v1"`` makes
gymnasium do that import itself. The ids have a vector entry point only: the built-in
envs are batched, so ``make_vec`` builds them directly (no ``SyncVectorEnv`` of copies)
and keyword arguments (``device``, ``seed``, ...) go to the env's constructor.

What ``make_vec`` returns is the built-in env behind :class:`GymnasiumActions`, the
gymnasium-facing boundary: it takes actions the way gymnasium's envs do (numpy arrays
such as ``envs.action_space.sample()``, lists, tensors on another device: converted
once; a tensor on the env's device passes through) and forwards everything else to the
env (``envs.unwrapped`` is the env itself, whose own ``step`` takes tensors only).

Example::

    import gymnasium
    import gpu_envs  # registers the ids

    envs = gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=8, vectorization_mode="vector_entry_point")
    obs, info = envs.reset(seed=0)
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium
import torch

from gpu_envs.builtin import BUILTIN_ENVS
from gpu_envs.utils.arrays import any_to_torch

__all__ = ["NAMESPACE", "GymnasiumActions", "gymnasium_env", "register_gymnasium_ids"]

NAMESPACE = "gpu_envs"


class GymnasiumActions(gymnasium.vector.VectorActionWrapper):
    """A built-in env that takes actions as gymnasium's envs do (numpy, lists): the conversion at the boundary.

    A tensor on the env's device passes through (no copy); anything else numpy reads,
    or a tensor elsewhere, is copied once to the env's device. Every other attribute
    (``device``, ``state``, ``autoreset_mode``, ...) is the env's.
    """

    def actions(self, actions: Any) -> torch.Tensor:
        device = self.env.device
        if isinstance(actions, torch.Tensor) and actions.device == device:
            return actions
        return any_to_torch(actions, device)

    def __getattr__(self, name: str) -> Any:
        # only called for names not found normally: the env's (torchrl's GymWrapper reads autoreset_mode)
        if name.startswith("_") or "env" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.env, name)


def gymnasium_env(cls: type, **kwargs: Any) -> GymnasiumActions:
    """``make_vec``'s entry point: the built-in env ``cls(**kwargs)`` behind :class:`GymnasiumActions`."""
    return GymnasiumActions(cls(**kwargs))


def register_gymnasium_ids() -> list[str]:
    """Register every built-in env as ``gpu_envs/<id>`` (idempotent); returns the ids."""
    ids = []
    for env_id, cls in BUILTIN_ENVS.items():
        gym_id = f"{NAMESPACE}/{env_id}"
        if gym_id not in gymnasium.registry:
            entry = functools.partial(gymnasium_env, cls)
            gymnasium.register(gym_id, vector_entry_point=entry, max_episode_steps=cls.default_max_episode_steps)
        ids.append(gym_id)
    return ids
