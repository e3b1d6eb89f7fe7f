"""Image envs for the benchmarks: uint8 frame observations as torch vector envs.

* :class:`SyntheticFrames`: a pure-torch env with Atari-shaped observations (uint8
  ``[N, 4, 84, 84]``: four stacked 84x84 grey frames, as EnvPool and SB3's Atari
  wrappers give them), six discrete actions and episodes of 20..51 steps; one step
  writes one fresh frame stack (one elementwise op), so what a benchmark measures
  around it is the wrapper and the collection, not an emulator. Always available.
* :class:`EnvPoolFrames`: EnvPool's ``Pong-v5`` (C++ Atari emulator, the same
  observation layout) behind the same protocol, when EnvPool is installed. EnvPool
  resets an ended env on its NEXT step; this class resets the ended rows within the
  step (``pool.reset(env_ids)``) and keeps their final frames, so the env is
  same-step, as gpu_envs' torch vector-env protocol asks (:mod:`gpu_envs.backends.torch_envs`).

Both follow that protocol (``step`` -> ``(obs, reward, terminated, truncated, info)``
with ``info["final_obs"]``), so ``gpu_envs.wrap(env)`` takes them.

Example::

    env = gpu_envs.wrap(SyntheticFrames(8), device="cpu")
    traj = collect(env, steps=32)       # ("next", "observation") uint8 [8, 32, 4, 84, 84]
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch

FRAMES = (4, 84, 84)
ACTIONS = 6


class SyntheticFrames:
    """A torch vector env with uint8 frame-stack observations ``[N, 4, 84, 84]`` (module docstring).

    Row ``i``'s frame at step ``t`` of an episode is ``base + 3 t + i`` (mod 256) and its
    episode lasts ``20 + (7 i + 5 e) % 32`` steps (``e``: the episode), ending in a
    truncation every third episode; the reward is the action. Deterministic, so two
    copies stepped alike give the same data.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    supports_reset_mask = False

    def __init__(self, num_envs: int, device: str | torch.device = "cpu") -> None:
        self.num_envs = n = num_envs
        self.device = torch.device(device)
        self.single_observation_space = gym.spaces.Box(0, 255, FRAMES, np.uint8)
        self.single_action_space = gym.spaces.Discrete(ACTIONS)
        generator = torch.Generator().manual_seed(0)
        self._base = torch.randint(0, 256, (1, *FRAMES), generator=generator, dtype=torch.uint8).to(self.device)
        self._rows = torch.arange(n, device=self.device)
        self._t = torch.zeros(n, dtype=torch.int64, device=self.device)
        self._episode = torch.zeros(n, dtype=torch.int64, device=self.device)

    def _frames(self) -> torch.Tensor:
        shift = (3 * self._t + self._rows).to(torch.uint8).view(-1, 1, 1, 1)
        return self._base + shift  # a fresh [N, 4, 84, 84] uint8 tensor (wraps around at 256)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        self._t.zero_()
        self._episode.zero_()
        return self._frames(), {}

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        self._t += 1
        final = self._frames()
        length = 20 + (7 * self._rows + 5 * self._episode) % 32
        done = self._t >= length
        truncated = done & (self._episode % 3 == 2)
        terminated = done & ~truncated
        self._t.masked_fill_(done, 0)
        self._episode += done
        reward = action.to(torch.float32)
        return self._frames(), reward, terminated, truncated, {"final_obs": final}

    def close(self) -> None:
        pass


def envpool_available() -> bool:
    return importlib.util.find_spec("envpool") is not None


class EnvPoolFrames:
    """EnvPool's ``Pong-v5`` (uint8 ``[N, 4, 84, 84]``, 6 actions) as a same-step torch vector env on the CPU.

    ``num_threads`` EnvPool worker threads (1 in the benchmarks: one core each side); ``options`` go to
    ``envpool.make`` (e.g. ``max_episode_steps``).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    supports_reset_mask = False

    def __init__(
        self, num_envs: int, task: str = "Pong-v5", num_threads: int = 1, seed: int = 0, **options: Any
    ) -> None:
        import envpool

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.pool = envpool.make(
                task, env_type="gymnasium", num_envs=num_envs, num_threads=num_threads, seed=seed, **options
            )
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        space = self.pool.observation_space
        self.single_observation_space = gym.spaces.Box(0, 255, space.shape, np.uint8)
        self.single_action_space = gym.spaces.Discrete(int(self.pool.action_space.n))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        obs, _ = self.pool.reset()
        return torch.from_numpy(obs), {}

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        obs, reward, terminated, truncated, _ = self.pool.step(action.numpy())
        done = np.logical_or(terminated, truncated)
        final = obs
        if done.any():  # EnvPool would reset these rows on the next step: reset them now, keep the final frames
            ended = np.flatnonzero(done)
            fresh, _ = self.pool.reset(ended)
            obs = obs.copy()
            obs[ended] = fresh
        info: dict[str, Any] = {"final_obs": torch.from_numpy(final)}
        return (
            torch.from_numpy(obs),
            torch.from_numpy(np.asarray(reward, np.float32)),
            torch.from_numpy(terminated),
            torch.from_numpy(truncated),
            info,
        )

    def close(self) -> None:
        self.pool.close()
