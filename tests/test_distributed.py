"""torchrun support (gpu_envs.distributed): shards, seeds, synced statistics, failures.

The slow tests launch real 2-process jobs on the CPU (gloo) with
``python -m torch.distributed.run`` (what the ``torchrun`` command runs), each process
running ``tests/distributed_worker.py``, and compare what the ranks saved with a
single process's run of all their envs. The fast ones check the merging arithmetic
in one process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import gpu_envs
from gpu_envs.distributed import current, sync_stats
from gpu_envs.rollout import collect
from gpu_envs.transforms import EpisodeStats, ObservationNorm, TransformedEnv
from tests import distributed_worker as worker
from tests.processes import run_tree

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(worker.__file__)


def torchrun(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node=2 ARGS`` from the repository root, this tree importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    return run_tree(cmd, timeout, cwd=ROOT, env=env)  # on a timeout the ranks are ended too


# ------------------------------------------------------------------ one process
def test_outside_torchrun_distributed_changes_nothing():
    assert current().world_size == 1 and current().rank == 0
    actions = worker.global_actions(4, 30)
    plain = gpu_envs.make("CartPole-v1", num_envs=4, backend="gymnasium", seed=5, device="cpu")
    dist_env = gpu_envs.make("CartPole-v1", num_envs=4, backend="gymnasium", seed=5, device="cpu", distributed=True)
    assert (dist_env.rank, dist_env.world_size) == (0, 1) and (plain.rank, plain.world_size) == (0, 1)
    a, b = worker.transitions(plain, actions), worker.transitions(dist_env, actions)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def _feed(env, actions: torch.Tensor) -> None:
    collect(env, worker.policy_from(actions), actions.shape[1])


def _stats_env(num_envs: int, offset: int, norm, stats):
    base = gpu_envs.make(
        "CartPole-v1", num_envs=num_envs, backend="gymnasium", seed=3, device="cpu", env_index_offset=offset
    )
    return TransformedEnv(base, stats, norm)


def test_merging_pending_stats_of_two_shards_equals_one_process_over_all_data():
    """Two in-process 'ranks' exchange pending_stats twice: no double counting, same result as one env."""
    n, steps = 4, 30
    actions = worker.global_actions(2 * n, 2 * steps, seed=2)
    whole_norm, whole_stats = ObservationNorm(), EpisodeStats()
    whole = _stats_env(2 * n, 0, whole_norm, whole_stats)
    shards = [(ObservationNorm(), EpisodeStats()) for _ in range(2)]
    envs = [_stats_env(n, r * n, *shards[r]) for r in range(2)]
    for phase in range(2):
        cols = slice(phase * steps, (phase + 1) * steps)
        _feed(whole, actions[:, cols])
        for r, env in enumerate(envs):
            _feed(env, actions[r * n : (r + 1) * n, cols])
        for kind in range(2):  # what sync_stats does with the gathered rows, on each "rank"
            rows = torch.stack([shards[r][kind].pending_stats() for r in range(2)])
            for r in range(2):
                shards[r][kind].merge_stats(rows)
        for r in range(2):
            norm, stats = shards[r]
            for key, value in whole_norm.statistics().items():
                # up to float32 rounding: each step's batch sums are float32 sums over its rows
                torch.testing.assert_close(norm.statistics()[key], value, rtol=1e-5, atol=1e-8, msg=key)
            assert stats.summary() == pytest.approx(whole_stats.summary())
            assert int(stats.episodes) == int(whole_stats.episodes) > 0
            # both ranks normalise with the same statistics
            obs = torch.randn(2 * n, 4)
            torch.testing.assert_close(
                norm._normalize("observation", obs), whole_norm._normalize("observation", obs), rtol=1e-5, atol=1e-6
            )
        for kind in range(2):  # bit for bit the same on both "ranks"
            for key, value in shards[0][kind].statistics().items():
                assert torch.equal(value, shards[1][kind].statistics()[key]), key
        assert not shards[0][0].pending_stats().any()


def test_sync_stats_in_one_process_keeps_the_statistics():
    norm, stats = ObservationNorm(), EpisodeStats()
    env = _stats_env(4, 0, norm, stats)
    env.rollout(50)
    before_norm, before_stats = norm.statistics(), stats.summary()
    sync_stats(env)
    for key, value in before_norm.items():
        torch.testing.assert_close(norm.statistics()[key], value, rtol=1e-12, atol=0)
    assert stats.summary() == before_stats
    env.rollout(20, reset=False)  # keeps accumulating on top of the folded-in base
    assert norm.count() == before_norm["observation.count"] + 4 * 20
    with pytest.raises(gpu_envs.InvalidArgumentError, match="sync_stats takes"):
        sync_stats("not a transform")


def test_loaded_statistics_are_not_recounted_by_a_sync():
    source = ObservationNorm()
    _stats_env(4, 0, source, EpisodeStats()).rollout(30)
    target = ObservationNorm()
    _stats_env(4, 0, target, EpisodeStats())
    target.load_statistics(source.statistics())
    assert not target.pending_stats().any()
    target.merge_stats(torch.stack([target.pending_stats()] * 2))  # two ranks that loaded the same checkpoint
    torch.testing.assert_close(target.statistics(), source.statistics())


def test_sharding_passes_env_index_offset_to_backends_that_take_it_and_refuses_the_others():
    from gpu_envs.factory import _shard_kwargs
    from gpu_envs.registry import get_plugin

    assert _shard_kwargs(get_plugin("gymnasium"), {"env_index_offset": 2}, 6) == {"env_index_offset": 8}
    assert _shard_kwargs(get_plugin("torch"), {}, 6) == {"env_index_offset": 6}  # the built-in envs' row keys
    shard = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", **_shard_kwargs(get_plugin("torch"), {}, 6))
    assert shard.backend.env.env_index_offset == 6
    with pytest.raises(gpu_envs.InvalidArgumentError, match="cannot give each process its own seed stream"):
        _shard_kwargs(get_plugin("isaaclab"), {}, 4)


# --------------------------------------------------------- real 2-process jobs
@pytest.fixture(scope="module")
def shard_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shards")
    proc = torchrun([str(WORKER), "shards", str(out)], timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out


def _single_process(backend: str) -> dict:
    total = 2 * worker.NUM_ENVS
    env = gpu_envs.make(worker.ENV_ID, num_envs=total, backend=backend, seed=worker.SEED, device="cpu")
    return worker.transitions(env, worker.global_actions(total, worker.STEPS))


def _check_shards(out: Path, backend: str) -> None:
    ranks = [torch.load(out / f"{backend}-rank{r}.pt") for r in range(2)]
    for r, got in enumerate(ranks):
        assert "error" not in got, got.get("error")
        assert (got["rank"], got["world_size"]) == (r, 2)
    want = _single_process(backend)
    n = worker.NUM_ENVS
    assert want["terminated"].any(), "the run covers auto-resets (their draws must follow the global index too)"
    for key, value in want.items():
        for r in range(2):
            assert torch.equal(ranks[r][key], value[r * n : (r + 1) * n]), (backend, key, r)
    # disjoint seed streams: no env of rank 0 starts like an env of rank 1
    first0, first1 = ranks[0]["observation"][:, 0], ranks[1]["observation"][:, 0]
    assert not (first0[:, None, :] == first1[None, :, :]).all(-1).any()


@pytest.mark.slow
def test_gymnasium_shards_together_equal_one_process_of_all_envs(shard_run):
    _check_shards(shard_run, "gymnasium")


@pytest.mark.slow
def test_builtin_shards_together_equal_one_process_of_all_envs(shard_run):
    """Built-in envs shard through env_index_offset (per-row counter-based RNG of the envs)."""
    _check_shards(shard_run, "torch")


@pytest.mark.slow
def test_synced_statistics_are_identical_on_ranks_and_equal_one_process(shard_run):
    ranks = [torch.load(shard_run / f"stats-rank{r}.pt") for r in range(2)]
    total = 2 * worker.NUM_ENVS
    norm, stats = ObservationNorm(), EpisodeStats()
    env = TransformedEnv(
        gpu_envs.make(worker.ENV_ID, num_envs=total, backend="gymnasium", seed=worker.SEED, device="cpu"), stats, norm
    )
    actions = worker.global_actions(total, 2 * worker.STATS_STEPS, seed=1)
    for phase in range(2):
        cols = slice(phase * worker.STATS_STEPS, (phase + 1) * worker.STATS_STEPS)
        collect(env, worker.policy_from(actions[:, cols]), worker.STATS_STEPS)
        for key in (f"norm{phase}", f"stats{phase}"):
            for name, value in ranks[0][key].items():
                assert torch.equal(value, ranks[1][key][name]), (key, name)  # bit for bit on both ranks
        for name, value in norm.statistics().items():
            torch.testing.assert_close(ranks[0][f"norm{phase}"][name], value, rtol=1e-5, atol=1e-8)
        for name, value in stats.statistics().items():
            torch.testing.assert_close(ranks[0][f"stats{phase}"][name], value, rtol=1e-12, atol=0)
    assert int(stats.episodes) > 0


@pytest.mark.slow
def test_a_rank_that_raises_fails_the_job_quickly(tmp_path):
    start = time.monotonic()
    proc = torchrun([str(WORKER), "raise", str(tmp_path)], timeout=600)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert "rank 1 fails on purpose" in proc.stdout + proc.stderr
    # quickly = by itself: the other rank would otherwise wait in its collective for gloo's 30-minute timeout
    # (a loaded machine takes longer to start two ranks, so no tighter bound holds)
    assert elapsed < 600, f"the job took {elapsed:.0f}s to fail"


@pytest.mark.slow
def test_cli_rollout_under_torchrun_prints_one_global_summary():
    proc = torchrun(
        [
            "-m",
            "gpu_envs.cli",
            "rollout",
            "--distributed",
            "--backend",
            "gymnasium",
            "--num-envs",
            "3",
            "--steps",
            "64",
        ],
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("gpu-envs rollout: CartPole-v1") == 1  # rank 0 only
    assert "processes (ranks)" in proc.stdout and "6 x 64" in proc.stdout
    episodes = int(next(line for line in proc.stdout.splitlines() if "episodes finished" in line).split()[-2])
    assert episodes > 6 * 64 // 40, "both ranks' episodes are counted (random CartPole lasts ~22 steps)"


@pytest.mark.slow
def test_ppo_example_learns_with_ddp_on_two_processes():
    example = ROOT / "examples" / "ppo_cartpole.py"
    proc = torchrun([str(example), "--distributed", "--quick", "--eval-episodes", "32"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["world_size"] == 2
    assert summary["env_steps"] >= 90_000
    assert summary["eval_return_greedy"] > 150 and summary["final_train_return"] > 100, summary


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (
            {"RANK": "1", "WORLD_SIZE": "2"},
            ["RANK=1", "WORLD_SIZE=2", "no LOCAL_RANK, MASTER_ADDR, MASTER_PORT", "torchrun"],
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
            ["no MASTER_ADDR, MASTER_PORT", "unset RANK and WORLD_SIZE"],
        ),
        ({"WORLD_SIZE": "4"}, ["no RANK, LOCAL_RANK"]),
        (
            {"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
            ["RANK='x' is not an integer"],
        ),
        (
            {"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
            ["0 <= RANK < WORLD_SIZE"],
        ),
    ],
)
def test_a_half_set_torchrun_environment_is_refused_not_run_as_rank_0_of_1(monkeypatch, env, words):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(gpu_envs.InvalidArgumentError) as err:
        gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", distributed=True)
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    assert not torch.distributed.is_initialized()


def test_cluster_wide_master_variables_alone_are_a_single_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", distributed=True)
    assert (env.rank, env.world_size) == (0, 1)
