"""benchmarks/bench_bootstrap.py --quick: every trainer's row is measured, and gpu_envs' targets are the exact ones.

(The sizes of the library defaults' errors and the learning results are benchmark output;
what is asserted is what must hold whatever the numbers: the exact column is zero up to
float rounding, and every library row saw time-outs.)
"""

from __future__ import annotations

import pytest

pytest.importorskip("rsl_rl")
pytest.importorskip("skrl")
pytest.importorskip("rl_games")

from benchmarks import bench_bootstrap as bench


@pytest.mark.slow
def test_quick_run_measures_every_trainer_and_exact_targets_are_exact(one_thread):
    result = bench.run(quick=True, seeds=2)
    rows = result["errors"]["rows"]
    measured = [row for row in rows if row["mae_default"] != "n/a"]
    assert {(row["trainer"], row["env"]) for row in measured} == {
        ("rsl_rl PPO", "Pendulum-v1"),
        *((trainer, env) for trainer in ("rl_games PPO", "skrl PPO", "skrl PPO time_limit_bootstrap")
          for env in ("Pendulum-v1", "CartPole-v1")),
    }  # fmt: skip
    for row in measured:
        assert row["time_outs"] > 0, row
        assert float(row["mae_exact"]) < 1e-4, row  # bootstrap_from stores r + gamma * V(s_T)
        assert float(row["mae_default"]) > float(row["mae_exact"]), row
    learning = result["learning"]
    assert [row["seeds"] for row in learning["rows"]] == [2, 2]
    assert "standard errors" in learning["verdict"]
