"""What every built-in torch env shares: lifecycle, seeding, state, partial resets.

A built-in env is a gymnasium ``VectorEnv`` (so gymnasium and torchrl tooling accept it)
that follows the torch vector env protocol (:mod:`gpu_envs.backends.torch_envs`): torch
tensors in and out, same-step auto-reset, final observations in ``info["final_obs"]``.
Subclasses write the physics (``step``) and the initial-state bounds; this base owns the
rest, so the envs differ only where their dynamics do.

State lives in tensors that are updated IN PLACE and never re-bound (the physical state,
the step counts, the random generator's keys and counters): a CUDA graph or a compiled
step reads and writes the same memory every time, and :meth:`BatchedTorchEnv.live_state`
/ :meth:`BatchedTorchEnv.load_live_state` expose and restore all of it.

Randomness comes from a :class:`~gpu_envs.builtin.counter_rng.CounterRNG`: row ``i``'s initial
states depend only on the seed, its global index ``env_index_offset + i`` and how many
times it was reset -- never on ``N`` or on other rows -- and the draws are plain integer
ops, so ``torch.compile`` traces them without a graph break. In eager mode a step takes
its reset candidates from a :class:`~gpu_envs.builtin.draw_pool.DrawPool` (each row's next
draws, computed in bulk), and so does a partial reset with the default bounds: the same
values, for a fraction of the ops.

Example (a subclass)::

    class MyEnv(BatchedTorchEnv):
        state_size = 2
        default_max_episode_steps = 100
        def _build(self):
            ...                               # spaces and constants
        def reset(self, *, seed=None, options=None):
            options = self._begin_reset(seed, options)
            fresh = self._rng.uniform(self._rng.bounds([-1, -1], [1, 1]))
            self._apply_reset(fresh, options.get("reset_mask"))
            return self._state.clone(), {}
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import gymnasium
import torch

from gpu_envs.builtin.copies import DeepCopyOnly
from gpu_envs.builtin.counter_rng import CounterRNG
from gpu_envs.builtin.output_ring import OutputRing
from gpu_envs.builtin.params import RowParams
from gpu_envs.contract.errors import ActionError, ClosedEnvError, InvalidArgumentError, ResetMaskError, ResetNeededError
from gpu_envs.contract.keys import OBSERVATION
from gpu_envs.contract.raw_step import NO_INFO, RawStep
from gpu_envs.utils.arguments import as_bool, as_int, as_seed
from gpu_envs.utils.devices import resolve_device
from gpu_envs.utils.live_state import copy_into
from gpu_envs.utils.native_library import native_allowed


class BatchedTorchEnv(DeepCopyOnly, gymnasium.vector.VectorEnv):
    """Base of the built-in envs: ``N`` systems as one ``[N, state_size]`` float32 state.

    Args:
        num_envs: number of independent systems ``N``.
        device: where every tensor (state, outputs, random generator) lives.
        expose_final_obs: if True, ``step`` returns ``info = {"final_obs": obs before the
            auto-reset, "_final_obs": done mask [N]}``; if False, ``info = {}`` (Isaac Lab
            style: the final observation of ended rows is lost).
        max_episode_steps: truncation limit (``truncated = elapsed_steps >= limit``);
            ``None``: the env's gymnasium limit (``default_max_episode_steps``).
        seed: keys the env's counter-based generator, the only source of randomness;
            ``None`` draws a fresh seed. ``reset(seed=...)`` re-keys it.
        env_index_offset: global index of row 0. Row ``i`` draws what row
            ``env_index_offset + i`` of a larger env with the same seed draws, so shards
            built with offsets ``0, N, 2N, ...`` together reproduce one big run exactly.

    Attributes:
        state: ``[N, state_size]`` float32, updated in place by ``reset``/``step`` (assigning
            to it copies into it).
        elapsed_steps: ``[N]`` int64, steps since each row's episode began (in place too).
        last_step_clean: True when the last step was the native CPU step and it found
            every action valid and every value it wrote finite (the health look's checks,
            :class:`~gpu_envs.contract.protocols.SelfCheckedStep`); False after any other
            step, or where it found a bad value.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP,
        "render_modes": [],
    }
    autoreset_mode = gymnasium.vector.AutoresetMode.SAME_STEP  # read by torchrl's GymWrapper
    render_mode = None
    supports_reset_mask = True
    state_size: ClassVar[int]
    default_max_episode_steps: ClassVar[int]  # gymnasium's TimeLimit of the env
    # the physical constants set_params can change per row, named as gymnasium's env names its attributes,
    # with gymnasium's values (gpu_envs.builtin.params)
    param_defaults: ClassVar[dict[str, float]] = {}
    # set by a subclass's _build: its default reset bounds and the step's pool of reset draws
    _reset_bounds: Any
    _step_draws: Any

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        *,
        expose_final_obs: bool = True,
        max_episode_steps: int | None = None,
        seed: int | None = None,
        env_index_offset: int = 0,
    ) -> None:
        if max_episode_steps is None:
            max_episode_steps = self.default_max_episode_steps
        self.num_envs = as_int(num_envs, "num_envs", minimum=1)
        self.device = resolve_device(device)
        self.expose_final_obs = as_bool(expose_final_obs, "expose_final_obs")
        self.max_episode_steps = as_int(max_episode_steps, "max_episode_steps", minimum=1)
        self.env_index_offset = as_int(
            env_index_offset, "env_index_offset", minimum=0, hint="(the global index of this env's first row)"
        )
        seed = as_seed(seed)
        self._state = torch.zeros(self.num_envs, self.state_size, dtype=torch.float32, device=self.device)
        self._elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._rng = CounterRNG(self.num_envs, self.state_size, self.device, seed, env_index_offset)
        self._needs_reset = True
        self._closed = False
        self.last_step_clean = False
        # views made once (neither tensor is ever re-bound): the state's columns, and
        # elapsed_steps as [N, 1] for the TensorDict layout (see _state_columns, _elapsed_view)
        self._columns = self._state.unbind(1)
        self._elapsed_col = self._elapsed.unsqueeze(1)
        self._one_step = torch.ones((), dtype=torch.int64, device=self.device)
        self._limit = torch.tensor(self.max_episode_steps, dtype=torch.int64, device=self.device)
        self._params = RowParams(self.param_defaults, self.num_envs, self.device)
        # False until set_params: the step then reads every row's own constants (the pure-torch physics)
        self.randomized = False
        self._output_ring = OutputRing()  # off unless reuse_outputs(True)
        self._output_layout: dict[str, tuple[tuple[int, ...], torch.dtype]] | None = None  # (output_layout)
        self._native: Any = None  # the native step's kernel, set by a subclass's _build where it runs
        self._native_constants: Any  # its StepConstants (native.step_constants), set alongside it
        self._build()

    def _build(self) -> None:
        """Subclasses: spaces, reset bounds and step constants, once the state exists."""
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> torch.Tensor:
        """``[N, state_size]`` float32, updated in place; assigning copies into it."""
        return self._state

    @state.setter
    def state(self, value: torch.Tensor) -> None:
        self._assign(self._state, value, "state")

    @property
    def rng(self) -> CounterRNG:
        """The env's counter-based generator: the only source of its randomness (seeded by ``reset(seed=...)``)."""
        return self._rng

    @property
    def reset_draws(self) -> Any:
        """Where a step takes its reset candidates: a :class:`~gpu_envs.builtin.draw_pool.DrawPool` of ``rng``.

        Anything with ``uniform() -> [N, state_size]`` (the same values as
        ``rng.uniform(reset bounds)``) may replace it; ``benchmarks/bench_raw_step.py``
        swaps in the earlier ``torch.Generator`` draws to time them side by side.
        """
        return self._step_draws

    @reset_draws.setter
    def reset_draws(self, draws: Any) -> None:
        self._step_draws = draws

    @property
    def native_step(self) -> bool:
        """True if eager CPU steps run the native kernel (:mod:`gpu_envs.builtin.native`): same values, fewer ops.

        False on other devices, without a C compiler, or with ``GPU_ENVS_NATIVE=0`` at
        construction: the pure-torch step runs (also for actions the kernel does not take,
        and whenever the step is traced).
        """
        return getattr(self, "_native", None) is not None

    @property
    def elapsed_steps(self) -> torch.Tensor:
        """``[N]`` int64 steps since each row's episode began, updated in place."""
        return self._elapsed

    @elapsed_steps.setter
    def elapsed_steps(self, value: torch.Tensor) -> None:
        value = torch.as_tensor(value, dtype=self._elapsed.dtype, device=self.device)
        self._check_elapsed(value, "elapsed_steps")
        self._assign(self._elapsed, value, "elapsed_steps")

    def _check_elapsed(self, value: torch.Tensor, what: str) -> None:
        """Step counts lie in ``[0, max_episode_steps)`` (one host read: not on the hot path).

        A count outside would silently change the time limit: -100 ran the next episode for
        110 steps under ``max_episode_steps=10``.
        """
        if value.numel():
            low, high = (int(v) for v in torch.aminmax(value))
            if low < 0 or high >= self.max_episode_steps:
                raise InvalidArgumentError(
                    f"{type(self).__name__}: {what} must lie in [0, max_episode_steps={self.max_episode_steps}) "
                    f"(steps into the current episode), got {low if low < 0 else high}."
                )

    def reuse_outputs(self, on: bool) -> bool:
        """While on, the native CPU step writes its outputs into two sets taken in turn; returns whether it is on.

        For a caller that copies every output of a step before the next one (a
        random-action ``collect``: :meth:`gpu_envs.core.step_path.StepPath.reusing_outputs`):
        each step's tensors are rewritten two steps later, so nothing may keep them. It
        saves the step's ~6 allocations (:mod:`gpu_envs.builtin.output_ring`). Off where
        the native step does not run (another device, no C compiler): the pure-torch
        step allocates as before and this returns False.
        """
        self._output_ring.on = bool(on) and self._native is not None and self.device.type == "cpu"
        self._output_ring.into = None
        return self._output_ring.on

    output_names: tuple[str, ...] = ()
    """The native step's outputs in the order it takes them (subclasses): names :meth:`write_next_step_into` takes."""

    def output_layout(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """``{name: (shape, dtype)}`` of the native step's outputs (:attr:`output_names`) in the TensorDict layout.

        Observations ``[N, obs_dim]`` float32, the reward ``[N, 1]`` float32, the flags
        ``[N, 1]`` bool; empty for an env without a native step's outputs. Built once
        (neither ``N`` nor the spaces change).
        """
        layout = self._output_layout
        if layout is None:
            n = self.num_envs
            obs = (n, *(self.single_observation_space.shape or ()))
            kinds = {"observation": (obs, torch.float32), "final_observation": (obs, torch.float32)}
            kinds["reward"] = ((n, 1), torch.float32)
            layout = self._output_layout = {name: kinds.get(name, ((n, 1), torch.bool)) for name in self.output_names}
        return layout

    def write_next_step_into(self, targets: dict[str, torch.Tensor]) -> None:
        """While :meth:`reuse_outputs` is on: the next native step writes these outputs into ``targets`` (one step).

        ``targets`` maps names of :attr:`output_names` (``"observation"``: the post-reset
        observation, ``"final_observation"``: the pre-reset one, ``"reward"``, the flags) to
        contiguous CPU tensors of :meth:`output_layout`'s shape and dtype; names left out
        come from the reused sets. A random-action ``collect`` passes its buffer's slots of
        that step (:func:`gpu_envs.rollout.loop.output_slots`), so its copy into the buffer
        finds each value already in place. The caller must not read or write the targets
        until the step returned, and copies every other output at once, as for
        :meth:`reuse_outputs`. A step that does not run the native kernel ignores them.

        Example (``reuse_outputs`` answers False where the native step does not run):

        >>> import torch
        >>> from gpu_envs.builtin import CartPoleEnv
        >>> env = CartPoleEnv(4, seed=0)
        >>> _ = env.reset()
        >>> on = env.reuse_outputs(True)
        >>> slot = torch.empty(4, 1)
        >>> if on:
        ...     env.write_next_step_into({"reward": slot})
        >>> (env.raw_step(torch.zeros(4, dtype=torch.int64)).reward is slot) == on
        True
        """
        ring = self._output_ring
        if not ring.on:
            raise InvalidArgumentError(
                f"{type(self).__name__}.write_next_step_into needs reuse_outputs(True) first (it returned "
                f"{ring.on}): only a caller that copies each step's outputs at once may name where they go."
            )
        layout = self.output_layout()
        unknown = set(targets) - set(layout)
        if unknown:
            raise InvalidArgumentError(
                f"{type(self).__name__}.write_next_step_into: unknown outputs {sorted(unknown)}; "
                f"it writes {list(self.output_names)}."
            )
        for name, target in targets.items():
            shape, dtype = layout[name]
            if (
                not isinstance(target, torch.Tensor)
                or tuple(target.shape) != shape
                or target.dtype != dtype
                or target.device.type != "cpu"
                or not target.is_contiguous()
            ):
                got = (
                    f"{tuple(target.shape)} {target.dtype} on {target.device}"
                    if isinstance(target, torch.Tensor)
                    else type(target).__name__
                )
                raise InvalidArgumentError(
                    f"{type(self).__name__}.write_next_step_into: {name!r} must be a contiguous CPU tensor "
                    f"{shape} {dtype}, got {got}."
                )
        ring.into = tuple(targets.get(name) for name in self.output_names)

    def live_state(self) -> dict[str, torch.Tensor]:
        """Every tensor a step reads and writes, live (not copies), by name.

        ``state`` ``[N, state_size]`` float32, ``elapsed_steps`` ``[N]`` int64, the
        random generator's ``rng_key`` ``[N, 2]`` and ``rng_counter`` ``[N]`` (int64), and the
        per-row physical constants ``params`` ``[N, P]`` float32 (:meth:`set_params`).
        These tensors are never re-bound, so the dict stays valid for the env's life;
        ``.clone()`` the values to keep a snapshot.
        """
        return {
            "state": self._state,
            "elapsed_steps": self._elapsed,
            "rng_key": self._rng.key,
            "rng_counter": self._rng.counter,
            "params": self._params.values,
        }

    # ------------------------------------------------------------- parameters
    @property
    def params(self) -> dict[str, torch.Tensor]:
        """Copies of every row's physical constants, ``{name: [N] float32}`` (gymnasium's names and values by default)."""
        return self._params.as_dict()

    def set_params(self, rows: Any = None, **values: Any) -> None:
        """Give ``rows`` their own physical constants (domain randomization): see :mod:`gpu_envs.builtin.params`.

        ``env.set_params(rows=[0, 3], masspole=0.2)`` or, without a sync,
        ``env.set_params(rows=mask, masspole=values)`` (a bool ``[N]`` mask and ``[N]`` values).
        From the first call on, the env steps with the pure-torch physics reading every row's
        constants (not the native CPU kernel); the values take effect from the next step and are
        part of :meth:`live_state` and of snapshots.
        """
        self._params.set(rows, **values)
        self.randomized = True
        self._params_changed()

    def _params_changed(self) -> None:
        """Subclasses: recompute the per-row step constants from ``self._params`` (in place)."""

    def load_live_state(self, state: dict[str, torch.Tensor]) -> None:
        """Copy a :meth:`live_state` (this env's or a snapshot of it) into the env, in place.

        The env is then ready to step from exactly that state (same future draws too).
        """
        copy_into(self.live_state(), state, type(self).__name__)
        if self.randomized:
            self._params_changed()
        # a CUDA graph replay wrote the generator's tensors without bumping their versions
        # (it hands them back here): caches of draws must not trust them
        self._rng.invalidate()
        self._needs_reset = False

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

    def get_state(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copies of ``rows``' state (``rows``: int64 ``[k]`` on ``device``): the snapshot protocol.

        The entries of :meth:`live_state`, each ``[k, ...]``: the physical state, the step
        counts and the random streams' keys and counters, so :meth:`set_state` makes the
        same continuation again, reset draws included, in these rows or others
        (:class:`gpu_envs.contract.protocols.RowStateEnv`).
        """
        if self._needs_reset:
            self._raise_not_ready()
        return {name: value.index_select(0, rows) for name, value in self.live_state().items()}

    def set_state(self, state: Any, rows: torch.Tensor) -> None:
        """Write a :meth:`get_state` into ``rows`` (distinct, int64 ``[k]`` on ``device``), in place."""
        if self._needs_reset:
            self._raise_not_ready()
        mine = self.live_state()
        keys = set(state.keys())
        if keys != set(mine):
            raise InvalidArgumentError(
                f"{type(self).__name__}.set_state takes the entries {sorted(mine)} (a get_state()), got {sorted(keys)}."
            )
        k = int(rows.shape[0])
        for name, target in mine.items():
            value = state[name]
            if value.shape != (k, *target.shape[1:]) or value.dtype != target.dtype:
                raise InvalidArgumentError(
                    f"{type(self).__name__}.set_state: {name!r} must be {(k, *target.shape[1:])} {target.dtype}, "
                    f"got {tuple(value.shape)} {value.dtype}."
                )
        self._check_elapsed(state["elapsed_steps"], "set_state's 'elapsed_steps'")
        for name, target in mine.items():
            target.index_copy_(0, rows, state[name].to(self.device))
        self._rng.invalidate()  # pooled draws were computed from the old counters and keys
        if not self.randomized and not self._params.at_defaults():
            self.randomized = True  # a snapshot of rows with their own constants (one sync: not the hot path)
        if self.randomized:
            self._params_changed()

    def _assign(self, target: torch.Tensor, value: Any, name: str) -> None:
        value = torch.as_tensor(value, dtype=target.dtype, device=self.device)
        if tuple(value.shape) != tuple(target.shape):
            raise InvalidArgumentError(f"{name} must have shape {tuple(target.shape)}, got {tuple(value.shape)}.")
        target.copy_(value)

    # ------------------------------------------------------------------ reset
    def _begin_reset(self, seed: int | None, options: dict | None) -> dict:
        """Checks and seeding common to every ``reset``; returns ``options`` (never None)."""
        if self._closed:
            raise ClosedEnvError(f"{type(self).__name__} was closed; build a new one.")
        if seed is not None:
            self._rng.reseed(as_seed(seed))  # -1 would wrap around: refused, as on every backend
        return options or {}

    def _reset_draws(self, bounds: Any, mask: Any | None) -> torch.Tensor:
        """``[N, state_size]`` fresh states for a reset: ``self._rng.uniform(bounds)``.

        A partial reset with the env's default bounds takes them from the step's
        :class:`~gpu_envs.builtin.draw_pool.DrawPool` (``self._step_draws``, built by the
        subclass): the same values bit for bit, in 4 ops instead of ~22. A full reset (the
        recovery path, often after a reseed) draws directly, as do custom bounds.
        """
        if mask is not None and bounds is self._reset_bounds:
            return self._step_draws.uniform()
        return self._rng.uniform(bounds)

    def _reset_rows(self, bounds: Any, mask: Any | None) -> None:
        """Reset every row, or the rows of ``mask``, to draws of ``bounds``: ``_apply_reset(_reset_draws(...))``.

        A partial reset with the default bounds on the native CPU step is one C call
        (:mod:`gpu_envs.builtin.native`): the same draws, step counts and counters as the
        torch ops, for the rows of the mask only.
        """
        native = getattr(self, "_native_reset", None)
        if mask is not None and bounds is self._reset_bounds and native is not None and native_allowed():
            mask = self._check_mask(mask)
            if mask.is_contiguous():
                self._rng.count_advance()  # counted first, as CounterRNG.advance counts
                native(self._native_constants.address(), self.state_size, mask.data_ptr())
                self._forget_state_cache()  # written through a pointer: the version counter did not move
                self._needs_reset = False
                return
        self._apply_reset(self._reset_draws(bounds, mask), mask)

    def _forget_state_cache(self) -> None:
        """Subclasses: drop what they keep computed from the state (the state was written behind torch's back)."""

    def _apply_reset(self, fresh: torch.Tensor, mask: Any | None) -> None:
        """Install ``fresh`` ``[N, state_size]`` on every row, or on the rows of ``mask`` [N].

        Only the rows that take their fresh state count a draw of the generator.
        """
        if mask is None:
            self._state.copy_(fresh)
            self._elapsed.zero_()
            self._rng.advance()
            self._rng.invalidate()  # a full reset is the recovery path: no cache of draws outlives it
        else:
            mask = self._check_mask(mask)
            self._state.copy_(torch.where(mask.unsqueeze(1), fresh, self._state))
            self._elapsed.masked_fill_(mask, 0)
            self._rng.advance(mask)
        self._needs_reset = False

    def _check_mask(self, mask: Any) -> torch.Tensor:
        if self._needs_reset:
            raise ResetNeededError("call reset() without reset_mask before resetting some rows.")
        mask = torch.as_tensor(mask, device=self.device)
        if mask.dtype != torch.bool or tuple(mask.shape) != (self.num_envs,):
            raise ResetMaskError(
                f"reset_mask must be a bool tensor of shape ({self.num_envs},), got {mask.dtype} {tuple(mask.shape)}."
            )
        return mask

    # ----------------------------------------------------------------- action
    def _as_action(self, action: Any) -> torch.Tensor:
        """The action, a tensor on ``device`` (passed through: no copy, no sync).

        Anything else is refused with the way in: gymnasium's conventions (numpy arrays
        such as ``env.action_space.sample()``, lists, tensors elsewhere) are taken at the
        gymnasium-facing envs, ``gymnasium.make_vec("gpu_envs/<id>")`` and
        ``gymnasium.make("gpu_envs/<id>")`` (:mod:`gpu_envs.gymnasium_ids`), which convert them once.
        """
        if isinstance(action, torch.Tensor) and action.device == self.device:
            return action
        where = (
            f"a tensor on {action.device}"
            if isinstance(action, torch.Tensor)
            else f"a {type(action).__module__}.{type(action).__name__}"
        )
        raise ActionError(
            f"{type(self).__name__}.step takes the action as a torch.Tensor on {self.device}; got {where}. For "
            f"gymnasium's conventions (numpy actions such as env.action_space.sample(), lists), build the env with "
            f"gymnasium.make_vec('gpu_envs/<id>', num_envs=...) after `import gpu_envs`, which converts them; or "
            f"convert it yourself: torch.as_tensor(action, device='{self.device}')."
        )

    # ------------------------------------------------------------------ step
    def _state_columns(self) -> tuple[torch.Tensor, ...]:
        """The state's columns: views made once in eager mode (``unbind`` costs ~1.7 us), fresh when traced."""
        return self._state.unbind(1) if torch.compiler.is_compiling() else self._columns

    def _advance(self, action: torch.Tensor, columns: bool) -> tuple:
        """One step of the physics and the same-step auto-reset (subclasses).

        Returns ``(obs, reward, terminated, truncated, done, pre-reset obs or None)``, the
        reward and flags as ``[N, 1]`` columns when ``columns`` (the TensorDict layout of
        :meth:`raw_step`), else ``[N]`` (gymnasium's, for :meth:`step`): each
        layout computed directly, with no views added afterwards.
        """
        raise NotImplementedError

    def _elapsed_view(self, columns: bool) -> torch.Tensor:
        """``elapsed_steps`` as ``[N, 1]`` (``columns``) or ``[N]``, updated in place through it.

        The column is a view made once in eager mode, a fresh one when traced (dynamo
        follows fresh views of its inputs, not attributes aliasing each other).
        """
        if not columns:
            return self._elapsed
        return self._elapsed.unsqueeze(1) if torch.compiler.is_compiling() else self._elapsed_col

    def _count_step(self, columns: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Count this step on every row: ``(elapsed_steps view, truncated)``, each ``[N, 1]`` or ``[N]``."""
        elapsed = self._elapsed_view(columns).add_(self._one_step)
        return elapsed, elapsed >= self._limit

    def _end_episodes(self, elapsed: torch.Tensor, done: torch.Tensor) -> None:
        """Rows that ended (and took their fresh state): step count back to 0, their draw counted."""
        elapsed.masked_fill_(done, 0)
        self._rng.advance(done)

    def step(self, action: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """gymnasium's ``(obs, reward [N], terminated [N], truncated [N], info)``.

        ``action`` is a tensor on ``device`` (used as is); numpy actions are taken by the
        gymnasium-facing env, ``gymnasium.make_vec("gpu_envs/<id>")``, which converts them.

        ``info`` is ``{"final_obs": pre-reset obs, "_final_obs": done [N]}`` when
        ``expose_final_obs``, else ``{}``; ``obs`` is post-reset on ended rows.
        """
        obs, reward, terminated, truncated, done, final = self._advance(self._as_action(action), False)
        if not self.expose_final_obs:
            return obs, reward, terminated, truncated, {}
        return obs, reward, terminated, truncated, {"final_obs": final, "_final_obs": done}

    def raw_step(self, action: torch.Tensor) -> RawStep:
        """The same step as a gpu_envs :class:`~gpu_envs.contract.raw_step.RawStep` (the torch backend's direct step).

        Observations as ``{"observation": tensor}``; reward and flags ``[N, 1]``;
        ``final_obs`` is the pre-reset observation of every row (the final one where an
        episode ended, the plain next one elsewhere: ``final_mask`` None), or ``None``
        without ``expose_final_obs``; no info entries. The torch backend hands this
        method to the env as its step (:mod:`gpu_envs.backends.torch_envs`), so a built-in
        step is one call with nothing in between.
        """
        obs, reward, terminated, truncated, done, final = self._advance(action, True)
        return RawStep(
            {OBSERVATION: obs},
            reward,
            terminated,
            truncated,
            done,
            {OBSERVATION: final} if self.expose_final_obs else None,
            None,
            NO_INFO,
        )

    def step_transition(self, action: torch.Tensor) -> tuple:
        """Deprecated name of :meth:`raw_step` (a plain tuple of its fields); goes away in the next release."""
        warnings.warn(
            f"{type(self).__name__}.step_transition was renamed raw_step (it returns a RawStep); "
            "the old name goes away in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return tuple(self.raw_step(action))

    # -------------------------------------------------------------- lifecycle
    def _raise_not_ready(self) -> None:
        if self._closed:
            raise ClosedEnvError(f"{type(self).__name__} was closed; build a new one.")
        raise ResetNeededError("call reset() before step().")

    def close(self, **kwargs: Any) -> None:
        """Mark the env closed (it holds no external resources); later calls raise."""
        self._closed = True
        self._needs_reset = True

    def __repr__(self) -> str:
        offset = f", env_index_offset={self.env_index_offset}" if self.env_index_offset else ""
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device}{offset})"
