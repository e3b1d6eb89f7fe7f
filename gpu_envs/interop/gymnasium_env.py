"""``to_gymnasium_env``: a one-row gpu_envs env as a single ``gymnasium.Env``.

What ``gymnasium.make("gpu_envs/<id>")`` returns (wrapped by gymnasium's usual
``TimeLimit``/``OrderEnforcing``/``PassiveEnvChecker``), and what a loop written for
single gymnasium envs takes: CleanRL's ``gym.vector.SyncVectorEnv([lambda:
gym.make(env_id), ...])``, gymnasium's single-env wrappers, ``check_env``.

* observations are numpy arrays (a dict for several observation keys), the reward a
  float (an array ``[K]`` for a multi-objective env), the flags Python bools;
* the env under it resets an ended episode inside the same step: ``step`` returns the
  TRUE final observation, and the next ``reset()`` without a seed hands the reset
  observation that step already drew (no second draw); ``reset(seed=s)`` always resets
  with that seed, and ``reset()`` mid-episode starts a new episode;
* actions are what ``action_space.sample()`` gives, checked on the host before the env
  moves (:class:`~gpu_envs.interop.conversions.HostActions`: range, dtype, finite values);
* ``render_mode="rgb_array"``: ``render()`` draws the last observation returned, where
  the env can draw observations (the built-in envs' ``render_observations``).

``unwrapped`` is this env itself, as gymnasium's ``Env`` defines it (``check_env`` reads
the seeded ``unwrapped._np_random``); the gpu_envs env is ``.env`` and the simulator
behind it ``.simulator``.

Example::

    >>> import gpu_envs
    >>> env = to_gymnasium_env(gpu_envs.make("CartPole-v1", num_envs=1, device="cpu"))
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    >>> obs.shape, float(reward)
    ((4,), 1.0)
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium
import numpy as np

from gpu_envs.contract.errors import InvalidArgumentError, ResetNeededError
from gpu_envs.interop.conversions import HostActions, ObservationLayout, host_copy, leaf, require_env, simulator_of
from gpu_envs.utils.arguments import as_seed
from gpu_envs.utils.tensordicts import get_entry, set_entry

__all__ = ["GymnasiumEnv", "to_gymnasium_env"]

RENDER_MODES = ("rgb_array",)


def to_gymnasium_env(env: Any, render_mode: str | None = None) -> GymnasiumEnv:
    """``env`` (a BatchedEnv or TransformedEnv of ONE row) as a ``gymnasium.Env``; closing it closes ``env``."""
    return GymnasiumEnv(env, render_mode=render_mode)


class GymnasiumEnv(gymnasium.Env):
    """A one-row gpu_envs env behind gymnasium's single-env API; build it with :func:`to_gymnasium_env`."""

    def __init__(self, env: Any, render_mode: str | None = None) -> None:
        require_env(env, "to_gymnasium_env")
        if env.num_envs != 1:
            raise InvalidArgumentError(
                f"to_gymnasium_env takes an env of one row, got num_envs={env.num_envs}; for a batch use "
                "gpu_envs.interop.to_gymnasium(env) (a gymnasium VectorEnv), or gymnasium.make_vec('gpu_envs/<id>', n)."
            )
        self.env = env
        self.simulator = simulator_of(env)
        draws = callable(getattr(self.simulator, "render_observations", None))
        if render_mode is not None and (render_mode not in RENDER_MODES or not draws):
            modes = list(RENDER_MODES) if draws else []
            raise InvalidArgumentError(f"render_mode={render_mode!r} is not available for this env; it has {modes}.")
        self.render_mode = render_mode
        fps = (getattr(self.simulator, "metadata", None) or {}).get("render_fps", 30)
        self.metadata = {"render_modes": list(RENDER_MODES) if draws else [], "render_fps": fps}
        self._layout = ObservationLayout(env.single_observation_spec, env.observation_spec)
        self.observation_space = self._layout.single_space
        self.action_space = env.single_action_spec.to_gym()
        self._actions = HostActions(env, "gymnasium.Env (to_gymnasium_env)")
        self._action_shape = tuple(env.action_spec.shape)
        reward_spec = getattr(env, "single_reward_spec", None)
        self._scalar_reward = reward_spec is None or tuple(reward_spec.shape) in ((), (1,))
        self._root = None  # the next step's input (the post-reset observation where the last step ended)
        self._ended = False  # the last step ended an episode: its reset observation is already in _root
        self._shown = None  # the observation last returned, for render()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """A new episode: ``(observation, {})``; with ``seed`` the env's draws are seeded with it."""
        seed = as_seed(seed)
        super().reset(seed=seed)
        if options:
            raise InvalidArgumentError(
                f"reset options {sorted(options)} are not supported by gpu_envs envs; pass per-env settings when "
                "building the env (gymnasium.make(id, **kwargs))."
            )
        if seed is not None or not self._ended or self._root is None:
            self._root = self.env.reset(seed=seed)
        self._ended = False
        return self._observation(self._root), {}

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        """One step: ``(observation, reward, terminated, truncated, info)``; the TRUE final observation on an end."""
        if self._root is None:
            raise ResetNeededError(
                "step() was called before reset(): call env.reset() first, as with any gymnasium env."
            )
        array = np.asarray(action)
        batch = array.reshape(self._action_shape) if array.size == math.prod(self._action_shape) else array[None]
        set_entry(self._root, "action", self._actions(batch))
        td, self._root = self.env.step_and_maybe_reset(self._root)
        nxt = get_entry(td, "next")
        reward = host_copy(get_entry(nxt, "reward"))[0]
        terminated = bool(get_entry(nxt, "terminated")[0, 0])
        truncated = bool(get_entry(nxt, "truncated")[0, 0])
        self._ended = terminated or truncated
        return self._observation(nxt), float(reward[0]) if self._scalar_reward else reward, terminated, truncated, {}

    def _observation(self, td: Any) -> Any:
        self._shown = td
        return self._layout.build(lambda key: host_copy(leaf(td, key))[0])

    def render(self) -> np.ndarray | None:
        """``rgb_array``: the frame of the observation last returned (``uint8 [H, W, 3]``)."""
        if self.render_mode is None or self._shown is None:
            return None
        return self.simulator.render_observations(leaf(self._shown, "observation"))[0].cpu().numpy()

    def close(self) -> None:
        """Close the gpu_envs env (and its simulator)."""
        if not getattr(self.env, "is_closed", False):
            self.env.close()
