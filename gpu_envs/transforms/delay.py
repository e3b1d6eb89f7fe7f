"""``Delay``: per-row actuator and sensor latency in steps, drawn per episode, reset-aware.

A real robot's command reaches its motors a few control steps late, and its sensors report
the past; a policy trained without that lag fails on the robot. ``Delay(action_steps=(lo,
hi), observation_steps=(lo, hi))`` gives every row its own delays, drawn uniformly from the
integers ``lo..hi`` (both included) at the start of each of its episodes:

* **actions**: the simulator applies, at step ``t`` of an episode, the action the policy
  chose at step ``t - d``; during the first ``d`` steps of an episode there is no such
  action and it applies ``initial_action``: ``"zeros"`` (the zero action, index 0 for a
  discrete action) or ``"first"`` (the episode's first action). With
  ``hold_probability=p`` the actuator also misses an update with probability ``p`` per step
  (after the episode's first step): it applies again what it applied the step before.
  ``td["action"]`` stays the policy's own output (what a learner needs for its
  log-probabilities); the simulator steps a copy;
* **observations**: ``td[key]`` and ``("next", key)`` show the observation of ``d`` steps
  before, within the episode (a fresh episode shows its reset observation until it has ``d``
  steps of its own). On rows that ended, ``("next", key)`` is the delayed view of the final
  step, from the ended episode: the true final observation when ``d = 0``, never the next
  episode's.

Any reset of a row (full, masked ``reset(td)`` with ``"_reset"``, or the auto-reset after an
end) clears its queues and draws its next delays; the other rows go on. The draws come from
two 32-bit streams per row (a linear congruential step per draw, its top 16 bits used: one
stream advanced once per episode for the delays, one per step for the holds), whose starts
are hashed from the env's seed (``EnvSpecs.seed``, and again at ``env.reset(seed=...)``) and
the row's index (:mod:`gpu_envs.transforms.streams`): the same in every run
with that seed, and never touching the env's own generator. Queues are time-major shift
registers (``[depth + 1, N, *shape]``: a push is one contiguous copy, a read one
``index_select`` at each row's delay); every update is in place (no host sync, the same ops
every step: CUDA-graph and ``compile=True`` safe). On a CPU env each hook is one C call
(:mod:`gpu_envs.transforms.native_rows`, the same bytes as the torch ops, which run under
``torch.compile``, on a GPU, and without a C compiler); ``get_state`` / ``set_state`` snapshot the
queues, the delays and the streams per row. :attr:`Delay.action_delay` / :attr:`observation_delay`
are the delays of the current episodes (``[N]`` int64 on the device).

Example::

    >>> import gpu_envs
    >>> from gpu_envs.transforms import Delay, TransformedEnv
    >>> delay = Delay(action_steps=(1, 3), observation_steps=1)
    >>> env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0), delay)
    >>> traj = env.rollout(10)
    >>> bool(((delay.action_delay >= 1) & (delay.action_delay <= 3)).all())
    True
    >>> delay.observation_delay.tolist()
    [1, 1, 1, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, SpecError
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.keys import Key, as_keys, read, write
from gpu_envs.transforms.native_rows import KernelUser, fits, kernels
from gpu_envs.transforms.streams import next_state_, seeded_states, top16
from gpu_envs.utils.arguments import as_int, as_number
from gpu_envs.utils.native_library import native_allowed
from gpu_envs.utils.row_views import row_dtype, where_rows

__all__ = ["Delay"]

_SALT = 0x5DE1A7  # keys Delay's streams apart from the other transforms' (same seed)


def _steps(value: Any, name: str) -> tuple[int, int]:
    """``(lo, hi)`` from an int ``d`` (always ``d``), a pair, or None (no delay)."""
    if value is None:
        return 0, 0
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise InvalidArgumentError(f"Delay {name} must be an int or a pair (lo, hi) of ints, got {value!r}.")
        lo = as_int(value[0], f"Delay {name} lo", minimum=0)
        hi = as_int(value[1], f"Delay {name} hi", minimum=0)
        if lo > hi:
            raise InvalidArgumentError(f"Delay {name} (lo, hi) = {value!r} has lo > hi; pass (lo, hi) with lo <= hi.")
        return lo, hi
    d = as_int(value, f"Delay {name}", minimum=0, hint=" (or a pair (lo, hi) for a per-episode draw)")
    return d, d


class _Queue:
    """The last ``depth + 1`` values of one entry per row: ``[depth + 1, N, *shape]``, newest last (time-major).

    A read takes each row's value ``d`` pushes back through a flat index ``row + (depth - d) N``,
    which :class:`Delay` keeps per row and changes only where a delay is drawn.
    """

    def __init__(self, n: int, depth: int, shape: torch.Size, dtype: torch.dtype, device: torch.device) -> None:
        self.values = torch.zeros(depth + 1, n, *shape, dtype=dtype, device=device)
        self._flat = self.values.view((depth + 1) * n, *shape)
        self.depth, self.input_shape, self.dtype = depth, torch.Size((n, *shape)), dtype
        self.row_bytes = self.values[0, 0].numel() * self.values.element_size()  # one row's value, for the C kernel
        self.row_view = (1, n) + (1,) * len(shape)  # a [N] mask against the values
        self.rows = row_dtype(shape, dtype, n)  # each row as one element for fill's where (utils.row_views), or None

    def push(self, value: torch.Tensor) -> None:
        self.values.copy_(torch.cat([self.values[1:], value.unsqueeze(0)]))

    def read(self, index: torch.Tensor) -> torch.Tensor:
        return self._flat.index_select(0, index)

    def fill(self, rows: torch.Tensor, value: torch.Tensor) -> None:
        """Every slot of ``rows`` (bool ``[N]``) set to ``value`` (``[N, *shape]``)."""
        self.values.copy_(where_rows(rows.view(self.row_view), value.unsqueeze(0), self.values, 2, self.rows))

    def clear(self, rows: torch.Tensor) -> None:
        """Every slot of ``rows`` (bool ``[N]``) set to zero."""
        self.values.masked_fill_(rows.view(self.row_view), 0)


class Delay(KernelUser, Transform):
    """Per-row action and observation delays in steps (see the module docstring).

    Args:
        action_steps: ``d`` (every episode), ``(lo, hi)`` (drawn per episode) or None (no action delay).
        observation_steps: the same for the observations of ``keys``.
        keys: the observation key(s) delayed, default ``"observation"``.
        initial_action: what the first ``d`` steps of an episode apply: ``"zeros"`` or ``"first"``.
        hold_probability: per-step probability in ``[0, 1)`` that the actuator keeps its last action.

    Attributes (after the TransformedEnv is built): ``action_delay``, ``observation_delay``:
    the current episodes' delays, ``[N]`` int64 on the env's device.
    """

    def __init__(
        self,
        action_steps: int | tuple[int, int] | None = None,
        observation_steps: int | tuple[int, int] | None = None,
        *,
        keys: Key | Sequence[Key] = "observation",
        initial_action: str = "zeros",
        hold_probability: float = 0.0,
    ) -> None:
        super().__init__()
        self.action_steps = _steps(action_steps, "action_steps")
        self.observation_steps = _steps(observation_steps, "observation_steps")
        if initial_action not in ("zeros", "first"):
            raise InvalidArgumentError(f"Delay initial_action must be 'zeros' or 'first', got {initial_action!r}.")
        self.initial_action = initial_action
        self.hold_probability = as_number(hold_probability, "Delay hold_probability", minimum=0.0, allow_inf=False)
        if self.hold_probability >= 1.0:
            raise InvalidArgumentError(
                f"Delay hold_probability must be in [0, 1), got {hold_probability!r}: with 1 no action ever arrives."
            )
        self.keys: list[Key] = as_keys(keys, "Delay")
        if self.action_steps == (0, 0) and self.observation_steps == (0, 0) and self.hold_probability == 0.0:
            raise InvalidArgumentError(
                "Delay with no action delay, no observation delay and no hold probability does nothing; pass "
                "action_steps=..., observation_steps=... or hold_probability=..."
            )

    # ------------------------------------------------------------------ setup
    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        n, dev = specs.num_envs, specs.device
        act, act_dtype = specs.action_spec, specs.action_spec.dtype
        self._action: _Queue | None = None
        self._applied: torch.Tensor | None = None
        if self.action_steps != (0, 0) or self.hold_probability > 0.0:
            if act_dtype is None:
                raise SpecError(f"Delay needs a single action tensor; the env's action spec is {act!r}.")
            self._action = _Queue(n, self.action_steps[1], act.shape, act_dtype, dev)
            self._action_view = (n,) + (1,) * len(act.shape)
            if self.hold_probability > 0.0:
                self._applied = torch.zeros(n, *act.shape, dtype=act_dtype, device=dev)
        self._observations: list[_Queue] = []
        if self.observation_steps != (0, 0):
            leaves = dict(specs.observation_spec.items(include_nested=True, leaves_only=True))
            for key in self.keys:
                if key not in leaves:
                    raise SpecError(f"Delay key {key!r} is not an observation key; available: {list(leaves)}.")
                leaf = leaves[key]
                if leaf.dtype is None:
                    raise SpecError(f"Delay key {key!r} is not one tensor (its spec is {leaf!r}); delay its leaves.")
                self._observations.append(_Queue(n, self.observation_steps[1], leaf.shape, leaf.dtype, dev))
        # both delays of every row, [N, 2] (action, observation), and the flat read index of each
        # (row + (depth - delay) * N into its queue): updated together where a row's episode starts
        (a_lo, a_hi), (o_lo, o_hi) = self.action_steps, self.observation_steps
        self._delays = torch.tensor([[a_lo, o_lo]], dtype=torch.int64, device=dev).repeat(n, 1)
        self.action_delay, self.observation_delay = self._delays[:, 0], self._delays[:, 1]  # views
        self._lows = torch.tensor([a_lo, o_lo], dtype=torch.int64, device=dev)
        self._spans = torch.tensor([a_hi - a_lo + 1, o_hi - o_lo + 1], dtype=torch.int64, device=dev)
        self._shifts = torch.tensor([16, 0], dtype=torch.int64, device=dev)  # 16 bits of a draw per delay
        self._depths = torch.tensor([a_hi, o_hi], dtype=torch.int64, device=dev)
        self._rows = torch.arange(n, dtype=torch.int64, device=dev).unsqueeze(1)
        self._index = torch.add(self._rows, self._depths - self._delays, alpha=n)
        self._action_index, self._observation_index = self._index[:, 0], self._index[:, 1]
        self._draws_delays = a_hi > a_lo or o_hi > o_lo
        self._restart = torch.zeros(n, 1, dtype=torch.bool, device=dev)  # ended last step: restart at the root
        self._first = torch.zeros(n, dtype=torch.bool, device=dev)  # the episode's next step is its first
        self._episode_draws = torch.zeros(n, dtype=torch.int64, device=dev)  # LCG states (module docstring)
        self._hold_draws = torch.zeros(n, dtype=torch.int64, device=dev)
        self.reseed(specs.seed)
        self._threshold = int(self.hold_probability * 2**16)  # hold where a 16-bit draw is below it
        self._lib = kernels(dev)  # one C call per hook on a CPU env (gpu_envs.transforms.native_rows), or None
        self.row_state = tuple(self.live_state())
        return specs

    def reseed(self, seed: int | None) -> None:
        """Restart both streams of every row from ``seed`` (hashed with the row's index)."""
        starts = seeded_states(self.num_envs, 2, self.device, seed, _SALT)
        self._episode_draws.copy_(starts[:, 0])
        self._hold_draws.copy_(starts[:, 1])

    # ------------------------------------------------------------- data hooks
    def inv(self, td: TensorDictBase) -> TensorDictBase:
        queue = self._action
        if queue is None:
            return td
        action = read(td, "action")
        lib = self._lib if native_allowed() else None
        if lib is not None and fits(action, queue.input_shape, queue.dtype):
            applied = torch.empty_like(action)
            held = self._applied
            lib.delay_actions(
                self.num_envs,
                queue.depth,
                queue.row_bytes,
                queue.values.data_ptr(),
                action.data_ptr(),
                self._index.data_ptr(),  # the action lane, [N, 2]'s first column
                self._first.data_ptr(),
                self.initial_action == "first",
                None if held is None else held.data_ptr(),
                self._hold_draws.data_ptr(),
                self._threshold,
                applied.data_ptr(),
            )
            write(td, "action", applied)
            return td
        first = self._first
        if self.initial_action == "first":  # the episode's first action stands in for the ones before it
            queue.fill(first, action)
        queue.push(action)
        applied = queue.read(self._action_index)
        if self._applied is not None:  # the actuator keeps its last action, never at an episode's first step
            hold = (top16(next_state_(self._hold_draws)) < self._threshold) & ~first
            applied = torch.where(hold.view(self._action_view), self._applied, applied)
            self._applied.copy_(applied)
        first.zero_()
        write(td, "action", applied)
        return td

    def step(self, td: TensorDictBase) -> TensorDictBase:
        lib = self._lib if native_allowed() else None
        restart, done = self._restart, read(td, "done", nxt=True)
        flags = lib is not None and fits(done, restart.shape, torch.bool)  # a kernel call may copy them
        copied = False
        for key, queue in zip(self.keys, self._observations, strict=False):
            obs = read(td, key, nxt=True)
            if lib is not None and fits(obs, queue.input_shape, queue.dtype):
                lane = self._index.data_ptr() + self._index.element_size()  # the observation lane: [N, 2]'s column 1
                seen = torch.empty_like(obs)
                give = flags and not copied  # this call copies the end flags into restart
                lib.delay_observe(
                    self.num_envs, queue.depth, queue.row_bytes, queue.values.data_ptr(), obs.data_ptr(), lane,
                    seen.data_ptr(), restart.data_ptr() if give else None, done.data_ptr() if give else None,
                )  # fmt: skip
                copied = copied or give
            else:
                queue.push(obs)
                seen = queue.read(self._observation_index)
            write(td, key, seen, nxt=True)
        if not copied:
            restart.copy_(done)
        return td

    def root(self, td: TensorDictBase) -> TensorDictBase:
        # rows that ended (or were reset) start their new episode here: their queues restart and
        # their delays are drawn, once (the flag is cleared), so another root() gives the same values
        lib = self._lib if native_allowed() else None
        queues = self._observations
        if lib is not None:
            self._native_restart(lib, clear=not queues)
        else:
            self._restart_rows()
        restart = self._restart
        cleared = lib is not None and not queues
        for i, (key, queue) in enumerate(zip(self.keys, queues, strict=False)):
            obs = read(td, key)
            if lib is not None and fits(obs, queue.input_shape, queue.dtype):
                lane = self._index.data_ptr() + self._index.element_size()  # the observation lane: [N, 2]'s column 1
                seen = torch.empty_like(obs)
                last = i == len(queues) - 1  # the last key's call clears the flags
                lib.delay_fill_read(
                    self.num_envs, queue.depth, queue.row_bytes, queue.values.data_ptr(), obs.data_ptr(),
                    restart.data_ptr(), lane, seen.data_ptr(), last,
                )  # fmt: skip
                cleared = last
            else:
                queue.fill(restart.view(-1), obs)
                seen = queue.read(self._observation_index)
            write(td, key, seen)
        if not cleared:
            restart.zero_()
        return td

    def _restart_rows(self) -> None:
        """The restarting rows' delays drawn and action queues cleared, in torch ops."""
        rows = self._restart.view(-1)
        if self._draws_delays:
            draws = self._episode_draws
            draws.copy_(torch.where(rows, next_state_(draws.clone()), draws))
            drawn = ((draws.unsqueeze(1) >> self._shifts).bitwise_and_(0xFFFF) * self._spans >> 16).add_(self._lows)
            self._delays.copy_(torch.where(self._restart, drawn, self._delays))
            self._index.copy_(torch.add(self._rows, self._depths - self._delays, alpha=self.num_envs))
        if self._action is not None:
            self._action.clear(rows)  # no action of the ended episode is applied in the next one
            self._first.logical_or_(rows)

    def _native_restart(self, lib: Any, clear: bool) -> None:
        """:meth:`_restart_rows` in one C call (``clear``: and the restart flags zeroed)."""
        action = self._action
        lib.delay_restart(
            self.num_envs,
            self._restart.data_ptr(),
            self._draws_delays,
            self._episode_draws.data_ptr(),
            self._lows.data_ptr(),
            self._spans.data_ptr(),
            self._depths.data_ptr(),
            self._delays.data_ptr(),
            self._index.data_ptr(),
            None if action is None else action.values.data_ptr(),
            0 if action is None else action.depth,
            0 if action is None else action.row_bytes,
            self._first.data_ptr(),
            clear,
        )

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        self._restart.logical_or_(mask.view(self.num_envs, 1))
        return self.root(td)

    # ----------------------------------------------------------------- state
    def live_state(self) -> dict[str, torch.Tensor]:
        state = {
            "delays": self._delays,
            "index": self._index,
            "restart": self._restart,
            "first": self._first,
            "episode_draws": self._episode_draws,
            "hold_draws": self._hold_draws,
        }
        if self._action is not None:
            state["action_queue"] = self._action.values.transpose(0, 1)  # [N, depth + 1, ...] views
        if self._applied is not None:
            state["applied"] = self._applied
        for i, queue in enumerate(self._observations):
            state[f"observation_queue_{i}"] = queue.values.transpose(0, 1)
        return state

    def __repr__(self) -> str:
        extra = f", hold_probability={self.hold_probability}" if self.hold_probability else ""
        return (
            f"Delay(action_steps={self.action_steps}, observation_steps={self.observation_steps}, keys={self.keys!r}, "
            f"initial_action={self.initial_action!r}{extra})"
        )
