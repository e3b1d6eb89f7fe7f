"""A counter-based random generator for the built-in envs, in plain torch integer ops.

Why not a ``torch.Generator``: ``torch.compile`` cannot trace an op that takes one (every
compiled step was cut into ~20 pieces around the reset draws), a CUDA graph must register
it, and its stream is shared by all rows, so row ``i``'s draws depend on how many rows the
env has and on what the others did. Here every draw is a pure function of

    (seed, global env index, per-row counter, lane)

computed with integer tensor ops that trace, fuse and replay like any other kernel:

* each row has a key ``(k, g)``, derived from the seed and the row's GLOBAL index
  (``index_offset + row``) by a strong hash, so a shard of rows ``[o, o + N)`` of a ``2N``
  run (built with ``index_offset=o``) draws exactly what those rows draw in the ``2N`` run;
* each row has a counter (int64, held in a tensor): the number of draw events (resets) it
  has had since it was keyed. A draw reads the counter; :meth:`CounterRNG.advance`
  increments it only on the rows that used their draw, so a row's stream never depends on
  what other rows do;
* value ``j`` of a row's draw event ``c`` (an event draws ``L`` values) is position
  ``p = c * L + j`` of that row's SplitMix-style stream: ``mix(k + p * g mod 2^32)``, a
  Weyl sequence (odd step ``g``, so positions repeat only after ``2^32``) through ``mix``,
  the 3-round xorshift-multiply hash ``[16 236f7153 12 33cd8663 15 3e06b66b 16]`` from
  C. Wellons' hash prospector (avalanche bias 0.0213, the limit for 32 bits: as good as a
  random permutation of 32-bit integers).

Arithmetic is exact: values are kept in ``[0, 2^32)`` inside int64 tensors and every
multiplier (``g`` and the hash's) is below ``2^31``, so every product stays below ``2^63``:
the results are the same on every device and under ``torch.compile``, without relying on
signed-overflow wrapping.

Distribution: the top 24 bits of a 32-bit output give ``u = m / 2^24`` with ``m`` uniform in
``{0, ..., 2^24 - 1}`` (24 random bits per float, the float32 mantissa), mapped to
``low + (high - low) * u`` in float32 (clamped below ``high`` where rounding could reach
it): every value lies in ``[low, high)``, as gymnasium's ``uniform``. That mapping is one
``addcmul`` (a fused multiply-add in torch's eager CPU kernels); code compiled by
``torch.compile`` may round it differently in the last bit (the integer stream, and so
which value each row draws, is the same). A row's stream repeats after ``2^32 / L`` draw
events. Meant for initial states and noise in simulation,
not for cryptography.

The same hash is also given on int32 bit patterns (:func:`mix32_int32_`): half the memory
traffic of int64 and no masking after each multiply, for the eager pool of draws in
:mod:`gpu_envs.builtin.draw_pool`. It relies on int32 multiplication wrapping modulo ``2^32``,
which torch's kernels do on every device (checked against the reference in the tests).

Example::

    rng = CounterRNG(num_envs=4, lanes=2, device="cpu", seed=0)
    x = rng.uniform(rng.bounds([-1.0, 0.0], [1.0, 5.0]))   # [4, 2], nothing advanced yet
    rng.advance()                                           # every row used its draw
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import torch

from gpu_envs.utils.torch_internals import version_counter

__all__ = ["CounterRNG", "UniformBounds", "mix32", "mix32_int32_"]

MASK32 = 0xFFFFFFFF
# (shift, multiplier) rounds, then a last shift; every multiplier < 2^31 keeps x * m < 2^63
_ROUNDS = ((16, 0x236F7153), (12, 0x33CD8663), (15, 0x3E06B66B))
_LAST_SHIFT = 16
_SEED_MASK = 2**64 - 1
_KEY_SALTS = (0x243F6A88, 0x85A308D3)  # digits of pi: one per key word


def mix32(x: torch.Tensor) -> torch.Tensor:
    """The 32-bit hash ``[16 236f7153 12 33cd8663 15 3e06b66b 16]`` of every element of ``x``.

    ``x`` is int64 holding values in ``[0, 2^32)``; the result is what the C version gives
    on ``uint32_t`` (a bijection of ``[0, 2^32)``), with every intermediate exact in int64.
    """
    return _mix32_(x.clone())


def _mix32_(x: torch.Tensor) -> torch.Tensor:
    """:func:`mix32` in place on a scratch tensor of the caller's (fewer allocations)."""
    for shift, multiplier in _ROUNDS:
        x.bitwise_xor_(x >> shift)
        x.mul_(multiplier).bitwise_and_(MASK32)
    return x.bitwise_xor_(x >> _LAST_SHIFT)


def mix32_int32_(x: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """:func:`mix32` in place on int32 bit patterns (``x`` and ``scratch``: int32, one shape).

    Multiplications wrap modulo ``2^32`` as the hash wants; int32 right shifts are
    arithmetic, so each one is masked down to the logical shift of the ``uint32`` hash.
    """
    for shift, multiplier in _ROUNDS:
        torch.bitwise_right_shift(x, shift, out=scratch)
        x.bitwise_xor_(scratch.bitwise_and_((1 << (32 - shift)) - 1)).mul_(multiplier)
    torch.bitwise_right_shift(x, _LAST_SHIFT, out=scratch)
    return x.bitwise_xor_(scratch.bitwise_and_((1 << (32 - _LAST_SHIFT)) - 1))


class UniformBounds:
    """Per-lane ``[low, high)`` bounds of a draw, prepared once as float32 tensors."""

    def __init__(self, low: Sequence[float], high: Sequence[float], device: torch.device) -> None:
        low_t = torch.tensor(list(low), dtype=torch.float32, device=device)
        high_t = torch.tensor(list(high), dtype=torch.float32, device=device)
        if low_t.shape != high_t.shape or low_t.dim() != 1:
            raise ValueError(f"low and high must be two sequences of one length, got {low} and {high}")
        if bool((low_t > high_t).any()):
            raise ValueError(f"low ({list(low)}) must be <= high ({list(high)})")
        self.lanes = low_t.numel()
        self.low = low_t
        # u = m * 2^-24: scaling (high - low) by a power of two is exact
        self.scale = (high_t - low_t) * 2.0**-24
        # the largest float32 below high (low itself where low == high)
        self.below_high = torch.maximum(torch.nextafter(high_t, torch.full_like(high_t, -torch.inf)), low_t)
        # The largest value, low + scale * (2^24 - 1), can round up to high only when it is
        # within an ulp of it (narrow ranges far from 0); only then does a draw need the clamp.
        top = torch.addcmul(low_t, torch.full_like(low_t, 2**24 - 1), self.scale).cpu()
        self.needs_clamp = bool((torch.nextafter(top, torch.full_like(top, torch.inf)) >= high_t.cpu()).any())


class CounterRNG:
    """Per-row keys and counters for ``num_envs`` rows, and the draws they define.

    Args:
        num_envs: rows ``N``.
        lanes: values per draw event ``L`` (e.g. 4 initial-state coordinates).
        device: where the key and counter tensors live.
        seed: any int (reduced mod ``2^64``); ``None`` draws one from the OS.
        index_offset: global index of row 0 (a shard's first row in a larger run).

    Attributes (updated in place, never re-bound):
        key: ``[N, 2]`` int64, each row's stream start ``k`` in ``[0, 2^32)`` and odd step
            ``g`` in ``[1, 2^31)``.
        counter: ``[N]`` int64, draw events per row since the last :meth:`reseed`.

    For caches of draws (:class:`~gpu_envs.builtin.draw_pool.DrawPool`), eager calls keep
    host-side count: ``advances`` (calls of :meth:`advance`) and ``epoch``, which changes
    whenever the counters changed any other way (a write into them, noticed by their
    version counter at the next :meth:`current_epoch` or :meth:`advance`, or an explicit
    :meth:`invalidate`); a cache compares the key's version itself. No tensor value is
    read for it: nothing synchronises. (Only where ``tracked``: inference tensors, made
    under ``torch.inference_mode``, have no version counter.)
    """

    def __init__(
        self, num_envs: int, lanes: int, device: torch.device, seed: int | None, index_offset: int = 0
    ) -> None:
        if int(index_offset) < 0:
            raise ValueError(f"index_offset must be >= 0, got {index_offset}")
        self.num_envs = int(num_envs)
        self.lanes = int(lanes)
        self.device = torch.device(device)
        self.index_offset = int(index_offset)
        self.key = torch.zeros(self.num_envs, 2, dtype=torch.int64, device=self.device)
        self.counter = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._counter_col = self.counter.unsqueeze(1)  # [N, 1] masks advance through it
        # persistent views of the key columns (re-keying writes through them)
        self._start, self._step = self.key[:, 0:1], self.key[:, 1:2]
        self._lane = torch.arange(self.lanes, dtype=torch.int64, device=self.device)
        # version counters exist on ordinary tensors only (not on inference tensors)
        self.tracked = not self.counter.is_inference()
        self.epoch = 0
        self.advances = 0
        self._counter_version = -1  # the counter's version after our last write into it
        self.reseed(seed)

    def reseed(self, seed: int | None) -> None:
        """Derive every row's key from ``(seed, global index)`` and zero the counters (in place)."""
        if seed is None:
            seed = secrets.randbits(64)
        seed = int(seed) & _SEED_MASK
        s0, s1 = seed & MASK32, seed >> 32
        index = torch.arange(self.num_envs, dtype=torch.int64, device=self.device) + self.index_offset
        i0, i1 = index & MASK32, index >> 32
        words = []
        for salt in _KEY_SALTS:  # four chained rounds of the hash over (index, seed, salt)
            k = mix32(i0 ^ salt)
            k = mix32(k ^ s0)
            k = mix32(k ^ i1)
            words.append(mix32(k ^ s1))
        self._start.copy_(words[0].unsqueeze(1))
        self._step.copy_((words[1] >> 1 | 1).unsqueeze(1))  # odd, < 2^31
        self.counter.zero_()

    def bounds(self, low: Sequence[float], high: Sequence[float]) -> UniformBounds:
        """Prepared bounds for :meth:`uniform` (build them once for the hot path)."""
        bounds = UniformBounds(low, high, self.device)
        if bounds.lanes != self.lanes:
            raise ValueError(f"this generator draws {self.lanes} values per row, got {bounds.lanes} bounds")
        return bounds

    def bits(self) -> torch.Tensor:
        """``[N, L]`` int64: the 32-bit outputs of every row's current draw event."""
        position = torch.add(self._lane, self.counter.unsqueeze(1), alpha=self.lanes)  # a new [N, L] scratch
        position.bitwise_and_(MASK32)  # stream positions wrap at 2^32: keeps the product below 2^63
        x = torch.addcmul(self._start, position, self._step).bitwise_and_(MASK32)
        return _mix32_(x)

    def uniform(self, bounds: UniformBounds) -> torch.Tensor:
        """``[N, L]`` float32 in ``[low, high)`` per lane, from the current counters (not advanced)."""
        u = (self.bits() >> 8).to(torch.float32)
        x = torch.addcmul(bounds.low, u, bounds.scale)
        return torch.minimum(x, bounds.below_high) if bounds.needs_clamp else x

    def advance(self, mask: torch.Tensor | None = None) -> None:
        """Count one draw event on every row, or on the rows where ``mask`` (bool ``[N]`` or ``[N, 1]``) is True."""
        counter = self.counter
        if torch.compiler.is_compiling():  # traced: the op only, no host-side count
            counter = counter if mask is None or mask.dim() == 1 else counter.unsqueeze(1)
            counter.add_(1 if mask is None else mask)
            return
        if mask is not None and mask.dim() == 2:  # a done flag in the TensorDict layout
            counter = self._counter_col
        self.advances += 1  # counted first: interrupted below, pools refill early, never late
        if self.tracked:
            if version_counter(counter) != self._counter_version:  # written by someone else since our last write
                self.epoch += 1
            counter.add_(1 if mask is None else mask)
            self._counter_version = version_counter(counter)
        else:
            counter.add_(1 if mask is None else mask)

    def count_advance(self) -> None:
        """Host-side count of an :meth:`advance` whose increments a native kernel already wrote.

        The native CPU step (:mod:`gpu_envs.builtin.native`) adds the done flags to the
        counters itself, through their data pointer (no version bump); this keeps the
        bookkeeping the draw pool relies on exactly as :meth:`advance` would.
        """
        self.advances += 1
        if self.tracked and version_counter(self.counter) != self._counter_version:
            self.epoch += 1  # written by someone else since our last write
            self._counter_version = version_counter(self.counter)

    def unchanged_since(self, epoch: int) -> bool:
        """True if the counters changed only by :meth:`advance` since ``epoch`` was read (tracked only)."""
        return epoch == self.epoch and version_counter(self.counter) == self._counter_version

    def current_epoch(self) -> int:
        """The epoch, moved on first if the counters were written since our last write (tracked only)."""
        version = version_counter(self.counter)
        if version != self._counter_version:
            self.epoch += 1
            self._counter_version = version
        return self.epoch

    def invalidate(self) -> None:
        """Start a new epoch: the state may have changed without a version bump (a CUDA graph replay)."""
        self.epoch += 1

    def __repr__(self) -> str:
        return f"CounterRNG(num_envs={self.num_envs}, lanes={self.lanes}, index_offset={self.index_offset})"
