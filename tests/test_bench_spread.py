"""benchmarks/timing.py's per-round tools: paired ratios, the median's confidence interval and the met / not met / unresolved verdict."""

from __future__ import annotations

import importlib.util
import itertools

import pytest

from benchmarks.timing import interleave_clocks, median_ci, paired_ratios, spread, spread_columns, verdict


def test_paired_ratios_pair_each_round_with_the_raw_step_of_that_round():
    per_round = {"raw": [1.0, 2.0, 4.0], "gpu_envs": [1.1, 2.0, 5.0]}
    assert paired_ratios(per_round, "gpu_envs") == [1.1, 1.0, 1.25]


def test_median_ci_is_the_binomial_order_statistics_interval():
    values = [float(v) for v in range(1, 16)]  # 15 rounds: the 4th..12th smallest (96.5%)
    assert median_ci(values) == (4.0, 12.0)
    assert median_ci([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)  # 6 rounds: only the range reaches 95%


def test_verdict_needs_the_whole_interval_of_the_median_on_one_side_of_the_limit():
    base = [1.00, 1.01, 1.02, 1.03, 1.04, 1.05]
    assert verdict(base + [1.03] * 9, 1.05) == "met"  # 15 rounds, 4th..12th smallest all <= 1.05
    assert verdict([v + 0.06 for v in base] + [1.09] * 9, 1.05) == "not met"
    assert verdict([1.00, 1.02, 1.04, 1.06, 1.08, 1.10] * 2, 1.05) == "unresolved"
    assert verdict([1.0, 1.0, 1.0, 1.0, 1.0], 1.05).startswith("unresolved")  # too few rounds to say


def test_spread_shows_median_interval_and_range_as_overheads():
    assert spread([1.0, 1.1, 1.2, 1.3, 1.4, 1.5]) == "+25.0% [+0.0%..+50.0%] (+0.0%..+50.0%)"


def test_interleave_clocks_reads_every_clock_around_the_same_rounds():
    ticks = itertools.count()
    fake = lambda: float(next(ticks))  # noqa: E731 - one tick per reading
    calls = {"raw": 0, "gpu_envs": 0}

    def bump(name):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    samples = interleave_clocks({n: bump(n) for n in calls}, steps=4, rounds=3, clocks={"a": fake, "b": fake}, warmup=1)
    assert calls == {"raw": 16, "gpu_envs": 16}  # (1 warmup + 3 rounds) x 4 steps
    assert set(samples) == {"a", "b"} and all(len(v) == 3 for by in samples.values() for v in by.values())
    # the clocks are read in order before and after each contender: a=t, b=t+1 ... a=t+2, b=t+3 -> 2 ticks / 4 steps
    assert samples["a"]["raw"] == [0.5, 0.5, 0.5]


def test_spread_columns_measure_the_distance_to_the_floor_per_round():
    cpu = {"raw": [1.0] * 6, "gpu_envs": [1.12] * 6, "floor": [1.10] * 6}
    thread = {"raw": [0.2] * 6, "gpu_envs": [0.3] * 6, "floor": [0.28] * 6}
    row = spread_columns({"cpu": cpu, "thread": thread}, 1.10, names=("gpu_envs", "floor"), wall=None)
    assert row["verdict"] == "not met"  # +12% every round
    assert row["gpu_envs_thread_pts"].startswith("+10.0%") and row["thread_verdict"] == "met"
    assert row["gpu_envs_floor_pts"].startswith("+2.0%")
    assert row["floor_spread"].startswith("+10.0%")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("envpool") is None, reason="envpool not installed (CI installs it)")
def test_envpool_rows_report_resolved_spreads_and_own_costs(monkeypatch):
    """simulator_rows' EnvPool rows (one pool for every contender): the spread, own-cost and verdict columns are there,
    and the CallClock saw the pool calls made inside gpu_envs (its own time is a part of its whole step)."""
    from benchmarks import simulator_rows

    monkeypatch.setattr(simulator_rows, "ENVPOOL_TASKS", {"CartPole-v1": {}})
    (row,) = simulator_rows.envpool_rows((4,), steps=3, rounds=6)
    for column in (
        "gpu_envs_spread",
        "floor_spread",
        "gpu_envs_thread_pts",
        "gpu_envs_own_pct",
        "verdict",
        "own_verdict",
    ):
        assert column in row, column
    assert row["verdict"] in ("met", "not met", "unresolved")
    rounds = row["per_round_us"]
    inside, thread = rounds["inside"], rounds["thread"]
    assert all(v == 0.0 for v in inside["raw"])  # raw calls the untimed pool.step
    assert all(0 < i <= t for i, t in zip(inside["gpu_envs"], thread["gpu_envs"], strict=True))
    assert 0 < row["gpu_envs_own_us"] < row["gpu_envs_us"]
