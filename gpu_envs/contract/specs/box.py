"""``Box``: values in ``[low, high]`` elementwise (continuous or integer)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
import torch

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.specs.base import DeviceLike, Spec, as_device, as_dims, broadcast_per_env, short_text
from gpu_envs.contract.specs.dtypes import FLOAT_DTYPES, INT_DTYPES, checked_dtype, numpy_dtype


class Box(Spec):
    """Values in ``[low, high]`` elementwise; bounds may be infinite and the dtype integer.

    ``low``/``high`` are scalars, arrays or tensors broadcast to ``shape`` (inferred from
    them when ``shape`` is None, so scalars give shape ``()``). ``rand`` follows gymnasium:
    uniform on bounded dims, ``low + Exp(1)`` / ``high - Exp(1)`` on half-bounded ones,
    standard normal on unbounded ones; integer boxes give integers in ``[low, high]``.
    For signed integer dtypes ``-inf``/``inf`` become the dtype's min/max (still sampled
    as unbounded); unsigned dtypes clip infinite bounds to their range.

    ``shape`` here is one env's (``event_shape``); :meth:`expand` adds batch dims.

    Attributes: ``low``/``high`` (tensors of ``dtype`` on ``device``, shape ``shape``) and
    ``bounded_below``/``bounded_above`` (bool tensors, as in gymnasium); on a batched
    spec they are broadcast views of the per-env bounds.

    Example::

        >>> Box(-1.0, 1.0, (2,)).rand((4,)).shape
        torch.Size([4, 2])
        >>> Box(-1.0, 1.0, (2,)).expand(4, 2).rand().shape    # a batch of 4 envs
        torch.Size([4, 2])
        >>> Box(0, 255, (84, 84, 3), torch.uint8).zero().max()
        tensor(0, dtype=torch.uint8)
    """

    dtype: torch.dtype  # always set (never None, unlike a Composite's)
    device: torch.device

    def __init__(
        self,
        low: Any,
        high: Any,
        shape: Sequence[int] | int | None = None,
        dtype: Any = torch.float32,
        device: DeviceLike = "cpu",
    ) -> None:
        self.dtype = checked_dtype(dtype, FLOAT_DTYPES + INT_DTYPES, "Box")
        self.device = as_device(device)
        lo, hi = self._bound_tensor(low, "low"), self._bound_tensor(high, "high")
        if shape is None:
            try:
                self.event_shape = torch.broadcast_shapes(lo.shape, hi.shape)
            except RuntimeError:
                raise SpecError(
                    f"Box low shape {tuple(lo.shape)} and high shape {tuple(hi.shape)} do not "
                    "broadcast together; pass bounds of the same shape or scalars."
                ) from None
        else:
            self.event_shape = torch.Size(as_dims(shape))
        for name, t in (("low", lo), ("high", hi)):
            try:
                fits = torch.broadcast_shapes(t.shape, self.event_shape) == self.event_shape
            except RuntimeError:
                fits = False
            if not fits:
                raise SpecError(
                    f"Box {name} has shape {tuple(t.shape)}, which does not broadcast to shape "
                    f"{tuple(self.event_shape)}; pass {name} as a scalar or with shape {tuple(self.event_shape)}."
                )
        lo, hi = lo.expand(self.event_shape), hi.expand(self.event_shape)
        if lo.isnan().any() or hi.isnan().any():
            raise SpecError("Box bounds must not be NaN; use -inf/inf for unbounded dims.")
        if (lo > hi).any():
            bad = (lo > hi).nonzero()[0].tolist()
            raise SpecError(
                f"Box low > high at index {tuple(bad)} (low={lo[tuple(bad)].item()}, "
                f"high={hi[tuple(bad)].item()}); swap the bounds or fix them so low <= high."
            )
        bounded_below, bounded_above = ~torch.isneginf(lo), ~torch.isposinf(hi)
        self._low = self._cast_bound(lo, "low")
        self._high = self._cast_bound(hi, "high")
        if self.dtype == torch.uint8:  # unsigned: infinite bounds were clipped to the dtype range
            bounded_below = bounded_above = torch.ones(self.event_shape, dtype=torch.bool)
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
        if t.dtype == torch.bool or t.dtype in INT_DTYPES:
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

    def with_bounded(self, bounded_below: Any, bounded_above: Any) -> Box:
        """This box with which dims count as bounded set explicitly (gymnasium's ``bounded_below/above``), in place.

        By default a finite bound is a bound; a gymnasium ``Box`` may say otherwise (its
        ``bounded_below``/``bounded_above`` arrays), which decides how ``rand`` samples.
        Returns ``self``.
        """
        self._set_bounded(torch.as_tensor(bounded_below), torch.as_tensor(bounded_above))
        return self

    def _set_bounded(self, bounded_below: torch.Tensor, bounded_above: torch.Tensor) -> None:
        """Record which dims are bounded and precompute what ``rand``/``zero`` need."""
        self._below = bounded_below.to(self.device, torch.bool).expand(self.event_shape).clone()
        self._above = bounded_above.to(self.device, torch.bool).expand(self.event_shape).clone()
        self._all_bounded = bool(self._below.all() and self._above.all())
        is_float = self.dtype.is_floating_point
        self._work = torch.float64 if not is_float or self.dtype == torch.float64 else torch.float32
        self._lo = self._low.to(self._work)
        # integers sample floor(U[low, high + 1)) like gymnasium
        self._hi = self._high.to(self._work) + (0 if is_float else 1)
        self._span = self._hi - self._lo  # inf on unbounded dims (masked out in rand)
        both = self._below & self._above
        # low + u * span is one kernel; fall back to a convex mix if the span overflows
        self._span_ok = bool(torch.isfinite(self._span[both]).all())
        if is_float:
            fmax = torch.finfo(self.dtype).max
            self._clamp = (self._lo.clamp(min=-fmax), self._high.to(self._work).clamp(max=fmax))
        if not is_float:
            self._low_i64, self._high_i64 = self._low.to(torch.int64), self._high.to(torch.int64)
        zero = torch.zeros((), dtype=self.dtype, device=self.device)
        self._zero_value = torch.maximum(torch.minimum(zero, self._high), self._low)
        self._zero_is_zero = bool((self._zero_value == 0).all())

    # -- bounds (full shape, per-env bounds broadcast over the batch dims) ------------------
    low = broadcast_per_env("_low", "Lower bounds, shape ``shape``.")
    high = broadcast_per_env("_high", "Upper bounds, shape ``shape``.")
    bounded_below = broadcast_per_env(
        "_below", "Bool, shape ``shape``: True where ``low`` is finite (as in gymnasium)."
    )
    bounded_above = broadcast_per_env(
        "_above", "Bool, shape ``shape``: True where ``high`` is finite (as in gymnasium)."
    )

    # -- Spec API ---------------------------------------------------------------
    def _zero(self, dims: tuple[int, ...]) -> torch.Tensor:
        """Zeros clamped into ``[low, high]``."""
        size = (*dims, *self.event_shape)
        if self._zero_is_zero:
            return torch.zeros(size, dtype=self.dtype, device=self.device)
        return self._zero_value.expand(size).clone(memory_format=torch.contiguous_format)

    def _rand(self, dims: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        """Uniform / exponential / normal samples, see the class doc."""
        size = (*dims, *self.event_shape)
        kw = {"generator": generator, "device": self.device, "dtype": self._work}
        u = torch.rand(size, **kw)
        # low + u * span in one kernel, or a convex mix when high - low overflows the dtype
        sample = torch.addcmul(self._lo, u, self._span) if self._span_ok else self._lo * (1 - u) + self._hi * u
        if not self._all_bounded:
            below, above = self._below, self._above
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
        return self._in_range(x, self._low, self._high)

    def _to(self, device: torch.device) -> Box:
        box = Box.__new__(Box)
        box.event_shape, box.dtype, box.device = self.event_shape, self.dtype, device
        box._low, box._high = self._low.to(device), self._high.to(device)
        box._set_bounded(self._below, self._above)
        return box

    def _gym_space(self) -> gymnasium.spaces.Box:
        """A ``gymnasium.spaces.Box`` with the same bounds, shape and dtype."""
        np_dtype = numpy_dtype(self.dtype)  # fails early (SpecError) for bfloat16
        low: Any = self._low.cpu().numpy()
        high: Any = self._high.cpu().numpy()
        # integer boxes: keep "unbounded" visible to gymnasium when a whole side is unbounded
        if not self.dtype.is_floating_point:
            if low.size and not self._below.any():
                low = -math.inf
            if high.size and not self._above.any():
                high = math.inf
        return gymnasium.spaces.Box(low, high, shape=tuple(self.event_shape), dtype=np_dtype)

    def __eq__(self, other: object) -> bool:
        return self._same_frame(other) and torch.equal(self._low, other._low) and torch.equal(self._high, other._high)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        dt = str(self.dtype).removeprefix("torch.")
        return (
            f"Box(low={short_text(self._low)}, high={short_text(self._high)}, shape={tuple(self.shape)}"
            f"{self._batch_repr()}, dtype={dt}, device={self.device})"
        )
