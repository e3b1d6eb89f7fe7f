"""benchmarks/bench_summary_memory.py: every mode runs in its own process and the two summaries agree (sizes are its output)."""

from __future__ import annotations

from benchmarks import bench_summary_memory as bench


def test_each_mode_reports_a_peak_and_advance_counts_what_collect_counts():
    result = bench.run([(64, 40)])
    (row,) = result["rows"]
    assert row["floor_mb"] > 0 and row["advance_mb"] > 0 and row["collect_mb"] > 0
    assert row["same_episodes"] is True  # the same seed and draws: the same episodes ended
