"""benchmarks/bench_collect_grid.py: a row per (N, T) that fits, the ratios filled, the cells too large skipped."""

from __future__ import annotations

from benchmarks import bench_collect_grid as bench


def test_the_grid_has_a_row_per_cell_that_fits_and_skips_the_rest():
    result = bench.run(sizes=(1, 8), steps=(16, 64), rounds=1, max_elements=8 * 16, peers=True)
    assert [(r["N"], r["T"]) for r in result["rows"]] == [(1, 16), (1, 64), (8, 16)]
    assert result["skipped"] == [{"N": 8, "T": 64}]
    for row in result["rows"]:
        assert row["loop_ns"] > 0 and row["collect_ns"] > 0
        assert row["collect_vs_loop"].endswith("x") and row["cost_vs_t16"].endswith("x")
    assert "gymnasium_ns" in result["rows"][2] and "gymnasium_ns" not in result["rows"][0]  # a peer from N = 8


def test_the_loop_and_collect_contenders_step_the_env():
    loop, gathered = bench.loop_contender(4, 5), bench.collect_contender(4, 5)
    loop()
    gathered()
