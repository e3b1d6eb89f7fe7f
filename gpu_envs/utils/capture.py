"""The graph-capture mode: a per-thread switch that tells envs "this is being recorded, not run".

An env that caches work between steps on the host (the built-in envs' pools of random
draws, :mod:`gpu_envs.builtin.draw_pool`) must not do so while a CUDA graph records its
step: a replay would repeat the recorded gather from a pool that no replay refills.
:func:`capturing` is entered around such a recording (``collect(..., cudagraph=True)``
does, :mod:`gpu_envs.rollout.cudagraph`); :func:`is_capturing` is what an env reads. It
lives here, below both, so that the collector knows no env's internals and the envs
know no collector.

Example::

    with capturing():
        graph_capture_of_the_step()      # DrawPool.uniform() draws from the counters here
    assert not is_capturing()
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["capturing", "is_capturing"]


class _Switch(threading.local):
    active = False


_SWITCH = _Switch()


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """Inside, :func:`is_capturing` is True in this thread (nests; restored on the way out)."""
    previous = _SWITCH.active
    _SWITCH.active = True
    try:
        yield
    finally:
        _SWITCH.active = previous


def is_capturing() -> bool:
    """True inside :func:`capturing` in this thread."""
    return _SWITCH.active
