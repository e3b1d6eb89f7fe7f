"""The CPU fallback: gymnasium envs (vector or single) as exact same-step transitions.

Example::

    env = gpu_envs.make("CartPole-v1", num_envs=8, backend="gymnasium", seed=0)  # SyncVectorEnv
    env = gpu_envs.make("Acrobot-v1", num_envs=8, vectorization="async")          # AsyncVectorEnv
    env = gpu_envs.wrap(gym.make_vec("CartPole-v1", 8))                           # CartPoleVectorEnv, NEXT_STEP
    env = gpu_envs.wrap(gym.make_vec("Acrobot-v1", 8, vectorization_mode="sync", vector_kwargs={"autoreset_mode": "SameStep"}))
    env = gpu_envs.wrap(gym.make("Pendulum-v1"))                                   # batch size [1]

Auto-reset modes (read from ``metadata["autoreset_mode"]``). Every backend presents as
a same-step auto-resetting env (:mod:`gpu_envs.backends.base`); the modes map to it so:

* ``SAME_STEP`` (what ``make`` builds): the env resets ended rows inside ``step``. The
  true final observations are read from ``info["final_obs"]`` (an object array) for the
  ended rows only, masked by ``info["_final_obs"]``; the info of the final step is read
  from ``info["final_info"]`` (the plain info of an ended row is its RESET info).
* ``DISABLED``: the env never resets by itself. After a step where rows ended, the
  backend keeps the step's observation as the final one and resets exactly those rows
  with ``reset(options={"reset_mask": done})``.
* ``NEXT_STEP`` (the default of ``gym.make_vec`` and ``SyncVectorEnv``): the ended step
  already returns the true final observation, and the env would reset that row on the
  NEXT ``step`` call, ignoring its action and returning reward 0 -- a fake transition.
  The backend avoids it exactly as in ``DISABLED``, and as the EnvPool backend does:
  right after the ended step it resets the ended rows, which clears the pending
  auto-reset, so the next ``step`` steps every row for real. No fake transition, no lost
  step; the oracle tests prove it against single envs stepped by hand. The masked reset
  is gymnasium's ``reset(options={"reset_mask": done})`` for its own ``SyncVectorEnv``
  and ``AsyncVectorEnv`` with ``shared_memory=True`` (gymnasium 1.x forgets to clear the
  pending reset in its ``shared_memory=False`` worker), and the env's own next-step reset
  moved forward for gymnasium 1.x's ``CartPoleVectorEnv`` (``gym.make_vec("CartPole-v1",
  n)``, whose ``reset`` resets every row; :mod:`.row_resets`). Other NEXT_STEP envs are
  refused at wrap time with a fix that works (:func:`.vector.next_step_resets`). The
  extra reset costs one more call per step with ended rows.

A single (non-vector) ``gymnasium.Env`` is run as a batch of ONE (batch size ``[1]``,
so its TensorDicts have the same layout as every other env): it is put in a
``SyncVectorEnv`` with ``autoreset_mode=DISABLED`` and reset by hand at done as above.

Data path per step: the action tensor becomes numpy once (the tensor's own memory on
the CPU, one copy into a pinned buffer from CUDA). Each result is copied once: for a
CUDA target into ONE reused packed staging buffer (pinned) that crosses in one
non-blocking copy, for a CPU target into a fresh array shared by ``torch.from_numpy``
(arrays the backend or gymnasium's own vector envs make fresh each step -- done, the
final observations, their mask, SyncVectorEnv's flags -- are shared without a copy)
(:class:`gpu_envs.utils.arrays.HostStaging`, the fields named once by a
:class:`~gpu_envs.backends.layout.StepLayout`, whose bound
:meth:`~gpu_envs.backends.layout.StepLayout.publisher` turns a step's arrays into its
RawStep in one call). No Python loop over sub-envs, except over
the rows that ended, to collect their final observations from gymnasium's object array
(the final-observation rule's numpy form,
:func:`~gpu_envs.contract.final_obs.final_obs_numpy`, which also copies a NEXT_STEP
env's step observations before the masked reset rewrites them).

Info: numeric entries become ``("next", key)`` tensors with specs discovered from the
first step's info (:mod:`.info`); ``env.info_spec`` lists them after that step.
Non-numeric entries are dropped with one warning. Spaces: :mod:`.spaces`
(``one_hot_actions=True`` for one-hot Discrete actions).

Seeding: ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i`` (gymnasium's rule); with
the same seed and actions, runs are identical bit for bit. With ``env_index_offset=k``
(the global index of sub-env 0 when this env is one shard of a larger job, see
:mod:`gpu_envs.distributed`) sub-env ``i`` gets ``s + k + i``.

Options of ``make``/``wrap`` (:mod:`.plugin`): ``one_hot_actions``,
``info_spec`` (a Composite declaring the info entries to keep, instead of discovery);
for ``make`` and single envs also ``from_pixels``/``pixels_only`` (a ``"pixels"`` key
from ``render()``) and ``frame_skip`` (:mod:`.wrappers`); for ``make`` also
``vectorization`` (``"sync"``/``"async"``), ``num_workers`` (AsyncVectorEnv, at most
that many sub-envs stepping at once), ``vector_kwargs``, ``wrappers`` and keyword
arguments of the env. Vector-env facts (modes, worker shutdown) are in
:mod:`.vector`.
A failure inside the env (an exception, a dead async worker) raises
:class:`~gpu_envs.contract.errors.BackendError` with the env's message; an async env is shut
down at once (no worker left behind).

Async envs (:mod:`.workers`): every ``reset``/``step`` waits at most ``step_timeout``
seconds (default :data:`~.workers.DEFAULT_STEP_TIMEOUT`, 60 s; ``None`` waits forever)
for every worker; on expiry a :class:`~gpu_envs.contract.errors.StepTimeoutError` names the
sub-envs that did not answer, every worker is stopped, and ``env.reset()`` starts new
ones. A call interrupted mid-way (Ctrl-C, an exception) is recovered by the next full
``reset()``: the answers in flight are drained, or the workers restarted; gymnasium's
``AlreadyPendingCallError`` never reaches you. Workers built by ``make`` ignore SIGINT
and die with their parent, even when stuck in ``step``.
"""

from __future__ import annotations

from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.backends.base import Backend, Capabilities, RawStep
from gpu_envs.backends.common import claim_simulator, innermost, numpy2_advice
from gpu_envs.backends.gymnasium_envs.info import InfoReader, InfoSpec
from gpu_envs.backends.gymnasium_envs.row_resets import row_reset
from gpu_envs.backends.gymnasium_envs.snapshot import refusal as snapshot_refusal
from gpu_envs.backends.gymnasium_envs.snapshot import restore_rows
from gpu_envs.backends.gymnasium_envs.snapshot import snapshot_rows as copy_rows
from gpu_envs.backends.gymnasium_envs.spaces import ActionCodec, ObsLayout
from gpu_envs.backends.gymnasium_envs.vector import autoreset_mode, episode_statistics, next_step_resets
from gpu_envs.backends.gymnasium_envs.workers import DEFAULT_STEP_TIMEOUT, AsyncCalls, shutdown_async
from gpu_envs.backends.gymnasium_envs.wrappers import FrameSkip, add_pixels
from gpu_envs.backends.layout import StepLayout
from gpu_envs.contract.errors import (
    BackendError,
    ClosedEnvError,
    GpuEnvsError,
    InvalidArgumentError,
    NotAnEnvError,
    SnapshotError,
    UnsupportedSpaceError,
)
from gpu_envs.contract.final_obs import FinalObsKind, final_obs_numpy
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Composite, Spec
from gpu_envs.utils.arguments import as_bool, as_int, optional_seconds
from gpu_envs.utils.arrays import HostStaging
from gpu_envs.utils.call_guard import CallGuard
from gpu_envs.utils.devices import normalize_device, resolve_device

__all__ = ["GymnasiumBackend", "wrap_single"]

AutoresetMode = gym.vector.AutoresetMode
_NEXT_KEYS = ("reward", "done", "terminated", "truncated", "final_obs_missing")
_WORKER_GONE = (EOFError, BrokenPipeError, ConnectionError)


class GymnasiumBackend(Backend):
    """Backend over a gymnasium ``VectorEnv`` (any auto-reset mode, see the module doc).

    Args:
        env: the vector env (a single env goes through :func:`wrap_single` first).
        device: target device; ``None`` means :func:`gpu_envs.utils.devices.default_device`.
        one_hot_actions: a ``Discrete`` action as a one-hot bool ``[N, n]`` tensor.
        info_spec: a Composite of the info entries to keep (no discovery), or ``None``.
        default_key: key of a non-Dict observation (``"pixels"`` for pixels-only envs).
        single: ``env`` is the batch-of-one adapter of a single env (for ``describe``).
        reward_spec: ONE env's reward spec when the env's rewards are vectors ``[N, K]``
            (multi-objective envs, :mod:`gpu_envs.backends.mo_gymnasium`); ``None`` for
            the usual scalar rewards ``[N]``.
        env_index_offset: global index of sub-env 0: ``reset(seed=s)`` seeds sub-env ``i``
            with ``s + env_index_offset + i``.
        step_timeout: AsyncVectorEnv only: seconds a ``reset``/``step`` may take (``None``:
            no limit); see the module docstring.
    """

    name = "gymnasium"
    capabilities = Capabilities(
        # gymnasium SAME_STEP: its info["final_obs"]; NEXT_STEP, DISABLED and single envs: the ended rows are
        # reset through reset_mask inside the same step (an instance says which of the two)
        final_obs=(FinalObsKind.SIMULATOR, FinalObsKind.WRAPPER_RESET),
        trusted_outputs=True,  # every tensor comes out of its own staging, laid out from the specs
        partial_reset=True,
    )
    # Staging mode: None picks by device (packed buffer + one transfer off the CPU); tests
    # set True to run the packed path on the CPU.
    staging_packed: bool | None = None

    def __init__(
        self,
        env: Any,
        device: torch.device | str | None = None,
        *,
        one_hot_actions: bool = False,
        info_spec: Composite | None = None,
        default_key: str = "observation",
        single: bool = False,
        reward_spec: Spec | None = None,
        env_index_offset: int = 0,
        step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
    ) -> None:
        if not isinstance(env, gym.vector.VectorEnv):
            raise NotAnEnvError(
                f"the gymnasium backend wraps gymnasium.Env or gymnasium.vector.VectorEnv objects, got "
                f"{type(env).__module__}.{type(env).__name__}. Build one with gymnasium.make / gymnasium.make_vec."
            )
        if getattr(env, "closed", False):
            raise ClosedEnvError(f"this {type(env).__name__} was closed; build a new one to wrap.")
        one_hot_actions = as_bool(one_hot_actions, "one_hot_actions")
        step_timeout = optional_seconds(step_timeout, "step_timeout")
        base = env.unwrapped
        if not isinstance(base, gym.vector.AsyncVectorEnv) and step_timeout != DEFAULT_STEP_TIMEOUT:
            raise InvalidArgumentError(
                f"step_timeout applies to an AsyncVectorEnv (sub-envs in worker processes, which can be stopped); "
                f"{type(base).__name__} steps in this process, where a hang cannot be interrupted safely. Drop "
                "step_timeout, and pass watchdog_s= to gpu_envs.make()/wrap() to get the stacks of a hung call."
            )
        self.env = env
        self.env_index_offset = as_int(env_index_offset, "env_index_offset", minimum=0)
        self.num_envs = n = as_int(env.num_envs, f"{type(env).__name__}.num_envs", minimum=1)
        self.device = normalize_device(resolve_device(device))
        self.mode = autoreset_mode(env)
        # how the ended rows are reset in the same step (NEXT_STEP, DISABLED; partial resets too)
        self._reset_rows = (
            next_step_resets(env)
            if self.mode == AutoresetMode.NEXT_STEP and not single
            else lambda mask: env.reset(options={"reset_mask": mask})
        )
        self._rows_by_hand = self.mode == AutoresetMode.NEXT_STEP and row_reset(env) is not None
        self._same_step = self.mode == AutoresetMode.SAME_STEP
        self.capabilities = self.capabilities.replace(
            final_obs=FinalObsKind.SIMULATOR if self._same_step else FinalObsKind.WRAPPER_RESET,
            snapshot_rows=snapshot_refusal(env) is None,  # a SyncVectorEnv: its sub-envs deep-copied
        )
        self._single = single
        self._async = base if isinstance(base, gym.vector.AsyncVectorEnv) else None
        # gymnasium's own vector envs give a final observation for exactly the ended rows
        self._final_for_every_end = isinstance(base, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv))
        self._layout = ObsLayout(env.single_observation_space, self.device, default_key)
        self.observation_spec = self._layout.spec
        self._keys = self._layout.keys
        self._codec = ActionCodec(env.single_action_space, self.device, n, one_hot_actions)
        self.action_spec = self._codec.spec
        self.reward_spec = None if reward_spec is None else reward_spec.to(self.device)
        if info_spec is not None and not isinstance(info_spec, Composite):
            raise InvalidArgumentError(
                f"info_spec must be a gpu_envs.contract.specs.Composite of the info entries to keep, got {type(info_spec).__name__}."
            )
        self.info_spec = (
            InfoSpec({}, device=self.device) if info_spec is None else cast(Composite, info_spec.to(self.device))
        )
        reserved = set(self._keys) | set(_NEXT_KEYS)
        self._info = InfoReader(
            self.info_spec, reserved, n, declared=info_spec is not None, expected=episode_statistics(env)
        )
        self._obs_fields: list[tuple[tuple[int, ...], torch.dtype]] = []
        for key, shape in zip(self._keys, self._layout.shapes, strict=True):
            leaf_dtype = self.observation_spec[key].dtype
            if leaf_dtype is None:  # a leaf spec always has one (only a Composite has none)
                raise UnsupportedSpaceError(f"observation {key!r} of {type(env).__name__} has no single dtype.")
            self._obs_fields.append(((n, *shape), leaf_dtype))
        self._reset_stage = HostStaging(self._obs_fields, self.device, self.staging_packed)
        self._stage: HostStaging | None = None  # built at the first step, once the info fields are known
        self._step_layout: StepLayout | None = None
        # how the rule's numpy form reads one row of gymnasium's per-row final observations
        self._read_row = None if self._layout.single_leaf else self._layout.read
        self._lone_leaf = self._layout.single_leaf  # the observation is the one leaf (ObsLayout.read's shortcut)
        self._dtypes = self._layout.dtypes
        self._info_keys: list = []
        self._last_obs: ObsDict | None = None
        self._closed = False
        self._broken: str | None = None  # why the env cannot be used any more
        # a call that did not finish (an exception, Ctrl-C, a timeout): the sub-envs may be half-stepped,
        # and only a full reset helps
        self._guard = CallGuard("this gymnasium env")
        claim_simulator(innermost(cast(gym.vector.SyncVectorEnv, base).envs[0]) if single else innermost(env), self)
        # last: it takes over the AsyncVectorEnv's reset/step/close (timeouts, recovery)
        self._calls = None if self._async is None else AsyncCalls(self._async, step_timeout, self.describe)

    def describe(self) -> str:
        base = self.env.unwrapped
        inner = type(cast(gym.vector.SyncVectorEnv, base).envs[0].unwrapped if self._single else base).__name__
        kind = "single env" if self._single else self.mode.name
        return f"{self.name}({inner}, {kind})"

    # ------------------------------------------------------------------ calls
    def check_usable(self) -> None:
        if self._closed:
            raise ClosedEnvError(
                "this gymnasium env was closed; build a new one with gpu_envs.make() or gpu_envs.wrap()."
            )
        if self._broken is not None:
            raise BackendError(f"{self.describe()} cannot be used any more: {self._broken} Build a new env.")

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, a failure of the env as a BackendError (the caller's guard stays marked)."""
        try:
            return fn(*args, **kwargs)
        except GpuEnvsError:  # a timeout or an interrupted async call: a full reset drains or restarts the workers
            raise
        except Exception as err:
            raise self._failure(what, err) from err

    def _failure(self, what: str, err: BaseException) -> BackendError:
        message = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        advice = numpy2_advice(message)
        if self._async is None:
            return BackendError(
                f"{self.describe()} raised in {what}: {message.rstrip('.')}.{advice} The sub-envs may be half-stepped: "
                "call env.reset() before stepping again."
            )
        dead = [f"worker {i} (exit code {p.exitcode})" for i, p in enumerate(self._async.processes) if not p.is_alive()]
        if dead or isinstance(err, _WORKER_GONE):
            cause = f"async worker process died: {', '.join(dead) or 'a pipe closed'} ({message})."
        else:
            cause = f"a sub-env raised in {what}: {message}; its worker process has stopped."
        self._broken = cause
        shutdown_async(self._async)
        return BackendError(f"{self.describe()} failed: {cause}{advice} All workers were shut down; build a new env.")

    # ------------------------------------------------------------------ reset
    def recover(self) -> None:
        """After an interrupted call: drain or restart async workers; the full reset that follows does the rest."""
        if self._calls is not None and not self._closed and self._broken is None:
            self._calls.recover()
        if self._guard.pending is None:
            self._guard.start("reset")  # until the full reset that follows completes

    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        self.check_usable()
        options = None
        if mask is not None:
            rows = mask.detach().to("cpu", torch.bool).numpy().reshape(self.num_envs)
            if not rows.any() and self._last_obs is not None:
                return self._last_obs
            if not rows.all():
                self._guard.check("a partial reset")  # a half-stepped env needs every row reset
            options = {"reset_mask": rows.copy()} if not rows.all() else None
        if seed is not None:
            seed = int(seed) + self.env_index_offset
        if options is not None and seed is not None and self._rows_by_hand:
            raise InvalidArgumentError(
                f"{type(self.env).__name__} draws every row's reset from one random stream: a partial reset cannot "
                "take a seed. Reset the masked rows without a seed, or every row with reset(seed=...)."
            )
        self._guard.start("reset")
        if options is not None and seed is None:  # the masked reset of the ended rows (NEXT_STEP's may be by hand)
            obs, _info = self._call("reset", self._reset_rows, options["reset_mask"])
        else:
            obs, _info = self._call("reset", self.env.reset, seed=seed, options=options)
        self._guard.finish()
        tensors = zip(self._keys, self._reset_stage.publish(self._layout.read(obs)), strict=True)
        last_obs = {k: t for k, t in tensors if t is not None}  # every leaf is an array: none is skipped
        if len(last_obs) != len(self._keys):
            raise BackendError(f"{self.describe()}: reset gave no observation for some of {self._keys}.")
        self._last_obs = last_obs
        return last_obs

    # ------------------------------------------------------------------- step
    def step(self, action: torch.Tensor) -> RawStep:
        guard = self._guard
        if self._closed or self._broken is not None or guard.pending is not None:
            self.check_usable()
            guard.refuse("step", f"the sub-envs of {self.describe()} may be half-stepped")
        guard.pending = "step"  # guard.start("step"): left marked if the env raises (no try in the way)
        try:
            obs, reward, terminated, truncated, info = self.env.step(self._codec.to_numpy(action))
        except GpuEnvsError:  # a timeout or an interrupted async call: a full reset drains or restarts the workers
            raise
        except Exception as err:
            raise self._failure("step", err) from err
        if self._stage is None:
            self._build_step_stage(info)
        n = self.num_envs
        leaves = [obs] if self._lone_leaf else self._layout.read(obs)
        done = np.logical_or(terminated, truncated)  # a fresh array
        final, final_mask = None, None  # None: the step's observations are the final ones (no row ended)
        if self._same_step:
            if "final_obs" in info:  # the env's final observations of the ended rows: the rule's numpy form
                final, final_mask = final_obs_numpy(
                    leaves,
                    done,
                    info["final_obs"],
                    info.get("_final_obs"),
                    read_row=self._read_row,
                    dtypes=self._dtypes,
                    every_end=self._final_for_every_end,
                )
        elif np.count_nonzero(done):  # the step's observation IS the final one; reset the ended rows (same step)
            final, _ = final_obs_numpy(
                leaves, done, None, dtypes=self._dtypes
            )  # copies, before the reset rewrites them
            obs, _ = self._call("reset", self._reset_rows, done)
            leaves = self._layout.read(obs)
        if self._info_keys:
            info_values = self._info.read(info, self._same_step, terminated, truncated)
        else:
            info_values = ()
            if info:
                self._info.warn_new_keys(info)  # warns about dropped entries once
        raw = self._publish(
            leaves,
            reward.reshape(self._reward_shape),
            terminated.reshape(n, 1),
            truncated.reshape(n, 1),
            done.reshape(n, 1),
            final,
            final_mask,
            info_values,
            final is None,
        )
        guard.pending = None  # guard.finish()
        return raw

    def _build_step_stage(self, info: dict) -> None:
        n = self.num_envs
        info_fields = self._info.discover(info or {})
        # root obs, reward and flags in the TensorDict layout ([N, 1], a vector reward [N, *shape]),
        # final obs, final-obs mask [N], info
        self._reward_shape = (n, 1) if self.reward_spec is None else (n, *self.reward_spec.shape)
        self._step_layout = StepLayout(
            dict(zip(self._keys, self._obs_fields, strict=True)),
            n,
            reward_shape=self._reward_shape,
            final_mask=(n,),
            info=info_fields,
        )
        self._stage = HostStaging(self._step_layout.fields, self.device, self.staging_packed)
        self._info_keys = list(info_fields)
        # fresh arrays in the fields' dtypes, given away: shared, not copied, on the CPU. Besides
        # the ones this backend makes (done, final obs and mask), gymnasium's own vector envs return
        # fresh terminated/truncated arrays (np.copy) each step.
        k, fresh_flags = len(self._keys), self._final_for_every_end
        owned = [False] * k + [False, fresh_flags, fresh_flags, True] + [True] * (k + 1) + [False] * len(info_fields)
        # pack, stage and unpack in one call (on the CPU: each array straight into its tensor)
        self._publish = self._step_layout.publisher(self._stage, owned)

    # -------------------------------------------------------------- lifecycle
    # ------------------------------------------------------------ row snapshots
    def get_state(self, rows: torch.Tensor) -> TensorDict:
        """Deep copies of the sub-envs ``rows`` (:mod:`.snapshot`); a SyncVectorEnv only."""
        self._snapshot_check()
        return copy_rows(self.env, rows.detach().cpu().numpy())

    def set_state(self, state: TensorDictBase, rows: torch.Tensor) -> None:
        self._snapshot_check()
        restore_rows(self.env, state, rows.detach().cpu().numpy())

    def _snapshot_check(self) -> None:
        self.check_usable()
        why = snapshot_refusal(self.env)
        if why is not None:
            raise SnapshotError(why)

    def snapshot_refusal(self) -> str:
        return snapshot_refusal(self.env) or super().snapshot_refusal()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._async is not None and self._async.closed:
            return
        try:
            self.env.close()
        except Exception as err:
            if self._async is not None:
                shutdown_async(self._async)
            raise BackendError(f"closing {self.describe()} failed: {type(err).__name__}: {err}") from err


def wrap_single(
    env: gym.Env,
    device: torch.device | str | None = None,
    *,
    from_pixels: bool = False,
    pixels_only: bool = True,
    frame_skip: int = 1,
    **kwargs: Any,
) -> GymnasiumBackend:
    """A single ``gymnasium.Env`` as a batch of one (see the module docstring)."""
    if getattr(env.unwrapped, "closed", False):
        raise ClosedEnvError(f"this {type(env.unwrapped).__name__} was closed; build a new one to wrap.")
    from_pixels = as_bool(from_pixels, "from_pixels")
    pixels_only = as_bool(pixels_only, "pixels_only")
    frame_skip = as_int(frame_skip, "frame_skip", minimum=1)
    env = _apply_wrappers(env, from_pixels, pixels_only, frame_skip)
    vector = gym.vector.SyncVectorEnv([lambda: env], copy=False, autoreset_mode=AutoresetMode.DISABLED)
    default_key = "pixels" if from_pixels and pixels_only else "observation"
    return GymnasiumBackend(vector, device, default_key=default_key, single=True, **kwargs)


def _apply_wrappers(env: gym.Env, from_pixels: bool, pixels_only: bool, frame_skip: int) -> gym.Env:
    if frame_skip != 1:
        env = FrameSkip(env, frame_skip)
    if from_pixels:
        env = add_pixels(env, pixels_only)
    return env
