"""Detect envs that rewrite their output tensors in place (Isaac Gym style), from the first calls.

Some GPU envs keep one observation buffer (and reward/done buffers) and return the SAME
tensors from every ``reset``/``step``, rewritten in place. A transition kept from step
``t`` (a root TensorDict, a reward view) would then change at step ``t + 1`` -- silent
corruption. Fresh tensors per call are what the torch vector env protocol asks for, but
the backend does not have to take it on trust:

* for the first :data:`DECIDING_CALLS` calls (the first reset and the first steps), the
  backend hands out COPIES of the env's outputs and keeps the env's own tensors alive
  (so the allocator cannot recycle their memory and fake a match);
* an output whose storage was already returned by an earlier call is a reused buffer.

Then ``copy_buffers`` decides (:class:`~gpu_envs.backends.torch_envs.TorchVectorBackend`):
``None`` (default) copies every output from then on, ``False`` refuses with a
:class:`~gpu_envs.contract.errors.BackendError` naming the fix, ``True`` copies from the start
and skips the detection. Once decided, the detector is dropped: no cost per step. The
built-in envs are not watched (their outputs are fresh by construction); a user env
stepped under ``torch.compile`` sees a graph break in the deciding calls only (storage
pointers are read there).

Example::

    watch = ReuseDetector("torch(MyEnv)", refuse=False)
    if watch.reused("step", [obs, reward, terminated, truncated]):
        ...  # copy from now on
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from gpu_envs.contract.errors import BackendError

__all__ = ["DECIDING_CALLS", "ReuseDetector"]

DECIDING_CALLS = 3  # the first reset and two steps: a ring of two buffers is caught too


def _storages(tensors: Iterable) -> set[int]:
    found = set()
    for value in tensors:
        if isinstance(value, torch.Tensor) and value.numel():
            found.add(value.untyped_storage().data_ptr())
    return found


class ReuseDetector:
    """Remembers the storages of the first calls' outputs and spots one returned again."""

    def __init__(self, env_name: str, *, refuse: bool) -> None:
        self.env_name = env_name
        self.refuse = refuse
        self.calls = 0
        self._held: list[torch.Tensor] = []  # the env's own outputs, kept alive while deciding
        self._seen: set[int] = set()

    @property
    def deciding(self) -> bool:
        """True during the first :data:`DECIDING_CALLS` calls."""
        return self.calls < DECIDING_CALLS

    def reused(self, call: str, tensors: list) -> bool:
        """True if one of ``tensors`` shares storage with an output of an earlier call."""
        self.calls += 1
        storages = _storages(tensors)
        found = bool(storages & self._seen)
        if found and self.refuse:
            raise BackendError(
                f"{self.env_name} returned from {call}() a tensor it already returned from an earlier call: it "
                "rewrites its output buffers in place, so transitions kept from earlier steps would change under you. "
                "Wrap it with copy_buffers=True (or leave copy_buffers=None, the default, to copy automatically "
                "when this is detected), or return new tensors from every call."
            )
        self._seen |= storages
        self._held.extend(t for t in tensors if isinstance(t, torch.Tensor))
        if found or not self.deciding:
            self._held.clear()
            self._seen.clear()
        return found
