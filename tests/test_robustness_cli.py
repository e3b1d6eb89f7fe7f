"""The CLI: a user error is one line on stderr and exit status 2; Ctrl-C prints what was measured, exit 130."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_envs.cli import main
from tests.processes import PYTHON_WITH_SIGINT, Lines

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["rollout", "--num-envs", "0", "--steps", "3"], ["--num-envs must be >= 1"]),
        (["rollout", "--num-envs", "x"], ["--num-envs", "invalid int value", "--help"]),
        (["rollout", "--device", "banana", "--steps", "3"], ["device='banana'", "'cpu'"]),
        (["rollout", "--seed", "-1", "--steps", "3", "--device", "cpu"], ["seed=-1", "2**63 - 1"]),
        (["rollout", "NoSuchEnv-v0", "--steps", "3"], ["unknown env id 'NoSuchEnv-v0'"]),
        (["check", "CartPole-v1", "--backend", "nope"], ["unknown backend 'nope'"]),
        (["bench", "--json", "/no/such/dir/x.json", "--only", "overhead"], ["/no/such/dir", "does not exist"]),
        (["nosuchcommand"], ["invalid choice"]),
        (["check"], ["ENV_ID"]),
    ],
)
def test_user_errors_are_one_line_and_exit_status_2(capsys, argv, words):
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors exit from inside main
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


def test_bench_checks_its_output_path_before_running_anything(capsys, tmp_path, monkeypatch):
    import gpu_envs.cli.cmd_bench as bench

    monkeypatch.setattr(bench, "_load", lambda *a: pytest.fail("a benchmark ran before the output path was checked"))
    assert main(["bench", "--json", str(tmp_path), "--only", "overhead"]) == 2
    assert "is a directory" in capsys.readouterr().err
    # a path the permission bits allow (root passes os.access everywhere) but nothing can create
    assert main(["bench", "--json", "/proc/gpu_envs_bench.json", "--only", "overhead"]) == 2
    assert "cannot be written" in capsys.readouterr().err
    good = tmp_path / "bench.json"
    bench.check_output_path(str(good), "--json")  # passes, and its probe leaves no file behind
    assert not good.exists()


def test_debug_shows_the_traceback(capsys):
    from gpu_envs.contract.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError):
        main(["--debug", "rollout", "--device", "banana", "--steps", "3"])
    with pytest.raises(InvalidArgumentError):
        main(["rollout", "--device", "banana", "--steps", "3", "--debug"])


def test_an_unexpected_failure_is_one_line_with_the_way_to_the_traceback(capsys, monkeypatch):
    import gpu_envs.cli.cmd_list as cmd_list

    monkeypatch.setattr(cmd_list, "run", lambda args: {}["boom"])
    parser_main = main(["list"])
    err = capsys.readouterr().err
    assert (
        parser_main == 1
        and "unexpected error: KeyError" in err
        and "--debug" in err
        and len(err.strip().splitlines()) == 1
    )


# ----------------------------------------------------------------------------- Ctrl-C


def _interrupt(args, after, delay, limit):
    """Run ``gpu-envs *args``, send SIGINT ``delay`` s after stderr shows ``after``; ``(proc, out, err)``.

    The child gets Python's Ctrl-C handler even when this suite runs with SIGINT ignored
    (``PYTHON_WITH_SIGINT``), and every wait has a deadline: a child that never prints
    ``after`` or never exits fails the test and is killed.
    """
    proc = subprocess.Popen(
        [*PYTHON_WITH_SIGINT, "-m", "gpu_envs.cli", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        err.wait_for(after, within=limit)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=limit)
        return proc, out.text(within=30), err.text(within=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.sigint
def test_ctrl_c_during_rollout_prints_the_summary_so_far_and_exits_130():
    proc, out, err = _interrupt(
        ("rollout", "--num-envs", "16", "--steps", "100000000", "--device", "cpu"), "rolling out", 2.0, 120
    )
    assert proc.returncode == 130, err
    assert "interrupted after" in out and "episodes finished" in out and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.sigint
def test_ctrl_c_during_bench_prints_the_finished_benchmarks_and_saves_them(tmp_path):
    path = tmp_path / "partial.json"
    args = ("bench", "--quick", "--only", "overhead,gymnasium", "--json", str(path))
    proc, out, err = _interrupt(args, "overhead done", 1.0, 300)
    assert proc.returncode == 130, err
    assert "interrupted during gymnasium" in err and "Traceback" not in err
    assert [line.split()[:3] for line in out.splitlines() if line.split()[:1] == ["overhead"]]
    saved = json.loads(path.read_text())
    assert saved["interrupted"] == "gymnasium" and "overhead" in saved["results"]


def test_python_dash_m_gpu_envs_is_the_cli(monkeypatch, capsys):
    # `python -m gpu_envs` used to stop with "'gpu_envs' is a package and cannot be directly executed"
    import runpy

    monkeypatch.setattr(sys, "argv", ["gpu_envs", "rollout", "--num-envs", "0"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("gpu_envs", run_name="__main__", alter_sys=True)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--num-envs must be >= 1, got 0" in err


# ------------------------------------------------------ ids whose library is missing or not imported


def test_an_id_whose_library_is_missing_is_a_user_error_exit_2(capsys, monkeypatch):
    from gymnasium.error import DependencyNotInstalled

    import gpu_envs.cli.cmd_rollout as cmd_rollout

    # what gymnasium raises for LunarLander-v3 without Box2D (whether or not Box2D is installed here)
    def no_box2d(args):
        raise DependencyNotInstalled('Box2D is not installed, run `pip install "gymnasium[box2d]"`')

    monkeypatch.setattr(cmd_rollout, "make_env", no_box2d)
    assert main(["rollout", "LunarLander-v3", "--steps", "2", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not installed" in err and "gymnasium[box2d]" in err
    assert "unexpected error" not in err

    def no_module(args):
        raise ModuleNotFoundError("No module named 'mujoco'", name="mujoco")

    monkeypatch.setattr(cmd_rollout, "make_env", no_module)
    assert main(["rollout", "Ant-v5", "--steps", "2", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "'mujoco' is not installed" in err and "gymnasium[mujoco]" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_real_id_needing_box2d_exits_2_in_a_subprocess():
    import importlib.util

    if importlib.util.find_spec("Box2D") is not None:
        pytest.skip("Box2D is installed here: LunarLander-v3 runs")
    out = subprocess.run(
        [sys.executable, "-m", "gpu_envs.cli", "rollout", "LunarLander-v3", "--steps", "2", "--device", "cpu"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "not installed" in out.stderr and "box2d" in out.stderr.lower() and "Traceback" not in out.stderr


# ---------------------------------------------------------------------------- --record


@pytest.mark.slow
def test_rollout_record_writes_one_whole_episode_of_env_0(tmp_path, capsys):
    av = pytest.importorskip("av")
    out = tmp_path / "out.mp4"
    assert (
        main(
            [
                "rollout",
                "CartPole-v1",
                "--num-envs",
                "2",
                "--steps",
                "80",
                "--device",
                "cpu",
                "--seed",
                "3",
                "--record",
                str(out),
            ]
        )
        == 0
    )
    assert f"recorded 1 episode(s) of env 0: {out}" in capsys.readouterr().err
    with av.open(str(out)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        assert container.streams.video[0].average_rate == 50  # gymnasium's CartPole render_fps
    assert len(frames) >= 9 and frames[0].shape == (400, 600, 3)  # a random episode: 8+ steps, + the first frame
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.slow
def test_rollout_record_films_a_gymnasium_backend_env_through_its_rgb_array_render(tmp_path, capsys):
    """``--backend gymnasium --record`` once ended in ``AttributeError '_slots'`` (exit 1, "unexpected error")."""
    av = pytest.importorskip("av")
    out = tmp_path / "gym.mp4"
    argv = ["rollout", "CartPole-v1", "--backend", "gymnasium", "--num-envs", "2", "--steps", "80"]
    assert main([*argv, "--device", "cpu", "--seed", "3", "--record", str(out)]) == 0
    assert f"recorded 1 episode(s) of env 0: {out}" in capsys.readouterr().err
    with av.open(str(out)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) >= 9 and frames[0].shape == (400, 600, 3)


@pytest.mark.slow
def test_rollout_record_every_m_names_each_episode(tmp_path, capsys):
    pytest.importorskip("av")
    out = tmp_path / "v.mp4"
    assert (
        main(
            [
                "rollout",
                "--num-envs",
                "2",
                "--steps",
                "120",
                "--device",
                "cpu",
                "--record",
                str(out),
                "--record-every",
                "2",
            ]
        )
        == 0
    )
    names = sorted(p.name for p in tmp_path.glob("*.mp4"))
    assert names and all(re.fullmatch(r"v-episode\d+\.mp4", n) and int(n[9:-4]) % 2 == 0 for n in names), names
    assert f"recorded {len(names)} episode(s)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--record", "out.avi"], "ending in .mp4"),
        (["--record-every", "2"], "--record-every needs --record"),
        (["--record", "/no/such/dir/out.mp4"], "does not exist"),
    ],
)
def test_rollout_record_refuses_bad_arguments_before_running(argv, words, capsys):
    assert main(["rollout", "--steps", "3", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err


def test_rollout_record_without_pyav_names_the_extra(monkeypatch, capsys, tmp_path):
    import builtins

    real = builtins.__import__

    def no_av(name, *args, **kwargs):
        if name == "av":
            raise ModuleNotFoundError("No module named 'av'", name="av")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_av)
    assert main(["rollout", "--steps", "3", "--device", "cpu", "--record", str(tmp_path / "o.mp4")]) == 2
    assert "pip install '.[video]' in the gpu_envs clone" in capsys.readouterr().err


def test_rollout_of_a_multi_objective_env_sums_its_objectives(capsys):
    """``gpu-envs rollout mo-mountaincar-v0`` once exited 2: the CLI's own EpisodeStats refused vector rewards."""
    pytest.importorskip("mo_gymnasium")
    assert main(["rollout", "mo-mountaincar-v0", "--num-envs", "2", "--steps", "250", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "mean episode return (sum of 3" in out and "episodes finished" in out  # (rich may wrap the label)
