"""The built-in envs in gymnasium's registry, as ``gpu_envs/<id>`` vector entry points.

gymnasium 1.x discovers no plugins (it reads no entry-point group), so ``import
gpu_envs`` registers the ids; an id written ``"gpu_envs:gpu_envs/CartPole-v1"`` makes
gymnasium do that import itself. The ids have a vector entry point only: the built-in
envs are batched, so ``make_vec`` builds them directly (no ``SyncVectorEnv`` of copies)
and keyword arguments (``device``, ``seed``, ...) go to the env's constructor.

Example::

    import gymnasium
    import gpu_envs  # registers the ids

    envs = gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=8, vectorization_mode="vector_entry_point")
    obs, info = envs.reset(seed=0)
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
"""

from __future__ import annotations

import gymnasium

from gpu_envs.builtin import BUILTIN_ENVS

NAMESPACE = "gpu_envs"


def register_gymnasium_ids() -> list[str]:
    """Register every built-in env as ``gpu_envs/<id>`` (idempotent); returns the ids."""
    ids = []
    for env_id, cls in BUILTIN_ENVS.items():
        gym_id = f"{NAMESPACE}/{env_id}"
        if gym_id not in gymnasium.registry:
            gymnasium.register(gym_id, vector_entry_point=cls, max_episode_steps=cls.default_max_episode_steps)
        ids.append(gym_id)
    return ids
