"""TensorDicts built the cheapest way the installed ``tensordict`` allows: the ONE module that knows its internals.

Every read or write of tensordict's private layout in gpu_envs is a function here,
version-checked, with a public-API fallback (the rest of the package calls these and
never touches a ``_name`` of a TensorDict).

``BatchedEnv`` builds two TensorDicts per step (the transition's ``"next"`` and the
next root) over tensors it already knows are on the right device with the right batch
size. The public constructor re-validates every entry (~6 us), and even
``TensorDict._new_unsafe`` parses its arguments and probes the MPS backend per call.
On the tensordict versions whose instance layout is known (:data:`DIRECT_VERSIONS`), a
TensorDict is made here by filling that layout directly (four attributes, no checks);
on any other version the public constructor is used, which is always correct, only
slower. The choice is made once, at import, from the installed version
(:data:`DIRECT`); tests run both paths.

Example::

    >>> import torch
    >>> obs, done = torch.zeros(4, 3), torch.zeros(4, 1, dtype=torch.bool)
    >>> td = new_td({"observation": obs, "done": done}, torch.Size([4]), torch.device("cpu"))
    >>> td["observation"] is obs        # no copy, no check
    True
    >>> td.batch_size
    torch.Size([4])
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

import torch
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from tensordict import TensorDict, TensorDictBase

__all__ = [
    "DIRECT",
    "DIRECT_VERSIONS",
    "STAMP",
    "direct_supported",
    "entries",
    "fast_entries",
    "fast_entries_and_stamp",
    "get_entry",
    "is_non_tensor",
    "nest",
    "new_flat_td",
    "new_stamped_flat_td",
    "new_td",
    "set_entry",
    "shallow_copy",
    "stamp",
    "stamp_of",
]

# the attribute (never an entry) dating the TensorDicts the step path builds (gpu_envs.core.step_path)
STAMP = "_gpu_envs_stamp"

# Versions whose TensorDict instance is exactly {_tensordict (a plain dict of str keys),
# _batch_size, _device, _td_dim_names} and whose _set_str(key, value, validated=True,
# inplace=False) only refuses a locked TensorDict (_is_locked) or stores the value in
# _tensordict (0.15 also marks a consolidated TensorDict stale: set_entry leaves those to
# it): checked against the 0.14 sources (what CI pins) and 0.15.3's (the newest release,
# which CI's tensordict tier installs). Widen it only after reading a release's
# TensorDict._new_unsafe and _set_str.
DIRECT_VERSIONS = SpecifierSet(">=0.14,<0.16")


def direct_supported(installed: str | None) -> bool:
    """True if ``installed`` (a tensordict version string) has the known instance layout."""
    if installed is None:
        return False
    try:
        return Version(installed) in DIRECT_VERSIONS
    except InvalidVersion:
        return False


def _installed() -> str | None:
    try:
        return version("tensordict")
    except PackageNotFoundError:
        return None


DIRECT: bool = direct_supported(_installed())
_new = TensorDict.__new__


def _direct(data: dict, batch_size: torch.Size, device: torch.device) -> TensorDict:
    for key, value in data.items():
        if type(value) is dict:
            data[key] = _direct(value, batch_size, device)
    td = _new(TensorDict)
    td.__dict__ = {"_tensordict": data, "_batch_size": batch_size, "_device": device, "_td_dim_names": None}
    return td


def _direct_flat(data: dict, batch_size: torch.Size, device: torch.device) -> TensorDict:
    td = _new(TensorDict)
    td.__dict__ = {"_tensordict": data, "_batch_size": batch_size, "_device": device, "_td_dim_names": None}
    return td


def _direct_stamped_flat(data: dict, batch_size: torch.Size, device: torch.device, mark: int) -> TensorDict:
    td = _new(TensorDict)
    td.__dict__ = {
        "_tensordict": data,
        "_batch_size": batch_size,
        "_device": device,
        "_td_dim_names": None,
        STAMP: mark,
    }
    return td


def _public(data: dict, batch_size: torch.Size, device: torch.device) -> TensorDict:
    return TensorDict(data, batch_size=batch_size, device=device)


def new_td(data: dict, batch_size: torch.Size, device: torch.device) -> TensorDict:
    """A TensorDict over ``data`` (str keys; nested plain dicts become sub-TensorDicts).

    ``data`` is taken over (do not reuse it); every tensor must already have the leading
    dims ``batch_size`` and live on ``device`` -- nothing is checked on the direct path.
    """
    return _direct(data, batch_size, device) if DIRECT else _public(data, batch_size, device)


def new_flat_td(data: dict, batch_size: torch.Size, device: torch.device) -> TensorDict:
    """:func:`new_td` for ``data`` whose values are all tensors (no nested dict): no walk over the entries."""
    return _direct_flat(data, batch_size, device) if DIRECT else _public(data, batch_size, device)


def new_stamped_flat_td(data: dict, batch_size: torch.Size, device: torch.device, mark: int) -> TensorDict:
    """:func:`new_flat_td`, then :func:`stamp` with ``mark``, in one call (the step path's steady step makes two a step)."""
    if DIRECT:
        return _direct_stamped_flat(data, batch_size, device, mark)
    td = _public(data, batch_size, device)
    stamp(td, mark)
    return td


def nest(flat: dict) -> dict:
    """A flat dict with tuple keys (``("group", "x")``) as nested plain dicts, the layout :func:`new_td` takes."""
    nested: dict = {}
    for key, value in flat.items():
        if isinstance(key, tuple):
            node = nested
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = value
        else:
            nested[key] = value
    return nested


def get_entry(td: TensorDictBase, key: str) -> Any:
    """``td.get(key, None)`` for a top-level str key, without tensordict's dispatch when allowed."""
    if DIRECT and type(td) is TensorDict:
        return td._tensordict.get(key)
    return td.get(key, None)


def entries(td: TensorDictBase) -> Any:
    """Something with ``.get(str_key, None)`` over ``td``'s top-level entries: its own dict when allowed."""
    if DIRECT and type(td) is TensorDict:
        return td._tensordict
    return td


def set_entry(td: TensorDictBase, key: str, value: TensorDictBase | torch.Tensor) -> None:
    """``td.set(key, value)`` for a tensor or sub-TensorDict already of ``td``'s batch size and device.

    Nothing is checked on the direct path: an unlocked ``td`` gets the entry in its dict,
    which is all ``_set_str(key, value, validated=True, inplace=False)`` does on these
    versions; a locked one still refuses through it.
    """
    if DIRECT and type(td) is TensorDict:
        if td._is_locked or "_consolidated" in td.__dict__:
            # tensordict's own: its lock error, or a consolidated copy marked stale
            td._set_str(key, value, validated=True, inplace=False)
        else:
            td._tensordict[key] = value
    else:
        td.set(key, value)


def fast_entries(td: Any) -> dict | None:
    """A plain TensorDict's own entries dict (str keys -> values), or None where that is not allowed.

    None for any other class (a subclass, a lazy stack, a dict) and on tensordict
    versions of unknown layout: the caller then goes through the public API.
    """
    if DIRECT and td.__class__ is TensorDict:
        return td._tensordict
    return None


def fast_entries_and_stamp(td: Any) -> tuple[dict | None, int | None]:
    """``(fast_entries(td), stamp_of(td))`` in one call: the step path's steady step reads both of every input.

    ``(None, None)`` for anything but a plain TensorDict on a version of known layout
    (the caller then takes the public path, which reads the stamp itself).
    """
    if DIRECT and td.__class__ is TensorDict:
        attributes = td.__dict__
        return attributes["_tensordict"], attributes.get(STAMP)
    return None, None


def shallow_copy(td: TensorDictBase) -> TensorDictBase:
    """``td.copy()`` (a new TensorDict over the same tensors: setting an entry of one leaves the other's alone), keeping its stamp.

    A copy of a root is the same root: it keeps the root's :func:`stamp`, so an env still
    tells a stale one. A plain TensorDict whose values are all tensors is copied by its
    entries dict (~0.5 us against tensordict's ~5 us); anything else (nested entries, other
    classes) through ``td.copy()``, stamped again.
    """
    if DIRECT and td.__class__ is TensorDict:
        attributes = td.__dict__
        data = attributes["_tensordict"]
        if all(value.__class__ is torch.Tensor for value in data.values()):
            mark = attributes.get(STAMP)
            size, device = attributes["_batch_size"], attributes["_device"]
            if mark is None:
                return _direct_flat(dict(data), size, device)
            return _direct_stamped_flat(dict(data), size, device, mark)
    copy = td.copy()
    mark = stamp_of(td)
    if mark is not None:
        stamp(copy, mark)
    return copy


def stamp(td: TensorDictBase, value: int) -> None:
    """Mark ``td`` with a host integer (an attribute outside its entries: keys, clone and equality ignore it).

    Written into the instance's ``__dict__``, which bypasses tensordict's ``__setattr__``
    (that would make an entry of it).
    """
    td.__dict__[STAMP] = value


def stamp_of(td: Any) -> int | None:
    """The mark :func:`stamp` put on ``td``, or None (a TensorDict the path did not build, a copy of one)."""
    attributes = getattr(td, "__dict__", None)
    return None if attributes is None else attributes.get(STAMP)


def is_non_tensor(cls: type) -> bool:
    """True for tensordict's non-tensor entry classes (``NonTensorData``, ``NonTensorStack``): ``cls._is_non_tensor``."""
    return bool(getattr(cls, "_is_non_tensor", False))
