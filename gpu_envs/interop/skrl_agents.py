"""``to_skrl(env)`` for an env of agent groups: skrl's multi-agent env wrapper, for its MAPPO and IPPO.

skrl's multi-agent agents (``skrl.multi_agents.torch``: MAPPO, IPPO) and trainers talk to
a subclass of ``skrl.envs.wrappers.torch.MultiAgentEnvWrapper``: dicts keyed by agent
name. This adapter follows skrl's own Isaac Lab multi-agent wrapper:

* ``possible_agents`` / ``agents``: every agent of every group, in group order;
  ``observation_spaces`` / ``action_spaces``: each agent's own gymnasium space (its
  group's stacked spec, one agent's slice); observations come flattened ``[N, size]``,
  actions are read back from skrl's flat ``[N, size]`` per agent and stacked into
  ``(group, "action")``;
* ``state()``: the env's ``"state"`` key where it has one (Isaac Lab's ``state()``),
  else every agent's flattened observation concatenated (what a centralised MAPPO
  critic sees), the same for every agent;
* ``step`` returns each agent's reward, terminated and truncated ``[N, 1]`` and the
  observations the NEXT step acts on (post-reset where the env's episode ended, as skrl's
  vectorised wrappers do); ``reset()`` resets the env once, then returns the current
  observations (the episodes keep running).

skrl hands its agents the post-reset observation as the "next" one of an ended episode;
for multi-agent agents gpu_envs has no ``bootstrap_from`` yet (time-outs bootstrap as skrl
does by itself).

Example (then ``MAPPO(possible_agents=env.possible_agents, observation_spaces=env.observation_spaces,
state_spaces=env.state_spaces, action_spaces=env.action_spaces, ...)``: ``examples/mappo_skrl.py``):

>>> import gpu_envs
>>> from gpu_envs.interop import to_skrl
>>> env = to_skrl(gpu_envs.make("vmas/navigation", num_envs=32, max_episode_steps=100, seed=0, n_agents=2))
>>> env.possible_agents
['agent_0', 'agent_1']
>>> env.observation_spaces["agent_0"], env.state_spaces["agent_0"]
(Box(-inf, inf, (18,), float32), Box(-inf, inf, (36,), float32))
>>> obs, _ = env.reset()
>>> obs["agent_1"].shape
torch.Size([32, 18])
"""

from __future__ import annotations

from typing import Any, cast

import gymnasium
import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.groups import agent_spec
from gpu_envs.contract.keys import ACTION, OBSERVATION
from gpu_envs.contract.specs import Box
from gpu_envs.interop.conversions import simulator_of
from gpu_envs.interop.libraries import require

skrl_wrappers = require("skrl.envs.wrappers.torch", package="skrl", extra="skrl", consumer="to_skrl")
skrl_spaces = require("skrl.utils.spaces.torch", package="skrl", extra="skrl", consumer="to_skrl")

__all__ = ["SkrlMultiAgentEnv"]

STATE = "state"


class SkrlMultiAgentEnv(skrl_wrappers.MultiAgentEnvWrapper):
    """An env of agent groups as skrl's multi-agent env wrapper (build it with ``to_skrl``)."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.env = env
        self._n = env.num_envs
        self._groups = {group: list(agents) for group, agents in env.group_map.items()}
        # agent name -> (group, index in the group)
        self._where = {agent: (group, j) for group, agents in self._groups.items() for j, agent in enumerate(agents)}
        obs_spec, act_spec = env.single_observation_spec, env.single_action_spec
        self._observation_spaces: dict[str, gymnasium.Space] = {}
        self._action_spaces: dict[str, gymnasium.Space] = {}
        self._action_meta: dict[str, tuple[torch.Size, torch.dtype]] = {}
        for agent, (group, j) in self._where.items():
            self._observation_spaces[agent] = agent_spec(obs_spec[group, OBSERVATION], j).to_gym()
            one = agent_spec(act_spec[group, ACTION], j)
            self._action_spaces[agent] = one.to_gym()
            self._action_meta[agent] = (one.shape, cast(torch.dtype, one.dtype))  # a leaf spec has a dtype
        self._has_state = STATE in obs_spec
        if self._has_state:
            state_space = obs_spec[STATE].to_gym()
        else:  # every agent's flattened observation, concatenated: a centralised critic's input
            size = sum(skrl_spaces.compute_space_size(space) for space in self._observation_spaces.values())
            state_space = Box(-float("inf"), float("inf"), (size,)).to_gym()
        self._state_space = state_space
        self._root: TensorDictBase | None = None
        self._observations: dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ spaces
    @property
    def possible_agents(self) -> list[str]:
        return list(self._where)

    @property
    def agents(self) -> list[str]:
        return list(self._where)

    @property
    def num_envs(self) -> int:
        return self._n

    @property
    def observation_spaces(self) -> dict[str, gymnasium.Space]:
        return dict(self._observation_spaces)

    @property
    def action_spaces(self) -> dict[str, gymnasium.Space]:
        return dict(self._action_spaces)

    @property
    def state_spaces(self) -> dict[str, gymnasium.Space | None]:
        return {agent: self._state_space for agent in self._where}

    # ------------------------------------------------------------------ skrl API
    def reset(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        if self._root is None:
            self._read(self.env.reset())
        return self._observations, {}

    def step(
        self, actions: dict[str, torch.Tensor]
    ) -> tuple[
        dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor], dict
    ]:
        root = self._root
        if root is None:
            raise InvalidArgumentError("step() before reset(): skrl's trainers call reset() first; call it.")
        missing = [agent for agent in self._where if agent not in actions]
        if missing:
            raise InvalidArgumentError(f"skrl gave no action for agents {missing}; every agent acts on every step.")
        for group, agents in self._groups.items():
            root.set((group, ACTION), torch.stack([self._action(agent, actions[agent]) for agent in agents], 1))
        td, following = self.env.step_and_maybe_reset(root)
        nxt = td.get("next")
        rewards, terminated, truncated = {}, {}, {}
        for agent, (group, j) in self._where.items():
            rewards[agent] = nxt.get((group, "reward"))[:, j]
            terminated[agent] = nxt.get((group, "terminated"))[:, j]
            truncated[agent] = nxt.get((group, "truncated"))[:, j]
        self._read(following)
        return self._observations, rewards, terminated, truncated, {}

    def state(self) -> dict[str, torch.Tensor | None]:
        root = self._root
        if root is None:
            return {agent: None for agent in self._where}
        if self._has_state:
            state = skrl_spaces.flatten_tensorized_space(
                skrl_spaces.tensorize_space(self._state_space, root.get(STATE))
            )
        else:
            state = torch.cat([self._observations[agent] for agent in self._where], dim=-1)
        return {agent: state for agent in self._where}

    def render(self, *args: Any, **kwargs: Any) -> None:
        return None

    @property
    def unwrapped(self) -> Any:
        """The simulator behind the gpu_envs env (VMAS's ``Environment``, ...)."""
        return simulator_of(self.env)

    def close(self) -> None:
        self.env.close()

    def bootstrap_from(self, agent: Any) -> None:
        """Not for multi-agent agents yet: skrl's MAPPO/IPPO keep their own time-out handling."""
        raise InvalidArgumentError(
            "bootstrap_from supports skrl's single-agent agents; for MAPPO/IPPO on an env of agent groups train "
            "without it (skrl bootstraps time-outs its own way), or use to_torchrl, whose GAE reads the true final "
            "observations gpu_envs keeps."
        )

    # ------------------------------------------------------------------ helpers
    def _read(self, root: TensorDictBase) -> None:
        self._root = root
        out = {}
        for agent, (group, j) in self._where.items():
            value = root.get((group, OBSERVATION))[:, j]
            out[agent] = skrl_spaces.flatten_tensorized_space(
                skrl_spaces.tensorize_space(self._observation_spaces[agent], value)
            )
        self._observations = out

    def _action(self, agent: str, value: torch.Tensor) -> torch.Tensor:
        """One agent's ``[N, *act]`` action from skrl's flat ``[N, size]`` (a Discrete agent's index as ``[N]``)."""
        shape, dtype = self._action_meta[agent]
        action = skrl_spaces.unflatten_tensorized_space(self._action_spaces[agent], value)
        return action.reshape(self._n, *shape).to(dtype)
