"""benchmarks/bench_rollout.py: its EnvPool contender, its rows and its target lines.

(The speeds themselves are benchmark output, never test assertions.)
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from benchmarks import bench_rollout as bench

RATES = {bench.EAGER: 1e6, bench.COMPILED: 2e6, bench.GYMNASIUM: 1e5, bench.ENVPOOL: 4e5, bench.TORCHRL: 5e4}


def test_rows_compare_every_contender_with_envpool_gymnasium_and_torchrl():
    rows = {row["contender"]: row for row in bench.rate_rows(8, RATES)}
    compiled = rows[f"{bench.COMPILED} N=8"]
    assert (
        compiled["vs_envpool"] == "5.00x"
        and compiled["vs_gymnasium"] == "20.00x"
        and compiled["vs_torchrl"] == "40.00x"
    )
    assert compiled["note"] == "compiled / eager = 2.00"
    assert rows[f"{bench.ENVPOOL} N=8"]["vs_envpool"] == "1.00x"


def test_without_envpool_its_row_says_why_and_the_targets_say_not_measured():
    rates = {k: v for k, v in RATES.items() if k != bench.ENVPOOL}
    rows = bench.rate_rows(8, rates) + bench.rate_rows(4096, rates)
    missing = [row for row in rows if row["contender"].startswith(bench.ENVPOOL)]
    assert [row["note"] for row in missing] == [bench.ENVPOOL_MISSING] * 2
    assert all("vs_envpool" not in row for row in rows)
    lines = bench.targets(rows)
    assert lines[0].startswith("compiled >= 1x EnvPool at N=8: not measured")
    assert lines[-1] == "compiled >= eager at N=4096: 2.00x -> met"


def test_targets_read_met_and_not_met_from_the_rows():
    rows = bench.rate_rows(8, RATES) + bench.rate_rows(4096, {**RATES, bench.COMPILED: 3e6, bench.ENVPOOL: 1e6})
    assert bench.targets(rows) == [
        "compiled >= 1x EnvPool at N=8: 5.00x -> met",
        "compiled >= 10x EnvPool at N=4096: 3.00x -> NOT met",
        "compiled >= eager at N=4096: 3.00x -> met",
    ]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("envpool") is None, reason="envpool not installed (CI installs it)")
def test_envpool_contender_steps_cartpole():
    step, env_steps = bench.envpool_contender(8, 5)
    step()
    assert env_steps == 40


def test_image_rows_and_their_target_lines():
    rows = [
        {"contender": "uint8 frames: SyntheticFrames N=8 threads=1", "vs_single": "+4.0%", "collect_vs_single": 0.04},
        {"contender": "uint8 frames: EnvPool Pong-v5 N=8 threads=2", "vs_single": "+12.5%", "collect_vs_single": 0.125},
    ]
    assert bench.targets(rows) == [
        "uint8 collect <= +10% of single steps, SyntheticFrames N=8 threads=1: +4.0% -> met",
        "uint8 collect <= +10% of single steps, EnvPool Pong-v5 N=8 threads=2: +12.5% -> NOT met",
    ]


@pytest.mark.slow
def test_image_row_measures_the_synthetic_frames_env():
    from benchmarks.image_envs import SyntheticFrames

    row = bench.image_row("SyntheticFrames", SyntheticFrames, 2, steps=3, rounds=1, threads=1)
    assert row["contender"] == "uint8 frames: SyntheticFrames N=2 threads=1"
    assert row["single_us"] > 0 and row["collect_us"] > 0 and row["vs_single"].endswith("%")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("envpool") is None, reason="envpool not installed (CI installs it)")
def test_envpool_frames_are_same_step_with_true_final_frames():
    """EnvPoolFrames resets ended rows within the step: the next step of such a row starts from a fresh episode."""
    from benchmarks.image_envs import EnvPoolFrames

    env = EnvPoolFrames(2, max_episode_steps=5)
    first, _ = env.reset()
    for t in range(1, 6):
        obs, _, terminated, truncated, info = env.step(torch.randint(0, 6, (2,)))
        assert obs.dtype == torch.uint8 and obs.shape == (2, 4, 84, 84)
        assert (terminated | truncated).tolist() == [t == 5, t == 5]
    assert not torch.equal(info["final_obs"], obs)  # the final frames, not the reset ones
    assert torch.equal(obs, first)  # a reset Pong screen (the same at every start)
    step = env.pool.step(np.zeros(2, np.int64))  # EnvPool's own counter: these rows were reset, not left pending
    assert step[4]["elapsed_step"].tolist() == [1, 1]
    env.close()
