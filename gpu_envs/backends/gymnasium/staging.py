"""numpy -> torch for a CPU backend: one copy per array, one transfer per step.

A CPU backend produces a handful of small numpy arrays per step (observations, final
observations, reward, done flags, info), in a fixed order of *fields*.
:meth:`Staging.publish` turns them into tensors on the target device with as little
work as the hardware allows:

* target CUDA (or another accelerator): every field lives in ONE packed host ``uint8``
  buffer, allocated once (pinned on CUDA). Each numpy value is written into its field
  with ``np.copyto`` (casting e.g. float64 rewards to float32 on the way), then ONE
  non-blocking host-to-device copy moves the whole buffer, and the fields are views of
  the device copy (fields are grouped by dtype, each group 8-byte aligned, so a field
  is a slice of one ``view(dtype)``). Before writing the buffer again, ``publish``
  waits on an event for the previous copy, which has long completed by then (the env
  stepped in between).
* target CPU: the destination IS the host, so a staging buffer would only add a second
  copy. Each field is copied once (``np.array``, casting to the field dtype) into a
  fresh array that ``torch.from_numpy`` shares: the tensors stay valid after the next
  step, as callers keep transitions.

Either way the caller may pass its own reused scratch arrays: ``publish`` never keeps
a reference to them. A ``None`` value skips its field (e.g. final observations on a
step where no episode ended) and gives ``None`` back.

Example::

    stage = Staging([((8, 4), torch.float32), ((8,), torch.bool)], "cpu")
    obs_t, done_t = stage.publish([obs_numpy, done_numpy])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gpu_envs.specs import numpy_dtype

_ALIGN = 8


class Staging:
    """Per-step transfer of a fixed list of fields ``[(shape, torch dtype), ...]`` to ``device``.

    ``packed=None`` picks the packed buffer for accelerators and fresh arrays for the
    CPU; ``packed=True`` forces the packed path (tests run it on the CPU).
    """

    def __init__(
        self,
        fields: Sequence[tuple[tuple[int, ...], torch.dtype]],
        device: torch.device | str,
        packed: bool | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.fields = [(tuple(shape), dtype) for shape, dtype in fields]
        self._np_dtypes = [numpy_dtype(dtype) for _, dtype in self.fields]
        self._packed = self.device.type != "cpu" if packed is None else bool(packed)
        if self._packed:
            self._build_packed()

    def _build_packed(self) -> None:
        order = sorted(range(len(self.fields)), key=lambda i: str(self.fields[i][1]))  # group by dtype
        self._slices: list[Any] = [None] * len(self.fields)
        offset, previous = 0, None
        for i in order:
            shape, dtype = self.fields[i]
            itemsize = torch.empty((), dtype=dtype).element_size()
            if dtype != previous:
                offset = -(-offset // _ALIGN) * _ALIGN
                previous = dtype
            size = int(np.prod(shape, dtype=np.int64))
            self._slices[i] = (dtype, offset // itemsize, offset // itemsize + size, shape)
            offset += size * itemsize
        total = max(-(-offset // _ALIGN) * _ALIGN, _ALIGN)
        self.host = torch.zeros(total, dtype=torch.uint8, pin_memory=self.device.type == "cuda")
        host_np = self.host.numpy()
        self._views = [
            host_np.view(np_dtype)[start:end].reshape(shape)  # total is a multiple of 8: every dtype fits
            for (_, start, end, shape), np_dtype in zip(self._slices, self._np_dtypes, strict=True)
        ]
        self._event = torch.cuda.Event() if self.device.type == "cuda" else None

    def publish(self, values: Sequence[Any]) -> list[torch.Tensor | None]:
        """Tensors on the device for ``values`` (one per field, ``None`` to skip a field)."""
        if not self._packed:
            return [
                None if value is None else torch.from_numpy(np.array(value, dtype=np_dtype))
                for value, np_dtype in zip(values, self._np_dtypes, strict=True)
            ]
        if self._event is not None:
            self._event.synchronize()  # the previous transfer has finished reading the buffer
        for value, view in zip(values, self._views, strict=True):
            if value is not None:
                np.copyto(view, value, casting="same_kind")
        # on the CPU (the forced packed path of the tests) a clone stands for the transfer's copy
        cpu = self.device.type == "cpu"
        packed = self.host.clone() if cpu else self.host.to(self.device, non_blocking=True)
        if self._event is not None:
            self._event.record()
        typed: dict[torch.dtype, torch.Tensor] = {}
        out: list[torch.Tensor | None] = []
        for value, (dtype, start, end, shape) in zip(values, self._slices, strict=True):
            if value is None:
                out.append(None)
                continue
            view = typed.get(dtype)
            if view is None:
                view = typed[dtype] = packed.view(dtype)
            out.append(view[start:end].view(shape))
        return out
