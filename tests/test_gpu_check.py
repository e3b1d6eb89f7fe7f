"""benchmarks/gpu_check.py cannot rot: its CPU smoke run (every step that can run without a
GPU, at tiny sizes) passes here, its time budget skips what does not fit and says so, and
without CUDA (and without --smoke) it stops with a clear message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_smoke_run_passes_every_step(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--smoke", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "8 checks passed, 0 failed, 0 skipped" in proc.stdout
    result = json.loads(out.read_text())
    assert result["smoke"] and [c["ok"] for c in result["checks"]] == ["PASS"] * 8
    assert result["checks"][6]["detail"].startswith("VMAS navigation: N=8: by hand")
    assert result["checks"][7]["detail"].startswith("CartPole transforms over the bare step: N=8: bare")
    assert "emulated graphs (CPU): counting env identical; CartPole identical" in result["checks"][2]["detail"]
    assert [row["N"] for row in result["rows"]] == [8, 64]
    for row in result["rows"]:
        assert row["eager_rate"] > 0 and row["compile_rate"] > 0


def test_budget_skips_what_does_not_fit_and_says_so(capsys):
    assert gpu_check.main(["--smoke", "--budget-s", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "0 checks passed, 0 failed, 12 skipped" in out
    assert "skipped (budget): pytest tests/test_sync_guard.py tests/test_draw_pool.py tests/test_native_step.py" in out
    assert "skipped (budget): N=64 compile" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_without_cuda_it_says_so_and_points_to_smoke(capsys):
    assert gpu_check.main([]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device is visible" in err and "--smoke" in err
