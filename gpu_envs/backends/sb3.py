"""Stable-Baselines3 ``VecEnv`` objects (``DummyVecEnv``, ``SubprocVecEnv``, ``VecNormalize``...).

An SB3 VecEnv auto-resets inside ``step`` and reports episode ends in its info dicts;
this backend reads them into the same-step contract of :mod:`gpu_envs.backends.base`:

* ``dones[i]`` ends row ``i``; ``infos[i]["TimeLimit.truncated"]`` says the end was a
  truncation (SB3 sets it to ``truncated and not terminated``), so ``terminated`` is
  ``done and not truncated``.
* ``infos[i]["terminal_observation"]`` is row ``i``'s TRUE final observation (the one
  ``step`` returns is already the next episode's first); an ended row without one gets
  the placeholder and ``("next", "final_obs_missing")``. SB3's observation wrappers
  (``VecNormalize``, ``VecFrameStack``...) transform it like the observation.
* Other numeric info entries become ``("next", key)`` tensors, discovered at the first
  step as in the gymnasium backend (:mod:`gpu_envs.backends.gymnasium.info`); the
  ``("episode", "r"/"l"/"t")`` entries of SB3's ``Monitor`` are declared up front when
  every sub-env has one, since they only appear when an episode ends.
* ``reset(seed=s)`` calls ``venv.seed(s)`` first (SB3 seeds sub-env ``i`` with
  ``s + i`` at the next reset, gymnasium's rule). SB3 resets all sub-envs or none, so a
  reset mask naming only some rows is refused (by the BatchedEnv, with the fix).
* Spaces are gymnasium's (SB3 >= 2.0): observations and actions get the gymnasium
  backend's layout (:mod:`gpu_envs.backends.gymnasium.spaces`: Dict observations as
  keys, Discrete actions as an index ``[N]``).

Per step: the action becomes numpy once, each result crosses to the device through one
:class:`gpu_envs.arrays.HostStaging`, and Python loops over the ENDED rows only (plus
over the info dicts when the env reports numeric info entries). Detection looks at class
modules, so stable_baselines3 is imported only for its own objects.

Example::

    from stable_baselines3.common.env_util import make_vec_env
    env = gpu_envs.wrap(make_vec_env("CartPole-v1", n_envs=8), device="cpu")
    traj = env.rollout(64)       # ("next", "observation") is the true final obs at ends
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from gpu_envs.arrays import HostStaging
from gpu_envs.backends.base import Backend, ObsDict, RawStep
from gpu_envs.backends.gymnasium.info import InfoReader, InfoSpec
from gpu_envs.backends.gymnasium.spaces import ActionCodec, ObsLayout
from gpu_envs.devices import default_device, normalize_device
from gpu_envs.errors import BackendError, ClosedEnvError, GpuEnvsError, InvalidArgumentError, NotAnEnvError
from gpu_envs.specs import Box, Composite

__all__ = ["PLUGIN", "SB3Plugin", "SB3VecEnvBackend", "batch_infos"]

FINAL_OBS_KEY = "terminal_observation"
TRUNCATED_KEY = "TimeLimit.truncated"
_READ_BY_STEP = (FINAL_OBS_KEY, TRUNCATED_KEY)  # info keys step() reads itself
_OPTIONS = ("one_hot_actions", "info_spec")
_NEXT_KEYS = ("reward", "done", "terminated", "truncated", "final_obs_missing")


def _from_sb3(obj: Any) -> bool:
    return any(c.__module__.split(".")[0] == "stable_baselines3" for c in type(obj).__mro__)


def batch_infos(infos: list[Mapping], skip: tuple[str, ...] = ()) -> dict:
    """SB3's per-env info dicts as one gymnasium-style batched dict.

    Each key becomes an array ``[N, ...]`` (numeric values keep their dtype, others an
    object array) with its presence mask ``"_key"``; nested dicts stay nested. Top-level
    keys in ``skip`` are left out.

    Example::

        batch_infos([{"a": 1.0}, {}])   # {"a": array([1., 0.]), "_a": array([True, False])}
    """
    out: dict = {}
    n = len(infos)
    for i, info in enumerate(infos):
        _add_info(out, info, i, n, skip)
    return out


def _add_info(out: dict, info: Mapping, i: int, n: int, skip: tuple[str, ...] = ()) -> None:
    for key, value in info.items():
        if key in skip:
            continue
        if isinstance(value, Mapping):
            _add_info(out.setdefault(key, {}), value, i, n)
            continue
        if key not in out:
            array = np.asarray(value)
            numeric = array.dtype.kind in "biuf"
            out[key] = np.zeros((n, *array.shape), array.dtype) if numeric else np.empty(n, object)
            out[f"_{key}"] = np.zeros(n, bool)
        try:
            out[key][i] = value
        except (TypeError, ValueError):  # another shape or type than on the first row: keep it as objects
            column = np.empty(n, object)
            column[:] = list(out[key])
            column[i] = value
            out[key] = column
        out[f"_{key}"][i] = True


def _monitor_entries(venv: Any) -> dict:
    """The ``Monitor`` episode entries to declare up front, when every sub-env has a Monitor."""
    from stable_baselines3.common.monitor import Monitor

    try:
        wrapped = venv.env_is_wrapped(Monitor)
    except Exception:  # a custom VecEnv without env_is_wrapped support
        return {}
    if not wrapped or not all(wrapped):
        return {}
    return {
        ("episode", "r"): Box(-np.inf, np.inf, (), torch.float64),
        ("episode", "l"): Box(-np.inf, np.inf, (), torch.int64),
        ("episode", "t"): Box(-np.inf, np.inf, (), torch.float64),
    }


class SB3VecEnvBackend(Backend):
    """Backend over a Stable-Baselines3 ``VecEnv`` (see the module docstring).

    Args:
        venv: the VecEnv (wrappers such as ``VecNormalize`` included).
        device: target device; ``None`` means :func:`gpu_envs.devices.default_device`.
        one_hot_actions: a ``Discrete`` action as a one-hot bool ``[N, n]`` tensor.
        info_spec: a Composite of the info entries to keep (no discovery), or ``None``.
    """

    name = "sb3"
    supports_partial_reset = False
    # None: packed pinned staging for accelerators, fresh arrays on the CPU; tests set True
    # to run the packed path (a CUDA target's) on the CPU.
    staging_packed: bool | None = None

    def __init__(
        self,
        venv: Any,
        device: torch.device | str | None = None,
        *,
        one_hot_actions: bool = False,
        info_spec: Composite | None = None,
    ) -> None:
        self.venv = venv
        self.num_envs = n = int(venv.num_envs)
        self.device = normalize_device(device if device is not None else default_device())
        self._layout = ObsLayout(venv.observation_space, self.device)
        self.observation_spec = self._layout.spec
        self._keys = self._layout.keys
        self._codec = ActionCodec(venv.action_space, self.device, n, one_hot_actions)
        self.action_spec = self._codec.spec
        if info_spec is not None and not isinstance(info_spec, Composite):
            raise InvalidArgumentError(
                f"info_spec must be a gpu_envs.specs.Composite of the info entries to keep, got {type(info_spec).__name__}."
            )
        self.info_spec = InfoSpec({}, device=self.device) if info_spec is None else info_spec.to(self.device)
        self._info = InfoReader(
            self.info_spec,
            set(self._keys) | set(_NEXT_KEYS),
            n,
            declared=info_spec is not None,
            expected=_monitor_entries(venv),
        )
        self._obs_fields = [
            ((n, *shape), self.observation_spec[key].dtype)
            for key, shape in zip(self._keys, self._layout.shapes, strict=True)
        ]
        self._reset_stage = HostStaging(self._obs_fields, self.device, self.staging_packed)
        self._stage: HostStaging | None = None  # built at the first step, once the info fields are known
        self._info_keys: list = []
        self._final_scratch = [
            np.zeros(shape, dtype) for (shape, _), dtype in zip(self._obs_fields, self._layout.dtypes, strict=True)
        ]
        self._closed = False

    def describe(self) -> str:
        outer, inner = type(self.venv).__name__, type(self.venv.unwrapped).__name__
        return f"sb3({outer})" if outer == inner else f"sb3({outer} over {inner})"

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        if self._closed:
            raise ClosedEnvError("this SB3 VecEnv was closed; build a new one and wrap it again.")
        try:
            return fn(*args)
        except GpuEnvsError:
            raise
        except Exception as err:
            raise BackendError(
                f"{self.describe()} raised in {what}: {type(err).__name__}: {err}. Its sub-envs may be half-stepped: "
                "call env.reset() before stepping again."
            ) from err

    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        if seed is not None:
            self._call("seed", self.venv.seed, int(seed))
        obs = self._call("reset", self.venv.reset)
        return dict(zip(self._keys, self._reset_stage.publish(self._layout.read(obs)), strict=True))

    def step(self, action: torch.Tensor) -> RawStep:
        obs, reward, dones, infos = self._call("step", self.venv.step, self._codec.to_numpy(action))
        dones = np.asarray(dones, dtype=bool).reshape(self.num_envs)
        truncated = np.zeros(self.num_envs, dtype=bool)
        final, final_mask = None, None
        ended = np.flatnonzero(dones).tolist()
        if ended:
            final, final_mask = self._final_obs(infos, ended, truncated)
        terminated = dones & ~truncated
        info = batch_infos(infos, _READ_BY_STEP)
        if self._stage is None:
            self._build_step_stage(info)
        values = [*self._layout.read(obs), reward, terminated, truncated, final_mask]
        values += final if final is not None else [None] * len(self._keys)
        if self._info_keys:
            values += self._info.read(info, False, terminated, truncated)
        elif info:
            self._info.read(info, False, terminated, truncated)  # warns once about entries it drops
        out = self._stage.publish(values)
        k = len(self._keys)
        return RawStep(
            obs=dict(zip(self._keys, out[:k], strict=True)),
            reward=out[k],
            terminated=out[k + 1],
            truncated=out[k + 2],
            final_obs=None if final is None else dict(zip(self._keys, out[k + 4 : 2 * k + 4], strict=True)),
            final_mask=out[k + 3],
            info=dict(zip(self._info_keys, out[2 * k + 4 :], strict=True)),
        )

    def _final_obs(self, infos: list, ended: list[int], truncated: np.ndarray) -> tuple[list, np.ndarray | None]:
        """Fill the final-observation scratch from the ended rows' infos; also sets ``truncated``."""
        missing = []
        for i in ended:
            info = infos[i]
            truncated[i] = bool(info.get(TRUNCATED_KEY, False))
            final = info.get(FINAL_OBS_KEY)
            if final is None:
                missing.append(i)
                continue
            for dst, leaf in zip(self._final_scratch, self._layout.read(final), strict=True):
                dst[i] = leaf
        if not missing:
            return self._final_scratch, None
        valid = np.ones(self.num_envs, dtype=bool)
        valid[missing] = False
        return self._final_scratch, valid

    def _build_step_stage(self, info: dict) -> None:
        n = self.num_envs
        info_fields = self._info.discover(info)
        flags = [((n,), torch.float32), ((n,), torch.bool), ((n,), torch.bool), ((n,), torch.bool)]
        fields = self._obs_fields + flags + self._obs_fields + list(info_fields.values())
        self._stage = HostStaging(fields, self.device, self.staging_packed)
        self._info_keys = list(info_fields)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.venv.close()


class SB3Plugin:
    """Registry entry: wraps Stable-Baselines3 VecEnvs; makes nothing by id."""

    name = "sb3"

    def available(self) -> bool:
        return importlib.util.find_spec("stable_baselines3") is not None

    def env_ids(self) -> list[str]:
        return []

    def can_make(self, env_id: str) -> bool:
        return False

    def make(self, env_id: str, num_envs: int, device: torch.device | None, **kwargs: Any) -> Backend:
        """Never reached (``can_make`` is False): SB3 VecEnvs are built by SB3 and wrapped."""
        raise InvalidArgumentError(
            "the sb3 backend wraps existing VecEnvs: build one with stable_baselines3.common.env_util."
            f"make_vec_env({env_id!r}, n_envs={num_envs}) and pass it to gpu_envs.wrap()."
        )

    def detect(self, obj: Any) -> bool:
        if not _from_sb3(obj):
            return False
        from stable_baselines3.common.vec_env import VecEnv

        return isinstance(obj, VecEnv)

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> SB3VecEnvBackend:
        if not self.detect(obj):
            raise NotAnEnvError(
                f"the sb3 backend wraps stable_baselines3 VecEnv objects, got {type(obj).__module__}.{type(obj).__name__}."
            )
        unknown = sorted(set(kwargs) - set(_OPTIONS))
        if unknown:
            raise InvalidArgumentError(
                f"wrap(SB3 VecEnv) got unknown keyword arguments {unknown}; the sb3 backend accepts {list(_OPTIONS)} "
                "(plus missing_obs_value and validate for the BatchedEnv)."
            )
        return SB3VecEnvBackend(obj, device, **kwargs)


PLUGIN = SB3Plugin()
