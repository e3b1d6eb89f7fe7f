"""The discrete kinds: ``Discrete`` (one index), ``MultiDiscrete`` (several), ``Binary`` (flags),
``OneHot`` (one index, one-hot encoded)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium
import numpy as np
import torch

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.specs.base import DeviceLike, Spec, as_device, broadcast_per_env, short_text
from gpu_envs.contract.specs.dtypes import INT_DTYPES, checked_dtype, numpy_dtype


def _int_tensor(value: Any, name: str) -> torch.Tensor:
    """``value`` as an int64 CPU tensor, refusing non-integral numbers."""
    t = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
    if t.dtype.is_floating_point:
        if not torch.equal(t, t.round()):
            raise SpecError(f"{name} must hold whole numbers, got {value!r}.")
    elif t.dtype not in INT_DTYPES:
        raise SpecError(f"{name} must be integers, got dtype {t.dtype}.")
    return t.detach().cpu().to(torch.int64)


def _random_into(low: int, high: int, generator: torch.Generator | None, out: torch.Tensor) -> None:
    """Uniform integers in ``[low, high)`` into ``out``: ``torch.randint`` is this very op on an empty tensor."""
    out.random_(low, high, generator=generator)


def _check_int_range(dtype: torch.dtype, lo: int, hi: int, what: str) -> None:
    info = torch.iinfo(dtype)
    if lo < info.min or hi > info.max:
        raise SpecError(
            f"{what} values [{lo}, {hi}] do not fit in {dtype} [{info.min}, {info.max}]; use a wider dtype."
        )


class Discrete(Spec):
    """One categorical index in ``{start, ..., start + n - 1}``; per-env shape ``()``.

    Example::

        >>> draws = Discrete(3, start=1).rand((1000,), generator=torch.Generator().manual_seed(0))
        >>> draws.shape, draws.min().item(), draws.max().item()     # values 1, 2, 3
        (torch.Size([1000]), 1, 3)
        >>> Discrete(3).expand(5).rand().shape       # a batch of 5 envs
        torch.Size([5])
        >>> Discrete(3).to_gym()
        Discrete(3)
    """

    event_shape = torch.Size(())

    def __init__(self, n: int, dtype: Any = torch.int64, device: DeviceLike = "cpu", start: int = 0) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise SpecError(f"Discrete n must be an int >= 1 (the number of choices), got {n!r}.")
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)):
            raise SpecError(f"Discrete start must be an int, got {start!r}.")
        self.n, self.start = int(n), int(start)
        self.dtype = checked_dtype(dtype, INT_DTYPES, "Discrete")
        _check_int_range(self.dtype, self.start, self.start + self.n - 1, "Discrete")
        self.device = as_device(device)

    def _zero(self, dims: tuple[int, ...]) -> torch.Tensor:
        """``0`` clamped into ``[start, start + n - 1]``."""
        value = min(max(0, self.start), self.start + self.n - 1)
        return torch.full(dims, value, dtype=self.dtype, device=self.device)

    def _rand(self, dims: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        """Uniform indices in ``[start, start + n)``."""
        return torch.randint(
            self.start, self.start + self.n, dims, generator=generator, device=self.device, dtype=self.dtype
        )

    def _sampler_into(self, generator: torch.Generator | None) -> Callable[[torch.Tensor], None]:
        """:meth:`Spec.sampler_into`: ``out.random_(start, start + n)``, the very draw ``torch.randint`` makes."""
        return functools.partial(_random_into, self.start, self.start + self.n, generator)

    def contains(self, x: Any) -> bool:
        """True for a tensor of dtype ``dtype`` ending with ``shape`` (any shape when per env) with values in range."""
        return self._in_range(x, self.start, self.start + self.n - 1)

    def _to(self, device: torch.device) -> Discrete:
        return Discrete(self.n, self.dtype, device, start=self.start)

    def _gym_space(self) -> gymnasium.spaces.Discrete:
        """``gymnasium.spaces.Discrete(n, start=start, dtype=...)``."""
        return gymnasium.spaces.Discrete(self.n, start=self.start, dtype=numpy_dtype(self.dtype))

    def __eq__(self, other: object) -> bool:
        return self._same_frame(other) and (self.n, self.start) == (other.n, other.start)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        start = f", start={self.start}" if self.start else ""
        dt = str(self.dtype).removeprefix("torch.")
        return f"Discrete(n={self.n}{start}{self._batch_repr()}, dtype={dt}, device={self.device})"


class MultiDiscrete(Spec):
    """Several categorical indices; element ``i`` lies in ``[start[i], start[i] + nvec[i])``.

    Per-env shape ``nvec.shape``; ``start`` (scalar or array, default 0) mirrors
    gymnasium's. On a batched spec ``nvec``/``start`` are broadcast to ``shape``.

    Example::

        >>> MultiDiscrete([3, 2]).rand((4,)).shape
        torch.Size([4, 2])
    """

    def __init__(self, nvec: Any, dtype: Any = torch.int64, device: DeviceLike = "cpu", start: Any = 0) -> None:
        self.dtype = checked_dtype(dtype, INT_DTYPES, "MultiDiscrete")
        self.device = as_device(device)
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
            _check_int_range(self.dtype, int(st.min().item()), int((st + nv - 1).max().item()), "MultiDiscrete")
        self.event_shape = nv.shape
        self._nvec, self._start = nv.to(self.device), st.to(self.device)
        self._nvec_f = self._nvec.to(torch.float64)
        self._high = self._start + self._nvec - 1

    nvec = broadcast_per_env("_nvec", "Choices per element, shape ``shape``.")
    start = broadcast_per_env("_start", "Smallest value per element, shape ``shape``.")

    def _zero(self, dims: tuple[int, ...]) -> torch.Tensor:
        """``0`` clamped into each element's range."""
        zero = torch.minimum(torch.clamp(self._start, min=0), self._high).to(self.dtype)
        return zero.expand(*dims, *self.event_shape).clone(memory_format=torch.contiguous_format)

    def _rand(self, dims: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        """Uniform indices per element."""
        size = (*dims, *self.event_shape)
        u = torch.rand(size, generator=generator, device=self.device, dtype=torch.float64)
        idx = torch.minimum((u * self._nvec_f).floor_().to(torch.int64), self._nvec - 1)
        return (idx + self._start).to(self.dtype)

    def contains(self, x: Any) -> bool:
        """True for a tensor with trailing shape ``shape``, dtype ``dtype`` and in-range values."""
        return self._in_range(x, self._start, self._high)

    def _to(self, device: torch.device) -> MultiDiscrete:
        return MultiDiscrete(self._nvec, self.dtype, device, start=self._start)

    def _gym_space(self) -> gymnasium.spaces.MultiDiscrete:
        """``gymnasium.spaces.MultiDiscrete(nvec, dtype=..., start=start)``."""
        np_dt = numpy_dtype(self.dtype)
        return gymnasium.spaces.MultiDiscrete(
            self._nvec.cpu().numpy().astype(np_dt), dtype=np_dt, start=self._start.cpu().numpy().astype(np_dt)
        )

    def __eq__(self, other: object) -> bool:
        return (
            self._same_frame(other)
            and torch.equal(self._nvec, other._nvec)  # type: ignore[attr-defined]
            and torch.equal(self._start, other._start)  # type: ignore[attr-defined]
        )

    def __repr__(self) -> str:
        start = f", start={short_text(self._start)}" if bool(self._start.any()) else ""
        return (
            f"MultiDiscrete(nvec={short_text(self._nvec)}{start}, shape={tuple(self.shape)}{self._batch_repr()}, "
            f"dtype={str(self.dtype).removeprefix('torch.')}, device={self.device})"
        )


class Binary(Spec):
    """``n`` independent 0/1 flags; per-env shape ``(n,)`` (or ``n`` itself if it is a shape).

    ``bool`` by default; gymnasium's ``MultiBinary`` maps to ``dtype=torch.int8``.
    ``to_gym`` gives ``MultiBinary`` for integer dtypes (gymnasium stores int8, so only
    int8 round-trips exactly) and a ``bool`` ``gymnasium.spaces.Box(0, 1)`` for bool,
    which :func:`spec_from_gym` maps back to ``Binary``.

    Example::

        >>> Binary(3).zero()
        tensor([False, False, False])
    """

    def __init__(self, n: int | Sequence[int], dtype: Any = torch.bool, device: DeviceLike = "cpu") -> None:
        # a bool or non-iterable n is refused just below
        dims = (n,) if isinstance(n, (int, np.integer)) and not isinstance(n, bool) else cast("Sequence[int]", n)
        try:
            ok = all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in dims)
        except TypeError:
            ok = False
        if not ok:
            raise SpecError(f"Binary n must be an int >= 1 (or a shape of such ints), got {n!r}.")
        self.n: int | tuple[int, ...] = int(n) if isinstance(n, (int, np.integer)) else tuple(int(d) for d in dims)
        self.event_shape = torch.Size(int(d) for d in dims)
        self.dtype = checked_dtype(dtype, (torch.bool, *INT_DTYPES), "Binary")
        self.device = as_device(device)

    def _zero(self, dims: tuple[int, ...]) -> torch.Tensor:
        """All-zero (``False``) flags."""
        return torch.zeros((*dims, *self.event_shape), dtype=self.dtype, device=self.device)

    def _rand(self, dims: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        """Fair coin flips."""
        dtype = torch.uint8 if self.dtype == torch.bool else self.dtype
        flips = torch.randint(0, 2, (*dims, *self.event_shape), generator=generator, device=self.device, dtype=dtype)
        return flips.view(torch.bool) if self.dtype == torch.bool else flips  # same bytes, no copy

    def contains(self, x: Any) -> bool:
        """True for a tensor with trailing shape ``shape``, dtype ``dtype`` and values in {0, 1}."""
        return self._in_range(x, 0, 1)

    def _to(self, device: torch.device) -> Binary:
        return Binary(self.n, self.dtype, device)

    def _gym_space(self) -> gymnasium.spaces.Space:
        """``MultiBinary(n)`` for integer dtypes, ``Box(0, 1, shape, bool)`` for bool."""
        if self.dtype == torch.bool:
            return gymnasium.spaces.Box(0, 1, shape=tuple(self.event_shape), dtype=np.bool_)  # pyright: ignore[reportCallIssue, reportArgumentType]  # gymnasium's stubs omit the bool Box it supports
        return gymnasium.spaces.MultiBinary(self.n if isinstance(self.n, int) else list(self.n))

    def __eq__(self, other: object) -> bool:
        return self._same_frame(other)

    def __repr__(self) -> str:
        n = self.event_shape[0] if len(self.event_shape) == 1 else tuple(self.event_shape)
        dt = str(self.dtype).removeprefix("torch.")
        return f"Binary(n={n}{self._batch_repr()}, dtype={dt}, device={self.device})"


class OneHot(Binary):
    """A one-hot encoded choice among ``n``: per-env shape ``(n,)``, exactly one flag set.

    The action spec of a ``Discrete(n, start)`` space with ``one_hot_actions=True``;
    ``start`` is remembered so the backend can send ``argmax + start`` to gymnasium.

    Example::

        >>> OneHot(3).rand((2,)).sum(-1)
        tensor([1, 1])
    """

    def __init__(self, n: int, dtype: Any = torch.bool, device: Any = "cpu", start: int = 0) -> None:
        super().__init__(int(n), dtype=dtype, device=device)
        self.start = int(start)

    def _zero(self, dims: tuple[int, ...]) -> torch.Tensor:
        """The first choice, one-hot: the value closest to zero this spec contains."""
        out = super()._zero(dims)
        out[..., 0] = True if self.dtype == torch.bool else 1
        return out

    def _rand(self, dims: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        """Uniformly random one-hot rows."""
        n = self.event_shape[0]
        index = torch.randint(0, n, (*dims, 1), generator=generator, device=self.device)
        # a comparison, not F.one_hot, which reads the indices back to the host to check them
        return (index == torch.arange(n, device=self.device)).to(self.dtype)

    def contains(self, x: Any) -> bool:
        """True for a tensor ``(..., n)`` of this dtype with exactly one flag set per row."""
        if not super().contains(x):
            return False
        return bool((x.to(torch.int64).sum(-1) == 1).all())

    def _to(self, device: torch.device) -> OneHot:
        return OneHot(self.event_shape[0], self.dtype, device, self.start)

    def _gym_space(self) -> gymnasium.spaces.Discrete:
        return gymnasium.spaces.Discrete(self.event_shape[0], start=self.start)

    def __eq__(self, other: object) -> bool:
        return self._same_frame(other) and self.start == other.start  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        start = f", start={self.start}" if self.start else ""
        dt = str(self.dtype).removeprefix("torch.")
        return f"OneHot(n={self.event_shape[0]}{start}{self._batch_repr()}, dtype={dt}, device={self.device})"
