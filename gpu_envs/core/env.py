"""``BatchedEnv``: the one public env contract, returning TensorDicts on the device.

Every backend (built-in torch envs, user torch envs, gymnasium, Isaac Lab, JAX...) ends
up behind this class, so a learner sees one interface with torchrl's keys:

* ``reset(seed=None, td=None)`` -> root TensorDict ``[N]``: observation keys and the
  ``"done"``, ``"terminated"``, ``"truncated"`` flags (bool ``[N, 1]``, all False).
* ``step(td)`` reads ``td["action"]`` and sets ``td["next"]``: next observations (the
  TRUE final one on rows that ended), ``"reward"`` ``[N, 1]`` (``[N, K]`` for the K
  objectives of a multi-objective env, see ``reward_spec``), the three done flags and
  ``"final_obs_missing"`` (True where the backend could not give a final observation
  and a placeholder stands in).
* ``step_and_maybe_reset(td)`` -> ``(td, td_root)``: also returns the input of the next
  step (post-reset observations on rows that ended). Nothing is reset twice.
* ``rollout(steps, policy=None)`` -> TensorDict ``[N, T]``.
* ``get_state(rows=None)`` -> TensorDict ``[len(rows)]`` and ``set_state(state, rows=None)``:
  exact per-row snapshot and restore (:mod:`gpu_envs.core.snapshot`).

Specs follow torchrl, whose keys the TensorDicts use: ``env.action_spec``,
``observation_spec``, ``reward_spec``, ``done_spec`` and ``info_spec`` carry the batch
dims (``env.action_spec.shape == env.batch_size + env.single_action_spec.shape``), and
the per-env specs the backend declares are ``env.single_*_spec`` (gymnasium's
``single_*`` spaces).

A step is :class:`~gpu_envs.core.step_path.StepPath`'s, for every backend: the action
check, the backend's one :class:`~gpu_envs.backends.base.RawStep`, the final-observation
rule, the TensorDicts (``docs/ARCHITECTURE.md`` draws it). The hot path never
synchronises with the host: action checks look at metadata only (shape, dtype, device);
value checks (a Discrete action out of range; Box bounds and NaN with
``validate_actions``) run on the first step (Discrete), or on every step with
``validate_actions=True``. Health checks
(``health_checks``, :mod:`gpu_envs.core.health`) flag out-of-range discrete actions
and non-finite actions, observations and rewards on the device, without a sync, and
raise :class:`~gpu_envs.contract.errors.HealthCheckError` where the host looks anyway:
the end of ``collect``, a full ``reset()``, ``check_health()``.

Inputs are checked against the moment they come from, on the host (no sync): the last
step's ``td["next"]`` fed back (torchrl's ``td = env.step(td)["next"]``) is stepped from
the env's cached post-reset root, whose observations replace the input's; a root from an
earlier moment raises :class:`~gpu_envs.contract.errors.StaleInputError`; two threads
calling one env at once raise :class:`~gpu_envs.contract.errors.ConcurrentCallError`
(see :mod:`gpu_envs.core.step_path` and :mod:`gpu_envs.utils.call_guard`).

Failures leave the env in a known state. Arguments (a seed, the TensorDict, the action)
are checked before anything moves, so a refused call leaves the env exactly as it was.
An exception or Ctrl-C escaping a reset or a step after the simulator was called leaves
the env marked (one flag, cleared when the call completes): every later call raises
:class:`~gpu_envs.contract.errors.InterruptedStepError` until ``reset()``, which resets all rows
and lets the backend recover first (async gymnasium workers: answers in flight drained,
or the workers restarted). Outputs are validated on every reset and on the first step;
backends that pass on tensors they did not make get their metadata compared on every
step too (no host sync).

Example::

    >>> import gpu_envs
    >>> with gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0) as env:
    ...     td = env.reset()
    ...     td["action"] = env.action_spec.rand()        # a whole batch [8], on env.device
    ...     td, td_root = env.step_and_maybe_reset(td)
    >>> td["next", "observation"].shape, td_root.batch_size
    (torch.Size([8, 4]), torch.Size([8]))
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable
from typing import Any, NoReturn, cast

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.backends.base import Backend
from gpu_envs.backends.common import release_simulator
from gpu_envs.contract.errors import ClosedEnvError, InvalidArgumentError, NotCopyableError, ResetMaskError
from gpu_envs.contract.final_obs import FinalObsRule
from gpu_envs.contract.groups import missing_spec
from gpu_envs.contract.keys import DONE_KEYS
from gpu_envs.contract.protocols import OutputTargets
from gpu_envs.contract.specs import Binary, Box, Composite
from gpu_envs.contract.specs.env_specs import BatchedSpecs
from gpu_envs.core.health import HealthMonitor, health_mode
from gpu_envs.core.snapshot import Rows, RowSnapshots
from gpu_envs.core.step_path import CLOSED, StepPath
from gpu_envs.core.step_validation import StepValidator
from gpu_envs.utils.arguments import as_bool, as_seed, check_td, optional_seconds
from gpu_envs.utils.call_site import SILENT_UNPACK_SIZES, refuse_unpacking, unpacked_into
from gpu_envs.utils.devices import normalize_device, same_device
from gpu_envs.utils.live_state import DatedState, check_state, prefixed, refuse_stale, under
from gpu_envs.utils.tensordicts import get_entry
from gpu_envs.utils.watchdog import Watchdog


class BatchedEnv(BatchedSpecs):
    """A batch of ``N`` environments behind torchrl-style TensorDicts on one device.

    Build it with :func:`gpu_envs.make` or :func:`gpu_envs.wrap` rather than directly.

    Args:
        backend: the adapter that talks to the simulator (see ``gpu_envs.backends``).
        missing_obs_value: placeholder for final observations a backend cannot give;
            ``None`` means NaN for floats, 0 for integers.
        validate_actions: check action values on every step, at the cost of one host sync per
            step: Discrete/MultiDiscrete/Binary ranges, Box bounds and non-finite values.
            Without it, action metadata (shape, dtype, device) is checked on every step,
            Discrete values on the first step only, and Box values are handed to the env
            as they are (the built-in Pendulum clips the torque as gymnasium's does; a NaN
            action makes a NaN state until that row resets).
        seed: seed used by the first ``reset()`` that is given none.
        health_checks: flag bad values on the device, without a host sync, and raise
            them as :class:`~gpu_envs.contract.errors.HealthCheckError` at the end of
            ``collect``/``rollout``, at a full ``reset()`` and in :meth:`check_health`
            (:mod:`gpu_envs.core.health`): ``True``/``"collect"`` (default) scans
            each collection's transitions once; ``"step"`` checks every step (a few
            small ops each, for hand-written loops); ``False`` checks no values.
        watchdog_s: if set, a ``reset``/``step`` call running longer than this many
            seconds writes the stacks of every thread to stderr (see
            :mod:`gpu_envs.utils.watchdog`); ``None`` (default): no watchdog, no cost.

    Specs: ``observation_spec``, ``action_spec``, ``reward_spec``, ``done_spec`` and
    ``info_spec`` have the batch dims (torchrl's convention); ``single_observation_spec``
    and the other ``single_*_spec`` describe one env (see :mod:`gpu_envs.contract.specs.env_specs`).

    Attributes:
        rank, world_size: which shard of a torchrun job this env is (``make(...,
            distributed=True)`` sets them; 0 and 1 otherwise).
        reset_count: how many ``reset()`` calls changed rows (host integer); a wrapper
            comparing it notices a reset it did not make (``TransformedEnv`` restarts its
            transforms' per-row state then).
        last_reset_rows: the ``[N, 1]`` bool mask of the last of those resets, or
            ``None`` when it reset every row.
        caches: per-env state the layers above derive and keep with the env (``collect``'s
            buffers, compiled loops and graphs, under ``"collect"``); goes away with it.
    """

    rank: int = 0
    world_size: int = 1

    def __init__(
        self,
        backend: Backend,
        *,
        missing_obs_value: float | int | None = None,
        validate_actions: bool = False,
        seed: int | None = None,
        watchdog_s: float | None = None,
        health_checks: bool | str = True,
    ) -> None:
        validate_actions = as_bool(validate_actions, "validate_actions")
        mode = health_mode(health_checks)
        seed = as_seed(seed)
        watchdog_s = optional_seconds(watchdog_s, "watchdog_s")
        self.backend = backend
        self.num_envs = backend.num_envs
        self.device = normalize_device(backend.device)
        self.batch_size = torch.Size([self.num_envs])
        self._set_specs(
            observation=backend.observation_spec,
            action=backend.action_spec,
            # a scalar reward is [N, 1]; a vector one (multi-objective backends) [N, K]
            reward=Box(-math.inf, math.inf, (1,), torch.float32, device=self.device)
            if backend.reward_spec is None
            else backend.reward_spec,
            done=Composite({k: Binary(1, device=self.device) for k in DONE_KEYS}, device=self.device),
            # the backend's own object: the gymnasium backend fills it in at the first step
            info=_info_spec(backend, self.device),
        )
        rule = FinalObsRule(self.single_observation_spec, self.num_envs, missing_obs_value)
        validator = StepValidator(
            backend,
            self.action_spec,
            self.single_action_spec,
            self.single_observation_spec,
            self.reward_spec.shape,
            self.num_envs,
            self.device,
        )
        # the one way a step is made: action check, backend advance, final-obs rule, TensorDicts
        self._path = StepPath(backend, rule, validator, self.batch_size, self.device)
        self._validator = validator
        self._health = HealthMonitor(
            self.num_envs,
            self.device,
            self.single_action_spec,
            {k: dtype for k, (_, dtype) in validator.obs_meta.items()},
            mode,
        )
        self._path.monitor = self._health
        # live_state() names of the cached root observations
        self._root_names = {k: "root." + ("/".join(k) if isinstance(k, tuple) else k) for k in rule.keys}
        self._state_token = object()  # names this env in its live_state()s' dates (holds nothing alive)
        # Seeded by reset(seed=...): random actions (policy=None) are reproducible too.
        self.generator = torch.Generator(device=self.device)
        self._snapshots = RowSnapshots(self._path, backend, self.generator)
        self._default_seed = seed
        self._closed = False
        self._needs_reset = True
        self.reset_count = 0
        self.caches: dict[str, Any] = {}
        self.last_reset_rows: torch.Tensor | None = None
        self.validate_actions = validate_actions
        self._watchdog = None
        if watchdog_s is not None:
            self._start_watchdog(watchdog_s)

    def _start_watchdog(self, seconds: float) -> None:
        """Watch reset/step/step_and_maybe_reset (instance attributes: no cost without the option)."""
        self._watchdog = Watchdog(seconds, name=f"BatchedEnv({self.backend.describe()})")
        for name in ("reset", "step", "step_and_maybe_reset"):
            setattr(self, name, self._watchdog.watch(getattr(self, name), name))

    # ------------------------------------------------------------------ agent groups
    @property
    def group_map(self) -> dict[str, list[str]]:
        """``{group: [agent names]}`` of a multi-agent env (:mod:`gpu_envs.contract.groups`); ``{}`` for one agent."""
        return {group: list(agents) for group, agents in (self.backend.group_map or {}).items()}

    @property
    def inference_mode_safe(self) -> bool:
        """The backend may be stepped under ``torch.inference_mode`` (``Capabilities.inference_mode``; collect reads it)."""
        return self.backend.capabilities.inference_mode

    # ------------------------------------------------------------------ reset
    def reset(self, seed: int | None = None, td: TensorDictBase | None = None) -> TensorDict:
        """Reset every row, or only the rows where ``td["_reset"]`` is True.

        Rows that ended in the last ``step`` were already reset by the backend; a mask
        naming them serves their cached post-reset observation instead of resetting
        them again. Returns the root TensorDict ``[N]``.
        """
        self._check_open()
        if seed is not None:
            seed = as_seed(seed)  # before anything moves: reset(seed=1.7) leaves the env as it was
        mask = None
        if td is not None:
            check_td(td, "reset")
            mask = get_entry(td, "_reset")
            if mask is not None:
                mask = self._check_reset_mask(mask)
        path, guard = self._path, self._path.guard
        if mask is None and not self._needs_reset:
            self._health.poll("env.reset()")  # before anything moves: a second reset() goes ahead
        if mask is None or guard.pending is not None:  # never reset, or a call was interrupted: all rows
            interrupted = guard.interrupted
            if seed is None and self._needs_reset:
                seed = self._default_seed
            call = None
            if not guard.held:  # (a first reset that fails leaves the env "never reset", not interrupted)
                call = guard.start("reset")
            if interrupted:
                self.backend.recover()  # e.g. drain or restart async workers left mid-call
            obs = self.backend.reset(seed=seed)
            self._validator.observations("reset", obs)
            if seed is not None:
                self.generator.manual_seed(seed)
            path.root_obs = obs
            path.moved()
            self.reset_count += 1
            self.last_reset_rows = None
            self._needs_reset = False
            self._health.restart()
            path.bind()  # the backend's direct transition may change with a full reset
            if call is not None and guard.calls != call:
                guard.overlapped("reset")
        else:
            self._partial_reset(mask, seed)
        path.last_done = path.false
        guard.finish()
        return path.root()

    def _check_reset_mask(self, mask: Any) -> torch.Tensor:
        ok_shape = isinstance(mask, torch.Tensor) and tuple(mask.shape) in (
            (self.num_envs,),
            (self.num_envs, 1),
        )
        if not ok_shape or mask.dtype != torch.bool:
            got = f"{tuple(mask.shape)} {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ResetMaskError(
                f'"_reset" must be a bool tensor of shape ({self.num_envs},) or ({self.num_envs}, 1); '
                f"got {got}. Build it like td['done'] (e.g. torch.zeros({self.num_envs}, 1, dtype=torch.bool))."
            )
        if mask.device.type == "meta":
            raise ResetMaskError('"_reset" is a meta tensor (no data); build it on the env\'s device, like td["done"].')
        return mask.to(self.device).view(self.num_envs, 1)

    def _partial_reset(self, mask: torch.Tensor, seed: int | None) -> None:
        path = self._path
        # rows not already reset by the backend (none since a step_and_maybe_reset: the constant False)
        todo = mask if path.last_done is path.false else mask & ~path.last_done
        if self.backend.capabilities.partial_reset:
            # an all-False mask is a no-op for the backend: no host sync to find out
            path.guard.start("reset")
            obs = self.backend.reset(seed=seed, mask=todo.view(self.num_envs))
        elif not bool(todo.any()):
            return
        elif bool(todo.all()):
            path.guard.start("reset")
            obs = self.backend.reset(seed=seed)
        else:
            raise ResetMaskError(
                f"the {self.backend.describe()} backend cannot reset a subset of its envs. "
                "Reset all of them with env.reset(), or use an env that accepts a reset mask."
            )
        self._validator.observations("reset", obs)
        root = path.root_obs
        path.root_obs = {
            key: torch.where(todo.view((self.num_envs,) + (1,) * (value.dim() - 1)), value, root[key])
            for key, value in obs.items()
        }
        path.moved()
        self.reset_count += 1
        self.last_reset_rows = mask

    def root(self) -> TensorDict:
        """The current root TensorDict: what the next step acts on (episodes continue)."""
        return self._path.root()

    # ------------------------------------------------------------------- step
    def step(self, td: TensorDictBase) -> TensorDictBase:
        """Step with ``td["action"]``; writes ``td["next"]`` and returns ``td`` (:meth:`StepPath.step`)."""
        if self.num_envs in SILENT_UNPACK_SIZES and not torch.compiler.is_compiling():
            refuse_unpacking(self.num_envs, unpacked_into(1))
        self._path.step(td)
        return td

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDict]:
        """Step, then return ``(td, td_root)`` where ``td_root`` is the next step's input.

        ``td_root`` holds the post-reset observations on rows that ended and the next
        observations elsewhere (the backend already reset the ended rows in ``step``).
        The path: :meth:`gpu_envs.core.step_path.StepPath.step_and_reset`.
        """
        return self._path.step_and_reset(td)

    def transition_values(self, keys: list) -> Callable[[torch.Tensor], Any] | None:
        """For a random-action collection (:func:`gpu_envs.rollout.loop.fused_writer`): ``action -> values``, or None.

        The step path's :meth:`~gpu_envs.core.step_path.StepPath.values`: the step
        ``step_and_maybe_reset`` makes, returning the transition's tensors for ``keys``
        (a buffer's layout), in that order, without building TensorDicts. None where the
        path cannot (see :meth:`~gpu_envs.core.step_path.StepPath.values_in`) and while
        a watchdog watches the steps (it watches ``step_and_maybe_reset``). Part of
        :class:`~gpu_envs.contract.protocols.FusedCollectEnv`; a wrapper that changes
        transitions (``TransformedEnv``) answers None itself.
        """
        if self._watchdog is not None:
            return None
        return self._path.values_in(keys)

    def reusing_outputs(self) -> contextlib.AbstractContextManager[bool]:
        """Around :meth:`transition_values` steps whose tensors are copied at once: the backend may reuse its outputs' memory.

        :meth:`gpu_envs.core.step_path.StepPath.reusing_outputs` (a random-action
        ``collect`` enters it; the built-in envs' native CPU step then allocates nothing).
        """
        return self._path.reusing_outputs()

    def output_targets(self) -> OutputTargets | None:
        """Inside :meth:`reusing_outputs`: the simulator whose next step writes its outputs where named, or None.

        :meth:`gpu_envs.core.step_path.StepPath.output_targets` (the built-in envs' native
        CPU step: :meth:`gpu_envs.builtin.base.BatchedTorchEnv.write_next_step_into`); a
        random-action ``collect`` names its buffer's slots, so each value is written once,
        where it stays. None outside, or where the backend cannot.
        """
        return self._path.output_targets()

    def rollout(self, steps: int, policy: Callable | None = None, *, reset: bool = True) -> TensorDictBase:
        """Run ``steps`` steps and return the transitions stacked as ``[N, T]``.

        ``policy`` maps the root TensorDict to one holding ``"action"``; ``None`` samples
        the action spec. With ``reset=False`` the rollout continues from where the last
        one stopped (the env must have been reset once).
        """
        from gpu_envs.rollout.loop import rollout  # at call time: the env layer sits below rollout/

        return rollout(self, steps, policy, reset=reset)

    # ------------------------------------------------------------- validation and health
    @property
    def validate_actions(self) -> bool:
        """Check action values (ranges, non-finite values) on every step; a host sync per step when True."""
        return self._path.validate_actions

    @validate_actions.setter
    def validate_actions(self, value: bool) -> None:
        self._path.validate_actions = as_bool(value, "validate_actions")
        self._path.bind()  # the action check part: values on every step, or not

    @property
    def validate(self) -> bool:
        """Deprecated name of :attr:`validate_actions` (goes away in the next release)."""
        _renamed("validate", "validate_actions")
        return self.validate_actions

    @validate.setter
    def validate(self, value: bool) -> None:
        _renamed("validate", "validate_actions")
        self.validate_actions = value

    @property
    def health_checks(self) -> str:
        """``"collect"``, ``"step"`` or ``"off"``: which values are flagged on the device (:mod:`gpu_envs.core.health`)."""
        return self._health.mode

    @health_checks.setter
    def health_checks(self, value: bool | str) -> None:
        self._health.mode = health_mode(value)
        self._path.bind()  # the health watch part: every step, or not

    @property
    def health_monitor(self) -> HealthMonitor | None:
        """The device record of bad values that ``collect`` scans into and polls; None with ``health_checks=False``."""
        return None if self._health.mode == "off" else self._health

    @property
    def collection_vouched(self) -> bool:
        """The last collection's steps were all vouched for clean by the simulator (``SelfCheckedStep``).

        Then its buffer, which holds exactly what the simulator wrote, needs no scan
        (:func:`gpu_envs.rollout.loop.check_health_after`); False with the checks off.
        """
        return self._health.mode != "off" and self._health.collection_vouched

    def check_health(self) -> None:
        """Raise :class:`~gpu_envs.contract.errors.HealthCheckError` if a flagged value is pending (one host sync).

        Names the rows, each one's first faulty step and the value, and the fix; the
        flags are cleared and the env stays usable. Nothing pending: returns None.
        """
        self._check_open()
        self._health.check()

    @property
    def interrupted(self) -> bool:
        """True after a reset/step that did not finish (an exception or Ctrl-C escaped it), until ``reset()``."""
        return self._path.guard.interrupted and not self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedEnvError("this env was closed; build a new one with gpu_envs.make() or gpu_envs.wrap().")

    # ------------------------------------------------------------------ state
    def live_state(self) -> dict[str, torch.Tensor]:
        """Everything a step reads and writes, as live tensors (see :mod:`gpu_envs.utils.live_state`).

        Live: copy it to keep it (``{k: v.clone() for k, v in env.live_state().items()}``);
        the dict itself, loaded back after the env moved on, is refused (it would move the
        roots back but not the simulator).

        ``"root.<key>"``: the cached observations the next step acts on (``/`` joins nested
        keys), and ``"backend.<name>"``: the backend's state (for a torch env, its own
        tensors under ``"backend.env."``). Backends over simulators that keep their state
        outside torch (gymnasium, JAX, Isaac Lab) raise :class:`~gpu_envs.RolloutError`.
        """
        path = self._path
        state = {self._root_names[key]: value for key, value in path.root_obs.items()}
        state.update(prefixed("backend", self.backend.live_state()))
        return DatedState(state, (self._state_token, path.stamp))

    def load_live_state(self, state: dict[str, torch.Tensor]) -> None:
        """Take the values of a :meth:`live_state`: the backend copies them into its tensors;
        the root observations are stored as copies (handed-out roots are never written)."""
        check_state(state, "BatchedEnv")
        refuse_stale(state, self._state_token, self._path.stamp, "BatchedEnv")
        roots: dict[str, torch.Tensor] = {}
        obs_spec = cast(Composite, self.observation_spec)  # an env's observation spec is always a Composite
        for key, name in self._root_names.items():
            value, spec = state.get(name), obs_spec[key]
            if not isinstance(value, torch.Tensor):
                raise InvalidArgumentError(f"BatchedEnv.load_live_state: {name!r} is missing or not a tensor.")
            if value.shape != spec.shape or value.dtype != spec.dtype or not same_device(value.device, self.device):
                raise InvalidArgumentError(
                    f"BatchedEnv.load_live_state: {name!r} must be a {tuple(spec.shape)} {spec.dtype} tensor on "
                    f"{self.device} (this env's observations), got {tuple(value.shape)} {value.dtype} on "
                    f"{value.device}; pass a live_state() of an env built like this one."
                )
            roots[name] = value
        self.backend.load_live_state(under("backend", state))
        path = self._path
        path.root_obs = {key: roots[name].clone() for key, name in self._root_names.items()}
        path.moved()
        path.last_done = path.false
        self._needs_reset = False
        if not self._closed:
            path.guard.finish()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Deprecated name of :meth:`live_state` (goes away in the next release)."""
        warnings.warn(
            f"{type(self).__name__}.state_dict() was renamed live_state() (live tensors; a snapshot of rows is "
            "get_state()); the old name goes away in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.live_state()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Deprecated name of :meth:`load_live_state` (goes away in the next release)."""
        warnings.warn(
            f"{type(self).__name__}.load_state_dict() was renamed load_live_state(); the old name goes away in the "
            "next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        self.load_live_state(state)

    def get_state(self, rows: Rows = None) -> TensorDict:
        """A snapshot of ``rows`` (``None``: all), a TensorDict ``[len(rows)]`` (:mod:`gpu_envs.core.snapshot`).

        Everything the rows' continuation depends on: the simulator's state (random
        streams and step counters too) and the cached observations the next step acts
        on. :meth:`set_state` of it continues, bitwise, as these rows would have.
        Backends that cannot do it exactly raise :class:`~gpu_envs.SnapshotError`.
        """
        return self._snapshots.get(rows)

    def set_state(self, state: TensorDictBase, rows: Rows = None) -> None:
        """Restore a :meth:`get_state` into ``rows`` (``None``: all; then the random-action generator too).

        ``state`` must have one row per restored row (``state[i]`` picks rows of a larger
        snapshot); keys, shapes and dtypes are checked before anything moves. Rows may
        differ from the snapshot's: ``env.set_state(env.get_state([3]), rows=[0])``.
        """
        self._snapshots.set(state, rows)

    # -------------------------------------------------------------- lifecycle
    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        """Refuse ``pickle``, ``copy.copy`` and ``copy.deepcopy``: the env holds a live simulator.

        Its backend's simulator, device memory and worker processes, and a step path bound
        to them, cannot be carried into a copy; a :class:`~gpu_envs.NotCopyableError` says
        what to do instead. The env stays usable.
        """
        raise NotCopyableError(
            f"this env ({self.backend.describe()}, {self.num_envs} envs) cannot be pickled or copied: it holds a live "
            "simulator and the step path bound to it. To copy rows, build another env the same way and restore a "
            "snapshot into it: `other.set_state(env.get_state())`. To use an env in another process, send the "
            "function that builds it (gpu_envs.make(...) with its arguments), not the env."
        )

    def close(self) -> None:
        """Release the backend. Closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self._path.guard.hold(CLOSED)
            if self._watchdog is not None:
                self._watchdog.stop()
            try:
                self.backend.close()
            finally:
                release_simulator(self.backend)

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def needs_reset(self) -> bool:
        """True until the first ``reset()``: stepping needs one, ``rollout``/``collect`` do it."""
        return self._needs_reset

    def __enter__(self) -> BatchedEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        obs = ", ".join(f"{k}: {tuple(self.single_observation_spec[k].shape)}" for k in self._root_names)
        state = "closed" if self._closed else ("not reset" if self._needs_reset else "running")
        return (
            f"BatchedEnv({self.backend.describe()}, num_envs={self.num_envs}, device={self.device}, "
            f"observation={{{obs}}}, action={self.single_action_spec!r}, {state})"
        )


def _info_spec(backend: Backend, device: torch.device) -> Composite:
    """The backend's info spec (its own object), with each agent group's ``final_obs_missing`` added."""
    info = getattr(backend, "info_spec", None) or Composite({}, device=device)
    if not backend.group_map:
        return info
    info = Composite({str(k): v for k, v in info.items()}, device=info.device)
    for key, spec in missing_spec(backend.group_map, device).items(True, True):
        info[key] = spec
    return info


def _renamed(old: str, new: str) -> None:
    warnings.warn(
        f"BatchedEnv.{old} was renamed {new}; the old name goes away in the next release.",
        DeprecationWarning,
        stacklevel=3,
    )
