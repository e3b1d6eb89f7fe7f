"""Small device-aware specs: what a tensor (or a TensorDict of tensors) may hold.

A spec knows its per-env ``shape``, ``dtype`` and ``device`` and can

* build values directly on its device: ``zero(batch)`` and ``rand(batch, generator)``
  (pure torch, no numpy, so sampling never leaves the GPU);
* check values: ``contains(x)`` (may synchronise; meant for validation, not the hot path);
* convert to and from gymnasium spaces: ``to_gym()`` / :func:`spec_from_gym`.

It is a deliberately tiny cousin of torchrl's ``TensorSpec``.

Example::

    >>> spec = Composite(obs=Box(-1.0, 1.0, (3,)), action=Discrete(4))
    >>> td = spec.rand((8,))               # TensorDict, batch_size=[8]
    >>> td["obs"].shape, td["action"].shape
    (torch.Size([8, 3]), torch.Size([8]))
    >>> spec.contains(td)
    True
    >>> spec_from_gym(spec.to_gym()) == spec
    True

Conventions: a scalar ``Box`` has shape ``()`` (gymnasium would use ``(1,)``), and
``zero()`` returns the value closest to zero that the spec contains (so ``Discrete(3,
start=1).zero()`` is ``1``), which makes it a safe placeholder for resets.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.errors import SpecError, UnsupportedSpaceError

__all__ = [
    "Binary",
    "Box",
    "Composite",
    "Discrete",
    "MultiDiscrete",
    "Spec",
    "numpy_dtype",
    "spec_from_gym",
    "spec_to_gym",
    "torch_dtype",
]

DeviceLike = torch.device | str | int
BatchLike = Sequence[int] | int

# ---------------------------------------------------------------------------
# dtype and device helpers
# ---------------------------------------------------------------------------

_TORCH_TO_NUMPY: dict[torch.dtype, np.dtype] = {
    torch.bool: np.dtype(np.bool_),
    torch.uint8: np.dtype(np.uint8),
    torch.uint16: np.dtype(np.uint16),
    torch.uint32: np.dtype(np.uint32),
    torch.uint64: np.dtype(np.uint64),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
}
_NUMPY_TO_TORCH: dict[np.dtype, torch.dtype] = {v: k for k, v in _TORCH_TO_NUMPY.items()}

# dtypes whose arithmetic/comparisons torch supports on every device
_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def torch_dtype(np_dtype: Any) -> torch.dtype:
    """Torch dtype matching a numpy dtype (``np.float32``, ``"uint8"``, ``np.dtype(bool)``...).

    A ``torch.dtype`` is returned unchanged. Example: ``torch_dtype(np.uint8) is torch.uint8``.
    """
    if isinstance(np_dtype, torch.dtype):
        return np_dtype
    try:
        key = np.dtype(np_dtype)
    except TypeError as err:
        raise SpecError(f"{np_dtype!r} is not a numpy dtype; pass e.g. np.float32 or 'int64'.") from err
    if key not in _NUMPY_TO_TORCH:
        raise SpecError(
            f"numpy dtype {key} has no torch equivalent here; use one of {sorted(str(d) for d in _NUMPY_TO_TORCH)}."
        )
    return _NUMPY_TO_TORCH[key]


def numpy_dtype(torch_dtype: Any) -> np.dtype:
    """Numpy dtype matching a torch dtype (``torch.bool`` -> ``np.bool_`` ...).

    Numpy-like dtypes are normalised with ``np.dtype``. ``torch.bfloat16`` has no numpy
    twin and raises :class:`SpecError`. Example: ``numpy_dtype(torch.int8) == np.int8``.
    """
    if not isinstance(torch_dtype, torch.dtype):
        try:
            return np.dtype(torch_dtype)
        except TypeError as err:
            raise SpecError(f"{torch_dtype!r} is not a dtype; pass e.g. torch.float32.") from err
    if torch_dtype not in _TORCH_TO_NUMPY:
        raise SpecError(
            f"torch dtype {torch_dtype} has no numpy equivalent; cast the spec to a supported "
            f"dtype (e.g. torch.float32) before converting it to gymnasium."
        )
    return _TORCH_TO_NUMPY[torch_dtype]


def _as_dtype(dtype: Any, allowed: tuple[torch.dtype, ...], what: str) -> torch.dtype:
    try:
        dt = torch_dtype(dtype)
    except SpecError as err:
        raise SpecError(f"{what}: {err}") from None
    if dt not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise SpecError(f"{what} does not support dtype {dt}; use one of: {names}.")
    return dt


def _as_device(device: DeviceLike) -> torch.device:
    """Normalise a device; a bare ``"cuda"`` becomes ``cuda:<current>`` so equality is stable."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _as_batch(batch: BatchLike) -> tuple[int, ...]:
    dims = (batch,) if isinstance(batch, (int, np.integer)) else tuple(batch)
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise SpecError(f"batch must be an int or a sequence of non-negative ints, got {batch!r}.")
    return tuple(int(d) for d in dims)


def _check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    if generator is not None and generator.device.type != device.type:
        raise SpecError(
            f"generator lives on {generator.device} but the spec on {device}; "
            f"create it with torch.Generator(device={str(device)!r})."
        )


def _has_shape(x: Any, shape: torch.Size) -> bool:
    """True if ``x`` is a tensor whose trailing dims equal ``shape``."""
    if not isinstance(x, torch.Tensor) or x.dim() < len(shape):
        return False
    return x.shape[x.dim() - len(shape) :] == shape


def _short(t: torch.Tensor) -> str:
    """Compact text for a bound tensor: one number if uniform, else the values or their range."""
    if t.numel() == 0:
        return "[]"
    lo, hi = t.min().item(), t.max().item()
    if lo == hi:
        return str(lo)
    if t.numel() <= 6:
        return str(t.flatten().tolist())
    return f"[{lo}..{hi}]"


def _int_tensor(value: Any, name: str) -> torch.Tensor:
    """``value`` as an int64 CPU tensor, refusing non-integral numbers."""
    t = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
    if t.dtype.is_floating_point:
        if not torch.equal(t, t.round()):
            raise SpecError(f"{name} must hold whole numbers, got {value!r}.")
    elif t.dtype not in _INT_DTYPES:
        raise SpecError(f"{name} must be integers, got dtype {t.dtype}.")
    return t.detach().cpu().to(torch.int64)


# ---------------------------------------------------------------------------
# Base class
# ---------------------------------------------------------------------------


class Spec(ABC):
    """Abstract spec: per-env ``shape``, ``dtype`` and ``device`` of one value.

    Subclasses build values (``zero``/``rand``), check them (``contains``), move
    (``to``) and convert to gymnasium (``to_gym``).
    """

    shape: torch.Size
    dtype: torch.dtype | None
    device: torch.device | None

    @abstractmethod
    def zero(self, batch: BatchLike = ()) -> Any:
        """A value of shape ``(*batch, *shape)`` on ``device``: zeros, clamped into the spec's range."""

    @abstractmethod
    def rand(self, batch: BatchLike = (), generator: torch.Generator | None = None) -> Any:
        """A random value of shape ``(*batch, *shape)`` drawn on ``device``.

        ``generator`` (a ``torch.Generator`` on the spec's device) makes draws
        reproducible; ``None`` uses torch's global RNG.
        """

    @abstractmethod
    def contains(self, x: Any) -> bool:
        """True if ``x`` has trailing shape ``shape`` (any batch dims), ``dtype`` and in-range values."""

    @abstractmethod
    def to(self, device: DeviceLike) -> Spec:
        """A copy of this spec on ``device``."""

    @abstractmethod
    def to_gym(self) -> gymnasium.spaces.Space:
        """The equivalent gymnasium space (per env, no batch dims)."""

    @abstractmethod
    def __eq__(self, other: object) -> bool: ...

    __hash__ = None  # type: ignore[assignment]  # specs compare by value and are mutable-ish


# ---------------------------------------------------------------------------
# Box
# ---------------------------------------------------------------------------


class Box(Spec):
    """Values in ``[low, high]`` elementwise; bounds may be infinite and the dtype integer.

    ``low``/``high`` are scalars, arrays or tensors broadcast to ``shape`` (inferred from
    them when ``shape`` is None, so scalars give shape ``()``). ``rand`` follows gymnasium:
    uniform on bounded dims, ``low + Exp(1)`` / ``high - Exp(1)`` on half-bounded ones,
    standard normal on unbounded ones; integer boxes give integers in ``[low, high]``.
    For signed integer dtypes ``-inf``/``inf`` become the dtype's min/max (still sampled
    as unbounded); unsigned dtypes clip infinite bounds to their range.

    Attributes: ``low``/``high`` (tensors of ``dtype`` on ``device``, shape ``shape``) and
    ``bounded_below``/``bounded_above`` (bool tensors, as in gymnasium).

    Example::

        >>> Box(-1.0, 1.0, (2,)).rand((4,)).shape
        torch.Size([4, 2])
        >>> Box(0, 255, (84, 84, 3), torch.uint8).zero().max()
        tensor(0, dtype=torch.uint8)
    """

    def __init__(
        self,
        low: Any,
        high: Any,
        shape: Sequence[int] | int | None = None,
        dtype: Any = torch.float32,
        device: DeviceLike = "cpu",
    ) -> None:
        self.dtype = _as_dtype(dtype, _FLOAT_DTYPES + _INT_DTYPES, "Box")
        self.device = _as_device(device)
        lo, hi = self._bound_tensor(low, "low"), self._bound_tensor(high, "high")
        if shape is None:
            try:
                self.shape = torch.broadcast_shapes(lo.shape, hi.shape)
            except RuntimeError:
                raise SpecError(
                    f"Box low shape {tuple(lo.shape)} and high shape {tuple(hi.shape)} do not "
                    "broadcast together; pass bounds of the same shape or scalars."
                ) from None
        else:
            self.shape = torch.Size((shape,) if isinstance(shape, int) else shape)
        for name, t in (("low", lo), ("high", hi)):
            try:
                fits = torch.broadcast_shapes(t.shape, self.shape) == self.shape
            except RuntimeError:
                fits = False
            if not fits:
                raise SpecError(
                    f"Box {name} has shape {tuple(t.shape)}, which does not broadcast to shape "
                    f"{tuple(self.shape)}; pass {name} as a scalar or with shape {tuple(self.shape)}."
                )
        lo, hi = lo.expand(self.shape), hi.expand(self.shape)
        if lo.isnan().any() or hi.isnan().any():
            raise SpecError("Box bounds must not be NaN; use -inf/inf for unbounded dims.")
        if (lo > hi).any():
            bad = (lo > hi).nonzero()[0].tolist()
            raise SpecError(
                f"Box low > high at index {tuple(bad)} (low={lo[tuple(bad)].item()}, "
                f"high={hi[tuple(bad)].item()}); swap the bounds or fix them so low <= high."
            )
        bounded_below, bounded_above = ~torch.isneginf(lo), ~torch.isposinf(hi)
        self.low = self._cast_bound(lo, "low")
        self.high = self._cast_bound(hi, "high")
        if self.dtype == torch.uint8:  # unsigned: infinite bounds were clipped to the dtype range
            bounded_below = bounded_above = torch.ones(self.shape, dtype=torch.bool)
        self._set_bounded(bounded_below, bounded_above)

    # -- construction helpers -------------------------------------------------
    def _bound_tensor(self, value: Any, name: str) -> torch.Tensor:
        """CPU tensor of the bound: int64 for integer input (exact), float64 otherwise."""
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu()
        else:
            try:
                t = torch.as_tensor(np.asarray(value))
            except (TypeError, ValueError, OverflowError, RuntimeError) as err:
                raise SpecError(f"Box {name} must be a number, array or tensor, got {value!r}.") from err
        if t.dtype == torch.bool or t.dtype in _INT_DTYPES:
            return t.to(torch.int64)
        if t.dtype.is_floating_point:
            return t.to(torch.float64)
        raise SpecError(f"Box {name} must be real numbers, got dtype {t.dtype}.")

    def _cast_bound(self, t: torch.Tensor, name: str) -> torch.Tensor:
        """Cast a validated bound to ``self.dtype`` on ``self.device``, checking the dtype's range."""
        if self.dtype.is_floating_point:
            fmax = torch.finfo(self.dtype).max
            finite = t[torch.isfinite(t)] if t.dtype.is_floating_point else t
            if finite.numel() and finite.abs().max().item() > fmax:
                raise SpecError(
                    f"Box {name} has values beyond the {self.dtype} range (+-{fmax}); use a wider "
                    "dtype or -inf/inf for unbounded dims."
                )
            return t.to(self.device, self.dtype)
        info = torch.iinfo(self.dtype)
        if t.dtype.is_floating_point:
            finite = torch.isfinite(t)
            values = t[finite]
            if not torch.equal(values, values.round()):
                raise SpecError(f"Box {name} must be whole numbers for dtype {self.dtype}, got {t.tolist()}.")
            # float64 rounds int64's max up to 2**63, hence the strict check
            if values.numel() and (values.min() < info.min or values.max() > info.max or values.max() >= 2.0**63):
                raise self._range_error(name, info)
            ints = torch.where(finite, t, 0).to(torch.int64)
            ints[torch.isposinf(t)] = info.max  # infinite bounds -> dtype range
            ints[torch.isneginf(t)] = info.min
            t = ints
        elif t.numel() and (t.min().item() < info.min or t.max().item() > info.max):
            raise self._range_error(name, info)
        return t.to(self.device, self.dtype)

    def _range_error(self, name: str, info: torch.iinfo) -> SpecError:
        return SpecError(
            f"Box {name} has values outside the {self.dtype} range [{info.min}, {info.max}]; "
            "use a wider dtype or bounds inside the range."
        )

    def _set_bounded(self, bounded_below: torch.Tensor, bounded_above: torch.Tensor) -> None:
        """Record which dims are bounded and precompute what ``rand``/``zero`` need."""
        self.bounded_below = bounded_below.to(self.device, torch.bool).expand(self.shape).clone()
        self.bounded_above = bounded_above.to(self.device, torch.bool).expand(self.shape).clone()
        self._all_bounded = bool(self.bounded_below.all() and self.bounded_above.all())
        is_float = self.dtype.is_floating_point
        self._work = torch.float64 if not is_float or self.dtype == torch.float64 else torch.float32
        self._lo = self.low.to(self._work)
        # integers sample floor(U[low, high + 1)) like gymnasium
        self._hi = self.high.to(self._work) + (0 if is_float else 1)
        self._span = self._hi - self._lo  # inf on unbounded dims (masked out in rand)
        both = self.bounded_below & self.bounded_above
        # low + u * span is one kernel; fall back to a convex mix if the span overflows
        self._span_ok = bool(torch.isfinite(self._span[both]).all())
        if is_float:
            fmax = torch.finfo(self.dtype).max
            self._clamp = (self._lo.clamp(min=-fmax), self.high.to(self._work).clamp(max=fmax))
        if not is_float:
            self._low_i64, self._high_i64 = self.low.to(torch.int64), self.high.to(torch.int64)
        zero = torch.zeros((), dtype=self.dtype, device=self.device)
        self._zero = torch.maximum(torch.minimum(zero, self.high), self.low)
        self._zero_is_zero = bool((self._zero == 0).all())

    # -- Spec API ---------------------------------------------------------------
    def zero(self, batch: BatchLike = ()) -> torch.Tensor:
        """Zeros of shape ``(*batch, *shape)``, clamped into ``[low, high]``."""
        size = (*_as_batch(batch), *self.shape)
        if self._zero_is_zero:
            return torch.zeros(size, dtype=self.dtype, device=self.device)
        return self._zero.expand(size).clone(memory_format=torch.contiguous_format)

    def rand(self, batch: BatchLike = (), generator: torch.Generator | None = None) -> torch.Tensor:
        """Sample ``(*batch, *shape)`` values (uniform / exponential / normal, see class doc)."""
        _check_generator(generator, self.device)
        size = (*_as_batch(batch), *self.shape)
        kw = {"generator": generator, "device": self.device, "dtype": self._work}
        u = torch.rand(size, **kw)
        # low + u * span in one kernel, or a convex mix when high - low overflows the dtype
        sample = torch.addcmul(self._lo, u, self._span) if self._span_ok else self._lo * (1 - u) + self._hi * u
        if not self._all_bounded:
            below, above = self.bounded_below, self.bounded_above
            e = torch.empty(size, device=self.device, dtype=self._work).exponential_(generator=generator)
            n = torch.randn(size, **kw)
            sample = torch.where(
                below & above,
                sample,
                torch.where(below, self._lo + e, torch.where(above, self._hi - e, n)),
            )
        if self.dtype.is_floating_point:
            return torch.clamp(sample, *self._clamp).to(self.dtype)
        info = torch.iinfo(self.dtype)
        safe_max = float(info.max) if self.dtype != torch.int64 else 2.0**63 - 1024
        sample = sample.floor_().clamp_(float(info.min), safe_max).to(torch.int64)
        return torch.clamp(sample, self._low_i64, self._high_i64).to(self.dtype)

    def contains(self, x: Any) -> bool:
        """True for a tensor with trailing shape ``shape``, dtype ``dtype`` and ``low <= x <= high``."""
        if not _has_shape(x, self.shape) or x.dtype != self.dtype:
            return False
        low, high = self.low.to(x.device), self.high.to(x.device)
        return bool(((x >= low) & (x <= high)).all())

    def to(self, device: DeviceLike) -> Box:
        """A copy on ``device``."""
        box = Box.__new__(Box)
        box.shape, box.dtype, box.device = self.shape, self.dtype, _as_device(device)
        box.low, box.high = self.low.to(box.device), self.high.to(box.device)
        box._set_bounded(self.bounded_below, self.bounded_above)
        return box

    def to_gym(self) -> gymnasium.spaces.Box:
        """A ``gymnasium.spaces.Box`` with the same bounds, shape and dtype."""
        np_dtype = numpy_dtype(self.dtype)  # fails early (SpecError) for bfloat16
        low: Any = self.low.cpu().numpy()
        high: Any = self.high.cpu().numpy()
        # integer boxes: keep "unbounded" visible to gymnasium when a whole side is unbounded
        if not self.dtype.is_floating_point:
            if low.size and not self.bounded_below.any():
                low = -math.inf
            if high.size and not self.bounded_above.any():
                high = math.inf
        return gymnasium.spaces.Box(low, high, shape=tuple(self.shape), dtype=np_dtype)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is Box
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.device == other.device
            and torch.equal(self.low, other.low)
            and torch.equal(self.high, other.high)
        )

    def __repr__(self) -> str:
        dt = str(self.dtype).removeprefix("torch.")
        return (
            f"Box(low={_short(self.low)}, high={_short(self.high)}, shape={tuple(self.shape)}, "
            f"dtype={dt}, device={self.device})"
        )


# ---------------------------------------------------------------------------
# Discrete / MultiDiscrete / Binary
# ---------------------------------------------------------------------------


def _check_int_range(dtype: torch.dtype, lo: int, hi: int, what: str) -> None:
    info = torch.iinfo(dtype)
    if lo < info.min or hi > info.max:
        raise SpecError(
            f"{what} values [{lo}, {hi}] do not fit in {dtype} [{info.min}, {info.max}]; use a wider dtype."
        )


class Discrete(Spec):
    """One categorical index in ``{start, ..., start + n - 1}``; shape ``()``.

    Example::

        >>> Discrete(3, start=1).rand((5,))          # e.g. tensor([2, 1, 3, 3, 1])
        >>> Discrete(3).to_gym()
        Discrete(3)
    """

    def __init__(self, n: int, dtype: Any = torch.int64, device: DeviceLike = "cpu", start: int = 0) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise SpecError(f"Discrete n must be an int >= 1 (the number of choices), got {n!r}.")
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)):
            raise SpecError(f"Discrete start must be an int, got {start!r}.")
        self.n, self.start = int(n), int(start)
        self.dtype = _as_dtype(dtype, _INT_DTYPES, "Discrete")
        _check_int_range(self.dtype, self.start, self.start + self.n - 1, "Discrete")
        self.device = _as_device(device)
        self.shape = torch.Size(())

    def zero(self, batch: BatchLike = ()) -> torch.Tensor:
        """``0`` clamped into ``[start, start + n - 1]``, shape ``batch``."""
        value = min(max(0, self.start), self.start + self.n - 1)
        return torch.full(_as_batch(batch), value, dtype=self.dtype, device=self.device)

    def rand(self, batch: BatchLike = (), generator: torch.Generator | None = None) -> torch.Tensor:
        """Uniform indices in ``[start, start + n)``, shape ``batch``."""
        _check_generator(generator, self.device)
        return torch.randint(
            self.start, self.start + self.n, _as_batch(batch),
            generator=generator, device=self.device, dtype=self.dtype,
        )  # fmt: skip

    def contains(self, x: Any) -> bool:
        """True for a tensor of dtype ``dtype`` (any shape) with values in range."""
        if not isinstance(x, torch.Tensor) or x.dtype != self.dtype:
            return False
        return bool(((x >= self.start) & (x <= self.start + self.n - 1)).all())

    def to(self, device: DeviceLike) -> Discrete:
        """A copy on ``device``."""
        return Discrete(self.n, self.dtype, device, start=self.start)

    def to_gym(self) -> gymnasium.spaces.Discrete:
        """``gymnasium.spaces.Discrete(n, start=start, dtype=...)``."""
        return gymnasium.spaces.Discrete(self.n, start=self.start, dtype=numpy_dtype(self.dtype))

    def __eq__(self, other: object) -> bool:
        return type(other) is Discrete and (self.n, self.start, self.dtype, self.device) == (
            other.n,
            other.start,
            other.dtype,
            other.device,
        )

    def __repr__(self) -> str:
        start = f", start={self.start}" if self.start else ""
        return f"Discrete(n={self.n}{start}, dtype={str(self.dtype).removeprefix('torch.')}, device={self.device})"


class MultiDiscrete(Spec):
    """Several categorical indices; element ``i`` lies in ``[start[i], start[i] + nvec[i])``.

    ``shape == nvec.shape``; ``start`` (scalar or array, default 0) mirrors gymnasium's.

    Example::

        >>> MultiDiscrete([3, 2]).rand((4,)).shape
        torch.Size([4, 2])
    """

    def __init__(self, nvec: Any, dtype: Any = torch.int64, device: DeviceLike = "cpu", start: Any = 0) -> None:
        self.dtype = _as_dtype(dtype, _INT_DTYPES, "MultiDiscrete")
        self.device = _as_device(device)
        nv = _int_tensor(nvec, "MultiDiscrete nvec")
        if nv.numel() and nv.min().item() < 1:
            raise SpecError(f"MultiDiscrete nvec entries must all be >= 1 (choices per dim), got {nv.tolist()}.")
        st = _int_tensor(start, "MultiDiscrete start")
        try:
            st = st.expand(nv.shape).clone()
        except RuntimeError:
            raise SpecError(
                f"MultiDiscrete start has shape {tuple(st.shape)}, which does not match nvec shape "
                f"{tuple(nv.shape)}; pass a scalar start or one entry per nvec entry."
            ) from None
        if nv.numel():
            _check_int_range(self.dtype, st.min().item(), (st + nv - 1).max().item(), "MultiDiscrete")
        self.shape = nv.shape
        self.nvec, self.start = nv.to(self.device), st.to(self.device)
        self._nvec_f = self.nvec.to(torch.float64)
        self._high = self.start + self.nvec - 1

    def zero(self, batch: BatchLike = ()) -> torch.Tensor:
        """``0`` clamped into each element's range, shape ``(*batch, *shape)``."""
        zero = torch.minimum(torch.clamp(self.start, min=0), self._high).to(self.dtype)
        return zero.expand(*_as_batch(batch), *self.shape).clone(memory_format=torch.contiguous_format)

    def rand(self, batch: BatchLike = (), generator: torch.Generator | None = None) -> torch.Tensor:
        """Uniform indices per element, shape ``(*batch, *shape)``."""
        _check_generator(generator, self.device)
        size = (*_as_batch(batch), *self.shape)
        u = torch.rand(size, generator=generator, device=self.device, dtype=torch.float64)
        idx = torch.minimum((u * self._nvec_f).floor_().to(torch.int64), self.nvec - 1)
        return (idx + self.start).to(self.dtype)

    def contains(self, x: Any) -> bool:
        """True for a tensor with trailing shape ``shape``, dtype ``dtype`` and in-range values."""
        if not _has_shape(x, self.shape) or x.dtype != self.dtype:
            return False
        start, high = self.start.to(x.device), self._high.to(x.device)
        return bool(((x >= start) & (x <= high)).all())

    def to(self, device: DeviceLike) -> MultiDiscrete:
        """A copy on ``device``."""
        return MultiDiscrete(self.nvec, self.dtype, device, start=self.start)

    def to_gym(self) -> gymnasium.spaces.MultiDiscrete:
        """``gymnasium.spaces.MultiDiscrete(nvec, dtype=..., start=start)``."""
        np_dt = numpy_dtype(self.dtype)
        return gymnasium.spaces.MultiDiscrete(
            self.nvec.cpu().numpy().astype(np_dt), dtype=np_dt, start=self.start.cpu().numpy().astype(np_dt)
        )

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is MultiDiscrete
            and (self.shape, self.dtype, self.device) == (other.shape, other.dtype, other.device)
            and torch.equal(self.nvec, other.nvec)
            and torch.equal(self.start, other.start)
        )

    def __repr__(self) -> str:
        start = f", start={_short(self.start)}" if bool(self.start.any()) else ""
        return (
            f"MultiDiscrete(nvec={_short(self.nvec)}{start}, shape={tuple(self.shape)}, "
            f"dtype={str(self.dtype).removeprefix('torch.')}, device={self.device})"
        )


class Binary(Spec):
    """``n`` independent 0/1 flags; shape ``(n,)`` (or ``n`` itself if it is a shape).

    ``bool`` by default; gymnasium's ``MultiBinary`` maps to ``dtype=torch.int8``.
    ``to_gym`` gives ``MultiBinary`` for integer dtypes (gymnasium stores int8, so only
    int8 round-trips exactly) and a ``bool`` ``gymnasium.spaces.Box(0, 1)`` for bool,
    which :func:`spec_from_gym` maps back to ``Binary``.

    Example::

        >>> Binary(3).zero()
        tensor([False, False, False])
    """

    def __init__(self, n: int | Sequence[int], dtype: Any = torch.bool, device: DeviceLike = "cpu") -> None:
        dims = (n,) if isinstance(n, (int, np.integer)) and not isinstance(n, bool) else n
        try:
            ok = all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in dims)
        except TypeError:
            ok = False
        if not ok:
            raise SpecError(f"Binary n must be an int >= 1 (or a shape of such ints), got {n!r}.")
        self.n: int | tuple[int, ...] = int(n) if isinstance(n, (int, np.integer)) else tuple(int(d) for d in dims)
        self.shape = torch.Size(int(d) for d in dims)
        self.dtype = _as_dtype(dtype, (torch.bool, *_INT_DTYPES), "Binary")
        self.device = _as_device(device)

    def zero(self, batch: BatchLike = ()) -> torch.Tensor:
        """All-zero (``False``) flags, shape ``(*batch, *shape)``."""
        return torch.zeros((*_as_batch(batch), *self.shape), dtype=self.dtype, device=self.device)

    def rand(self, batch: BatchLike = (), generator: torch.Generator | None = None) -> torch.Tensor:
        """Fair coin flips, shape ``(*batch, *shape)``."""
        _check_generator(generator, self.device)
        size = (*_as_batch(batch), *self.shape)
        dtype = torch.uint8 if self.dtype == torch.bool else self.dtype
        flips = torch.randint(0, 2, size, generator=generator, device=self.device, dtype=dtype)
        return flips.view(torch.bool) if self.dtype == torch.bool else flips  # same bytes, no copy

    def contains(self, x: Any) -> bool:
        """True for a tensor with trailing shape ``shape``, dtype ``dtype`` and values in {0, 1}."""
        if not _has_shape(x, self.shape) or x.dtype != self.dtype:
            return False
        return self.dtype == torch.bool or bool(((x == 0) | (x == 1)).all())

    def to(self, device: DeviceLike) -> Binary:
        """A copy on ``device``."""
        return Binary(self.n, self.dtype, device)

    def to_gym(self) -> gymnasium.spaces.Space:
        """``MultiBinary(n)`` for integer dtypes, ``Box(0, 1, shape, bool)`` for bool."""
        if self.dtype == torch.bool:
            return gymnasium.spaces.Box(0, 1, shape=tuple(self.shape), dtype=np.bool_)
        return gymnasium.spaces.MultiBinary(self.n if isinstance(self.n, int) else list(self.n))

    def __eq__(self, other: object) -> bool:
        return type(other) is Binary and (self.shape, self.dtype, self.device) == (
            other.shape,
            other.dtype,
            other.device,
        )

    def __repr__(self) -> str:
        n = self.shape[0] if len(self.shape) == 1 else tuple(self.shape)
        return f"Binary(n={n}, dtype={str(self.dtype).removeprefix('torch.')}, device={self.device})"


# ---------------------------------------------------------------------------
# Composite
# ---------------------------------------------------------------------------

Key = str | tuple[str, ...]


def _as_spec(value: Any, device: torch.device | None, key: Any) -> Spec:
    if isinstance(value, Mapping) and not isinstance(value, Composite):
        value = Composite(value, device=device)
    if not isinstance(value, Spec):
        raise SpecError(f"Composite entry {key!r} must be a Spec (or a mapping of specs), got {type(value).__name__}.")
    if device is not None and value.device != device:
        value = value.to(device)
    return value


def _split_key(key: Any) -> tuple[str, ...]:
    parts = (key,) if isinstance(key, str) else key
    if not isinstance(parts, tuple) or not parts or not all(isinstance(p, str) for p in parts):
        raise SpecError(f"Composite keys are str or non-empty tuples of str, got {key!r}.")
    return parts


class Composite(Spec):
    """A (nested) mapping of named specs; values are ``TensorDict``s.

    ``zero``/``rand`` return a ``TensorDict`` with ``batch_size=batch`` on ``device``
    (``None`` when children live on different devices). Keys may be nested with tuples,
    as in tensordict. ``tuple_like=True`` marks a spec built from a gymnasium ``Tuple``
    (keys ``"0"``, ``"1"``, ...) so that ``to_gym`` rebuilds a ``Tuple``.

    Example::

        >>> spec = Composite(obs={"pos": Box(-1.0, 1.0, (2,))}, action=Discrete(2))
        >>> spec["obs", "pos"].shape
        torch.Size([2])
        >>> spec.keys(include_nested=True, leaves_only=True)
        [('obs', 'pos'), 'action']
    """

    shape = torch.Size(())
    dtype = None

    def __init__(
        self,
        specs: Mapping[str, Spec] | None = None,
        device: DeviceLike | None = None,
        *,
        tuple_like: bool = False,
        **kw_specs: Spec,
    ) -> None:
        self._device = None if device is None else _as_device(device)
        self.tuple_like = bool(tuple_like)
        self._specs: dict[str, Spec] = {}
        if specs is None:
            specs = {}
        if not isinstance(specs, Mapping):
            raise SpecError(f"Composite specs must be a mapping of key -> Spec, got {type(specs).__name__}.")
        dup = specs.keys() & kw_specs.keys()
        if dup:
            raise SpecError(f"Composite got keys {sorted(dup)} both in `specs` and as keywords; pass each once.")
        for key, value in {**specs, **kw_specs}.items():
            if not isinstance(key, str):
                raise SpecError(f"Composite keys must be str, got {key!r}; use nested Composites for depth.")
            self._specs[key] = _as_spec(value, self._device, key)

    @property
    def device(self) -> torch.device | None:  # type: ignore[override]
        """The given device, else the children's common device (None if they differ or there are none)."""
        if self._device is not None:
            return self._device
        devices = {spec.device for spec in self._specs.values()}
        return devices.pop() if len(devices) == 1 else None

    # -- mapping API -------------------------------------------------------------
    def __getitem__(self, key: Key) -> Spec:
        spec: Spec = self
        for part in _split_key(key):
            if not isinstance(spec, Composite) or part not in spec._specs:
                raise KeyError(f"{key!r} not in Composite (at {part!r}); available keys: {self.keys(True)}")
            spec = spec._specs[part]
        return spec

    def __setitem__(self, key: Key, value: Spec | Mapping[str, Spec]) -> None:
        *parents, last = _split_key(key)
        node = self
        for part in parents:
            child = node._specs.get(part)
            if child is None:
                child = node._specs[part] = Composite(device=node._device)
            elif not isinstance(child, Composite):
                raise SpecError(f"cannot set {key!r}: {part!r} is a leaf {child!r}, not a Composite.")
            node = child
        node._specs[last] = _as_spec(value, node._device, key)

    def __delitem__(self, key: Key) -> None:
        *parents, last = _split_key(key)
        parent = self[tuple(parents)] if parents else self
        if not isinstance(parent, Composite) or last not in parent._specs:
            raise KeyError(key)
        del parent._specs[last]

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except (KeyError, SpecError):
            return False
        return True

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[Key]:
        """Keys in insertion order; nested ones (tuples) follow their parent with ``include_nested``."""
        return [key for key, _ in self.items(include_nested, leaves_only)]

    def items(self, include_nested: bool = False, leaves_only: bool = False) -> list[tuple[Key, Spec]]:
        """``(key, spec)`` pairs, same order and options as :meth:`keys`."""
        out: list[tuple[Key, Spec]] = []
        for key, spec in self._specs.items():
            nested = isinstance(spec, Composite)
            if not (leaves_only and nested):
                out.append((key, spec))
            if include_nested and nested:
                out.extend(((key, *_split_key(k)), s) for k, s in spec.items(True, leaves_only))
        return out

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> list[Spec]:
        """Specs, same order and options as :meth:`keys`."""
        return [spec for _, spec in self.items(include_nested, leaves_only)]

    # -- Spec API ----------------------------------------------------------------------
    def zero(self, batch: BatchLike = ()) -> TensorDict:
        """A TensorDict of every child's ``zero(batch)``, ``batch_size=batch``."""
        dims = _as_batch(batch)
        data = {key: spec.zero(dims) for key, spec in self._specs.items()}
        return TensorDict(data, batch_size=dims, device=self.device)

    def rand(self, batch: BatchLike = (), generator: torch.Generator | None = None) -> TensorDict:
        """A TensorDict of every child's ``rand(batch, generator)``, ``batch_size=batch``."""
        dims = _as_batch(batch)
        data = {key: spec.rand(dims, generator) for key, spec in self._specs.items()}
        return TensorDict(data, batch_size=dims, device=self.device)

    def contains(self, x: Any) -> bool:
        """True if ``x`` (TensorDict or mapping) has every key and each value is contained.

        Extra keys in ``x`` are allowed.
        """
        if not isinstance(x, (TensorDictBase, Mapping)):
            return False
        # TensorDict refuses `key in td`; `.keys()` works for both TensorDicts and mappings
        return all(key in x.keys() and spec.contains(x[key]) for key, spec in self._specs.items())  # noqa: SIM118

    def to(self, device: DeviceLike) -> Composite:
        """A deep copy with every child on ``device``."""
        dev = _as_device(device)
        return Composite({k: s.to(dev) for k, s in self._specs.items()}, device=dev, tuple_like=self.tuple_like)

    def to_gym(self) -> gymnasium.spaces.Space:
        """A ``gymnasium.spaces.Dict`` (nested), or a ``Tuple`` when ``tuple_like``."""
        if not self.tuple_like:
            return gymnasium.spaces.Dict({k: s.to_gym() for k, s in self._specs.items()})
        expected = [str(i) for i in range(len(self._specs))]
        if sorted(self._specs, key=lambda k: (len(k), k)) != expected:
            raise SpecError(
                f"tuple_like Composite needs keys {expected}, got {list(self._specs)}; "
                "rename the keys or build it with tuple_like=False."
            )
        return gymnasium.spaces.Tuple([self._specs[k].to_gym() for k in expected])

    def __eq__(self, other: object) -> bool:
        return type(other) is Composite and self.tuple_like == other.tuple_like and self._specs == other._specs

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={s!r}" for k, s in self._specs.items())
        extra = ", tuple_like=True" if self.tuple_like else ""
        return f"Composite({inner}{extra}, device={self.device})"


# ---------------------------------------------------------------------------
# gymnasium conversion
# ---------------------------------------------------------------------------


def spec_from_gym(space: gymnasium.spaces.Space, device: DeviceLike = "cpu") -> Spec:
    """Spec equivalent to a gymnasium ``space`` (per env), on ``device``.

    Box -> :class:`Box` (a bool Box with bounds 0/1 -> :class:`Binary`), Discrete ->
    :class:`Discrete`, MultiDiscrete -> :class:`MultiDiscrete`, MultiBinary ->
    ``Binary(dtype=torch.int8)``, Dict -> :class:`Composite`, Tuple ->
    ``Composite(tuple_like=True)`` with keys ``"0"``, ``"1"``, ... Other spaces raise
    :class:`UnsupportedSpaceError`.

    Example::

        >>> spec_from_gym(gymnasium.spaces.Discrete(3, start=1))
        Discrete(n=3, start=1, dtype=int64, device=cpu)
    """
    spaces = gymnasium.spaces
    if isinstance(space, spaces.Box):
        if space.dtype == np.bool_:
            if not (space.low == 0).all() or not (space.high == 1).all():
                raise UnsupportedSpaceError(
                    f"bool {space!r} has fixed entries (low == high == 1 or 0); only bool Boxes with "
                    "bounds 0/1 are supported. Give a custom spec or drop the fixed entries."
                )
            return Binary(tuple(space.shape), dtype=torch.bool, device=device)
        box = Box(
            torch.from_numpy(np.array(space.low)),
            torch.from_numpy(np.array(space.high)),
            tuple(space.shape),
            torch_dtype(space.dtype),
            device,
        )
        box._set_bounded(
            torch.from_numpy(np.array(space.bounded_below)), torch.from_numpy(np.array(space.bounded_above))
        )
        return box
    if isinstance(space, spaces.Discrete):
        return Discrete(int(space.n), torch_dtype(space.dtype), device, start=int(space.start))
    if isinstance(space, spaces.MultiDiscrete):
        return MultiDiscrete(space.nvec, torch_dtype(space.dtype), device, start=space.start)
    if isinstance(space, spaces.MultiBinary):
        return Binary(space.n, dtype=torch.int8, device=device)
    if isinstance(space, spaces.Dict):
        return Composite({k: spec_from_gym(s, device) for k, s in space.spaces.items()}, device=device)
    if isinstance(space, spaces.Tuple):
        children = {str(i): spec_from_gym(s, device) for i, s in enumerate(space.spaces)}
        return Composite(children, device=device, tuple_like=True)
    raise UnsupportedSpaceError(
        f"{type(space).__name__} space {space!r} has no fixed-shape tensor spec. Flatten or replace it "
        "with a gymnasium wrapper (e.g. an ObservationWrapper to a Box/Dict), or pass a custom "
        "observation/action spec."
    )


def spec_to_gym(spec: Spec) -> gymnasium.spaces.Space:
    """The gymnasium space of ``spec`` (same as ``spec.to_gym()``)."""
    if not isinstance(spec, Spec):
        raise SpecError(f"spec_to_gym expects a Spec, got {type(spec).__name__}.")
    return spec.to_gym()
