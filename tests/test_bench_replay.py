"""benchmarks/bench_replay.py --quick: both contenders run on the same stream and sizes (speeds are its output)."""

from __future__ import annotations

import pytest

pytest.importorskip("torchrl")

from benchmarks import bench_replay as bench


def test_both_buffers_sample_the_same_sizes_from_the_same_stream():
    ours = bench.gpu_envs_iteration(8, 1, 32)()
    theirs = bench.torchrl_iteration(8, 1, 32)()
    assert ours.batch_size[0] == theirs.batch_size[0] == 32
    for key in ("observation", "action", ("next", "observation"), ("next", "reward")):
        assert ours[key].shape[-1] == theirs[key].shape[-1], key


@pytest.mark.slow
def test_quick_run_fills_every_row(one_thread):
    result = bench.run(quick=True)
    assert len(result["rows"]) == len(bench.QUICK_CASES)
    for row in result["rows"]:
        assert row["gpu_envs_us"] > 0 and row["torchrl_us"] > 0 and row["speedup"].endswith("x")
