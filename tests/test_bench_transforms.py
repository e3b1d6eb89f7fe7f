"""benchmarks/bench_transforms.py: every contender steps its own env and each row names every transform's overhead."""

from __future__ import annotations

import torch

from benchmarks import bench_transforms as bench


def test_the_eager_table_has_a_row_per_env_and_size_with_every_overhead():
    result = bench.run(quick=True, sizes=(8,), steps=3, rounds=1, compiled=False)
    assert [(r["env"], r["num_envs"]) for r in result["rows"]] == [("CartPole-v1", 8), ("Pendulum-v1", 8)]
    for row in result["rows"]:
        assert row["raw_us"] > 0
        for name in ("empty", "history", "delay", "init_tracker", "all_three", "history_torch", "delay_torch"):
            assert row[f"{name}_overhead"].endswith("%"), name
        assert row["history_outputs_overhead"].endswith("%")
    assert result["compiled"]["rows"] == []


def test_each_contender_runs_the_transforms_it_names():
    steps = bench.contenders("Pendulum-v1", 4)
    for name in ("raw", "empty", "history", "delay", "init_tracker", "all_three"):
        root = steps[name]()
        if name in ("history", "all_three"):
            assert root["observation"].shape == (4, 4, 3), name
        if name in ("init_tracker", "all_three"):
            assert "is_init" in root, name
        if name in ("raw", "empty", "delay"):
            assert root["observation"].shape == (4, 3), name
    # the torch-op contenders run the same transforms without their C kernel; the floor hands out windows
    assert steps["history_torch"]()["observation"].shape == (4, 4, 3)
    assert steps["history_outputs"]()["observation"].shape == (4, 4, 3)
    assert steps["delay_torch"]()["observation"].shape == (4, 3)


def test_the_torch_op_contenders_run_without_the_kernel_and_the_others_with_it(monkeypatch):
    from gpu_envs.transforms import native_rows

    envs = {}
    real = bench.stepper

    def keep(env):
        envs[len(envs)] = env
        return real(env)

    monkeypatch.setattr(bench, "stepper", keep)
    names = list(bench.contenders("CartPole-v1", 4))
    by_name = dict(zip(names, envs.values(), strict=True))
    kernel = native_rows.kernels(torch.device("cpu")) is not None
    assert by_name["history"].transforms[0].native == kernel
    assert not by_name["history_torch"].transforms[0].native
    assert not by_name["delay_torch"].transforms[0].native
