"""``check_env`` passes correct envs and names what is wrong with broken ones."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.builtin import CartPoleEnv
from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.env_checker import FAIL, PASS, WARN, _check_final_obs, check_env
from tests.fakes import CountingTorchVectorEnv


def statuses(report) -> dict:
    return {r.name: r.status for r in report.results}


class SwappedCartPole(CartPoleEnv):
    """Bug: returns the final observation as the next root and the reset one as 'final'."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        done = (terminated | truncated)[:, None]
        final = info["final_obs"]
        return (
            torch.where(done, final, obs),
            reward,
            terminated,
            truncated,
            {"final_obs": torch.where(done, obs, final)},
        )


class ResetAsFinalCartPole(CartPoleEnv):
    """Bug: reports the post-reset observation as the final one."""

    def step(self, action):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"final_obs": obs.clone()}


class NaNCartPole(CartPoleEnv):
    """Bug: NaN in the observation of a row that did not end."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        obs = obs.clone()
        obs[0, 1] = float("nan")
        return obs, reward, terminated, truncated, info


class TightCounting(CountingTorchVectorEnv):
    """Bug: declares observations in [-1, 1] but counts past that."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (3,))


@pytest.mark.parametrize("kwargs", [{}, {"expose_final_obs": False}, {"backend": "gymnasium"}])
def test_builtin_cartpole_passes(kwargs):
    report = check_env(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", **kwargs), steps=120)
    assert report.ok, report.format()
    assert statuses(report)["specs"] == PASS and statuses(report)["determinism"] == PASS
    assert statuses(report)["final observations"] == PASS
    expected = WARN if kwargs.get("expose_final_obs") is False else PASS  # nothing to compare without final obs
    assert statuses(report)["post-reset observations"] == expected
    assert "All 4 checks passed" in report.format()


def test_pendulum_without_episode_end_warns_but_passes():
    report = check_env(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu"), steps=20)
    assert report.ok
    assert statuses(report)["final observations"] == WARN and "raise --steps" in report.format()


def test_swapped_final_and_reset_observations_fail():
    report = check_env(gpu_envs.wrap(SwappedCartPole(8, seed=0)), steps=120)
    assert not report.ok
    assert statuses(report)["post-reset observations"] == FAIL
    assert "swapped" in report.format()


def test_reset_observation_reported_as_final_fails():
    report = check_env(gpu_envs.wrap(ResetAsFinalCartPole(8, seed=0)), steps=120)
    assert statuses(report)["final observations"] == FAIL
    assert "equals the post-reset root" in report.format()


def test_nan_outside_placeholders_and_spec_violations_fail():
    report = check_env(gpu_envs.wrap(NaNCartPole(4, seed=0)), steps=30)
    assert statuses(report)["final observations"] == FAIL and "holds NaN" in report.format()
    assert statuses(report)["specs"] == FAIL  # NaN is in no Box either
    report = check_env(gpu_envs.wrap(TightCounting(4, "cpu")), steps=10)
    assert statuses(report)["specs"] == FAIL
    assert "leaves Box(low=-1.0, high=1.0" in report.format() and "first: env" in report.format()


def test_unseeded_randomness_fails_determinism():
    # the counting env's episodes continue across resets, so two seeded rollouts differ
    report = check_env(gpu_envs.wrap(CountingTorchVectorEnv(4, "cpu")), steps=10)
    assert statuses(report)["determinism"] == FAIL
    assert "seeded with 0 differ" in report.format() and "1 of 4 checks failed" in report.format()


def test_missing_flag_on_a_running_row_fails():
    done = torch.tensor([[False], [True]])
    td = TensorDict(
        {
            "observation": torch.zeros(2, 1, 3),
            "next": {
                "observation": torch.ones(2, 1, 3),
                "done": done[:, None],
                "final_obs_missing": torch.tensor([[[True]], [[False]]]),
            },
        },
        [2, 1],
    )
    result = _check_final_obs(td, {"observation": torch.zeros(2, 1, 3)}, ["observation"], 1)
    assert result.status == FAIL and "did not end" in result.detail


def test_bad_steps_is_a_clear_error():
    with pytest.raises(InvalidArgumentError, match="steps"):
        check_env(gpu_envs.make("CartPole-v1", num_envs=2, device="cpu"), steps=0)


def test_a_transformed_env_passes_with_its_own_specs():
    from gpu_envs.transforms import ActionRescale, EpisodeStats, RewardScale, TransformedEnv

    env = TransformedEnv(
        gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu"), EpisodeStats(), RewardScale(0.5), ActionRescale()
    )
    report = check_env(env, steps=210)
    assert report.ok and statuses(report)["specs"] == PASS, report.format()
    assert "torch(PendulumEnv) backend" in report.title
