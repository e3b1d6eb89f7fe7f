"""Envs of the legacy ``gym`` package (0.26) through ``gpu_envs.wrap``, against the sequential oracle.

gym 0.26 has gymnasium's reset/step API with its own spaces, and vector envs that put
the true final observations in ``info["final_observation"]``. The batched transitions
must equal single envs stepped one by one and reset by hand, key by key, for a counting
env written in gym's API (single, SyncVectorEnv, AsyncVectorEnv) and gym's own CartPole,
whose default env checker needs the numpy-2 shim.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import gpu_envs
from tests.fakes import CountingEnv
from tests.gym_fakes import (
    assert_same_transitions,
    batched_transitions,
    check_seeding,
    counting_oracle,
    sequential_reference,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    gym = pytest.importorskip("gym")

from gpu_envs.backends.legacy_gym import gymnasium_space


class GymCountingEnv(gym.Env):
    """tests.fakes.CountingEnv written against gym 0.26 (gym's spaces and Env base)."""

    def __init__(self, index: int = 0) -> None:
        self.inner = CountingEnv(index)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.inner.reset(seed=seed)

    def step(self, action):
        return self.inner.step(action)


def test_single_gym_env_is_a_batch_of_one_and_matches_reference():
    with gpu_envs.wrap(GymCountingEnv(0), device="cpu") as env:
        assert env.batch_size == torch.Size([1]) and "legacy_gym(GymCountingEnv, single env)" in repr(env)
        counting_oracle(env, 1, 700)


def test_gym_sync_vector_env_matches_sequential_reference():
    venv = gym.vector.SyncVectorEnv([lambda i=i: GymCountingEnv(i) for i in range(6)])
    with gpu_envs.wrap(venv, device="cpu") as env:
        assert "legacy_gym(SyncVectorEnv, vector env)" in repr(env)
        counting_oracle(env, 6, 350)
        assert list(env.info_spec.keys()) == ["step_count"]  # read from gym's final_info on ended rows


@pytest.mark.slow
def test_gym_async_vector_env_matches_sequential_reference():
    venv = gym.vector.AsyncVectorEnv([lambda i=i: GymCountingEnv(i) for i in range(3)])
    with gpu_envs.wrap(venv, device="cpu") as env:
        counting_oracle(env, 3, 600)


def test_gym_cartpole_with_its_env_checker_matches_gym_stepped_by_hand():
    """gym.make adds PassiveEnvChecker, whose first-step check calls np.bool8 (gone in numpy 2)."""
    if not hasattr(np, "bool8"):  # what the shim is for: gym's own first step fails on numpy 2
        plain = gym.make("CartPole-v1")
        plain.reset(seed=0)
        with pytest.raises(AttributeError, match="bool8"):
            plain.step(0)
    n, steps, seed = 3, 400, 7
    actions = np.random.default_rng(3).integers(0, 2, size=(n, steps))
    want = sequential_reference(lambda i: gym.make("CartPole-v1", disable_env_checker=True), actions, seed=seed)
    single = gpu_envs.wrap(gym.make("CartPole-v1"), device="cpu")
    got_single = batched_transitions(single, torch.as_tensor(actions[:1]), seed=seed)
    single.close()
    assert_same_transitions(got_single, {k: v[:1] for k, v in want.items()})
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    with gpu_envs.wrap(venv, device="cpu") as env:
        got = batched_transitions(env, torch.as_tensor(actions), seed=seed)
    assert_same_transitions(got, want)
    assert want["done"].sum() > 30


def test_seeded_runs_repeat_and_seed_sub_env_i_with_seed_plus_i():
    actions = torch.as_tensor(np.random.default_rng(4).integers(0, 2, size=(3, 150)))
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    with gpu_envs.wrap(venv, device="cpu") as env:
        check_seeding(env, lambda: gym.make("CartPole-v1", disable_env_checker=True), actions, seed=20)


def test_gym_spaces_convert_to_gymnasium_spaces():
    import gymnasium

    space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-1.0, 2.0, (2,), np.float32),
            "pick": gym.spaces.Discrete(3, start=1),
            "keys": gym.spaces.MultiDiscrete([2, 5]),
            "bits": gym.spaces.MultiBinary(4),
            "pair": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 255, (3,), np.uint8))),
        }
    )
    converted = gymnasium_space(space)
    assert converted == gymnasium.spaces.Dict(
        {
            "pos": gymnasium.spaces.Box(-1.0, 2.0, (2,), np.float32),
            "pick": gymnasium.spaces.Discrete(3, start=1),
            "keys": gymnasium.spaces.MultiDiscrete([2, 5]),
            "bits": gymnasium.spaces.MultiBinary(4),
            "pair": gymnasium.spaces.Tuple(
                (gymnasium.spaces.Discrete(2), gymnasium.spaces.Box(0, 255, (3,), np.uint8))
            ),
        }
    )
    with pytest.raises(gpu_envs.UnsupportedSpaceError, match="Text"):
        gymnasium_space(gym.spaces.Text(5))


class _OldApiEnv(GymCountingEnv):
    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed)[0]


def test_unsupported_cases_raise_clear_errors():
    env = gpu_envs.wrap(_OldApiEnv(), device="cpu")
    with pytest.raises(gpu_envs.NotAnEnvError, match=r"pre-0.26 gym API.*apply_api_compatibility"):
        env.reset()
    venv = gym.vector.SyncVectorEnv([lambda i=i: GymCountingEnv(i) for i in range(3)])
    with gpu_envs.wrap(venv, device="cpu") as env:
        root = env.reset()
        with pytest.raises(gpu_envs.ResetMaskError, match="cannot reset a subset"):
            env.reset(td=root.set("_reset", torch.tensor([True, False, False])))
    with pytest.raises(gpu_envs.InvalidArgumentError, match="from_pixels"):
        gpu_envs.wrap(GymCountingEnv(), device="cpu", from_pixels=True)
