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

Specs follow torchrl, whose keys the TensorDicts use: ``env.action_spec``,
``observation_spec``, ``reward_spec``, ``done_spec`` and ``info_spec`` carry the batch
dims (``env.action_spec.shape == env.batch_size + env.single_action_spec.shape``), and
the per-env specs the backend declares are ``env.single_*_spec`` (gymnasium's
``single_*`` spaces).

The hot path (``step``, ``step_and_maybe_reset``) never synchronises with the host:
action checks look at metadata only (shape, dtype, device); value checks (a Discrete
action out of range; Box bounds and NaN with ``validate``) run on the first step
(Discrete), or on every step with ``validate=True``.

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

    with gpu_envs.make("CartPole-v1", num_envs=8) as env:
        td = env.reset(seed=0)
        td["action"] = env.action_spec.rand()        # a whole batch [8], on env.device
        td, td_root = env.step_and_maybe_reset(td)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.backends.base import Backend, RawStep
from gpu_envs.backends.common import release_simulator
from gpu_envs.contract.errors import (
    ActionError,
    BackendError,
    ClosedEnvError,
    InterruptedStepError,
    InvalidArgumentError,
    ResetMaskError,
    ResetNeededError,
)
from gpu_envs.contract.final_obs import FinalObsTransform
from gpu_envs.contract.keys import DONE_KEYS, TRANSITION_KEYS
from gpu_envs.contract.specs import Binary, Box, Composite, Discrete, MultiDiscrete
from gpu_envs.contract.specs.env_specs import BatchedSpecs
from gpu_envs.core.fast_steps import FastSteps, bind_fast_steps
from gpu_envs.utils.arguments import STEP_CALLS, as_bool, as_seed, check_td, optional_seconds
from gpu_envs.utils.devices import normalize_device, same_device
from gpu_envs.utils.state_dicts import check_state, prefixed, under
from gpu_envs.utils.tensordicts import get_entry, new_td, set_entry
from gpu_envs.utils.watchdog import Watchdog


def _nest(flat: dict) -> dict:
    """Flat dict with tuple keys -> nested dicts, the layout TensorDict expects."""
    nested: dict = {}
    for key, value in flat.items():
        if isinstance(key, tuple):
            node = nested
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = value
        else:
            nested[key] = value
    return nested


class BatchedEnv(BatchedSpecs):
    """A batch of ``N`` environments behind torchrl-style TensorDicts on one device.

    Build it with :func:`gpu_envs.make` or :func:`gpu_envs.wrap` rather than directly.

    Args:
        backend: the adapter that talks to the simulator (see ``gpu_envs.backends``).
        missing_obs_value: placeholder for final observations a backend cannot give;
            ``None`` means NaN for floats, 0 for integers.
        validate: check action values on every step, at the cost of one host sync per
            step: Discrete/MultiDiscrete/Binary ranges, Box bounds and non-finite values.
            Without it, action metadata (shape, dtype, device) is checked on every step,
            Discrete values on the first step only, and Box values are handed to the env
            as they are (the built-in Pendulum clips the torque as gymnasium's does; a NaN
            action makes a NaN state until that row resets).
        seed: seed used by the first ``reset()`` that is given none.
        watchdog_s: if set, a ``reset``/``step`` call running longer than this many
            seconds writes the stacks of every thread to stderr (see
            :mod:`gpu_envs.utils.watchdog`); ``None`` (default): no watchdog, no cost.

    Specs: ``observation_spec``, ``action_spec``, ``reward_spec``, ``done_spec`` and
    ``info_spec`` have the batch dims (torchrl's convention); ``single_observation_spec``
    and the other ``single_*_spec`` describe one env (see :mod:`gpu_envs.contract.specs.env_specs`).

    Attributes:
        rank, world_size: which shard of a torchrun job this env is (``make(...,
            distributed=True)`` sets them; 0 and 1 otherwise).
    """

    rank: int = 0
    world_size: int = 1

    def __init__(
        self,
        backend: Backend,
        *,
        missing_obs_value: float | int | None = None,
        validate: bool = False,
        seed: int | None = None,
        watchdog_s: float | None = None,
    ) -> None:
        validate = as_bool(validate, "validate")
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
            info=getattr(backend, "info_spec", None) or Composite({}, device=self.device),
        )
        self._final_obs = FinalObsTransform(self.single_observation_spec, self.num_envs, missing_obs_value)
        # state_dict() names of the cached root observations
        self._root_names = {k: "root." + ("/".join(k) if isinstance(k, tuple) else k) for k in self._final_obs.keys}
        self._obs_nested = any(isinstance(k, tuple) for k in self._final_obs.keys)
        self._reward_shape = self.reward_spec.shape
        self._action_shape = self.action_spec.shape
        self._action_dtype = self.action_spec.dtype
        self._check_values = isinstance(self.action_spec, (Discrete, MultiDiscrete, Binary))
        self._check_box = isinstance(self.action_spec, Box)
        # backends that hand on tensors someone else made (user torch envs, Isaac Lab) get their
        # outputs' metadata checked on every step, not only on the first (no host sync)
        self._watch_outputs = not getattr(backend, "trusted_outputs", False)
        self._obs_meta = {
            key: (torch.Size((self.num_envs, *leaf.shape)), leaf.dtype)
            for key, leaf in self.single_observation_spec.items(include_nested=True, leaves_only=True)
        }
        self._false = torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device)
        # the flags of every root: one constant, never written (outputs are read-only)
        self._root_flags = {"done": self._false, "terminated": self._false, "truncated": self._false}
        self._last_done = self._false
        # Seeded by reset(seed=...): random actions (policy=None) are reproducible too.
        self.generator = torch.Generator(device=self.device)
        self._default_seed = seed
        self._closed = False
        self._needs_reset = True
        self._first_step = True
        # The one flag a step tests: reset, not closed, and no step left half-done. A step
        # clears it before calling the backend and sets it again once complete, so an
        # exception escaping in between (the env raising, KeyboardInterrupt) leaves the
        # env marked at the cost of two attribute writes: the next step asks for a reset.
        self._ready = False
        # the steps of the common case, bound after the first step (_bind_fast_steps); None: generic
        self._fast: FastSteps | None = None
        self._fast_step = self._fast_step_and_reset = None
        self._float_reward = False  # the first step's reward was float32 (no cast needed)
        self.validate = validate
        self._watchdog = None
        if watchdog_s is not None:
            self._start_watchdog(watchdog_s)

    def _start_watchdog(self, seconds: float) -> None:
        """Watch reset/step/step_and_maybe_reset (instance attributes: no cost without the option)."""
        self._watchdog = Watchdog(seconds, name=f"BatchedEnv({self.backend.describe()})")
        for name in ("reset", "step", "step_and_maybe_reset"):
            setattr(self, name, self._watchdog.watch(getattr(self, name), name))

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
            mask = td.get("_reset", None)
            if mask is not None:
                mask = self._check_reset_mask(mask)
        if mask is None or not self._ready:  # never reset, or a call was interrupted: all rows
            interrupted = not self._ready and not self._needs_reset
            if seed is None and self._needs_reset:
                seed = self._default_seed
            self._ready = False
            if interrupted:
                self.backend.recover()  # e.g. drain or restart async workers left mid-call
            obs = self.backend.reset(seed=seed)
            self._check_obs("reset", obs)
            if seed is not None:
                self.generator.manual_seed(seed)
            self._final_obs.root_obs = obs
            self._needs_reset = False
            if not self._first_step:
                self._bind_fast_steps()  # the backend's plain transition may change with a full reset
        else:
            self._partial_reset(mask, seed)
        self._last_done = self._false
        self._ready = True
        return self.root()

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
        todo = mask & ~self._last_done  # rows not already reset by the backend
        if self.backend.supports_partial_reset:
            # an all-False mask is a no-op for the backend: no host sync to find out
            self._ready = False
            obs = self.backend.reset(seed=seed, mask=todo.view(self.num_envs))
        elif not bool(todo.any()):
            return
        elif bool(todo.all()):
            self._ready = False
            obs = self.backend.reset(seed=seed)
        else:
            raise ResetMaskError(
                f"the {self.backend.describe()} backend cannot reset a subset of its envs. "
                "Reset all of them with env.reset(), or use an env that accepts a reset mask."
            )
        self._check_obs("reset", obs)
        root = self._final_obs.root_obs
        self._final_obs.root_obs = {
            key: torch.where(todo.view((self.num_envs,) + (1,) * (value.dim() - 1)), value, root[key])
            for key, value in obs.items()
        }

    def root(self) -> TensorDict:
        """The current root TensorDict: what the next step acts on (episodes continue)."""
        if not self._ready:
            self._raise_not_ready("root")
        obs = self._final_obs.root_obs
        data = _nest(obs) if self._obs_nested else {**obs}
        data.update(self._root_flags)
        return new_td(data, self.batch_size, self.device)

    # ------------------------------------------------------------------- step
    def step(self, td: TensorDictBase) -> TensorDictBase:
        """Step with ``td["action"]``; writes ``td["next"]`` and returns ``td``."""
        fast = self._fast_step
        self._last_done = self._step_into(td) if fast is None else fast(td)
        return td

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDict]:
        """Step, then return ``(td, td_root)`` where ``td_root`` is the next step's input.

        ``td_root`` holds the post-reset observations on rows that ended and the next
        observations elsewhere (the backend already reset the ended rows in ``step``).
        """
        fast = self._fast_step_and_reset
        if fast is not None:
            return fast(td)
        self._step_into(td)
        self._last_done = self._false
        return td, self.root()

    def _step_into(self, td: TensorDictBase) -> torch.Tensor:
        """One backend step; sets ``td["next"]``, caches the next root; returns ``done`` ``[N, 1]``.

        The hot path: metadata checks on the action (the values only on the first step
        or with ``validate``), one backend call, at most a few views and one ``where``
        per observation key (none when the backend gives the next observations itself),
        and two dicts turned into TensorDicts without re-validation. After the first step
        the built-in envs skip it: ``step`` and ``step_and_maybe_reset`` run the closures
        of :mod:`gpu_envs.core.fast_steps` (``_bind_fast_steps``), the same work without the
        branches this path takes per step.
        """
        if not self._ready:
            self._raise_not_ready("step")
        if td.__class__ is not TensorDict:
            check_td(td, STEP_CALLS)  # a dict, None, a (td, root) tuple: refused before anything moves
        action = get_entry(td, "action")
        if (
            action.__class__ is not torch.Tensor
            or action.shape != self._action_shape
            or action.dtype != self._action_dtype
            or action.device != self.device
        ):
            self._check_action(action)  # raises, unless a tensor subclass with the right metadata
        if self._check_values_now:
            self._check_action_values(action)
        self._ready = False
        raw = self.backend.step(action)
        if self._first_step:
            self._check_raw(raw)
            self._first_step = False
            self._float_reward = isinstance(raw.reward, torch.Tensor) and raw.reward.dtype == torch.float32
            self.validate = self._validate  # the value checks of the later steps, and the fast steps bound
        elif self._watch_outputs:
            self._check_outputs(raw)
        done = raw.done
        if done is None:  # flat [N] layout
            n = self.num_envs
            terminated = raw.terminated.view(n, 1)
            truncated = raw.truncated.view(n, 1)
            done = terminated | truncated
            reward = raw.reward.view(self._reward_shape)
        else:
            terminated, truncated, reward = raw.terminated, raw.truncated, raw.reward
        if reward.dtype != torch.float32:
            reward = reward.to(torch.float32)
        next_obs = raw.next_obs
        if next_obs is None:
            next_obs, missing = self._final_obs(raw.obs, done, raw.final_obs, raw.final_mask)
        else:
            self._final_obs.root_obs = raw.obs
            missing = self._final_obs.none_missing
        data = _nest(next_obs) if self._obs_nested else {**next_obs}
        data["reward"] = reward
        data["done"] = done
        data["terminated"] = terminated
        data["truncated"] = truncated
        data["final_obs_missing"] = missing
        if raw.info:
            data.update(_nest(raw.info))
        set_entry(td, "next", new_td(data, self.batch_size, self.device))
        self._ready = True
        return done

    def _bind_fast_steps(self) -> None:
        """Bind the steps of the common case (:mod:`gpu_envs.core.fast_steps`) where it holds; unbind them elsewhere.

        Called after the first step, after a full reset and when ``validate`` changes: the
        case needs the backend's ``plain_transition()``, a float32 reward at the first
        step, no action values to check, and ``_step_into`` not overridden.
        """
        transition = self.backend.plain_transition()
        if (
            transition is None
            or self._check_values_now
            or not self._float_reward
            or self._obs_nested
            or type(self)._step_into is not BatchedEnv._step_into
        ):
            self._fast = None
            self._fast_step = self._fast_step_and_reset = None
            return
        self._fast = bind_fast_steps(self, transition)
        self._fast_step, self._fast_step_and_reset = self._fast.step, self._fast.step_and_reset

    def _transition_stepper(self, keys: list) -> Callable[[torch.Tensor], Any] | None:
        """For a random-action collection (:func:`gpu_envs.rollout.loop.fused_writer`): ``action -> values``.

        The function steps this env exactly as ``step_and_maybe_reset`` does and returns
        the transition's tensors for ``keys`` (a buffer's layout), in that order, without
        building TensorDicts. None unless the fast steps are bound, ``keys`` are exactly
        their transition's and ``step_and_maybe_reset`` is this class's own (not a
        subclass's, not a watchdog's wrapper). Private, so that a wrapper forwarding
        attributes (``TransformedEnv``) never hands out its inner env's.
        """
        fast = self._fast
        if (
            fast is None
            or "step_and_maybe_reset" in self.__dict__
            or type(self).step_and_maybe_reset is not BatchedEnv.step_and_maybe_reset
            or len(keys) != len(TRANSITION_KEYS)
            or set(keys) != set(TRANSITION_KEYS)
        ):
            return None
        if tuple(keys) == TRANSITION_KEYS:
            return fast.values
        pick = itemgetter(*(TRANSITION_KEYS.index(key) for key in keys))
        values = fast.values
        return lambda action: pick(values(action))

    def rollout(self, steps: int, policy: Callable | None = None, *, reset: bool = True) -> TensorDictBase:
        """Run ``steps`` steps and return the transitions stacked as ``[N, T]``.

        ``policy`` maps the root TensorDict to one holding ``"action"``; ``None`` samples
        the action spec. With ``reset=False`` the rollout continues from where the last
        one stopped (the env must have been reset once).
        """
        from gpu_envs.rollout.loop import rollout  # at call time: the env layer sits below rollout/

        return rollout(self, steps, policy, reset=reset)

    # ------------------------------------------------------------- validation
    @property
    def validate(self) -> bool:
        """Check action values (ranges) on every step; a host sync per step when True."""
        return self._validate

    @validate.setter
    def validate(self, value: bool) -> None:
        self._validate = as_bool(value, "validate")
        self._check_values_now = (self._check_values and (self._validate or self._first_step)) or (
            self._check_box and self._validate
        )
        if not self._first_step:
            self._bind_fast_steps()  # value checks on: the generic step; off: the fast one again

    @property
    def interrupted(self) -> bool:
        """True after a reset/step that did not finish (an exception or Ctrl-C escaped it), until ``reset()``."""
        return not self._ready and not self._needs_reset and not self._closed

    def _raise_not_ready(self, call: str) -> None:
        self._check_open()
        if self._needs_reset:
            raise ResetNeededError(f"{call}() was called before reset(): call env.reset() first.")
        self.backend.check_usable()  # a backend that knows it is dead says why
        raise InterruptedStepError(
            f"interrupted mid-step: call env.reset(). The previous reset/step of this env raised (an exception or "
            f"Ctrl-C) before it completed, so its state may disagree with the simulator's; {call}() is refused until "
            "a reset, which resets every row and makes the env usable again."
        )

    def _check_action(self, action: Any) -> None:
        """The full metadata check (the hot path only compares the exact type, shape, dtype, device)."""
        if (
            not isinstance(action, torch.Tensor)
            or action.shape != self._action_shape
            or action.dtype != self._action_dtype
            or action.device != self.device
        ):
            raise ActionError(self._explain_action(action))

    def _check_action_values(self, action: torch.Tensor) -> None:
        """Values in the spec's range (and finite, for a Box); one host sync."""
        if self._check_box and action.dtype.is_floating_point and not bool(torch.isfinite(action).all()):
            bad = int((~torch.isfinite(action)).sum())
            raise ActionError(
                f"the action holds {bad} non-finite value(s) (NaN or inf); {self.single_action_spec!r} needs finite "
                "values. Check the policy's outputs (a NaN loss, a diverged network)."
            )
        if not self.action_spec.contains(action):
            raise ActionError(
                f"action values are outside {self.single_action_spec!r} "
                f"(min {action.min().item()}, max {action.max().item()}). "
                "Sample actions from env.action_spec, or clamp them to its range (e.g. the ClipAction transform)."
            )

    def _explain_action(self, action: Any) -> str:
        want = f"shape {tuple(self._action_shape)}, dtype {self._action_dtype}, device {self.device}"
        if action is None:
            return f'td has no "action" entry: set td["action"] to a tensor with {want} (e.g. env.action_spec.rand()).'
        if not isinstance(action, torch.Tensor):
            return f"action must be a torch.Tensor with {want}; got {type(action).__name__}."
        if action.shape != self._action_shape:
            hint = ""
            if action.shape == self._action_shape + (1,):
                hint = " Drop the trailing dim with action.squeeze(-1)."
            elif action.shape + (1,) == self._action_shape:
                hint = " Add the trailing dim with action.unsqueeze(-1)."
            return f"action has shape {tuple(action.shape)} but the env expects {tuple(self._action_shape)}.{hint}"
        if action.dtype != self._action_dtype:
            return f"action has dtype {action.dtype} but the env expects {self._action_dtype}: cast it with action.to({self._action_dtype})."
        return f"action is on {action.device} but the env runs on {self.device}: move it with action.to('{self.device}')."

    def _check_raw(self, raw: RawStep) -> None:
        """Validate the backend's first step once (shapes, dtypes, devices)."""
        n = self.num_envs
        layout = "flat" if raw.done is None else "TensorDict"
        reward_shape = tuple(self._reward_shape)
        names = ("reward", "terminated", "truncated") + (() if raw.done is None else ("done",))
        for name in names:
            value = getattr(raw, name)
            if raw.done is None:
                want = reward_shape if name == "reward" else (n,)
                shape_ok = isinstance(value, torch.Tensor) and value.numel() == math.prod(want)
                wanted = f"{math.prod(want)} values"
            else:
                want = reward_shape if name == "reward" else (n, 1)
                shape_ok = isinstance(value, torch.Tensor) and tuple(value.shape) == want
                wanted = f"shape {want}"
            if not isinstance(value, torch.Tensor):
                raise BackendError(
                    f"{self.backend.describe()} returned {name} as a {type(value).__module__}.{type(value).__name__}, "
                    f"not a torch.Tensor; expected {wanted} on {self.device} ({layout} layout). Return torch tensors "
                    f"(e.g. torch.as_tensor(x, device='{self.device}')), or wrap a numpy env as a gymnasium VectorEnv."
                )
            if not shape_ok or value.device != self.device:
                raise BackendError(
                    f"{self.backend.describe()} returned {name} "
                    f"{getattr(value, 'shape', type(value).__name__)} on {getattr(value, 'device', '?')}; "
                    f"expected {wanted} on {self.device} ({layout} layout)."
                )
        for name in names[1:]:
            if getattr(raw, name).dtype != torch.bool:
                raise BackendError(f"{self.backend.describe()} returned {name} of dtype {getattr(raw, name).dtype}; expected torch.bool.")
        self._check_obs("step", raw.obs)
        if raw.final_obs is not None:
            self._check_obs("step", raw.final_obs, "final observation", partial=True)
        if raw.next_obs is not None:
            self._check_obs("step", raw.next_obs, "next observation")

    def _check_obs(self, call: str, obs: Any, what: str = "observation", partial: bool = False) -> None:
        """Observations of ``call`` against the spec: the keys, and each one's type, shape, dtype and device."""
        if not isinstance(obs, dict):
            raise BackendError(f"{self.backend.describe()}'s {call} returned {type(obs).__name__} {what}s; expected a dict of tensors.")
        if not partial and obs.keys() != self._obs_meta.keys():
            raise BackendError(
                f"{self.backend.describe()}'s {call} returned {what} keys {sorted(map(str, obs))}; its observation spec "
                f"declares {sorted(map(str, self._obs_meta))}."
            )
        for key, value in obs.items():
            shape, dtype = self._obs_meta[key]
            if not isinstance(value, torch.Tensor):
                raise BackendError(
                    f"{self.backend.describe()}'s {call} returned the {what} {key!r} as a {type(value).__name__}; "
                    f"expected a torch.Tensor of shape {tuple(shape)}, {dtype} on {self.device}. Return tensors "
                    "(or arrays with __dlpack__) from the env."
                )
            if value.shape != shape or value.dtype != dtype or value.device != self.device:
                raise BackendError(
                    f"{self.backend.describe()}'s {call} returned the {what} {key!r} with shape {tuple(value.shape)}, "
                    f"{value.dtype} on {value.device}; its spec says {tuple(shape)}, {dtype} on {self.device}. Make the "
                    "env's outputs match its single_observation_space (and num_envs), on every call."
                )

    def _check_outputs(self, raw: RawStep) -> None:
        """Every step after the first, for backends handing on tensors they did not make: metadata only.

        A changed shape could broadcast silently in the final-observation swap, a changed
        dtype would promote; flags and rewards that cannot be viewed as ``[N, 1]`` raise
        anyway, so only their dtypes are compared here. No value is read: no host sync.
        """
        meta = self._obs_meta
        try:
            for key, value in raw.obs.items():
                shape, dtype = meta[key]
                if value.shape != shape or value.dtype is not dtype:
                    raise ValueError(key)
            for extra in (raw.final_obs, raw.next_obs):
                if extra is not None:
                    for key, value in extra.items():
                        shape, dtype = meta[key]
                        if value.shape != shape or value.dtype is not dtype:
                            raise ValueError(key)
            if raw.terminated.dtype is not torch.bool or raw.truncated.dtype is not torch.bool:
                raise ValueError("flags")
            if not isinstance(raw.reward, torch.Tensor):  # a numpy reward would fail in a view, unexplained
                raise ValueError("reward")
        except (AttributeError, KeyError, ValueError):
            self._check_raw(raw)  # says exactly what changed
            raise BackendError(f"{self.backend.describe()} changed its step outputs after the first step.") from None

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedEnvError("this env was closed; build a new one with gpu_envs.make() or gpu_envs.wrap().")

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Everything a step reads and writes, as live tensors (see :mod:`gpu_envs.utils.state_dicts`).

        ``"root.<key>"``: the cached observations the next step acts on (``/`` joins nested
        keys), and ``"backend.<name>"``: the backend's state (for a torch env, its own
        tensors under ``"backend.env."``). Backends over simulators that keep their state
        outside torch (gymnasium, JAX, Isaac Lab) raise :class:`~gpu_envs.RolloutError`.
        """
        state = {self._root_names[key]: value for key, value in self._final_obs.root_obs.items()}
        state.update(prefixed("backend", self.backend.state_dict()))
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Take the values of a :meth:`state_dict`: the backend copies them into its tensors;
        the root observations are stored as copies (handed-out roots are never written)."""
        check_state(state, "BatchedEnv")
        roots = {name: state.get(name) for name in self._root_names.values()}
        for key, name in self._root_names.items():
            value, spec = roots[name], self.observation_spec[key]
            if not isinstance(value, torch.Tensor):
                raise InvalidArgumentError(f"BatchedEnv.load_state_dict: {name!r} is missing or not a tensor.")
            if value.shape != spec.shape or value.dtype != spec.dtype or not same_device(value.device, self.device):
                raise InvalidArgumentError(
                    f"BatchedEnv.load_state_dict: {name!r} must be a {tuple(spec.shape)} {spec.dtype} tensor on "
                    f"{self.device} (this env's observations), got {tuple(value.shape)} {value.dtype} on "
                    f"{value.device}; pass a state_dict() of an env built like this one."
                )
        self.backend.load_state_dict(under("backend", state))
        self._final_obs.root_obs = {key: roots[name].clone() for key, name in self._root_names.items()}
        self._last_done = self._false
        self._needs_reset = False
        self._ready = not self._closed

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Release the backend. Closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self._ready = False
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
        obs = ", ".join(f"{k}: {tuple(self.single_observation_spec[k].shape)}" for k in self._final_obs.keys)
        state = "closed" if self._closed else ("not reset" if self._needs_reset else "running")
        return (
            f"BatchedEnv({self.backend.describe()}, num_envs={self.num_envs}, device={self.device}, "
            f"observation={{{obs}}}, action={self.single_action_spec!r}, {state})"
        )
