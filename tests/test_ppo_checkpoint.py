"""Checkpoint and resume of the PPO example are bit-exact across processes.

A run of K iterations straight, and the same run stopped after k iterations (its
checkpoint written) then resumed in a NEW process for the remaining K - k, end with the
same parameters, optimizer state, env state and per-iteration returns, bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.example_files import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]
# 6 iterations of 8 envs x 16 steps: episodes end and carry over between iterations
RUN = ["--num-envs", "8", "--steps", "16", "--total-steps", str(6 * 8 * 16), "--eval-episodes", "0", "--quiet"]


def _run(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "ppo_cartpole.py"), *RUN, *args],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes (floats compared bit for bit: -0.0 and NaN payloads too)."""
    return t.detach().reshape(-1).view(torch.uint8) if t.is_floating_point() else t


def _same(a, b, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(_bits(a), _bits(b)), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    else:
        assert repr(a) == repr(b), where


@pytest.mark.slow
def test_resumed_run_in_a_new_process_is_bitwise_the_straight_run(tmp_path):
    straight, stopped, resumed = (str(tmp_path / name) for name in ("straight.pt", "stopped.pt", "resumed.pt"))
    _run("--checkpoint", straight)
    _run("--checkpoint", stopped, "--stop-after", "2")
    _run("--resume", stopped, "--checkpoint", resumed)
    a = torch.load(straight, weights_only=False)
    b = torch.load(resumed, weights_only=False)
    k = torch.load(stopped, weights_only=False)
    assert a["iteration"] == b["iteration"] == 6 and k["iteration"] == 2
    assert len(a["history"]) == 6 and repr(a["history"][:2]) == repr(k["history"])
    assert not torch.equal(k["agent"]["actor.0.weight"], a["agent"]["actor.0.weight"])  # it did stop early
    for part in ("agent", "optimizer", "torch_rng", "running", "history"):
        _same(a[part], b[part], part)
    envs_a, envs_b = a["env"], b["env"]
    for key in envs_a.keys(include_nested=True, leaves_only=True):
        _same(envs_a.get(key), envs_b.get(key), f"env.{key}")


@pytest.mark.slow
def test_a_resume_with_any_other_run_option_is_refused(tmp_path):
    """``--resume`` with another ``--gamma`` was accepted (8 options were compared): the resume is promised
    bit-exact, so every option that changes the run must match."""
    saved = str(tmp_path / "run.pt")
    _run("--checkpoint", saved, "--stop-after", "1")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for other in (["--gamma", "0.9"], ["--clip", "0.1"], ["--threads", "2"]):
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "ppo_cartpole.py"), *RUN, "--resume", saved, *other],
            env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        name = other[0][2:].replace("-", "_")
        assert done.returncode != 0 and "options differ" in done.stderr and name in done.stderr, done.stderr[-2000:]
    _run("--resume", saved, "--eval-episodes", "0", "--quiet")  # the control options may differ
