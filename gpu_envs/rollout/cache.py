"""What :func:`gpu_envs.rollout.collect` keeps per env: buffers, compiled loops, CUDA graphs.

``collect(env, ..., buffer=None)`` allocates one :class:`~gpu_envs.rollout.loop.RolloutBuffer`
per ``(env, steps)`` on its first call and reuses it afterwards; compiled loops (per
policy object and buffer) and captured CUDA graphs are kept the same way. All of it lives
in one :class:`CollectCache` per env, kept in the env's public ``caches`` dict (what
``BatchedEnv`` and ``TransformedEnv`` offer the layers above for per-env derived state),
so it goes away with the env.

Example::

    cache = collect_cache(env)           # created on first use
    loop = cached(cache.compiled, key, lambda loop: loop.policy is policy, build)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.rollout.loop import RolloutBuffer

__all__ = ["MAX_CACHED", "CollectCache", "cached", "collect_cache"]

MAX_CACHED = 8  # compiled loops / graphs kept per env (oldest dropped first)


class CollectCache:
    """Per-env state of :func:`collect`: buffers per ``steps``, compiled loops, graphs."""

    def __init__(self) -> None:
        self.buffers: dict[int, RolloutBuffer] = {}
        self.compiled: dict[tuple, Any] = {}
        self.graphs: dict[tuple, Any] = {}


def collect_cache(env: Any) -> CollectCache:
    """The env's :class:`CollectCache`, created on first use in ``env.caches`` (dropped with the env)."""
    caches = getattr(env, "caches", None)
    if not isinstance(caches, dict):
        raise InvalidArgumentError(
            f"collect(buffer=None) keeps its buffer in the env's `caches` dict, which a {type(env).__name__} does not "
            "have (a gpu_envs BatchedEnv or TransformedEnv does); pass buffer=RolloutBuffer(env, steps) and keep it "
            "yourself, or give the env a `caches = {}` attribute."
        )
    cache = caches.get("collect")
    if cache is None:
        cache = caches["collect"] = CollectCache()
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
