"""What each process of the torchrun tests runs (tests/test_distributed.py launches it).

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/distributed_worker.py MODE OUT_DIR

Modes:

* ``shards``: for each backend in :data:`SHARD_BACKENDS`, this rank's shard of
  ``make(..., distributed=True)`` steps the rank's slice of one global action table
  (:func:`global_actions`) and saves its transitions to ``OUT_DIR/<backend>-rank<r>.pt``
  (an ``error`` entry instead when the shard cannot be built). Then ObservationNorm and
  EpisodeStats over a gymnasium shard, synced after each of two collections, saved to
  ``OUT_DIR/stats-rank<r>.pt``.
* ``raise``: rank 1 raises while rank 0 waits for it in a collective: the job must fail
  quickly, not hang.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import torch

import gpu_envs
from gpu_envs.distributed import init, shutdown, sync_stats
from gpu_envs.rollout import collect
from gpu_envs.transforms import EpisodeStats, ObservationNorm, TransformedEnv

ENV_ID = "CartPole-v1"
NUM_ENVS = 3  # per rank
STEPS = 60
SEED = 123
SHARD_BACKENDS = ("gymnasium", "torch")
STATS_STEPS = 40


def global_actions(total_envs: int, steps: int, seed: int = 0) -> torch.Tensor:
    """One action table ``[total_envs, steps]`` for the whole job (each rank takes its rows)."""
    return torch.randint(0, 2, (total_envs, steps), generator=torch.Generator().manual_seed(seed))


def transitions(env, actions: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every key of ``step_and_maybe_reset`` over ``actions`` ``[N, T]``, stacked ``[N, T, ...]``."""
    td = env.reset()
    out: dict[str, list] = {}
    for t in range(actions.shape[1]):
        td["action"] = actions[:, t].to(env.device)
        td, root = env.step_and_maybe_reset(td)
        for key, value in (
            ("observation", td["observation"]),
            ("next_observation", td["next", "observation"]),
            ("reward", td["next", "reward"]),
            ("terminated", td["next", "terminated"]),
            ("truncated", td["next", "truncated"]),
            ("root", root["observation"]),
        ):
            out.setdefault(key, []).append(value.cpu().clone())
        td = root
    return {key: torch.stack(values, dim=1) for key, values in out.items()}


def policy_from(actions: torch.Tensor):
    """A policy replaying ``actions`` ``[N, T]`` column by column (for ``collect``)."""
    column = iter(range(actions.shape[1]))

    def policy(td):
        td["action"] = actions[:, next(column)].to(td.device)
        return td

    return policy


def run_stats(rank: int, world: int) -> dict:
    """ObservationNorm + EpisodeStats over a gymnasium shard, synced after each of two collections."""
    norm, stats = ObservationNorm(), EpisodeStats()
    env = TransformedEnv(
        gpu_envs.make(ENV_ID, num_envs=NUM_ENVS, backend="gymnasium", seed=SEED, distributed=True), stats, norm
    )
    actions = global_actions(world * NUM_ENVS, 2 * STATS_STEPS, seed=1)[rank * NUM_ENVS : (rank + 1) * NUM_ENVS]
    saved = {}
    for phase in range(2):
        collect(env, policy_from(actions[:, phase * STATS_STEPS : (phase + 1) * STATS_STEPS]), STATS_STEPS)
        sync_stats(env)
        saved[f"norm{phase}"] = norm.statistics()
        saved[f"stats{phase}"] = stats.statistics()
    env.close()
    return saved


def main(mode: str, out_dir: Path) -> None:
    shard = init()
    rank, world = shard.rank, shard.world_size
    try:
        if mode == "raise":
            base = gpu_envs.make(ENV_ID, num_envs=NUM_ENVS, backend="gymnasium", distributed=True, device="cpu")
            env = TransformedEnv(base, ObservationNorm())
            env.rollout(8)
            if rank == 1:
                raise RuntimeError("rank 1 fails on purpose")
            sync_stats(env)  # never answered by rank 1
            return
        actions = global_actions(world * NUM_ENVS, STEPS)[rank * NUM_ENVS : (rank + 1) * NUM_ENVS]
        for backend in SHARD_BACKENDS:
            try:
                env = gpu_envs.make(
                    ENV_ID, num_envs=NUM_ENVS, backend=backend, seed=SEED, distributed=True, device="cpu"
                )
                result = {"rank": env.rank, "world_size": env.world_size, **transitions(env, actions)}
                env.close()
            except Exception:
                result = {"error": traceback.format_exc()}
            torch.save(result, out_dir / f"{backend}-rank{rank}.pt")
        torch.save(run_stats(rank, world), out_dir / f"stats-rank{rank}.pt")
    finally:
        shutdown()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
