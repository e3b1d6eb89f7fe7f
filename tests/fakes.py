"""Test envs whose observations make any swap, skip or off-by-one visible.

The counting envs encode ``(env index, episode, step)`` in every observation. Episode
lengths and end kinds are pure functions of ``(env index, episode)`` so a batched torch
env and N single gymnasium envs stepped by hand produce the very same episodes: the
single ones are the oracle (docs/DESIGN.md, "How correctness is proven").
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

MAX_LEN = 7


def episode_length(index, episode):
    """1..MAX_LEN steps; every env's first episode lasts 3 steps, so all end together once."""
    varied = 1 + (5 * index + 3 * episode + index * episode) % MAX_LEN
    if isinstance(varied, torch.Tensor):
        return torch.where(episode == 0, 3, varied)
    return 3 if episode == 0 else varied


def ends_truncated(index, episode):
    """Roughly one episode in three is truncated, the rest terminate."""
    return (index + episode) % 3 == 0


def final_obs_valid(index, episode):
    """Rows whose final observation a 'masked' env withholds (to exercise placeholders)."""
    return (index + 2 * episode) % 4 != 1


def reward_of(index, episode, step):
    return 100.0 * index + 10.0 * episode + step


class CountingEnv(gym.Env):
    """Single env ``index``: obs = (index, episode, step); no auto-reset (the oracle)."""

    metadata = {"render_modes": []}

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.episode = -1
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {"step_count": self.t}

    def step(self, action):
        self.t += 1
        length = episode_length(self.index, self.episode)
        ended = self.t >= length
        truncated = bool(ended and ends_truncated(self.index, self.episode))
        terminated = bool(ended and not truncated)
        reward = reward_of(self.index, self.episode, self.t) + float(action)
        return self._obs(), reward, terminated, truncated, {"step_count": self.t}

    def _obs(self):
        return np.array([self.index, self.episode, self.t], dtype=np.float32)


class CountingTorchVectorEnv:
    """The same dynamics, batched in torch, auto-resetting in ``step`` (same step).

    ``final_obs``: ``"info"`` gives ``info["final_obs"]`` for the full batch, ``"masked"``
    also gives ``info["_final_obs"]`` with some rows withheld, ``"none"`` gives nothing
    (Isaac Lab without ``compute_final_obs``).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    supports_reset_mask = True
    # its per-step state, re-bound every step (what a CUDA-graph collection must keep)
    state_attributes = ("episode", "t")

    def __init__(self, num_envs: int = 4, device="cpu", final_obs: str = "info", obs_dtype=torch.float32) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.final_obs = final_obs
        np_dtype = np.float32 if obs_dtype == torch.float32 else np.int64
        self.single_observation_space = gym.spaces.Box(-(2**20), 2**20, (3,), np_dtype)
        self.single_action_space = gym.spaces.Discrete(2)
        self.obs_dtype = obs_dtype
        self.index = torch.arange(num_envs, device=self.device)
        self.episode = torch.full((num_envs,), -1, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _obs(self):
        return torch.stack([self.index, self.episode, self.t], dim=-1).to(self.obs_dtype)

    def reset(self, *, seed=None, options=None):
        mask = None if options is None else options.get("reset_mask")
        if mask is None:
            mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self.episode = torch.where(mask, self.episode + 1, self.episode)
        self.t = torch.where(mask, 0, self.t)
        return self._obs(), {}

    def step(self, action):
        self.t = self.t + 1
        ended = self.t >= episode_length(self.index, self.episode)
        truncated = ended & ends_truncated(self.index, self.episode)
        terminated = ended & ~truncated
        reward = reward_of(self.index, self.episode, self.t).float() + action.float()
        final = self._obs()
        valid = final_obs_valid(self.index, self.episode)
        self.episode = torch.where(ended, self.episode + 1, self.episode)
        self.t = torch.where(ended, 0, self.t)
        info = {}
        if self.final_obs in ("info", "masked"):
            info["final_obs"] = final
        if self.final_obs == "masked":
            info["_final_obs"] = ended & valid
        return self._obs(), reward, terminated, truncated, info

    def close(self):
        pass


def reference_rollout(num_envs: int, actions: np.ndarray, final_obs: str = "info"):
    """The oracle: N single CountingEnvs stepped one by one, reset by hand when done.

    Returns a dict of arrays ``[N, T, ...]`` with torchrl's transition keys; the
    ``"next_observation"`` on ended rows is the true final one unless ``final_obs``
    withholds it (then NaN, and ``"final_obs_missing"`` True).
    """
    envs = [CountingEnv(i) for i in range(num_envs)]
    obs = [env.reset()[0] for env in envs]
    out = {
        k: []
        for k in (
            "observation",
            "action",
            "next_observation",
            "reward",
            "terminated",
            "truncated",
            "final_obs_missing",
            "root",
        )
    }
    for t in range(actions.shape[1]):
        rows = {k: [] for k in out}
        for i, env in enumerate(envs):
            a = int(actions[i, t])
            episode = env.episode
            next_obs, reward, term, trunc, _ = env.step(a)
            ended = term or trunc
            missing = ended and (final_obs == "none" or (final_obs == "masked" and not final_obs_valid(i, episode)))
            rows["observation"].append(obs[i])
            rows["action"].append(a)
            rows["next_observation"].append(np.full(3, np.nan, np.float32) if missing else next_obs)
            rows["reward"].append(reward)
            rows["terminated"].append(term)
            rows["truncated"].append(trunc)
            rows["final_obs_missing"].append(missing)
            obs[i] = env.reset()[0] if ended else next_obs
            rows["root"].append(obs[i])
        for k in out:
            out[k].append(np.stack(rows[k]))
    return {k: np.stack(v, axis=1) for k, v in out.items()}


def assert_trajectory_matches(traj, expected: dict) -> None:
    """A trajectory TensorDict ``[N, T]`` equals :func:`reference_rollout`'s arrays, key by key.

    Compares the root observation and action, ``("next", "observation")`` (NaN
    placeholders included), the reward, the end flags and ``final_obs_missing``, and
    checks ``done == terminated | truncated``.
    """
    got = {
        "observation": traj["observation"],
        "action": traj["action"],
        "next_observation": traj["next", "observation"],
        "reward": traj["next", "reward"].squeeze(-1),
        "terminated": traj["next", "terminated"].squeeze(-1),
        "truncated": traj["next", "truncated"].squeeze(-1),
        "final_obs_missing": traj["next", "final_obs_missing"].squeeze(-1),
    }
    for key, have in got.items():
        np.testing.assert_array_equal(have.numpy(), expected[key].astype(have.numpy().dtype), err_msg=key)
    np.testing.assert_array_equal(
        traj["next", "done"].squeeze(-1).numpy(), expected["terminated"] | expected["truncated"]
    )
