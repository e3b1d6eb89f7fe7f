"""Known foreign vector envs whose auto-reset no backend handles: recognised, and refused with the fix.

Several backends recognise an env by its shape (``num_envs``, ``reset``, ``step``,
``single_observation_space``...). Some envs have that shape but reset in a way the
shape does not tell, and a backend that claimed them would hand out wrong transitions
without a word. The ones known are recognised here, by class module (nothing is
imported), before any backend looks at them (first in the registry's ``wrap`` order):

* PufferLib's vector envs (``pufferlib.vector.Serial``, ``Multiprocessing``, ``Ray``):
  an ended sub-env is reset on the NEXT ``send``/``step`` -- that step's action is
  ignored and the reset observation comes back with reward 0 -- and the vector env
  declares none of it (no ``autoreset_mode``) and cannot reset one sub-env by itself.
  Wrapped as a same-step torch vector env, every episode would get a fake reward-0
  step. PufferLib's native envs (``pufferlib.PufferEnv``) reset inside their C step and
  keep no final observation, with one row per agent rather than per env; its emulation
  layer (``GymnasiumPufferEnv``) batches one env's flattened observation as one agent
  (``[1, ...]``) and refuses to step after an end: wrap the gymnasium env inside it.
* gym vector envs of the pre-0.26 API (a ``gym.vector.VectorEnv`` without
  ``single_observation_space`` / ``single_action_space``, e.g. Brax's
  ``VectorGymWrapper``): ``reset`` returns the observation alone and ``step`` a 4-tuple
  with one ``done``, so terminations and truncations cannot be told apart.

:func:`refusal` is the predicate (``None`` for every other object); a backend's detector
may call it to decline these envs (``backend="torch"`` given explicitly skips the
registry's order). :data:`PLUGIN` is the registry entry: it detects them and raises the
error, so ``gpu_envs.wrap`` never lets a raw ``AttributeError``/``TypeError`` out and never
wraps them wrongly.

Example::

    refusal(pufferlib.vector.make(creator, backend=pufferlib.vector.Serial, num_envs=4))  # the message
    refusal(gymnasium.make_vec("CartPole-v1", 4))                                        # None
"""

from __future__ import annotations

from typing import Any

from gpu_envs.backends.inbound import WrapOnlyPlugin
from gpu_envs.contract.errors import AutoresetModeError, NotAnEnvError

__all__ = ["PLUGIN", "ForeignPlugin", "is_known_foreign", "refusal"]

_PUFFER_VECTOR = {("pufferlib.vector", name) for name in ("Serial", "Multiprocessing", "Ray")}
_PUFFER_NATIVE = ("pufferlib.pufferlib", "PufferEnv")
_PUFFER_EMULATED = {("pufferlib.emulation", "GymnasiumPufferEnv"), ("pufferlib.emulation", "PettingZooPufferEnv")}

_PUFFER_FIX = (
    "gpu_envs turns next-step resets into exact transitions only where it can reset one sub-env by itself: build "
    "the envs as gymnasium envs and let gpu_envs vectorise them (gpu_envs.make(env_id, num_envs=N, "
    "backend='gymnasium'), gpu_envs.wrap(gymnasium.vector.SyncVectorEnv([...])), or gpu_envs.wrap_ray(...) for many "
    "processes)."
)


def _classes(obj: Any) -> set[tuple[str, str]]:
    return {(c.__module__, c.__qualname__) for c in type(obj).__mro__}


def _missing(obj: Any, names: tuple[str, ...]) -> list[str]:
    out = []
    for name in names:
        try:
            getattr(obj, name)
        except Exception:  # AttributeError, or a property that raises: either way not there
            out.append(name)
    return out


def refusal(obj: Any) -> tuple[type[Exception], str] | None:
    """``(error class, message)`` for a known foreign env no backend may claim, else ``None``."""
    classes = _classes(obj)
    if classes & _PUFFER_VECTOR:
        return AutoresetModeError, (
            f"{type(obj).__module__}.{type(obj).__name__} is a PufferLib vector env: it resets an ended sub-env on the "
            "NEXT step, ignoring that step's action and returning the reset observation with reward 0, without "
            "declaring it (no autoreset_mode), and it cannot reset one sub-env by itself. Wrapped as it is, every "
            f"episode would gain a fake reward-0 transition. {_PUFFER_FIX}"
        )
    if classes & _PUFFER_EMULATED:
        return NotAnEnvError, (
            f"{type(obj).__name__} is PufferLib's emulation of one env as a one-agent batch (flattened observations, "
            "no step after an episode end). Wrap the env inside it instead: gpu_envs.wrap(puffer_env.env), or "
            f"vectorise the gymnasium env with gpu_envs. {_PUFFER_FIX}"
        )
    if _PUFFER_NATIVE in classes:
        return NotAnEnvError, (
            f"{type(obj).__name__} is a native PufferLib env: it resets ended agents inside its C step and keeps no "
            "final observation, and its rows are agents, not envs. gpu_envs does not wrap native PufferEnvs yet; "
            f"{_PUFFER_FIX}"
        )
    if any(module.split(".")[0] == "gym" and name == "VectorEnv" for module, name in classes):
        missing = _missing(obj, ("num_envs", "single_observation_space", "single_action_space"))
        if missing:
            return NotAnEnvError, (
                f"{type(obj).__module__}.{type(obj).__name__} is a gym VectorEnv without {', '.join(missing)}: the "
                "pre-0.26 gym vector API (reset returns the observation alone, step one `done` that mixes "
                "terminations and time limits), which gpu_envs cannot turn into exact transitions. Use a gymnasium "
                "(or gym >= 0.26) vector env, or the simulator's own functional API where it has one (Brax: "
                "gpu_envs.wrap(brax.envs.get_environment(name), num_envs=N))."
            )
    return None


def is_known_foreign(obj: Any) -> bool:
    """True for the envs :func:`refusal` refuses: what a shape-based detector must decline."""
    return refusal(obj) is not None


class ForeignPlugin(WrapOnlyPlugin):
    """Registry entry for ``wrap`` only: recognises the envs above and raises their error."""

    name = "foreign"
    makes_backends = False  # it only refuses: no Backend of its own, no row in the docs' backend table

    def make(self, env_id: str, num_envs: int, device: Any, **kwargs: Any) -> Any:
        raise NotAnEnvError(
            f"the foreign entry only recognises env objects gpu_envs refuses; it makes no ids ({env_id!r})."
        )

    def detect(self, obj: Any) -> bool:
        return is_known_foreign(obj)

    def wrap(self, obj: Any, device: Any, **kwargs: Any) -> Any:
        found = refusal(obj)
        if found is None:  # asked directly (backend="foreign") about an env it does not refuse
            raise NotAnEnvError(
                f"{type(obj).__name__} is not one of the foreign envs this entry refuses; use backend='auto'."
            )
        error, message = found
        raise error(message)


PLUGIN = ForeignPlugin()
