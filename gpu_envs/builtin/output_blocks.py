"""Fresh output tensors for a native step, carved a few steps at a time from one allocation per output.

Why: on a CPU a built-in native step is one C call, and the five or six ``torch.empty`` of
its outputs (~1 us each) are a third of a step at N = 8 (gymnasium's numpy Pendulum,
which writes into preallocated arrays, is level with it there). ``torch.empty((K, *shape))
.unbind(0)`` makes K outputs in two calls (~0.5 us an output at K = 32), and a step then
takes one ready set (a list ``pop``).

What a user sees: the same contract as ``torch.empty`` per step ("never written again":
each set is handed out once, and the env writes only into the set it takes), contiguous
tensors of the same shapes and dtypes, each a view of its block. K is chosen so that one
step's outputs times K stay within :data:`BLOCK_BYTES`: for the built-in envs 32 at N = 8,
6-8 at N = 64, and 1 above ~250 rows, where every step allocates as before (no views). A
transition kept alive keeps its block alive (at most :data:`BLOCK_BYTES` in all), and ``torch.save`` of one output writes its
block's storage; ``.clone()`` gives a tensor of its own.

Example::

    >>> import torch
    >>> from gpu_envs.builtin.output_blocks import OutputBlocks
    >>> blocks = OutputBlocks(lambda key: (torch.empty(8, 3), torch.empty(8, dtype=torch.bool), None))
    >>> first, second = blocks.take(True), blocks.take(True)
    >>> first[0].shape, first[1].dtype, first[2]
    (torch.Size([8, 3]), torch.bool, None)
    >>> first[0].data_ptr() != second[0].data_ptr() and first[0].is_contiguous()
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["BLOCK_BYTES", "MAX_STEPS", "OutputBlocks"]

BLOCK_BYTES = 16384
"""The most bytes K steps of one set of outputs take: K = BLOCK_BYTES // (one set's bytes), at least 1."""

MAX_STEPS = 32
"""K's cap: past ~32 views an ``unbind`` saves no more per output (~0.5 us against ~1 us an ``empty``)."""


class OutputBlocks:
    """``take(key)``: one set of fresh outputs, from a stock refilled K sets at a time (module docstring).

    ``make(key)`` allocates one set (tensors, or None for an output not produced); its
    first set, per key, tells the shapes and dtypes and is handed out as it is. ``key``
    tells apart the layouts a step may ask for (the built-in envs: flags as columns or flat).
    """

    def __init__(
        self, make: Callable[[Any], tuple], block_bytes: int = BLOCK_BYTES, max_steps: int = MAX_STEPS
    ) -> None:
        self._make = make
        self.block_bytes = block_bytes
        self.max_steps = max_steps
        self._stock: dict[Any, list[tuple]] = {}
        self._layout: dict[Any, tuple[int, list[tuple[torch.Size, torch.dtype, torch.device] | None]]] = {}

    def take(self, key: Any) -> tuple:
        """One set of outputs for ``key``'s layout, never handed out before."""
        stock = self._stock.get(key)
        if stock:
            return stock.pop()
        return self._refill(key)

    def steps_per_block(self, key: Any) -> int | None:
        """K for ``key``'s layout (1: every step allocates), or None before its first :meth:`take`."""
        layout = self._layout.get(key)
        return None if layout is None else layout[0]

    def _refill(self, key: Any) -> tuple:
        layout = self._layout.get(key)
        if layout is None:  # the first set: learn the layout from it, hand it out
            sample = self._make(key)
            size = sum(t.numel() * t.element_size() for t in sample if t is not None)
            k = max(1, min(self.max_steps, self.block_bytes // max(size, 1)))
            self._layout[key] = (k, [None if t is None else (t.shape, t.dtype, t.device) for t in sample])
            return sample
        k, kinds = layout
        if k == 1:
            return self._make(key)
        columns = [
            (None,) * k if kind is None else torch.empty((k, *kind[0]), dtype=kind[1], device=kind[2]).unbind(0)
            for kind in kinds
        ]
        stock = self._stock[key] = list(zip(*columns, strict=True))
        return stock.pop()
