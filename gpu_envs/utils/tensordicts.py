"""TensorDicts built the cheapest way the installed ``tensordict`` allows.

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

    td = new_td({"observation": obs, "done": done}, torch.Size([n]), device)
    td["observation"] is obs        # True: no copy, no check
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
    "direct_supported",
    "entries",
    "get_entry",
    "nest",
    "new_flat_td",
    "new_td",
    "set_entry",
]

# Versions whose TensorDict instance is exactly {_tensordict (a plain dict of str keys),
# _batch_size, _device, _td_dim_names} and whose _set_str(key, value, validated=True,
# inplace=False) only refuses a locked TensorDict (_is_locked) or stores the value in
# _tensordict: checked against the 0.14 sources
# (what CI pins). Widen it only after reading a release's TensorDict._new_unsafe.
DIRECT_VERSIONS = SpecifierSet(">=0.14,<0.15")


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
        if td._is_locked:
            td._set_str(key, value, validated=True, inplace=False)  # raises tensordict's lock error
        else:
            td._tensordict[key] = value
    else:
        td.set(key, value)
