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

Time-outs. By default rsl_rl bootstraps a truncated step with ``gamma * V(s_t)``, the
value of the state the action was taken in (``PPO.process_env_step``), not of the state
the episode reached. One extra line after building the runner makes the targets exact::

    vec_env.bootstrap_from(runner)

Then each truncated row's stored reward is ``r + gamma * V(s_T)``, with ``s_T`` the true
final observation evaluated by the runner's own critic (its observation normalisation
and, for a recurrent critic, its hidden state included) at collection time, and
rsl_rl's own approximation is switched off for those rows; the returns (GAE) follow.
Rows whose final observation the backend could not give (``final_obs_missing``) keep
rsl_rl's approximation. Supported: rsl-rl-lib 5.x with its ``PPO`` algorithm.

rsl_rl's policies are Gaussian: an env with discrete actions is refused with an error
that names a continuous env instead.

Example::

    from rsl_rl.runners import OnPolicyRunner
    from gpu_envs.interop import to_rsl_rl

    vec_env = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=512))
    runner = OnPolicyRunner(vec_env, train_cfg, device="cpu")
    vec_env.bootstrap_from(runner)                 # optional: exact time-out targets
    runner.learn(100)
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.specs import Box, Composite
from gpu_envs.contract.specs.env_specs import require_scalar_reward
from gpu_envs.interop.conversions import require_env, reshaped_action_tensor, simulator_of
from gpu_envs.interop.libraries import require
from gpu_envs.interop.time_outs import bootstrap_rows, final_observation, require_version

rsl_rl_env = require("rsl_rl.env", package="rsl-rl-lib", extra="rsl-rl", consumer="to_rsl_rl")

# rsl_rl's PPO.process_env_step (read from rsl-rl-lib 5.5.1) is what bootstrap_from wraps
SUPPORTED_RSL_RL = ">=5.0,<6"

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
        self.bound: int | None = None  # the episode length writes must stay below (set by the adapter)
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
        self._check_range(value)
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

    def _check_range(self, value: torch.Tensor) -> None:
        """Refuse step counts below 0 or at/after the time limit (one host sync: a write is rare).

        A negative count would let an episode run past its limit (-100 on a 200-step
        limit: 300 steps); rsl_rl itself writes ``randint(0, max_episode_length)``.
        """
        low, high = (int(x) for x in torch.aminmax(value))
        limit = self.bound
        if low < 0 or (limit is not None and high >= limit):
            allowed = "0 or more" if limit is None else f"in [0, {limit - 1}] (max_episode_length = {limit})"
            raise InvalidArgumentError(
                f"episode_length_buf values must be {allowed}: each is the number of steps an episode has run; "
                f"got values from {low} to {high}. rsl_rl's init_at_random_ep_len writes "
                "torch.randint_like(buf, high=max_episode_length); clamp your own values into that range."
            )

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
        self._clock.bound = self._max_episode_length
        self._bootstrap: _RslRlBootstrap | None = None  # set by bootstrap_from
        self.final_observations: TensorDict | None = None  # s_T of the last step, while bootstrapping
        self.exact_time_outs: torch.Tensor | None = None  # [N] bool: rows bootstrapped from s_T
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
        if self._bootstrap is None:
            time_outs = nxt.get("truncated").view(self.num_envs)
        else:  # exact rows get r + gamma V(s_T) from the hook; rsl_rl's V(s_t) only where s_T is missing
            self.exact_time_outs, time_outs = bootstrap_rows(nxt, self.num_envs)
            self.final_observations = TensorDict(
                {name: final_observation(nxt, root, key) for name, key in self._groups.items()},
                batch_size=[self.num_envs],
                device=self.device,
            )
        extras: dict[str, Any] = {"time_outs": time_outs}
        log = getattr(getattr(self.env, "backend", None), "episode_log", None)
        if log:
            extras["log"] = log
        return self._obs, nxt.get("reward").view(self.num_envs), done.long(), extras

    @property
    def unwrapped(self) -> Any:
        """The simulator behind the gpu_envs env (the built-in env, the Isaac Lab or mjlab env, ...), what
        trainers' runners read (mjlab's ``MjlabOnPolicyRunner.save``: ``env.unwrapped.common_step_counter``)."""
        return simulator_of(self.env)

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------ exact time-outs
    def bootstrap_from(self, runner: Any) -> None:
        """Bootstrap truncated steps from V(true final observation) with ``runner``'s own critic.

        ``runner`` is the ``OnPolicyRunner`` built on this env (rsl-rl-lib 5.x, ``PPO``).
        Its algorithm's ``process_env_step`` is wrapped (on this runner only): before
        rsl_rl records a step, ``gamma * V(s_T)`` is added to the reward of every
        truncated row whose final observation is known, and those rows are left out of
        the ``time_outs`` rsl_rl bootstraps itself. The episode statistics rsl_rl logs
        keep the plain rewards. Calling it again for the same runner changes nothing.

        Example::

            runner = OnPolicyRunner(vec_env, train_cfg, device="cuda")
            vec_env.bootstrap_from(runner)
            runner.learn(1500)
        """
        require_version("rsl-rl-lib", SUPPORTED_RSL_RL, "to_rsl_rl(...).bootstrap_from")
        alg = getattr(runner, "alg", None)
        if getattr(runner, "env", None) is not self or alg is None:
            raise InvalidArgumentError(
                f"bootstrap_from takes the rsl_rl OnPolicyRunner built on this env, got {type(runner).__name__}. "
                "Build it first: runner = OnPolicyRunner(vec_env, train_cfg, ...); vec_env.bootstrap_from(runner)."
            )
        from rsl_rl.algorithms import PPO

        if not isinstance(alg, PPO):
            raise InvalidArgumentError(
                f"bootstrap_from needs rsl_rl's PPO (an algorithm with a critic); this runner's is "
                f"{type(alg).__name__}. Distillation learns no value function: train it without bootstrap_from."
            )
        if isinstance(alg.process_env_step, _RslRlBootstrap):
            if alg.process_env_step.vec is not self:
                raise InvalidArgumentError("this runner already bootstraps from another env adapter.")
            self._bootstrap = alg.process_env_step
            return
        self._bootstrap = _RslRlBootstrap(self, alg)
        alg.process_env_step = self._bootstrap

    # ------------------------------------------------------------------ helpers
    def _observations(self, root: TensorDictBase) -> TensorDict:
        self._root = root
        obs = {name: root.get(key) for name, key in self._groups.items()}
        return TensorDict(obs, batch_size=[self.num_envs], device=self.device)


class _RslRlBootstrap:
    """Stands in for ``alg.process_env_step``: adds ``gamma * V(s_T)`` on exact time-out rows, then calls it.

    ``alg.transition`` already holds V(s_t) (``alg.act`` ran); the critic is evaluated on
    the env's true final observations with its hidden state saved and restored, as
    ``PPO.compute_returns`` does for the last step's values.
    """

    def __init__(self, vec: RslRlVecEnv, alg: Any) -> None:
        self.vec = vec
        self.alg = alg
        self.original = alg.process_env_step

    def __call__(self, obs: TensorDict, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        alg, vec = self.alg, self.vec
        final, exact = vec.final_observations, vec.exact_time_outs  # set together by vec.step (exact first)
        if final is None or exact is None:  # a step of another env, or none yet: nothing to add
            return self.original(obs, rewards, dones, extras)
        device = rewards.device
        critic = alg.critic
        hidden = critic.get_hidden_state()
        values = critic(final.to(device)).detach().reshape(rewards.shape)
        critic.reset(hidden_state=hidden)
        bonus = torch.where(exact.to(device), alg.gamma * values, torch.zeros_like(values))
        vec.final_observations = None
        return self.original(obs, rewards + bonus, dones, extras)


def _group_names(spec: Composite) -> dict[str, str]:
    """rsl_rl group name -> env key: a lone ``"observation"`` becomes ``"policy"``, groups stay as they are."""
    keys = cast("list[str]", spec.keys())  # top-level keys (no include_nested) are str
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
