"""``EvalRows``: K rows of the training batch evaluate the policy deterministically, with their own statistics.

Isaac Lab (and other simulators that allow one instance per process) cannot build a
second env for evaluation next to the training one. ``EvalRows(rows)`` carves K rows out
of the training batch instead: on those rows the env is driven by the policy's
DETERMINISTIC action (the argmax, the mean), which the policy writes next to its sampled
one under ``deterministic_key`` (``"action_mode"``, torchrl's name for it); their
finished episodes are counted by their own :class:`EpisodeStats` (``eval_rows.summary()``);
and ``("next", "eval_row")`` marks them in every transition. The other rows train as
before: the policy's sampled ``td["action"]`` is what the TensorDict keeps (the env
steps a copy), and :attr:`EvalRows.train_index` picks the training rows out of a
trajectory without a host sync.

Example::

    eval_rows = EvalRows(rows=range(1020, 1024))
    train_stats = EpisodeStats(rows=eval_rows.train_rows(1024))
    env = TransformedEnv(gpu_envs.make("Isaac-Cartpole-v0", num_envs=1024), train_stats, eval_rows)

    def policy(td):
        logits = actor(td["policy"])
        td["action"] = Categorical(logits=logits).sample()
        td["action_mode"] = logits.argmax(-1)           # what the evaluation rows take
        return td

    traj = collect(env, policy, steps=64)
    batch = traj[eval_rows.train_index]                  # the training rows only: [N - K, T]
    print(train_stats.summary(), eval_rows.summary())    # training vs deterministic returns

Put ``EvalRows`` after any action transform that should apply to the deterministic action
too (the env-side order: ``EvalRows.inv`` runs before the transforms listed before it),
and next to the raw rewards (as ``EpisodeStats``) for raw returns.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import ActionError, InvalidArgumentError
from gpu_envs.contract.specs import Binary, Composite
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.episode_stats import EpisodeStats, EpisodeSummary, row_mask

__all__ = ["EvalRows"]


class EvalRows(Transform):
    """Rows ``rows`` act deterministically (``td[deterministic_key]``) and keep their own episode statistics.

    Args:
        rows: the evaluation rows: indices or a bool mask of ``num_envs``.
        deterministic_key: the policy's output holding its deterministic action
            (same shape and dtype as ``"action"``), default ``"action_mode"``.

    Attributes (after the TransformedEnv is built):
        eval_index, train_index: int64 row indices on the env's device (no sync to use them).
        stats: the evaluation rows' :class:`EpisodeStats` (aggregate only).
    """

    def __init__(self, rows: Any, deterministic_key: str | tuple[str, ...] = "action_mode") -> None:
        super().__init__()
        self.rows = list(rows) if isinstance(rows, range) else rows
        self.deterministic_key = deterministic_key
        self.stats = EpisodeStats(rows=self.rows, emit=False)

    def train_rows(self, num_envs: int) -> torch.Tensor:
        """A ``[num_envs]`` bool mask of the other rows (for ``EpisodeStats(rows=...)`` of the training rows)."""
        return ~row_mask(self.rows, num_envs, "EvalRows(rows=...)")

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        n, dev = specs.num_envs, specs.device
        mask = row_mask(self.rows, n, "EvalRows(rows=...)")
        if mask.all():
            raise InvalidArgumentError(f"EvalRows takes every one of the {n} rows; leave some to train (K < num_envs).")
        self.eval_index = mask.nonzero().view(-1).to(dev)
        self.train_index = (~mask).nonzero().view(-1).to(dev)
        self._mask = mask.to(dev).view(n, 1)
        self._action_rank = len(specs.action_spec.shape)
        self.stats.setup(specs)
        # Spec.to keeps the class: a Composite's copy is a Composite
        info = cast(Composite, specs.info_spec.to(dev))
        info["eval_row"] = Binary(1, device=dev)
        return specs.replace(info_spec=info)

    # ------------------------------------------------------------- data hooks
    def inv(self, td: TensorDictBase) -> TensorDictBase:
        action = td.get("action")
        deterministic = td.get(self.deterministic_key, None)
        if deterministic is None:
            raise ActionError(
                f"EvalRows: the policy must also write td[{self.deterministic_key!r}], its deterministic action (the "
                "argmax of the logits, the mean of the Gaussian) for the evaluation rows, next to td['action']."
            )
        if (
            not isinstance(deterministic, torch.Tensor)
            or deterministic.shape != action.shape
            or deterministic.dtype != action.dtype
        ):
            got = (
                f"{deterministic.dtype} {tuple(deterministic.shape)}"
                if isinstance(deterministic, torch.Tensor)
                else type(deterministic).__name__
            )
            raise ActionError(
                f"EvalRows: td[{self.deterministic_key!r}] must have the action's shape and dtype "
                f"({action.dtype} {tuple(action.shape)}), got {got}."
            )
        mask = self._mask.view((self.num_envs,) + (1,) * (action.dim() - 1))
        td.set("action", torch.where(mask, deterministic, action))
        return td

    def step(self, td: TensorDictBase) -> TensorDictBase:
        td = self.stats.step(td)
        td.set(("next", "eval_row"), self._mask)
        return td

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        return self.stats.reset(td, mask)

    # ---------------------------------------------------------------- reading
    def summary(self) -> EpisodeSummary:
        """The evaluation rows' finished episodes, mean return and length (one sync)."""
        return self.stats.summary()

    def clear(self) -> None:
        """Forget the evaluation rows' finished episodes (e.g. after each report)."""
        self.stats.clear()

    # ----------------------------------------------------- state and sharing
    row_state = ("running_return", "running_length")  # its EpisodeStats'

    def live_state(self) -> dict[str, torch.Tensor]:
        return self.stats.live_state()

    def statistics(self) -> dict[str, torch.Tensor]:
        return self.stats.statistics()

    def load_statistics(self, state: dict[str, torch.Tensor]) -> None:
        self.stats.load_statistics(state)

    def pending_stats(self) -> torch.Tensor:
        return self.stats.pending_stats()

    def merge_stats(self, gathered: torch.Tensor) -> None:
        self.stats.merge_stats(gathered)

    def __repr__(self) -> str:
        return f"EvalRows(rows={self.rows!r}, deterministic_key={self.deterministic_key!r})"
