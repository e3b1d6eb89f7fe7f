"""``EpisodeStats``: episode returns and lengths, tracked on the device without a sync.

Per env it keeps the running return and length of the current episode. On a step where
a row's episode ends (``("next", "done")``), it writes the finished episode's values

* ``("next", "episode_return")`` float32 ``[N, 1]`` and
* ``("next", "episode_length")`` int64 ``[N, 1]``

on that row, and **0 on every other row**. Zero (not NaN) keeps sums and means
mask-friendly: weight by the done flag, ``(ret * done).sum() / done.sum()``, or call
:func:`completed_episodes` on a trajectory. (0 is also a possible real return, so
always use ``("next", "done")`` as the mask, never ``ret != 0``.)

It also sums finished episodes into device tensors (count, total return, total
length); :meth:`EpisodeStats.summary` is the only method that reads them back to the
host (one sync), e.g. for a progress line every N iterations.

Several processes (torchrun): :func:`gpu_envs.distributed.sync_stats` adds every
process's finished episodes since the last sync to every process's aggregate, so
``summary()`` then gives the job's global figures on every rank.

The return is the sum of the rewards this transform sees: put ``EpisodeStats`` first
(next to the env) to record raw returns, after a ``RewardScale`` to record scaled ones.
A ``reset`` interrupts the current episodes of the reset rows: they are dropped, not
counted.

``EpisodeStats(rows=...)`` counts the finished episodes of those rows only in its
aggregate (``summary()``, ``episodes``...), e.g. the training rows next to
:class:`~gpu_envs.transforms.EvalRows`' evaluation rows; ``emit=False`` leaves the
per-step ``("next", "episode_*")`` entries out (a second statistics transform on the
same env would overwrite the first one's).

Example::

    >>> import gpu_envs
    >>> from gpu_envs.transforms import EpisodeStats, TransformedEnv
    >>> stats = EpisodeStats()
    >>> env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=16, device="cpu", seed=0), stats)
    >>> traj = env.rollout(100)
    >>> n, mean_ret, mean_len = completed_episodes(traj)   # device tensors, this rollout
    >>> int(n) > 0, bool(mean_ret == mean_len)            # CartPole: reward 1 per step
    (True, True)
    >>> stats.summary().episodes == int(n)                 # all episodes since creation
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.specs import Box, Composite
from gpu_envs.contract.specs.env_specs import require_scalar_reward
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.utils.arguments import as_bool

__all__ = ["EpisodeStats", "EpisodeSummary", "completed_episodes", "row_mask"]

RETURN_KEY = ("next", "episode_return")
LENGTH_KEY = ("next", "episode_length")


@dataclass(frozen=True)
class EpisodeSummary:
    """Finished episodes and their mean return and length (NaN means when none finished)."""

    episodes: int
    mean_return: float
    mean_length: float


def completed_episodes(td: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(count, mean_return, mean_length)`` of the episodes that ended in ``td``, as device tensors.

    ``td`` is any batch of transitions written by :class:`EpisodeStats` (``[N]``, ``[N, T]``...).
    Means are NaN when no episode ended. No host sync.

    Example::

        count, mean_ret, mean_len = completed_episodes(env.rollout(64))
    """
    done = td.get(("next", "done"))
    count = done.sum()
    ret = td.get(RETURN_KEY).to(torch.float64).sum()
    length = td.get(LENGTH_KEY).to(torch.float64).sum()
    safe = count.clamp(min=1).to(torch.float64)
    nan = torch.full((), math.nan, dtype=torch.float64, device=count.device)
    has = count > 0
    return count, torch.where(has, ret / safe, nan), torch.where(has, length / safe, nan)


def row_mask(rows: Any, num_envs: int, what: str) -> torch.Tensor:
    """A ``[num_envs]`` bool mask (CPU) from row indices or a bool mask, refusing anything else."""
    if isinstance(rows, torch.Tensor) and rows.dtype == torch.bool:
        if rows.numel() != num_envs:
            raise InvalidArgumentError(f"{what}: a bool mask of rows must have {num_envs} entries, got {rows.numel()}.")
        return rows.detach().reshape(num_envs).cpu()
    try:
        indices = [int(i) for i in (rows.tolist() if isinstance(rows, torch.Tensor) else rows)]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{what}: rows must be row indices or a bool mask, got {rows!r}.") from None
    if any(isinstance(i, bool) for i in (rows if isinstance(rows, (list, tuple)) else [])):
        raise InvalidArgumentError(f"{what}: rows must be row indices (ints), got {rows!r}.")
    bad = [i for i in indices if not 0 <= i < num_envs]
    if bad or len(set(indices)) != len(indices):
        raise InvalidArgumentError(
            f"{what}: rows must be distinct indices in [0, {num_envs}), got {indices}"
            + (f" ({bad} out of range)." if bad else " (repeated).")
        )
    mask = torch.zeros(num_envs, dtype=torch.bool)
    mask[indices] = True
    return mask


class EpisodeStats(Transform):
    """Track per-env episode return and length; emit them on the rows whose episode ended.

    Args:
        rows: the rows whose finished episodes the aggregate counts (row indices or a
            bool mask of ``num_envs``); ``None`` (default): every row.
        emit: write ``("next", "episode_return")`` and ``("next", "episode_length")`` on
            every step (default); ``False`` keeps only the aggregate.
        group: in an env of agent groups, the group whose agents' returns to track
            (each agent's own ``("next", group, "reward")``; written as ``("next", group,
            "episode_return")`` ``[N, A, 1]``, and ``summary().mean_return`` is the mean
            over the group's agents); ``None`` (default): the env's reward (the team
            reward, in an env of agent groups). Episodes are the env's, counted once each.

    Attributes (device scalars, updated in place, read without a sync):
        episodes: int64, episodes finished since creation (or :meth:`clear`).
        total_return: float64, sum of their returns.
        total_length: int64, sum of their lengths.
    """

    row_state = ("running_return", "running_length")

    def __init__(self, rows: Any = None, *, emit: bool = True, group: str | None = None) -> None:
        super().__init__()
        self.rows = rows
        self.emit = as_bool(emit, "emit")
        if group is not None and not isinstance(group, str):
            raise InvalidArgumentError(
                f"EpisodeStats(group=...) takes a group name (a str of env.group_map), got {group!r}."
            )
        self.group = group

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        require_scalar_reward(specs.reward_spec.shape, "EpisodeStats")
        specs = super().setup(specs)
        n, dev = specs.num_envs, specs.device
        # rows counted in the aggregate: None (all) or a [N, 1] bool mask
        self._counted = (
            None if self.rows is None else row_mask(self.rows, n, "EpisodeStats(rows=...)").to(dev).view(n, 1)
        )
        self._reward_key, self._return_key, agents = self._keys(specs)
        self._agents = agents
        shape = (n, 1) if self.group is None else (n, agents, 1)
        self._return = torch.zeros(shape, dtype=torch.float32, device=dev)
        self._length = torch.zeros(n, 1, dtype=torch.int64, device=dev)
        # shape (1,), not (): torch.compile (2.13, CPU) drops in-place updates of 0-d float64 tensors
        self._episodes = torch.zeros(1, dtype=torch.int64, device=dev)
        self._total_return = torch.zeros(1, dtype=torch.float64, device=dev)
        self._total_length = torch.zeros(1, dtype=torch.int64, device=dev)
        # the aggregate right after the last sync (count, return, length): what is global already
        self._synced = torch.zeros(3, dtype=torch.float64, device=dev)
        if not self.emit:
            return specs
        # Spec.to keeps the class: a Composite's copy is a Composite
        info = cast(Composite, specs.info_spec.to(dev))
        info[self._return_key[1:]] = Box(-math.inf, math.inf, tuple(shape[1:]), torch.float32, device=dev)
        info["episode_length"] = Box(0, math.inf, (1,), torch.int64, device=dev)
        return specs.replace(info_spec=info)

    def _keys(self, specs: EnvSpecs) -> tuple[tuple, tuple, int]:
        """``(reward key, episode-return key, agents)``: the env's, or ``group``'s (its agents' own rewards)."""
        if self.group is None:
            return ("next", "reward"), RETURN_KEY, 1
        groups = sorted(
            {k[0] for k in specs.info_spec.keys(True, True) if isinstance(k, tuple) and k[1:] == ("reward",)}
        )
        if self.group not in groups:
            raise InvalidArgumentError(
                f"EpisodeStats(group={self.group!r}): the env has no agent group {self.group!r} with rewards; its "
                f"groups are {groups or 'none (a single-agent env: leave group out)'}."
            )
        agents = int(specs.info_spec[self.group, "reward"].shape[0])
        return ("next", self.group, "reward"), ("next", self.group, "episode_return"), agents

    def step(self, td: TensorDictBase) -> TensorDictBase:
        done = td.get(("next", "done"))
        each = done if self.group is None else done.unsqueeze(1)  # the env's [N, 1] flag, over each agent
        self._return.add_(td.get(self._reward_key))
        self._length.add_(1)
        ret = torch.where(each, self._return, 0.0)
        length = torch.where(done, self._length, 0)
        counted = done if self._counted is None else done & self._counted
        counted_each = counted if self.group is None else counted.unsqueeze(1)
        self._episodes.add_(counted.sum())
        self._total_return.add_(torch.where(counted_each, ret, 0.0).sum(dtype=torch.float64) / self._agents)
        self._total_length.add_(torch.where(counted, length, 0).sum())
        self._return.masked_fill_(each, 0.0)
        self._length.masked_fill_(done, 0)
        if self.emit:
            td.set(self._return_key, ret)
            td.set(LENGTH_KEY, length)
        return td

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        self._return.masked_fill_(mask if self.group is None else mask.unsqueeze(1), 0.0)
        self._length.masked_fill_(mask, 0)
        return td

    # ---------------------------------------------------------------- reading
    @property
    def episodes(self) -> torch.Tensor:
        """Episodes finished since creation (or :meth:`clear`): int64 scalar on the device."""
        self.check_bound("episodes")
        return self._episodes.view(())

    @property
    def total_return(self) -> torch.Tensor:
        """Sum of their returns: float64 scalar on the device."""
        self.check_bound("total_return")
        return self._total_return.view(())

    @property
    def total_length(self) -> torch.Tensor:
        """Sum of their lengths: int64 scalar on the device."""
        self.check_bound("total_length")
        return self._total_length.view(())

    @property
    def running_return(self) -> torch.Tensor:
        """Return of each env's current (unfinished) episode, ``[N, 1]`` (``[N, A, 1]`` per agent of ``group``)."""
        self.check_bound("running_return")
        return self._return

    @property
    def running_length(self) -> torch.Tensor:
        """Length of each env's current (unfinished) episode, ``[N, 1]``."""
        self.check_bound("running_length")
        return self._length

    def summary(self) -> EpisodeSummary:
        """Finished episodes, mean return and mean length. Synchronises once (reads 3 numbers).

        Raises the env's pending health-check flags first
        (:class:`~gpu_envs.HealthCheckError`: a NaN reward would poison these means).
        """
        self.check_bound("summary()")
        if self.check_health is not None:
            self.check_health()
        count, ret, length = self._aggregate().tolist()
        if count == 0:
            return EpisodeSummary(0, math.nan, math.nan)
        return EpisodeSummary(int(count), ret / count, length / count)

    def clear(self) -> None:
        """Zero the aggregate (not the running episodes), e.g. at each training iteration."""
        self.check_bound("clear()")
        self._episodes.zero_()
        self._total_return.zero_()
        self._total_length.zero_()
        self._synced.zero_()

    # --------------------------------------------- sharing across processes
    def _aggregate(self) -> torch.Tensor:
        return torch.cat([self._episodes.to(torch.float64), self._total_return, self._total_length.to(torch.float64)])

    def pending_stats(self) -> torch.Tensor:
        """Episodes finished here since the last sync: ``[count, sum of returns, sum of lengths]``."""
        return self._aggregate() - self._synced

    def merge_stats(self, gathered: torch.Tensor) -> None:
        """Add every process's pending episodes (rows) to the aggregate."""
        total = self._synced + gathered.to(device=self.device, dtype=torch.float64).sum(dim=0)
        self._episodes.copy_(total[0:1].round().to(torch.int64))
        self._total_return.copy_(total[1:2])
        self._total_length.copy_(total[2:3].round().to(torch.int64))
        self._synced.copy_(total)

    def live_state(self) -> dict[str, torch.Tensor]:
        return {
            "running_return": self._return,
            "running_length": self._length,
            "episodes": self._episodes,
            "total_return": self._total_return,
            "total_length": self._total_length,
            "synced": self._synced,
        }

    def statistics(self) -> dict[str, torch.Tensor]:
        return {
            "episodes": self.episodes.clone(),
            "total_return": self.total_return.clone(),
            "total_length": self.total_length.clone(),
        }

    def load_statistics(self, state: dict[str, torch.Tensor]) -> None:
        self._check_state(state, self.statistics() if getattr(self, "_bound", False) else {})
        for name in ("episodes", "total_return", "total_length"):
            getattr(self, name).copy_(state[name])  # 0-d views of the (1,) state
        self._synced.copy_(self._aggregate())  # restored figures are not pending: no process re-adds them
