"""What :func:`gpu_envs.rollout.collect` keeps per env: buffers, compiled steps, CUDA graphs.

``collect(env, ..., buffer=None)`` allocates one :class:`~gpu_envs.rollout_loop.RolloutBuffer`
per ``(env, steps)`` on its first call and reuses it afterwards; compiled step functions
(per policy object) and captured CUDA graphs are kept the same way. All of it lives in
one :class:`CollectCache` stored on the env object under :data:`CACHE_ATTR`, so it goes
away with the env. :mod:`gpu_envs.rollout_graph` reads it too (and skips it when it
scans the env's state).

Example::

    cache = collect_cache(env)           # created on first use
    step, warmed = compiled_step(env, policy)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gpu_envs.errors import InvalidArgumentError
from gpu_envs.rollout_loop import Policy, RolloutBuffer, make_step

__all__ = ["CACHE_ATTR", "CollectCache", "collect_cache", "compiled_step"]

CACHE_ATTR = "_gpu_envs_collect_cache"
MAX_CACHED_POLICIES = 8


class CollectCache:
    """Per-env state of :func:`collect`: buffers per ``steps``, compiled steps, graphs."""

    def __init__(self) -> None:
        self.buffers: dict[int, RolloutBuffer] = {}
        self.compiled: dict[int, tuple[Any, Callable, list]] = {}
        self.graphs: dict[tuple, Any] = {}


def collect_cache(env: Any) -> CollectCache:
    """The env's :class:`CollectCache`, created (and stored on the env) on first use."""
    cache = getattr(env, CACHE_ATTR, None)
    if cache is None:
        cache = CollectCache()
        try:
            setattr(env, CACHE_ATTR, cache)
        except AttributeError as err:
            raise InvalidArgumentError(
                f"collect(buffer=None) caches its buffer on the env, but {type(env).__name__} refuses new attributes; "
                "pass buffer=RolloutBuffer(env, steps) and keep it yourself."
            ) from err
    return cache


def compiled_step(env: Any, policy: Policy | None) -> tuple[Callable, list]:
    """``torch.compile`` of :func:`make_step`, cached per (env, policy); ``[warmed]`` flag."""
    entries = collect_cache(env).compiled
    entry = entries.get(id(policy))
    if entry is None or entry[0] is not policy:
        if len(entries) >= MAX_CACHED_POLICIES:
            entries.pop(next(iter(entries)))
        entry = (policy, torch.compile(make_step(env, policy), dynamic=False), [False])
        entries[id(policy)] = entry
    return entry[1], entry[2]
