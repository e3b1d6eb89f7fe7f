"""Brax and MuJoCo Playground envs through the JAX backend: detection, unwrapping, ``make`` by id.

``gpu_envs.wrap(env, num_envs=N)`` takes an unbatched Brax ``Env`` (``brax.envs.get_environment``)
or Playground ``MjxEnv`` (``mujoco_playground.registry.load``) and runs N copies in one
jitted XLA call per step, with gpu_envs' own same-step auto-reset that keeps the TRUE final
observation (:mod:`gpu_envs.backends.jax.brax_core`; Brax's and Playground's auto-reset
wrappers overwrite it). ``gpu_envs.make("brax/<name>", num_envs=N)`` and
``gpu_envs.make("playground/<name>", num_envs=N)`` build the env first.

The output of their own training wrappers (``brax.envs.create(..., batch_size=N)``,
``brax.envs.training.wrap``, Playground's ``wrap_for_brax_training``) is accepted too:
gpu_envs peels ``AutoResetWrapper`` / ``BraxAutoResetWrapper`` (replaced by its own),
``EpisodeWrapper`` (its ``episode_length`` and ``action_repeat`` are kept) and
``VmapWrapper`` (its ``batch_size`` is ``num_envs``) and runs the env inside. Domain
randomization (``training.wrap(env, randomization_fn=fn)``, Playground's
``wrap_for_brax_training(env, randomization_fn=fn)``) runs too: row ``i`` steps with model
``i`` of the wrapper's batched models, swapped in by the wrapper's own ``v_env_fn``, and
``num_envs`` is their batch size; the models stay with their rows (a snapshot restores a
row's state, not its model). Playground's ``MadronaWrapper`` and unknown wrappers above the
batching are refused (their logic would be skipped); Brax's gym wrappers (``GymWrapper``, ``VectorGymWrapper``, the torch and
dm_env ones) and Playground's ``RSLRLBraxWrapper`` are refused with the call to make
instead: they drive the env one host call at a time and drop the final observation.

Options: ``num_envs``, ``episode_length`` (default: the ``EpisodeWrapper``'s, else a
Playground env's ``config.episode_length``, else 1000 as in ``brax.envs.create``;
``None``: no time limit), ``action_repeat`` (default 1, or the wrapper's / config's),
``expose_info`` (the env's per-step ``metrics`` under ``("next", name)``), ``reset_batch``
(how many ended rows a step resets by gathering them; default ``N / 8``, at least 4, and
every row up to N = 8). Actions are
``[-1, 1]`` boxes of ``action_size``: what Brax's and Playground's envs take (they scale
to the actuators themselves) and their trainers produce.

Detection never imports JAX, Brax or Playground: it looks at class modules and names.

Example::

    env = gpu_envs.wrap(brax.envs.get_environment("inverted_pendulum"), num_envs=256, seed=0)
    env = gpu_envs.make("playground/CartpoleBalance", num_envs=64, config_overrides={"impl": "jax"})
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from gpu_envs.contract.errors import InvalidArgumentError, NotAnEnvError
from gpu_envs.utils.arguments import as_int

__all__ = [
    "BRAX_PREFIX",
    "CORE_OPTIONS",
    "PLAYGROUND_PREFIX",
    "brax_env_ids",
    "is_brax_family",
    "is_brax_id",
    "make_brax_core",
    "make_brax_env",
    "refusal",
]

BRAX_PREFIX = "brax/"
PLAYGROUND_PREFIX = "playground/"
DEFAULT_EPISODE_LENGTH = 1000  # brax.envs.create's and wrap_for_brax_training's default
CORE_OPTIONS = ("episode_length", "action_repeat", "reset_batch")  # make_brax_core's, besides num_envs

_BRAX_ENV = ("brax.envs.base", "Env")
_PLAYGROUND_ENV = ("mujoco_playground._src.mjx_env", "MjxEnv")
_AUTO_RESET = {
    ("brax.envs.wrappers.training", "AutoResetWrapper"),
    ("mujoco_playground._src.wrapper", "BraxAutoResetWrapper"),
}
_EPISODE = {("brax.envs.wrappers.training", "EpisodeWrapper")}
_VMAP = {("brax.envs.wrappers.training", "VmapWrapper")}
# domain randomization: each row runs its own model; gpu_envs runs them through the wrapper's own
# model swap (v_env_fn) and reads the batched models where the wrapper keeps them (randomized_models)
_RANDOMIZATION = {
    ("brax.envs.wrappers.training", "DomainRandomizationVmapWrapper"): "_sys_v",
    ("mujoco_playground._src.wrapper", "BraxDomainRandomizationVmapWrapper"): "_mjx_model_v",
}
_MADRONA = {("mujoco_playground._src.wrapper", "MadronaWrapper")}
# (class, what to build instead): objects of these libraries gpu_envs refuses with the fix
_REFUSED = {
    ("brax.envs.wrappers.gym", "GymWrapper"): "Brax's gym.Env",
    ("brax.envs.wrappers.gym", "VectorGymWrapper"): "Brax's gym VectorEnv",
    ("brax.envs.wrappers.torch", "TorchWrapper"): "Brax's torch gym wrapper",
    ("brax.envs.wrappers.dm_env", "DmEnvWrapper"): "Brax's dm_env wrapper",
    ("mujoco_playground._src.wrapper_torch", "RSLRLBraxWrapper"): "Playground's rsl_rl torch wrapper",
}


def _classes(obj: Any) -> set[tuple[str, str]]:
    return {(c.__module__, c.__qualname__) for c in type(obj).__mro__}


def _unwrapped(obj: Any) -> Any:
    try:
        return getattr(obj, "unwrapped", obj)
    except Exception:  # a broken wrapper property must not break detection
        return obj


def is_brax_family(obj: Any) -> bool:
    """A Brax ``Env`` (wrappers included) or a Playground ``MjxEnv``: what :func:`make_brax_core` takes."""
    classes = _classes(obj)
    return _BRAX_ENV in classes or _PLAYGROUND_ENV in classes


def refusal(obj: Any) -> str | None:
    """The error message for a Brax/Playground object gpu_envs refuses, or None if it is not one."""
    for candidate in (obj, _unwrapped(obj), getattr(obj, "env", None)):
        if candidate is None:
            continue
        for cls in _classes(candidate):
            what = _REFUSED.get(cls)
            if what is not None:
                return (
                    f"{type(obj).__name__} is {what}: it drives the env one host call at a time and its auto-reset "
                    "drops the true final observation. Wrap the Brax/Playground env itself, unbatched, and gpu_envs "
                    "batches, jits and auto-resets it: gpu_envs.wrap(brax.envs.get_environment(name), num_envs=N) or "
                    "gpu_envs.make('brax/<name>', num_envs=N) (Playground: gpu_envs.wrap(registry.load(name), "
                    "num_envs=N) or gpu_envs.make('playground/<name>', num_envs=N))."
                )
    return None


def _peel(env: Any) -> tuple[Any, dict]:
    """The unbatched env under Brax's/Playground's training wrappers, and what they said.

    Returns ``(inner, found)`` with ``found`` holding ``num_envs`` (a ``VmapWrapper``'s
    ``batch_size``), ``episode_length`` and ``action_repeat`` (an ``EpisodeWrapper``'s) where
    present.
    """
    chain = [env]
    while hasattr(chain[-1], "env") and is_brax_family(chain[-1].env):
        chain.append(chain[-1].env)
    names = [_classes(e) for e in chain]
    if any(n & _MADRONA for n in names):
        raise NotAnEnvError(
            f"{type(env).__name__} contains Playground's MadronaWrapper (batch rendering with per-row models), which "
            "gpu_envs does not run. Wrap the env without it: gpu_envs.wrap(env, num_envs=N)."
        )
    randomizing = [i for i, n in enumerate(names) if n & set(_RANDOMIZATION)]
    batched = any(n & (_VMAP | set(_RANDOMIZATION)) for n in names)
    found: dict = {}
    depth = 0
    for i, classes in enumerate(names[:-1]):
        if classes & _AUTO_RESET:
            pass
        elif classes & _EPISODE:
            found["episode_length"] = int(chain[i].episode_length)
            found["action_repeat"] = int(chain[i].action_repeat)
        elif classes & _VMAP:
            batched = False  # below: the unbatched env
            size = getattr(chain[i], "batch_size", None)
            if size is not None:
                found["num_envs"] = int(size)
        elif i in randomizing:
            batched = False  # below: the unbatched env, one model per row
            models, axes = randomized_models(chain[i])
            found["randomization"] = (chain[i].v_env_fn, models, axes)
            found["num_envs"] = rows_of(models, axes)
        elif batched:
            raise NotAnEnvError(
                f"{type(chain[i]).__name__} wraps a batched env (it sits above a VmapWrapper), so gpu_envs cannot run it "
                "per row and would skip its logic. Apply it to the unbatched env and wrap that: "
                "gpu_envs.wrap(env, num_envs=N)."
            )
        else:
            break  # a wrapper of the unbatched env that gpu_envs does not replace: part of the env
        depth = i + 1
    return chain[depth], found


def randomized_models(wrapper: Any) -> tuple[Any, Any]:
    """``(batched models, in_axes)`` of a domain-randomization wrapper (Brax 0.14 / Playground 0.2 keep them private).

    The one place gpu_envs reads those private attributes: ``_sys_v`` (Brax) or ``_mjx_model_v``
    (Playground), and ``_in_axes``; a version that renamed them is refused with the fix.
    """
    name = next(_RANDOMIZATION[c] for c in _classes(wrapper) if c in _RANDOMIZATION)
    models, axes = getattr(wrapper, name, None), getattr(wrapper, "_in_axes", None)
    if models is None or axes is None or not callable(getattr(wrapper, "v_env_fn", None)):
        raise NotAnEnvError(
            f"{type(wrapper).__name__} does not keep its models where Brax 0.14 / Playground 0.2 do ({name}, _in_axes, "
            "v_env_fn), so gpu_envs cannot run its rows. Install those versions, or wrap the unbatched env."
        )
    return models, axes


def rows_of(models: Any, axes: Any) -> int:
    """The number of rows of batched ``models``: the size of every randomized leaf's batch axis (they must agree)."""
    import jax  # called only for a randomization wrapper, whose env imported JAX already

    sizes: set[int] = set()
    jax.tree.map(
        lambda axis, leaf: None if axis is None else sizes.add(int(leaf.shape[axis])),
        axes,
        models,
        is_leaf=lambda x: x is None,
    )
    if len(sizes) != 1:
        raise NotAnEnvError(
            f"the randomization wrapper's models give {sorted(sizes) or 'no'} batch sizes; randomization_fn must return "
            "models batched along one number of rows (and in_axes marking their batch axes)."
        )
    return sizes.pop()


def _config_value(env: Any, name: str) -> Any:
    config = getattr(_unwrapped(env), "_config", None)
    try:
        return None if config is None else config.get(name)
    except Exception:  # a ConfigDict without the field
        return None


def make_brax_core(
    env: Any, num_envs: Any = None, episode_length: Any = "auto", action_repeat: Any = None, reset_batch: Any = None
) -> Any:
    """The :class:`~gpu_envs.backends.jax.brax_core.BraxCore` running ``env`` (see the module docstring)."""
    inner, found = _peel(env)
    if num_envs is None:
        num_envs = found.get("num_envs")
    elif "num_envs" in found and int(num_envs) != found["num_envs"]:
        raise InvalidArgumentError(
            f"num_envs={num_envs} does not match the VmapWrapper's batch_size={found['num_envs']}."
        )
    num_envs = as_int(
        num_envs,
        "num_envs",
        minimum=1,
        hint="Brax and Playground envs are single envs: tell gpu_envs how many to batch, e.g. "
        "gpu_envs.wrap(brax.envs.get_environment('ant'), num_envs=1024).",
    )
    if episode_length == "auto":
        episode_length = found.get("episode_length", _config_value(inner, "episode_length") or DEFAULT_EPISODE_LENGTH)
    if episode_length is not None:
        episode_length = as_int(episode_length, "episode_length", minimum=1, hint="None means no time limit.")
    if action_repeat is None:
        action_repeat = found.get("action_repeat", _config_value(inner, "action_repeat") or 1)
    action_repeat = as_int(action_repeat, "action_repeat", minimum=1)
    if reset_batch is not None:
        reset_batch = as_int(reset_batch, "reset_batch", minimum=1)
    from gpu_envs.backends.jax.brax_core import BraxCore

    return BraxCore(inner, num_envs, episode_length, action_repeat, reset_batch, found.get("randomization"))


# ----------------------------------------------------------------------- ids
def _brax_names() -> list[str]:
    if importlib.util.find_spec("brax") is None:
        return []
    import brax.envs  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

    return sorted(getattr(brax.envs, "_envs", {}))  # Brax's registry has no public listing


def _playground_names() -> list[str]:
    if importlib.util.find_spec("mujoco_playground") is None:
        return []
    from mujoco_playground import registry  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

    return list(registry.ALL_ENVS)


def brax_env_ids() -> list[str]:
    """``brax/<name>`` for Brax's registered envs and ``playground/<name>`` for Playground's."""
    return [BRAX_PREFIX + n for n in _brax_names()] + [PLAYGROUND_PREFIX + n for n in _playground_names()]


def make_brax_env(env_id: str, kwargs: dict) -> tuple[Any, dict]:
    """``(unbatched env, core options)`` for ``brax/<name>`` or ``playground/<name>``.

    ``kwargs`` are make()'s options for the env: ``episode_length`` and ``action_repeat``
    are the core's (returned apart); for Brax every other keyword goes to
    ``brax.envs.get_environment`` (``backend=``...); for Playground ``config`` and
    ``config_overrides`` go to ``registry.load`` (robot envs fetch their model files at
    load time).
    """
    kwargs = dict(kwargs)
    core_options = {k: kwargs.pop(k) for k in CORE_OPTIONS if k in kwargs}
    if env_id.startswith(BRAX_PREFIX):
        import brax.envs  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

        env = brax.envs.get_environment(env_id[len(BRAX_PREFIX) :], **kwargs)
    else:
        from mujoco_playground import registry  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

        unknown = sorted(set(kwargs) - {"config", "config_overrides"})
        if unknown:
            raise InvalidArgumentError(
                f"make({env_id!r}) got unknown keyword arguments {unknown}; Playground envs take config and "
                "config_overrides (e.g. config_overrides={'impl': 'jax'}), plus episode_length, action_repeat, "
                "expose_info and the BatchedEnv's options."
            )
        overrides = kwargs.get("config_overrides")
        if overrides is not None and not isinstance(overrides, Mapping):
            raise InvalidArgumentError(f"config_overrides must be a dict, got {type(overrides).__name__}.")
        env = registry.load(env_id[len(PLAYGROUND_PREFIX) :], config=kwargs.get("config"), config_overrides=overrides)
    return env, core_options


def is_brax_id(env_id: str) -> bool:
    """``brax/<registered name>`` or ``playground/<registered name>``."""
    if env_id.startswith(BRAX_PREFIX):
        return env_id[len(BRAX_PREFIX) :] in _brax_names()
    if env_id.startswith(PLAYGROUND_PREFIX):
        return env_id[len(PLAYGROUND_PREFIX) :] in _playground_names()
    return False
