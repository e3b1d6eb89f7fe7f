"""The one step path: how :class:`~gpu_envs.core.env.BatchedEnv` turns an action into a transition.

Every step of every backend, in every collection (``env.step``,
``step_and_maybe_reset``, ``rollout``, ``collect`` eager, compiled or CUDA-graph
captured, and ``collect``'s random-action writes straight into a buffer), runs
:class:`StepPath`, in this order::

    td["action"] --1 guard----------> refused after a call that did not finish (CallGuard)
                 --2 action check---> metadata (type, shape, dtype, device); values where bound
                 --3 backend advance> the bound Advance (below): ONE RawStep shape
                 --4 final-obs rule-> FinalObsRule(obs, done, final_obs, final_mask)
                                      -> next observations, final_obs_missing
                 --5 TensorDict build> td["next"]; the next root from the cached post-reset obs

The path owns what a step reads and writes besides the simulator: the cached root
observations (:attr:`StepPath.root_obs`), the guard (:attr:`StepPath.guard`) and the
``done`` of the last step (:attr:`StepPath.last_done`, for masked resets).

What differs between backends and moments is decided once, in :meth:`StepPath.bind`
(after construction, after the first step, after a full reset, when ``validate``
changes), never per step:

* the backend advance, one of four named classes (:mod:`gpu_envs.core.advances`) with
  one method, ``run(action) -> RawStep``: :class:`FirstStep` on the first step (the
  backend's ``step``, validated field by field by
  :class:`~gpu_envs.core.step_validation.StepValidator`, then
  :meth:`~StepPath.bind` again); later, :class:`DirectStep` (the function the backend
  hands from :meth:`~gpu_envs.backends.base.Backend.direct_step` where it declares
  ``capabilities.direct_step``: for the built-in envs, their own ``raw_step``) or
  :class:`BackendStep` (its ``step``); and around either, for a backend that hands on
  tensors it did not make (``capabilities.trusted_outputs`` False),
  :class:`WatchedStep`, which compares the outputs' metadata on every step;
* the action value check: none, or ``StepValidator.action_values`` (Discrete ranges on
  the first step; every range with ``validate_actions``);
* the health watch: none, ``HealthMonitor.watch`` (``health_checks="step"``: every
  transition's values flagged on the device, no sync) or, by default, the monitor's
  hand-step check: on the CPU ``HealthMonitor.look`` (one C look at the step's tensors),
  or, where the direct step's simulator checks its own values
  (``Backend.self_checked_step``: the built-in envs' native step), only a count of the
  steps it found clean (``HealthMonitor.trusted``), elsewhere
  ``HealthMonitor.defer`` (the tensors kept and scanned in batches;
  :mod:`gpu_envs.core.health`);
* the TensorDict build: flat keys (one dict, built without re-validation) or nested
  ones (tuple keys become sub-TensorDicts);
* whether ``step_and_maybe_reset`` may take its steady form (:attr:`StepPath.steady`:
  after the first step, flat keys, no every-step watch or action-value check): steps
  1-5 written out in one method, :meth:`StepPath.step_and_reset`, for a plain
  TensorDict stepped eagerly.

:meth:`StepPath.step` and :meth:`StepPath.values` share steps 2-4
(:meth:`~StepPath.check_action`, :meth:`~StepPath.advance` -- which returns the step's
:class:`Advanced` record -- and :meth:`~StepPath.finish`);
:meth:`StepPath.values` is the same path ending in the transition's tensors instead of
TensorDicts (keys :func:`~gpu_envs.contract.keys.transition_keys`), for random-action
collections that copy them straight into their buffer; ``tests/test_step_path.py``
proves every variant equal, key by key.

Inputs are dated, on the host. Every change of the root (a step, a reset, a loaded
state) numbers it on (:attr:`StepPath.stamp`); each root TensorDict the path builds
carries its number, and each ``td["next"]`` the negated number of its step, as a plain
mark (:func:`gpu_envs.utils.tensordicts.stamp`, never an entry). Integers and
identities compared on the host: no host sync. A step given

* the root of the moment (or a TensorDict the path did not build: a user's, a
  transform's copy) steps it;
* the last step's ``td["next"]``, or a copy of it sharing its observation tensor
  (torchrl's ``step_mdp``) -- the torchrl loop ``td = env.step(td)["next"]`` -- steps
  it the torchrl way: the env continues from its cached post-reset root, and the
  input's observation and done entries are replaced by that root's (on rows that ended
  they held the FINAL observation; elsewhere the two are equal), so the transition
  recorded in ``td`` is the one the env made. A policy that acted on that input saw the
  final observation on those rows: act on the root ``step_and_maybe_reset`` returns
  (or call ``env.reset(td)`` with ``"_reset"`` = the ended rows first, torchrl's
  ``maybe_reset``);
* a root or ``td["next"]`` of an earlier moment (the same root stepped twice, one from
  two steps ago, one from before a reset) refuses the step with
  :class:`~gpu_envs.contract.errors.StaleInputError` naming the fix, before anything moves.

Inside a ``torch.compile``'d collection chunk (``collect(..., compile=True)``) this
dating and the guard's call numbering are left out (``is_compiling()``, folded away
when traced): they are host integers that the compiler would turn into guards and
recompile on at every step, and the chunk is fed only the roots it makes itself.

Example::

    path = StepPath(backend, rule, checks, batch_size, device)
    td, root = path.step_and_reset(td)
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any, NoReturn

import torch
from tensordict import TensorDict, TensorDictBase
from torch.compiler import is_compiling

import gpu_envs.utils.tensordicts as tds
from gpu_envs.backends.base import Backend, RawStep
from gpu_envs.contract.errors import ClosedEnvError, ResetNeededError, StaleInputError
from gpu_envs.contract.final_obs import FinalObsRule
from gpu_envs.contract.keys import ObsDict, transition_keys
from gpu_envs.contract.protocols import NOT_SELF_CHECKED, OutputTargets
from gpu_envs.contract.specs import Binary, Box, Discrete, MultiDiscrete
from gpu_envs.core.advances import Advance, Advanced, BackendStep, DirectStep, FirstStep, WatchedStep
from gpu_envs.core.health import HealthMonitor
from gpu_envs.core.step_validation import StepValidator
from gpu_envs.utils.arguments import STEP_CALLS, check_td
from gpu_envs.utils.call_guard import CallGuard
from gpu_envs.utils.tensordicts import (
    fast_entries,
    fast_entries_and_stamp,
    get_entry,
    nest,
    new_stamped_flat_td,
    set_entry,
    stamp,
    stamp_of,
)

__all__ = ["CLOSED", "NEVER_RESET", "StepPath"]

# why the guard is held when no call was interrupted (the env's reasons to refuse every call)
NEVER_RESET = "never reset"
CLOSED = "closed"
_NOTHING = object()  # matches no entry


def _no_fill(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """:attr:`StepPath.lone_fill` of an env of several observation keys (never called: one key only)."""
    raise AssertionError("the steady step fills a lone observation key only")


# -------------------------------------------------------------------- the path
class StepPath:
    """The step of one env, from action to transition (see the module docstring).

    Args:
        backend: the env's backend.
        rule: the final-observation rule (torch form) of the env's observations.
        validator: the env's action and output checks.
        batch_size, device: the env's.

    Attributes:
        root_obs: the observations the next step acts on (post-reset on ended rows).
        guard: refuses calls after one that did not finish, until a full reset.
        last_done: ``[N, 1]`` rows reset by the backend in the last ``step`` (a masked
            reset serves their cached observations instead of resetting them again).
        validate_actions: check action values on every step (one host sync each).
        stamp: the number of the current root (module docstring); whoever replaces
            :attr:`root_obs` outside the path calls :meth:`moved`.
        monitor: the env's :class:`~gpu_envs.core.health.HealthMonitor`, or None.
        stepper: the bound :class:`Advance` (module docstring).
        run: the advance as one callable (a :class:`DirectStep`'s function itself).
        steady: :meth:`step_and_reset` may take its steady form (module docstring).
    """

    def __init__(
        self,
        backend: Backend,
        rule: FinalObsRule,
        validator: StepValidator,
        batch_size: torch.Size,
        device: torch.device,
    ) -> None:
        self.backend = backend
        self.rule = rule
        self.validator = validator
        self.batch_size = batch_size
        self.device = device
        self.guard = CallGuard("this env")
        self.guard.hold(NEVER_RESET)  # refused until the first reset
        self.false = torch.zeros(batch_size.numel(), 1, dtype=torch.bool, device=device)
        # the flags of every root: one constant, never written (outputs are read-only)
        self.root_flags = {"done": self.false, "terminated": self.false, "truncated": self.false}
        self.root_obs: ObsDict = {}
        self.last_done = self.false
        self.validate_actions = False
        self.monitor: HealthMonitor | None = None
        self.first = True  # the first step is validated (first_step_done), then the parts are bound again
        self.keys = list(validator.obs_meta)
        self.action_shape, self.action_dtype = validator.action_shape, validator.action_dtype
        self.on_cpu = device.type == "cpu"  # (is_cpu: the device check without making a torch.device per step)
        self._lone = self.keys[0] if len(self.keys) == 1 else None
        # the steady step's form of the final-observation rule for one key (step_and_reset)
        self.lone_fill = _no_fill if self._lone is None else rule.filler(self._lone)
        self.none_missing = rule.none_missing
        self.stamp = 0
        self.advanced = Advanced()
        # a top-level observation key, and its tensor in the last td["next"] (a copy fed back is stepped from the root)
        self._next_marker = next((k for k in self.keys if isinstance(k, str)), None)
        self._last_next: object = _NOTHING
        self._reusing = False  # inside reusing_outputs(), with the backend reusing its outputs
        # an env of agent groups (gpu_envs.contract.groups): the actions are one entry per group, handed to the
        # backend as {(group, "action"): tensor}; each group's ("next", group, "final_obs_missing") is the row's
        leaves = validator.action_leaves
        self._action_keys = None if leaves is None else list(leaves)
        specs = [validator.action_spec] if leaves is None else list(leaves.values())
        self._discrete = any(isinstance(spec, (Discrete, MultiDiscrete, Binary)) for spec in specs)
        self._box = any(isinstance(spec, Box) for spec in specs)
        group_map = getattr(backend, "group_map", None) or {}
        self._group_sizes = [(group, len(agents)) for group, agents in group_map.items()]
        self.bind()

    # ------------------------------------------------------------------- parts
    def bind(self) -> None:
        """Choose the parts of the path (module docstring); called whenever what they depend on changes."""
        backend, validator = self.backend, self.validator
        capabilities = backend.capabilities
        checked = None  # the simulator that checks its own steps, where its step is called directly
        if self.first:
            self.stepper: Advance = FirstStep(backend, validator, weakref.WeakMethod(self.first_step_done))
        else:
            direct = backend.direct_step() if capabilities.direct_step else None
            stepper: Advance = BackendStep(backend) if direct is None else DirectStep(direct)
            self.stepper = stepper if capabilities.trusted_outputs else WatchedStep(stepper, validator.outputs)
            checked = None if direct is None else backend.self_checked_step()
        values = (
            (self._discrete and (self.validate_actions or self.first))
            or (self._box and self.validate_actions)
            or capabilities.check_action_values
        )
        self.check_values: Callable[[torch.Tensor], None] | None = validator.action_values if values else None
        monitor = self.monitor
        self.watch = monitor.watch if monitor is not None and monitor.every_step else None
        # hand-written steps in the default mode: looked at in place on the CPU, else kept and scanned in
        # batches (a collection scans its own buffer)
        self.defer = monitor.hand_step if monitor is not None and monitor.deferring else None
        self.checked = NOT_SELF_CHECKED if self.defer is None or monitor is None else monitor.trusted(checked)
        self.deferring_monitor = None if self.defer is None else monitor  # the monitor counting hand-written steps
        info_spec = getattr(backend, "info_spec", None)
        info_keys = [] if info_spec is None else list(info_spec.keys(include_nested=True, leaves_only=True))
        nested = any(isinstance(key, tuple) for key in [*self.keys, *info_keys])
        # the TensorDict layout: flat keys make one plain dict per TensorDict; nested keys
        # make sub-dicts, which become sub-TensorDicts
        self.entries: Callable[[dict], dict] = nest if nested else dict
        self.nested = nested
        self.new_td: Callable[..., TensorDict] = tds.new_td if nested else tds.new_flat_td
        # the advance as one callable: a direct step is the backend's own function, called with nothing between
        stepper = self.stepper
        self.run: Callable[[torch.Tensor], RawStep] = stepper.step if isinstance(stepper, DirectStep) else stepper.run
        # step_and_reset's steady form (its docstring): after the first step, flat keys, no per-step value checks
        flat = not nested and self._action_keys is None  # (action values are checked on the general path)
        self.steady = flat and not self.first and self.watch is None and self.check_values is None

    def moved(self) -> None:
        """The root was replaced outside a step (a reset, a loaded state): earlier roots and ``td["next"]`` are stale."""
        self.stamp += 1
        self._last_next = _NOTHING

    def first_step_done(self) -> None:
        """The first step was validated (:class:`FirstStep`): bind the later steps' parts."""
        self.first = False
        self.bind()

    def refuse(self, call: str) -> NoReturn:
        """Why ``call`` cannot run: the env was closed or never reset, its backend died, or a call was interrupted."""
        guard = self.guard
        if guard.held and guard.pending == CLOSED:
            raise ClosedEnvError("this env was closed; build a new one with gpu_envs.make() or gpu_envs.wrap().")
        if guard.held and guard.pending == NEVER_RESET:
            raise ResetNeededError(f"{call}() was called before reset(): call env.reset() first.")
        self.backend.check_usable()  # a backend that knows it is dead says why
        guard.refuse(call)

    def other_input(self, td: TensorDictBase, dated: int | None) -> None:
        """A step's input that is not the current root (module docstring): the last ``td["next"]`` or a stale one."""
        if dated == -self.stamp or (dated is None and self._next_marker is not None):
            # the last step's td["next"] (or a step_mdp copy of it): continue from the cached root, torchrl's way
            for key, value in self.root_obs.items():
                td.set(key, value)
            for key, value in self.root_flags.items():
                td.set(key, value)
            return
        assert dated is not None
        what = 'a td["next"] of an earlier step' if dated < 0 else f"an earlier root TensorDict (root {dated})"
        raise StaleInputError(
            f"step() was given {what}; this env is at root {self.stamp}: it was stepped, reset or loaded since (in "
            "this thread or another), so those observations are not the ones it continues from. Step the root the "
            "env returned last: `td, td_root = env.step_and_maybe_reset(td); td = td_root` (torchrl's loop), or "
            "`td = env.root()`."
        )

    # ------------------------------------------------------------------- steps
    def action_of(self, td: TensorDictBase, eager: bool) -> torch.Tensor:
        """``td["action"]``, checked (metadata; values where bound), before anything moves.

        ``eager``: not inside a compiled chunk (``not is_compiling()``, asked once per step by the caller).
        """
        entries = fast_entries(td)
        action: Any  # whatever td holds: check_action refuses all but a tensor
        if entries is not None:  # a plain TensorDict: its own entries, read without tensordict's dispatch
            action = entries.get("action") if self._action_keys is None else self.group_actions(td)
            if eager:  # dated inputs: host bookkeeping, left out of compiled chunks (module docstring)
                dated = stamp_of(td)
                if (dated is not None and dated != self.stamp) or entries.get(self._next_marker) is self._last_next:
                    self.other_input(td, dated)
        else:
            check_td(td, STEP_CALLS)  # a dict, None, a (td, root) tuple: refused before anything moves
            action = get_entry(td, "action") if self._action_keys is None else self.group_actions(td)
            if eager:
                dated = stamp_of(td)
                watched = None if self._next_marker is None else get_entry(td, self._next_marker)
                if (dated is not None and dated != self.stamp) or (watched is not None and watched is self._last_next):
                    self.other_input(td, dated)
        self.check_action(action)
        return action

    def group_actions(self, td: TensorDictBase) -> dict:
        """An env of agent groups: ``{(group, "action"): td[group, "action"]}`` (a missing one: None, refused next)."""
        return {key: td.get(key, None) for key in self._action_keys or ()}

    def check_action(self, action: Any) -> None:
        """Step 2 of every step: the action's metadata (type, shape, dtype, device), and its values where bound."""
        if (  # (step_and_reset's steady form writes this test out: keep the two the same)
            action.__class__ is not torch.Tensor
            or action.shape != self.action_shape
            or action.dtype is not self.action_dtype  # torch dtypes are singletons
            or (not action.is_cpu if self.on_cpu else action.device != self.device)
        ):
            self.validator.action(action)  # raises, unless a tensor subclass with the right metadata
        check_values = self.check_values
        if check_values is not None:
            check_values(action)

    def advance(self, action: torch.Tensor, eager: bool) -> Advanced:
        """Steps 3-4 of every step, guarded: the bound :class:`Advance` and the final-observation rule.

        Returns the path's :class:`Advanced` record (rewritten by the next step) and
        leaves the guard pending; the caller builds its outputs, then calls
        :meth:`finish` with its ``call`` (the guard's call number; None inside a compiled
        chunk -- ``eager`` False -- which leaves the numbering out: module docstring). An
        exception in between leaves the env refusing calls until a full reset.
        """
        guard = self.guard
        guard.pending = "step"
        call = None
        if eager:
            call = guard.calls + 1  # guard.start("step"), inline: the number a second thread would change
            guard.calls = call
        raw = self.stepper.run(action)
        next_obs, missing = self.rule(raw.obs, raw.done, raw.final_obs, raw.final_mask)
        if self.watch is not None:
            self.watch(action, next_obs, raw.reward, missing)
        self.root_obs = raw.obs
        out = self.advanced
        out.raw = raw
        out.next_obs = next_obs
        out.final_obs_missing = missing
        out.call = call
        return out

    def finish(self, call: int | None) -> None:
        """The end of a guarded step: refuse it if another thread stepped meanwhile, else release the guard."""
        guard = self.guard
        if call is not None and guard.calls != call:
            guard.overlapped("step")
        guard.pending = None

    def step(self, td: TensorDictBase) -> torch.Tensor:
        """Step with ``td["action"]``: sets ``td["next"]``, caches the next root; returns ``done`` ``[N, 1]``.

        The guard is marked around the backend call (two attribute writes): an
        exception escaping it leaves the env refusing calls until a full reset.
        """
        return self.step_in(td, not is_compiling())

    def step_in(self, td: TensorDictBase, eager: bool) -> torch.Tensor:
        """:meth:`step`, told whether it runs eagerly (``not is_compiling()``: its callers ask once per step)."""
        if self.guard.pending is not None:
            self.refuse("step")
        action = self.action_of(td, eager)
        previous = self.root_obs
        out = self.advance(action, eager)
        raw, next_obs, call = out.raw, out.next_obs, out.call
        dated = call is not None  # host integers a compiled chunk would guard on and recompile on (module docstring)
        number = 0
        if dated:
            self.stamp = number = self.stamp + 1
            marker = self._next_marker
            if marker is not None:
                marked = next_obs[marker]
                self._last_next = _NOTHING if marked is raw.obs[marker] else marked
        done = raw.done
        if self.nested:  # one flat dict, nested once: a group's observations and its info entries share a node
            flat = dict(next_obs)
            flat["reward"] = raw.reward
            flat["done"] = done
            flat["terminated"] = raw.terminated
            flat["truncated"] = raw.truncated
            flat["final_obs_missing"] = missing = out.final_obs_missing
            if raw.info:
                flat.update(raw.info)
            for group, agents in self._group_sizes:
                flat[group, "final_obs_missing"] = missing.unsqueeze(1).expand(-1, agents, 1)
            data = nest(flat)
        else:
            data = dict(next_obs)
            data["reward"] = raw.reward
            data["done"] = done
            data["terminated"] = raw.terminated
            data["truncated"] = raw.truncated
            data["final_obs_missing"] = out.final_obs_missing
            if raw.info:
                data.update(raw.info)
        following = self.new_td(data, self.batch_size, self.device)
        if dated:
            stamp(following, -number)
        set_entry(td, "next", following)
        self.last_done = done
        monitor = self.monitor
        if self.defer is not None and dated and monitor is not None:  # (not inside a compiled chunk)
            if self.checked.last_step_clean:  # the simulator checked this step itself: counted, not looked at
                if monitor.counting:
                    monitor.vouched_steps += 1
            else:
                monitor.unvouched_steps += 1
                self.defer(previous, action, next_obs, raw.reward, out.final_obs_missing)
        self.finish(call)
        return done

    def step_and_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDict]:
        """:meth:`step`, then ``(td, next root)``: the post-reset observations where rows ended.

        The steady state of most loops -- an eager step of a plain TensorDict, after the
        first step, on an env of flat keys whose steps are not watched one by one and whose
        action values are not checked (:attr:`steady`, decided in :meth:`bind`) -- runs
        here as one method: the same checks, guard, dating, final-observation rule and
        health count as :meth:`step_in` and :meth:`advance`, in the same order, without
        their calls and the :class:`Advanced` record. With one observation key and no final mask, the rule's
        two cases are written out (the final observations as they are, or the placeholder
        fill of :meth:`~gpu_envs.contract.final_obs.FinalObsRule.filler`). The calls it
        saves were two thirds of the wrapper's cost over the contract's floor on the CPU
        (``benchmarks/bench_overhead.py``, docs/BENCHMARKS.md). Every other step, and any
        input it cannot take as it is, goes through :meth:`general_step_and_reset`;
        ``tests/test_step_path.py`` proves the two equal, errors included.
        """
        entries, dated = fast_entries_and_stamp(td)
        guard = self.guard
        if entries is None or not self.steady or guard.pending is not None or is_compiling():
            return self.general_step_and_reset(td)
        action: Any = entries.get("action")  # whatever td holds: refused below unless a tensor
        if (dated is not None and dated != self.stamp) or entries.get(self._next_marker) is self._last_next:
            self.other_input(td, dated)
        if (  # check_action's metadata test, inline (its values check is off here: steady)
            action.__class__ is not torch.Tensor
            or action.shape != self.action_shape
            or action.dtype is not self.action_dtype
            or (not action.is_cpu if self.on_cpu else action.device != self.device)
        ):
            self.validator.action(action)
        previous = self.root_obs
        guard.pending = "step"
        call = guard.calls = guard.calls + 1  # guard.start("step"), inline (advance)
        obs, reward, terminated, truncated, done, final_obs, final_mask, info = self.run(action)  # a RawStep
        self.root_obs = obs
        self.stamp = number = self.stamp + 1
        lone = self._lone
        if lone is not None and final_mask is None:  # the rule's two cases for one key (docstring)
            now = obs[lone]
            if final_obs is None:  # placeholders where ended
                after, missing = self.lone_fill(done, now), done
            else:  # the pre-reset observation of every row
                after, missing = final_obs[lone], self.none_missing
            self._last_next = _NOTHING if after is now else after
            data = {lone: after, "reward": reward, "done": done, "terminated": terminated, "truncated": truncated}
            root = {lone: now, **self.root_flags}
        else:
            next_obs, missing = self.rule(obs, done, final_obs, final_mask)
            marker = self._next_marker
            if marker is not None:
                marked = next_obs[marker]
                self._last_next = _NOTHING if marked is obs[marker] else marked
            data = {**next_obs, "reward": reward, "done": done, "terminated": terminated, "truncated": truncated}
            root = {**obs, **self.root_flags}
        data["final_obs_missing"] = missing
        if info:
            data.update(info)
        set_entry(td, "next", new_stamped_flat_td(data, self.batch_size, self.device, -number))
        self.last_done = self.false
        monitor = self.deferring_monitor
        if monitor is not None:  # (as step_in)
            if self.checked.last_step_clean:
                if monitor.counting:
                    monitor.vouched_steps += 1
            else:
                monitor.unvouched_steps += 1
                defer = self.defer  # (set whenever the deferring monitor is)
                if defer is not None:
                    defer(previous, action, {key: data[key] for key in self.keys}, reward, missing)
        if guard.calls != call:  # finish(call), inline
            guard.overlapped("step")
        guard.pending = None
        return td, new_stamped_flat_td(root, self.batch_size, self.device, number)

    def general_step_and_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDict]:
        """:meth:`step_and_reset` for any input and env: :meth:`step_in`, then the next root."""
        eager = not is_compiling()
        self.step_in(td, eager)
        self.last_done = self.false
        data = self.entries(self.root_obs)
        data.update(self.root_flags)
        root = self.new_td(data, self.batch_size, self.device)
        if eager:
            stamp(root, self.stamp)
        return td, root

    def root(self) -> TensorDict:
        """The current root TensorDict: what the next step acts on."""
        if self.guard.pending is not None:
            self.refuse("root")
        data = self.entries(self.root_obs)
        data.update(self.root_flags)
        root = self.new_td(data, self.batch_size, self.device)
        stamp(root, self.stamp)
        return root

    # ---------------------------------------------------- straight into a buffer
    def values(self, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The same step as :meth:`step_and_reset`, returning the transition's tensors instead of TensorDicts.

        In the order of ``transition_keys(self.keys)``: root observations, the root's
        flags, the action, next observations, reward, the step's flags and
        ``final_obs_missing`` (see :meth:`values_in` for a buffer's own order).
        """
        if self.guard.pending is not None:
            self.refuse("step")
        self.check_action(action)
        previous = self.root_obs
        out = self.advance(action, not is_compiling())
        raw, next_obs, call = out.raw, out.next_obs, out.call
        if call is not None:  # (module docstring: compiled chunks)
            self.stamp += 1
            self._last_next = _NOTHING  # no td["next"] was handed out
            monitor = self.monitor
            if monitor is not None and not self.checked.last_step_clean:
                monitor.unvouched_steps += 1
        self.last_done = false = self.false
        self.finish(call)
        missing = out.final_obs_missing
        lone = self._lone
        if lone is not None:
            return (
                previous[lone],
                false,
                false,
                false,
                action,
                next_obs[lone],
                raw.reward,
                raw.done,
                raw.terminated,
                raw.truncated,
                missing,
            )
        keys = self.keys
        return (
            *(previous[k] for k in keys),
            false,
            false,
            false,
            action,
            *(next_obs[k] for k in keys),
            raw.reward,
            raw.done,
            raw.terminated,
            raw.truncated,
            missing,
        )

    @contextlib.contextmanager
    def reusing_outputs(self) -> Iterator[bool]:
        """Inside, the backend may write each step's outputs into memory it reuses (:meth:`Backend.reuse_outputs`).

        For :meth:`values` steps whose tensors the caller copies at once (a random-action
        ``collect``); yields whether the backend does. On the way out the cached root
        observations are copied, so no root handed out later shares the reused memory.
        """
        on = self.backend.reuse_outputs(True)
        self._reusing = on
        try:
            yield on
        finally:
            self._reusing = False
            if on:
                self.backend.reuse_outputs(False)
                self.root_obs = {key: value.clone() for key, value in self.root_obs.items()}

    def output_targets(self) -> OutputTargets | None:
        """Inside :meth:`reusing_outputs` (when on): the backend's :meth:`Backend.output_targets`; else None.

        A :meth:`values` step whose outputs were named lands them there; the root
        observations it caches may then be such memory, which the way out of
        :meth:`reusing_outputs` copies, as it copies the reused sets.
        """
        return self.backend.output_targets() if self._reusing else None

    def values_in(self, keys: list) -> Callable[[torch.Tensor], Any] | None:
        """``action -> the transition's tensors for keys`` (a buffer's layout, any order), or None.

        None unless ``keys`` are exactly this path's transition keys and the backend
        adds no info entries (a buffer laid out for more -- a policy's outputs, info --
        is written from TensorDicts), or before the first step.
        """
        own = transition_keys(self.keys)
        info = getattr(self.backend, "info_spec", None)
        has_info = info is not None and len(list(info.keys())) > 0
        if self.first or has_info or self._action_keys is not None or len(keys) != len(own) or set(keys) != set(own):
            return None
        if tuple(keys) == own:
            return self.values
        pick = itemgetter(*(own.index(key) for key in keys))
        values = self.values
        return lambda action: pick(values(action))
