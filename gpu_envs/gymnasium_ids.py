"""The built-in envs in gymnasium's registry: ``gymnasium.make_vec("gpu_envs/<id>")`` and ``gymnasium.make``.

gymnasium 1.x discovers no plugins (it reads no entry-point group), so ``import
gpu_envs`` registers the ids; an id written ``"gpu_envs:gpu_envs/CartPole-v1"`` makes
gymnasium do that import itself. Each id has both entry points, and what they build
speaks gymnasium's API the way gymnasium's own envs do, so gymnasium's wrappers and
gymnasium-style training loops run on them unchanged:

* ``gymnasium.make_vec("gpu_envs/<id>", n)`` (the vector entry point): the built-in env
  as a ``gymnasium.vector.VectorEnv`` (:func:`gpu_envs.interop.to_gymnasium`) returning
  numpy arrays, in NEXT_STEP auto-reset mode -- gymnasium's default, the one its vector
  wrappers (``RecordEpisodeStatistics``, ``NormalizeObservation``,
  ``TransformObservation``, ``ClipAction``, ...) accept. Options: ``arrays="torch"``
  (tensors on the env's device) and ``autoreset_mode="same_step"`` (final observations
  in ``info["final_obs"]``); both together give the built-in env itself behind
  :class:`~gpu_envs.builtin.gymnasium_ids.GymnasiumActions` (no layer in between).
  ``envs.unwrapped`` is the built-in env;
* ``gymnasium.make("gpu_envs/<id>")`` (the entry point): ONE env as a ``gymnasium.Env``
  (:func:`gpu_envs.interop.gymnasium_env.to_gymnasium_env`: numpy observations, float
  rewards, ``render_mode="rgb_array"``), which ``gymnasium.utils.env_checker.check_env``
  passes and ``gymnasium.make_vec(..., vectorization_mode="sync")`` (or CleanRL's
  ``SyncVectorEnv([lambda: gym.make(env_id)])``) batches.

Other keyword arguments (``device``, ``seed``, ``max_episode_steps``, ...) go to the
built-in env; it runs on the CPU unless ``device=`` says otherwise.

Example::

    >>> import gymnasium
    >>> import gpu_envs  # registers the ids
    >>> envs = gymnasium.wrappers.vector.RecordEpisodeStatistics(gymnasium.make_vec("gpu_envs/CartPole-v1", 8))
    >>> obs, info = envs.reset(seed=0)
    >>> obs.dtype, obs.shape
    (dtype('float32'), (8, 4))
    >>> obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
    >>> env = gymnasium.make("gpu_envs/Pendulum-v1")   # a single env (render_mode="rgb_array" to film it)
    >>> env.observation_space.shape
    (3,)
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium

from gpu_envs.builtin import BUILTIN_ENVS
from gpu_envs.factory import make

__all__ = ["NAMESPACE", "make_env", "make_vector_env", "register_gymnasium_ids"]

NAMESPACE = "gpu_envs"
AutoresetMode = gymnasium.vector.AutoresetMode


def make_vector_env(
    env_id: str,
    num_envs: int = 1,
    *,
    arrays: str = "numpy",
    autoreset_mode: str | AutoresetMode = "next_step",
    device: Any = "cpu",
    **kwargs: Any,
) -> gymnasium.vector.VectorEnv:
    """``make_vec``'s entry point: ``num_envs`` of the built-in env ``env_id`` as a gymnasium vector env."""
    from gpu_envs.builtin.gymnasium_ids import GymnasiumActions  # (the adapters load when first used)
    from gpu_envs.interop.gymnasium import GymnasiumVectorEnv, parse_autoreset_mode

    mode = parse_autoreset_mode(autoreset_mode)
    if arrays == "torch" and mode == AutoresetMode.SAME_STEP:  # the env's own gymnasium API, nothing in between
        return GymnasiumActions(BUILTIN_ENVS[env_id](num_envs=num_envs, device=device, **kwargs))
    seed = kwargs.pop("seed", None)
    env = make(env_id, num_envs=num_envs, device=device, backend="torch", seed=seed, **kwargs)
    try:
        return GymnasiumVectorEnv(env, arrays=arrays, autoreset_mode=mode, caller=f"make_vec('{NAMESPACE}/{env_id}')")
    except BaseException:
        env.close()
        raise


def make_env(env_id: str, *, render_mode: str | None = None, device: Any = "cpu", **kwargs: Any) -> gymnasium.Env:
    """``make``'s entry point: one built-in env ``env_id`` as a ``gymnasium.Env``."""
    from gpu_envs.interop.gymnasium_env import to_gymnasium_env

    seed = kwargs.pop("seed", None)
    env = make(env_id, num_envs=1, device=device, backend="torch", seed=seed, **kwargs)
    try:
        return to_gymnasium_env(env, render_mode=render_mode)
    except BaseException:
        env.close()
        raise


def register_gymnasium_ids() -> list[str]:
    """Register every built-in env as ``gpu_envs/<id>`` (idempotent); returns the ids."""
    ids = []
    for env_id, cls in BUILTIN_ENVS.items():
        gym_id = f"{NAMESPACE}/{env_id}"
        if gym_id not in gymnasium.registry:
            gymnasium.register(
                gym_id,
                entry_point=functools.partial(make_env, env_id),
                vector_entry_point=functools.partial(make_vector_env, env_id),
                max_episode_steps=cls.default_max_episode_steps,
            )
        ids.append(gym_id)
    return ids
