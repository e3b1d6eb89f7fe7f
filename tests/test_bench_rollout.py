"""benchmarks/bench_rollout.py: its EnvPool contender, its rows and its target lines.

(The speeds themselves are benchmark output, never test assertions.)
"""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks import bench_rollout as bench

RATES = {bench.EAGER: 1e6, bench.COMPILED: 2e6, bench.GYMNASIUM: 1e5, bench.ENVPOOL: 4e5, bench.TORCHRL: 5e4}


def test_rows_compare_every_contender_with_envpool_gymnasium_and_torchrl():
    rows = {row["contender"]: row for row in bench.rate_rows(8, RATES)}
    compiled = rows[f"{bench.COMPILED} N=8"]
    assert compiled["vs_envpool"] == "5.00x" and compiled["vs_gymnasium"] == "20.00x" and compiled["vs_torchrl"] == "40.00x"
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
