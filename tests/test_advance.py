"""``advance``: stepping an env with no transition kept, for summaries in O(N) memory."""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import HealthCheckError, InvalidArgumentError
from gpu_envs.rollout import advance, collect
from gpu_envs.transforms import EpisodeStats, TransformedEnv


def stats_env(seed: int = 0) -> tuple[TransformedEnv, EpisodeStats]:
    stats = EpisodeStats()
    return TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=16, device="cpu", seed=seed), stats), stats


def test_advance_ends_where_a_collection_of_the_same_steps_ends():
    (a, stats_a), (b, stats_b) = stats_env(), stats_env()
    for steps in (7, 40, 3):  # the episodes carry over between calls, as collect's do
        root = advance(a, steps)
        traj = collect(b, None, steps)
        assert (root == b.root()).all()
        running = ~traj["next", "done"][:, -1, 0]  # rows whose last step did not end: next obs is the root's
        assert torch.equal(root["observation"][running], traj["next", "observation"][:, -1][running])
    summary_a, summary_b = stats_a.summary(), stats_b.summary()
    assert summary_a.episodes == summary_b.episodes > 0
    assert summary_a.mean_return == summary_b.mean_return


def test_advance_keeps_no_buffer_and_follows_a_policy():
    env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
    seen = []

    def push_left(td):
        seen.append(td["observation"].clone())
        return td.set("action", torch.zeros(8, dtype=torch.int64))

    root = advance(env, 5, push_left)
    assert len(seen) == 5 and "collect" not in env.caches
    # always pushing left: the cart's velocity only falls while no episode ended
    velocity = torch.stack([s[:, 1] for s in seen] + [root["observation"][:, 1]], 1)
    assert (velocity.diff(dim=1) < 0).all()


def test_bad_values_are_raised_at_the_end_of_advance():
    env = gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0)
    nan = torch.full((4, 1), float("nan"))
    with pytest.raises(HealthCheckError, match="advance"):
        advance(env, 3, lambda td: td.set("action", nan))
    env.reset()
    root = advance(env, 3)  # the record was cleared: the env goes on
    assert root["observation"].isfinite().all()


def test_bad_arguments_are_clear_errors():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    with pytest.raises(InvalidArgumentError, match="steps"):
        advance(env, 0)
    with pytest.raises(InvalidArgumentError, match="policy must be a callable"):
        advance(env, 3, policy=3)
    with pytest.raises(InvalidArgumentError, match="advance needs an env"):
        advance(object(), 3)
