"""rsl_rl-style VecEnvs inbound (legged_gym, Genesis' locomotion tasks, a user's ``VecEnv``), without importing rsl_rl.

An env with rsl_rl's ``VecEnv`` interface -- ``num_envs``, ``num_actions``, ``device``,
``episode_length_buf``, ``get_observations()`` and ``step(actions) -> (obs, rewards, dones,
extras)`` -- resets ended rows inside ``step`` (``reset_idx``) and returns the NEXT episode's
observation there. :class:`RslRlVecEnvShim` presents it as a torch vector env
(:mod:`gpu_envs.backends.torch_envs`) and the torch backend does the rest:

* ``dones`` split by ``extras["time_outs"]``: ``truncated = dones & time_outs``,
  ``terminated = dones & ~time_outs`` (every end is ``terminated`` where the env gives no
  ``time_outs``, as rsl_rl itself reads it);
* the TRUE final observation where the env exposes it, under ``extras["final_obs"]`` (the
  documented hook: the observation of every row before ``reset_idx``, the full batch, in the
  structure of the observations; a task adds it in ``step`` before it resets); without it the
  ended rows get placeholders and ``("next", "final_obs_missing")`` -- never the reset
  observation passed off as a final one;
* observations: a tensor (``"observation"``), a ``(tensor, extras)`` pair (rsl_rl 2's
  ``get_observations``) or a TensorDict / dict of groups (rsl_rl 3+: ``"policy"``,
  ``"critic"``...); actions an unbounded float box of ``num_actions`` (rsl_rl's policies
  output unbounded actions; the task clips them);
* ``reset()``: the env's own ``reset()`` where it has one; otherwise the first ``reset``
  starts from the env's current state (rsl_rl envs reset themselves when built) and a later
  full reset is refused with the fix. Partial resets are refused (the interface has none).

Detection looks at the interface only (and never claims a torch vector env, which has
gymnasium spaces, or Isaac Lab's and mjlab's wrappers, which their own backends take).

Example::

    env = gpu_envs.wrap(Go2Env(num_envs=4096))      # a Genesis / legged_gym-style task
    traj = env.rollout(24)                          # ("next", "truncated") from extras["time_outs"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np
import torch

from gpu_envs.backends.base import Backend
from gpu_envs.backends.inbound import WrapOnlyPlugin
from gpu_envs.backends.torch_envs import TorchVectorBackend
from gpu_envs.contract.errors import InvalidArgumentError, NotAnEnvError, ResetMaskError
from gpu_envs.utils.arguments import as_int

__all__ = ["FINAL_OBS_KEY", "PLUGIN", "RslRlVecEnvShim", "looks_like_rsl_rl_vec_env"]

FINAL_OBS_KEY = "final_obs"  # extras key of the true final observations (the documented hook)
TIME_OUTS_KEY = "time_outs"
_METHODS = ("get_observations", "step")
_ATTRIBUTES = ("num_envs", "num_actions", "device", "episode_length_buf")


def looks_like_rsl_rl_vec_env(obj: Any) -> bool:
    """``obj`` has rsl_rl's VecEnv interface and is not a torch vector env (which has gymnasium spaces)."""
    return (
        all(callable(getattr(obj, m, None)) for m in _METHODS)
        and all(hasattr(obj, a) for a in _ATTRIBUTES)
        and not hasattr(obj, "single_observation_space")
        and not isinstance(obj, (gymnasium.Env, gymnasium.vector.VectorEnv))
    )


def _observations(out: Any) -> Any:
    """A tensor, or nested dicts of tensors, from what ``get_observations`` / ``step`` returned."""
    if isinstance(out, tuple):  # rsl_rl 2: (obs, extras)
        out = out[0]
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping) or hasattr(out, "keys"):  # a dict or a TensorDict of groups
        # (.keys(): iterating a TensorDict walks its batch dim, not its keys)
        return {key: _observations(out[key]) for key in out.keys()}  # noqa: SIM118
    raise NotAnEnvError(
        f"an rsl_rl-style VecEnv returned observations of type {type(out).__name__}; expected a tensor, a "
        "(tensor, extras) pair or a TensorDict / dict of observation groups."
    )


def _space(obs: Any) -> gymnasium.Space:
    if isinstance(obs, dict):
        return gymnasium.spaces.Dict({key: _space(value) for key, value in obs.items()})
    dtype = np.float32 if obs.is_floating_point() else np.int64
    return gymnasium.spaces.Box(-np.inf, np.inf, tuple(obs.shape[1:]), dtype)


class RslRlVecEnvShim:
    """An rsl_rl-style VecEnv as a torch vector env (see the module docstring)."""

    metadata = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}
    supports_reset_mask = False

    def __init__(self, venv: Any) -> None:
        self.venv = venv
        self.num_envs = as_int(venv.num_envs, f"{type(venv).__name__}.num_envs", minimum=1)
        self.device = torch.device(venv.device)
        num_actions = as_int(venv.num_actions, f"{type(venv).__name__}.num_actions", minimum=1)
        self.single_observation_space = _space(_observations(venv.get_observations()))
        self.single_action_space = gymnasium.spaces.Box(-np.inf, np.inf, (num_actions,), np.float32)
        self._started = False
        self._warned = False

    @property
    def unwrapped(self) -> Any:
        return self.venv

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if options is not None and options.get("reset_mask") is not None:
            raise ResetMaskError(
                f"{type(self.venv).__name__} (an rsl_rl-style VecEnv) resets rows only inside its own step; reset "
                "every row (env.reset()) or let episodes end."
            )
        own = getattr(self.venv, "reset", None)
        if callable(own):
            out = own()
        elif not self._started:
            out = self.venv.get_observations()  # rsl_rl envs reset themselves when they are built
        else:
            raise InvalidArgumentError(
                f"{type(self.venv).__name__} has no reset(): an rsl_rl-style VecEnv starts from the state it was built "
                "in, once. Build a new env to start over, or give it a reset() that resets every row."
            )
        self._started = True
        return _observations(out), {}

    def step(self, action: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        obs, rewards, dones, extras = self.venv.step(action)
        dones = dones.reshape(self.num_envs).to(torch.bool)
        time_outs = extras.get(TIME_OUTS_KEY) if isinstance(extras, Mapping) else None
        if time_outs is None:
            truncated = torch.zeros_like(dones)
        else:
            truncated = dones & time_outs.reshape(self.num_envs).to(torch.bool)
        info: dict = {}
        final = extras.get(FINAL_OBS_KEY) if isinstance(extras, Mapping) else None
        if final is not None:
            info["final_obs"] = _observations(final)
        return _observations(obs), rewards.reshape(self.num_envs), dones & ~truncated, truncated, info

    def close(self, **kwargs: Any) -> None:
        close = getattr(self.venv, "close", None)
        if callable(close):
            close()


class RslRlVecPlugin(WrapOnlyPlugin):
    """Registry entry: wraps rsl_rl-style VecEnvs (recognised by their interface; rsl_rl is never imported)."""

    name = "rsl_rl_vec"

    def detect(self, obj: Any) -> bool:
        return looks_like_rsl_rl_vec_env(obj)

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Backend:
        if not self.detect(obj):
            raise NotAnEnvError(
                f"the rsl_rl_vec backend wraps envs with rsl_rl's VecEnv interface (num_envs, num_actions, device, "
                f"episode_length_buf, get_observations(), step()), got {type(obj).__module__}.{type(obj).__name__}."
            )
        return TorchVectorBackend(RslRlVecEnvShim(obj), device, **kwargs)


PLUGIN = RslRlVecPlugin()
