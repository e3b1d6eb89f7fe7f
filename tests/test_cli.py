"""The gpu-envs console script, run as a user would, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpu_envs.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpu_envs.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_rollout_default_env_prints_summary():
    out = run("rollout", "--num-envs", "32", "--steps", "300", "--device", "cpu", "--seed", "1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "CartPole-v1" in text and "env-steps/s" in text and "episodes finished" in text
    assert "mean episode return" in text and "mean episode length" in text
    finished = int(next(line for line in text.splitlines() if "episodes finished" in line).split()[-2])
    assert finished > 100  # random CartPole episodes last ~22 steps


def test_rollout_pendulum():
    out = run("rollout", "Pendulum-v1", "--num-envs", "4", "--steps", "400", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if "mean episode length" in line)
    assert "200.0" in line


def test_list_prints_builtin_ids():
    out = run("list")
    assert out.returncode == 0, out.stderr
    assert "torch" in out.stdout and "CartPole-v1" in out.stdout and "Pendulum-v1" in out.stdout


def test_help_is_complete():
    out = run("rollout", "--help")
    assert out.returncode == 0
    for flag in ("--num-envs", "--steps", "--device", "--seed", "--backend", "ENV_ID"):
        assert flag in out.stdout


def test_unknown_env_is_a_clear_error_not_a_traceback():
    out = run("rollout", "NoSuchEnv-v0", "--steps", "5")
    assert out.returncode == 2
    assert "unknown env id 'NoSuchEnv-v0'" in out.stderr and "Traceback" not in out.stderr


def test_every_subcommand_has_complete_help(capsys):
    # in-process (the parser is the same object the console script uses): fast
    flags = {
        "rollout": ("--num-envs", "--steps", "--device", "--seed", "--backend", "ENV_ID"),
        "check": ("--num-envs", "--steps", "--device", "--seed", "--backend", "ENV_ID", "exit code"),
        "bench": ("--quick", "--json", "--only", "overhead", "gymnasium", "device", "rollout"),
        "list": ("backend",),
    }
    for argv in [["--help"]] + [[command, "--help"] for command in flags]:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
        text = capsys.readouterr().out
        for word in flags.get(argv[0], tuple(flags)):
            assert word in text, (argv, word)


def test_bad_arguments_are_clear_errors(capsys):
    assert main(["check", "CartPole-v1", "--steps", "0", "--device", "cpu"]) == 2
    assert "--steps must be >= 1" in capsys.readouterr().err
    assert main(["bench", "--only", "overhead,nope"]) == 2
    assert "choose among overhead, gymnasium, device, rollout" in capsys.readouterr().err


def test_check_reports_in_plain_words():
    out = run("check", "CartPole-v1", "--num-envs", "8", "--steps", "100", "--device", "cpu")
    assert out.returncode == 0, out.stdout + out.stderr
    for words in ("PASS  specs", "PASS  determinism", "PASS  final observations", "All 4 checks passed"):
        assert words in out.stdout


def test_bench_quick_overhead_prints_one_ratio_table_and_saves_json(tmp_path):
    path = tmp_path / "bench.json"
    out = run("bench", "--quick", "--only", "overhead", "--json", str(path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "speed vs raw env" in out.stdout and "speed vs torchrl" in out.stdout
    assert [line.split()[:3] for line in lines if line.startswith("overhead")] == [
        ["overhead", "N=1", "gpu_envs"],
        ["overhead", "N=64", "gpu_envs"],
    ]
    saved = json.loads(path.read_text())
    assert saved["results"]["overhead"]["rows"][0]["N"] == 1 and len(saved["table"]) == 2
