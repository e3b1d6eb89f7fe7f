"""skrl's MAPPO and SequentialTrainer on VMAS navigation: the only gpu_envs line is ``to_skrl``.

``to_skrl`` of an env of agent groups is skrl's multi-agent env wrapper (dicts per
agent); the centralised critic sees ``env.state()``: every agent's observation,
concatenated. The policy's and the critic's parameters are shared by the agents (one
model object each), as in ``examples/mappo_vmas.py``.

Run::

    python examples/mappo_skrl.py                       # ~2 CPU min
"""

from __future__ import annotations

import argparse
import dataclasses

import torch
from skrl.memories.torch import RandomMemory
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from skrl.multi_agents.torch.mappo import MAPPO, MAPPO_CFG
from skrl.trainers.torch import SequentialTrainer, SequentialTrainerCfg

import gpu_envs
from gpu_envs.interop import to_skrl


def mlp(n_in: int, n_out: int, hidden: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(n_in, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
        torch.nn.Linear(hidden, n_out),
    )  # fmt: skip


class Policy(GaussianMixin, Model):
    def __init__(self, observation_space, action_space, device, hidden: int):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        GaussianMixin.__init__(self, clip_actions=True, clip_log_std=True, min_log_std=-5.0, max_log_std=1.0)
        self.net = mlp(self.num_observations, self.num_actions, hidden)
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role):
        return self.net(inputs["observations"]), {"log_std": self.log_std}


class Value(DeterministicMixin, Model):
    def __init__(self, state_space, action_space, device, hidden: int):
        Model.__init__(self, observation_space=state_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = mlp(self.num_observations, 1, hidden)

    def compute(self, inputs, role):
        return self.net(inputs["states"]), {}


def mean_return(env, agent, steps: int) -> float:
    """Each agent's reward summed over ``steps`` steps (one episode), averaged over envs and agents."""
    obs, _ = env.reset()
    total = 0.0
    with torch.no_grad():
        for _ in range(steps):
            actions = agent.act(obs, env.state(), timestep=0, timesteps=1)[0]
            obs, rewards, _, _, _ = env.step(actions)
            total += float(sum(r.mean() for r in rewards.values())) / len(rewards)
    return total


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--horizon", type=int, default=100)
    p.add_argument("--timesteps", type=int, default=1500, help="vector steps to train for")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    base = gpu_envs.make(
        "vmas/navigation", num_envs=args.num_envs, max_episode_steps=args.horizon, seed=args.seed, n_agents=2
    )
    env = to_skrl(base)
    first = env.possible_agents[0]
    policy = Policy(env.observation_spaces[first], env.action_spaces[first], env.device, args.hidden)
    value = Value(env.state_spaces[first], env.action_spaces[first], env.device, args.hidden)
    cfg = MAPPO_CFG(rollouts=args.horizon, learning_epochs=8, mini_batches=4, learning_rate=1e-3)
    cfg.experiment.write_interval = cfg.experiment.checkpoint_interval = 0  # no TensorBoard files, no checkpoints
    for field in dataclasses.fields(cfg):  # skrl 2.1 refuses its own empty {} defaults: one {} per agent instead
        if getattr(cfg, field.name) == {}:
            setattr(cfg, field.name, {a: {} for a in env.possible_agents})
    agent = MAPPO(
        possible_agents=env.possible_agents,
        models={a: {"policy": policy, "value": value} for a in env.possible_agents},
        memories={
            a: RandomMemory(memory_size=args.horizon, num_envs=env.num_envs, device=env.device)
            for a in env.possible_agents
        },
        observation_spaces=env.observation_spaces,
        action_spaces=env.action_spaces,
        state_spaces=env.state_spaces,
        device=env.device,
        cfg=cfg,
    )
    before = mean_return(env, agent, args.horizon)
    trainer_cfg = SequentialTrainerCfg(
        timesteps=args.timesteps, headless=True, disable_progressbar=None, close_environment_at_exit=False
    )
    SequentialTrainer(cfg=trainer_cfg, env=env, agents=agent).train()
    after = mean_return(env, agent, args.horizon)
    print(f"mean return per agent and episode: {before:.3f} before training, {after:.3f} after")
    return {"before": before, "after": after}


if __name__ == "__main__":
    main()
