"""Health checks without a host sync: bad values flagged on the device, raised where the host looks anyway.

A training run of thousands of envs must hear about an out-of-range discrete action
(CartPole would push with 90 N), a NaN torque, or a simulator that produced a NaN
observation or reward -- but reading a device value on every step would stall the GPU.
:class:`HealthMonitor` keeps a small record per row on the device (the first faulty
step, what was wrong, the value), written by tensor ops only (``torch.where``,
``argmax``; no ``.item()``, no boolean indexing, no ``nonzero``), and raises
:class:`~gpu_envs.contract.errors.HealthCheckError` at points where the host waits
anyway or is asked to:

* ``env.check_health()``: reads the record (one sync) and raises what it holds;
* the end of ``collect`` / ``env.rollout()``, a full ``env.reset()``, and
  ``EpisodeStats.summary()``: a poll that never waits. On the CPU the record is read in
  place (nothing to wait for). On CUDA the poll copies the record into pinned host
  memory without blocking and reads the copy of the previous poll once it has arrived,
  so a fault is raised one such point later (``check_health()`` raises at once).

What is checked (``health_checks`` of :func:`gpu_envs.make` / :class:`~gpu_envs.BatchedEnv`):

* ``"collect"`` (``True``, the default): every transition ``collect`` and
  ``env.rollout()`` write, scanned once per collection (:meth:`HealthMonitor.scan`: one
  reduction per entry of the ``[N, T]`` buffer, then ``[N]`` ops; on the CPU a few numpy
  reductions first, and a healthy collection costs only those): the action against
  Discrete / MultiDiscrete / integer Binary ranges and finite float actions, every
  floating-point next observation (placeholders where ``final_obs_missing`` do not
  count) and the reward. The exact step and value are read from the buffer when raised.
  The steps of a hand-written loop (``env.step`` / ``step_and_maybe_reset`` outside a
  collection) are checked too. On the CPU, :meth:`HealthMonitor.look` looks at each
  step's tensors where they lie, one C call per step (:mod:`gpu_envs.core.health_look`),
  and records a faulty step's rows exactly, at once; where the simulator checks its own
  step (:class:`~gpu_envs.contract.protocols.SelfCheckedStep`: the built-in envs' native
  step), the step path reads its verdict and only counts a clean step
  (:meth:`HealthMonitor.trusted`); a step it flagged gets the look. Elsewhere (or with no C compiler)
  :meth:`HealthMonitor.defer` keeps references to each step's tensors (no op: they are
  the env's outputs, never written again) and every :attr:`~HealthMonitor.defer_steps`
  steps, or wherever the record is read, scans them as one collection
  (:meth:`HealthMonitor.flush`); either way every row's first bad step is found;
* ``"step"``: the same checks on every step of every path (``step``,
  ``step_and_maybe_reset``, compiled and CUDA-graph collections), still without a sync,
  for hand-written loops; about twenty small ops per step (opt-in: on the CPU that is
  more than the built-in envs' own step);
* ``False``: nothing beyond the metadata checks every step has.

After a raise the record is cleared and the env is usable: the next steps are checked
afresh. Rows whose simulator state went non-finite keep it until they are reset
(``env.reset()``, or ``Quarantine`` to end and reset them as they go).

Example::

    >>> import torch
    >>> import gpu_envs
    >>> from gpu_envs.rollout import collect
    >>> env = gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=0)
    >>> traj = collect(env, lambda td: td.set("action", torch.full((8, 1), float("nan"))), steps=16)
    Traceback (most recent call last):
        ...
    gpu_envs.contract.errors.HealthCheckError: 8 row(s) held bad values ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from tensordict import TensorDict

from gpu_envs.contract.errors import HealthCheckError, InvalidArgumentError
from gpu_envs.contract.keys import QUARANTINED
from gpu_envs.contract.protocols import NOT_SELF_CHECKED, SelfCheckedStep
from gpu_envs.contract.specs import Spec
from gpu_envs.core.health_codes import (
    ACTION_NAN,
    ACTION_RANGE,
    OBS,
    REWARD_NAN,
    describe_fault,
    fault_fix,
    span_note,
)
from gpu_envs.core.health_look import ActionCheck, HostLook, first_bad, healthy_on_host, look_for, row_sum
from gpu_envs.utils.tensordicts import nest

__all__ = ["HEALTH_MODES", "HealthMonitor", "health_mode"]

HEALTH_MODES = ("collect", "step", "off")
_SHOWN_ROWS = 8


def health_mode(value: Any) -> str:
    """``health_checks`` as one of :data:`HEALTH_MODES` (``True`` is ``"collect"``, ``False`` ``"off"``)."""
    if value is True:
        return "collect"
    if value is False or value is None:
        return "off"
    if isinstance(value, str) and value in HEALTH_MODES:
        return value
    raise InvalidArgumentError(
        f"health_checks must be True (= 'collect'), 'step' or False (= 'off'), got {value!r}: 'collect' scans every "
        "collection's transitions, 'step' checks every step on the device, False checks no values."
    )


class HealthMonitor:
    """The per-row fault record of one env and the checks that write it (see the module docstring).

    Args:
        num_envs, device: the env's.
        action_spec: one env's action spec; obs_keys: the observation keys (floating-point
            ones are checked) with their dtypes.
        mode: ``"collect"``, ``"step"`` or ``"off"``.
    """

    def __init__(self, num_envs: int, device: torch.device, action_spec: Spec, obs_dtypes: dict, mode: str) -> None:
        self.num_envs = num_envs
        self.device = device
        self.mode = mode
        self._actions: dict[int, ActionCheck] = {}
        self.action = self._action_check(action_spec)  # inactive for agent groups' actions (a Composite spec)
        self._no_action = torch.zeros(0, device=device)
        self.obs_keys = [key for key, dtype in obs_dtypes.items() if dtype.is_floating_point]
        # the record, on the device, written in place (CUDA graphs replay the writes); shape (1,)
        # counters: torch.compile drops in-place updates of some 0-d tensors
        self.first_step = torch.full((num_envs,), -1, dtype=torch.int64, device=device)
        self.code = torch.zeros(num_envs, dtype=torch.int64, device=device)
        self.value = torch.zeros(num_envs, dtype=torch.float64, device=device)
        self.steps = torch.zeros(1, dtype=torch.int64, device=device)
        self._cuda = device.type == "cuda"
        self._mirror = torch.full((num_envs,), -1, dtype=torch.int64, pin_memory=self._cuda)
        self._copied: Any = None  # the CUDA event of the mirror's copy in flight
        # collect mode: the last scans (first step, T, buffer data, action check, observation keys)
        # and the steps they counted, for finding a row's exact step when raising
        self._scans: list[tuple] = []
        self._host_steps = 0
        # collect mode, hand-written loops: the steps not scanned yet, and how many are scanned together
        self._pending: list[list[Any]] = []
        self._pending_keys: list = []
        self.defer_steps = 0  # decided by the first kept step's size (_defer_steps)
        self._collecting = 0
        self._action_spec = action_spec
        # CPU, hand-written loops: each step looked at in place instead (health_look); the steps looked
        # at since self.steps was last brought up to date, and the last one that recorded a fault
        self.host_look: HostLook | None = look_for(
            self.action, action_spec, [obs_dtypes[k] for k in self.obs_keys], device
        )
        self._looked = 0
        self._faulty_step = -1
        # hand-written steps a self-checking simulator found clean, counted by the step path while
        # `counting` (hand-written steps are counted now: "collect" mode, outside a collection), and
        # added to the host step counts whenever those are read (_settle)
        self.vouched_steps = 0
        self.counting = mode == "collect"
        # steps (hand-written or collected, eager) no simulator vouched for, counted by the step path;
        # a collection in which it did not grow needs no scan (collection_vouched)
        self.unvouched_steps = 0
        self._unvouched_at_start = 0

    @property
    def mode(self) -> str:
        """``"collect"``, ``"step"`` or ``"off"``; leaving ``"collect"``, the hand-written steps held are scanned and counted."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if getattr(self, "_mode", None) == "collect" and value != "collect":  # (flush scans in "collect" mode only)
            self.flush()
            self._fold()
        self._mode = value
        self.counting = value == "collect" and not getattr(self, "_collecting", 0)

    @property
    def every_step(self) -> bool:
        return self.mode == "step"

    @property
    def deferring(self) -> bool:
        """Hand-written steps are kept and scanned in batches (``"collect"`` mode, outside a collection)."""
        return self.mode == "collect"

    # ---------------------------------------------------- hand-written loops
    @property
    def hand_step(self) -> Any:
        """What a hand-written step calls in ``"collect"`` mode: :meth:`look` on the CPU, else :meth:`defer`."""
        return self.defer if self.host_look is None else self.look

    def trusted(self, checked: SelfCheckedStep | None) -> SelfCheckedStep:
        """Whose verdict stands in for :meth:`look` on a clean step: ``checked`` where the CPU look would run.

        The step path reads ``last_step_clean`` after each hand-written step: clean, it only
        adds the step to :attr:`vouched_steps` (while :attr:`counting`), else calls :attr:`hand_step`.
        """
        return checked if checked is not None and self.host_look is not None else NOT_SELF_CHECKED

    def look(
        self, root_obs: dict, action: torch.Tensor, next_obs: dict, reward: torch.Tensor, missing: torch.Tensor
    ) -> None:
        """One hand-written CPU step, looked at in place (:mod:`gpu_envs.core.health_look`); a fault recorded at once.

        A step the look cannot clear goes to :meth:`faults` (each row's fault, this step,
        the value). Inside a collection (it scans its buffer) or a pause nothing is looked at.
        """
        look = self.host_look
        if self._collecting or look is None or self._mode != "collect":
            return
        self._settle()
        if action.__class__ is dict:  # agent groups' actions ({key: tensor}): not checked (the action check is off)
            action = self._no_action
        step = self._host_steps
        self._host_steps = step + 1
        self._looked += 1
        if look(action, [next_obs[key] for key in self.obs_keys], reward, missing):
            return
        code, value = self.faults(action, next_obs, reward, missing, self.num_envs)
        self._record(code > 0, step, code, value)
        self._faulty_step = step

    def _settle(self) -> None:
        """Count the :attr:`vouched_steps` as looked at (the host's step numbers read after this are exact)."""
        vouched = self.vouched_steps
        if vouched:
            self._host_steps += vouched
            self._looked += vouched
            self.vouched_steps = 0

    def _fold(self) -> None:
        """Bring the device step counter up to date with the steps :meth:`look` counted on the host."""
        self._settle()
        if self._looked:
            self.steps.add_(self._looked)
            self._looked = 0

    def defer(
        self, root_obs: dict, action: torch.Tensor, next_obs: dict, reward: torch.Tensor, missing: torch.Tensor
    ) -> None:
        """One hand-written step's transition, kept for the next :meth:`flush` (references, no tensor op).

        Inside a collection (:meth:`collecting`) nothing is kept: the collection scans
        its own buffer. Every :attr:`defer_steps` steps the kept ones are scanned.
        """
        if self._collecting:
            return
        if len(self._pending) >= self.defer_steps > 0:  # a full batch: scanned before this step is kept
            self.flush()
        step: list[Any] = [root_obs, action, next_obs, reward, missing, None]
        if not self.defer_steps:
            self.defer_steps = _defer_steps(step, self.device)
        self._pending.append(step)

    def exempt(self, rows: torch.Tensor) -> None:
        """The last kept step's ``rows`` (bool ``[N, 1]``) were handled by a wrapper (``Quarantine``): no fault there.

        ``Quarantine`` calls it right after the step it ended those rows in, before the
        step is scanned (a batch is scanned when the NEXT step arrives, or when the record
        is read). Without a kept step (inside a collection) it does nothing: the
        collection's buffer carries the wrapper's ``("next", "quarantined")`` itself.
        """
        self._settle()
        if self._pending:
            self._pending[-1][5] = rows
        elif self._faulty_step >= 0 and self._faulty_step == self._host_steps - 1:  # the last looked step recorded
            self.first_step.copy_(
                torch.where(rows.reshape(-1) & (self.first_step == self._faulty_step), -1, self.first_step)
            )

    def flush(self) -> None:
        """Scan the kept hand-written steps as one ``[N, k]`` collection (:meth:`scan`), and forget them."""
        pending, self._pending = self._pending, []
        if not pending or self.mode != "collect":
            return
        roots, actions, nexts, rewards, missing, exempt = zip(*pending, strict=True)
        keys = [key for key in self.obs_keys if key in nexts[0]]
        stack = torch.stack
        flat: dict = {}
        for key in keys:
            flat[key] = stack([root[key] for root in roots], 1)
            flat[("next", *(key if isinstance(key, tuple) else (key,)))] = stack([step[key] for step in nexts], 1)
        if self.action.active:  # (an env of agent groups: its actions are not checked)
            flat["action"] = stack(actions, 1)
        flat[("next", "reward")] = stack(rewards, 1)
        flat[("next", "final_obs_missing")] = stack(missing, 1)
        if any(rows is not None for rows in exempt):
            none = torch.zeros_like(missing[0])
            flat[("next", QUARANTINED)] = stack([none if rows is None else rows for rows in exempt], 1)
        td = TensorDict(nest(flat), batch_size=(self.num_envs, len(pending)), device=self.device)
        self.scan(td, self._action_spec, keys)

    @contextlib.contextmanager
    def collecting(self) -> Iterator[None]:
        """Inside, hand-written-step deferral is off (a collection scans its own buffer); kept steps are scanned first."""
        self.flush()
        self._settle()
        if not self._collecting:
            self._unvouched_at_start = self.unvouched_steps
        self._collecting += 1
        self.counting = False
        try:
            yield
        finally:
            self._collecting -= 1
            self.counting = self._mode == "collect" and not self._collecting

    @property
    def collection_vouched(self) -> bool:
        """Every step since the last collection began was vouched for clean by its simulator (``SelfCheckedStep``)."""
        return self.unvouched_steps == self._unvouched_at_start

    def _action_check(self, spec: Spec) -> ActionCheck:
        check = self._actions.get(id(spec))
        if check is None or check.spec is not spec:
            check = self._actions[id(spec)] = ActionCheck(spec, self.device)
        return check

    # ------------------------------------------------------------- recording
    def faults(
        self,
        action: torch.Tensor,
        obs: dict,
        reward: torch.Tensor,
        missing: torch.Tensor,
        rows: int,
        action_check: ActionCheck | None = None,
        obs_keys: Iterable | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(code [rows], value [rows])`` of each transition row (the first fault checked wins)."""
        check = self.action if action_check is None else action_check
        found: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        if check.active:
            a = action.reshape(rows, -1)
            if check.finite:
                found.append((ACTION_NAN, *first_bad(a, ~torch.isfinite(a))))
            else:
                low, high = check.bounds()
                found.append((ACTION_RANGE, *first_bad(a, (a < low.reshape(-1)) | (a > high.reshape(-1)))))
        r = reward.reshape(rows, -1)
        found.append((REWARD_NAN, *first_bad(r, ~torch.isfinite(r))))
        keep = ~missing.reshape(rows, 1)
        keys = self.obs_keys if obs_keys is None else obs_keys
        for i, key in enumerate(self.obs_keys):
            if key in keys and key in obs:
                x = obs[key].reshape(rows, -1)
                found.append((OBS + i, *first_bad(x, ~torch.isfinite(x) & keep)))
        code = torch.zeros(rows, dtype=torch.int64, device=self.device)
        value = torch.zeros(rows, dtype=torch.float64, device=self.device)
        for kind, bad, val in reversed(found):  # the first listed wins where several are bad
            code = torch.where(bad, kind, code)
            value = torch.where(bad, val, value)
        return code, value

    def watch(self, action: torch.Tensor, obs: dict, reward: torch.Tensor, missing: torch.Tensor) -> None:
        """One step's transition (``"step"`` mode): rows without a record take this step's fault.

        The fewest ops :meth:`faults` allows: float entries are summed per row (a NaN or
        an infinity survives the sum, which is the value recorded), a lone discrete
        action is compared as it is, and the fault codes are chosen with ``where`` on
        ``[N]`` tensors, the first checked entry winning.
        """
        n = self.num_envs
        check = self.action
        entries: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (kind, ok [N], value [N]), in priority order
        if check.active:
            a = action.reshape(n, -1)
            if check.finite:
                total = a.sum(1)
                entries.append((ACTION_NAN, torch.isfinite(total), total))
            elif a.shape[1] == 1:
                low, high = check.bounds()
                a = a.view(n)
                entries.append((ACTION_RANGE, (a >= low) & (a <= high), a))
            else:
                low, high = check.bounds()
                bad, value = first_bad(a, (a < low.reshape(-1)) | (a > high.reshape(-1)))
                entries.append((ACTION_RANGE, ~bad, value))
        r = reward.view(n) if reward.shape[-1] == 1 else reward.reshape(n, -1).sum(1)
        entries.append((REWARD_NAN, torch.isfinite(r), r))
        for i, key in enumerate(self.obs_keys):
            total = torch.where(missing.view(n), 0.0, obs[key].reshape(n, -1).sum(1))  # placeholders are no fault
            entries.append((OBS + i, torch.isfinite(total), total))
        kind, ok, value = entries[-1]
        code, value = torch.where(ok, 0, kind), torch.where(ok, 0.0, value)
        for kind, ok, val in reversed(entries[:-1]):
            code, value = torch.where(ok, code, kind), torch.where(ok, value, val)
        self._record(code > 0, self.steps, code, value)
        self.steps.add_(1)

    def scan(self, data: Any, action_spec: Spec, obs_keys: Iterable, vouched: bool = False) -> None:
        """A collection's ``[N, T]`` transitions (``"collect"`` mode): one reduction per entry, then ``[N]`` ops.

        ``action_spec`` and ``obs_keys`` are those of the env that collected (a
        ``TransformedEnv``'s own). Each row's entries are summed over the collection (a
        NaN or an infinity survives a sum; a sum that overflows is flagged too, values
        near the float limit being as bad), discrete actions reduced to their extremes;
        a row that holds a fault is recorded with the collection's first step. Which
        step exactly, and its value, is found when the record is raised, from this
        buffer (:meth:`raise_record`). Rows whose final observation was withheld
        somewhere in the collection (placeholders, ``final_obs_missing``) are checked on
        the observations they acted on instead. On the CPU a few numpy reductions over
        the buffer's memory first look for anything wrong at all: a healthy collection
        costs only those. ``vouched``: ``data`` is exactly what the env's simulator wrote
        and it checked every step itself (:attr:`collection_vouched`); the steps are counted.
        """
        self._fold()
        n, t = data.batch_size[0], data.batch_size[-1]
        if vouched:  # (kept as a scan without checks: a record from an earlier one sees its buffer refilled)
            self._scans = [*self._scans[-1:], (self._host_steps, t, data, None, None)]
            self.steps.add_(t)
            self._host_steps += t
            return
        nxt = data.get("next", None)
        if nxt is None or nxt.get("reward", None) is None or nxt.get("final_obs_missing", None) is None:
            return  # not transitions of this contract (a wrapper that dropped keys): nothing to check
        check = self._action_check(action_spec)
        if data.get("action", None) is None:
            check = ActionCheck(None, self.device)
        keys = {key for key in obs_keys if nxt.get(key, None) is not None}
        exempt = nxt.get(QUARANTINED, None)
        if exempt is not None:  # steps a wrapper ended for their non-finite values: their faults are its
            data = _without_exempt(data, exempt.reshape(n, t), check, [key for key in self.obs_keys if key in keys])
            nxt = data.get("next")
        if not self._cuda and healthy_on_host(data, nxt, check, [key for key in self.obs_keys if key in keys]):
            self.steps.add_(t)
            self._host_steps += t
            return
        found: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        if check.active:
            a = data.get("action").reshape(n, t, -1)
            if check.finite:
                total = row_sum(a)
                found.append((ACTION_NAN, ~torch.isfinite(total), total))
            else:
                low, high = torch.aminmax(a.reshape(n, t) if a.shape[2] == 1 else a, dim=1)  # [N, k] or [N]
                low, high = low.reshape(n, -1), high.reshape(n, -1)
                valid_low, valid_high = check.bounds()
                over, under = high > valid_high.reshape(-1), low < valid_low.reshape(-1)
                bad, value = first_bad(torch.where(over, high, low), over | under)
                found.append((ACTION_RANGE, bad, value))
        reward = row_sum(nxt.get("reward"))
        found.append((REWARD_NAN, ~torch.isfinite(reward), reward))
        missing = nxt.get("final_obs_missing").reshape(n, t)
        # (a sum of bytes: bool any() over rows is several times slower on the CPU)
        some_missing, last_missing = missing.view(torch.uint8).sum(1, dtype=torch.int32) > 0, missing[:, -1]
        for i, key in enumerate(self.obs_keys):
            if key in keys:
                # the next observations; rows with a placeholder in this collection: the observations
                # they acted on (which never hold one) and the last step's next one
                following = nxt.get(key)
                last = torch.where(last_missing, 0.0, row_sum(following[:, -1]))
                total = torch.where(some_missing, row_sum(data.get(key)) + last, row_sum(following))
                found.append((OBS + i, ~torch.isfinite(total), total))
        # on the CPU the host reads the flags in place for free: a healthy collection records nothing
        if self._cuda or any(bad.numpy().any() for _, bad, _ in found):
            code = torch.zeros(n, dtype=torch.int64, device=self.device)
            value = torch.zeros(n, dtype=torch.float64, device=self.device)
            for kind, bad, val in reversed(found):  # the first listed wins where several are bad
                code = torch.where(bad, kind, code)
                value = torch.where(bad, val, value)
            self._record(code > 0, self.steps.expand(n), code, value)
        self.steps.add_(t)
        # (two: on CUDA a poll reads the record of the scan before the last one)
        self._scans = [*self._scans[-1:], (self._host_steps, t, data, check, keys)]
        self._host_steps += t

    def _record(self, bad: torch.Tensor, step: torch.Tensor | int, code: torch.Tensor, value: torch.Tensor) -> None:
        new = bad & (self.first_step < 0)
        self.first_step.copy_(torch.where(new, step, self.first_step))
        self.code.copy_(torch.where(new, code, self.code))
        self.value.copy_(torch.where(new, value, self.value))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Check nothing inside (``check_env`` inspects every value itself); the record is cleared after."""
        mode = self.mode
        self.mode = "off"
        try:
            yield
        finally:
            self.first_step.fill_(-1)
            self.code.zero_()
            self._mirror.fill_(-1)
            self._copied = None
            self._pending = []
            self.mode = mode

    def restart(self) -> None:
        """A full reset: steps are counted from 0 again (the record stays until it is raised)."""
        self.flush()
        self.steps.zero_()
        self._host_steps = self._looked = self.vouched_steps = 0
        self._faulty_step = -1
        self._scans = []

    # --------------------------------------------------------------- raising
    def poll(self, where: str) -> None:
        """Raise what the record holds, without waiting for the device (module docstring)."""
        if self.mode == "off":
            return
        self.flush()
        if not self._cuda:
            if int(self.first_step.numpy().max()) >= 0:  # host memory: read in place, no op, nothing to wait for
                self.raise_record(where)
            self._scans = []  # nothing pending: no buffer is kept alive for a later raise
            return
        copied = self._copied
        if copied is not None and copied.query() and int(self._mirror.numpy().max()) >= 0:
            self.raise_record(where)
        if copied is None or copied.query():
            self._mirror.copy_(self.first_step, non_blocking=True)
            self._copied = torch.cuda.Event()
            self._copied.record()

    def check(self, where: str = "env.check_health()") -> None:
        """Read the record (one sync) and raise it, if any row holds a fault."""
        self.flush()
        if bool((self.first_step >= 0).any()):
            self.raise_record(where)

    def raise_record(self, where: str) -> None:
        """Read the whole record (this syncs: an error is being raised), clear it, raise it."""
        first, code, value = self.first_step.tolist(), self.code.tolist(), self.value.tolist()
        self.first_step.fill_(-1)
        self.code.zero_()
        self._mirror.fill_(-1)
        self._copied = None
        rows = [i for i, step in enumerate(first) if step >= 0]
        if not rows:
            return
        spans = {i: 1 for i in rows}
        for i in rows:
            self._refine(i, first, code, value, spans)
        kinds = {code[i] for i in rows}
        shown = "; ".join(
            f"row {i}: {describe_fault(self.action, self.obs_keys, code[i], value[i])} at step {first[i]}{span_note(first[i], spans[i])}"
            for i in rows[:_SHOWN_ROWS]
        )
        more = f" (and {len(rows) - _SHOWN_ROWS} more rows)" if len(rows) > _SHOWN_ROWS else ""
        fixes = " ".join(dict.fromkeys(fault_fix(kind) for kind in sorted(kinds)))
        raise HealthCheckError(
            f"{len(rows)} row(s) held bad values (flagged on the device, raised at {where}): {shown}{more}. Steps count "
            f"from the last full reset ({self._counted()}). {fixes} The flags are cleared and the env is usable; rows "
            "whose state is not finite keep it until they are reset. Turn the checks off with health_checks=False.",
            rows=rows,
            steps=[first[i] for i in rows],
            values=[value[i] for i in rows],
        )

    def _refine(self, row: int, first: list, code: list, value: list, spans: dict) -> None:
        """A scanned row's exact first faulty step, fault and value, from its collection's buffer (host path)."""
        found = [i for i, entry in enumerate(self._scans) if entry[0] == first[row] and entry[3] is not None]
        if not found:
            return
        start, t, data, check, keys = self._scans[found[-1]]
        if any(
            entry[2] is data for entry in self._scans[found[-1] + 1 :]
        ):  # the buffer was refilled by a later collection
            spans[row] = t
            return
        nxt = data.get("next")
        obs = {key: nxt.get(key)[row] for key in self.obs_keys if key in keys}
        codes, values = self.faults(
            data.get("action")[row], obs, nxt.get("reward")[row], nxt.get("final_obs_missing")[row], t, check, keys
        )
        steps = (codes > 0).nonzero()
        if steps.numel() == 0:  # changed in place since the scan: the record's summary stands
            spans[row] = t
            return
        k = int(steps[0, 0])
        first[row], code[row], value[row] = start + k, int(codes[k]), float(values[k])

    def _counted(self) -> str:
        return "every step"


# the bytes of hand-written steps a monitor keeps before scanning them (references to the env's own
# outputs: memory that stays allocated until the scan), and the most steps it keeps
_DEFER_BYTES = {"cpu": 1 << 23}
_DEFAULT_DEFER_BYTES = 1 << 26
_MAX_DEFER_STEPS = 128


def _defer_steps(step: Sequence[Any], device: torch.device) -> int:
    """How many hand-written steps are scanned together: as many as fit the device's budget, at most 128."""
    size = 0
    for part in step:
        for value in part.values() if isinstance(part, dict) else (part,):
            if isinstance(value, torch.Tensor):
                size += value.numel() * value.element_size()
    budget = _DEFER_BYTES.get(device.type, _DEFAULT_DEFER_BYTES)
    return max(1, min(_MAX_DEFER_STEPS, budget // max(1, size)))


def _without_exempt(data: Any, exempt: torch.Tensor, check: ActionCheck, obs_keys: list) -> Any:
    """``data`` with the exempt steps' (``[N, T]``) checked values made harmless: a shallow copy, a few ``where``.

    Actions become a valid one (the range's low end, or 0), rewards and observations 0.
    The copy keeps the same entries otherwise, so the exact step found later (from the
    record's buffer, :meth:`HealthMonitor.raise_record`) skips those steps too.
    """
    out = data.clone(recurse=False)
    nxt = data.get("next").clone(recurse=False)
    out.set("next", nxt)

    def harmless(value: torch.Tensor, fill: Any) -> torch.Tensor:
        mask = exempt.view(*exempt.shape, *([1] * (value.dim() - 2)))
        return torch.where(mask, torch.as_tensor(fill, device=value.device).to(value.dtype), value)

    action = data.get("action", None)
    if action is not None and check.active:  # a valid action: the low end of each range (MultiDiscrete: per element)
        out.set("action", harmless(action, 0 if check.low is None else check.low))
    nxt.set("reward", harmless(nxt.get("reward"), 0))
    for key in obs_keys:
        nxt.set(key, harmless(nxt.get(key), 0))
        if data.get(key, None) is not None:
            out.set(key, harmless(data.get(key), 0))
    return out
