"""torchrun: one env shard per process, seeds that never overlap, statistics made global.

Many GPUs (and nodes) train one policy by running one process per GPU, each with its
own shard of the environments, and averaging gradients (PyTorch DDP). This module is
the env side of that, on top of ``torch.distributed`` as ``torchrun`` sets it up::

    torchrun --standalone --nproc_per_node=2 train.py --distributed

    # train.py
    env = gpu_envs.make("CartPole-v1", num_envs=4096, distributed=args.distributed)
    env.rank, env.world_size          # this process's shard: 0..world_size-1, of world_size
    ...
    traj = collect(env, policy, steps=64)
    gpu_envs.distributed.sync_stats(env)   # ObservationNorm / EpisodeStats: global now

The conventions are Isaac Lab's (``--distributed`` flag, one shard per GPU):

* ``num_envs`` is PER PROCESS: ``world_size`` processes run ``world_size * num_envs``
  envs in all;
* the device is ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU (an explicit
  ``device=`` wins);
* rank ``r``'s env ``i`` is global env ``r * num_envs + i`` and gets that env's seed
  stream: the built-in envs through their ``env_index_offset``, the gymnasium backend
  by seeding sub-env ``i`` with ``seed + r * num_envs + i``. With the same base seed,
  the shards of ``world_size`` processes together are exactly a single process's run of
  ``world_size * num_envs`` envs.

The process group: ``make(..., distributed=True)`` calls :func:`init`, which uses the
default process group when the script already initialised one, else initialises it
from torchrun's environment variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) with NCCL on CUDA and gloo on the CPU. Without
either (a plain ``python train.py --distributed``), it is a single process: world
size 1, rank 0, and ``make`` behaves exactly as without ``distributed=True``. A
half-set torchrun environment (``RANK`` or ``WORLD_SIZE`` set, another of the five
missing, or values that are not ranks) is refused with an error naming what is missing:
quietly running it as rank 0 of 1 would have each process of a multi-process job train
alone on the same seeds.

Statistics: :class:`~gpu_envs.transforms.ObservationNorm` and
:class:`~gpu_envs.transforms.EpisodeStats` keep per-process statistics on the hot
path (no communication per step). :func:`sync_stats`, called by every process at a
collection boundary, merges what each process saw since the last sync (counts, means
and M2 by Chan's parallel formula; episode counts and sums) in ONE collective, so
that afterwards every process normalises with the same statistics and reports global
episode figures.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.transforms.base import Transform

__all__ = ["Shard", "all_max", "current", "init", "shutdown", "sync_stats"]

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
_initialised_here = False


@dataclass(frozen=True)
class Shard:
    """Where this process stands: ``rank`` of ``world_size``, ``local_rank`` on its node, its ``device``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the process that prints and saves."""
        return self.rank == 0

    def env_index_offset(self, num_envs: int) -> int:
        """Global index of this shard's first env when each process runs ``num_envs``."""
        return self.rank * num_envs


def _shard_device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def _launched_by_torchrun() -> bool:
    """True when torchrun's environment variables are all set; an error when they are half set.

    ``RANK`` or ``WORLD_SIZE`` on its own says a multi-process job was meant (a launcher
    that sets them, a script that exports them by hand); without the rest, the process
    group cannot be joined, and going on as a single process would train every process
    alone. ``MASTER_ADDR``/``MASTER_PORT``/``LOCAL_RANK`` alone are left alone: clusters
    export them for everyone.
    """
    present = [name for name in TORCHRUN_VARS if name in os.environ]
    if "RANK" not in present and "WORLD_SIZE" not in present:
        return False
    missing = [name for name in TORCHRUN_VARS if name not in present]
    if missing:
        shown = ", ".join(f"{name}={os.environ[name]}" for name in present)
        raise InvalidArgumentError(
            f"distributed=True found a half-set torchrun environment: {shown} but no {', '.join(missing)}. "
            "Launch with torchrun (e.g. `torchrun --standalone --nproc_per_node=2 train.py --distributed`), "
            "which sets all of RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; set the missing ones; "
            "or unset RANK and WORLD_SIZE to run as a single process."
        )
    values = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"):
        try:
            values[name] = int(os.environ[name])
        except ValueError:
            raise InvalidArgumentError(
                f"distributed=True: {name}={os.environ[name]!r} is not an integer; torchrun sets it to one."
            ) from None
    if not 0 <= values["RANK"] < values["WORLD_SIZE"] or values["LOCAL_RANK"] < 0:
        raise InvalidArgumentError(
            f"distributed=True: RANK={values['RANK']}, WORLD_SIZE={values['WORLD_SIZE']}, "
            f"LOCAL_RANK={values['LOCAL_RANK']} do not describe a process of the job (0 <= RANK < WORLD_SIZE, "
            "LOCAL_RANK >= 0); launch with torchrun, which sets them."
        )
    return True


def current() -> Shard:
    """This process's shard, without initialising anything (world size 1 outside a process group)."""
    if dist.is_available() and dist.is_initialized():
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        return Shard(dist.get_rank(), dist.get_world_size(), local_rank, _shard_device(local_rank))
    if torch.cuda.is_available():
        return Shard(device=torch.device("cuda", torch.cuda.current_device()))
    return Shard()


def init(backend: str | None = None, timeout_s: float | None = None) -> Shard:
    """Join the job's process group and return this process's :class:`Shard`.

    Uses the default process group when one is initialised; else initialises it from
    torchrun's environment variables (``backend=None``: NCCL when CUDA is available,
    gloo otherwise; ``timeout_s``: how long a collective may wait for the other
    processes, torch's default when ``None``) and makes ``cuda:LOCAL_RANK`` the current
    CUDA device; else (not launched by torchrun) returns a single-process shard. A
    half-set torchrun environment raises :class:`~gpu_envs.InvalidArgumentError`.

    Example::

        shard = gpu_envs.distributed.init()
        print(f"rank {shard.rank} of {shard.world_size} on {shard.device}")
    """
    global _initialised_here
    if not dist.is_available():
        return current()
    if not dist.is_initialized():
        if not _launched_by_torchrun():
            return current()
        local_rank = int(os.environ["LOCAL_RANK"])
        device = _shard_device(local_rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        kwargs: dict[str, Any] = {"backend": backend or ("nccl" if device.type == "cuda" else "gloo")}
        if timeout_s is not None:
            kwargs["timeout"] = datetime.timedelta(seconds=timeout_s)
        if device.type == "cuda":
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)
        _initialised_here = True
    return current()


def shutdown() -> None:
    """Destroy the process group if :func:`init` created it (call once, at the end)."""
    global _initialised_here
    if _initialised_here and dist.is_initialized():
        dist.destroy_process_group()
    _initialised_here = False


def _transforms(items: Iterable[Any]) -> list[Transform]:
    """The transforms among ``items``, looking inside (nested) TransformedEnvs."""
    found: list[Transform] = []
    for item in items:
        if isinstance(item, Transform):
            found.append(item)
        elif hasattr(item, "transforms") and hasattr(item, "env"):
            found.extend(_transforms([item.env]))
            found.extend(t for t in item.transforms if isinstance(t, Transform))
        elif not hasattr(item, "backend"):  # a plain BatchedEnv has nothing to sync
            raise InvalidArgumentError(
                f"sync_stats takes transforms (ObservationNorm, EpisodeStats) or TransformedEnvs, got {type(item).__name__}."
            )
    return found


def sync_stats(*items: Any, group: Any = None) -> None:
    """Merge the statistics of every process into every process, in ONE collective.

    ``items`` are transforms or (Transformed)envs whose transforms are looked at; those
    with statistics (:class:`~gpu_envs.transforms.ObservationNorm`,
    :class:`~gpu_envs.transforms.EpisodeStats`) contribute what they saw since the last
    sync. Every process of ``group`` (default: the whole job) must call it with the
    same transforms, in the same order, at the same point (a collection boundary).
    Outside a process group it only folds the local statistics in (results unchanged).
    Synchronises with the host once: call it between collections, not per step.

    Example::

        traj = collect(env, policy, steps=64)
        gpu_envs.distributed.sync_stats(env)       # same ObservationNorm on every rank
    """
    parts = [(t, t.pending_stats()) for t in _transforms(items)]
    parts = [(t, p) for t, p in parts if p is not None]
    if not parts:
        return
    local = torch.cat([p.reshape(-1).to(torch.float64) for _, p in parts])
    gathered = _all_gather(local, group)
    start = 0
    for t, p in parts:
        t.merge_stats(gathered[:, start : start + p.numel()].to(p.device))
        start += p.numel()


def _all_gather(local: torch.Tensor, group: Any) -> torch.Tensor:
    """``[world_size, L]``: every process's ``local`` ``[L]``, in rank order (``[1, L]`` alone)."""
    if not (dist.is_available() and dist.is_initialized()):
        return local.unsqueeze(0)
    device = local.device if dist.get_backend(group) != "gloo" else torch.device("cpu")
    local = local.to(device)
    world = dist.get_world_size(group)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([local.numel()], dtype=torch.int64, device=device), group=group)
    if len({int(s) for s in sizes}) != 1:
        raise InvalidArgumentError(
            f"sync_stats got statistics of different sizes from the processes ({[int(s) for s in sizes]} values): "
            "every rank must sync the same transforms over the same observation keys, in the same order."
        )
    out = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(out, local, group=group)
    return torch.stack(out)


def all_max(value: float, group: Any = None) -> float:
    """The largest ``value`` over every process (``value`` itself outside a process group).

    E.g. the wall time of a collection: the job is as slow as its slowest process.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return float(value)
    device = torch.device("cpu") if dist.get_backend(group) == "gloo" else current().device
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())
