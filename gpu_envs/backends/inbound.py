"""What the adapters of other libraries' envs share (sb3, legacy_gym, mo_gymnasium, minigrid).

* :func:`from_package`: does an object's class (or a base) come from a package? Asked
  of class modules, so a detector never imports the library to answer for objects that
  are not from it.
* :func:`registered_by`: is a gymnasium id registered by a package (its entry point
  lives there)? For ``make`` of ids that another library adds to gymnasium's registry.
* :func:`check_options`: refuse keyword arguments a backend does not take, naming those
  it does (the gymnasium plugin's check too);
* :class:`InboundPlugin`: the registry entry's common part (installed when the package
  is; ``make`` of the ids the package registers in gymnasium, where it has any).

Example::

    from_package(venv, "stable_baselines3")            # True for a DummyVecEnv
    registered_by("MiniGrid-Empty-5x5-v0", "minigrid")  # True once minigrid is imported
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any

import gymnasium

from gpu_envs.contract.errors import InvalidArgumentError

__all__ = ["InboundPlugin", "check_options", "from_package", "registered_by"]


def from_package(obj: Any, package: str, names: Iterable[str] | None = None) -> bool:
    """``type(obj)`` or a base class is defined in ``package`` (and named one of ``names``, if given)."""
    wanted = None if names is None else set(names)
    return any(
        c.__module__.split(".")[0] == package and (wanted is None or c.__name__ in wanted) for c in type(obj).__mro__
    )


def registered_by(env_id: str, package: str) -> bool:
    """``env_id`` is in gymnasium's registry with an entry point in ``package``."""
    spec = gymnasium.registry.get(env_id)
    if spec is None:
        return False
    entry = spec.entry_point if isinstance(spec.entry_point, str) else getattr(spec.entry_point, "__module__", "")
    return (entry or "").split(":")[0].split(".")[0] == package


def check_options(kwargs: dict, allowed: Iterable[str], where: str, backend: str) -> None:
    """Raise :class:`InvalidArgumentError` for keyword arguments of ``where`` not in ``allowed``."""
    allowed = sorted(allowed)
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise InvalidArgumentError(
            f"{where} got unknown keyword arguments {unknown}; the {backend} backend accepts {allowed} "
            "(plus missing_obs_value, validate, watchdog_s and seed for the BatchedEnv)."
        )


class InboundPlugin:
    """Base of the plugins for another library's envs (``name``: the backend, ``package``: the library).

    ``make`` is for ids ``package`` registers in gymnasium's registry; a plugin whose
    library registers none (SB3, gym) only wraps, and ``make`` is never reached.
    """

    name: str
    package: str

    def available(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    def env_ids(self) -> list[str]:
        return sorted(i for i in gymnasium.registry if self.can_make(i))

    def can_make(self, env_id: str) -> bool:
        """Ids whose entry point is in ``package`` (registered once it is imported)."""
        return registered_by(env_id, self.package)

    def make(self, env_id: str, num_envs: int, device: Any, **kwargs: Any) -> Any:
        raise InvalidArgumentError(
            f"the {self.name} backend wraps existing {self.package} envs (gpu_envs.wrap(env)); it makes no ids. "
            f"gpu_envs.make({env_id!r}) builds gymnasium's version of an id."
        )


class WrapOnlyPlugin:
    """Base of the plugins that only wrap env objects (``detect``/``wrap``) and make no ids.

    Always available (they import no library); ``make`` is never reached through the
    registry (``can_make`` is False) and refuses when called directly.
    """

    name: str

    def available(self) -> bool:
        return True

    def env_ids(self) -> list[str]:
        return []

    def can_make(self, env_id: str) -> bool:
        return False

    def make(self, env_id: str, num_envs: int, device: Any, **kwargs: Any) -> Any:
        raise InvalidArgumentError(
            f"the {self.name} backend wraps existing envs (gpu_envs.wrap(env)); it makes no ids ({env_id!r})."
        )
