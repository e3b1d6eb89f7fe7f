"""Env specs as torchrl users expect, on every backend that runs on the CPU (JAX: test_jax_backend.py).

``env.action_spec.shape == env.batch_size + env.single_action_spec.shape`` (and the same
for the observation, reward, done and info specs), and ``td["action"] =
env.action_spec.rand()`` steps the env with a whole batch on its device. Transformed
envs expose the transformed specs both ways.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import gpu_envs
from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.specs import Box, Composite, Discrete, MultiDiscrete, OneHot
from gpu_envs.transforms import (
    ActionRescale,
    ClipAction,
    EpisodeStats,
    ObservationNorm,
    RewardScale,
    TransformedEnv,
)
from tests.env_spec_checks import assert_batched_and_single_specs_agree, assert_torchrl_action_idiom_steps
from tests.fakes import CountingEnv, CountingTorchVectorEnv
from tests.gym_fakes import InfoEnv, SpacesEnv
from tests.isaac_fakes import FakeIsaacDirectEnv, FakeIsaacManagerEnv, FakeManiSkillVectorEnv

N = 6
S = gym.spaces


def _spaces_venv(one_hot: bool = False):
    obs = S.Dict({"pos": S.Box(-1, 1, (2,), np.float32), "inner": S.Dict({"k": S.Discrete(3), "b": S.MultiBinary(2)})})
    action = S.Discrete(4, start=1) if one_hot else S.MultiDiscrete([3, 2])
    venv = gym.vector.SyncVectorEnv([lambda i=i: SpacesEnv(obs, action, index=i) for i in range(N)])
    return gpu_envs.wrap(venv, device="cpu", one_hot_actions=one_hot)


ENVS = {
    "builtin-CartPole": lambda: gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", seed=0),
    "builtin-Pendulum": lambda: gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=0),
    "gymnasium-CartPole": lambda: gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", backend="gymnasium"),
    "gymnasium-Pendulum": lambda: gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", backend="gymnasium"),
    "gymnasium-dict-obs-multidiscrete": _spaces_venv,
    "gymnasium-one-hot": lambda: _spaces_venv(one_hot=True),
    "gymnasium-info": lambda: gpu_envs.wrap(
        gym.vector.SyncVectorEnv([lambda i=i: InfoEnv(i) for i in range(N)]), device="cpu"
    ),
    "gymnasium-single-env": lambda: gpu_envs.wrap(CountingEnv(0), device="cpu"),
    "torch-user-env": lambda: gpu_envs.wrap(CountingTorchVectorEnv(N, "cpu")),
    "isaac-direct": lambda: gpu_envs.wrap(FakeIsaacDirectEnv(N, state=True)),
    "isaac-manager": lambda: gpu_envs.wrap(FakeIsaacManagerEnv(N)),
    "maniskill": lambda: gpu_envs.wrap(FakeManiSkillVectorEnv(N, obs_mode="state_dict")),
    "transformed-Pendulum": lambda: TransformedEnv(
        gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=0),
        EpisodeStats(),
        ObservationNorm(clip=5.0),
        RewardScale(0.1),
        ClipAction(),
        ActionRescale(),
    ),
    "transformed-twice": lambda: TransformedEnv(
        TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", seed=0), EpisodeStats()),
        RewardScale(2.0),
    ),
}


@pytest.mark.parametrize("name", ENVS)
def test_specs_carry_the_batch_dims_and_the_single_specs_do_not(name):
    with ENVS[name]() as env:
        assert_batched_and_single_specs_agree(env)
        assert_torchrl_action_idiom_steps(env)
        assert_batched_and_single_specs_agree(env)  # again: info entries may appear at the first step


@pytest.mark.parametrize("name", ENVS)
def test_action_spec_shape_is_batch_size_plus_the_single_shape(name):
    with ENVS[name]() as env:
        assert env.action_spec.shape == env.batch_size + env.single_action_spec.shape
        assert env.observation_spec.shape == env.batch_size
        assert env.reward_spec.shape == env.batch_size + (1,) and env.single_reward_spec.shape == (1,)
        for key in ("done", "terminated", "truncated"):
            assert env.done_spec[key].shape == env.batch_size + (1,) and env.single_done_spec[key].shape == (1,)


def test_backends_declare_per_env_specs_and_the_env_expands_them():
    env = gpu_envs.make("CartPole-v1", num_envs=N, device="cpu")
    assert env.single_action_spec is env.backend.action_spec == Discrete(2)
    assert env.single_observation_spec is env.backend.observation_spec
    assert env.action_spec == Discrete(2).expand(N)
    assert env.observation_spec["observation"].shape == (N, 4)


def test_info_spec_follows_entries_discovered_at_the_first_step():
    env = ENVS["gymnasium-info"]()
    env.reset(seed=0)
    assert len(env.info_spec.keys()) == 0
    env.rollout(2)
    assert set(env.info_spec.keys(True, True)) == {"count", "ratio", "flag", "vec", ("nested", "a")}
    assert env.info_spec["vec"].shape == (N, 2) and env.single_info_spec["vec"].shape == (2,)


def test_transformed_specs_both_ways():
    env = ENVS["transformed-Pendulum"]()
    assert env.single_action_spec == Box(-1.0, 1.0, (1,)) and env.action_spec == Box(-1.0, 1.0, (1,)).expand(N, 1)
    assert env.single_observation_spec["observation"] == Box(-5.0, 5.0, (3,))
    assert env.observation_spec["observation"] == Box(-5.0, 5.0, (3,)).expand(N, 3)
    assert env.single_reward_spec == Box(-math.inf, math.inf, (1,))
    assert env.info_spec["episode_return"].shape == (N, 1) and env.single_info_spec["episode_length"].shape == (1,)
    td = env.reset(seed=0)
    td["action"] = env.action_spec.rand()  # in [-1, 1]: ActionRescale maps it to Pendulum's [-2, 2]
    assert (td["action"].abs() <= 1).all()
    env.step(td)


def test_spec_kinds_of_the_gymnasium_backend_keep_their_type_when_batched():
    env = ENVS["gymnasium-dict-obs-multidiscrete"]()
    assert type(env.action_spec) is MultiDiscrete and env.action_spec.nvec.shape == (N, 2)
    assert isinstance(env.observation_spec["inner"], Composite) and env.observation_spec["inner", "k"].shape == (N,)
    one_hot = ENVS["gymnasium-one-hot"]()
    assert isinstance(one_hot.action_spec, OneHot) and one_hot.action_spec.rand().sum(-1).tolist() == [1] * N
    # the batched spec converts to the vector env's batched space, the single one to its single space
    assert one_hot.single_action_spec.to_gym() == one_hot.backend.env.single_action_space
    assert env.action_spec.to_gym() == env.backend.env.action_space
    assert env.single_observation_spec.to_gym() == env.backend.env.single_observation_space


def test_a_backend_declaring_batched_specs_is_refused():
    with pytest.raises(SpecError, match="ONE env's spec"):
        gpu_envs.wrap(CountingTorchVectorEnv(N, "cpu"), action_spec=Discrete(2).expand(N))
