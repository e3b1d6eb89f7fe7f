"""EnvPool (C++ vector envs: classic control, Atari, MuJoCo, ...) as exact same-step transitions.

Example::

    env = gpu_envs.make("Pong-v5", backend="envpool", num_envs=8, seed=0)   # uint8 [8, 4, 84, 84]
    env = gpu_envs.make("Ant-v4", backend="envpool", num_envs=8, num_threads=2)
    env = gpu_envs.wrap(envpool.make("CartPole-v1", env_type="gymnasium", num_envs=8, seed=3))

How EnvPool resets, and what this backend does about it. An EnvPool pool resets an
ended env on the NEXT ``step``: the ending step returns the true final observation, and
the following ``step`` ignores that env's action and returns its reset observation with
reward 0 -- a fake transition. ``pool.reset(env_id)`` resets the given envs at once and
clears their pending reset. So after every step in which some rows ended, this backend
calls ``pool.reset(ended_ids)`` in the same ``step`` call: the step's observation is the
transition's TRUE final observation, the reset observation is the next root, and the
following step steps every row for real. No step is wasted, no action ignored, no
placeholder; the oracle tests compare every transition with single-env pools stepped and
reset by hand. Partial resets (``"_reset"`` masks) go through ``pool.reset(ids)`` too.

Seeding: EnvPool fixes its seeds when a pool is built (``envpool.make(..., seed=s)``
seeds env ``i`` with ``s + i``) and ignores ``reset(seed=...)``. So:

* a pool made by gpu_envs (``make(id, backend="envpool")``) is (re)built on
  ``reset(seed=s)`` with ``seed=s + env_index_offset``, unless it is still unused and
  already built with that seed: row ``i`` of ``reset(seed=s)`` is exactly a fresh
  one-env pool built with ``seed=s + i``, and the same seed gives the same run bit for
  bit. ``reset()`` without a seed keeps the pool (a new episode, not a new seed);
  the first one builds it with a random seed;
* a pool you built and wrapped keeps its seeds: ``reset(seed=s)`` is accepted only as
  its first reset when ``s`` is the seed the pool was built with; any other seed raises
  :class:`~gpu_envs.contract.errors.InvalidArgumentError` with the fix (build the pool
  with that seed, or let ``gpu_envs.make`` build it). It is never silently ignored.

Seeds are int32 in EnvPool: ``s + offset + N`` must stay below ``2**31 - 1``.

Data path per step: the action tensor's own memory as numpy on the CPU (one host copy
from an accelerator); EnvPool returns fresh arrays every step (it never rewrites them),
so on a CPU target they are shared with torch as they are, with no copy at all (dtype
casts excepted: a float64 reward becomes float32); on a CUDA target every output goes
through ONE packed pinned staging buffer and one non-blocking transfer
(:class:`~gpu_envs.utils.arrays.HostStaging`). A step where rows ended costs one more
``pool.reset(ids)`` call and one copy of the observation (the root with the reset rows).

Observations keep EnvPool's dtypes (uint8 Atari frames, float64 MuJoCo states); a Dict
observation space gives one key per entry. Info entries (``lives``, ``ram``, the MuJoCo
reward terms, ``elapsed_step``...) come from the pool's spec and go under
``("next", key)``; a name that would collide with a transition key (Atari's unclipped
``reward`` and per-life ``terminated``) gets an ``info_`` prefix. ``expose_info=False``
drops them. Only sync pools (``batch_size == num_envs``), one player per env, with a
gymnasium-type interface (``env_type="gymnasium"``) are wrapped; the others are refused
with the fix.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from gpu_envs.backends.base import Backend, Capabilities, RawStep
from gpu_envs.backends.common import claim_simulator, flatten_obs, observation_spec_from_space
from gpu_envs.backends.layout import StepLayout
from gpu_envs.contract.errors import (
    BackendError,
    ClosedEnvError,
    InvalidArgumentError,
    NotAnEnvError,
    UnsupportedSpaceError,
)
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Binary, Box, Composite, numpy_dtype, spec_from_gym, torch_dtype
from gpu_envs.utils.arguments import as_bool, as_int
from gpu_envs.utils.arrays import HostStaging
from gpu_envs.utils.devices import normalize_device, resolve_device

__all__ = ["PLUGIN", "EnvPoolBackend", "EnvPoolPlugin", "is_envpool", "max_seed"]

INT32_MAX = 2**31 - 1
# Names EnvPool puts in its info that gpu_envs does not pass on: bookkeeping of the pool itself.
_SKIPPED_INFO = ("env_id", "players")
# ("next", name) keys a transition already has: an info entry of that name gets a prefix.
_TRANSITION_KEYS = ("reward", "done", "terminated", "truncated", "final_obs_missing")
_BACKEND_KWARGS = ("expose_info", "env_index_offset")


def is_envpool(obj: Any) -> bool:
    """``obj`` is an EnvPool pool (any interface type): a class of its MRO lives in ``envpool``."""
    return any(c.__module__.split(".")[0] == "envpool" for c in type(obj).__mro__)


def max_seed(num_envs: int, env_index_offset: int = 0) -> int:
    """The largest ``reset(seed=s)`` EnvPool can take for this many envs (its seeds are int32)."""
    return INT32_MAX - 1 - env_index_offset - num_envs


def _config(pool: Any) -> dict:
    return dict(pool.config)


def _task_id(pool: Any) -> str:
    name = type(pool).__name__
    for suffix in ("GymnasiumEnvPool", "DMEnvPool", "GymEnvPool"):
        name = name.removesuffix(suffix)
    return name


def _check_pool(pool: Any) -> None:
    """Refuse the pools whose semantics this backend does not handle, each with the fix."""
    mro = {(c.__module__, c.__name__) for c in type(pool).__mro__}
    if ("envpool.python.gymnasium_envpool", "GymnasiumEnvPoolMixin") not in mro:
        raise NotAnEnvError(
            f"{type(pool).__name__} is an EnvPool pool with the dm_env/gym interface; gpu_envs wraps the gymnasium one "
            "(terminated and truncated apart). Build it with envpool.make(task_id, env_type='gymnasium', ...), or let "
            "gpu_envs build it: gpu_envs.make(task_id, backend='envpool', num_envs=N)."
        )
    config = _config(pool)
    if int(config.get("batch_size", 0)) not in (0, int(config["num_envs"])):
        raise InvalidArgumentError(
            f"this EnvPool pool is asynchronous (batch_size={config['batch_size']} < num_envs={config['num_envs']}): each "
            "step returns whichever envs finished first, which is not one transition per env. Build it with "
            "batch_size=num_envs (the default)."
        )
    if int(config.get("max_num_players", 1)) != 1:
        raise UnsupportedSpaceError(
            f"this EnvPool task has up to {config['max_num_players']} players per env; gpu_envs wraps one-player tasks "
            "(one observation, reward and action per env)."
        )


def _info_fields(pool: Any, num_envs: int, obs_keys: list) -> list[tuple[str, str, tuple[int, ...], np.dtype]]:
    """``(name in EnvPool's info, gpu_envs key, per-env shape, dtype)`` of each numeric info entry."""
    fields = []
    taken = set(map(str, obs_keys)) | set(_TRANSITION_KEYS)
    for name, array_spec in pool.spec.state_array_spec.items():
        if name == "elapsed_step":
            source = name
        elif name.startswith("info:") and "." not in name[5:] and name[5:] not in _SKIPPED_INFO:
            source = name[5:]
        else:
            continue
        shape = tuple(int(d) for d in array_spec.shape)
        if shape and shape[0] == -1:  # a per-player entry; one player per env
            shape = shape[1:]
        if any(d < 0 for d in shape):
            continue  # a ragged entry: no fixed-shape tensor
        dtype = np.dtype(array_spec.dtype)
        if dtype.kind not in "biuf":
            continue
        key = f"info_{source}" if source in taken else source
        fields.append((source, key, shape, dtype))
    return fields


def _leaf_spec(shape: tuple[int, ...], dtype: np.dtype, device: torch.device) -> Any:
    if dtype == np.bool_:
        return Binary(shape, device=device)
    low, high = (-float("inf"), float("inf")) if dtype.kind == "f" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    return Box(low, high, shape, torch_dtype(dtype), device)


class EnvPoolBackend(Backend):
    """Same-step backend over a gymnasium-type, synchronous EnvPool pool (see the module docstring).

    Args:
        pool: the pool to drive, or ``None`` when ``factory`` builds it.
        device: target device; ``None``: the CPU.
        factory: ``seed -> pool`` (a pool made by gpu_envs, rebuilt on ``reset(seed=s)``),
            with ``spec`` (the pool's ``envpool.make_spec`` result), ``num_envs`` and
            ``task_id`` (for messages), when ``pool`` is None.
        expose_info: pass EnvPool's numeric info entries under ``("next", key)``.
        env_index_offset: row ``i`` is seeded ``s + env_index_offset + i`` (a made pool only).
    """

    name = "envpool"
    capabilities = Capabilities(
        final_obs=FinalObsKind.WRAPPER_RESET,  # ended rows reset in the same call, their step observation kept
        trusted_outputs=True,  # every tensor comes out of its own staging, laid out from the specs
        partial_reset=True,
    )
    # Staging mode: None picks by device (packed buffer + one transfer off the CPU); tests set True
    # to run the packed (CUDA) path on the CPU.
    staging_packed: bool | None = None

    def __init__(
        self,
        pool: Any = None,
        device: torch.device | str | None = None,
        *,
        factory: Callable[[int], Any] | None = None,
        spec: Any = None,
        num_envs: int | None = None,
        task_id: str | None = None,
        expose_info: bool = True,
        env_index_offset: int = 0,
    ) -> None:
        expose_info = as_bool(expose_info, "expose_info")
        self.env_index_offset = as_int(env_index_offset, "env_index_offset", minimum=0)
        self.device = normalize_device(resolve_device(device if device is not None else "cpu"))
        self._factory = factory
        self._pool = pool
        self._closed = False
        self._used = False  # the live pool has been reset or stepped since it was built
        if pool is not None:
            _check_pool(pool)
            config = _config(pool)
            self.num_envs = int(config["num_envs"])
            self._seed = None if config.get("env_seed") else int(config["seed"])
            self._env_seeds = [int(s) for s in config.get("env_seed") or ()]
            spec = pool.spec
            self._task = _task_id(pool)
            claim_simulator(pool, self)
        else:
            if factory is None or spec is None or num_envs is None:
                raise InvalidArgumentError(
                    "EnvPoolBackend needs a pool, or a factory with the pool's spec and num_envs."
                )
            self.num_envs = as_int(num_envs, "num_envs", minimum=1)
            self._seed = None
            self._env_seeds = []
            self._task = task_id or _task_id(spec).removesuffix("EnvSpec")
        if self.env_index_offset and factory is None:
            raise InvalidArgumentError(
                "env_index_offset applies to pools gpu_envs builds (make); a wrapped pool keeps its seeds."
            )
        n = self.num_envs
        with warnings.catch_warnings():  # gymnasium's Box warns about EnvPool's float64 bounds of float32 spaces
            warnings.filterwarnings("ignore", message=".*precision lowered.*")
            obs_space, act_space = spec.gymnasium_observation_space, spec.gymnasium_action_space
        if hasattr(act_space, "spaces"):
            raise UnsupportedSpaceError(
                f"EnvPool task {self._task} has a composite action space {act_space!r}; a BatchedEnv action is one tensor."
            )
        self.observation_spec = observation_spec_from_space(obs_space, self.device)
        self.action_spec = spec_from_gym(act_space, device=self.device)
        self._keys = list(self.observation_spec.keys(include_nested=True, leaves_only=True))
        self._obs_dtypes = [np.dtype(numpy_dtype(self.observation_spec[k].dtype)) for k in self._keys]
        self._obs_shapes = [(n, *self.observation_spec[k].shape) for k in self._keys]
        self._action_dtype = np.dtype(numpy_dtype(self.action_spec.dtype))
        self._info = _info_fields(pool if pool is not None else _SpecHolder(spec), n, self._keys) if expose_info else []
        self.info_spec = Composite(
            {key: _leaf_spec(shape, dtype, self.device) for _, key, shape, dtype in self._info}, device=self.device
        )
        obs_fields: dict[Any, tuple[tuple[int, ...], torch.dtype]] = {}
        for shape, k in zip(self._obs_shapes, self._keys, strict=True):
            leaf_dtype = self.observation_spec[k].dtype
            if leaf_dtype is None:  # a leaf spec always has one (only a Composite has none)
                raise UnsupportedSpaceError(f"EnvPool task {self._task}: observation {k!r} has no single dtype.")
            obs_fields[k] = (shape, leaf_dtype)
        info_fields = {key: ((n, *shape), torch_dtype(dtype)) for _, key, shape, dtype in self._info}
        self._layout = StepLayout(obs_fields, n, info=info_fields)
        self._stage_dtypes = [np.dtype(numpy_dtype(dtype)) for _, dtype in self._layout.fields]
        self._reset_stage = HostStaging(list(obs_fields.values()), self.device, self.staging_packed)
        self._stage = HostStaging(self._layout.fields, self.device, self.staging_packed)
        self._root: list[np.ndarray] | None = None  # the last root observation leaves (numpy), for partial resets
        self._all_ids = np.arange(n, dtype=np.int32)
        self._all_ids_bytes = self._all_ids.tobytes()
        self._owned_cache: dict[bool, list[bool]] = {}  # rows ended in the step -> which values are shared as they are

    # ------------------------------------------------------------------ pool
    @property
    def pool(self) -> Any:
        """The EnvPool pool being driven (None before the first reset of a made env)."""
        return self._pool

    @property
    def info_names(self) -> list[str]:
        """The names of EnvPool's info fields handed over as ``("next", key)`` entries (empty without ``expose_info``)."""
        return [field[0] for field in self._info]

    def describe(self) -> str:
        return f"{self.name}({self._task}, {'made' if self._factory is not None else 'wrapped'})"

    def check_usable(self) -> None:
        if self._closed:
            raise ClosedEnvError(
                "this EnvPool env was closed; build a new one with gpu_envs.make() or gpu_envs.wrap()."
            )

    def _reseed(self, seed: int | None) -> None:
        """Make the live pool the one ``reset(seed)`` asks for (see the module docstring)."""
        if self._factory is not None:
            if seed is None:
                if self._pool is None:
                    self._build(int(np.random.default_rng().integers(max_seed(self.num_envs, self.env_index_offset))))
                return
            seed = int(seed)
            if seed > max_seed(self.num_envs, self.env_index_offset):
                raise InvalidArgumentError(
                    f"EnvPool seeds are int32: reset(seed={seed}) with {self.num_envs} envs (env_index_offset="
                    f"{self.env_index_offset}) needs seed <= {max_seed(self.num_envs, self.env_index_offset)}."
                )
            if self._pool is None or self._used or self._seed != seed + self.env_index_offset:
                self._build(seed)
            return
        if seed is None:
            return
        wanted = [int(seed) + i for i in range(self.num_envs)]
        built = self._env_seeds or ([self._seed + i for i in range(self.num_envs)] if self._seed is not None else [])
        if self._used or built != wanted:
            how = f"seed={self._seed}" if self._seed is not None else f"env_seed={self._env_seeds[:4]}..."
            raise InvalidArgumentError(
                f"reset(seed={seed}) cannot reseed this EnvPool pool: EnvPool fixes its seeds when the pool is built "
                f"(this one with {how}) and ignores reset(seed=...). gpu_envs accepts a seed only as the first reset "
                f"of a pool built with it. Build the pool with envpool.make(..., seed={seed}), reset without a seed, "
                f"or let gpu_envs build it: gpu_envs.make({self._task!r}, backend='envpool', num_envs={self.num_envs}) "
                "rebuilds the pool for every reset(seed=...)."
            )

    def _build(self, seed: int) -> None:
        old, self._pool = self._pool, None
        if old is not None:
            old.close()
        pool = self._factory(seed + self.env_index_offset)  # type: ignore[misc]
        _check_pool(pool)
        self._pool = pool
        self._seed = seed + self.env_index_offset
        self._used = False
        self._root = None

    # ------------------------------------------------------------------ calls
    def _call(self, what: str, fn: Callable, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as err:
            raise BackendError(f"{self.describe()} raised in {what}: {type(err).__name__}: {err}") from err

    def _leaves(self, obs: Any) -> list[np.ndarray]:
        if len(self._keys) == 1 and self._keys[0] == "observation" and not isinstance(obs, dict):
            return [obs]
        flat = cast("dict[Any, np.ndarray]", flatten_obs(obs))  # EnvPool's leaves are numpy arrays
        return [flat[k] for k in self._keys]

    def _live_pool(self) -> Any:
        """The pool to reset: built (made env) or given (wrapped one); None only after a failed rebuild."""
        if self._pool is None:
            raise BackendError(f"{self.describe()} has no pool (its rebuild failed); reset every row to build one.")
        return self._pool

    def _publish_root(self, root: list[np.ndarray]) -> ObsDict:
        """The root observations on the device: every leaf is an array, so no key is skipped."""
        obs = {k: t for k, t in zip(self._keys, self._reset_stage.publish(root), strict=True) if t is not None}
        if len(obs) != len(self._keys):
            raise BackendError(f"{self.describe()}: reset gave no observation for some of {self._keys}.")
        return obs

    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        self.check_usable()
        if mask is not None and self._root is not None:
            if seed is not None:
                raise InvalidArgumentError(
                    "EnvPool seeds whole pools when they are built: a partial reset cannot take a seed. Reset the "
                    "masked rows without a seed, or every row with reset(seed=...)."
                )
            ids = np.flatnonzero(mask.detach().to("cpu", torch.bool).numpy().reshape(self.num_envs)).astype(np.int32)
            if ids.size == 0:
                return self._publish_root(self._root)
            obs, info = self._call("reset", self._live_pool().reset, ids)
            root = [leaf.copy() for leaf in self._root]
            rows = np.asarray(info["env_id"], dtype=np.int64)
            for dst, src in zip(root, self._leaves(obs), strict=True):
                dst[rows] = src
        else:
            self._reseed(seed)
            obs, info = self._call("reset", self._live_pool().reset)
            root = self._ordered(self._leaves(obs), info)
        self._used = True
        self._root = root
        return self._publish_root(root)

    def _ordered(self, leaves: list[np.ndarray], info: dict) -> list[np.ndarray]:
        """``leaves`` in env order (a sync pool returns them so; checked, and sorted if not)."""
        env_id = info["env_id"]
        if np.array_equal(env_id, self._all_ids):
            return leaves
        order = np.argsort(env_id)
        return [leaf[order] for leaf in leaves]

    def step(self, action: torch.Tensor) -> RawStep:
        self.check_usable()
        if self._pool is None or self._root is None:
            raise InvalidArgumentError("reset() the EnvPool env before stepping it.")
        obs, reward, terminated, truncated, info = self._call("step", self._pool.step, self._action(action))
        env_id = info["env_id"]
        if env_id.tobytes() != self._all_ids_bytes:  # never seen from a sync pool; kept exact if it happens
            order = np.argsort(env_id)
            obs = [leaf[order] for leaf in self._leaves(obs)]
            reward, terminated, truncated = reward[order], terminated[order], truncated[order]
            info = {
                k: v[order] if isinstance(v, np.ndarray) and v.shape[:1] == (self.num_envs,) else v
                for k, v in info.items()
            }
            leaves = obs
        else:
            leaves = self._leaves(obs)
        n = self.num_envs
        done = np.logical_or(terminated, truncated)
        if done.any():
            ids = np.flatnonzero(done).astype(np.int32)
            reset_obs, reset_info = self._call("reset of the ended envs", self._pool.reset, ids)
            rows = np.asarray(reset_info["env_id"], dtype=np.int64)
            root = [leaf.copy() for leaf in leaves]
            for dst, src in zip(root, self._leaves(reset_obs), strict=True):
                dst[rows] = src
            nxt: list | None = leaves
        else:
            root, nxt = leaves, None
        values = self._layout.pack(
            root,
            reward.reshape(n, 1),
            terminated.reshape(n, 1),
            truncated.reshape(n, 1),
            done.reshape(n, 1),
            final_obs=nxt,
            info=[np.asarray(info[source]).reshape(n, *shape) for source, _, shape, _ in self._info],
        )
        owned = self._owned_cache.get(nxt is not None)
        if owned is None:
            owned = self._owned_cache[nxt is not None] = self._owned(values)
        self._root = root
        # no row ended: the observations are the pre-reset ones too (final_obs valid on every row)
        return self._layout.unpack(self._stage.publish(values, owned=owned), obs_are_final=True)

    def _owned(self, values: list) -> list[bool]:
        """Which of a step's values may be shared as they are: fresh, C-contiguous arrays of their field's dtype.

        EnvPool returns fresh arrays every step (it never writes them again) and the root this
        backend builds on ended rows is its own copy; ``done`` is made here. Their dtypes and
        layouts never change, so this is worked out once per kind of step (rows ended or not).
        """
        return [
            value is not None and value.dtype == dtype and value.flags.c_contiguous
            for value, dtype in zip(values, self._stage_dtypes, strict=True)
        ]

    def _action(self, action: torch.Tensor) -> np.ndarray:
        action = action.detach()
        if action.device.type != "cpu":
            action = action.to("cpu")
        array = action.numpy()
        return array if array.dtype == self._action_dtype else array.astype(self._action_dtype)

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.close()


class _SpecHolder:
    """Lets :func:`_info_fields` read a spec made before its pool (``pool.spec``)."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec


class EnvPoolPlugin:
    """Registry entry: ``make`` of EnvPool's task ids, ``wrap`` of EnvPool pools."""

    name = "envpool"
    accepts_env_index_offset = True
    # EnvPool also has ids another package registers (MiniGrid-*): make() without backend="envpool"
    # leaves those to that package (and its "import minigrid first" hint) instead of a different env
    defers_to_registering_packages = True

    def available(self) -> bool:
        return importlib.util.find_spec("envpool") is not None

    def env_ids(self) -> list[str]:
        import envpool

        return sorted(envpool.list_all_envs())

    def can_make(self, env_id: str) -> bool:
        return env_id in self.env_ids()

    def make(self, env_id: str, num_envs: int, device: torch.device, **kwargs: Any) -> Backend:
        """A pool of ``env_id`` (EnvPool's keyword arguments pass through: ``num_threads``, ``frame_skip``...)."""
        import envpool

        backend_kw = {k: kwargs.pop(k) for k in _BACKEND_KWARGS if k in kwargs}
        for reserved in ("seed", "env_seed", "env_type", "num_envs", "batch_size"):
            if reserved in kwargs:
                raise InvalidArgumentError(
                    f"make({env_id!r}, backend='envpool') sets {reserved} itself; "
                    + ("pass seed= to make() or reset(seed=...)." if "seed" in reserved else "drop it.")
                )
        kwargs = {**kwargs, "num_envs": num_envs, "batch_size": num_envs}
        spec = envpool.make_spec(env_id, **kwargs)

        def factory(seed: int) -> Any:
            with warnings.catch_warnings():  # gymnasium's Box warns about EnvPool's float64 bounds of float32 spaces
                warnings.filterwarnings("ignore", message=".*precision lowered.*")
                return envpool.make(env_id, env_type="gymnasium", seed=seed, **kwargs)

        return EnvPoolBackend(None, device, factory=factory, spec=spec, num_envs=num_envs, task_id=env_id, **backend_kw)

    def min_bytes_per_env(self, env_id: str) -> int:
        """A lower bound of one env's memory: its observation (an Atari frame stack is 28 KiB)."""
        return 64

    def detect(self, obj: Any) -> bool:
        return is_envpool(obj)

    def wrap_kwargs(self, obj: Any) -> list[str]:
        return ["expose_info"]

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Backend:
        return EnvPoolBackend(obj, device, **kwargs)


PLUGIN = EnvPoolPlugin()
