"""benchmarks/bench_raw_step.py: its torch.Generator reference draws from the Generator only, and its rows."""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_raw_step as bench


@pytest.mark.parametrize("env_id", list(bench.ENVS))
def test_the_generator_reference_resets_rows_from_its_generator(env_id):
    cls = bench.ENVS[env_id]
    env = bench.generator_env(cls, 64, seed=0, max_episode_steps=5)
    env.reset()
    counters = env.live_state()["rng_counter"].clone()
    action = torch.zeros(64, dtype=torch.long) if env_id == "CartPole-v1" else torch.zeros(64, 1)
    for _ in range(5):  # every row truncates at the fifth step
        env.step(action)
    draws = env._step_draws.buffer
    assert torch.equal(env.state, draws), "the ended rows took the Generator's candidates"
    low, high = (-0.05, 0.05) if env_id == "CartPole-v1" else (-torch.pi, torch.pi)
    assert bool((draws[:, 0] >= low).all()) and bool((draws[:, 0] < high).all())
    assert torch.equal(env.live_state()["rng_counter"], counters), "no per-row counters moved"


def test_rows_hold_the_three_ways_of_drawing():
    result = bench.run(quick=True, sizes=(8,), steps=3, rounds=1)
    assert [(row["env"], row["N"]) for row in result["rows"]] == [("CartPole-v1", 8), ("Pendulum-v1", 8)]
    for row in result["rows"]:
        assert all(row[f"{name}_us"] > 0 for name in ("generator", "direct", "pooled"))
        assert row["pooled_vs_generator"].endswith("%")
