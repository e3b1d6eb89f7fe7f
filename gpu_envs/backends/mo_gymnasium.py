"""Multi-objective envs (MO-Gymnasium): a reward VECTOR per step, ``("next", "reward")`` ``[N, K]``.

An MO-Gymnasium env is a gymnasium env whose ``step`` returns K rewards, one per
objective, declared by ``env.unwrapped.reward_space`` (a ``Box`` of shape ``(K,)``).
gymnasium's own vector envs keep one float per env, so this backend batches MO envs
in a vector env holding ``[N, K]`` rewards (:class:`MOSameStepVectorEnv`, or the user's
``MOSyncVectorEnv``) and steps them with the gymnasium backend (true final
observations, info entries, seeding), declaring the reward spec from ``reward_space``:

* ``("next", "reward")`` is float32 ``[N, K]``; ``env.single_reward_spec`` is the env's
  ``Box`` of shape ``(K,)`` (its bounds included) and ``env.reward_spec`` ``[N, K]``;
* the rollout buffer and ``collect``, ``RewardScale`` and ``ClipReward`` (elementwise)
  and ``check_env`` take the vector as it is;
* what needs ONE number per step (``gae``, ``EpisodeStats``, trainers) raises a clear
  error naming the fix: :class:`gpu_envs.transforms.ScalarizeReward` (a weighted sum on
  the device, reward spec ``(1,)``), or mo-gymnasium's ``LinearReward`` around the env
  before wrapping (then it is a plain gymnasium env, and its ``info["vector_reward"]``
  is kept as ``("next", "vector_reward")``).

What ``wrap`` takes here: a single MO env (``mo_gymnasium.make(id)``, or any gymnasium
env with a 1-D ``reward_space`` and vector rewards) as a batch of one, and an
``MOSyncVectorEnv`` (or an ``MOAsyncVectorEnv``, with a gymnasium it starts on). A plain gymnasium ``SyncVectorEnv`` of MO
envs cannot hold their rewards and is refused with the fix. ``make(id, num_envs=n)``
builds an :class:`MOSameStepVectorEnv` of ``mo_gymnasium.make(id)`` for ids mo-gymnasium
registers (``import mo_gymnasium`` first, as with any gymnasium plugin); there is no
async option, since mo-gymnasium 1.3's ``MOAsyncVectorEnv`` does not start with
gymnasium 1.4. Detection reads ``reward_space`` and class modules only; mo_gymnasium
is imported when an MO env is wrapped.

``MOSyncVectorEnv`` auto-resets on the NEXT step, which the gymnasium backend could make
exact only by resetting the ended rows through ``reset_mask`` after every such step (one
more vector-env call, a merge and a copy: more than the step itself costs for small
envs). So the MO envs are stepped by :class:`MOSameStepVectorEnv` instead: gymnasium's
own ``SyncVectorEnv`` loop in SAME_STEP mode, holding ``[N, K]`` rewards as
``MOSyncVectorEnv`` does -- each sub-env stepped once, reset in the step where it ended,
its final observation in ``info["final_obs"]``. ``make`` builds one, and ``wrap`` of a
plain ``MOSyncVectorEnv`` (not subclassed, no vector wrapper around it) steps that env's
own sub-envs through one; same sub-envs, same seeding (``s + i``), same transitions.
Anything else (an ``MOSyncVectorEnv`` behind vector wrappers, a subclass) is stepped as
given, NEXT_STEP with masked resets; mo-gymnasium 1.3 answers such a masked reset with
stale observations on the rows it keeps, which :class:`FreshRowsOnMaskedReset` corrects
(the oracle tests fail without it).

Example::

    import mo_gymnasium
    env = gpu_envs.wrap(mo_gymnasium.make("deep-sea-treasure-v0"), device="cpu")
    env.rollout(10)["next", "reward"].shape          # [1, 10, 2]
    env = gpu_envs.make("deep-sea-treasure-v0", num_envs=8, device="cpu")
"""

from __future__ import annotations

import functools
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from gpu_envs.backends.gymnasium_envs import GymnasiumBackend
from gpu_envs.backends.inbound import InboundPlugin, check_options, from_package
from gpu_envs.contract.errors import InvalidArgumentError, MissingComponentError, NotAnEnvError
from gpu_envs.contract.specs import Box

__all__ = [
    "PLUGIN",
    "FreshRowsOnMaskedReset",
    "MOGymnasiumBackend",
    "MOGymnasiumPlugin",
    "MOSameStepVectorEnv",
    "vector_reward_space",
]

_OPTIONS = ("one_hot_actions", "info_spec")
_MO_VECTOR_ENVS = ("MOSyncVectorEnv", "MOAsyncVectorEnv")


def _scalarised(obj: Any) -> bool:
    """A ``LinearReward`` wrapper sits between ``obj`` and the MO env: the reward is a scalar."""
    node = obj
    while isinstance(node, (gym.Wrapper, gym.vector.VectorWrapper)):
        if from_package(node, "mo_gymnasium", ("LinearReward",)):
            return True
        node = node.env
    return False


def vector_reward_space(obj: Any) -> gym.spaces.Box | None:
    """The 1-D ``reward_space`` of an MO env or MO vector env; None for scalar rewards.

    A gymnasium ``SyncVectorEnv`` is looked into (its first sub-env), so that one built
    over MO envs is recognised (and refused with the fix) rather than failing inside
    gymnasium at the first step.
    """
    try:
        base = obj.unwrapped
    except Exception:  # no `unwrapped`, or a property that raises
        return None
    space = getattr(base, "reward_space", None)
    if space is None and isinstance(base, gym.vector.SyncVectorEnv) and base.envs:
        return vector_reward_space(base.envs[0])
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1 or _scalarised(obj):
        return None
    return space


def _mo_vector() -> Any:
    """mo-gymnasium's vector env module, or a clear error naming the extra."""
    try:
        from mo_gymnasium.wrappers import vector
    except ImportError as err:
        raise MissingComponentError(
            "this env returns vector rewards (a 1-D reward_space), which gpu_envs batches with mo-gymnasium's "
            f"MOSyncVectorEnv, but mo-gymnasium cannot be imported ({err}). Install it: pip install '.[mo]' in the gpu_envs clone."
        ) from err
    return vector


def _copied(obs: Any) -> Any:
    """A copy of a batched (Dict/Tuple) observation's arrays."""
    if isinstance(obs, dict):
        return {key: _copied(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_copied(value) for value in obs)
    return np.array(obs, copy=True)


def _merge_rows(rows: np.ndarray, new: Any, old: Any) -> Any:
    """``new`` on ``rows`` and ``old`` elsewhere, through Dict/Tuple observations."""
    if isinstance(new, dict):
        return {key: _merge_rows(rows, value, old[key]) for key, value in new.items()}
    if isinstance(new, tuple):
        return tuple(_merge_rows(rows, a, b) for a, b in zip(new, old, strict=True))
    return np.where(rows.reshape((-1,) + (1,) * (np.ndim(new) - 1)), new, old)


class FreshRowsOnMaskedReset(gym.vector.VectorWrapper):
    """Gives a masked reset of an ``MOSyncVectorEnv`` the current observations of the rows it keeps.

    mo-gymnasium 1.3's ``MOSyncVectorEnv.step`` never updates the per-env buffer that
    gymnasium's ``SyncVectorEnv.reset`` concatenates, so ``reset(options={"reset_mask":
    m})`` returns, on the rows NOT reset, the observations of the last full reset. The
    gymnasium backend resets ended rows that way (NEXT_STEP), so this wrapper keeps a copy
    of the observations of each step where a row ended and puts them back on the kept rows.
    """

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self._last: Any = None

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        ended = np.logical_or(terminated, truncated).any()
        self._last = _copied(obs) if ended else None
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: Any = None, options: dict | None = None) -> tuple[Any, dict]:
        rows = (options or {}).get("reset_mask")  # read first: SyncVectorEnv.reset pops it
        obs, info = self.env.reset(seed=seed, options=options)
        if rows is not None and self._last is not None:
            obs = _merge_rows(np.asarray(rows, dtype=bool), obs, self._last)
        self._last = None
        return obs, info


class MOSameStepVectorEnv(gym.vector.SyncVectorEnv):
    """MO envs stepped one by one and reset in the step where they end (gymnasium's SAME_STEP), rewards ``[N, K]``.

    gymnasium's ``SyncVectorEnv`` with ``autoreset_mode=SAME_STEP``, whose reward buffer
    holds one vector per env (what ``MOSyncVectorEnv`` does for its NEXT_STEP loop): the
    true final observations come in ``info["final_obs"]`` and ended rows need no second
    call. ``reward_space`` is the sub-envs' (K objectives). Built from env constructors,
    or, by :meth:`over`, around the sub-envs of an existing ``MOSyncVectorEnv``.

    Example::

        venv = MOSameStepVectorEnv([lambda: mo_gymnasium.make("deep-sea-treasure-v0")] * 4)
        obs, reward, terminated, truncated, info = venv.step(np.zeros(4, np.int64))  # reward [4, 2]
    """

    gpu_envs_simulator: gym.vector.SyncVectorEnv  # set by over() only: the env it stands for

    def __init__(self, env_fns: Any, copy: bool = False) -> None:
        super().__init__(env_fns, copy=copy, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        base: Any = self.envs[0].unwrapped  # an MO env: reward_space is mo-gymnasium's, not in gym.Env's type
        self.reward_space = base.reward_space
        self._rewards = np.zeros((self.num_envs, *self.reward_space.shape), dtype=np.float32)

    @classmethod
    def over(cls, venv: gym.vector.SyncVectorEnv) -> MOSameStepVectorEnv:
        """One over the sub-envs of ``venv`` (which it then drives; claims and closing go to ``venv``)."""
        same = cls([functools.partial(_itself, env) for env in venv.envs], copy=False)
        same.gpu_envs_simulator = venv  # wrapping venv twice is refused as for any simulator
        same.metadata = {**(venv.metadata or {}), "autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        return same


def _itself(env: Any) -> Any:
    return env


class MOGymnasiumBackend(GymnasiumBackend):
    """The gymnasium backend over an MO vector env, with the reward spec ``(K,)`` of its ``reward_space``."""

    name = "mo_gymnasium"

    def __init__(
        self, env: gym.vector.VectorEnv, device: torch.device | str | None, space: gym.spaces.Box, **kwargs: Any
    ) -> None:
        reward = Box(space.low, space.high, space.shape, torch.float32)
        if from_package(env.unwrapped, "mo_gymnasium", ("MOSyncVectorEnv",)):
            env = FreshRowsOnMaskedReset(env)
        super().__init__(env, device, reward_spec=reward, **kwargs)


class MOGymnasiumPlugin(InboundPlugin):
    """Registry entry: MO envs and MO vector envs for ``wrap``, mo-gymnasium ids for ``make``."""

    name = "mo_gymnasium"
    package = "mo_gymnasium"

    def make(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | None,
        *,
        vectorization: str | None = None,
        **kwargs: Any,
    ) -> MOGymnasiumBackend:
        """``num_envs`` copies of ``mo_gymnasium.make(env_id, **env_kwargs)`` in an :class:`MOSameStepVectorEnv`."""
        if vectorization not in (None, "sync"):
            raise InvalidArgumentError(
                f"the mo_gymnasium backend builds MOSyncVectorEnvs only (vectorization='sync'), got {vectorization!r}: "
                "mo-gymnasium 1.3's MOAsyncVectorEnv does not start with gymnasium 1.4 (its worker lacks an "
                "argument gymnasium passes)."
            )
        _mo_vector()  # a clear error if mo-gymnasium cannot be imported
        from mo_gymnasium.utils import make  # what mo_gymnasium.make is (re-exported without __all__)

        options = {k: kwargs.pop(k) for k in _OPTIONS if k in kwargs}
        fns = [functools.partial(make, env_id, **kwargs)] * num_envs
        try:
            venv = MOSameStepVectorEnv(fns, copy=False)
        except TypeError as err:
            raise InvalidArgumentError(
                f"mo-gymnasium could not build {env_id!r} with {sorted(kwargs)}: {err}."
            ) from err
        try:
            return MOGymnasiumBackend(venv, device, venv.reward_space, **options)
        except BaseException:
            venv.close()
            raise

    def detect(self, obj: Any) -> bool:
        return isinstance(obj, (gym.Env, gym.vector.VectorEnv)) and vector_reward_space(obj) is not None

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> MOGymnasiumBackend:
        """An MO vector env as it is, or a single MO env as a batch of one."""
        space = vector_reward_space(obj)
        if space is None:
            raise NotAnEnvError(
                f"the mo_gymnasium backend wraps envs with a 1-D reward_space (vector rewards), got "
                f"{type(obj).__module__}.{type(obj).__name__}."
            )
        vector = _mo_vector()
        if isinstance(obj, gym.vector.VectorEnv):
            check_options(kwargs, _OPTIONS, "wrap(MO VectorEnv)", self.name)
            base = obj.unwrapped
            if not from_package(base, "mo_gymnasium", _MO_VECTOR_ENVS) and not hasattr(base, "reward_space"):
                raise NotAnEnvError(
                    f"{type(base).__name__} holds one float reward per env, but its sub-envs return vectors of "
                    f"{space.shape[0]} objectives. Build it with mo_gymnasium.wrappers.vector.MOSyncVectorEnv (or "
                    "MOAsyncVectorEnv), or use gpu_envs.make(id, num_envs=n) for a mo-gymnasium id."
                )
            if type(obj) is vector.MOSyncVectorEnv:  # exactly it, no wrapper: its sub-envs stepped SAME_STEP
                obj = MOSameStepVectorEnv.over(cast(gym.vector.SyncVectorEnv, obj))  # MOSyncVectorEnv subclasses it
            return MOGymnasiumBackend(obj, device, space, **kwargs)
        check_options(kwargs, _OPTIONS, "wrap(MO Env)", self.name)
        venv = MOSameStepVectorEnv([functools.partial(_itself, obj)], copy=False)
        return MOGymnasiumBackend(venv, device, space, single=True, **kwargs)


PLUGIN = MOGymnasiumPlugin()
