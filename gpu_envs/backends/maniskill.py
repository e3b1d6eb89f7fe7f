"""ManiSkill3 envs: the vector env as it is, the bare env routed through it, ``make`` by ManiSkill id.

ManiSkill3's ``ManiSkillVectorEnv`` is a torch vector env (tensors on the simulation
device) that resets ended rows inside ``step`` and, on steps where some row ended, puts a
clone of the pre-reset observation in ``info["final_observation"]`` (masked by
``info["_final_observation"]``): the torch backend (:mod:`gpu_envs.backends.torch_envs`)
reads it, so its transitions carry the TRUE final observation. This module makes sure
every ManiSkill object gets there in that shape:

* ``gpu_envs.wrap(ManiSkillVectorEnv(...))``: to the torch backend. One built with
  ``auto_reset=False`` never resets, while still declaring same-step auto-reset, so its
  ended rows would be stepped on past their end: it is refused with the fix.
* ``gpu_envs.wrap(gym.make("PickCube-v1", ...))`` (the bare env, batched observations
  ``[num_envs, 42]`` behind a single-env interface): put in a ``ManiSkillVectorEnv``
  (``auto_reset=True``, ``ignore_terminations=False``), then to the torch backend --
  instead of the gymnasium backend adding a second batch dimension (``[N, 1, 42]``).
* ``gpu_envs.make("PickCube-v1", num_envs=N, backend="maniskill", sim_backend="physx_cpu",
  render_backend="none")``: ManiSkill's ids (registered in gymnasium's registry when
  ``mani_skill.envs`` is imported) built as a ``ManiSkillVectorEnv``; keyword arguments
  go to ``gym.make``. ``backend="auto"`` finds them too. ``enhanced_determinism`` defaults
  to True there: ManiSkill's resets without a seed -- every auto-reset -- otherwise draw
  from torch's global RNG, so the same seed would not repeat a run past the first episode
  (an env you build and wrap keeps whatever you chose).

Detection looks at class modules (``mani_skill.*``): ManiSkill is imported only to wrap
or make its own envs. Options of the torch backend (``copy_buffers``...) pass through.

Example::

    env = gpu_envs.make("PickCube-v1", num_envs=1, sim_backend="physx_cpu", render_backend="none", seed=0)
    td = env.rollout(100)      # ("next", "observation") is the true final one where an episode ended
"""

from __future__ import annotations

from typing import Any

import gymnasium
import torch

from gpu_envs.backends.base import Backend
from gpu_envs.backends.inbound import InboundPlugin
from gpu_envs.backends.torch_envs import TorchVectorBackend  # ManiSkill's vector env is stepped as a torch vector env
from gpu_envs.contract.errors import AutoresetModeError, InvalidArgumentError

__all__ = ["PLUGIN", "ManiSkillPlugin", "is_bare_maniskill_env", "is_maniskill_vector_env", "vector_env_of"]

_VECTOR = ("mani_skill.vector.wrappers.gymnasium", "ManiSkillVectorEnv")
_BASE_ENV = ("mani_skill.envs.sapien_env", "BaseEnv")


def _has_class(obj: Any, target: tuple[str, str]) -> bool:
    return any((c.__module__, c.__qualname__) == target for c in type(obj).__mro__)


def _unwrapped(obj: Any) -> Any:
    try:
        return getattr(obj, "unwrapped", obj)
    except Exception:  # a broken wrapper property must not break detection
        return obj


def _registered_by_maniskill(spec: Any) -> bool:
    """A gymnasium registry entry of ManiSkill's (its entry point is a ``functools.partial`` of its ``make``)."""
    entry = spec.entry_point
    if isinstance(entry, str):
        return entry.split(":")[0].split(".")[0] == "mani_skill"
    return getattr(getattr(entry, "func", entry), "__module__", "").split(".")[0] == "mani_skill"


def is_maniskill_vector_env(obj: Any) -> bool:
    """A ``ManiSkillVectorEnv`` (or a subclass)."""
    return _has_class(obj, _VECTOR)


def is_bare_maniskill_env(obj: Any) -> bool:
    """A ManiSkill task env (``gym.make`` of a ManiSkill id, gymnasium wrappers included), not yet vectorised."""
    return not is_maniskill_vector_env(obj) and _has_class(_unwrapped(obj), _BASE_ENV)


def vector_env_of(obj: Any) -> Any:
    """The ``ManiSkillVectorEnv`` to hand to the torch backend (``obj`` itself, or around the bare env)."""
    if is_maniskill_vector_env(obj):
        if not getattr(obj, "auto_reset", True):
            raise AutoresetModeError(
                "this ManiSkillVectorEnv was built with auto_reset=False: it never resets ended rows, yet declares "
                "same-step auto-reset, so gpu_envs would step them on past their end. Build it with auto_reset=True "
                "(the default): ended rows are reset in the same step and their true final observations kept."
            )
        return obj
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

    try:
        return ManiSkillVectorEnv(obj, auto_reset=True, ignore_terminations=False, record_metrics=False)
    except AssertionError as err:  # ManiSkill refuses partial resets of an env that reconfigures itself
        raise InvalidArgumentError(
            f"ManiSkill cannot auto-reset this env row by row ({err or 'reconfiguration_freq != 0'}): build it with "
            "reconfiguration_freq=0 (gym.make(id, num_envs=N, reconfiguration_freq=0)), or with num_envs=1."
        ) from err


class ManiSkillPlugin(InboundPlugin):
    """Registry entry: ManiSkill's vector and bare envs for ``wrap``, its ids for ``make``."""

    name = "maniskill"
    package = "mani_skill"

    def _registered(self) -> None:
        import mani_skill.envs  # noqa: F401 - registers ManiSkill's ids in gymnasium's registry  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

    def env_ids(self) -> list[str]:
        if not self.available():
            return []
        self._registered()
        return sorted(i for i, spec in gymnasium.registry.items() if _registered_by_maniskill(spec))

    def can_make(self, env_id: str) -> bool:
        if env_id not in gymnasium.registry and self.available():
            self._registered()
        spec = gymnasium.registry.get(env_id)
        return spec is not None and _registered_by_maniskill(spec)

    def make(self, env_id: str, num_envs: int, device: torch.device, **kwargs: Any) -> Backend:
        from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

        backend_kw = {k: kwargs.pop(k) for k in ("copy_buffers",) if k in kwargs}
        self._registered()
        # seeded runs repeat: ManiSkill's seedless (auto-)resets otherwise draw from torch's global RNG
        kwargs.setdefault("enhanced_determinism", True)
        vector = ManiSkillVectorEnv(env_id, num_envs=num_envs, **kwargs)
        try:
            return TorchVectorBackend(vector, device, **backend_kw)
        except BaseException:
            vector.close()
            raise

    def detect(self, obj: Any) -> bool:
        return is_maniskill_vector_env(obj) or is_bare_maniskill_env(obj)

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Backend:
        return TorchVectorBackend(vector_env_of(obj), device, **kwargs)


PLUGIN = ManiSkillPlugin()
