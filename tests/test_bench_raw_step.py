"""benchmarks/bench_raw_step.py: its torch.Generator reference does the shipped env's work, and its rows.

The reference is only meaningful as the same physics with the old draws: until a row
resets, it must step exactly like the shipped env.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_raw_step as bench


@pytest.mark.parametrize("env_id", list(bench.ENVS))
def test_the_generator_reference_steps_the_shipped_physics(env_id):
    shipped_cls, reference_cls = bench.ENVS[env_id]
    shipped, reference = shipped_cls(64, seed=0), reference_cls(64, seed=0)
    shipped.reset()
    reference.reset()
    reference.state = shipped.state
    ended = torch.zeros(64, dtype=torch.bool)
    generator = torch.Generator().manual_seed(0)
    for _ in range(30):
        if env_id == "CartPole-v1":
            action = torch.randint(0, 2, (64,), generator=generator)
        else:
            action = torch.rand(64, 1, generator=generator) * 4 - 2
        got, expected = shipped.step(action), reference.step(action)
        same = ~ended  # rows that never reset (where the draws differ) in either env
        for a, b in zip(got[1:4], expected[1:4], strict=True):  # reward and flags
            assert torch.equal(a[same], b[same])
        ended |= got[2] | got[3]
        torch.testing.assert_close(got[0][~ended], expected[0][~ended], rtol=1e-6, atol=1e-6)
    assert (~ended).any(), "rows left to compare"


def test_rows_hold_the_three_ways_of_drawing():
    result = bench.run(quick=True, sizes=(8,), steps=3, rounds=1)
    assert [(row["env"], row["N"]) for row in result["rows"]] == [("CartPole-v1", 8), ("Pendulum-v1", 8)]
    for row in result["rows"]:
        assert all(row[f"{name}_us"] > 0 for name in ("generator", "direct", "pooled"))
        assert row["pooled_vs_generator"].endswith("%")
