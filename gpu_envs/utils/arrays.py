"""Foreign arrays in and out of torch: zero-copy through DLPack, one staged copy otherwise.

Backends call :func:`to_torch` on what a simulator returns and :func:`from_torch` on the
action they hand back. The rules:

* a ``torch.Tensor`` passes through untouched;
* anything with ``__dlpack__`` (JAX, CuPy, Warp, numpy arrays) becomes a tensor that
  *shares its memory* when it already lives on the target device -- no copy, and no
  host synchronisation (DLPack orders the producer's and consumer's CUDA streams);
* data on another device (a numpy array for a CUDA learner) is copied once: into a
  reused :class:`HostStaging` buffer (pinned when the target is CUDA), then one
  ``non_blocking`` transfer; without a staging buffer, a plain ``.to(device)``. CPU
  backends stage all of a step's arrays together: one packed buffer, one transfer.

Going back, :func:`from_torch` gives JAX / CuPy / Warp / numpy a view of the tensor's
memory (numpy only for CPU tensors: reading a CUDA tensor from the host is a sync).
JAX without ``jax_enable_x64`` has no 64-bit types: 64-bit tensors are first cast to
their 32-bit twin on the torch side (one device kernel, no sync).

A shared buffer is a promise: JAX treats arrays as immutable, so a tensor handed to JAX
must not be written in place while JAX may still read it (a backend's ``step`` has
finished reading the action when it returns), and a tensor made from a JAX output must
not be written in place either (make a ``.clone()`` first).

Example::

    import jax.numpy as jnp
    x = jnp.arange(4.0)
    t = to_torch(x)                      # same memory, no copy
    back = from_torch(t * 2, "jax")      # a jax.Array sharing t * 2's memory
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gpu_envs.contract.errors import DeviceMismatchError, InvalidArgumentError
from gpu_envs.utils.devices import same_device

__all__ = [
    "FRAMEWORKS",
    "HostStaging",
    "RowBlocks",
    "any_to_torch",
    "array_device",
    "framework_of",
    "from_torch",
    "is_zero_copy",
    "jax_argument",
    "jax_dtype_for",
    "jax_reader",
    "to_torch",
]

FRAMEWORKS = ("torch", "jax", "cupy", "warp", "numpy")
_from_numpy = torch.from_numpy

# DLPack device types (dlpack.h, DLDeviceType) -> torch device type.
_DLPACK_DEVICE_TYPES = {1: "cpu", 2: "cuda", 3: "cpu", 10: "cuda", 13: "cuda"}
_ALIGN = 8  # bytes: each dtype group of a packed staging buffer starts on this boundary
_NARROW = {
    torch.int64: torch.int32,
    torch.float64: torch.float32,
    torch.uint64: torch.uint32,
    torch.complex128: torch.complex64,
}


def framework_of(x: Any) -> str:
    """``"torch"``, ``"jax"``, ``"cupy"``, ``"warp"``, ``"numpy"`` or ``"dlpack"`` (any other producer).

    Decided from the type's module, so no optional framework is imported to ask.
    """
    if isinstance(x, torch.Tensor):
        return "torch"
    if isinstance(x, np.ndarray):
        return "numpy"
    root = type(x).__module__.split(".", 1)[0]
    if root in ("jax", "jaxlib"):
        return "jax"
    if root in ("cupy", "warp"):
        return root
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    raise InvalidArgumentError(
        f"{type(x).__module__}.{type(x).__name__} is not an array gpu_envs can read: return torch tensors, "
        "or arrays that implement __dlpack__ (JAX, CuPy, Warp, numpy)."
    )


def array_device(x: Any) -> torch.device:
    """The torch device an array's memory lives on (``__dlpack_device__`` for foreign arrays)."""
    if isinstance(x, torch.Tensor):
        return x.device
    if isinstance(x, np.ndarray):
        return torch.device("cpu")
    kind, index = x.__dlpack_device__()
    name = _DLPACK_DEVICE_TYPES.get(int(kind))
    if name is None:
        raise DeviceMismatchError(
            f"{type(x).__name__} lives on DLPack device type {int(kind)}, which torch cannot address; "
            "move it to the CPU or a CUDA/ROCm device first."
        )
    return torch.device("cpu") if name == "cpu" else torch.device(name, int(index))


def _view(x: Any) -> torch.Tensor:
    """A tensor sharing ``x``'s memory, on ``x``'s device."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.byteorder not in "=|":  # DLPack has no byte order: one copy to native order
            x = x.astype(x.dtype.newbyteorder("="))
        if x.flags.writeable:
            return torch.from_numpy(x)
        return torch.from_dlpack(x)  # read-only arrays (e.g. np.asarray(jax_array)) share memory too
    if hasattr(x, "__dlpack__"):
        if type(x).__module__.startswith(("jax", "jaxlib")) and int(x.__dlpack_device__()[0]) == 1:
            return _jax_cpu_view(x)
        return torch.from_dlpack(x)
    framework_of(x)  # raises the explanatory error
    raise AssertionError("unreachable")


def _jax_cpu_view(x: Any) -> torch.Tensor:
    """A CPU JAX array as a tensor sharing its buffer, through numpy.

    ``np.asarray`` of a CPU JAX array is a view of its buffer; exporting that by DLPack
    costs about a third of JAX's own ``__dlpack__`` per call (measured with jax 0.10).
    """
    return torch.from_dlpack(np.asarray(x))


def jax_reader(device: torch.device | str) -> Any:
    """The fastest zero-copy ``jax.Array -> torch.Tensor`` for arrays living on ``device``.

    CPU: through a numpy view (:func:`to_torch` does the same). CUDA: ``torch.from_dlpack``,
    which makes torch's current stream wait for JAX's (never ``np.asarray``: that would
    copy to the host and synchronise).
    """
    return _jax_cpu_view if torch.device(device).type == "cpu" else torch.from_dlpack


class RowBlocks(tuple):
    """One field's value given as consecutive blocks of rows, e.g. one block per remote worker.

    :meth:`HostStaging.publish` writes the blocks straight into their rows of the field
    (packed path) or concatenates them once (CPU path): assembling a batch from several
    sources costs no extra copy. The blocks' first dimensions must add up to the field's.

    Example::

        obs_t, = stage.publish([RowBlocks([obs_of_worker0, obs_of_worker1])])
    """

    __slots__ = ()


def _write_rows(view: np.ndarray, blocks: RowBlocks) -> None:
    start = 0
    for block in blocks:
        stop = start + len(block)
        np.copyto(view[start:stop], block, casting="same_kind")
        start = stop
    if start != len(view):
        raise InvalidArgumentError(f"row blocks of {start} rows in all fill a field of {len(view)} rows.")


def _fresh(value: Any, np_dtype: np.dtype, rows: int) -> np.ndarray:
    if isinstance(value, RowBlocks):
        out = np.concatenate(value, axis=0, dtype=np_dtype, casting="same_kind")
        if len(out) != rows:
            raise InvalidArgumentError(f"row blocks of {len(out)} rows in all fill a field of {rows} rows.")
        return out
    return np.array(value, dtype=np_dtype)


class HostStaging:
    """Host data that must cross to ``device`` every step: one copy per value, one transfer.

    A CPU backend (gymnasium, a numpy-speaking env) produces the same handful of host
    arrays every step (observations, final observations, reward, flags, info), in a
    fixed order of *fields* ``[(shape, torch dtype), ...]``. :meth:`publish` turns them
    into tensors on ``device`` with as little work as the hardware allows:

    * target CUDA (or another accelerator): every field lives in ONE packed host
      ``uint8`` buffer (:attr:`host`), allocated once, pinned on CUDA. Each value is
      written into its field with ``np.copyto`` (casting e.g. float64 rewards to
      float32 on the way), then ONE non-blocking copy moves the whole buffer, and the
      fields are views of the device copy (fields are grouped by dtype, each group
      8-byte aligned, so a field is a slice of one ``view(dtype)``). Before writing the
      buffer again, ``publish`` waits on an event for the previous copy, which has long
      completed by then (the env stepped in between).
    * target CPU: the destination IS the host, so a staging buffer would only add a
      second copy. Each value is copied once (``np.array``, casting to the field
      dtype) into a fresh array that ``torch.from_numpy`` shares.

    Either way every call returns fresh tensors: a transition kept from step k is never
    rewritten at step k + 1, and the caller may pass its own reused scratch arrays
    (nothing keeps a reference to them). A ``None`` value skips its field (e.g. final
    observations on a step where no episode ended) and gives ``None`` back; a
    :class:`RowBlocks` value assembles the field from blocks of rows (one copy still).
    :meth:`put` is the one-field form that :func:`to_torch` uses.

    Args:
        fields: ``[(shape, torch dtype), ...]``, the values :meth:`publish` takes.
        device: the target device.
        packed: ``None`` picks the packed buffer for accelerators and fresh arrays for
            the CPU; ``True`` forces the packed path (tests run it on the CPU).

    Attributes:
        fields: the fields, as given.
        np_dtypes: each field's numpy dtype (what a value is copied into on the CPU).
        packed: whether the values cross in one packed buffer.

    Example::

        stage = HostStaging([((8, 4), torch.float32), ((8,), torch.bool)], "cuda")
        obs_t, done_t = stage.publish([obs_numpy, done_numpy])   # one transfer
        obs_t = HostStaging([((8, 4), torch.float32)], "cuda").put(obs_numpy)
    """

    def __init__(
        self,
        fields: Sequence[tuple[Sequence[int], torch.dtype]],
        device: torch.device | str,
        packed: bool | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.fields = [(tuple(shape), dtype) for shape, dtype in fields]
        self.np_dtypes = [_numpy_dtype(dtype) for _, dtype in self.fields]
        self.packed = self.device.type != "cpu" if packed is None else bool(packed)
        self._rows = [shape[0] if shape else 0 for shape, _ in self.fields]
        self._copy_all = [False] * len(self.fields)
        self.host: torch.Tensor | None = None
        if self.packed:
            self._build_packed()

    def _build_packed(self) -> None:
        order = sorted(range(len(self.fields)), key=lambda i: str(self.fields[i][1]))  # group by dtype
        self._slices: list[Any] = [None] * len(self.fields)
        offset, previous = 0, None
        for i in order:
            shape, dtype = self.fields[i]
            itemsize = dtype.itemsize
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
            for (_, start, end, shape), np_dtype in zip(self._slices, self.np_dtypes, strict=True)
        ]
        self._event = torch.cuda.Event() if self.device.type == "cuda" else None

    def publish(self, values: Sequence[Any], owned: Sequence[bool] | None = None) -> list[torch.Tensor | None]:
        """Tensors on the device for ``values`` (host arrays, one per field; ``None`` skips a field).

        ``owned[i]`` True says value ``i`` is a fresh array of the field's dtype that the
        caller gives away: on the CPU it is shared (``from_numpy``) instead of copied.
        """
        if not self.packed:
            out: list[torch.Tensor | None] = []
            for value, np_dtype, give, rows in zip(
                values, self.np_dtypes, owned or self._copy_all, self._rows, strict=True
            ):
                if value is None:
                    out.append(None)
                elif give and value.__class__ is not RowBlocks:
                    out.append(_from_numpy(value))
                else:
                    out.append(_from_numpy(_fresh(value, np_dtype, rows)))
            return out
        if self._event is not None:
            self._event.synchronize()  # the previous transfer has finished reading the buffer
        for value, view in zip(values, self._views, strict=True):
            if isinstance(value, RowBlocks):
                _write_rows(view, value)
            elif value is not None:
                np.copyto(view, value, casting="same_kind")
        # on the CPU (the forced packed path of the tests) a clone stands for the transfer's copy
        host = self.host
        if host is None:
            raise InvalidArgumentError(
                "HostStaging.packed was set after construction; pass packed=True to HostStaging."
            )
        packed = host.clone() if self.device.type == "cpu" else host.to(self.device, non_blocking=True)
        if self._event is not None:
            self._event.record()
        typed: dict[torch.dtype, torch.Tensor] = {}
        out = []
        for value, (dtype, start, end, shape) in zip(values, self._slices, strict=True):
            if value is None:
                out.append(None)
                continue
            view = typed.get(dtype)
            if view is None:
                view = typed[dtype] = packed.view(dtype)
            out.append(view[start:end].view(shape))
        return out

    def put(self, x: Any) -> torch.Tensor:
        """``x`` (numpy or a CPU tensor) as a fresh tensor on the device, for a one-field staging."""
        if len(self.fields) != 1:
            raise InvalidArgumentError(
                f"put() moves one value, but this HostStaging has {len(self.fields)} fields; use publish([...])."
            )
        if not isinstance(x, np.ndarray):
            src = _view(x)
            if src.device.type != "cpu":
                raise DeviceMismatchError(f"HostStaging takes host data, got a tensor on {src.device}.")
            x = src.detach().numpy()
        return self.publish([x])[0]  # type: ignore[return-value]


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    try:
        return torch.empty((), dtype=dtype).numpy().dtype
    except TypeError as err:
        raise InvalidArgumentError(f"{dtype} has no numpy equivalent, so host data cannot be staged as it.") from err


def any_to_torch(x: Any, device: torch.device | str | None = None) -> torch.Tensor:
    """:func:`to_torch` that also takes what numpy reads: lists, scalars, numpy ints (a user's actions).

    Example::

        t = any_to_torch([0, 1, 1], "cpu")   # int64 [3]
    """
    if not isinstance(x, torch.Tensor) and not hasattr(x, "__dlpack__"):
        x = np.asarray(x)
    return to_torch(x, device)


def to_torch(
    x: Any,
    device: torch.device | str | None = None,
    *,
    staging: HostStaging | None = None,
) -> torch.Tensor:
    """``x`` as a torch tensor on ``device`` (``None``: wherever ``x`` lives).

    Same device: a view sharing ``x``'s memory (zero-copy). Other device: one copy,
    through ``staging`` when given (see :class:`HostStaging`). Torch tensors pass
    through when already on ``device``.

    Example::

        t = to_torch(np.zeros(3, np.float32))            # shares the numpy buffer
        t = to_torch(cupy_array, "cuda:0")               # shares the CuPy buffer
    """
    view = _view(x)
    if device is None:
        return view
    device = torch.device(device)
    if same_device(view.device, device):
        return view
    if staging is not None:
        return staging.put(view)
    return view.to(device, non_blocking=view.device.type == "cpu" and view.is_pinned())


def from_torch(tensor: torch.Tensor, framework: str) -> Any:
    """A ``framework`` array sharing ``tensor``'s memory (``"jax"``, ``"cupy"``, ``"warp"``, ``"numpy"``).

    ``"torch"`` returns the tensor itself. JAX without x64 gets 64-bit tensors narrowed
    to 32 bits first (a device-side cast). numpy needs a CPU tensor.

    Example::

        action_jax = from_torch(td["action"], "jax")
    """
    if framework == "torch":
        return tensor
    if framework == "jax":
        return _to_jax(tensor)
    if framework == "cupy":
        import cupy  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

        return cupy.from_dlpack(tensor)
    if framework == "warp":
        import warp  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

        return warp.from_dlpack(tensor)
    if framework == "numpy":
        if tensor.device.type != "cpu":
            raise DeviceMismatchError(
                f"from_torch(..., 'numpy') needs a CPU tensor, got one on {tensor.device}: reading it from the "
                "host would synchronise. Move it explicitly with tensor.cpu() where a sync is acceptable."
            )
        return tensor.detach().numpy()
    raise InvalidArgumentError(f"unknown framework {framework!r}; use one of {', '.join(FRAMEWORKS)}.")


def _to_jax(tensor: torch.Tensor) -> Any:
    import jax
    import jax.dlpack

    if not jax.config.jax_enable_x64 and tensor.dtype in _NARROW:  # pyright: ignore[reportAttributeAccessIssue]  # jax's Config stub omits its flags
        tensor = tensor.to(_NARROW[tensor.dtype])
    if tensor.requires_grad:
        tensor = tensor.detach()
    try:
        return jax.dlpack.from_dlpack(tensor)
    except jax.errors.JaxRuntimeError:
        # XLA takes compact layouts only (any dim order, no gaps or broadcasts): a strided view
        # such as actions[:, t] is copied once into a dense tensor on its own device.
        return jax.dlpack.from_dlpack(tensor.contiguous() if not tensor.is_contiguous() else tensor.clone())


def jax_argument(tensor: torch.Tensor) -> Any:
    """What to hand a jitted JAX function for ``tensor``, the cheapest way, without copying on the host.

    On the CPU: a numpy view of the tensor (64-bit narrowed without x64). A jitted call
    takes it through JAX's C++ argument path, which aliases aligned host buffers; in
    jax 0.10 that costs tens of microseconds less per call than ``jax.dlpack.from_dlpack``
    (which also re-wraps the result in Python). Elsewhere: :func:`from_torch` (DLPack).

    Example::

        carry, out = jitted_step(carry, jax_argument(td["action"]))
    """
    if tensor.device.type != "cpu":
        return _to_jax(tensor)
    import jax

    if not jax.config.jax_enable_x64 and tensor.dtype in _NARROW:  # pyright: ignore[reportAttributeAccessIssue]  # jax's Config stub omits its flags
        tensor = tensor.to(_NARROW[tensor.dtype])
    return tensor.detach().numpy()


def jax_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """The torch dtype a tensor of ``dtype`` has once handed to JAX (64-bit narrowed without x64)."""
    import jax

    return dtype if jax.config.jax_enable_x64 else _NARROW.get(dtype, dtype)  # pyright: ignore[reportAttributeAccessIssue]  # jax's Config stub omits its flags


def is_zero_copy(foreign: Any, tensor: torch.Tensor) -> bool:
    """True if ``foreign`` (JAX, CuPy, Warp or numpy array) and ``tensor`` share their first byte.

    A debugging helper (and what the tests use): it reads buffer pointers, never data.
    """
    if isinstance(foreign, torch.Tensor):
        return foreign.data_ptr() == tensor.data_ptr()
    if isinstance(foreign, np.ndarray):
        return foreign.__array_interface__["data"][0] == tensor.data_ptr()
    framework = framework_of(foreign)
    if framework == "jax":
        return foreign.unsafe_buffer_pointer() == tensor.data_ptr()
    if framework == "cupy":
        return foreign.data.ptr == tensor.data_ptr()
    if framework == "warp":
        return foreign.ptr == tensor.data_ptr()
    return _view(foreign).data_ptr() == tensor.data_ptr()
