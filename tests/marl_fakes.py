"""Counting multi-agent envs with closed-form episodes, and the sequential reference they are checked against.

Every agent's observation, reward and ending is a known function of its row's step
counter, its episode number, its own index and the action it was given, so the exact
transition of every row, agent and step can be written down by a plain Python loop
over rows (:class:`CountingReference`) and compared key by key with what an env of agent
groups hands out (:func:`reference_transitions`):

* observation of agent ``k`` (its index among all agents): ``[t, episode, k, *action]``
  (the action it was last given, zeros after a reset; a ``prey`` agent has one more
  element, ``k * 10``, so its group's spec differs);
* reward of agent ``k``: ``k + t + action[0]``;
* a row ``i`` terminates when ``t`` reaches ``lengths[i]`` and is truncated at the
  horizon ``max_steps`` (both when both hold).

:func:`counting_scenario` is that env as a VMAS scenario (run inside VMAS's own
``Environment``, so the VMAS backend's resets and final observations are what is tested).
"""

from __future__ import annotations

import torch

AGENTS = ("predator_0", "predator_1", "prey_0")
ACTION_SIZE = 2


def row_lengths(num_envs: int) -> list[int]:
    """Each row's episode length before it terminates (different per row)."""
    return [2 + (i * 3) % 5 for i in range(num_envs)]


def agent_obs(name: str, k: int, t: int, episode: int, action: list[float]) -> list[float]:
    obs = [float(t), float(episode), float(k), *action]
    if name.startswith("prey"):
        obs.append(float(k * 10))
    return obs


class CountingReference:
    """One row of the counting env, stepped alone in Python: the oracle."""

    def __init__(self, length: int, max_steps: int | None, agents: tuple[str, ...] = AGENTS) -> None:
        self.length, self.max_steps, self.agents = length, max_steps, agents
        self.t, self.episode = 0, 0
        self.last = [[0.0] * ACTION_SIZE for _ in agents]

    def observe(self) -> dict[str, list[float]]:
        return {name: agent_obs(name, k, self.t, self.episode, self.last[k]) for k, name in enumerate(self.agents)}

    def reset(self) -> dict[str, list[float]]:
        self.t, self.episode = 0, self.episode + 1
        self.last = [[0.0] * ACTION_SIZE for _ in self.agents]
        return self.observe()

    def step(self, actions: list[list[float]]) -> dict:
        """One step: the transition (final observation where it ended) and the next root observation."""
        self.t += 1
        self.last = [list(a) for a in actions]
        rewards = [k + self.t + actions[k][0] for k in range(len(self.agents))]
        terminated = self.t >= self.length
        truncated = self.max_steps is not None and self.t >= self.max_steps
        final = self.observe()
        root = self.reset() if terminated or truncated else final
        return {"obs": final, "reward": rewards, "terminated": terminated, "truncated": truncated, "root": root}


def counting_scenario():
    """The counting env as a VMAS scenario class (VMAS imported here: it is an optional dependency)."""
    from vmas.simulator.core import Agent, World
    from vmas.simulator.scenario import BaseScenario

    class CountingScenario(BaseScenario):
        def make_world(self, batch_dim: int, device: torch.device, **kwargs) -> World:
            world = World(batch_dim, device)
            for name in AGENTS:
                world.add_agent(Agent(name=name, u_range=10.0, collide=False))
            self.t = torch.zeros(batch_dim, device=device)
            self.episode = torch.full((batch_dim,), -1.0, device=device)  # the first reset makes it 0
            self.lengths = torch.tensor(row_lengths(batch_dim), dtype=torch.float32, device=device)
            self.last = torch.zeros(batch_dim, len(AGENTS), ACTION_SIZE, device=device)
            return world

        def reset_world_at(self, env_index: int | None = None) -> None:
            rows = slice(None) if env_index is None else env_index
            self.t[rows] = 0
            self.episode[rows] += 1
            self.last[rows] = 0

        def process_action(self, agent: Agent) -> None:
            k = AGENTS.index(agent.name)
            if k == 0:
                self.t += 1
            self.last[:, k] = agent.action.u

        def observation(self, agent: Agent) -> torch.Tensor:
            k = AGENTS.index(agent.name)
            n = self.t.shape[0]
            parts = [self.t, self.episode, torch.full((n,), float(k), device=self.t.device)]
            obs = torch.cat([torch.stack(parts, -1), self.last[:, k]], -1)
            if agent.name.startswith("prey"):
                obs = torch.cat([obs, torch.full((n, 1), float(k * 10), device=self.t.device)], -1)
            return obs

        def reward(self, agent: Agent) -> torch.Tensor:
            k = AGENTS.index(agent.name)
            return k + self.t + self.last[:, k, 0]

        def done(self) -> torch.Tensor:
            return self.t >= self.lengths

    return CountingScenario


def counting_parallel_env_class():
    """The counting env as a PettingZoo ``ParallelEnv`` whose agents leave at different steps.

    Agent ``k`` of the row with episode length ``length`` terminates when ``t`` reaches
    ``length + k``; every agent still live is truncated at ``max_steps``; the episode is
    over when no agent is left (PettingZoo's rule). Rewards and observations as
    :class:`CountingReference`'s, with each agent's observation frozen once it left.
    """
    import gymnasium
    import numpy as np
    from pettingzoo import ParallelEnv

    class CountingParallelEnv(ParallelEnv):
        metadata = {"name": "counting_v0"}

        def __init__(self, length: int = 3, max_steps: int | None = None) -> None:
            self.length, self.max_steps = length, max_steps
            self.possible_agents = list(AGENTS)
            self.agents: list[str] = []
            self.episode = -1
            self.t = 0

        def observation_space(self, agent: str) -> gymnasium.spaces.Box:
            size = 6 if agent.startswith("prey") else 5
            return gymnasium.spaces.Box(-np.inf, np.inf, (size,), np.float32)

        def action_space(self, agent: str) -> gymnasium.spaces.Box:
            return gymnasium.spaces.Box(-1.0, 1.0, (ACTION_SIZE,), np.float32)

        def _obs(self, agent: str, action) -> np.ndarray:
            k = AGENTS.index(agent)
            return np.asarray(agent_obs(agent, k, self.t, self.episode, [float(a) for a in action]), np.float32)

        def reset(self, seed: int | None = None, options: dict | None = None):
            self.t, self.episode = 0, self.episode + 1
            if seed is not None:  # a seeded reset starts over (episode 0) with a length that depends on the seed
                self.length, self.episode = 2 + seed % 4, 0
            self.agents = list(AGENTS)
            return {a: self._obs(a, [0.0] * ACTION_SIZE) for a in self.agents}, {a: {} for a in self.agents}

        def step(self, actions: dict):
            if set(actions) != set(self.agents):
                raise ValueError(f"actions for {sorted(actions)}, live agents {sorted(self.agents)}")
            self.t += 1
            obs, rew, term, trunc = {}, {}, {}, {}
            for a in self.agents:
                k = AGENTS.index(a)
                act = np.asarray(actions[a], np.float32)
                obs[a] = self._obs(a, act)
                rew[a] = float(k + self.t + act[0])
                term[a] = self.t >= self.length + k
                trunc[a] = self.max_steps is not None and self.t >= self.max_steps and not term[a]
            self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
            return obs, rew, term, trunc, {a: {} for a in obs}

    return CountingParallelEnv
