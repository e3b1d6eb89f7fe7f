"""Two alternating sets of a native step's output tensors, for a caller that copies every output at once.

Why: on a CPU a built-in native step is one C call, and the ~6 ``torch.empty`` of its
outputs (~1 us each) are a third of a step at N = 64. A random-action ``collect``
copies each step's outputs into its buffer before the next step
(:meth:`gpu_envs.core.step_path.StepPath.reusing_outputs`), so while it runs the env may
write step t's outputs into the memory of step t - 2: two sets, taken in turn. Two, not
one: the observations of step t - 1 are still read in step t (they are what it acted on).
Off (the default), every step allocates, as the RawStep contract says ("never written
again"): a transition handed out in a TensorDict stays as it was.

While on, a caller may also name where ONE step's outputs go (:attr:`OutputRing.into`:
a collection's buffer slots for that step), so the copy into the buffer finds its source
already there (a copy of a tensor onto its own memory is skipped): the step writes each
output once, where it stays. Outputs it names no target for come from the ring's set.

Example::

    >>> import torch
    >>> from gpu_envs.builtin.output_ring import OutputRing
    >>> ring = OutputRing()
    >>> make = lambda key: (torch.empty(3),)
    >>> ring.take(True, make)[0] is ring.take(True, make)[0]   # off: fresh tensors each time
    False
    >>> ring.on = True
    >>> a, b, c = (ring.take(True, make)[0] for _ in range(3))
    >>> a is c and a is not b
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["OutputRing"]


class OutputRing:
    """``take(key, make)``: a step's outputs, fresh (off) or the set of two steps ago (on).

    ``make(key)`` allocates one set; ``key`` tells apart the layouts a step may ask for
    (the built-in envs: flags as columns or flat).
    """

    def __init__(self) -> None:
        self.on = False
        self._turn = 0
        self._sets: dict[tuple[int, Any], tuple] = {}
        # while on: targets for the next take's outputs (None: that output from the ring), for key True only
        self.into: tuple | None = None

    def take(self, key: Any, make: Callable[[Any], tuple]) -> tuple:
        if not self.on:
            return make(key)
        self._turn ^= 1
        outs = self._sets.get((self._turn, key))
        if outs is None:
            outs = self._sets[(self._turn, key)] = make(key)
        into = self.into
        if into is not None:
            self.into = None  # one step only
            if key is True:
                outs = tuple(
                    out if target is None or out is None else target for out, target in zip(outs, into, strict=True)
                )
        return outs
