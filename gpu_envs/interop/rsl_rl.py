"""``to_rsl_rl(env)``: any continuous-action gpu_envs env as an rsl_rl ``VecEnv`` (rsl-rl-lib 5.x).

rsl_rl's ``OnPolicyRunner`` (the PPO Isaac Lab users train with) reads:

* observations as a TensorDict of groups ``[N]``: an env with the single key
  ``"observation"`` exposes it as ``"policy"`` (rsl_rl's default group); Isaac Lab's
  groups (``"policy"``, ``"critic"``, ...) pass through unchanged. They are the
  post-reset observations where an episode ended: the input of the next step.
* ``step(actions)`` -> ``(observations, rewards (N,), dones (N,) long, extras)``, with
  ``extras["time_outs"]`` (N,) bool (the truncations, which rsl_rl bootstraps) and
  ``extras["log"]`` when the backend reports episode metrics (Isaac Lab's).
* ``episode_length_buf`` (N,) int64, readable and writable: rsl_rl's
  ``learn(init_at_random_ep_len=True)`` writes random lengths to spread the resets.
  Writes reach the simulator's own step counter where there is one (the built-in
  envs' ``elapsed_steps``, Isaac Lab's ``episode_length_buf``), so the running
  episodes are truncated earlier, as in Isaac Lab. Elsewhere (gymnasium, JAX, other
  torch envs) the adapter counts steps itself: a write changes what is read back, not
  when the env truncates (a warning says so once).
* ``max_episode_length``: the env's own limit where it has one (built-in envs'
  ``max_episode_steps``, Isaac Lab's ``max_episode_length``), else the value given to
  :func:`to_rsl_rl`.
* ``num_envs``, ``num_actions``, ``device``, ``cfg`` (Isaac Lab's env cfg, else a dict
  describing the env), ``get_observations()``, ``reset()``.

rsl_rl's policies are Gaussian: an env with discrete actions is refused with an error
that names a continuous env instead.

Example::

    from rsl_rl.runners import OnPolicyRunner
    from gpu_envs.interop import to_rsl_rl

    vec_env = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=512))
    OnPolicyRunner(vec_env, train_cfg, device="cpu").learn(100)
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.specs import Box, Composite
from gpu_envs.contract.specs.env_specs import require_scalar_reward
from gpu_envs.interop.conversions import require_env, reshaped_action_tensor
from gpu_envs.interop.libraries import require

rsl_rl_env = require("rsl_rl.env", package="rsl-rl-lib", extra="rsl_rl", consumer="to_rsl_rl")

__all__ = ["RslRlVecEnv", "to_rsl_rl"]

DEFAULT_GROUP = "policy"


def _simulator(env: Any) -> Any:
    """The object behind the backend (the built-in torch env, the unwrapped Isaac Lab env), or None."""
    backend = getattr(env, "backend", None)
    sim = getattr(backend, "base", None)
    return getattr(backend, "env", None) if sim is None else sim


class _EpisodeClock:
    """Where ``episode_length_buf`` lives: the simulator's own counter, or one kept here."""

    def __init__(self, env: Any) -> None:
        sim = _simulator(env)
        self.sim = sim
        if sim is not None and hasattr(sim, "episode_length_buf"):  # Isaac Lab
            self.attr, self.limit = "episode_length_buf", getattr(sim, "max_episode_length", None)
        elif sim is not None and hasattr(sim, "elapsed_steps") and hasattr(sim, "max_episode_steps"):  # built-in envs
            self.attr, self.limit = "elapsed_steps", sim.max_episode_steps
        else:
            self.attr, self.limit = None, None
            self.own = torch.zeros(env.num_envs, dtype=torch.int64, device=env.device)
        self._zero = torch.zeros((), dtype=torch.int64, device=env.device)
        self._warned = False

    def read(self) -> torch.Tensor:
        return self.own if self.attr is None else getattr(self.sim, self.attr)

    def write(self, value: torch.Tensor) -> None:
        current = self.read()
        value = torch.as_tensor(value, device=current.device)
        if value.shape != current.shape:
            raise InvalidArgumentError(
                f"episode_length_buf must have shape {tuple(current.shape)} (one step count per env), "
                f"got {tuple(value.shape)}."
            )
        value = value.to(current.dtype)
        if self.attr is None:
            self.own = value
            if not self._warned:
                self._warned = True
                warnings.warn(
                    "this env has no step counter gpu_envs can set: writing episode_length_buf changes what rsl_rl "
                    "reads back, not when the env truncates its episodes (init_at_random_ep_len has no effect on it).",
                    stacklevel=3,
                )
        else:
            setattr(self.sim, self.attr, value)

    def advance(self, done: torch.Tensor) -> None:
        """After a step: count it, restarting ended rows (only for the clock kept here)."""
        if self.attr is None:
            self.own = torch.where(done, self._zero, self.own + 1)


class RslRlVecEnv(rsl_rl_env.VecEnv):
    """A gpu_envs env as rsl_rl's ``VecEnv`` (build it with :func:`to_rsl_rl`; module doc for the contract)."""

    def __init__(self, env: Any, max_episode_length: int | None = None) -> None:
        action = env.single_action_spec
        if not isinstance(action, Box) or not action.dtype.is_floating_point:
            raise InvalidArgumentError(
                f"rsl_rl trains Gaussian policies on continuous actions, but this env's actions are {action!r}. "
                "Use an env with a float Box action space (e.g. gpu_envs.make('Pendulum-v1')), or train a discrete "
                "env with another library (gpu_envs.interop.to_torchrl, to_skrl, to_sb3)."
            )
        require_scalar_reward(env.single_reward_spec.shape, "to_rsl_rl")
        self.env = env
        self.num_envs = int(env.num_envs)
        self.device = env.device
        self.num_actions = int(action.event_shape.numel())
        self._groups = _group_names(env.single_observation_spec)
        self._clock = _EpisodeClock(env)
        self._max_episode_length = _max_length(self._clock.limit, max_episode_length)
        cfg = getattr(self._clock.sim, "cfg", None)
        self.cfg = {"env": repr(env), "num_envs": self.num_envs} if cfg is None else cfg
        self._obs = self._observations(env.reset())

    # ------------------------------------------------------------------ rsl_rl API
    @property
    def max_episode_length(self) -> int:
        """The longest episode, in steps: the env's own limit, else the one given to :func:`to_rsl_rl`."""
        if self._max_episode_length is None:
            raise InvalidArgumentError(
                f"{self.env!r} does not say how long its episodes last; pass it to the adapter: "
                "to_rsl_rl(env, max_episode_length=...)."
            )
        return self._max_episode_length

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Steps since each env's episode began, ``(N,)`` int64 (writable; module doc)."""
        return self._clock.read()

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self._clock.write(value)

    def get_observations(self) -> TensorDict:
        """The observation groups the next ``step`` acts on."""
        return self._obs

    def reset(self) -> tuple[TensorDict, dict]:
        """Reset every env; returns ``(observations, extras)`` as Isaac Lab's rsl_rl wrapper does."""
        self._obs = self._observations(self.env.reset())
        if self._clock.attr is None:
            self._clock.own.zero_()
        return self._obs, {}

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """One step of every env: ``(observations, rewards (N,), dones (N,), extras)``."""
        td = self._root
        td.set("action", reshaped_action_tensor(actions, self.env.action_spec, self.device))
        td, root = self.env.step_and_maybe_reset(td)
        nxt = td.get("next")
        done = nxt.get("done").view(self.num_envs)
        self._clock.advance(done)
        self._obs = self._observations(root)
        extras: dict[str, Any] = {"time_outs": nxt.get("truncated").view(self.num_envs)}
        log = getattr(getattr(self.env, "backend", None), "episode_log", None)
        if log:
            extras["log"] = log
        return self._obs, nxt.get("reward").view(self.num_envs), done.long(), extras

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------ helpers
    def _observations(self, root: TensorDictBase) -> TensorDict:
        self._root = root
        obs = {name: root.get(key) for name, key in self._groups.items()}
        return TensorDict(obs, batch_size=[self.num_envs], device=self.device)


def _group_names(spec: Composite) -> dict[str, str]:
    """rsl_rl group name -> env key: a lone ``"observation"`` becomes ``"policy"``, groups stay as they are."""
    keys = list(spec.keys())
    if keys == ["observation"]:
        return {DEFAULT_GROUP: "observation"}
    return {key: key for key in keys}


def _max_length(known: Any, given: int | None) -> int | None:
    if given is not None and (not isinstance(given, int) or isinstance(given, bool) or given < 1):
        raise InvalidArgumentError(f"max_episode_length must be an int >= 1, got {given!r}.")
    known = None if known is None else int(known)
    if known is not None and given is not None and known != given:
        raise InvalidArgumentError(
            f"max_episode_length={given} contradicts the env's own limit of {known} steps; leave it out "
            "(it is read from the env) or build the env with the limit you want (e.g. max_episode_steps=...)."
        )
    return known if known is not None else given


def to_rsl_rl(env: Any, max_episode_length: int | None = None) -> RslRlVecEnv:
    """``env`` (any continuous-action :class:`~gpu_envs.BatchedEnv`, transformed or not) as an rsl_rl ``VecEnv``.

    ``max_episode_length`` is what rsl_rl is told (``init_at_random_ep_len`` draws below
    it); it defaults to the env's own limit and is needed only for envs that do not
    know theirs. The env is reset here, as rsl_rl's runner never calls ``reset``.

    Example::

        vec_env = to_rsl_rl(gpu_envs.wrap(isaac_env))       # Isaac Lab groups pass through
        runner = OnPolicyRunner(vec_env, train_cfg, device=str(vec_env.device))
        runner.learn(num_learning_iterations=100, init_at_random_ep_len=True)
    """
    require_env(env, "to_rsl_rl")
    return RslRlVecEnv(env, max_episode_length)
