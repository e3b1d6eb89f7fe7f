"""What runs inside each Ray actor: a gymnasium vector env of its share, behind the gymnasium backend.

Each actor builds its share of the envs with a *builder* (a picklable callable that
returns a :class:`~gpu_envs.backends.gymnasium_envs.GymnasiumBackend` on the CPU), so every
exactness rule of the gymnasium backend (auto-reset modes, true final observations,
info entries, seeds ``s + global index``) holds inside the actor unchanged. The actor
answers with plain numpy arrays, which Ray moves cheaply, and the driver
(:mod:`.backend`) assembles them into one batch.

A failure inside the env comes back as :class:`WorkerFailure` carrying the full
traceback text of the env's own exception (Ray's own report drops the frames of
chained exceptions).

Example (what the driver does, by hand)::

    worker = EnvWorker(functools.partial(make_share, "Pendulum-v1", 4, 0, {}))
    obs = worker.reset(seed=0, mask=None)
    result = worker.step(np.zeros((4, 1), np.float32))
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from gpu_envs.backends.gymnasium_envs import PLUGIN as GYMNASIUM
from gpu_envs.backends.gymnasium_envs import GymnasiumBackend
from gpu_envs.utils.arrays import to_torch


class StepResult(NamedTuple):
    """One step of a worker's rows: its gymnasium backend's RawStep as numpy arrays, field by field.

    ``final_obs`` is ``None`` when the observations themselves are the final ones (no
    row ended: nothing is sent twice); ``final_mask`` ``None``: ``final_obs`` is valid on
    every row (see :class:`~gpu_envs.backends.base.RawStep`).
    """

    obs: list[np.ndarray]  # leaves in the backend's key order, [rows, ...]
    reward: np.ndarray  # [rows, 1] ([rows, K]: K objectives)
    terminated: np.ndarray  # [rows, 1] bool
    truncated: np.ndarray  # [rows, 1] bool
    done: np.ndarray  # [rows, 1] bool
    final_obs: list[np.ndarray] | None
    final_mask: np.ndarray | None  # [rows] bool
    info: dict[Any, np.ndarray]


class WorkerFailure(Exception):
    """An exception inside a worker's env, with the env's own traceback as its text."""


def make_share(env_id: str, num_envs: int, env_index_offset: int, kwargs: dict[str, Any]) -> GymnasiumBackend:
    """``num_envs`` envs of a gymnasium id (a SAME_STEP SyncVectorEnv), seeded from global index ``env_index_offset``."""
    return GYMNASIUM.make(
        env_id, num_envs, torch.device("cpu"), vectorization="sync", env_index_offset=env_index_offset, **kwargs
    )


def registering(specs: Sequence[Any], build: Callable[[], GymnasiumBackend]) -> GymnasiumBackend:
    """Register the driver's script-only gymnasium ids (``specs``) this worker lacks, then ``build()``.

    A Ray worker imports modules, never the driver's script: an id registered there
    (``gym.register("MyEnv-v0", entry_point=MyEnv)`` in ``__main__``) is unknown in the
    worker unless its spec travels with the build function.
    """
    for spec in specs:
        if spec.id not in gym.registry:
            gym.registry[spec.id] = spec
    return build()


def wrap_share(
    env_fns: Sequence[Callable[[], gym.Env]], env_index_offset: int, autoreset_mode: Any, kwargs: dict[str, Any]
) -> GymnasiumBackend:
    """A SyncVectorEnv over ``env_fns`` in ``autoreset_mode``, seeded from global index ``env_index_offset``."""
    venv = gym.vector.SyncVectorEnv(list(env_fns), autoreset_mode=autoreset_mode, copy=False)
    try:
        return GymnasiumBackend(venv, torch.device("cpu"), env_index_offset=env_index_offset, **kwargs)
    except BaseException:
        venv.close()
        raise


def _numpy(tensors: Sequence[torch.Tensor]) -> list[np.ndarray]:
    return [t.numpy() for t in tensors]


class EnvWorker:
    """The Ray actor's class (made remote by the driver): one gymnasium backend, numpy in and out."""

    def __init__(self, build: Callable[[], GymnasiumBackend]) -> None:
        self.backend = self._guard(build)
        self.keys = list(self.backend.observation_spec.keys(True, True))

    @staticmethod
    def _guard(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            raise WorkerFailure("".join(traceback.format_exception(err)).rstrip()) from None

    def facts(self) -> dict[str, Any]:
        """Specs and identity, read once by the driver."""
        return {
            "observation_spec": self.backend.observation_spec,
            "action_spec": self.backend.action_spec,
            "reward_spec": self.backend.reward_spec,
            "keys": self.keys,
            "describe": self.backend.describe(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }

    def info_spec(self) -> Any:
        """The info entries this worker's backend discovered at its first step."""
        return self.backend.info_spec

    def reset(self, seed: int | None, mask: np.ndarray | None) -> list[np.ndarray]:
        rows = None if mask is None else to_torch(np.asarray(mask, dtype=bool))
        obs = self._guard(self.backend.reset, seed=seed, mask=rows)
        return _numpy([obs[key] for key in self.keys])

    def step(self, action: np.ndarray) -> StepResult:
        raw = self._guard(self.backend.step, to_torch(action))  # shares Ray's read-only buffer
        final = raw.final_obs
        return StepResult(
            obs=_numpy([raw.obs[key] for key in self.keys]),
            reward=raw.reward.numpy(),
            terminated=raw.terminated.numpy(),
            truncated=raw.truncated.numpy(),
            done=raw.done.numpy(),
            final_obs=None if final is None or final is raw.obs else _numpy([final[key] for key in self.keys]),
            final_mask=None if raw.final_mask is None else raw.final_mask.numpy().reshape(-1),
            info={key: value.numpy() for key, value in raw.info.items()},
        )

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.backend.close()
