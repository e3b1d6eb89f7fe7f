"""Observation keys as transforms take them (a string, a tuple of strings for a nested entry, or a list of
them), and the cheapest reads and writes of one entry of a step's TensorDict.

Example::

    >>> from gpu_envs.transforms.keys import as_keys, next_key
    >>> as_keys("observation", "History")
    ['observation']
    >>> next_key(("policy", "joint_pos"))
    ('next', 'policy', 'joint_pos')
"""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.utils.tensordicts import get_entry, set_entry

__all__ = ["Key", "as_keys", "is_key", "next_key", "read", "write"]

Key = str | tuple[str, ...]


def is_key(key: object) -> bool:
    """True for a TensorDict key: a string, or a non-empty tuple of strings."""
    return isinstance(key, str) or (isinstance(key, tuple) and bool(key) and all(isinstance(k, str) for k in key))


def next_key(key: Key) -> tuple[str, ...]:
    """The key of ``key``'s value in a transition's ``"next"`` part."""
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


def as_keys(keys: object, owner: str) -> list[Key]:
    """``keys`` (a key or a collection of keys) as a list of distinct keys, or an error naming ``owner``."""
    items = (
        [keys] if isinstance(keys, (str, tuple)) else list(keys) if isinstance(keys, (list, set, frozenset)) else keys
    )
    if not isinstance(items, list) or not items or not all(is_key(k) for k in items):
        raise InvalidArgumentError(
            f"{owner} keys must be an observation key (a string, or a tuple of strings for a nested entry) or a "
            f"non-empty list of them; got {keys!r}."
        )
    if len(set(items)) != len(items):
        raise InvalidArgumentError(f"{owner} keys {keys!r} name a key twice; list each key once.")
    return cast(list[Key], items)


def read(td: TensorDictBase, key: Key, *, nxt: bool = False) -> Any:
    """``td[key]`` (``td["next", key]`` with ``nxt``), through :mod:`gpu_envs.utils.tensordicts`'s fast path for str keys.

    A per-step transform reads and writes a few entries of every step: tensordict's
    general ``get``/``set`` (key parsing, validation) cost more than the tensor ops there.
    """
    if isinstance(key, str):
        return get_entry(get_entry(td, "next"), key) if nxt else get_entry(td, key)
    return td.get(next_key(key) if nxt else key)


def write(td: TensorDictBase, key: Key, value: torch.Tensor, *, nxt: bool = False) -> None:
    """``td[key] = value`` (``td["next", key]`` with ``nxt``) for a tensor of ``td``'s batch size and device."""
    if isinstance(key, str):
        set_entry(get_entry(td, "next") if nxt else td, key, value)
    else:
        td.set(next_key(key) if nxt else key, value)
