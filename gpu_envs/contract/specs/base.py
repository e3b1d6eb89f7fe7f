"""The ``Spec`` base class (shape = batch dims + per-env dims) and the argument helpers every kind shares."""

from __future__ import annotations

import copy
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.vector.utils import batch_space

from gpu_envs.contract.errors import SpecError
from gpu_envs.utils.devices import normalize_device

DeviceLike = torch.device | str | int
BatchLike = Sequence[int] | int


def as_device(device: DeviceLike) -> torch.device:
    """A spec's device: a bare ``"cuda"`` becomes ``cuda:<current>`` so equality is stable.

    Without CUDA, ``"cuda"`` stays as it is (a spec may describe a device this process lacks).
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise SpecError(
            f"device={device!r} is not a device torch knows; use 'cpu', 'cuda' or 'cuda:<index>'."
        ) from None
    return normalize_device(dev) if dev.type != "cuda" or torch.cuda.is_available() else dev


def as_dims(batch: BatchLike) -> tuple[int, ...]:
    """Dims as a tuple: an int or a sequence of non-negative ints (what ``rand(shape)`` prepends)."""
    dims = (batch,) if isinstance(batch, (int, np.integer)) else tuple(batch)
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise SpecError(f"shape must be an int or a sequence of non-negative ints, got {batch!r}.")
    return tuple(int(d) for d in dims)


def _as_shape(args: tuple) -> torch.Size:
    """``expand``'s arguments: ``(8, 3)``, ``((8, 3),)`` or ``(torch.Size([8, 3]),)``."""
    if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
        args = tuple(args[0])
    return torch.Size(as_dims(args))


def _check_generator(generator: torch.Generator | None, device: torch.device | None) -> None:
    # device None: a Composite over several devices, whose entries check for themselves
    if generator is not None and not isinstance(generator, torch.Generator):
        raise SpecError(f"generator must be a torch.Generator or None, got {type(generator).__name__}.")
    if generator is not None and device is not None and generator.device.type != device.type:
        raise SpecError(
            f"generator lives on {generator.device} but the spec on {device}; "
            f"create it with torch.Generator(device={str(device)!r})."
        )


def _has_shape(x: Any, shape: torch.Size) -> bool:
    """True if ``x`` is a tensor whose trailing dims equal ``shape``."""
    if not isinstance(x, torch.Tensor) or x.dim() < len(shape):
        return False
    return x.shape[x.dim() - len(shape) :] == shape


def short_text(t: torch.Tensor) -> str:
    """Compact text for a bound tensor: one number if uniform, else the values or their range."""
    if t.numel() == 0:
        return "[]"
    lo, hi = t.min().item(), t.max().item()
    if lo == hi:
        return str(lo)
    if t.numel() <= 6:
        return str(t.flatten().tolist())
    return f"[{lo}..{hi}]"


def broadcast_per_env(attr: str, doc: str) -> property:
    """A read-only property: the per-env tensor ``self.<attr>`` broadcast to the full ``shape``.

    Per-env tensors (bounds, sizes) are stored once; on a batched spec the property is
    a view with stride 0 over the batch dims, so expanding a spec copies nothing.
    """

    def get(self: Spec) -> torch.Tensor:
        value = getattr(self, attr)
        return value.expand(self.shape) if self._batch_shape else value

    return property(get, doc=doc)


class Spec(ABC):
    """Abstract spec: the ``shape``, ``dtype`` and ``device`` of one value, batched or not.

    ``shape == batch_shape + event_shape``. ``event_shape`` is one env's value (what a
    backend declares, gymnasium's ``single_*`` space); ``batch_shape`` holds the leading
    dims of a batch of envs, added by :meth:`expand` as in torchrl, whose convention the
    envs follow: ``env.action_spec.shape == env.batch_size + env.single_action_spec.shape``.
    Bounds and sizes (``low``, ``n``...) are per env, shared by every env of the batch.

    Every spec builds values (``zero``/``rand``) on its device, checks them
    (``contains``), moves (``to``), adds or drops batch dims (``expand`` /
    ``unbatched``) and converts to gymnasium (``to_gym``). Subclasses implement
    ``_zero``/``_rand`` (values of shape ``(*dims, *event_shape)``), ``contains``,
    ``_to``, ``_gym_space`` (one env's space), ``__eq__`` and ``__repr__``.

    Example::

        >>> from gpu_envs.contract.specs import Box
        >>> single = Box(-1.0, 1.0, (3,))
        >>> batched = single.expand(8, 3)            # torchrl's expand: the new full shape
        >>> batched.shape, batched.batch_shape, batched.event_shape
        (torch.Size([8, 3]), torch.Size([8]), torch.Size([3]))
        >>> batched.rand().shape, batched.rand((2,)).shape
        (torch.Size([8, 3]), torch.Size([2, 8, 3]))
        >>> batched.unbatched() == single
        True
    """

    dtype: torch.dtype | None
    device: torch.device | None
    event_shape: torch.Size
    _batch_shape: torch.Size = torch.Size(())

    @property
    def batch_shape(self) -> torch.Size:
        """Leading batch dims (``()`` for a per-env spec, ``env.batch_size`` for an env's)."""
        return self._batch_shape

    @property
    def shape(self) -> torch.Size:
        """The full shape of one value: ``batch_shape + event_shape``."""
        return self._batch_shape + self.event_shape

    # -- values ------------------------------------------------------------------------
    def zero(self, shape: BatchLike = ()) -> Any:
        """A value of shape ``(*shape, *self.shape)`` on ``device``: zeros, clamped into the range.

        ``shape`` PREPENDS dims to the spec's full shape, as in torchrl.
        """
        return self._zero((*as_dims(shape), *self._batch_shape))

    def rand(self, shape: BatchLike = (), generator: torch.Generator | None = None) -> Any:
        """A random value of shape ``(*shape, *self.shape)`` drawn on ``device``.

        ``shape`` PREPENDS dims to the spec's full shape, as in torchrl, so a batched
        spec's ``rand()`` is a whole batch. ``generator`` (a ``torch.Generator`` on the
        spec's device) makes draws reproducible; ``None`` uses torch's global RNG.
        """
        _check_generator(generator, self.device)
        return self._rand((*as_dims(shape), *self._batch_shape), generator)

    def sampler(self, shape: BatchLike = (), generator: torch.Generator | None = None) -> Callable[[], Any]:
        """``rand(shape, generator)`` as a function of no argument, its arguments checked once.

        For loops that draw every step (``collect`` with random actions): each call is a
        new draw from ``generator``, as ``rand`` would make, without re-checking them.
        """
        _check_generator(generator, self.device)
        return functools.partial(self._rand, (*as_dims(shape), *self._batch_shape), generator)

    def sampler_into(self, generator: torch.Generator | None = None) -> Callable[[torch.Tensor], None] | None:
        """``draw(out)``: one batch drawn straight into ``out``, the values :meth:`sampler`'s would return; or None.

        For loops that own the memory a draw lands in (a random-action collection draws
        into its buffer's action slot of the step: no allocation, no copy). ``out`` holds
        the spec's full shape, dtype and device, contiguous; the draw takes the same
        numbers from ``generator`` as ``sampler(generator=generator)()``. None where the
        spec has no such draw (the default: only :class:`Discrete` has one).

        >>> import torch
        >>> from gpu_envs.contract.specs import Discrete
        >>> spec = Discrete(5).expand(4)
        >>> out = torch.empty(4, dtype=torch.int64)
        >>> spec.sampler_into(torch.Generator().manual_seed(0))(out)
        >>> torch.equal(out, spec.sampler(generator=torch.Generator().manual_seed(0))())
        True
        """
        _check_generator(generator, self.device)
        return self._sampler_into(generator)

    def _sampler_into(self, generator: torch.Generator | None) -> Callable[[torch.Tensor], None] | None:
        """Subclasses with a draw into given memory: :meth:`sampler_into`'s function (its generator checked)."""
        return None

    @abstractmethod
    def _zero(self, dims: tuple[int, ...]) -> Any:
        """Zeros (clamped into range) of shape ``(*dims, *event_shape)``."""

    @abstractmethod
    def _rand(self, dims: tuple[int, ...], generator: torch.Generator | None) -> Any:
        """Random values of shape ``(*dims, *event_shape)``."""

    @abstractmethod
    def contains(self, x: Any) -> bool:
        """True if ``x`` has trailing shape ``shape`` (extra leading dims allowed), ``dtype`` and in-range values."""

    def _in_range(self, x: Any, low: Any, high: Any) -> bool:
        """``x`` is a tensor ending with ``shape``, of this dtype, with ``low <= x <= high`` elementwise."""
        if not _has_shape(x, self.shape) or x.dtype != self.dtype:
            return False
        if isinstance(low, torch.Tensor):
            low, high = low.to(x.device), high.to(x.device)
        return bool(((x >= low) & (x <= high)).all())

    # -- batch dims ----------------------------------------------------------------------
    def expand(self, *shape: int | Sequence[int]) -> Spec:
        """This spec with batch dims added: ``shape`` is the NEW FULL shape (torchrl's ``expand``).

        It must end with the current ``shape``; the dims before it become leading batch
        dims. ``Box(-1, 1, (3,)).expand(8, 3)`` is a batch of 8; ``expand((8, 3))`` and
        ``expand(torch.Size([8, 3]))`` work too. Nothing is copied: per-env bounds are
        shared and broadcast.
        """
        out = copy.copy(self)
        out._batch_shape = self._expanded_batch(shape)
        return out

    def _expanded_batch(self, args: tuple) -> torch.Size:
        """The batch shape after ``expand(*args)``, or a SpecError saying how to call it."""
        new = _as_shape(args)
        current = self.shape
        extra = len(new) - len(current)
        if extra < 0 or new[extra:] != current:
            example = ", ".join(map(str, (8, *current)))
            raise SpecError(
                f"expand takes the new full shape, which must end with the spec's shape {tuple(current)} "
                f"(torchrl's convention); got {tuple(new)}. To add batch dims B write "
                f"spec.expand(*B, *spec.shape), e.g. spec.expand({example})."
            )
        return new[:extra] + self._batch_shape

    def unbatched(self) -> Spec:
        """The per-env spec (``batch_shape == ()``): what one env of the batch holds."""
        if not self._batch_shape:
            return self
        out = copy.copy(self)
        out._batch_shape = torch.Size(())
        return out

    # -- devices and gymnasium -----------------------------------------------------------
    def to(self, device: DeviceLike) -> Spec:
        """A copy of this spec (batch dims included) on ``device``."""
        out = self._to(as_device(device))
        out._batch_shape = self._batch_shape
        return out

    @abstractmethod
    def _to(self, device: torch.device) -> Spec:
        """A per-env copy on ``device``."""

    def to_gym(self) -> gymnasium.spaces.Space:
        """The equivalent gymnasium space: one env's space for a per-env spec; for a batched
        spec, that space batched the way gymnasium's vector envs do (``batch_space``, once
        per batch dim, e.g. a batched ``Discrete`` becomes a ``MultiDiscrete``).
        """
        space = self._gym_space()
        for n in reversed(self._batch_shape):
            space = batch_space(space, n)
        return space

    @abstractmethod
    def _gym_space(self) -> gymnasium.spaces.Space:
        """One env's gymnasium space (ignores the batch dims)."""

    # -- comparison and text -------------------------------------------------------------
    @abstractmethod
    def __eq__(self, other: object) -> bool: ...

    __hash__ = None  # type: ignore[assignment]  # specs compare by value and are mutable-ish

    def _same_frame(self, other: object) -> bool:
        """Same kind, batch and event shapes, dtype and device: what every ``__eq__`` checks first."""
        return (
            type(other) is type(self)
            and (self._batch_shape, self.event_shape, self.dtype, self.device)
            == (other._batch_shape, other.event_shape, other.dtype, other.device)  # type: ignore[attr-defined]
        )

    def _batch_repr(self) -> str:
        """``", batch_shape=(N,)"`` for a batched spec, ``""`` for a per-env one."""
        return f", batch_shape={tuple(self._batch_shape)}" if self._batch_shape else ""
