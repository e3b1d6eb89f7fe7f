"""A dispatch mode that fails on every aten op that would synchronise a CUDA device.

On a CPU-only machine nothing actually synchronises, so the test cannot rely on
``torch.cuda.set_sync_debug_mode``; instead this mode watches the aten ops themselves:
``_local_scalar_dense`` (what ``.item()``, ``bool(t)``, ``int(t)`` call), ``nonzero``,
``masked_select``, ``unique``, boolean-mask indexing and copies between devices (except
non-blocking copies into pinned host memory, which queue on the stream and do not wait).
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

SYNCING_OPS = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.nonzero_static.default,
    aten.masked_select.default,
    aten.unique_dim.default,
    aten._unique.default,
    aten._unique2.default,
    aten.unique_consecutive.default,
    aten.is_nonzero.default,
    aten.equal.default,
    aten.repeat_interleave.Tensor,
}
INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
COPY_OPS = {aten._to_copy.default, aten.copy_.default}


class SyncError(AssertionError):
    """An op that synchronises host and device ran inside :class:`SyncGuard`."""


def _devices(args, kwargs) -> set:
    found = set()
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.add(value.device)
    return found


def _non_blocking_to_pinned(args, kwargs) -> bool:
    """``pinned_host.copy_(device_tensor, non_blocking=True)``: queued on the stream, the host goes on."""
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    target, source = args[0], args[1]
    return bool(non_blocking) and target.device.type == "cpu" and source.device.type == "cuda" and target.is_pinned()


class SyncGuard(TorchDispatchMode):
    """Raise :class:`SyncError` on any host-device synchronising aten op."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNCING_OPS:
            raise SyncError(f"host sync: {func}")
        if func in INDEX_OPS:
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ()):
                raise SyncError(f"boolean-mask indexing: {func}")
        if func in COPY_OPS:
            if func is aten.copy_.default and _non_blocking_to_pinned(args, kwargs):
                return func(*args, **kwargs)  # a non-blocking copy into pinned host memory does not wait
            target = kwargs.get("device")
            devices = _devices(args, kwargs)
            if target is not None:
                devices.add(torch.device(target))
            if len(devices) > 1:
                raise SyncError(f"cross-device copy: {func} {devices}")
        return func(*args, **kwargs)


@contextlib.contextmanager
def no_sync():
    """Forbid syncs: the dispatch guard, plus CUDA's own sync debug mode on CUDA."""
    cuda = torch.cuda.is_available()
    if cuda:
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
    try:
        with SyncGuard():
            yield
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(previous)
