"""``make``, ``wrap`` and ``wrap_ray``: from an env id or an env object to a ``BatchedEnv``.

The registry (:mod:`gpu_envs.registry`) says which backend makes an id or wraps an
object; this module checks every argument before anything is built and translates the
build's failures. What ``make`` and ``wrap`` check before they build, and how they fail:

Every argument of :func:`gpu_envs.make` / :func:`gpu_envs.wrap` is checked before a
simulator is built (:mod:`gpu_envs.utils.arguments`, :func:`gpu_envs.utils.devices.resolve_device`),
so a bad call leaves nothing behind. Then the build itself is translated:

* :func:`env_options` -- the keyword arguments the :class:`~gpu_envs.BatchedEnv` takes
  (``missing_obs_value``, ``validate_actions``, ``watchdog_s``, ``health_checks``), checked;
* :func:`make_plugin` -- the backend that makes ``env_id``; a backend whose library is
  not installed is named with the ``pip install`` that brings it;
* :func:`check_kwargs` -- unknown keyword arguments are refused with the list of the
  accepted ones (where a backend can list them) instead of a ``TypeError`` from deep
  inside it;
* :func:`build` -- a missing optional package (``ModuleNotFoundError``) becomes
  :class:`~gpu_envs.contract.errors.MissingComponentError` with its install command, an
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

import importlib.util
import numbers
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

from gpu_envs.backends.common import release_simulator
from gpu_envs.contract.errors import InvalidArgumentError, MissingComponentError, NotAnEnvError, UnknownEnvError
from gpu_envs.core.env import BatchedEnv
from gpu_envs.core.health import health_mode
from gpu_envs.registry import MAKE_ORDER, WRAP_ORDER, get_plugin, install_hint, may_make, owner_of, plugin_hook, plugins
from gpu_envs.utils.arguments import as_bool, as_int, as_seed, describe, optional_seconds
from gpu_envs.utils.devices import resolve_device
from gpu_envs.utils.memory import ensure_fits, is_out_of_memory

__all__ = [
    "ENV_OPTIONS",
    "MIN_BYTES_PER_ENV",
    "available_envs",
    "batched",
    "build",
    "check_kwargs",
    "env_options",
    "make",
    "make_plugin",
    "require_plugin",
    "wrap",
    "wrap_ray",
]

# Keyword arguments consumed by BatchedEnv itself; the rest go to the backend.
ENV_OPTIONS = ("missing_obs_value", "validate_actions", "watchdog_s", "health_checks")
# A lower bound of any env's memory per sub-env (its state, an observation, the done flags):
# what make() checks when a backend cannot say more.
MIN_BYTES_PER_ENV = 16


def env_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop and check the BatchedEnv's own keyword arguments from ``kwargs``."""
    if "validate" in kwargs:  # the option's name before validate_actions
        if "validate_actions" in kwargs:
            raise InvalidArgumentError("pass validate_actions= only (validate= is its old name).")
        warnings.warn(
            "validate= was renamed validate_actions= (it checks action values on every step); "
            "the old name goes away in the next release.",
            DeprecationWarning,
            stacklevel=3,
        )
        kwargs["validate_actions"] = kwargs.pop("validate")
    options = {k: kwargs.pop(k) for k in ENV_OPTIONS if k in kwargs}
    if "validate_actions" in options:
        options["validate_actions"] = as_bool(options["validate_actions"], "validate_actions")
    if "health_checks" in options:
        health_mode(options["health_checks"])  # checked before anything is built
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


# Ids that a package registers with gymnasium when it is imported: (id prefix, package, extra
# to install). An unknown id with one of these prefixes names the import (or the install).
REGISTERING_PACKAGES = (
    ("MiniGrid-", "minigrid", "pip install '.[minigrid]' in the gpu_envs clone"),
    ("BabyAI-", "minigrid", "pip install '.[minigrid]' in the gpu_envs clone"),
    ("mo-", "mo_gymnasium", "pip install '.[mo]' in the gpu_envs clone"),
    ("ALE/", "ale_py", "pip install 'gymnasium[atari]'"),
)


def registering_package(env_id: str) -> tuple[str, str] | None:
    """``(package, install command)`` of the package whose import registers ``env_id``, if its prefix is known."""
    for prefix, package, install in REGISTERING_PACKAGES:
        if env_id.startswith(prefix):
            return package, install
    return None


def _unregistered_hint(env_id: str) -> str:
    """How to make ``env_id`` known, when a package registers ids like it; '' otherwise."""
    known = registering_package(env_id)
    if known is None:
        return ""
    package, install = known
    if package in sys.modules:
        return f" The {package!r} package, which registers ids like it, is imported and has no such id: check the name and version."
    if importlib.util.find_spec(package) is None:
        return f" Ids like it are registered by the {package!r} package, which is not installed: {install}, then `import {package}` before gpu_envs.make()."
    return f" Ids like it are registered by the {package!r} package (installed here): `import {package}` before gpu_envs.make()."


def make_plugin(env_id: str, backend: str) -> Any:
    """The plugin that makes ``env_id`` (``backend="auto"``: the first in make's order)."""
    auto = backend == "auto"
    candidates = [p for p in plugins(MAKE_ORDER) if p.available()] if auto else [require_plugin(backend)]
    for plugin in candidates:
        if auto and plugin_hook(plugin, "defers_to_registering_packages", False) and registering_package(env_id):
            continue  # e.g. EnvPool's own MiniGrid-* ids: without backend=, the id means minigrid's env
        if may_make(plugin, env_id):  # the registry decides who owns an id
            return plugin
    owner = None if auto else owner_of(env_id)
    if owner is not None and owner != backend:
        raise UnknownEnvError(
            f"{env_id!r} is made by the {owner} backend only (as a {backend} env its transitions would be wrong): "
            f"pass backend={owner!r} or backend='auto'."
        )
    for name, prefix in (("jax", "gymnax/"), ("isaaclab", "Isaac-")):
        if env_id.startswith(prefix) and not get_plugin(name).available():
            raise MissingComponentError(
                f"{env_id!r} is made by the {name} backend, whose library is not installed: {install_hint(name)}."
            )
    known = "; ".join(
        f"{p.name}: {', '.join(ids[:12])}{' ...' if len(ids) > 12 else ''}"
        for p in plugins(MAKE_ORDER)
        if p.available() and (ids := p.env_ids())
    )
    where = "any backend" if backend == "auto" else f"backend {backend!r}"
    hint = _unregistered_hint(env_id)
    raise UnknownEnvError(
        f"unknown env id {env_id!r} for {where}.{hint} Available ids -- {known}. `gpu-envs list` prints them all."
    )


def check_kwargs(plugin: Any, call: str, target: Any, kwargs: dict[str, Any]) -> None:
    """Refuse keyword arguments the backend does not take, listing those it does.

    ``call`` is ``"make"`` or ``"wrap"``; a plugin may list what it accepts with
    ``make_kwargs(env_id)`` / ``wrap_kwargs(obj)`` (None: open-ended, e.g. env kwargs).
    """
    lister: Callable[[Any], list[str] | None] | None = plugin_hook(plugin, f"{call}_kwargs")  # OptionalPluginHooks
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
            raise InvalidArgumentError(
                f"{what}: {err}. Check the spelling; `help(gpu_envs.make)` lists the options."
            ) from err
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


def available_envs() -> dict[str, list[str]]:
    """Env ids ``make`` accepts, per installed backend (``{"torch": [...], ...}``)."""
    return {p.name: p.env_ids() for p in plugins(MAKE_ORDER) if p.available()}


def _backend_name(backend: Any) -> str:
    if not isinstance(backend, str):
        raise InvalidArgumentError(
            f"backend must be a backend name such as 'torch' or 'gymnasium' (or 'auto'), got {type(backend).__name__}."
        )
    return backend


def make(
    env_id: str,
    num_envs: int = 1,
    device: torch.device | str | None = None,
    backend: str = "auto",
    seed: int | None = None,
    *,
    distributed: bool = False,
    **kwargs: Any,
) -> BatchedEnv:
    """Build ``num_envs`` copies of ``env_id`` behind a :class:`BatchedEnv`.

    ``backend="auto"`` prefers a built-in torch implementation of the id, then
    gymnasium's registry, then Isaac Lab's. ``device=None`` means CUDA when available.
    ``seed`` (an int >= 0) seeds the first ``reset()``. Other keyword arguments go to the
    backend (e.g. ``expose_final_obs`` and ``max_episode_steps`` for built-in envs;
    ``vectorization``, ``num_workers``, ``step_timeout`` for gymnasium), except
    ``missing_obs_value``, ``validate_actions``, ``watchdog_s`` and ``health_checks``, which configure the
    :class:`BatchedEnv`. Every argument is checked before anything is built: a bad
    one raises a :class:`GpuEnvsError` naming it (unknown keyword arguments list the
    accepted ones; a backend whose library is missing names the ``pip install``;
    ``num_envs`` that cannot fit in the device's memory is refused up front).

    ``distributed=True`` (under torchrun, see :mod:`gpu_envs.distributed`) builds this
    process's shard: ``num_envs`` envs per process, on ``cuda:LOCAL_RANK`` (or the CPU)
    unless ``device`` is given, env ``i`` seeded as global env ``rank * num_envs + i``;
    ``env.rank`` and ``env.world_size`` say which shard. Outside a torchrun job it
    changes nothing.

    Example::

        >>> import gpu_envs
        >>> env = gpu_envs.make("Pendulum-v1", num_envs=1024, device="cpu", seed=0)
        >>> env.batch_size, env.single_observation_spec["observation"].shape
        (torch.Size([1024]), torch.Size([3]))
    """
    if not isinstance(env_id, str) or not env_id:
        raise InvalidArgumentError(
            f"env_id must be an env id string such as 'CartPole-v1' (`gpu-envs list` prints them), got {env_id!r}; "
            "to put an env object behind a BatchedEnv, use gpu_envs.wrap(obj)."
        )
    num_envs = as_int(num_envs, "num_envs", minimum=1)
    shard = None
    if as_bool(distributed, "distributed"):
        from gpu_envs.distributed import init

        shard = init()
        if device is None and shard.is_distributed:
            device = shard.device
    device = resolve_device(device)
    seed = as_seed(seed)
    backend_kwargs = dict(kwargs)
    options = env_options(backend_kwargs)
    plugin = make_plugin(env_id, _backend_name(backend))
    check_kwargs(plugin, "make", env_id, backend_kwargs)
    if shard is not None and shard.is_distributed:
        backend_kwargs = _shard_kwargs(plugin, backend_kwargs, shard.env_index_offset(num_envs))
    per_env: Callable[[str], int] | None = plugin_hook(plugin, "min_bytes_per_env")  # OptionalPluginHooks
    what = f"make({env_id!r}, num_envs={num_envs}, backend={plugin.name!r})"
    need = num_envs * (per_env(env_id) if callable(per_env) else MIN_BYTES_PER_ENV)
    ensure_fits(need, device, what, "Use fewer envs (num_envs), or a device with more memory.")
    raw = build(what, lambda: plugin.make(env_id, num_envs, device, **backend_kwargs), device)
    env = batched(raw, owned=True, seed=seed, options=options)
    if shard is not None:
        env.rank, env.world_size = shard.rank, shard.world_size
    return env


def _shard_kwargs(plugin: Any, backend_kwargs: dict[str, Any], offset: int) -> dict[str, Any]:
    """The backend's keyword arguments with this shard's ``env_index_offset`` added."""
    if not plugin_hook(plugin, "accepts_env_index_offset", False):
        raise InvalidArgumentError(
            f"the {plugin.name} backend cannot give each process its own seed stream (it takes no "
            "env_index_offset), so make(..., distributed=True) cannot shard it. Use the torch (built-in) or "
            "gymnasium backend, or build the env yourself on every rank with a seed of its own."
        )
    return {**backend_kwargs, "env_index_offset": backend_kwargs.get("env_index_offset", 0) + offset}


def wrap(
    obj: Any,
    device: torch.device | str | None = None,
    backend: str = "auto",
    seed: int | None = None,
    **kwargs: Any,
) -> BatchedEnv:
    """Put an existing env object behind a :class:`BatchedEnv`, detecting its backend.

    Accepts torch vector envs (see ``gpu_envs.backends.torch_envs``), gymnasium ``Env`` and
    ``VectorEnv``, Isaac Lab envs, JAX envs, and the envs of other libraries:
    Stable-Baselines3 ``VecEnv`` s, legacy ``gym`` 0.26 envs, MO-Gymnasium envs (vector
    rewards) and minigrid envs (``mission=``, ``mission_length=``); see their modules in
    ``gpu_envs.backends``. ``device=None`` keeps a device-resident env where it lives
    (CPU backends default to CUDA when available). ``seed`` seeds the first ``reset()``,
    as in :func:`make`; ``missing_obs_value``, ``validate_actions``, ``watchdog_s`` and ``health_checks`` configure
    the :class:`BatchedEnv`, other keyword arguments go to the backend. One env object
    is driven by one BatchedEnv at a time.

    Example::

        env = gpu_envs.wrap(MyTorchVectorEnv(num_envs=4096, device="cuda"))
    """
    if isinstance(obj, BatchedEnv) or (hasattr(obj, "step_and_maybe_reset") and hasattr(obj, "root")):
        raise NotAnEnvError(
            f"wrap() was given a {type(obj).__name__}, which already has the BatchedEnv API; use it as it is "
            "(or TransformedEnv(env, ...) to add transforms)."
        )
    device = None if device is None else resolve_device(device)
    seed = as_seed(seed)
    backend_kwargs = dict(kwargs)
    options = env_options(backend_kwargs)
    explicit = _backend_name(backend) != "auto"
    candidates = [require_plugin(backend)] if explicit else plugins(WRAP_ORDER)
    failed: list[str] = []  # detectors that raised on obj: not theirs, unless no other backend claims it
    for plugin in candidates:
        if _detects(plugin, obj, failed, explicit):
            check_kwargs(plugin, "wrap", obj, backend_kwargs)
            what = f"wrap({type(obj).__name__}, backend={plugin.name!r})"
            raw = build(what, lambda plugin=plugin: plugin.wrap(obj, device, **backend_kwargs), device)
            return batched(raw, owned=False, seed=seed, options=options)
    raised = f" (the {'; the '.join(failed)} while inspecting it)" if failed else ""
    what = f"{type(obj).__module__}.{type(obj).__name__}"
    if _looks_jax(obj):
        raise NotAnEnvError(
            f"wrap() was given {what}, a JAX env, but not of a kind gpu_envs takes{raised}: the JAX envs it wraps are "
            "gymnasium's functional JAX envs (FunctionalJaxEnv / FunctionalJaxVectorEnv, e.g. gym.make_vec("
            "'phys2d/CartPole-v1', n)), gymnax envs (with their params), Brax / MuJoCo Playground envs "
            "(wrap(env, num_envs=N)) and JaxMARL MultiAgentEnvs (wrap(env, num_envs=N): agent groups). For another JAX "
            "simulator, write a torch vector env around it that hands its "
            "arrays over by DLPack (see gpu_envs.backends.torch_envs)."
        )
    raise NotAnEnvError(
        f"wrap() does not know how to wrap a {what}{raised}. It accepts "
        "gymnasium Env/VectorEnv objects, Isaac Lab envs, JAX envs (gymnasium's functional ones, gymnax, Brax, "
        "MuJoCo Playground), Stable-Baselines3 VecEnvs, gym 0.26 envs, MO-Gymnasium and minigrid envs, and torch "
        "vector envs (reset/step/num_envs/single_observation_space/single_action_space; see "
        "gpu_envs.backends.torch_envs)."
    )


_JAX_PACKAGES = {"jax", "jaxlib", "flax", "chex", "jumanji", "gymnax", "brax", "mujoco_playground", "jaxmarl", "pgx"}


def _looks_jax(obj: Any) -> bool:
    """An object of a JAX library's class, or a gymnasium env declaring ``metadata["jax"]`` (no import of jax)."""
    modules = {c.__module__.split(".")[0] for c in type(obj).__mro__}
    metadata = getattr(obj, "metadata", None)
    return bool(modules & _JAX_PACKAGES) or (isinstance(metadata, dict) and bool(metadata.get("jax")))


def _detects(plugin: Any, obj: Any, failed: list[str], explicit: bool) -> bool:
    """``plugin.detect(obj)``; a detector that raises does not claim ``obj`` (recorded in ``failed``).

    A detector reads attributes of an object it may never have seen (an env of another
    library lacks ``single_observation_space``): an exception there means "not mine", never
    an error out of ``wrap()``. With ``backend=`` named, it is the reason the backend cannot take it.
    """
    try:
        return bool(plugin.detect(obj))
    except Exception as err:
        why = f"{plugin.name} backend's detect raised {type(err).__name__}: {err}"
        if explicit:
            raise NotAnEnvError(
                f"wrap(..., backend={plugin.name!r}) cannot take this {type(obj).__module__}.{type(obj).__name__}: "
                f"the {why}. Pass the object that backend wraps (see gpu_envs.backends.{plugin.name}), or "
                "backend='auto'."
            ) from err
        failed.append(why)
        return False


def wrap_ray(
    env_fn: Any,
    num_envs: int | None = None,
    num_workers: int | None = None,
    device: torch.device | str | None = None,
    seed: int | None = None,
    **kwargs: Any,
) -> BatchedEnv:
    """``num_envs`` envs built by ``env_fn`` on ``num_workers`` Ray actors, as one :class:`BatchedEnv`.

    ``env_fn`` builds one gymnasium env (it is called once per env, inside the actors;
    a list of ``num_envs`` functions builds env ``i`` with the ``i``-th). Each actor
    steps its share as a SAME_STEP ``SyncVectorEnv`` (``autoreset_mode=`` for another
    mode), all in parallel; the batch reaches ``device`` in one staged copy. Options:
    ``step_timeout`` (seconds, default 60), ``start_timeout``, ``cpus_per_worker``,
    ``address`` (a Ray cluster; default: the one this process uses, ``RAY_ADDRESS``,
    or a new local one), ``ray_init_kwargs``, ``one_hot_actions``, ``info_spec``,
    ``env_index_offset``, plus ``missing_obs_value``/``validate_actions``/``watchdog_s``/``health_checks``. Needs
    ``pip install '.[ray]'`` in the gpu_envs clone; see :mod:`gpu_envs.backends.ray`.

    Example::

        env = gpu_envs.wrap_ray(lambda: gym.make("Pendulum-v1"), num_envs=64, num_workers=8, seed=0)
    """
    require_plugin("ray")
    from gpu_envs.backends.ray import wrap_env_fns

    device = None if device is None else resolve_device(device)
    seed = as_seed(seed)
    backend_kwargs = dict(kwargs)
    options = env_options(backend_kwargs)
    what = f"wrap_ray(num_envs={num_envs!r}, num_workers={num_workers!r})"
    raw = build(what, lambda: wrap_env_fns(env_fn, num_envs, device, num_workers=num_workers, **backend_kwargs), device)
    return batched(raw, owned=True, seed=seed, options=options)
