"""MO-Gymnasium envs through ``gpu_envs.wrap``/``make``: vector rewards ``[N, K]`` end to end.

The oracle (docs/DESIGN.md): the same MO envs stepped one by one and reset by hand give the
very same transitions, reward vectors included, for an MO counting env (every env ends
at once on step 3, both end kinds) and mo-gymnasium's deep-sea-treasure. Then the vector
reward's consumers: the rollout buffer and ``collect`` keep it, ``RewardScale`` /
``ClipReward`` act elementwise, ``ScalarizeReward`` makes it ``[N, 1]``, and ``gae`` /
``EpisodeStats`` refuse it with the fix.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.env_checker import check_env
from gpu_envs.rollout import collect, gae
from gpu_envs.transforms import ClipReward, EpisodeStats, RewardScale, ScalarizeReward, TransformedEnv
from tests.fakes import CountingEnv
from tests.gym_fakes import (
    assert_same_transitions,
    batched_transitions,
    check_seeding,
    counting_oracle,
    sequential_reference,
)

mo_gymnasium = pytest.importorskip("mo_gymnasium")
from mo_gymnasium.wrappers.vector import MOSyncVectorEnv  # noqa: E402

from gpu_envs.backends.mo_gymnasium import FreshRowsOnMaskedReset, MOGymnasiumBackend, MOSameStepVectorEnv  # noqa: E402


class MOCountingEnv(CountingEnv):
    """CountingEnv in mo-gymnasium's API: reward = (counting reward, -step), declared by ``reward_space``."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(index)
        self.reward_space = gym.spaces.Box(np.array([-np.inf, -10.0]), np.array([np.inf, 0.0]), dtype=np.float32)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.array([reward, -self.t], dtype=np.float32), terminated, truncated, info


def _mo_oracle(env, n: int, steps: int) -> None:
    got = counting_oracle(env, n, steps, MOCountingEnv)
    assert got["reward"].shape == (n, steps, 2)


def _actions(n: int, steps: int, high: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, size=(n, steps))


def test_mo_sync_vector_env_matches_sequential_reference():
    venv = MOSyncVectorEnv([lambda i=i: MOCountingEnv(i) for i in range(6)])
    with gpu_envs.wrap(venv, device="cpu") as env:
        assert env.backend.name == "mo_gymnasium"
        assert env.reward_spec.shape == (6, 2) and env.single_reward_spec.shape == (2,)
        assert env.single_reward_spec.high.tolist() == [np.inf, 0.0]
        _mo_oracle(env, 6, 400)


def test_plain_mo_sync_vector_env_is_stepped_same_step_over_its_own_sub_envs():
    """Its sub-envs stepped by MOSameStepVectorEnv (no masked resets); claimed as the user's object."""
    venv = MOSyncVectorEnv([lambda i=i: MOCountingEnv(i) for i in range(3)])
    with gpu_envs.wrap(venv, device="cpu") as env:
        inner = env.backend.env.unwrapped
        assert isinstance(inner, MOSameStepVectorEnv) and inner.envs == venv.envs
        assert env.backend.mode == gym.vector.AutoresetMode.SAME_STEP
        with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven"):
            gpu_envs.wrap(venv, device="cpu")
        _mo_oracle(env, 3, 300)
    with gpu_envs.make("deep-sea-treasure-v0", num_envs=2, device="cpu") as env:
        assert isinstance(env.backend.env.unwrapped, MOSameStepVectorEnv)


class _PassThrough(gym.vector.VectorWrapper):
    """A vector wrapper that changes nothing: the MOSyncVectorEnv behind it is stepped as given."""


def test_mo_sync_vector_env_behind_a_wrapper_keeps_next_step_with_the_masked_reset_fix():
    venv = _PassThrough(MOSyncVectorEnv([lambda i=i: MOCountingEnv(i) for i in range(4)]))
    with gpu_envs.wrap(venv, device="cpu") as env:
        assert isinstance(env.backend.env, FreshRowsOnMaskedReset)
        assert env.backend.mode == gym.vector.AutoresetMode.NEXT_STEP
        _mo_oracle(env, 4, 300)


def test_packed_staging_of_a_cuda_target_carries_the_reward_vector(monkeypatch):
    monkeypatch.setattr(MOGymnasiumBackend, "staging_packed", True)
    venv = MOSyncVectorEnv([lambda i=i: MOCountingEnv(i) for i in range(4)])
    with gpu_envs.wrap(venv, device="cpu") as env:
        _mo_oracle(env, 4, 300)
        assert env.backend._stage.packed


def test_single_mo_env_is_a_batch_of_one_and_matches_reference():
    with gpu_envs.wrap(MOCountingEnv(0), device="cpu") as env:
        assert env.batch_size == torch.Size([1]) and "single env" in repr(env)
        _mo_oracle(env, 1, 600)


def test_mo_sync_vector_env_needs_the_masked_reset_fix():
    """mo-gymnasium 1.3 returns stale rows from a masked reset; the backend's wrapper is what makes the oracle hold."""
    venv = MOSyncVectorEnv([lambda i=i: MOCountingEnv(i) for i in range(2)])
    venv.reset()
    for _ in range(2):
        venv.step(np.zeros(2, dtype=np.int64))
    obs, _ = venv.reset(options={"reset_mask": np.array([True, False])})
    assert obs[1].tolist() == [1, 0, 0]  # row 1 was at step 2 of its episode: the bug this backend corrects
    fixed = FreshRowsOnMaskedReset(MOSyncVectorEnv([lambda i=i: MOCountingEnv(i) for i in range(2)]))
    fixed.reset()
    for _ in range(3):  # every first episode ends on step 3
        fixed.step(np.zeros(2, dtype=np.int64))
    obs, _ = fixed.reset(options={"reset_mask": np.array([True, False])})
    assert obs.tolist() == [[0, 1, 0], [1, 0, 3]]  # row 1 keeps its (ended) step-3 observation


def test_async_make_is_refused_with_the_reason():
    with pytest.raises(gpu_envs.InvalidArgumentError, match="MOAsyncVectorEnv"):
        gpu_envs.make("deep-sea-treasure-v0", num_envs=2, device="cpu", vectorization="async")


def test_deep_sea_treasure_make_matches_sequential_mo_gymnasium():
    n, steps, seed = 4, 300, 5
    actions = _actions(n, steps, high=4, seed=1)
    want = sequential_reference(lambda i: mo_gymnasium.make("deep-sea-treasure-v0"), actions, seed=seed)
    with gpu_envs.make("deep-sea-treasure-v0", num_envs=n, device="cpu") as env:
        assert env.backend.name == "mo_gymnasium"
        got = batched_transitions(env, torch.as_tensor(actions), seed=seed)
    assert_same_transitions(got, want)
    assert want["terminated"].sum() > 10 and (want["reward"][..., 0] > 0).sum() > 10  # treasures found


def test_seeded_mo_runs_are_reproducible_and_seed_sub_env_i_with_seed_plus_i():
    actions = torch.as_tensor(_actions(3, 80, high=4))
    with gpu_envs.make("deep-sea-treasure-v0", num_envs=3, device="cpu") as env:
        check_seeding(env, lambda: mo_gymnasium.make("deep-sea-treasure-v0"), actions, seed=3)


def test_linear_reward_env_is_a_plain_scalar_gymnasium_env_with_its_vector_in_info():
    env = gpu_envs.wrap(mo_gymnasium.wrappers.LinearReward(MOCountingEnv(0), weight=np.array([1.0, 0.5])), device="cpu")
    assert env.backend.name == "gymnasium" and env.single_reward_spec.shape == (1,)
    traj = env.rollout(4, policy=lambda td: td.set("action", torch.zeros(1, dtype=torch.long)))
    vector = traj["next", "vector_reward"]
    assert vector.shape == (1, 4, 2)
    torch.testing.assert_close(traj["next", "reward"].squeeze(-1), vector[..., 0] + 0.5 * vector[..., 1])
    env.close()


def test_plain_sync_vector_env_of_mo_envs_is_refused_with_the_fix():
    venv = gym.vector.SyncVectorEnv([lambda: MOCountingEnv(0)] * 2)
    with pytest.raises(gpu_envs.NotAnEnvError, match="MOSyncVectorEnv"):
        gpu_envs.wrap(venv, device="cpu")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="frame_skip"):
        gpu_envs.wrap(MOCountingEnv(0), device="cpu", frame_skip=2)


# ---------------------------------------------------------------- consumers of the vector reward


@pytest.fixture
def mo_env():
    venv = MOSyncVectorEnv([lambda i=i: MOCountingEnv(i) for i in range(4)])
    with gpu_envs.wrap(venv, device="cpu") as env:
        yield env


def _zero_policy(td):
    return td.set("action", torch.zeros(4, dtype=torch.long))


def _counting_reward(traj) -> torch.Tensor:
    """MOCountingEnv's reward under action 0, from the (true final) next observation (index, episode, step)."""
    obs = traj["next", "observation"]
    return torch.stack([100 * obs[..., 0] + 10 * obs[..., 1] + obs[..., 2], -obs[..., 2]], dim=-1)


def test_rollout_buffer_and_collect_keep_the_vector_reward(mo_env):
    traj = collect(mo_env, _zero_policy, steps=12)
    reward = traj["next", "reward"]
    assert reward.shape == (4, 12, 2) and reward.dtype == torch.float32
    torch.testing.assert_close(reward, _counting_reward(traj))


def test_check_env_passes_on_an_mo_env():
    with gpu_envs.make("deep-sea-treasure-v0", num_envs=3, device="cpu") as env:
        report = check_env(env, steps=120)
    assert [r.status for r in report.results] == ["pass"] * len(report.results), report


def test_elementwise_reward_transforms_take_the_vector_and_keep_their_bounds(mo_env):
    env = TransformedEnv(mo_env, RewardScale(0.5), ClipReward(-3.0, 100.0))
    assert env.single_reward_spec.shape == (2,)
    assert env.single_reward_spec.low.tolist() == [-3.0, -3.0] and env.single_reward_spec.high.tolist() == [100.0, 0.0]
    traj = env.rollout(6, policy=_zero_policy)
    torch.testing.assert_close(traj["next", "reward"], (_counting_reward(traj) * 0.5).clamp(-3.0, 100.0))


def test_scalarize_reward_gives_the_weighted_sum_and_a_scalar_spec(mo_env):
    stats = EpisodeStats()
    env = TransformedEnv(mo_env, ScalarizeReward([1.0, 2.0]), stats)
    assert env.single_reward_spec.shape == (1,) and env.reward_spec.shape == (4, 1)
    assert env.single_reward_spec.low.item() == -np.inf and env.single_reward_spec.high.item() == np.inf
    traj = env.rollout(10, policy=_zero_policy)
    torch.testing.assert_close(traj["next", "reward"], _counting_reward(traj) @ torch.tensor([[1.0], [2.0]]))
    # every first episode lasts 3 steps: the scalar returns reach EpisodeStats
    first = traj["next", "episode_return"][:, 2, 0]
    torch.testing.assert_close(first, (300 * torch.arange(4.0) + 6) - 2 * 6)
    assert stats.summary().episodes >= 4


def test_scalarize_reward_bounds_follow_the_weights():
    venv = MOSyncVectorEnv([lambda: MOCountingEnv(0)])
    env = gpu_envs.wrap(venv, device="cpu")
    # objective 1 lies in [-10, 0]; objective 0 is unbounded, weighted 0 it adds nothing
    spec = TransformedEnv(env, ScalarizeReward([0.0, -3.0])).single_reward_spec
    assert (spec.low.item(), spec.high.item()) == (0.0, 30.0)
    with pytest.raises(gpu_envs.SpecError, match="3 weights"):
        TransformedEnv(env, ScalarizeReward([1.0, 2.0, 3.0]))
    for bad in ([], [[1.0, 2.0]], [1.0, float("nan")], "ab"):
        with pytest.raises(gpu_envs.InvalidArgumentError, match="ScalarizeReward weights"):
            ScalarizeReward(bad)
    env.close()


def test_consumers_that_need_a_scalar_reward_name_the_fix(mo_env):
    with pytest.raises(gpu_envs.SpecError, match=r"EpisodeStats needs one reward.*ScalarizeReward"):
        TransformedEnv(mo_env, EpisodeStats())
    traj = mo_env.rollout(5, policy=_zero_policy)
    value = torch.zeros(4, 5, 1)
    with pytest.raises(gpu_envs.SpecError, match=r"gae needs one reward.*shape \(2,\).*LinearReward"):
        gae(
            traj["next", "reward"],
            value,
            value,
            traj["next", "terminated"],
            traj["next", "truncated"],
            gamma=0.9,
            lam=0.9,
        )


def test_scalar_rewards_are_unchanged_for_other_backends():
    with gpu_envs.make("CartPole-v1", num_envs=3, device="cpu", backend="gymnasium") as env:
        assert env.backend.reward_spec is None and env.single_reward_spec.shape == (1,)
        assert env.rollout(3)["next", "reward"].shape == (3, 3, 1)
