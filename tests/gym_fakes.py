"""gymnasium test envs and the sequential oracle for the gymnasium backend.

* :func:`counting_vector_env` batches ``tests.fakes.CountingEnv`` (obs = (index,
  episode, step), varied episode lengths, both end kinds, info ``step_count``) in any
  auto-reset mode, sync or async.
* :func:`sequential_reference` is the oracle: independent single envs stepped one by
  one in Python, reset by hand when done, recording the true final observation and the
  step's info. :func:`batched_transitions` records the same keys from a BatchedEnv.
* Small envs for spaces, pixels, info entries and faults.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
import torch

from tests.fakes import CountingEnv

MODES = {
    "same_step": gym.vector.AutoresetMode.SAME_STEP,
    "disabled": gym.vector.AutoresetMode.DISABLED,
    "next_step": gym.vector.AutoresetMode.NEXT_STEP,
}


def counting_vector_env(num_envs: int, mode: str, vectorization: str = "sync", **kwargs) -> gym.vector.VectorEnv:
    """``num_envs`` CountingEnvs (sub-env i has index i) in auto-reset ``mode``."""
    fns = [lambda i=i: CountingEnv(i) for i in range(num_envs)]
    cls = gym.vector.AsyncVectorEnv if vectorization == "async" else gym.vector.SyncVectorEnv
    return cls(fns, autoreset_mode=MODES[mode], **kwargs)


def sequential_reference(
    make_env: Callable[[int], gym.Env],
    actions: np.ndarray,
    seed: int | None = None,
    info_keys: Sequence[str] = (),
    obs_keys: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """The oracle: N single envs, stepped one by one and reset by hand at done.

    ``actions`` is ``[N, T, ...]``. Env ``i`` is reset with ``seed + i`` first (no seed
    afterwards, like gymnasium's auto-reset). Returns arrays ``[N, T, ...]`` for
    ``observation``, ``next_observation`` (the TRUE final observation on ended rows),
    ``reward``, ``terminated``, ``truncated``, ``done``, ``root`` (the next step's input)
    and each of ``info_keys`` (the step's info; 0 where absent). With ``obs_keys``,
    observations are dicts and each key is recorded as ``observation/<key>`` etc.
    """
    num_envs, steps = actions.shape[:2]
    envs = [make_env(i) for i in range(num_envs)]
    obs = [env.reset(seed=None if seed is None else seed + i)[0] for i, env in enumerate(envs)]
    names = ["observation", "next_observation", "root"]
    keys = [None] if obs_keys is None else list(obs_keys)
    out: dict[str, list] = {f"{n}/{k}" if k else n: [] for n in names for k in keys}
    out.update({k: [] for k in ("reward", "terminated", "truncated", "done", *info_keys)})

    def record(name, values):
        for k in keys:
            out[f"{name}/{k}" if k else name].append(np.stack([v if k is None else v[k] for v in values]))

    for t in range(steps):
        rows = {
            k: []
            for k in (
                "observation",
                "next_observation",
                "root",
                "reward",
                "terminated",
                "truncated",
                "done",
                *info_keys,
            )
        }
        for i, env in enumerate(envs):
            action = actions[i, t]
            next_obs, reward, term, trunc, info = env.step(action.item() if action.ndim == 0 else action)
            rows["observation"].append(obs[i])
            rows["next_observation"].append(next_obs)
            rows["reward"].append(reward)
            rows["terminated"].append(term)
            rows["truncated"].append(trunc)
            rows["done"].append(term or trunc)
            for k in info_keys:
                rows[k].append(info.get(k, 0))
            obs[i] = env.reset()[0] if (term or trunc) else next_obs
            rows["root"].append(obs[i])
        for name in ("observation", "next_observation", "root"):
            record(name, rows[name])
        for k in ("reward", "terminated", "truncated", "done", *info_keys):
            out[k].append(np.asarray(rows[k]))
    for env in envs:
        env.close()
    return {k: np.stack(v, axis=1) for k, v in out.items()}


def batched_transitions(
    env, actions: torch.Tensor, info_keys: Sequence[str] = (), obs_keys: Sequence | None = None, seed=None
) -> dict[str, np.ndarray]:
    """The same keys as :func:`sequential_reference`, from a BatchedEnv's ``step_and_maybe_reset``."""
    td = env.reset(seed=seed)
    keys = [None] if obs_keys is None else list(obs_keys)
    got: dict[str, list] = {}

    def add(name, value):
        got.setdefault(name, []).append(value)

    for t in range(actions.shape[1]):
        td["action"] = actions[:, t]
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        for k in keys:
            suffix = f"/{k if isinstance(k, str) else '.'.join(k)}" if k else ""
            key = k or "observation"
            add("observation" + suffix, td[key])
            add("next_observation" + suffix, nxt[key])
            add("root" + suffix, root[key])
        add("reward", nxt["reward"].squeeze(-1))
        add("terminated", nxt["terminated"].squeeze(-1))
        add("truncated", nxt["truncated"].squeeze(-1))
        add("done", nxt["done"].squeeze(-1))
        for k in info_keys:
            add(k, nxt[k])
        assert not root["done"].any() and not root["terminated"].any() and not root["truncated"].any()
        td = root
    return {k: torch.stack(v, dim=1).numpy() for k, v in got.items()}


def assert_same_transitions(got: dict, want: dict) -> None:
    """Key by key equality (dtypes cast to the batched side's)."""
    assert set(want) <= set(got), f"missing keys {set(want) - set(got)}"
    for key, expected in want.items():
        have = got[key]
        np.testing.assert_array_equal(have, expected.astype(have.dtype), err_msg=key)


def counting_oracle(env, num_envs: int, steps: int, make_env: Callable[[int], gym.Env] = CountingEnv) -> dict:
    """Run the oracle on counting envs (``make_env(i)`` is sub-env ``i``, as ``env``'s are) with its
    ``step_count`` info; returns the batched transitions after checking them and the coverage."""
    actions = np.random.default_rng(num_envs + steps).integers(0, 2, size=(num_envs, steps))
    want = sequential_reference(make_env, actions, info_keys=["step_count"])
    got = batched_transitions(env, torch.as_tensor(actions), info_keys=["step_count"])
    assert_same_transitions(got, want)
    check_coverage(want)
    return got


def check_seeding(env, make_single: Callable[[], gym.Env], actions: torch.Tensor, seed: int = 7) -> None:
    """``reset(seed=s)`` seeds sub-env ``i`` with ``s + i`` (gymnasium's rule) and seeded runs repeat bit for bit."""
    obs = env.reset(seed=seed)["observation"].numpy()
    for i in range(env.num_envs):
        np.testing.assert_array_equal(obs[i], make_single().reset(seed=seed + i)[0])
    first, again = batched_transitions(env, actions, seed=seed), batched_transitions(env, actions, seed=seed)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key], err_msg=key)


def check_coverage(want: dict) -> None:
    """The oracle run exercised every case it is about: both end kinds, all rows ending at once, no row ending."""
    done = want["done"]
    assert want["terminated"].any() and want["truncated"].any()
    if done.shape[0] > 1:
        assert done.all(axis=0).any(), "a step where every env ends at once"
    assert (~done).all(axis=0).any(), "a step where no env ends"


class PixelCountingEnv(CountingEnv):
    """CountingEnv that renders ``rgb_array`` frames encoding (index, episode, step)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, index: int = 0, render_mode: str | None = "rgb_array") -> None:
        super().__init__(index)
        self.render_mode = render_mode

    def render(self):
        frame = np.zeros((4, 5, 3), dtype=np.uint8)
        frame[..., 0] = self.index
        frame[..., 1] = max(self.episode, 0)
        frame[..., 2] = self.t
        return frame


def frame_of(obs: np.ndarray) -> np.ndarray:
    """The frame PixelCountingEnv renders in the state ``obs`` = (index, episode, step)."""
    frame = np.zeros((4, 5, 3), dtype=np.uint8)
    frame[..., 0], frame[..., 1], frame[..., 2] = obs[0], obs[1], obs[2]
    return frame


class SpacesEnv(gym.Env):
    """Any observation/action spaces; obs are seeded samples, the last action is recorded.

    ``obs_at(t)`` is the observation after ``t`` steps; episodes last ``length`` steps.
    """

    metadata = {"render_modes": []}

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, length: int = 4, index: int = 0) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.length = length
        self.index = index
        self.t = 0
        self.actions: list = []

    def obs_at(self, t: int):
        self.observation_space.seed(1000 * self.index + t)
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs_at(0), {}

    def step(self, action):
        assert self.action_space.contains(action), f"invalid action {action!r} for {self.action_space}"
        self.actions.append(action)
        self.t += 1
        return self.obs_at(self.t), 1.0, self.t >= self.length, False, {}


class MaskedChoiceEnv(gym.Env):
    """Dict observation with an ``action_mask``; stepping a masked-out action raises."""

    metadata = {"render_modes": []}

    def __init__(self, n: int = 5) -> None:
        self.n = n
        self.observation_space = gym.spaces.Dict(
            {"observation": gym.spaces.Box(0, 100, (1,), np.float32), "action_mask": gym.spaces.MultiBinary(n)}
        )
        self.action_space = gym.spaces.Discrete(n)
        self.t = 0

    def _obs(self):
        mask = np.zeros(self.n, dtype=np.int8)
        mask[self.t % self.n] = 1
        mask[(self.t + 2) % self.n] = 1
        return {"observation": np.array([self.t], np.float32), "action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if not self._obs()["action_mask"][int(action)]:
            raise ValueError(f"action {action} is masked out at t={self.t}")
        self.t += 1
        return self._obs(), 1.0, False, self.t >= 9, {}


class InfoEnv(gym.Env):
    """Info entries of every kind: numeric scalars and arrays, nested dicts, strings, a late key."""

    metadata = {"render_modes": []}

    def __init__(self, index: int = 0, length: int = 3) -> None:
        self.index = index
        self.length = length
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.total = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.float32), {"count": -1, "from_reset": 7}

    def step(self, action):
        self.t += 1
        self.total += 1
        info = {
            "count": self.t,
            "ratio": self.t / 2,
            "flag": self.t % 2 == 0,
            "vec": np.array([self.index, self.t], np.float32),
            "nested": {"a": self.index * 10 + self.t},
            "name": f"env{self.index}",
        }
        if self.total > 5:
            info["late"] = 1.0
        return np.array([self.t], np.float32), float(self.t), self.t >= self.length, False, info


class RaisingEnv(CountingEnv):
    """CountingEnv whose ``step`` raises on its ``fail_at``-th call."""

    def __init__(self, index: int = 0, fail_at: int = 3, message: str = "simulator exploded") -> None:
        super().__init__(index)
        self.fail_at = fail_at
        self.message = message
        self.calls = 0

    def step(self, action):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError(f"{self.message} (env {self.index}, call {self.calls})")
        return super().step(action)


class SlowEnv(CountingEnv):
    """CountingEnv whose ``step`` sleeps (to kill its worker while a step is in flight)."""

    def __init__(self, index: int = 0, delay: float = 0.0) -> None:
        super().__init__(index)
        self.delay = delay

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        return super().step(action)


def register_test_envs() -> None:
    """Register the ids the make() tests use (idempotent)."""
    ids = {
        "GpuEnvsTest/Counting-v0": CountingEnv,
        "GpuEnvsTest/PixelCounting-v0": PixelCountingEnv,
        "GpuEnvsTest/MaskedChoice-v0": MaskedChoiceEnv,
    }
    for env_id, entry in ids.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry)
