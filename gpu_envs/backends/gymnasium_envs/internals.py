"""gymnasium's private names the gymnasium backend reads, through ONE version-checked function.

Timeouts and recovery of ``AsyncVectorEnv`` workers (:mod:`.workers`) need two things
gymnasium does not make public: which call is in flight (``AsyncVectorEnv._state``) and
its worker loop (``gymnasium.vector.async_vector_env._async_worker``, wrapped so that
workers ignore SIGINT and die with their parent); the vector ``RecordEpisodeStatistics``
names its info entry in ``_stats_key`` (:mod:`.vector`). Every such read goes through
:func:`private`, so that:

* they are found in one place when gymnasium changes;
* a gymnasium outside the versions whose sources were read (:data:`KNOWN_VERSIONS`) is
  warned about once, and a name it no longer has is a
  :class:`~gpu_envs.contract.errors.BackendError` naming the version and the fix,
  instead of an ``AttributeError`` deep inside a step.

Example::

    state = private(venv, "_state")          # an AsyncState
    worker = private(async_vector_env, "_async_worker")
"""

from __future__ import annotations

import functools
import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from gpu_envs.contract.errors import BackendError

__all__ = ["KNOWN_VERSIONS", "gymnasium_version", "private"]

# The gymnasium releases whose sources these reads were checked against (1.1 added the
# AutoresetMode the backend relies on; 1.4.0 is what CI pins).
KNOWN_VERSIONS = SpecifierSet(">=1.1,<1.5")


@functools.cache
def gymnasium_version() -> str:
    """The installed gymnasium's version string (``"unknown"`` when its metadata is missing)."""
    try:
        return version("gymnasium")
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def _known() -> bool:
    """True for a version in :data:`KNOWN_VERSIONS`; warns once otherwise."""
    installed = gymnasium_version()
    try:
        known = Version(installed) in KNOWN_VERSIONS
    except InvalidVersion:
        known = False
    if not known:
        warnings.warn(
            f"gymnasium {installed} is outside the versions gpu_envs' gymnasium backend was checked against "
            f"({KNOWN_VERSIONS}); it reads a few private names of gymnasium's vector envs (async worker state, "
            "the episode-statistics key), which may have changed.",
            stacklevel=3,
        )
    return known


def private(obj: Any, name: str) -> Any:
    """``getattr(obj, name)`` for a private name of gymnasium's, checked against the installed version.

    Raises :class:`BackendError` naming the gymnasium version when the name is gone.
    """
    _known()
    try:
        return getattr(obj, name)
    except AttributeError:
        owner = obj.__name__ if isinstance(obj, type) or hasattr(obj, "__file__") else type(obj).__name__
        raise BackendError(
            f"gymnasium {gymnasium_version()} has no {owner}.{name}, which gpu_envs' gymnasium backend reads (it was "
            f"checked against gymnasium {KNOWN_VERSIONS}). Install a gymnasium in that range, or use "
            "vectorization='sync' (async workers need it)."
        ) from None
