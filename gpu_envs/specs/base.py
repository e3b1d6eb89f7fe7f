"""The ``Spec`` base class and the argument helpers every spec kind shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
import torch

from gpu_envs.errors import SpecError

DeviceLike = torch.device | str | int
BatchLike = Sequence[int] | int


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
