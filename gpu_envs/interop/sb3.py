"""``to_sb3``: any gpu_envs env as a Stable-Baselines3 ``VecEnv``.

SB3's algorithms (PPO, A2C, SAC, ...) take it directly: numpy at the boundary (one
device -> host copy per step and observation leaf), the reset observation on rows that
ended, and, as SB3's own ``DummyVecEnv`` gives them,

* ``infos[i]["terminal_observation"]``: the TRUE final observation of a row that ended
  (SB3 bootstraps truncated episodes from it);
* ``infos[i]["TimeLimit.truncated"]``: True where the episode was truncated and not
  terminated, on every row;
* the env's info entries (``env.info_spec``) on every row, and
  ``infos[i]["final_obs_missing"] = True`` where the backend could not give a final
  observation (the terminal observation is then its placeholder).

Actions are checked on the host every step before the env moves (count/shape, integer
dtype for integer actions, ``Discrete``/``MultiDiscrete`` ranges, finite floats); a bad
batch raises :class:`~gpu_envs.contract.errors.ActionError` naming the rows and values.

The batch is ONE env for gpu_envs: ``get_attr``, ``set_attr`` and ``env_method`` act on
it once (results are repeated per index; a subset of indices is refused), ``seed(s)``
seeds the next ``reset`` with ``s``, and ``env_is_wrapped(cls)`` tells whether a
``TransformedEnv`` holds a ``cls`` transform. For SB3's episode statistics
(``rollout/ep_rew_mean``), wrap it in SB3's ``VecMonitor``.

Example::

    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", to_sb3(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu")))
    model.learn(20_000)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, ResetNeededError
from gpu_envs.contract.specs.env_specs import require_scalar_reward
from gpu_envs.interop.conversions import (
    HostActions,
    Key,
    ObservationLayout,
    host_copy,
    host_view,
    leaf,
    require_env,
    simulator_of,
)
from gpu_envs.interop.libraries import require
from gpu_envs.utils.arguments import as_seed
from gpu_envs.utils.tensordicts import get_entry, set_entry

vec_env = require("stable_baselines3.common.vec_env", package="stable-baselines3", extra="sb3", consumer="to_sb3")

FINAL_OBS_KEY = "terminal_observation"
TRUNCATED_KEY = "TimeLimit.truncated"


def to_sb3(env: Any) -> SB3VecEnv:
    """``env`` (a BatchedEnv or TransformedEnv) as a Stable-Baselines3 ``VecEnv``; closing it closes ``env``.

    Example::

        venv = to_sb3(gpu_envs.make("Pendulum-v1", num_envs=16, device="cpu"))
        obs = venv.reset()                                     # numpy [16, 3]
        obs, rewards, dones, infos = venv.step(np.zeros((16, 1), np.float32))
    """
    return SB3VecEnv(env)


class SB3VecEnv(vec_env.VecEnv):
    """A gpu_envs env behind SB3's ``VecEnv`` API; build it with :func:`to_sb3`.

    Attributes:
        env: the wrapped gpu_envs env.
    """

    def __init__(self, env: Any) -> None:
        require_env(env, "to_sb3")
        require_scalar_reward(env.single_reward_spec.shape, "to_sb3")
        self.env = env
        self._layout = ObservationLayout(env.single_observation_spec, env.observation_spec)
        self._root: TensorDictBase | None = None
        self._actions: Any = None
        self._host_actions = HostActions(env, "to_sb3")
        self._info_keys: list[Key] | None = None  # read after the first step (backends may add keys then)
        self._rows = range(env.num_envs)
        # a final_obs_missing tensor read once with no True row (the env's constant): not read again
        self._none_missing: Any = None
        super().__init__(env.num_envs, self._layout.single_space, env.single_action_spec.to_gym())

    # ------------------------------------------------------------ reset/step
    def reset(self) -> Any:
        """Reset every row (with the seed of the last ``seed()``, if any); returns the observations."""
        _refuse_options(self._options)
        root = self.env.reset(seed=self._seeds[0])  # SB3 gives env i seed + i: gpu_envs seeds the batch from one
        self._reset_seeds()
        self._reset_options()
        self._root = root
        return self._layout.build(lambda key: host_copy(leaf(root, key)))

    def step_async(self, actions: np.ndarray) -> None:
        """Keep the actions for :meth:`step_wait` (checked there, before the env moves)."""
        self._actions = actions

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """``(obs, rewards, dones, infos)`` of the step with the actions of ``step_async``.

        The actions are checked first (count, dtype, index ranges, finite values:
        :class:`~gpu_envs.interop.conversions.HostActions`); a refused batch raises
        :class:`~gpu_envs.contract.errors.ActionError` and leaves the env as it was.

        Arrays and info dicts are new on every step and the caller's to keep or modify
        (SB3's PPO adds to ``rewards`` in place; ``VecMonitor`` writes into the info
        dicts), as ``DummyVecEnv``'s copies are. Rewards, dones and final observations
        are the host memory of this step's ``td["next"]`` tensors (on the CPU, no copy):
        the env made them for this step, never writes them again and never reads them
        after it (``td`` is dropped here). The observations are copied: the env keeps
        its root. One host read per leaf: the observations, rewards and dones on every
        step; the ``terminated`` flags and final observations (and
        ``final_obs_missing``, unless it is the env's constant "none missing") only on
        steps where a row ended.
        """
        td = self._root
        if td is None:
            raise ResetNeededError("step() was called before reset(): call venv.reset() first.")
        set_entry(td, "action", self._host_actions(self._actions))
        td, root = self.env.step_and_maybe_reset(td)
        self._root = root
        nxt = get_entry(td, "next")
        n, layout = self.num_envs, self._layout
        if layout.lone:  # one "observation" array (most envs): no layout walk
            obs = host_copy(get_entry(root, "observation"))
        else:
            obs = layout.build(lambda key: host_copy(leaf(root, key)))
        rewards = host_view(get_entry(nxt, "reward")).reshape(n)  # the caller's: the env is done with td["next"]
        dones = host_view(get_entry(nxt, "done")).reshape(n)  # done == terminated | truncated (the contract)
        ended = dones.tolist()
        infos = self._ended_infos(nxt, ended) if True in ended else [{TRUNCATED_KEY: False} for _ in self._rows]
        info_keys = self._info_keys
        if info_keys is None:
            spec = getattr(self.env, "single_info_spec", None)
            info_keys = self._info_keys = [] if spec is None else list(spec.keys(include_nested=True, leaves_only=True))
        for key in info_keys:
            self._add_info(infos, key, host_copy(leaf(nxt, key)))
        return obs, rewards, dones, infos

    def _ended_infos(self, nxt: TensorDictBase, ended: list[bool]) -> list[dict[str, Any]]:
        """The info dicts of a step where rows ended (``ended``: each row's done).

        ``TimeLimit.truncated`` is ``done and not terminated`` (= truncated and not
        terminated, as ``DummyVecEnv`` gives it); ended rows get their final observation.
        """
        n, layout = self.num_envs, self._layout
        infos = [{TRUNCATED_KEY: False} for _ in self._rows]
        rows = [i for i in self._rows if ended[i]]
        terminated = host_view(get_entry(nxt, "terminated")).reshape(n).tolist()
        if layout.lone:
            final = host_view(get_entry(nxt, "observation"))  # the caller's, as rewards (rows are views)
            for i in rows:
                info = infos[i]
                info[TRUNCATED_KEY] = not terminated[i]
                info[FINAL_OBS_KEY] = final[i]
        else:
            leaves = {key: host_view(leaf(nxt, key)) for key in layout.keys}  # the caller's (rows are views)
            for i in rows:
                info = infos[i]
                info[TRUNCATED_KEY] = not terminated[i]
                info[FINAL_OBS_KEY] = layout.build(lambda key, i=i: leaves[key][i])
        missing = get_entry(nxt, "final_obs_missing")
        if missing is not None and missing is not self._none_missing:
            flags = host_view(missing).reshape(n).tolist()
            if True in flags:
                for i in rows:
                    if flags[i]:
                        infos[i]["final_obs_missing"] = True
            else:  # the env's tensors are never written again: this one holds no True row, ever
                self._none_missing = missing
        return infos

    @staticmethod
    def _add_info(infos: list[dict[str, Any]], key: Key, values: np.ndarray) -> None:
        path = key if isinstance(key, tuple) else (key,)
        for info, value in zip(infos, values, strict=True):
            node = info
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value

    @property
    def unwrapped(self) -> Any:
        """The simulator behind the gpu_envs env (the built-in env, the Isaac Lab or mjlab env, ...), what
        trainers' runners read (mjlab's ``MjlabOnPolicyRunner.save``: ``env.unwrapped.common_step_counter``)."""
        return simulator_of(self.env)

    def close(self) -> None:
        self.env.close()

    # --------------------------------------------------- attributes, methods
    def _indices(self, indices: Any) -> list[int]:
        wanted = list(self._get_indices(indices))
        outside = [i for i in wanted if not 0 <= i < self.num_envs]
        if outside:
            raise InvalidArgumentError(f"indices {outside} are outside the {self.num_envs} envs of this VecEnv.")
        return wanted

    def _whole_batch(self, indices: Any, what: str) -> int:
        """How many indices were asked for, refusing a subset: the batch is one gpu_envs env."""
        wanted = self._indices(indices)
        if sorted(wanted) != list(range(self.num_envs)):
            raise InvalidArgumentError(
                f"{what} with indices={indices!r}: a gpu_envs env is one object for all {self.num_envs} rows, so "
                f"{what} acts on all of them at once; call it without indices."
            )
        return len(wanted)

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """SB3's ``seed()``, checked now (an int in ``[0, 2**63 - 1]`` or None) rather than at the next ``reset``."""
        return super().seed(as_seed(seed))

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        """Only empty options: gpu_envs envs take their settings when built. Refused here, not at the next reset."""
        _refuse_options(options if isinstance(options, (list, tuple)) else [options])
        super().set_options(options)

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """The attribute per requested index: the gpu_envs env's, else each sub-env's (a gymnasium vector env's
        ``envs``, an SB3 VecEnv's), else the simulator's; ``render_mode`` is None where nothing renders."""
        wanted = self._indices(indices)
        if hasattr(self.env, attr_name):
            return [getattr(self.env, attr_name)] * len(wanted)
        sim = simulator_of(self.env)
        venv = getattr(sim, "venv", None)
        if venv is not None and hasattr(venv, "get_attr"):  # an SB3 VecEnv behind the sb3 backend
            return venv.get_attr(attr_name, wanted)
        subs = _sub_envs(sim)
        if subs is not None:
            return [_sub_attr(subs[i], attr_name) for i in wanted]
        if attr_name == "render_mode" and not hasattr(sim, attr_name):
            return [None] * len(wanted)  # nothing renders
        return [getattr(sim, attr_name)] * len(wanted)

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        """Set the attribute on the env (all rows at once)."""
        self._whole_batch(indices, "set_attr")
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        """The method of the gpu_envs env (called once for the whole batch), else each requested sub-env's
        (HER's ``env_method("compute_reward", ..., indices=[0])``), else the simulator's (called once)."""
        if hasattr(self.env, method_name):
            count = self._whole_batch(indices, "env_method")
            return [getattr(self.env, method_name)(*method_args, **method_kwargs)] * count
        sim = simulator_of(self.env)
        venv = getattr(sim, "venv", None)
        if venv is not None and hasattr(venv, "env_method"):  # an SB3 VecEnv behind the sb3 backend
            return venv.env_method(method_name, *method_args, indices=self._indices(indices), **method_kwargs)
        subs = _sub_envs(sim)
        if subs is not None:
            return [_sub_attr(subs[i], method_name)(*method_args, **method_kwargs) for i in self._indices(indices)]
        if not hasattr(sim, method_name):
            raise AttributeError(
                f"neither the gpu_envs env nor its simulator ({type(sim).__name__}) has a method {method_name!r}."
            )
        count = self._whole_batch(indices, "env_method")
        return [getattr(sim, method_name)(*method_args, **method_kwargs)] * count

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        """Per index: the env is a ``TransformedEnv`` with a ``wrapper_class`` transform, or that sub-env is wrapped
        in ``wrapper_class`` (SB3's ``Monitor`` around the envs of a gymnasium vector env or an SB3 VecEnv)."""
        wanted = self._indices(indices)
        transforms: Sequence[Any] = getattr(self.env, "transforms", ())
        if any(isinstance(t, wrapper_class) for t in transforms):
            return [True] * len(wanted)
        sim = simulator_of(self.env)
        venv = getattr(sim, "venv", None)
        if venv is not None and hasattr(venv, "env_is_wrapped"):
            return list(venv.env_is_wrapped(wrapper_class, wanted))
        subs = _sub_envs(sim)
        if subs is None:
            return [False] * len(wanted)
        from stable_baselines3.common.env_util import is_wrapped

        return [is_wrapped(subs[i], wrapper_class) for i in wanted]

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each env's ``rgb_array`` frame (``render()``): the sub-envs' renders, or the built-in envs' drawing of the
        current observations."""
        sim = simulator_of(self.env)
        # the built-in envs' render_observations(obs) -> a uint8 tensor of frames
        draw: Callable[[Any], Any] | None = getattr(sim, "render_observations", None)
        if callable(draw) and self._root is not None:
            frames = draw(leaf(self._root, "observation"))
            return list(frames.cpu().numpy())
        subs = _sub_envs(sim)
        if subs is not None:
            return [env.render() for env in subs]
        venv = getattr(sim, "venv", None)
        if venv is not None and hasattr(venv, "get_images"):
            return venv.get_images()
        return [None] * self.num_envs

    def __repr__(self) -> str:
        return f"SB3VecEnv({self.env!r})"


def _sub_envs(sim: Any) -> list[Any] | None:
    """The per-row gymnasium envs of a simulator that has them (a SyncVectorEnv's ``envs``), else None."""
    envs = getattr(sim, "envs", None)
    return list(envs) if isinstance(envs, (list, tuple)) and envs else None


def _sub_attr(env: Any, name: str) -> Any:
    """An attribute of a (wrapped) gymnasium env: its wrappers' and the base env's, as gymnasium looks it up."""
    getter = getattr(env, "get_wrapper_attr", None)
    return getter(name) if callable(getter) else getattr(env, name)


def _refuse_options(options: Sequence[Any]) -> None:
    if any(options):
        raise InvalidArgumentError(
            f"reset options {next(o for o in options if o)!r} are not supported by gpu_envs envs; pass settings when "
            "building the env (gpu_envs.make(..., **kwargs))."
        )
