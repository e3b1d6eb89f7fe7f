"""From per-agent simulator outputs to agent groups, and back for actions: what every multi-agent backend shares.

Multi-agent simulators speak per agent (VMAS: a list of ``[N, ...]`` tensors, one per
agent; PettingZoo: a dict ``{agent: value}`` per env). The contract speaks per group
(:mod:`gpu_envs.contract.groups`): one ``[N, A, ...]`` tensor per group and key.
:class:`GroupLayout` is that translation, built once from the agents' specs and the
group map:

* ``observation_spec`` / ``action_spec`` / ``info_spec``: one env's Composites keyed
  like the TensorDict (``(group, "observation")``, ``(group, "action")``, each agent's
  ``(group, "reward")`` and flags);
* :meth:`GroupLayout.observations` stacks per-agent observations into group entries,
  :meth:`GroupLayout.rewards` per-agent rewards into ``(group, "reward")`` ``[N, A, 1]``
  and the team reward ``[N, 1]`` (their sum), :meth:`GroupLayout.flags` the env's done
  flags into every agent's (an env whose agents end together), and
  :meth:`GroupLayout.agent_actions` splits the groups' actions into per-agent views.

Example:

>>> import torch
>>> from gpu_envs.contract.specs import Box
>>> agents = ["agent_0", "agent_1"]
>>> layout = GroupLayout(agents, {a: Box(-1.0, 1.0, (3,)) for a in agents}, {a: Box(-1.0, 1.0, (2,)) for a in agents})
>>> layout.group_map
{'agents': ['agent_0', 'agent_1']}
>>> {k: tuple(v.shape) for k, v in layout.observations([torch.zeros(8, 3), torch.ones(8, 3)]).items()}
{('agents', 'observation'): (8, 2, 3)}
>>> [tuple(a.shape) for a in layout.agent_actions({("agents", "action"): torch.zeros(8, 2, 2)})]
[(8, 2), (8, 2)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from gpu_envs.contract.groups import GroupMap, check_group_map, default_group_map, group_info_spec, stack_spec
from gpu_envs.contract.keys import ACTION, DONE_KEYS, OBSERVATION, REWARD
from gpu_envs.contract.specs import Composite, Spec

__all__ = ["GroupLayout"]


class GroupLayout:
    """The groups of one multi-agent env, and the stacking between agents and groups (module docstring).

    Args:
        agents: the agent names, in the simulator's order.
        observation_specs, action_specs: one agent's spec each (no batch dims), by name.
        group_map: ``{group: [agents]}``, or None for :func:`~gpu_envs.contract.groups.default_group_map`.
        device: where the specs live.
    """

    def __init__(
        self,
        agents: Sequence[str],
        observation_specs: Mapping[str, Spec],
        action_specs: Mapping[str, Spec],
        group_map: Any = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.agents = list(agents)

        def same_specs(a: str, b: str) -> bool:
            return observation_specs[a] == observation_specs[b] and action_specs[a] == action_specs[b]

        if group_map is None:
            self.group_map: GroupMap = default_group_map(self.agents, same_specs)
        else:
            self.group_map = check_group_map(group_map, self.agents, same_specs)
        index = {name: i for i, name in enumerate(self.agents)}
        # per group: the simulator's agent indices, in the group's order
        self.members: dict[str, list[int]] = {g: [index[a] for a in names] for g, names in self.group_map.items()}
        self.observation_spec = Composite(device=device)
        self.action_spec = Composite(device=device)
        self.obs_keys: dict[str, list[tuple]] = {}  # per group: the observation leaves below (group, "observation")
        for group, names in self.group_map.items():
            first = names[0]
            obs = stack_spec(observation_specs[first], len(names))
            self.observation_spec[group, OBSERVATION] = obs
            self.obs_keys[group] = [()] if not isinstance(obs, Composite) else [_tuple(k) for k in obs.keys(True, True)]
            self.action_spec[group, ACTION] = stack_spec(action_specs[first], len(names))
        self.info_spec = group_info_spec(self.group_map, device)
        self.action_keys = [(group, ACTION) for group in self.group_map]

    # ------------------------------------------------------------ simulator -> groups
    def observations(self, per_agent: Sequence[Any]) -> dict:
        """Per-agent observations (a tensor ``[N, *obs]`` or a dict of them, in agent order) as group entries."""
        out: dict = {}
        for group, members in self.members.items():
            for sub in self.obs_keys[group]:
                parts = [_leaf(per_agent[i], sub) for i in members]
                out[(group, OBSERVATION, *sub)] = torch.stack(parts, 1)
        return out

    def rewards(self, per_agent: Sequence[torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """``(team reward [N, 1], {(group, "reward"): [N, A, 1]})`` from per-agent ``[N]`` rewards."""
        out: dict = {}
        team: torch.Tensor | None = None
        for group, members in self.members.items():
            # one stack, then one reshape and one cast (each agent's reward is [N] or [N, 1])
            stacked = torch.stack([per_agent[i] for i in members], 1).reshape(-1, len(members), 1).to(torch.float32)
            out[(group, REWARD)] = stacked
            total = stacked.sum(1)
            team = total if team is None else team + total
        assert team is not None  # (an env has at least one group)
        return team, out

    def flags(self, terminated: torch.Tensor, truncated: torch.Tensor, done: torch.Tensor) -> dict:
        """Every agent's done flags ``[N, A, 1]``: the env's ``[N, 1]`` flags, for agents that end with their env."""
        out: dict = {}
        for group, members in self.members.items():
            a = len(members)
            for key, flag in zip(DONE_KEYS, (done, terminated, truncated), strict=True):
                out[(group, key)] = flag.unsqueeze(1).expand(-1, a, 1)
        return out

    # ------------------------------------------------------------ groups -> simulator
    def agent_actions(self, actions: Mapping[Any, torch.Tensor]) -> list[torch.Tensor]:
        """The groups' actions ``{(group, "action"): [N, A, *act]}`` as one ``[N, *act]`` view per agent, in agent order."""
        out: list[Any] = [None] * len(self.agents)
        for group, members in self.members.items():
            action = actions[(group, ACTION)]
            for j, i in enumerate(members):
                out[i] = action[:, j]
        return out


def _tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _leaf(value: Any, path: tuple) -> torch.Tensor:
    for part in path:
        value = value[part]
    return value
