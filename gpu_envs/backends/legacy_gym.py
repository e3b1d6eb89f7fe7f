"""Envs of the legacy ``gym`` package (0.26): single envs and gym's vector envs, via gymnasium shims.

gym 0.26 already has gymnasium's API (``reset`` -> ``(obs, info)``, ``step`` -> the
5-tuple with ``terminated`` and ``truncated``) but its own classes: ``gym.spaces``
instead of ``gymnasium.spaces``, and vector envs that auto-reset in the same step,
putting the true final observations in ``info["final_observation"]`` (masked by
``info["_final_observation"]``) and the final infos in ``info["final_info"]`` (an array
of dicts). Two small shims present them as gymnasium envs, and the gymnasium backend
does the rest (exact transitions, true final observations, info entries, seeding):

* :class:`GymEnvShim`: a ``gym.Env`` as a ``gymnasium.Env`` (spaces converted by
  :func:`gymnasium_space`), run as a batch of one;
* :class:`GymVectorEnvShim`: a ``gym.vector.VectorEnv`` as a SAME_STEP gymnasium
  ``VectorEnv`` (``final_observation`` -> ``final_obs``, ``final_info`` -> a batched
  dict). gym's vector envs cannot reset a subset of their envs, so a reset mask naming
  only some rows is refused (by the BatchedEnv, with the fix).

numpy 2: gym 0.26's ``PassiveEnvChecker`` (which ``gym.make`` adds unless
``disable_env_checker=True``) checks the first ``step`` with ``np.bool8``, a name numpy
2 removed, so that step raises ``AttributeError``. The shims mark that one-time check
as done on every checker they can reach (the single env's wrappers, a ``SyncVectorEnv``'s
sub-envs; the BatchedEnv validates the first step itself). A gym ``AsyncVectorEnv``
builds its envs in worker processes, out of reach: build it with
``disable_env_checker=True``. gym envs that use other names numpy 2 removed (gym's own
``Acrobot-v1`` calls ``np.float_``), as do users' gym-era envs that use them, fail inside
the env: the :class:`~gpu_envs.contract.errors.BackendError` quotes numpy's error and says
what helps (pin ``numpy<2``, replace the name in the env's code, or use gymnasium's version).

The pre-0.26 API (``reset`` returning the observation alone, a 4-tuple ``step``) is
refused with the fix. Detection looks at class modules (``gym.*``), so gym is imported
only to wrap its own objects.

Example::

    import gym
    env = gpu_envs.wrap(gym.make("CartPole-v1"), device="cpu")                    # batch of one
    env = gpu_envs.wrap(gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 8))
"""

from __future__ import annotations

from typing import Any, cast

import gymnasium
import numpy as np
import torch

from gpu_envs.backends.gymnasium_envs import GymnasiumBackend
from gpu_envs.backends.inbound import InboundPlugin, check_options, from_package
from gpu_envs.contract.errors import NotAnEnvError, ResetMaskError, UnsupportedSpaceError
from gpu_envs.utils.arguments import as_int

__all__ = ["PLUGIN", "GymEnvShim", "GymVectorEnvShim", "LegacyGymBackend", "LegacyGymPlugin", "gymnasium_space"]

AutoresetMode = gymnasium.vector.AutoresetMode
_OPTIONS = ("one_hot_actions", "info_spec")


def gymnasium_space(space: Any) -> gymnasium.spaces.Space:
    """The gymnasium equivalent of a ``gym.spaces`` space (Box, Discrete, Multi*, Dict, Tuple).

    Example: ``gymnasium_space(gym.spaces.Discrete(3, start=1))`` is
    ``gymnasium.spaces.Discrete(3, start=1)``.
    """
    if isinstance(space, gymnasium.spaces.Space):
        return space
    import gym.spaces

    spaces = gym.spaces
    if isinstance(space, spaces.Box):
        dtype = space.dtype  # gym's Box always has one (its __init__ refuses None)
        if dtype is None:
            raise UnsupportedSpaceError(f"gym Box {space!r} has no dtype.")
        return gymnasium.spaces.Box(space.low, space.high, space.shape, dtype)
    if isinstance(space, spaces.Discrete):
        return gymnasium.spaces.Discrete(int(space.n), start=int(space.start))
    if isinstance(space, spaces.MultiDiscrete):
        # gym's MultiDiscrete keeps an integer np.dtype (typed as any Space's, which may be None)
        return gymnasium.spaces.MultiDiscrete(space.nvec, dtype=cast("np.dtype[np.integer]", space.dtype))
    if isinstance(space, spaces.MultiBinary):
        return gymnasium.spaces.MultiBinary(space.n)
    if isinstance(space, spaces.Dict):
        return gymnasium.spaces.Dict({key: gymnasium_space(sub) for key, sub in space.spaces.items()})
    if isinstance(space, spaces.Tuple):
        return gymnasium.spaces.Tuple([gymnasium_space(sub) for sub in space.spaces])
    raise UnsupportedSpaceError(
        f"gym space {space!r} ({type(space).__name__}) has no fixed-shape tensor form. Wrap the env in a gym "
        "ObservationWrapper/ActionWrapper that encodes it as a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple."
    )


def _skip_numpy1_step_check(env: Any) -> None:
    """Mark the first-step check of gym's PassiveEnvChecker done where numpy lacks ``bool8``."""
    if hasattr(np, "bool8"):
        return
    from gym.wrappers.env_checker import PassiveEnvChecker

    node = env
    while node is not None:
        if isinstance(node, PassiveEnvChecker):
            node.checked_step = True
        node = getattr(node, "env", None)


def _gym_026_reset(env: Any, **kwargs: Any) -> tuple[Any, dict]:
    """``env.reset(**kwargs)``, refusing the pre-0.26 API (the observation alone)."""
    out = env.reset(**kwargs)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise _old_api(env, "reset()", out)
    return out


def _gym_026_step(env: Any, action: Any) -> tuple[Any, Any, Any, Any, dict]:
    """``env.step(action)``, refusing the pre-0.26 API (a 4-tuple with ``done``)."""
    out = env.step(action)
    if not (isinstance(out, tuple) and len(out) == 5):
        raise _old_api(env, "step()", out)
    return out


def _old_api(env: Any, what: str, got: Any) -> NotAnEnvError:
    return NotAnEnvError(
        f"{type(env).__name__}.{what} returned {type(got).__name__}"
        f"{f' of length {len(got)}' if isinstance(got, tuple) else ''}: that is the pre-0.26 gym API "
        f"(reset -> obs, step -> (obs, reward, done, info)). gpu_envs takes the gym 0.26 API (reset -> (obs, info), "
        "step -> (obs, reward, terminated, truncated, info)): build the env with gym 0.26's "
        "gym.make(id, apply_api_compatibility=True), or port it to gymnasium."
    )


class GymEnvShim(gymnasium.Env):
    """A gym 0.26 ``Env`` as a gymnasium ``Env``: same calls, gymnasium spaces, API checked."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.gpu_envs_simulator = env  # what BatchedEnv claims: one gym env, one BatchedEnv
        self.observation_space = gymnasium_space(env.observation_space)
        self.action_space = gymnasium_space(env.action_space)
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = getattr(env, "render_mode", None)
        _skip_numpy1_step_check(env)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        return _gym_026_reset(self.env, seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        return _gym_026_step(self.env, action)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class GymVectorEnvShim(gymnasium.vector.VectorEnv):
    """A gym 0.26 ``VectorEnv`` (same-step auto-reset) as a SAME_STEP gymnasium ``VectorEnv``."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.gpu_envs_simulator = env
        self.num_envs = as_int(env.num_envs, f"{type(env).__name__}.num_envs", minimum=1)
        self.single_observation_space = gymnasium_space(env.single_observation_space)
        self.single_action_space = gymnasium_space(env.single_action_space)
        self.observation_space = gymnasium.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**(getattr(env, "metadata", None) or {}), "autoreset_mode": AutoresetMode.SAME_STEP}
        for sub in getattr(env, "envs", None) or ():
            _skip_numpy1_step_check(sub)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if options and "reset_mask" in options:
            raise ResetMaskError("gym 0.26 vector envs reset all their envs or none; reset every env with env.reset().")
        return _gym_026_reset(self.env, seed=seed, options=options)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        obs, reward, terminated, truncated, info = _gym_026_step(self.env, actions)
        return obs, reward, terminated, truncated, self._gymnasium_info(info)

    def _gymnasium_info(self, info: dict) -> dict:
        """gym's same-step keys renamed to gymnasium's; ``final_info`` batched as gymnasium does."""
        if "final_observation" not in info:
            return info
        info = dict(info)
        info["final_obs"] = info.pop("final_observation")
        info["_final_obs"] = info.pop("_final_observation", None)
        finals, rows = info.pop("final_info", None), info.pop("_final_info", None)
        if finals is not None:
            batched: dict = {}
            present = [f is not None for f in finals] if rows is None else rows
            for i in np.asarray(present, dtype=bool).nonzero()[0].tolist():
                final_info = finals[i]
                if final_info.__class__ is not dict or final_info:  # an empty dict adds nothing (most envs)
                    batched = self._add_info(batched, final_info, i)
            info["final_info"] = batched
        return info

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()


class LegacyGymBackend(GymnasiumBackend):
    """The gymnasium backend over a gym 0.26 env (batch of one) or vector env, through the shims."""

    name = "legacy_gym"

    def __init__(self, env: Any, device: torch.device | str | None = None, **kwargs: Any) -> None:
        if isinstance(env, GymVectorEnvShim):
            super().__init__(env, device, **kwargs)
            self.capabilities = self.capabilities.replace(partial_reset=False)
        else:
            one = gymnasium.vector.SyncVectorEnv([lambda: env], copy=False, autoreset_mode=AutoresetMode.DISABLED)
            super().__init__(one, device, single=True, **kwargs)
        self._inner = type(getattr(env.env, "unwrapped", env.env)).__name__

    def describe(self) -> str:
        return f"legacy_gym({self._inner}, {'single env' if self._single else 'vector env'})"


class LegacyGymPlugin(InboundPlugin):
    """Registry entry: wraps gym 0.26 Env and VectorEnv objects (``make`` builds gymnasium's envs)."""

    name = "legacy_gym"
    package = "gym"

    def detect(self, obj: Any) -> bool:
        if not from_package(obj, self.package):  # gym's own classes, not gymnasium's
            return False
        import gym.vector

        return isinstance(obj, (gym.Env, gym.vector.VectorEnv))

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> LegacyGymBackend:
        if not self.detect(obj):
            raise NotAnEnvError(
                f"the legacy_gym backend wraps gym.Env or gym.vector.VectorEnv objects (gym 0.26), got "
                f"{type(obj).__module__}.{type(obj).__name__}."
            )
        check_options(kwargs, _OPTIONS, "wrap(gym env)", self.name)
        import gym.vector

        shim = GymVectorEnvShim(obj) if isinstance(obj, gym.vector.VectorEnv) else GymEnvShim(obj)
        return LegacyGymBackend(shim, device, **kwargs)


PLUGIN = LegacyGymPlugin()
