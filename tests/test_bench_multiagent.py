"""benchmarks/bench_multiagent.py: VMAS by hand, through gpu_envs and through torchrl step the same scenario; a row per N."""

from __future__ import annotations

import pytest

pytest.importorskip("vmas")

from benchmarks import bench_multiagent as bench


def test_a_row_per_size_with_each_contenders_cost():
    result = bench.run(sizes=(8,), horizon=3, rounds=1)
    assert bench.run(sizes=(8,), steps=2, rounds=1)["rows"][0]["gpu_envs_us"] > 0  # no horizon
    (row,) = result["rows"]
    assert row["num_envs"] == 8 and row["raw_us"] > 0 and row["gpu_envs_us"] > 0 and row["own_us"] > 0
    assert row["own_share"].endswith("%")
    assert "[" in row["gpu_envs_spread"] and row["verdict"].startswith("unresolved")  # 1 round: no verdict


def test_the_contenders_reset_every_row_at_the_horizon():
    import torch

    actions = torch.zeros(4, bench.AGENTS, 2)
    step = bench.gpu_envs_contender(4, 2, actions)
    roots = [step() for _ in range(4)]
    assert roots[0]["agents", "observation"].shape == (4, bench.AGENTS, 18)
    raw = bench.raw_contender(4, 2, actions)
    obs, rewards = raw()
    assert len(obs) == bench.AGENTS and rewards[0].shape == (4,)


def test_the_own_contender_steps_gpu_envs_without_vmas():
    import torch

    actions = torch.zeros(4, bench.AGENTS, 2)
    step = bench.own_contender(4, actions)
    first, second = step()["agents", "observation"].clone(), step()["agents", "observation"]
    assert torch.equal(first, second)  # VMAS's step replaced by one cached result: nothing moves
