"""``Composite``: a (nested) mapping of named specs whose values are TensorDicts."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium
import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.specs.base import BatchLike, DeviceLike, Spec, as_device, as_dims

Key = str | tuple[str, ...]


def _as_spec(value: Any, device: torch.device | None, key: Any, batch: torch.Size) -> Spec:
    if isinstance(value, Mapping) and not isinstance(value, Composite):
        value = Composite(value, device=device, shape=batch)
    if not isinstance(value, Spec):
        raise SpecError(f"Composite entry {key!r} must be a Spec (or a mapping of specs), got {type(value).__name__}.")
    if value.batch_shape != batch:
        raise SpecError(
            f"Composite entry {key!r} has batch shape {tuple(value.batch_shape)} but the Composite has "
            f"{tuple(batch)}; build the Composite per env and expand it (composite.expand(*batch)), or "
            f"expand the entry to the same batch (entry.expand(*{tuple(batch)}, *entry.shape))."
        )
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

    As in torchrl, a Composite's ``shape`` is its batch shape (``event_shape`` is
    ``()``): every entry carries those leading batch dims, so an env's
    ``observation_spec`` has ``shape == env.batch_size`` and leaves ``[N, *obs]``.
    Build it per env and :meth:`expand` it, which expands every entry.

    ``zero``/``rand`` return a ``TensorDict`` with ``batch_size=(*shape_arg, *shape)`` on
    ``device`` (``None`` when children live on different devices). Keys may be nested
    with tuples, as in tensordict. ``tuple_like=True`` marks a spec built from a
    gymnasium ``Tuple`` (keys ``"0"``, ``"1"``, ...) so that ``to_gym`` rebuilds a ``Tuple``.

    Example::

        >>> from gpu_envs.contract.specs import Box, Composite, Discrete
        >>> spec = Composite(obs={"pos": Box(-1.0, 1.0, (2,))}, action=Discrete(2))
        >>> spec["obs", "pos"].shape
        torch.Size([2])
        >>> spec.keys(include_nested=True, leaves_only=True)
        [('obs', 'pos'), 'action']
        >>> spec.expand(8)["obs", "pos"].shape        # a batch of 8 envs
        torch.Size([8, 2])
    """

    event_shape = torch.Size(())
    dtype = None

    def __init__(
        self,
        specs: Mapping[str, Spec] | None = None,
        device: DeviceLike | None = None,
        *,
        shape: BatchLike = (),
        tuple_like: bool = False,
        **kw_specs: Spec,
    ) -> None:
        self._device = None if device is None else as_device(device)
        self._batch_shape = torch.Size(as_dims(shape))
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
            self._specs[key] = _as_spec(value, self._device, key, self._batch_shape)

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
                child = node._specs[part] = Composite(device=node._device, shape=node._batch_shape)
            elif not isinstance(child, Composite):
                raise SpecError(f"cannot set {key!r}: {part!r} is a leaf {child!r}, not a Composite.")
            node = child
        node._specs[last] = _as_spec(value, node._device, key, node._batch_shape)

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
    def _zero(self, dims: tuple[int, ...]) -> TensorDict:
        """A TensorDict of every child's ``zero``, ``batch_size=dims``."""
        extra = dims[: len(dims) - len(self._batch_shape)]
        data = {key: spec.zero(extra) for key, spec in self._specs.items()}
        return TensorDict(data, batch_size=dims, device=self.device)

    def _rand(self, dims: tuple[int, ...], generator: torch.Generator | None) -> TensorDict:
        """A TensorDict of every child's ``rand(..., generator)``, ``batch_size=dims``."""
        extra = dims[: len(dims) - len(self._batch_shape)]
        data = {key: spec.rand(extra, generator) for key, spec in self._specs.items()}
        return TensorDict(data, batch_size=dims, device=self.device)

    def contains(self, x: Any) -> bool:
        """True if ``x`` (TensorDict or mapping) has every key and each value is contained.

        Extra keys in ``x`` are allowed.
        """
        if not isinstance(x, (TensorDictBase, Mapping)):
            return False
        # TensorDict refuses `key in td`; `.keys()` works for both TensorDicts and mappings
        return all(key in x.keys() and spec.contains(x[key]) for key, spec in self._specs.items())  # noqa: SIM118

    def expand(self, *shape: int | Sequence[int]) -> Composite:
        """This Composite with batch dims added to it and every entry: ``shape`` is the new
        batch shape and must end with the current one (torchrl's ``Composite.expand``).
        """
        batch = self._expanded_batch(shape)
        old = len(self._batch_shape)
        specs = {k: s.expand(*batch, *s.shape[old:]) for k, s in self._specs.items()}
        return Composite(specs, device=self._device, shape=batch, tuple_like=self.tuple_like)

    def unbatched(self) -> Composite:
        """The per-env Composite: every entry without its batch dims."""
        if not self._batch_shape:
            return self
        specs = {k: s.unbatched() for k, s in self._specs.items()}
        return Composite(specs, device=self._device, tuple_like=self.tuple_like)

    def _to(self, device: torch.device) -> Composite:
        # entries move with their batch dims, so the Composite keeps its own
        specs = {k: s.to(device) for k, s in self._specs.items()}
        return Composite(specs, device=device, shape=self._batch_shape, tuple_like=self.tuple_like)

    def _gym_space(self) -> gymnasium.spaces.Space:
        """A ``gymnasium.spaces.Dict`` (nested), or a ``Tuple`` when ``tuple_like``."""
        if not self.tuple_like:
            return gymnasium.spaces.Dict({k: s.unbatched().to_gym() for k, s in self._specs.items()})
        expected = [str(i) for i in range(len(self._specs))]
        if sorted(self._specs, key=lambda k: (len(k), k)) != expected:
            raise SpecError(
                f"tuple_like Composite needs keys {expected}, got {list(self._specs)}; "
                "rename the keys or build it with tuple_like=False."
            )
        return gymnasium.spaces.Tuple([self._specs[k].unbatched().to_gym() for k in expected])

    def __eq__(self, other: object) -> bool:
        # any Composite subclass (e.g. the gymnasium backend's always-truthy info spec) compares by content
        return (
            isinstance(other, Composite)
            and (self._batch_shape, self.device, self.tuple_like)
            == (other._batch_shape, other.device, other.tuple_like)
            and self._specs == other._specs
        )

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={s!r}" for k, s in self._specs.items())
        extra = ", tuple_like=True" if self.tuple_like else ""
        return f"Composite({inner}{extra}{self._batch_repr()}, device={self.device})"
