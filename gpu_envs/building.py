"""What ``make`` and ``wrap`` check before they build anything, and how they fail.

Every argument of :func:`gpu_envs.make` / :func:`gpu_envs.wrap` is checked before a
simulator is built (:mod:`gpu_envs.arguments`, :func:`gpu_envs.devices.resolve_device`),
so a bad call leaves nothing behind. Then the build itself is translated:

* :func:`env_options` -- the keyword arguments the :class:`~gpu_envs.BatchedEnv` takes
  (``missing_obs_value``, ``validate``, ``watchdog_s``), checked;
* :func:`make_plugin` -- the backend that makes ``env_id``; a backend whose library is
  not installed is named with the ``pip install`` that brings it;
* :func:`check_kwargs` -- unknown keyword arguments are refused with the list of the
  accepted ones (where a backend can list them) instead of a ``TypeError`` from deep
  inside it;
* :func:`build` -- a missing optional package (``ModuleNotFoundError``) becomes
  :class:`~gpu_envs.errors.MissingComponentError` with its install command, an
  allocator failure a clear "too many envs for this device";
* :func:`batched` -- the :class:`~gpu_envs.BatchedEnv`, closing what was built when it
  refuses the backend (no worker process left behind).

Example::

    options = env_options(kwargs)
    plugin = make_plugin("CartPole-v1", "auto")
    raw = build("make('CartPole-v1')", lambda: plugin.make("CartPole-v1", 8, device))
    env = batched(raw, owned=True, seed=0, options=options)
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

from gpu_envs.arguments import as_bool, describe, optional_seconds
from gpu_envs.backends.base import release_simulator
from gpu_envs.env import BatchedEnv
from gpu_envs.errors import InvalidArgumentError, MissingComponentError, UnknownEnvError
from gpu_envs.memory import is_out_of_memory
from gpu_envs.registry import MAKE_ORDER, get_plugin, install_hint, plugins

__all__ = [
    "ENV_OPTIONS",
    "MIN_BYTES_PER_ENV",
    "batched",
    "build",
    "check_kwargs",
    "env_options",
    "make_plugin",
    "require_plugin",
]

# Keyword arguments consumed by BatchedEnv itself; the rest go to the backend.
ENV_OPTIONS = ("missing_obs_value", "validate", "watchdog_s")
# A lower bound of any env's memory per sub-env (its state, an observation, the done flags):
# what make() checks when a backend cannot say more.
MIN_BYTES_PER_ENV = 16


def env_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop and check the BatchedEnv's own keyword arguments from ``kwargs``."""
    options = {k: kwargs.pop(k) for k in ENV_OPTIONS if k in kwargs}
    if "validate" in options:
        options["validate"] = as_bool(options["validate"], "validate")
    if "watchdog_s" in options:
        options["watchdog_s"] = optional_seconds(options["watchdog_s"], "watchdog_s")
    value = options.get("missing_obs_value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        raise InvalidArgumentError(
            f"missing_obs_value must be a number (the placeholder of final observations a backend cannot give) or "
            f"None (NaN for floats, 0 for integers); got {describe(value)}."
        )
    return options


def require_plugin(backend: str) -> Any:
    """The plugin of ``backend``, or a clear error naming the install that brings its library."""
    plugin = get_plugin(backend)
    if not plugin.available():
        raise MissingComponentError(
            f"backend={backend!r} needs a library that is not installed here: {install_hint(backend)}."
        )
    return plugin


def make_plugin(env_id: str, backend: str) -> Any:
    """The plugin that makes ``env_id`` (``backend="auto"``: the first in make's order)."""
    auto = backend == "auto"
    candidates = [p for p in plugins(MAKE_ORDER) if p.available()] if auto else [require_plugin(backend)]
    for plugin in candidates:
        if plugin.can_make(env_id):
            return plugin
    for name, prefix in (("jax", "gymnax/"), ("isaaclab", "Isaac-")):
        if env_id.startswith(prefix) and not get_plugin(name).available():
            raise MissingComponentError(f"{env_id!r} is made by the {name} backend, whose library is not installed: {install_hint(name)}.")
    known = "; ".join(
        f"{p.name}: {', '.join(ids[:12])}{' ...' if len(ids) > 12 else ''}"
        for p in plugins(MAKE_ORDER)
        if p.available() and (ids := p.env_ids())
    )
    where = "any backend" if backend == "auto" else f"backend {backend!r}"
    raise UnknownEnvError(f"unknown env id {env_id!r} for {where}. Available ids -- {known}. `gpu-envs list` prints them all.")


def check_kwargs(plugin: Any, call: str, target: Any, kwargs: dict[str, Any]) -> None:
    """Refuse keyword arguments the backend does not take, listing those it does.

    ``call`` is ``"make"`` or ``"wrap"``; a plugin may list what it accepts with
    ``make_kwargs(env_id)`` / ``wrap_kwargs(obj)`` (None: open-ended, e.g. env kwargs).
    """
    lister = getattr(plugin, f"{call}_kwargs", None)
    accepted = lister(target) if callable(lister) else None
    if accepted is None:
        return
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        what = f"make({target!r})" if call == "make" else f"wrap({type(target).__name__})"
        raise InvalidArgumentError(
            f"{what} got unknown keyword argument(s) {', '.join(map(repr, unknown))}. The {plugin.name} backend accepts "
            f"{', '.join(accepted) or 'none'}; every env also takes {', '.join(ENV_OPTIONS)}"
            f"{', seed' if call == 'wrap' else ''} (make: num_envs, device, backend, seed)."
        )


def build(what: str, fn: Callable[[], Any], device: Any = None) -> Any:
    """Run the backend's build ``fn``, translating a missing package or an allocator failure."""
    try:
        return fn()
    except ModuleNotFoundError as err:
        name = (err.name or "").split(".")[0]
        raise MissingComponentError(
            f"{what} needs the Python package {name!r}, which is not installed: {install_hint(name)}."
        ) from err
    except TypeError as err:
        if "unexpected keyword argument" in str(err) or "got an unexpected keyword" in str(err):
            raise InvalidArgumentError(f"{what}: {err}. Check the spelling; `help(gpu_envs.make)` lists the options.") from err
        raise
    except Exception as err:
        if is_out_of_memory(err):
            raise InvalidArgumentError(
                f"{what} ran out of memory{f' on {device}' if device is not None else ''} while building the envs "
                f"({type(err).__name__}). Use fewer envs (num_envs), or another device."
            ) from err
        raise


def batched(raw: Any, *, owned: bool, seed: int | None, options: dict[str, Any]) -> BatchedEnv:
    """``BatchedEnv(raw, ...)``; if it refuses, ``raw`` is closed (``owned``) or released."""
    try:
        return BatchedEnv(raw, seed=seed, **options)
    except BaseException as err:
        if owned:
            raw.close()
        else:
            release_simulator(raw)
        if isinstance(err, Exception) and is_out_of_memory(err):
            raise InvalidArgumentError(
                f"{raw.num_envs} envs of {raw.describe()} do not fit in the memory of {raw.device} "
                f"({type(err).__name__}). Use fewer envs (num_envs)."
            ) from err
        raise

