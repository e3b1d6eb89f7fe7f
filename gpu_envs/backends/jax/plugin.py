"""The JAX backend's registry entry: detection, ``make`` by id, ``wrap`` of JAX env objects.

Detection never imports JAX: it looks at class and module names. What is wrapped and
why is in the package docstring (:mod:`gpu_envs.backends.jax`); the backend itself is
:mod:`.backend`.

Example::

    backend = PLUGIN.make("phys2d/CartPole-v1", num_envs=64, device=torch.device("cpu"))
    backend = wrap_jax(gymnax.make("Pendulum-v1"), num_envs=64)
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from gpu_envs.backends.base import Backend
from gpu_envs.backends.jax.backend import JaxBackend, prepare_jax
from gpu_envs.backends.jax.brax import BRAX_PREFIX, PLAYGROUND_PREFIX, brax_env_ids, is_brax_family, is_brax_id, refusal
from gpu_envs.backends.jax.jaxmarl import (
    JAXMARL_PREFIX,
    is_jaxmarl_env,
    jaxmarl_env_ids,
    jaxmarl_refusal,
)
from gpu_envs.contract.errors import InvalidArgumentError, NotAnEnvError
from gpu_envs.utils.arguments import as_int

__all__ = ["GYMNAX_PREFIX", "PLUGIN", "JaxPlugin", "is_functional_jax_id", "looks_like_jax_env", "wrap_jax"]

GYMNAX_PREFIX = "gymnax/"
_FUNC_VECTOR = ("gymnasium.envs.functional_jax_env", "FunctionalJaxVectorEnv")
_FUNC_SINGLE = ("gymnasium.envs.functional_jax_env", "FunctionalJaxEnv")
_GYMNAX_ENV = ("gymnax.environments.environment", "Environment")
_GYMNAX_PURERL = ("gymnax.wrappers.purerl", "GymnaxWrapper")
_GYMNAX_GYM = ("gymnax.wrappers.gym", "GymnaxToGymWrapper")
_GYMNAX_GYM_VECTOR = ("gymnax.wrappers.gym", "GymnaxToVectorGymWrapper")


# --------------------------------------------------------------- detection (no jax import)
def _has_class(obj: Any, target: tuple[str, str]) -> bool:
    return any((c.__module__, c.__qualname__) == target for c in type(obj).__mro__)


def _is_gymnax_env(obj: Any) -> bool:
    return _has_class(obj, _GYMNAX_ENV) or _has_class(obj, _GYMNAX_PURERL)


def _is_gymnax_pair(obj: Any) -> bool:
    return isinstance(obj, tuple) and len(obj) == 2 and _is_gymnax_env(obj[0])


def _unwrapped(obj: Any) -> Any:
    try:
        return getattr(obj, "unwrapped", obj)
    except Exception:  # a broken wrapper property must not break detection
        return obj


def looks_like_jax_env(obj: Any) -> bool:
    """True for the objects this backend wraps (or refuses with a specific fix)."""
    if _is_gymnax_env(obj) or _is_gymnax_pair(obj):
        return True
    if is_brax_family(obj) or refusal(obj) is not None:  # Brax / Playground (see .brax)
        return True
    if is_jaxmarl_env(obj) or jaxmarl_refusal(obj) is not None:  # JaxMARL (see .jaxmarl)
        return True
    if _has_class(obj, _GYMNAX_GYM) or _has_class(obj, _GYMNAX_GYM_VECTOR):
        return True
    inner = _unwrapped(obj)
    return _has_class(inner, _FUNC_VECTOR) or _has_class(inner, _FUNC_SINGLE)


def is_functional_jax_id(env_id: str) -> bool:
    """True for gymnasium ids whose vector env is a ``FunctionalJaxVectorEnv`` (``phys2d/...``).

    Only this backend steps them exactly; other backends should decline these ids. Loading
    the entry point imports jax; without jax the answer is False.
    """
    import gymnasium as gym

    spec = gym.registry.get(env_id)
    entry = getattr(spec, "vector_entry_point", None)
    if entry is None:
        return False
    if isinstance(entry, str):
        from gymnasium.envs.registration import load_env_creator

        prepare_jax()  # loading a functional JAX entry point imports jax
        try:
            entry = load_env_creator(entry)
        except Exception:  # jax missing, or a module that cannot import: not ours to make
            return False
    return isinstance(entry, type) and any((c.__module__, c.__qualname__) == _FUNC_VECTOR for c in entry.__mro__)


# ------------------------------------------------------------------------- builders
def _gymnax_params(env: Any, params: Any, overrides: Any) -> Any:
    params = env.default_params if params is None else params
    if overrides is None:
        return params
    if isinstance(overrides, Mapping):
        try:
            return params.replace(**overrides)
        except (TypeError, ValueError) as err:
            raise InvalidArgumentError(
                f"env_params={dict(overrides)!r} does not fit {type(params).__name__}: {err}. "
                f"Its fields are those of {params!r}."
            ) from None
    return overrides


def _check_num_envs(num_envs: Any) -> int:
    return as_int(
        num_envs,
        "num_envs",
        minimum=1,
        hint="gymnax envs are single envs: tell gpu_envs how many to batch, e.g. "
        "gpu_envs.wrap(gymnax.make('CartPole-v1'), num_envs=64).",
    )


def wrap_jax(
    obj: Any, device: torch.device | None = None, *, num_envs: Any = None, env_params: Any = None, **kwargs: Any
) -> JaxBackend:
    """Build the backend for a detected JAX env object (see the module docstring)."""
    prepare_jax()
    from gpu_envs.backends.jax.cores import FuncEnvCore, GymnaxCore

    message = refusal(obj) or jaxmarl_refusal(obj)
    if message is not None:
        raise NotAnEnvError(message)
    if is_jaxmarl_env(obj):
        from gpu_envs.backends.jax.jaxmarl import CORE_OPTIONS as JAXMARL_OPTIONS
        from gpu_envs.backends.jax.jaxmarl import make_jaxmarl_core

        core_kw = {k: kwargs.pop(k) for k in JAXMARL_OPTIONS if k in kwargs}
        if env_params is not None:
            raise InvalidArgumentError("env_params applies to gymnax envs; configure JaxMARL envs when building them.")
        return JaxBackend(make_jaxmarl_core(obj, num_envs, **core_kw), device, **kwargs)
    if is_brax_family(obj):
        from gpu_envs.backends.jax.brax import CORE_OPTIONS, make_brax_core

        core_kw = {k: kwargs.pop(k) for k in CORE_OPTIONS if k in kwargs}
        if env_params is not None:
            raise InvalidArgumentError(
                "env_params applies to gymnax envs; configure Brax/Playground envs when building them."
            )
        return JaxBackend(make_brax_core(obj, num_envs, **core_kw), device, **kwargs)
    if _is_gymnax_pair(obj):
        env, params = obj
        core = GymnaxCore(
            env, _gymnax_params(env, params, env_params), _check_num_envs(num_envs if num_envs is not None else 1)
        )
        return JaxBackend(core, device, **kwargs)
    if _is_gymnax_env(obj):
        core = GymnaxCore(
            obj, _gymnax_params(obj, None, env_params), _check_num_envs(num_envs if num_envs is not None else 1)
        )
        return JaxBackend(core, device, **kwargs)
    if _has_class(obj, _GYMNAX_GYM) or _has_class(obj, _GYMNAX_GYM_VECTOR):
        raise NotAnEnvError(
            f"{type(obj).__name__} hides gymnax's functional API behind a gymnasium interface that gpu_envs would "
            "have to drive one host call at a time. Wrap the gymnax env itself: "
            "gpu_envs.wrap((env, env_params), num_envs=N), e.g. gpu_envs.wrap(gymnax.make('CartPole-v1'), num_envs=N)."
        )
    inner = _unwrapped(obj)
    if _has_class(inner, _FUNC_SINGLE) and not _has_class(inner, _FUNC_VECTOR):
        raise NotAnEnvError(
            f"{type(inner).__name__} is a single functional JAX env. Build the vector one: "
            'gpu_envs.make("<id>", num_envs=N) or gpu_envs.wrap(gymnasium.make_vec("<id>", num_envs=N)).'
        )
    if inner is not obj:
        raise NotAnEnvError(
            f"{type(obj).__name__} wraps a {type(inner).__name__}; gpu_envs drives the functional JAX env itself "
            "and would silently skip the wrapper's logic. Wrap env.unwrapped and apply the wrapper's job as a "
            "gpu_envs/TensorDict transform instead."
        )
    if num_envs is not None and num_envs != inner.num_envs:
        raise InvalidArgumentError(f"num_envs={num_envs} does not match the vector env's num_envs={inner.num_envs}.")
    if env_params is not None:
        raise InvalidArgumentError(
            "env_params applies to gymnax envs; pass gymnasium env kwargs to gymnasium.make_vec instead."
        )
    return JaxBackend(FuncEnvCore(inner), device, **kwargs)


class JaxPlugin:
    """Registry entry: ``make`` for functional-JAX gymnasium ids, gymnax, Brax, Playground and JaxMARL ids, ``wrap`` for JAX env objects."""

    name = "jax"

    def available(self) -> bool:
        return importlib.util.find_spec("jax") is not None

    @staticmethod
    def _gymnax_ids() -> list[str]:
        if importlib.util.find_spec("gymnax") is None:
            return []
        prepare_jax()
        try:
            import gymnax
        except ImportError as err:  # installed without a dependency it imports: unusable
            warnings.warn(
                f"gymnax is installed but cannot be imported ({err}); its envs are not offered.", stacklevel=2
            )
            return []
        return list(gymnax.registered_envs)

    def env_ids(self) -> list[str]:
        import gymnasium as gym

        ids = [i for i, spec in gym.registry.items() if spec.vector_entry_point is not None and is_functional_jax_id(i)]
        return sorted(ids) + [GYMNAX_PREFIX + i for i in self._gymnax_ids()] + brax_env_ids() + jaxmarl_env_ids()

    def can_make(self, env_id: str) -> bool:
        import gymnasium as gym

        if env_id.startswith(GYMNAX_PREFIX):
            return env_id[len(GYMNAX_PREFIX) :] in self._gymnax_ids()
        if env_id.startswith((BRAX_PREFIX, PLAYGROUND_PREFIX)):
            return is_brax_id(env_id)
        if env_id.startswith(JAXMARL_PREFIX):  # the prefix is JaxMARL's: make() lists its ids, or what to install
            return True
        if env_id in gym.registry:
            return is_functional_jax_id(env_id)
        return env_id in self._gymnax_ids()

    def claims(self, env_id: str) -> bool:
        """gymnasium's functional JAX envs are this backend's alone (``gpu_envs.registry.may_make``)."""
        return is_functional_jax_id(env_id)

    def make(self, env_id: str, num_envs: int, device: torch.device, **kwargs: Any) -> Backend:
        prepare_jax()
        backend_kw = {k: kwargs.pop(k) for k in ("seed", "expose_info") if k in kwargs}
        if env_id.startswith((BRAX_PREFIX, PLAYGROUND_PREFIX)):
            from gpu_envs.backends.jax.brax import make_brax_env

            env, core_options = make_brax_env(env_id, kwargs)
            return wrap_jax(env, device, num_envs=num_envs, **core_options, **backend_kw)
        if env_id.startswith(JAXMARL_PREFIX):
            from gpu_envs.backends.jax.jaxmarl import make_jaxmarl_env

            env, core_options = make_jaxmarl_env(env_id, kwargs)
            return wrap_jax(env, device, num_envs=num_envs, **core_options, **backend_kw)
        gymnax_id = env_id[len(GYMNAX_PREFIX) :] if env_id.startswith(GYMNAX_PREFIX) else None
        if gymnax_id is None and not is_functional_jax_id(env_id):
            gymnax_id = env_id
        if gymnax_id is not None:
            import gymnax

            env_params = kwargs.pop("env_params", None)
            env, params = gymnax.make(gymnax_id, **kwargs)
            return wrap_jax((env, params), device, num_envs=num_envs, env_params=env_params, **backend_kw)
        import gymnasium as gym

        with warnings.catch_warnings():
            # gymnasium warns that phys2d/Pendulum-v0's vector env lacks autoreset metadata; this
            # backend never uses that env's own reset logic (see FuncEnvCore), so the warning is moot.
            warnings.filterwarnings("ignore", message=".*missing AutoresetMode metadata.*")
            vector_env = gym.make_vec(env_id, num_envs=num_envs, **kwargs)
        return wrap_jax(vector_env, device, **backend_kw)

    def detect(self, obj: Any) -> bool:
        return looks_like_jax_env(obj)

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Backend:
        return wrap_jax(obj, device, **kwargs)


PLUGIN = JaxPlugin()
