"""Numeric gymnasium info entries as tensors under ``("next", key)``.

gymnasium vector envs batch each info key as an array ``[N, ...]`` plus a presence
mask ``"_key"``; nested dicts stay nested. :class:`InfoReader` turns the numeric
entries into fixed-shape fields:

* The keys, dtypes and shapes are discovered ONCE, from the info of the first step
  (its ``final_info`` included), unless an ``info_spec`` is given up front. The spec is
  written into the backend's ``info_spec`` Composite in place, so ``env.info_spec``
  lists them from then on. Nested dicts become nested keys (``("episode", "r")``).
* The value of a transition is the info of the step that produced it: on rows that
  ended in a same-step auto-resetting env, that is ``info["final_info"]`` (the plain
  ``info`` there holds the RESET info) wherever it has the key, else the plain ``info``
  (where vector wrappers such as ``RecordEpisodeStatistics`` put their end-of-episode
  entries; a key that only the sub-env's ``reset`` reports would show its reset value
  there). Rows on which a key is absent get 0. A vector ``RecordEpisodeStatistics``
  wrapper's ``("episode", "r"/"l"/"t")`` entries are declared up front, as they only
  appear when an episode ends.
* Non-numeric entries (strings, objects), keys that collide with an observation or a
  done/reward key, and keys first seen after the first step are dropped with ONE
  warning each time a new such key shows up (not one per step). Declare late keys with
  ``info_spec=`` to keep them.

Example::

    reader = InfoReader(info_spec, reserved={"observation", "reward"}, num_envs=8)
    fields = reader.discover(first_info)          # {key: (shape, dtype)} to stage
    values = reader.read(info, same_step, terminated, truncated)   # one array per field
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from gpu_envs.contract.errors import BackendError, SpecError
from gpu_envs.contract.specs import Binary, Box, Composite, Spec, numpy_dtype, torch_dtype

# keys the vector env itself puts in info for same-step auto-reset bookkeeping
_RESERVED_INFO = frozenset({"final_obs", "_final_obs", "final_info", "_final_info"})


class InfoSpec(Composite):
    """The backend's ``info_spec``: filled in place at the first step, so always truthy.

    ``BatchedEnv`` keeps the object it reads at construction; an empty Composite is
    falsy and would be swapped for a fresh one, losing the entries discovered later.
    """

    def __bool__(self) -> bool:
        return True


def info_leaves(info: Mapping, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """``(path, value, presence mask or None)`` for every leaf of a batched info dict."""
    for name, value in info.items():
        if not prefix and name in _RESERVED_INFO:
            continue
        if isinstance(name, str) and name.startswith("_") and name[1:] in info:
            continue  # gymnasium's presence mask of `name[1:]`
        path = prefix + (str(name),)
        if isinstance(value, Mapping):
            yield from info_leaves(value, path)
        else:
            yield path, value, info.get(f"_{name}")


def _lookup(info: Mapping | None, path: tuple[str, ...]) -> tuple[Any, Any]:
    node = info
    for part in path[:-1]:
        if not isinstance(node, Mapping) or part not in node:
            return None, None
        node = node[part]
    if not isinstance(node, Mapping):
        return None, None
    return node.get(path[-1]), node.get(f"_{path[-1]}")


def _spec_for(value: np.ndarray, device: Any) -> Spec:
    """An unbounded spec of the value's per-env shape and dtype (bool -> Binary)."""
    shape = tuple(value.shape[1:])
    if value.dtype == np.bool_:
        return Binary(shape, device=device)
    return Box(-np.inf, np.inf, shape, torch_dtype(value.dtype), device)


def _numeric(value: Any, num_envs: int) -> bool:
    """A batched numeric array ``[N, ...]`` with a torch dtype."""
    if not (
        isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.ndim >= 1 and value.shape[0] == num_envs
    ):
        return False
    try:
        torch_dtype(value.dtype)
    except SpecError:
        return False
    return True


def info_key(path: tuple[str, ...]) -> Any:
    """The TensorDict key of an info path: a str, or a tuple for nested entries."""
    return path[0] if len(path) == 1 else path


def _signature(info: Mapping) -> tuple:
    """The (nested) key sets of an info dict, to notice new keys cheaply."""
    out: list = [frozenset(info)]
    for key, value in info.items():
        if isinstance(value, dict) and value:
            out.append((key, _signature(value)))
    return tuple(out)


class InfoReader:
    """Discovers the numeric info fields once, then reads them into reused arrays each step.

    Args:
        spec: the backend's ``info_spec`` Composite, filled in place by :meth:`discover`
            unless ``declared`` (then exactly its leaves are read).
        reserved: keys that must not be overwritten (observation and done/reward keys).
        num_envs: ``N``.
        declared: True when ``spec`` was given by the user.
        expected: ``{path: spec}`` of entries to keep although they may be absent from
            the first step (e.g. episode statistics).
    """

    def __init__(
        self, spec: Composite, reserved: set, num_envs: int, declared: bool = False, expected: Mapping | None = None
    ) -> None:
        self.spec = spec
        self.expected = dict(expected or {})
        self.reserved = {k if isinstance(k, tuple) else (k,) for k in reserved}
        self.num_envs = num_envs
        self.declared = declared
        self.paths: list[tuple[str, ...]] = []
        self._warned: set[tuple[str, ...]] = set()
        self._seen: set[tuple] = set()  # info key sets already checked for dropped entries
        self._last_keys: frozenset | None = None  # the last call's top-level keys (the usual step: the same)
        self._scratch: list[np.ndarray] = []

    def discover(self, info: Mapping) -> dict[Any, tuple[tuple[int, ...], torch.dtype]]:
        """Fix the fields from the first step's info; returns ``{key: (shape, dtype)}`` to stage."""
        if self.declared:
            self.paths = [k if isinstance(k, tuple) else (k,) for k in self.spec.keys(True, True)]
        else:
            for path, leaf in self.expected.items():
                self.spec[info_key(path)] = leaf
                self.paths.append(path)
            for source in self._sources(info):
                for path, value, _ in info_leaves(source):
                    if path not in self.paths and path not in self.reserved and _numeric(value, self.num_envs):
                        self.spec[info_key(path)] = _spec_for(value, self.spec.device)
                        self.paths.append(path)
        self._warn_dropped(info)
        fields = {}
        for path in self.paths:
            leaf = self.spec[info_key(path)]
            fields[info_key(path)] = ((self.num_envs, *leaf.shape), leaf.dtype)
            self._scratch.append(np.zeros((self.num_envs, *leaf.shape), numpy_dtype(leaf.dtype)))
        return fields

    @staticmethod
    def _sources(info: Mapping) -> tuple[Mapping, ...]:
        final = info.get("final_info")
        return (info, final) if isinstance(final, Mapping) else (info,)

    def _warn_dropped(self, info: Mapping) -> None:
        """Warn once per newly seen key that is not kept (non-numeric, late or colliding)."""
        dropped = []
        for source in self._sources(info):
            for path, value, _ in info_leaves(source):
                if path in self._warned or path in self.paths:
                    continue
                self._warned.add(path)
                if path in self.reserved:
                    why = "collides with an observation, reward or done key"
                elif not _numeric(value, self.num_envs):
                    why = f"is not numeric ({getattr(value, 'dtype', type(value).__name__)})"
                else:
                    why = "first appeared after the first step" if not self.declared else "is not in info_spec"
                dropped.append(f"{info_key(path)!r} {why}")
        if dropped:
            warnings.warn(
                "gymnasium backend: dropping info entries " + "; ".join(dropped) + ". Numeric entries present at "
                "the first step are kept under ('next', key); pass info_spec=Composite(...) to wrap/make to declare "
                "others. This warning is shown once per key.",
                UserWarning,
                stacklevel=5,
            )

    def warn_new_keys(self, info: Mapping) -> None:
        """Warn about entries that are not kept, once per new key set of ``info`` (cheap otherwise)."""
        keys = info.keys()
        if keys == self._last_keys:
            for value in info.values():  # a loop, not any(): no generator per step
                if value.__class__ is dict and value:
                    break
            else:
                return  # the key set of the last call, nothing nested: seen already
        self._last_keys = frozenset(keys)
        signature = _signature(info)
        if signature not in self._seen:  # a new key set: look for entries to warn about (rare)
            if len(self._seen) > 64:
                self._seen.clear()
            self._seen.add(signature)
            self._warn_dropped(info)

    def read(self, info: Mapping, same_step: bool, terminated: np.ndarray, truncated: np.ndarray) -> list[np.ndarray]:
        """This step's value of every field, in :attr:`paths` order (reused scratch arrays).

        Plain ``info`` values where present, then, on rows that ended in a same-step env,
        the ``final_info`` value where it has the key. Everything else is 0.
        """
        final = info.get("final_info") if same_step else None
        if info:
            self.warn_new_keys(info)
        ended = None
        for path, dst in zip(self.paths, self._scratch, strict=True):
            dst.fill(0)
            value = None
            try:
                value, present = _lookup(info, path)
                if value is not None:
                    _copy_rows(dst, value, present)
                if final is not None:
                    value, present = _lookup(final, path)
                    if value is not None:
                        if present is None:
                            ended = np.logical_or(terminated, truncated) if ended is None else ended
                            present = ended
                        _copy_rows(dst, value, present)
            except (TypeError, ValueError) as err:
                leaf = self.spec[info_key(path)]
                raise BackendError(
                    f"info entry {info_key(path)!r} changed: it was {numpy_dtype(leaf.dtype)} "
                    f"{(self.num_envs, *leaf.shape)} at the first step, now {getattr(value, 'dtype', type(value).__name__)} "
                    f"{getattr(value, 'shape', '')} ({err}). Make the env report it with one dtype and shape, "
                    "or declare it with info_spec=."
                ) from None
        return self._scratch


def _copy_rows(dst: np.ndarray, value: Any, rows: Any) -> None:
    if rows is None:
        np.copyto(dst, value, casting="same_kind")
    else:
        rows = np.asarray(rows, dtype=bool)
        np.copyto(dst, value, casting="same_kind", where=rows.reshape((-1,) + (1,) * (dst.ndim - 1)))
