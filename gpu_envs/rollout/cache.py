"""What :func:`gpu_envs.rollout.collect` keeps per env: buffers, compiled loops, CUDA graphs.

``collect(env, ..., buffer=None)`` allocates one :class:`~gpu_envs.rollout.loop.RolloutBuffer`
per ``(env, steps)`` on its first call and reuses it afterwards; compiled loops (per
policy object and buffer) and captured CUDA graphs are kept the same way. All of it lives
in one :class:`CollectCache` stored on the env object under :data:`CACHE_ATTR`, so it goes
away with the env.

Example::

    cache = collect_cache(env)           # created on first use
    loop = cached(cache.compiled, key, lambda loop: loop.policy is policy, build)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.rollout.loop import RolloutBuffer

__all__ = ["CACHE_ATTR", "MAX_CACHED", "CollectCache", "cached", "collect_cache"]

CACHE_ATTR = "_gpu_envs_collect_cache"
MAX_CACHED = 8  # compiled loops / graphs kept per env (oldest dropped first)


class CollectCache:
    """Per-env state of :func:`collect`: buffers per ``steps``, compiled loops, graphs."""

    def __init__(self) -> None:
        self.buffers: dict[int, RolloutBuffer] = {}
        self.compiled: dict[tuple, Any] = {}
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


def cached(store: dict, key: tuple, still_valid: Callable[[Any], bool], build: Callable[[], Any]) -> Any:
    """``store[key]`` if ``still_valid`` says so, else a new ``build()`` stored there.

    Keys hold object ids (a policy, a buffer): ``still_valid`` checks the entry still
    refers to those very objects (an id can be reused once an object is gone). At most
    :data:`MAX_CACHED` entries are kept.
    """
    entry = store.get(key)
    if entry is None or not still_valid(entry):
        store.pop(key, None)
        if len(store) >= MAX_CACHED:
            store.pop(next(iter(store)))
        entry = store[key] = build()
    return entry
