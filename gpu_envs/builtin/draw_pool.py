"""Pooled draws: the built-in envs' reset candidates at eager speed, the same values exactly.

Same-step auto-reset needs a fresh candidate for every row at every step (the rows that
ended keep theirs); partial resets (``reset_mask``: torchrl's masked resets, gymnasium's
NEXT_STEP emulation in ``to_gymnasium``) need one for the masked rows. Drawn directly with :meth:`CounterRNG.uniform
<gpu_envs.builtin.counter_rng.CounterRNG.uniform>`, that is ~20 small integer ops per step:
in eager mode each costs microseconds of dispatch (most of a small batch's step), and at
large batches each is a pass over ``N x L`` int64 values.

A :class:`DrawPool` keeps, for each row, the values of its next ``P`` draw events: what
``uniform`` returns at counters ``c, c + 1, ..., c + P - 1``, ``c`` being the row's counter
when the pool was filled. One fill computes them for every row at once with the int32
version of the hash (:func:`~gpu_envs.builtin.counter_rng.mix32_int32_`: half the memory
traffic, no masking after the multiplies), and each step takes row ``i``'s value at slot
``counter_i - c_i``: one subtraction and one gather.

* **Exact.** The integer stream is the same hash of the same positions, and the floats
  come from the same ``addcmul`` of the same operands, so a pooled draw equals the direct
  one bit for bit (the tests compare them over random resets, sizes and lanes).
* **No host sync.** When to refill is decided on the host without reading any tensor:
  every :meth:`CounterRNG.advance` moves a row's counter by at most one, so for ``P``
  advances after a fill every row is still inside its window. Anything else that writes
  the key or counters (a reseed, ``load_live_state``, a user's in-place write, a compiled
  step) is noticed through the tensors' version counters, and a CUDA graph replay (which
  bumps none) through :meth:`CounterRNG.invalidate`; the pool then refills.
* **Eager only.** Under ``torch.compile``, during a CUDA stream capture, and inside
  :func:`gpu_envs.utils.capture.capturing` (which ``collect(..., cudagraph=True)`` enters
  around its capture),
  :meth:`DrawPool.uniform` returns ``rng.uniform(bounds)`` itself: plain integer ops a
  trace fuses and a graph replays, and no host-side bookkeeping to freeze.
* **Memory.** ``P`` shrinks as ``N`` grows so that a fill stays around ``2^17`` values on
  a CPU (cache-sized; ``2^20`` on accelerators): ``P = 64`` up to ``N = 512`` with four
  lanes, ``8`` at ``N = 4096``; a pool of one event (beyond ``2^14`` rows with four lanes)
  is the int32 hash of the current draw, with no gather.

Example::

    rng = CounterRNG(num_envs=8, lanes=4, device="cpu", seed=0)
    pool = DrawPool(rng, rng.bounds([-0.05] * 4, [0.05] * 4))
    fresh = pool.uniform()          # == rng.uniform(bounds), [8, 4]
    rng.advance(done)               # rows that used their draw
"""

from __future__ import annotations

import sys

import torch

from gpu_envs.builtin.counter_rng import MASK32, CounterRNG, UniformBounds, mix32_int32_
from gpu_envs.utils.capture import is_capturing
from gpu_envs.utils.torch_internals import version_counter

__all__ = ["DrawPool", "pool_events"]

MAX_EVENTS = 64
# values per fill: cache-sized on a CPU; on an accelerator a fill is cheap, launches are not
_FILL_VALUES = {"cpu": 1 << 17}
_DEFAULT_FILL_VALUES = 1 << 20
# a row of L float32 lanes gathered as ONE element of this dtype (no per-lane index)
_ROW_DTYPES = {4: torch.float32, 8: torch.float64, 16: torch.complex128}
_TOP_24_BITS = (1 << 24) - 1


def pool_events(num_envs: int, lanes: int, device: torch.device) -> int:
    """``P``: draw events per row in a pool, so that one fill is about the device's budget."""
    budget = _FILL_VALUES.get(device.type, _DEFAULT_FILL_VALUES)
    return max(1, min(MAX_EVENTS, budget // (num_envs * lanes)))


class DrawPool:
    """Each row's next ``events`` draws of ``rng.uniform(bounds)``, refilled as they are used.

    Args:
        rng: the generator whose draws are pooled (its key and counters are read, never
            written: the caller still calls ``rng.advance`` for the rows that used a draw).
        bounds: the fixed bounds of the pooled draws (e.g. an env's reset bounds).
        events: ``P``; ``None`` picks :func:`pool_events`.

    :meth:`uniform` returns a new ``[N, L]`` float32 tensor equal to ``rng.uniform(bounds)``.
    """

    def __init__(self, rng: CounterRNG, bounds: UniformBounds, events: int | None = None) -> None:
        n, lanes, device = rng.num_envs, rng.lanes, rng.device
        self.rng, self.bounds, self.device = rng, bounds, device
        self._cuda = device.type == "cuda"  # where a CUDA stream capture is checked for
        self.events = int(events) if events is not None else pool_events(n, lanes, device)
        if self.events < 1:
            raise ValueError(f"events must be >= 1, got {events}")
        # version counters for the bookkeeping; little-endian for the int32 halves below
        self.enabled = rng.tracked and sys.byteorder == "little"
        self._epoch = -1
        self._filled_at = 0
        self._key_version = -1
        if not self.enabled:
            return
        width = self.events * lanes
        i32, i64 = torch.int32, torch.int64
        self._values = torch.empty(n, width, dtype=torch.float32, device=device)  # the pool
        # the hash runs in the pool's own memory (one scratch buffer besides: less cache)
        self._x = self._values.view(i32) if self.events > 1 else torch.empty(n, width, dtype=i32, device=device)
        self._scratch = torch.empty(n, width, dtype=i32, device=device)
        self._offsets = torch.empty(n, width, dtype=i32, device=device)  # q * g mod 2^32, q < width
        self._start = torch.empty(n, 1, dtype=i64, device=device)  # k + c * L * g mod 2^32
        self._start_low = self._start.view(i32)[:, 0:1]  # its int32 bit pattern (low half)
        self._low = bounds.low.repeat(self.events)
        self._scale = bounds.scale.repeat(self.events)
        self._below_high = bounds.below_high.repeat(self.events) if bounds.needs_clamp else None
        self._counter_col = rng.counter.unsqueeze(1)
        self._key_start, self._key_step = rng.key[:, 0:1], rng.key[:, 1:2]
        self._base = torch.empty(n, 1, dtype=i64, device=device)  # counters at the fill
        # Row i's draw is at slot counter_i - base_i of its row of the pool. Where L float32
        # lanes make one element of a wider dtype, whole rows are gathered as single elements
        # ([N, 1] index); otherwise lane by lane with an [N, L] index (counter * L + lane - base * L).
        row_dtype = _ROW_DTYPES.get(4 * lanes) if device.type in ("cpu", "cuda") else None
        self._rows = self._values.view(row_dtype) if row_dtype is not None else None  # [N, P]
        self._lane_index = torch.empty(n, lanes, dtype=i64, device=device)  # lane - base * L
        self._lane = torch.arange(lanes, dtype=i64, device=device)

    def uniform(self) -> torch.Tensor:
        """``[N, L]`` float32: ``rng.uniform(bounds)`` at the current counters (a new tensor)."""
        rng = self.rng
        direct = torch.compiler.is_compiling() or is_capturing()
        if direct or not self.enabled or (self._cuda and torch.cuda.is_current_stream_capturing()):
            return rng.uniform(self.bounds)
        if self.events == 1:  # the int32 hash of this draw only, straight into a new tensor
            return self._fill(out=None)
        if (
            rng.advances - self._filled_at >= self.events
            or not rng.unchanged_since(self._epoch)
            or version_counter(rng.key) != self._key_version
        ):
            self._fill(out=self._values)
        if self._rows is None:
            index = torch.add(self._lane_index, self._counter_col, alpha=rng.lanes)
            return torch.gather(self._values, 1, index)
        return torch.gather(self._rows, 1, torch.sub(self._counter_col, self._base)).view(torch.float32)

    def _fill(self, out: torch.Tensor | None) -> torch.Tensor:
        """Values of events ``c .. c + P - 1`` of every row (``c``: its counter now), into ``out``."""
        rng = self.rng
        # The pool is trusted only once the fill has completed: an exception or Ctrl-C in
        # the middle leaves it marked stale (refilled at the next draw), never half-written.
        epoch, filled_at, key_version = rng.current_epoch(), rng.advances, version_counter(rng.key)
        self._epoch = -1
        if self._key_version != key_version:  # a new key: new per-row lane offsets
            self._key_version = -1
            q = torch.arange(self._x.shape[1], dtype=torch.int64, device=self.device)
            offsets = (q * self._key_step).bitwise_and_(MASK32)  # < 2^(31 + 8): exact
            self._offsets.copy_(offsets.view(torch.int32)[:, 0::2])
        self._base.copy_(self._counter_col)
        if self._rows is None:
            torch.add(self._lane, self._base, alpha=-rng.lanes, out=self._lane_index)
        # position c * L + q of the row's stream: x = k + (c * L + q) * g mod 2^32, the
        # per-row part in int64 (a counter past 2^61 wraps there, keeping the low 32 bits)
        torch.addcmul(self._key_start, self._counter_col, self._key_step, value=rng.lanes, out=self._start)
        self._start.bitwise_and_(MASK32)
        x, scratch = self._x, self._scratch
        torch.add(self._offsets, self._start_low, out=x)
        mix32_int32_(x, scratch)
        # the top 24 bits as float32 (exact), mapped by the same addcmul as CounterRNG.uniform
        torch.bitwise_right_shift(x, 8, out=scratch).bitwise_and_(_TOP_24_BITS)
        values = out if out is not None else torch.empty(x.shape, dtype=torch.float32, device=self.device)
        values.copy_(scratch)  # x is dead: values may be its memory
        torch.addcmul(self._low, values, self._scale, out=values)
        if self._below_high is not None:
            torch.minimum(values, self._below_high, out=values)
        self._epoch, self._filled_at, self._key_version = epoch, filled_at, key_version
        return values

    def __repr__(self) -> str:
        return f"DrawPool(num_envs={self.rng.num_envs}, lanes={self.rng.lanes}, events={self.events})"
