"""benchmarks/bench_image_transforms.py: both sides compute the same values, and every row names what it timed."""

from __future__ import annotations

import importlib.util

from benchmarks import bench_image_transforms as bench


def test_the_table_has_every_work_and_size_and_torchrl_where_it_runs():
    result = bench.run(quick=True, sizes=(4,), rounds=1)  # check_same() ran first: the same values
    rows = {row["work"]: row for row in result["rows"]}
    assert set(rows) == {"to float, CHW", "grayscale", "resize 42x42", "centre crop 64x64"}
    assert all(row["gpu_envs_us"] > 0 and row["num_envs"] == 4 for row in rows.values())
    if importlib.util.find_spec("torchrl") is not None:
        assert rows["grayscale"]["ratio"].endswith("x") and rows["to float, CHW"]["ratio"].endswith("x")
    if not bench.torchvision_works():
        assert rows["resize 42x42"]["torchrl_us"].startswith("not timed")
