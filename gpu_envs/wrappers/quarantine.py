"""``Quarantine``: a row whose observation or reward is not finite is ended, reset and counted; the run goes on.

A training run of thousands of envs for days meets the odd NaN: a simulator blowing up
on one robot, a NaN torque from a policy on one row. Unchecked, it flows into the
rollout and a NaN in one row poisons the whole batch's loss. ``Quarantine(env)`` wraps an
env (it has the env's API, as a :class:`~gpu_envs.transforms.TransformedEnv` does) and on
every step, on the device and without a host sync:

* finds the rows whose next observation (any floating-point key) or reward holds a NaN
  or an infinity (a missing final observation's placeholder does not count);
* ends them: ``("next", "terminated")`` and ``("next", "done")`` set,
  ``("next", "truncated")`` cleared, ``("next", "quarantined")`` set (bool ``[N, 1]``,
  False elsewhere), and their transition made finite: ``("next", obs)`` is the
  observation the row acted on and the reward 0, so nothing non-finite reaches the
  learner (mask the rows with ``("next", "quarantined")`` to leave them out entirely);
* resets them in the env below (a masked reset, in the same call), so the next step's
  input is a fresh episode;
* screens every fresh episode's observation too (after an auto-reset, a masked or a full
  reset): a row whose reset observation is not finite is counted and recorded at once,
  its observation in the root is replaced by zeros (a finite placeholder, so the policy
  never acts on a NaN), and its next transition is quarantined whatever it holds (ended,
  reward 0, ``("next", "quarantined")`` set) and the row reset again: a simulator that
  cannot reset a row cleanly shows up in the count every step instead of in the loss;
* counts them and keeps, per row, the last quarantine's record for inspection: the last
  good observation (the one acted on), the action, the non-finite next observation and
  reward, and the step it happened at (:meth:`Quarantine.records`).

``raise_after=K`` stops the run once K rows in all were quarantined, with
:class:`QuarantineLimitError`; never by a per-step sync, but where the host waits anyway:
a full ``reset()``, :meth:`Quarantine.check` (which also returns the count) or
:meth:`Quarantine.records`. Put statistics transforms above it
(``TransformedEnv(Quarantine(env), EpisodeStats())``) so a quarantined row counts as an
ended episode there.

An env of agent groups (:mod:`gpu_envs.contract.groups`) is screened the same way, over
every group's observations and per-agent rewards: a quarantined row ends for all its
agents (each group's ``terminated`` / ``done`` set, ``truncated`` cleared, rewards 0, the
observations acted on), and the record keeps each group's action.

Needs an env that can reset single rows (built-in envs, torch vector envs with
``supports_reset_mask``, gymnasium, JAX, Isaac Lab with ``env_ids`` resets); other
backends are refused when it is built.

Example::

    env = Quarantine(gpu_envs.make("Pendulum-v1", num_envs=4096, device="cuda"), raise_after=100)
    stats = EpisodeStats()
    env = TransformedEnv(env, stats)
    traj = collect(env, policy, steps=64)      # quarantined rows: traj["next", "quarantined"]
    print(env.env.check())                      # rows quarantined so far (one sync)
    print(env.env.records())                    # what each quarantined row last saw
"""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.contract.errors import BackendError, InvalidArgumentError, SpecError
from gpu_envs.contract.groups import groups_in
from gpu_envs.contract.keys import NEXT, QUARANTINED
from gpu_envs.contract.specs import Binary, Composite
from gpu_envs.core.snapshot import row_indices
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.transformed_env import TransformedEnv
from gpu_envs.utils.arguments import as_int

__all__ = ["QUARANTINED_KEY", "Quarantine", "QuarantineLimitError"]

QUARANTINED_KEY = (NEXT, QUARANTINED)


class QuarantineLimitError(BackendError):
    """More rows produced non-finite observations or rewards than ``Quarantine(raise_after=...)`` allows."""


def _finite_rows(value: torch.Tensor) -> torch.Tensor:
    """``[N, 1]`` bool: True where every entry of the row is finite."""
    return torch.isfinite(value).reshape(value.shape[0], -1).all(dim=1, keepdim=True)


class QuarantineMarks(Transform):
    """The per-step part of :class:`Quarantine`: finds, ends, counts and records the non-finite rows.

    Sync-free: ``torch.where`` and in-place updates of tensors allocated in ``setup``.
    After each ``step`` :attr:`to_reset` holds the rows the env below has not reset
    itself (quarantined, not ended there), which :class:`Quarantine` resets.
    """

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        n, dev = specs.num_envs, specs.device
        self.obs_keys = [key for key, _ in specs.observation_spec.items(include_nested=True, leaves_only=True)]
        self.float_keys = [
            key
            for key, spec in specs.observation_spec.items(include_nested=True, leaves_only=True)
            if spec.dtype is not None and spec.dtype.is_floating_point  # (a leaf always has a dtype)
        ]
        reward_dtype = specs.reward_spec.dtype
        if reward_dtype is None:
            raise SpecError(f"Quarantine needs a single-tensor reward, got the reward spec {specs.reward_spec!r}.")
        self.reward_is_float = reward_dtype.is_floating_point
        obs = specs.observation_spec.zero((n,))
        action = specs.action_spec.zero((n,))
        if isinstance(action, torch.Tensor):
            self.actions = {"action": action}
        else:  # an env of agent groups: one action per group, {(group, "action"): [N, A, ...]}
            self.actions = {key: action.get(key) for key in action.keys(include_nested=True, leaves_only=True)}
        # agent groups: each group's reward and flags ("next", group, ...) [N, A, 1] are ended with the row's
        self.groups = groups_in(specs.info_spec)
        # the record of each row's last quarantine
        self.last_good = {key: obs.get(key) for key in self.obs_keys}
        self.bad_obs = {key: obs.get(key).clone() for key in self.obs_keys}
        self.bad_reward = specs.reward_spec.zero((n,))
        self.at_step = torch.full((n,), -1, dtype=torch.int64, device=dev)
        self.per_row = torch.zeros(n, dtype=torch.int64, device=dev)
        self.total = torch.zeros(1, dtype=torch.int64, device=dev)
        self.steps = torch.zeros(1, dtype=torch.int64, device=dev)
        self.to_reset = torch.zeros(n, 1, dtype=torch.bool, device=dev)
        # rows whose fresh observation was not finite: their next transition is quarantined
        self.pending = torch.zeros(n, 1, dtype=torch.bool, device=dev)
        self.at_reset = torch.zeros(n, dtype=torch.bool, device=dev)  # the last record is of a reset
        # Spec.to keeps the class: a Composite's copy is a Composite
        info = cast(Composite, specs.info_spec.to(dev))
        info["quarantined"] = Binary(1, device=dev)
        return specs.replace(info_spec=info)

    def step(self, td: TensorDictBase) -> TensorDictBase:
        nxt = td.get("next")
        finite = torch.ones_like(self.to_reset)
        if self.float_keys:
            missing = nxt.get("final_obs_missing", None)  # placeholders (NaN) stand in for a final obs
            obs_ok = self._finite_obs(nxt)  # the next observations, screened as roots are
            finite = obs_ok if missing is None else obs_ok | missing
        reward = nxt.get("reward")
        if self.reward_is_float:
            finite = finite & _finite_rows(reward)
        for group in self.groups:
            finite = finite & _finite_rows(nxt.get((group, "reward")))
        # a row acting on a placeholder (its reset observation was not finite) is quarantined
        # too, but was counted when it was reset
        bad = ~finite | self.pending
        rows = bad.view(-1)
        counted = (~finite & ~self.pending).view(-1)
        self.pending.zero_()
        ended_below = nxt.get("done")
        self.to_reset.copy_(bad & ~ended_below)

        # the record of this quarantine, on its counted rows
        for key in self.obs_keys:
            good = td.get(key)
            torch.where(_expand(counted, good), good, self.last_good[key], out=self.last_good[key])
            torch.where(_expand(counted, good), nxt.get(key), self.bad_obs[key], out=self.bad_obs[key])
        for key, kept in self.actions.items():
            action = td.get(key)
            torch.where(_expand(counted, action), action.to(kept.dtype), kept, out=kept)
        torch.where(_expand(counted, reward), reward, self.bad_reward, out=self.bad_reward)
        torch.where(counted, self.steps, self.at_step, out=self.at_step)
        self.at_reset.logical_and_(~counted)
        self.per_row.add_(counted)
        self.total.add_(counted.sum())
        self.steps.add_(1)

        # end the rows, with a finite transition: the observation acted on, reward 0
        for key in self.obs_keys:
            good = td.get(key)
            nxt.set(key, torch.where(_expand(rows, good), good, nxt.get(key)))
        nxt.set("reward", torch.where(_expand(rows, reward), torch.zeros_like(reward), reward))
        terminated = nxt.get("terminated") | bad
        truncated = nxt.get("truncated") & ~bad
        nxt.set("terminated", terminated)
        nxt.set("truncated", truncated)
        nxt.set("done", terminated | truncated)
        agents = bad.view(-1, 1, 1)  # [N, 1, 1]: over each group's [N, A, 1]
        for group in self.groups:  # every agent of a quarantined row ends with it, rewarded 0
            group_reward = nxt.get((group, "reward"))
            nxt.set((group, "reward"), torch.where(agents, torch.zeros_like(group_reward), group_reward))
            group_terminated = nxt.get((group, "terminated")) | agents
            group_truncated = nxt.get((group, "truncated")) & ~agents
            nxt.set((group, "terminated"), group_terminated)
            nxt.set((group, "truncated"), group_truncated)
            nxt.set((group, "done"), group_terminated | group_truncated)
        nxt.set("quarantined", bad)
        return td

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        """Screen a root after a reset: rows with a non-finite observation are counted, recorded and pending.

        ``mask`` (``[N, 1]``): the rows reset by this call. A row already pending (counted
        at an earlier reset, not stepped since) is not counted again unless reset again.
        """
        if not self.float_keys:
            return td
        bad = ~self._finite_obs(td)
        counted = (bad & (mask | ~self.pending)).view(-1)
        for key in self.float_keys:
            value = td.get(key)
            torch.where(_expand(counted, value), value, self.bad_obs[key], out=self.bad_obs[key])
        torch.where(counted, self.steps, self.at_step, out=self.at_step)
        self.at_reset.logical_or_(counted)
        self.per_row.add_(counted)
        self.total.add_(counted.sum())
        self.pending.copy_((self.pending & ~mask) | bad)
        return self._placeholders(td, bad.view(-1))

    def root(self, td: TensorDictBase) -> TensorDictBase:
        """The root with non-finite observation rows replaced by zeros (no counting: that is :meth:`reset`'s)."""
        if not self.float_keys:
            return td
        return self._placeholders(td, ~self._finite_obs(td).view(-1))

    def _finite_obs(self, td: TensorDictBase) -> torch.Tensor:
        """``[N, 1]`` bool: every floating-point observation of the row is finite."""
        finite = torch.ones_like(self.pending)
        for key in self.float_keys:
            finite = finite & _finite_rows(td.get(key))
        return finite

    def _placeholders(self, td: TensorDictBase, rows: torch.Tensor) -> TensorDictBase:
        for key in self.float_keys:
            value = td.get(key)
            td.set(key, value.masked_fill(_expand(rows, value), 0.0))
        return td

    @property
    def row_state(self) -> tuple[str, ...]:  # type: ignore[override]
        """Every state tensor but the two counters shared by all rows (``total``, ``steps``)."""
        return tuple(name for name in self.live_state() if name not in ("total", "steps"))

    def live_state(self) -> dict[str, torch.Tensor]:
        state = {"per_row": self.per_row, "total": self.total, "steps": self.steps, "at_step": self.at_step}
        state["bad_reward"], state["to_reset"] = self.bad_reward, self.to_reset
        for i, (key, kept) in enumerate(self.actions.items()):
            state["action" if key == "action" else f"action.{i}"] = kept
        state["pending"], state["at_reset"] = self.pending, self.at_reset
        for i, key in enumerate(self.obs_keys):
            state[f"last_good.{i}"] = self.last_good[key]
            state[f"bad_obs.{i}"] = self.bad_obs[key]
        return state


def _expand(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[N]`` row mask -> broadcastable over ``like`` ``[N, ...]``."""
    return rows.view((rows.shape[0],) + (1,) * (like.dim() - 1))


class Quarantine(TransformedEnv):
    """``env`` with its non-finite rows ended, reset and counted (see the module docstring).

    Args:
        env: a :class:`~gpu_envs.BatchedEnv` or a ``TransformedEnv`` whose backend can
            reset single rows.
        raise_after: raise :class:`QuarantineLimitError` at the next full ``reset()``,
            :meth:`check` or :meth:`records` once this many rows in all were quarantined;
            ``None`` (default) never raises.

    Attributes:
        quarantined: int64 device scalar, rows quarantined since creation (no sync to read
            the tensor; ``int(...)`` of it syncs once).
        quarantined_per_row: int64 ``[N]`` device tensor, per row.
    """

    def __init__(self, env: Any, *, raise_after: int | None = None) -> None:
        if raise_after is not None:
            raise_after = as_int(raise_after, "raise_after (or None)", minimum=1)
        backend = getattr(env, "backend", None)
        capabilities = getattr(backend, "capabilities", None)
        if backend is not None and capabilities is not None and not capabilities.partial_reset:
            raise InvalidArgumentError(
                f"Quarantine resets single rows, and the {backend.describe()} backend cannot reset a subset of its "
                "envs. Use a backend that accepts a reset mask (built-in, torch with supports_reset_mask, gymnasium, "
                "JAX, Isaac Lab with env_ids)."
            )
        self._marks = QuarantineMarks()
        self.raise_after = raise_after
        self._reported = 0  # the count the last QuarantineLimitError reported
        # after a plain step(): the rows already reset (ended below, or quarantined and reset
        # here); a reset mask naming them is served, not reset twice
        self._served: torch.Tensor | None = None
        super().__init__(env, self._marks)

    # ------------------------------------------------------------------- API
    def step(self, td: TensorDictBase) -> TensorDictBase:
        """Step; quarantined rows end (``("next", "quarantined")``) and are reset before this returns."""
        self._served = None
        td = super().step(td)
        self._exempt(td)
        self._reset_quarantined()
        self._served = td.get(("next", "done")).clone()
        return td

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, reset quarantined rows too, and return ``(td, td_root)``."""
        self._served = None
        td, _ = super().step_and_maybe_reset(td)
        self._exempt(td)
        return td, self._reset_quarantined()

    def _exempt(self, td: TensorDictBase) -> None:
        """Tell the env's health checks that the rows quarantined in this step are handled (no HealthCheckError)."""
        monitor = getattr(self.env, "health_monitor", None)
        if monitor is not None and hasattr(monitor, "exempt"):
            monitor.exempt(td.get(QUARANTINED_KEY))

    def reset(self, seed: int | None = None, td: TensorDictBase | None = None) -> TensorDictBase:
        """Reset all rows (first raising :class:`QuarantineLimitError` past ``raise_after``), or the masked ones.

        After a plain ``step()``, rows that ended there (quarantined ones included) were
        reset already: a mask naming them serves their fresh observation.
        """
        mask = None if td is None else td.get("_reset", None)
        if mask is None:
            self.check()  # a full reset: the host waits anyway
        elif td is not None and self._served is not None and _bool_mask_of(mask, self.num_envs):  # (td holds mask)
            td = td.clone(recurse=False)  # (a bad mask goes down unchanged, for the env's own error)
            td.set("_reset", mask.reshape(self.num_envs, 1).to(self.device) & ~self._served)
        root = super().reset(seed=seed, td=td)
        self._served = None
        return root

    # --------------------------------------------------------------- reading
    def get_state(self, rows: Any = None) -> TensorDictBase:
        """:meth:`TransformedEnv.get_state`, plus ``"served"``: the rows a plain ``step`` already reset."""
        state = super().get_state(rows)
        served = (
            self._served
            if self._served is not None
            else torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device)
        )
        state.set(
            "served", served.index_select(0, row_indices(rows, self.num_envs, self.device, "get_state", distinct=False))
        )
        return state

    def set_state(self, state: TensorDictBase, rows: Any = None) -> None:
        served = state.get("served", None) if isinstance(state, TensorDictBase) else None
        if not isinstance(served, torch.Tensor) or served.dtype != torch.bool or served.shape[1:] != (1,):
            raise InvalidArgumentError(
                "Quarantine.set_state takes a Quarantine's get_state() (with its 'served' rows)."
            )
        super().set_state(state.exclude("served"), rows)
        index = row_indices(rows, self.num_envs, self.device, "set_state", distinct=True)
        current = (
            self._served
            if self._served is not None
            else torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device)
        )
        self._served = current.index_copy(0, index, served.to(self.device))  # all False serves nothing: as None

    @property
    def quarantined(self) -> torch.Tensor:
        """Rows quarantined since creation: int64 scalar on the device (reading the tensor does not sync)."""
        return self._marks.total.view(())

    @property
    def quarantined_per_row(self) -> torch.Tensor:
        """Times each row was quarantined: int64 ``[N]`` on the device."""
        return self._marks.per_row

    def check(self) -> int:
        """The number of rows quarantined so far (one sync); raises past ``raise_after``.

        Raised once for what it reports: later checks and full resets raise again only when
        more rows were quarantined since (or after :meth:`clear`, past the limit anew).
        """
        count = int(self._marks.total.item())
        if self.raise_after is not None and count >= self.raise_after and count > self._reported:
            self._reported = count
            rows = torch.nonzero(self._marks.per_row).view(-1).tolist()
            shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
            raise QuarantineLimitError(
                f"{count} rows were quarantined (non-finite observation or reward), reaching raise_after="
                f"{self.raise_after}; rows {shown}. Inspect them with env.records() (the last good observation, "
                "the action and the non-finite values of each), fix the simulator or the policy, or raise the limit; "
                "env.clear() forgets the count and the records. Caught, the run goes on: this is raised again only "
                "when more rows are quarantined."
            )
        return count

    def records(self) -> TensorDict:
        """The last quarantine of every row quarantined at least once (host sync; for inspection).

        A TensorDict with one entry per such row: ``"row"``, ``"count"`` (times quarantined),
        ``"step"`` (steps since this wrapper was built, when it last happened),
        ``"observation"`` (the observation keys: the last good observation, the one the
        row acted on), ``"action"``, ``"next_observation"`` (the non-finite one),
        ``"reward"`` and ``"reset"``: True where the last quarantine was of a reset
        observation (then ``"next_observation"`` is that observation and ``"step"`` the
        step it was to start from; the other entries are the row's previous record, zeros
        if none). Does not raise past ``raise_after``: read it after the error.
        """
        m = self._marks
        rows = torch.nonzero(m.per_row).view(-1)
        data = {
            "row": rows,
            "count": m.per_row[rows],
            "step": m.at_step[rows],
            "observation": _nest({key: m.last_good[key][rows] for key in m.obs_keys}),
            "action": m.actions["action"][rows]  # one action tensor, or one per agent group
            if "action" in m.actions
            else _nest({key: kept[rows] for key, kept in m.actions.items()}),
            "next_observation": _nest({key: m.bad_obs[key][rows] for key in m.obs_keys}),
            "reward": m.bad_reward[rows],
            "reset": m.at_reset[rows],
        }
        return TensorDict(data, batch_size=[rows.shape[0]], device=self.device)

    def clear(self) -> None:
        """Forget the count and records (e.g. after handling a :class:`QuarantineLimitError`)."""
        m = self._marks
        self._reported = 0
        for t in (m.per_row, m.total):
            t.zero_()
        m.at_step.fill_(-1)
        m.at_reset.zero_()

    # --------------------------------------------------------------- helpers
    def _reset_quarantined(self) -> TensorDictBase:
        """Reset the quarantined rows the env below did not end (sync-free masked reset); the new root."""
        return super().reset(
            td=TensorDict({"_reset": self._marks.to_reset}, batch_size=self.batch_size, device=self.device)
        )

    def __repr__(self) -> str:
        return f"Quarantine({self.env!r}, raise_after={self.raise_after})"


def _bool_mask_of(mask: Any, n: int) -> bool:
    return isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.numel() == n


def _nest(flat: dict) -> dict:
    """``{("a", "b"): x}`` -> ``{"a": {"b": x}}``, the layout TensorDict expects for nested keys."""
    out: dict = {}
    for key, value in flat.items():
        parts = key if isinstance(key, tuple) else (key,)
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out
