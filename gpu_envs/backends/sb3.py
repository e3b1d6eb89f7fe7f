"""Stable-Baselines3 ``VecEnv`` objects (``DummyVecEnv``, ``SubprocVecEnv``, ``VecNormalize``...).

An SB3 VecEnv auto-resets inside ``step`` and reports episode ends in per-env info
dicts. :class:`SB3VecEnvShim` presents it as a SAME_STEP gymnasium ``VectorEnv``, and
the gymnasium backend does the rest (exact transitions, staging, failures as clear
errors):

* ``dones[i]`` ends row ``i``; ``infos[i]["TimeLimit.truncated"]`` says the end was a
  truncation (SB3 sets it to ``truncated and not terminated``), so ``terminated`` is
  ``done and not truncated``.
* ``infos[i]["terminal_observation"]`` is row ``i``'s TRUE final observation (the one
  ``step`` returns is already the next episode's first); it becomes gymnasium's
  ``info["final_obs"]``. An ended row without one gets the placeholder and
  ``("next", "final_obs_missing")``. SB3's observation wrappers (``VecNormalize``,
  ``VecFrameStack``...) transform it like the observation.
* Other numeric info entries become ``("next", key)`` tensors, discovered at the first
  step (:mod:`gpu_envs.backends.gymnasium_envs.info`); an ended row's entry is its last step's
  (SB3 keeps the reset info apart). The ``("episode", "r"/"l"/"t")`` entries of SB3's
  ``Monitor`` (which ``make_vec_env`` adds) are there from the first step when every
  sub-env has a Monitor, 0 on rows where no episode ended.
* ``reset(seed=s)`` calls ``venv.seed(s)`` first (SB3 seeds sub-env ``i`` with ``s + i``
  at the next reset, gymnasium's rule). SB3 resets all sub-envs or none, so a reset
  mask naming only some rows is refused (by the BatchedEnv, with the fix).
* Spaces are gymnasium's (SB3 >= 2.0): Dict observations become keys, Discrete
  actions an index ``[N]`` (:mod:`gpu_envs.backends.gymnasium_envs.spaces`).

Python loops over the ended rows and over the info dicts (SB3 itself deep-copies them
every step). Detection looks at class modules, so stable_baselines3 is imported only
for its own objects.

Example::

    from stable_baselines3.common.env_util import make_vec_env
    env = gpu_envs.wrap(make_vec_env("CartPole-v1", n_envs=8), device="cpu")
    traj = env.rollout(64)       # ("next", "observation") is the true final obs at ends
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium
import numpy as np
import torch

from gpu_envs.backends.gymnasium_envs import GymnasiumBackend
from gpu_envs.backends.inbound import InboundPlugin, check_options, from_package
from gpu_envs.contract.errors import NotAnEnvError, ResetMaskError
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.utils.arguments import as_int

__all__ = ["PLUGIN", "SB3Plugin", "SB3VecEnvBackend", "SB3VecEnvShim"]

FINAL_OBS_KEY = "terminal_observation"
TRUNCATED_KEY = "TimeLimit.truncated"
_OPTIONS = ("one_hot_actions", "info_spec")
_MONITOR = {"r": np.float64, "l": np.int64, "t": np.float64}  # Monitor's info["episode"] entries
_SB3_KEYS = frozenset((FINAL_OBS_KEY, TRUNCATED_KEY))  # read by the shim itself, not info entries


def _all_monitored(venv: Any) -> bool:
    """Every sub-env is wrapped in SB3's ``Monitor`` (its episode entries only appear at episode ends)."""
    from stable_baselines3.common.monitor import Monitor

    try:
        wrapped = venv.env_is_wrapped(Monitor)
    except Exception:  # a custom VecEnv without env_is_wrapped support
        return False
    return bool(wrapped) and all(wrapped)


class SB3VecEnvShim(gymnasium.vector.VectorEnv):
    """An SB3 ``VecEnv`` as a SAME_STEP gymnasium ``VectorEnv`` (see the module docstring)."""

    def __init__(self, venv: Any) -> None:
        self.venv = venv
        self.gpu_envs_simulator = venv  # what BatchedEnv claims: one VecEnv, one BatchedEnv
        self.num_envs = n = as_int(venv.num_envs, f"{type(venv).__name__}.num_envs", minimum=1)
        self.single_observation_space = venv.observation_space
        self.single_action_space = venv.action_space
        self.observation_space = gymnasium.vector.utils.batch_space(venv.observation_space, n)
        self.action_space = gymnasium.vector.utils.batch_space(venv.action_space, n)
        self.metadata = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}
        self._monitored = _all_monitored(venv)
        self._warned = False  # the VecEnv reports no truncation (warned once)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if options and "reset_mask" in options:
            raise ResetMaskError(
                "Stable-Baselines3 VecEnvs reset all their envs or none; reset every env with env.reset()."
            )
        if seed is not None:
            self.venv.seed(int(seed))  # checked by BatchedEnv: an int in [0, 2**63)
        return self.venv.reset(), {}

    def step(self, actions: Any) -> tuple[Any, Any, np.ndarray, np.ndarray, dict]:
        obs, reward, dones, infos = self.venv.step(actions)
        n = self.num_envs
        dones = np.asarray(dones, dtype=bool).reshape(n)
        info: dict = {}
        only_sb3_keys = _SB3_KEYS.issuperset
        for i, env_info in enumerate(infos):
            if not only_sb3_keys(env_info):  # an entry besides SB3's own two (most steps have none)
                info = self._add_info(info, {k: v for k, v in env_info.items() if k not in _SB3_KEYS}, i)
        if self._monitored and "episode" not in info:
            info["episode"] = {k: np.zeros(n, dtype) for k, dtype in _MONITOR.items()}
            info["episode"].update({f"_{k}": np.zeros(n, bool) for k in _MONITOR})
            info["_episode"] = np.zeros(n, bool)
        truncated = np.zeros(n, dtype=bool)
        if not np.count_nonzero(dones):
            return obs, reward, dones, truncated, info
        # an object array from np.empty holds None on every row
        final, present, terminated = np.empty(n, dtype=object), np.zeros(n, dtype=bool), dones.copy()
        reported = False  # SB3's own VecEnvs put TimeLimit.truncated in the info of every ended episode
        for i in dones.nonzero()[0].tolist():
            env_info = infos[i]
            reported = reported or TRUNCATED_KEY in env_info
            if env_info.get(TRUNCATED_KEY, False):
                truncated[i], terminated[i] = True, False
            final[i] = env_info.get(FINAL_OBS_KEY)
            present[i] = final[i] is not None
        if not reported and not self._warned:
            self._warn_no_truncation()
        info["final_obs"], info["_final_obs"] = final, present
        return obs, reward, terminated, truncated, info

    def _warn_no_truncation(self) -> None:
        self._warned = True
        cls = type(self.venv)
        warnings.warn(
            f"{cls.__module__}.{cls.__name__} put no {TRUNCATED_KEY!r} in the info of its ended episodes, which SB3's "
            "own VecEnvs (DummyVecEnv, SubprocVecEnv) always do: this VecEnv never reports truncation, so gpu_envs "
            "takes every end as terminated, time limits included, and nothing bootstraps from their final "
            "observations. SuperSuit's SB3 vector env (PettingZoo) drops the key. If its episodes have time limits, "
            f"use a VecEnv that sets infos[i][{TRUNCATED_KEY!r}] (or wrap the envs themselves with gpu_envs.wrap).",
            stacklevel=2,
        )

    def close_extras(self, **kwargs: Any) -> None:
        self.venv.close()


class SB3VecEnvBackend(GymnasiumBackend):
    """The gymnasium backend over an SB3 VecEnv, through :class:`SB3VecEnvShim`; no partial reset."""

    name = "sb3"
    # an SB3 VecEnv resets in step and keeps infos[i]["terminal_observation"]; no partial reset
    capabilities = GymnasiumBackend.capabilities.replace(final_obs=FinalObsKind.SIMULATOR, partial_reset=False)

    def __init__(self, venv: Any, device: torch.device | str | None = None, **kwargs: Any) -> None:
        super().__init__(SB3VecEnvShim(venv), device, **kwargs)
        outer, inner = type(venv).__name__, type(venv.unwrapped).__name__
        self._described = f"sb3({outer})" if outer == inner else f"sb3({outer} over {inner})"

    def describe(self) -> str:
        return self._described


class SB3Plugin(InboundPlugin):
    """Registry entry: wraps Stable-Baselines3 VecEnvs (build them with SB3, e.g. ``make_vec_env``)."""

    name = "sb3"
    package = "stable_baselines3"

    def detect(self, obj: Any) -> bool:
        if not from_package(obj, self.package):
            return False
        from stable_baselines3.common.vec_env import VecEnv

        return isinstance(obj, VecEnv)

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> SB3VecEnvBackend:
        if not self.detect(obj):
            raise NotAnEnvError(
                f"the sb3 backend wraps stable_baselines3 VecEnv objects, got {type(obj).__module__}.{type(obj).__name__}."
            )
        check_options(kwargs, _OPTIONS, "wrap(SB3 VecEnv)", self.name)
        return SB3VecEnvBackend(obj, device, **kwargs)


PLUGIN = SB3Plugin()
