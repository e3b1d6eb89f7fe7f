"""The gpu-envs console script, run as a user would, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpu_envs.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpu_envs.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_rollout_default_env_prints_summary():
    out = run("rollout", "--num-envs", "32", "--steps", "300", "--device", "cpu", "--seed", "1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "CartPole-v1" in text and "env-steps/s" in text and "episodes finished" in text
    assert "mean episode return" in text and "mean episode length" in text
    finished = int(next(line for line in text.splitlines() if "episodes finished" in line).split()[-2])
    assert finished > 100  # random CartPole episodes last ~22 steps


@pytest.mark.slow
def test_rollout_pendulum():
    out = run("rollout", "Pendulum-v1", "--num-envs", "4", "--steps", "400", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if "mean episode length" in line)
    assert "200.0" in line


@pytest.mark.slow
def test_list_prints_builtin_ids():
    out = run("list")
    assert out.returncode == 0, out.stderr
    assert "torch" in out.stdout and "CartPole-v1" in out.stdout and "Pendulum-v1" in out.stdout
    # the engines a SimulatorEnv runs on, with their recipes, and rsl_rl-style VecEnvs
    assert "SimulatorEnv" in out.stdout and "examples/newton_pendulum.py" in out.stdout
    assert "MuJoCo Warp (not installed)" in out.stdout and "rsl_rl-style VecEnvs" in out.stdout


@pytest.mark.slow
def test_help_is_complete():
    out = run("rollout", "--help")
    assert out.returncode == 0
    for flag in ("--num-envs", "--steps", "--device", "--seed", "--backend", "ENV_ID"):
        assert flag in out.stdout


@pytest.mark.slow
def test_unknown_env_is_a_clear_error_not_a_traceback():
    out = run("rollout", "NoSuchEnv-v0", "--steps", "5")
    assert out.returncode == 2
    assert "unknown env id 'NoSuchEnv-v0'" in out.stderr and "Traceback" not in out.stderr


def test_every_subcommand_has_complete_help(capsys):
    # in-process (the parser is the same object the console script uses): fast
    flags = {
        "rollout": ("--num-envs", "--steps", "--device", "--seed", "--backend", "ENV_ID"),
        "check": ("--num-envs", "--steps", "--device", "--seed", "--backend", "ENV_ID", "exit code"),
        "bench": ("--quick", "--json", "--plot", "--only", "overhead", "gymnasium", "device", "rollout"),
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


@pytest.mark.slow
def test_check_reports_in_plain_words():
    out = run("check", "CartPole-v1", "--num-envs", "8", "--steps", "100", "--device", "cpu")
    assert out.returncode == 0, out.stdout + out.stderr
    for words in ("PASS  specs", "PASS  determinism", "PASS  final observations", "All 4 checks passed"):
        assert words in out.stdout


@pytest.mark.slow
def test_bench_quick_overhead_prints_one_ratio_table_and_saves_json(tmp_path):
    path = tmp_path / "bench.json"
    out = run("bench", "--quick", "--only", "overhead", "--json", str(path))
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines()]
    assert "speed vs raw env" in out.stdout and "speed vs torchrl" in out.stdout
    assert [line[:3] for line in lines if line[:1] == ["overhead"]] == [
        ["overhead", "N=1", "gpu_envs"],
        ["overhead", "N=64", "gpu_envs"],
        ["overhead", "collect", "N=64"],  # collect vs the plain raw loop
    ]
    saved = json.loads(path.read_text())
    assert saved["results"]["overhead"]["rows"][0]["N"] == 1 and len(saved["table"]) == 3
    assert "floor_us" in saved["results"]["overhead"]["rows"][0]


@pytest.mark.slow
def test_bench_plot_draws_a_valid_png(tmp_path):
    pytest.importorskip("matplotlib")  # the plot extra: CI installs it
    from matplotlib.image import imread

    path = tmp_path / "bench.png"
    out = run("bench", "--quick", "--only", "overhead", "--plot", str(path))
    assert out.returncode == 0, out.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 400
    assert image[..., :3].std() > 0.05  # something was drawn


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--plot", "/no/such/folder/b.png"], "does not exist"),
        (["--plot", "bench.txt"], "suffix"),
        (["--json", "."], "is a directory"),
        (["--json", "/no/such/folder/b.json"], "does not exist"),
    ],
)
def test_bench_refuses_bad_output_paths_before_running(args, message, capsys, monkeypatch):
    import gpu_envs.cli.cmd_bench as cmd_bench

    monkeypatch.setattr(cmd_bench, "benchmarks_dir", lambda: pytest.fail("ran before checking the paths"))
    assert main(["bench", "--quick", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_bench_plot_series_follow_the_tables():
    from gpu_envs.cli.bench_plot import collection_series, overhead_series

    overhead = {
        "rows": [
            {"N": 1, "raw_us": 10.0, "floor_us": 12.0, "gpu_envs_us": 13.0},
            {"N": 64, "raw_us": 20.0, "gpu_envs_us": 22.0, "torchrl_us": 200.0},
        ]
    }
    series = overhead_series(overhead)
    assert series["gpu_envs"] == [(1, 1.3), (64, 1.1)]
    assert series["floor (raw env + contract)"] == [(1, 1.2)] and series["torchrl"] == [(64, 10.0)]
    rollout = {
        "rows": [
            {"contender": "gpu_envs collect N=4096", "env_steps_per_s": 4e6},
            {"contender": "gpu_envs collect N=8", "env_steps_per_s": 2e4},
            {"contender": "gymnasium SyncVectorEnv N=8", "env_steps_per_s": 1e5},
            {"contender": "memory: 100 collections N=8 T=8", "note": "RSS ..."},
        ]
    }
    assert collection_series(rollout) == {
        "gpu_envs collect": [(8, 2e4), (4096, 4e6)],
        "gymnasium SyncVectorEnv": [(8, 1e5)],
    }


def test_bench_ratio_lines_from_times_rates_and_explicit_ratios():
    from gpu_envs.cli.cmd_bench import ratio_rows

    times = {
        "columns": [("N", "N")],
        "rows": [{"N": 64, "raw_us": 100.0, "gpu_envs_us": 125.0, "torchrl_us": 500.0, "gpu_envs_overhead": "+25%"}],
    }
    assert ratio_rows("overhead", times) == [
        {
            "benchmark": "overhead",
            "case": "N=64",
            "contender": "gpu_envs",
            "value": "125.0 us/step",
            "vs_raw": "0.80x",
            "vs_torchrl": "4.00x",
        }
    ]
    rates = {
        "columns": [("N", "N")],
        "rows": [{"N": 4096, "gymnasium_sps": 1e5, "gpu_envs_eager_sps": 2e6, "gpu_envs_compiled_steps_per_s": 4e6}],
    }
    lines = ratio_rows("rollout", rates)
    assert [(line["contender"], line["value"], line["vs_raw"], line["vs_torchrl"]) for line in lines] == [
        ("gpu_envs_eager", "2.00M steps/s", "20.00x (gymnasium)", "n/a"),
        ("gpu_envs_compiled", "4.00M steps/s", "40.00x (gymnasium)", "n/a"),
    ]
    long_rows = {
        "columns": [("contender", "contender")],
        "rows": [
            {"contender": "gpu_envs collect N=4096", "steps_per_s": "2,000,000", "env_steps_per_s": 2e6},
            {"contender": "gymnasium SyncVectorEnv N=4096", "env_steps_per_s": 1e5},
            {"contender": "torchrl rollout N=4096", "env_steps_per_s": 4e5},
            {"contender": "memory: 100 collections", "note": "RSS +0.00 MiB", "growth_bytes": 0},
        ],
    }
    lines = ratio_rows("rollout", long_rows)
    assert [(line["case"], line["contender"], line["vs_raw"], line["vs_torchrl"]) for line in lines] == [
        ("N=4096", "gpu_envs collect", "20.00x (gymnasium SyncVectorEnv)", "5.00x"),
        ("", "memory: 100 collections", "", ""),
    ]
    assert lines[1]["value"] == "RSS +0.00 MiB"
    given = {
        "rows": [],
        "ratios": [{"case": "N=1", "contender": "gpu_envs", "value": "1", "vs_raw": "1.0x", "vs_torchrl": "n/a"}],
    }
    assert ratio_rows("device", given)[0]["benchmark"] == "device"


def test_bench_without_a_source_checkout_is_a_clear_error(tmp_path, monkeypatch, capsys):
    import gpu_envs

    monkeypatch.setattr(gpu_envs, "__file__", str(tmp_path / "site-packages" / "gpu_envs" / "__init__.py"))
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "no benchmarks found" in err and "pip install -e ." in err
