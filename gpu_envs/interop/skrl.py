"""``to_skrl(env)``: any gpu_envs env as an skrl env wrapper (skrl 2.x, torch), for its agents and trainers.

skrl's trainers talk to a subclass of ``skrl.envs.wrappers.torch.Wrapper``: ``reset()``
once, then ``step(actions)`` -> ``(observations, rewards, terminated, truncated,
infos)``, all torch tensors on the env's device, and ``state()`` for a critic's own
input. This adapter follows skrl's Isaac Lab wrapper, which is how skrl trains
vectorised, auto-resetting envs:

* ``observation_space`` / ``action_space`` are ONE env's gymnasium spaces (skrl builds
  its models from them); observations come flattened ``[N, size]`` (a Box keeps its
  values, a Discrete becomes ``[N, 1]``), actions are read back from skrl's flat
  ``[N, size]`` layout.
* Observation groups: a lone ``"observation"`` key is the observation; Isaac Lab's
  ``"policy"`` group is the observation and its ``"critic"`` group the ``state()``;
  any other set of keys is one gymnasium ``Dict`` (skrl flattens it key by key, sorted).
* ``step`` returns the observations the NEXT step acts on: post-reset where an episode
  ended (as skrl's vectorised wrappers do; skrl has no slot for the true final
  observation, which the gpu_envs env itself keeps in ``("next", ...)``). Rewards,
  terminated and truncated are ``[N, 1]``; ``infos["log"]`` carries Isaac Lab's
  episode metrics when the backend reports them.
* ``reset()`` resets the env the first time (with the seed the env was made with) and
  afterwards returns the current observations: the episodes keep running, as skrl
  expects from an auto-resetting vector env.

Time-outs: skrl's trainers pass that same post-reset observation to
``agent.record_transition`` as ``next_observations``, so on a truncated step skrl's
on-policy agents bootstrap from V(first observation of the next episode)
(``time_limit_bootstrap=True``) or run the advantage on into the next episode (the
default), and its off-policy agents (SAC, TD3, DDPG, DQN, DDQN) store the post-reset
observation as the transition's next one, so their targets use Q(next episode's start).
One extra line after building the agent makes them exact::

    env.bootstrap_from(agent)

Then ``record_transition`` receives the TRUE final observation (and state) on rows
whose episode ended, and on-policy agents get ``time_limit_bootstrap = True``: each
truncated row's stored reward is ``r + gamma * V(s_T)`` with the agent's own value model
and preprocessors, and the GAE stops there. What the trainer acts on next is unchanged
(the post-reset observations). Rows whose final observation the backend could not give
(``final_obs_missing``) keep the post-reset one, as without the line. Supported: skrl 2.x
(torch) PPO, A2C, RPO, TRPO, AMP, SAC, TD3, DDPG, DQN, DDQN; the recurrent variants are
refused.

Example::

    from skrl.trainers.torch import SequentialTrainer
    from gpu_envs.interop import to_skrl

    env = to_skrl(gpu_envs.make("CartPole-v1", num_envs=64))
    agent = PPO(models=..., memory=RandomMemory(memory_size=32, num_envs=env.num_envs),
                observation_space=env.observation_space, action_space=env.action_space, device=env.device)
    env.bootstrap_from(agent)                      # optional: exact time-out targets
    SequentialTrainer(cfg=SequentialTrainerCfg(timesteps=10_000), env=env, agents=agent).train()
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium
import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, ResetNeededError
from gpu_envs.contract.specs import Composite
from gpu_envs.contract.specs.env_specs import require_scalar_reward
from gpu_envs.interop.conversions import require_env, reshaped_action_tensor, simulator_of
from gpu_envs.interop.libraries import require
from gpu_envs.interop.time_outs import final_observation, require_version

skrl_wrappers = require("skrl.envs.wrappers.torch", package="skrl", extra="skrl", consumer="to_skrl")
skrl_spaces = require("skrl.utils.spaces.torch", package="skrl", extra="skrl", consumer="to_skrl")

__all__ = ["SkrlEnv", "to_skrl"]

# skrl's record_transition of these agents (read from skrl 2.1.1) is what bootstrap_from feeds
SUPPORTED_SKRL = ">=2.0,<3"
ON_POLICY = ("PPO", "A2C", "RPO", "TRPO", "AMP")  # bootstrap time-outs from next_observations
OFF_POLICY = ("SAC", "TD3", "DDPG", "DQN", "DDQN")  # store next_observations for their targets


def _observation_layout(spec: Composite) -> tuple[Any, gymnasium.Space, Any, gymnasium.Space | None]:
    """``(observation key(s), observation space, state key, state space)`` as skrl sees the groups."""
    keys = list(spec.keys())
    if keys == ["observation"]:
        return "observation", spec["observation"].to_gym(), None, None
    if "policy" in keys:
        state = "critic" if "critic" in keys else None
        return "policy", spec["policy"].to_gym(), state, None if state is None else spec["critic"].to_gym()
    return tuple(keys), spec.to_gym(), None, None


class SkrlEnv(skrl_wrappers.Wrapper):
    """A gpu_envs env as skrl's (single-agent, torch) env wrapper: build it with :func:`to_skrl`."""

    def __init__(self, env: Any) -> None:
        require_scalar_reward(env.single_reward_spec.shape, "to_skrl")
        super().__init__(env)
        self.env = env
        self._unwrapped = simulator_of(env)  # what skrl's Wrapper forwards unknown attributes to, as for Isaac Lab
        self._obs_key, self._observation_space, self._state_key, self._state_space = _observation_layout(
            env.single_observation_spec
        )
        self._action_space = env.single_action_spec.to_gym()
        self._n = int(env.num_envs)
        self._root: TensorDictBase | None = None
        self._observations: torch.Tensor | None = None
        self._states: torch.Tensor | None = None
        self._bootstrap = False  # set by bootstrap_from
        self.final_observations: torch.Tensor | None = None  # the true next observations of the last step
        self.final_states: torch.Tensor | None = None

    # ------------------------------------------------------------------ spaces
    @property
    def observation_space(self) -> gymnasium.Space:
        """One env's observation space (the ``"policy"`` group's for Isaac Lab envs)."""
        return self._observation_space

    @property
    def state_space(self) -> gymnasium.Space | None:
        """One env's ``"critic"`` group space, for envs that have one (else None)."""
        return self._state_space

    @property
    def action_space(self) -> gymnasium.Space:
        """One env's action space."""
        return self._action_space

    @property
    def num_envs(self) -> int:
        return self._n

    # ----------------------------------------------------------------- skrl API
    def reset(self) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset every env on the first call; later calls return the current observations."""
        if self._root is None:
            return self._read(self.env.reset()), {}
        observations = self._observations
        if observations is None:  # _read sets both: only a failed first read leaves a root without them
            raise ResetNeededError(
                "the skrl adapter has no observations (reading its first reset failed): build a new one with to_skrl."
            )
        return observations, {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """Step every env; returns the next observations (post-reset where an episode ended) and ``[N, 1]`` signals."""
        current = self._root
        if current is None:
            self.reset()
            current = self._root
            if current is None:  # reset reads a root, or raises
                raise ResetNeededError("the skrl adapter has no current root after reset().")
        actions = reshaped_action_tensor(actions, self.env.action_spec, self.device)
        td = current.set("action", actions)
        td, root = self.env.step_and_maybe_reset(td)
        observations = self._read(root)
        nxt = td.get("next")
        if self._bootstrap:
            self._read_final(nxt, root)
        infos: dict[str, Any] = {}
        log = getattr(getattr(self.env, "backend", None), "episode_log", None)
        if log:
            infos["log"] = log
        n = self._n
        reward, terminated, truncated = (nxt.get(key).view(n, 1) for key in ("reward", "terminated", "truncated"))
        return observations, reward, terminated, truncated, infos

    def state(self) -> torch.Tensor | None:
        """The ``"critic"`` group, flattened ``[N, size]``, for envs that have one; else None."""
        return self._states

    def render(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to draw: gpu_envs envs do not render."""
        return None

    @property
    def unwrapped(self) -> Any:
        """The simulator behind the gpu_envs env (the built-in env, the Isaac Lab or mjlab env, ...), what
        trainers' runners read (mjlab's ``MjlabOnPolicyRunner.save``: ``env.unwrapped.common_step_counter``)."""
        return simulator_of(self.env)

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------ exact time-outs
    def bootstrap_from(self, agent: Any) -> None:
        """Give ``agent`` the true final observation of every ended episode (module doc).

        ``agent`` is an skrl 2.x torch agent built for this env: PPO, A2C, RPO, TRPO or AMP
        (``cfg.time_limit_bootstrap`` is switched on: truncated rows then store
        ``r + gamma * V(s_T)``) or SAC, TD3, DDPG, DQN, DDQN (their stored next observation
        becomes ``s_T``). Its ``record_transition`` is wrapped on this agent only; calling
        this again for the same agent changes nothing.

        Example::

            agent = PPO(models=..., memory=..., cfg=cfg, ...)
            env.bootstrap_from(agent)
            SequentialTrainer(cfg=trainer_cfg, env=env, agents=agent).train()
        """
        require_version("skrl", SUPPORTED_SKRL, "to_skrl(...).bootstrap_from")
        kind = _agent_kind(agent)
        record = agent.record_transition
        if isinstance(record, _FinalObservations):
            if record.vec is not self:
                raise InvalidArgumentError("this agent already takes its final observations from another env adapter.")
        else:
            agent.record_transition = _FinalObservations(self, record)
        if kind == "on-policy":
            agent.cfg.time_limit_bootstrap = True
        self._bootstrap = True

    # ------------------------------------------------------------------ helpers
    def _read_final(self, nxt: TensorDictBase, root: TensorDictBase) -> None:
        """The true next observations (and states) of this step, flattened as skrl reads them."""
        final = TensorDict({key: final_observation(nxt, root, key) for key in self._leaves()}, batch_size=[self._n])
        self.final_observations = self._flat(self._observation_space, self._obs_key, final)
        if self._state_space is not None:  # (set with _state_key, by _observation_layout)
            self.final_states = self._flat(self._state_space, self._state_key, final)

    def _leaves(self) -> list[Any]:
        keys = [self._obs_key] if not isinstance(self._obs_key, tuple) else list(self._obs_key)
        if self._state_key is not None:
            keys.append(self._state_key)
        return list(dict.fromkeys(keys))

    def _read(self, root: TensorDictBase) -> torch.Tensor:
        """Read ``root``'s observations (and states); returns the observations."""
        self._root = root
        observations = self._observations = self._flat(self._observation_space, self._obs_key, root)
        if self._state_space is not None:  # (set with _state_key, by _observation_layout)
            self._states = self._flat(self._state_space, self._state_key, root)
        return observations

    @staticmethod
    def _flat(space: gymnasium.Space, key: Any, root: TensorDictBase) -> torch.Tensor:
        value = {k: root.get(k) for k in key} if isinstance(key, tuple) else root.get(key)
        return skrl_spaces.flatten_tensorized_space(skrl_spaces.tensorize_space(space, value))


class _FinalObservations:
    """Stands in for ``agent.record_transition``: the step's true next observations replace the post-reset ones."""

    def __init__(self, vec: SkrlEnv, original: Any) -> None:
        self.vec = vec
        self.original = original

    def __call__(self, **kwargs: Any) -> Any:
        vec = self.vec
        if vec.final_observations is None:
            # this adapter made no step since the last transition: the agent is stepped through another one
            # (which would store the reset observation as the next one where an episode ended)
            raise InvalidArgumentError(
                "this skrl agent takes its final observations from one to_skrl adapter (bootstrap_from), but records "
                "a transition that adapter did not make: it is trained through another to_skrl adapter of the env "
                "(or record_transition is called without a step). Train it through the adapter you called "
                "bootstrap_from on (one to_skrl(env) per env)."
            )
        kwargs["next_observations"] = vec.final_observations
        if vec.final_states is not None:
            kwargs["next_states"] = vec.final_states
        vec.final_observations = vec.final_states = None
        return self.original(**kwargs)


def _agent_kind(agent: Any) -> str:
    """``"on-policy"`` or ``"off-policy"`` for the skrl agents bootstrap_from supports, else a clear error."""
    for kind, names in (("on-policy", ON_POLICY), ("off-policy", OFF_POLICY)):
        for name in names:
            cls = getattr(importlib.import_module(f"skrl.agents.torch.{name.lower()}"), name)
            if isinstance(agent, cls):
                return kind
    raise InvalidArgumentError(
        f"bootstrap_from supports skrl's {', '.join(ON_POLICY + OFF_POLICY)} agents (torch); got "
        f"{type(agent).__name__}. Recurrent agents keep their own time-out handling: train them without bootstrap_from."
    )


def to_skrl(env: Any) -> Any:
    """``env`` (any :class:`~gpu_envs.BatchedEnv`, transformed or not) as an skrl torch env wrapper.

    An env of agent groups (``env.group_map``) becomes skrl's multi-agent wrapper
    (:class:`~gpu_envs.interop.skrl_agents.SkrlMultiAgentEnv`: dicts per agent, for
    MAPPO and IPPO); any other env skrl's single-agent one (:class:`SkrlEnv`).

    Example::

        env = to_skrl(gpu_envs.make("Pendulum-v1", num_envs=256))
        env.observation_space, env.action_space    # Box(3,), Box(1,): one env's spaces
    """
    require_env(env, "to_skrl", groups=True)
    if getattr(env, "group_map", None):  # agent groups: skrl's multi-agent wrapper (MAPPO, IPPO)
        from gpu_envs.interop.skrl_agents import SkrlMultiAgentEnv

        return SkrlMultiAgentEnv(env)
    return SkrlEnv(env)
