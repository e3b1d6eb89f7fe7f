"""Per-env gymnasium wrappers the gymnasium backend applies: frame skip and pixels.

Both act on each sub-env, BEFORE vectorisation, so that an episode ending in the
middle of a skipped block or the last frame of an episode are handled by the sub-env
itself and stay exact under every auto-reset mode. ``gpu_envs.make(..., backend=
"gymnasium", frame_skip=k, from_pixels=True)`` and ``wrap(single_env, ...)`` apply
them for you; to use them with a vector env you build yourself, pass them to
``gymnasium.make_vec(id, wrappers=[...])``::

    import functools, gymnasium as gym
    from gpu_envs.backends.gymnasium_envs import FrameSkip, add_pixels

    venv = gym.make_vec("CartPole-v1", 8, render_mode="rgb_array",
                        wrappers=[functools.partial(FrameSkip, skip=4),
                                  functools.partial(add_pixels, pixels_only=False)])
"""

from __future__ import annotations

from typing import Any

import gymnasium

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.utils.arguments import as_int


class FrameSkip(gymnasium.Wrapper):
    """Repeat each action ``skip`` times, summing rewards; stop early when the episode ends.

    The observation, flags and info are those of the last inner step taken.

    Example::

        env = FrameSkip(gymnasium.make("CartPole-v1"), skip=4)
    """

    def __init__(self, env: gymnasium.Env, skip: int) -> None:
        skip = as_int(skip, "frame_skip", minimum=1)
        super().__init__(env)
        self.skip = skip

    def step(self, action: Any) -> tuple:
        total = 0.0
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


def add_pixels(env: gymnasium.Env, pixels_only: bool = True) -> gymnasium.Env:
    """Add the ``rgb_array`` render of every step as a ``"pixels"`` observation.

    ``pixels_only=True`` replaces the observation with the frame; otherwise the
    observation becomes ``{"observation": obs, "pixels": frame}`` (a Dict observation
    gets a ``"pixels"`` entry). gymnasium's ``AddRenderObservation`` does the work; it
    resets the env once to learn the frame shape.
    """
    if env.render_mode != "rgb_array":
        raise InvalidArgumentError(
            f"from_pixels needs an env built with render_mode='rgb_array', got render_mode={env.render_mode!r}. "
            "Build it with gymnasium.make(id, render_mode='rgb_array')."
        )
    return gymnasium.wrappers.AddRenderObservation(
        env, render_only=pixels_only, render_key="pixels", obs_key="observation"
    )
