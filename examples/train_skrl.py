"""skrl's PPO and SequentialTrainer on a gpu_envs env, with exact time-outs.

The gpu_envs lines are ``to_skrl`` and ``env.bootstrap_from(agent)``: skrl's trainer hands
its agent the post-reset observation as the "next" one of an ended episode, so a time-out
bootstraps from the next episode's start (or not at all); with the line the agent gets the
true final observation and stores r + gamma * V(s_T).

Run::

    python examples/train_skrl.py                          # CartPole-v1, 64 envs, ~50k env-steps
    python examples/train_skrl.py --library-default        # skrl's own time-out handling
    python examples/train_skrl.py --device cuda --num-envs 1024
"""

from __future__ import annotations

import argparse

import torch
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model
from skrl.trainers.torch import SequentialTrainer, SequentialTrainerCfg

import gpu_envs
from gpu_envs.interop import to_skrl


def mlp(n_in: int, n_out: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(n_in, 64), torch.nn.Tanh(), torch.nn.Linear(64, n_out))


class Policy(CategoricalMixin, Model):
    def __init__(self, env):
        Model.__init__(self, observation_space=env.observation_space, action_space=env.action_space, device=env.device)
        CategoricalMixin.__init__(self)
        self.net = mlp(self.num_observations, self.num_actions)

    def compute(self, inputs, role):
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    def __init__(self, env):
        Model.__init__(self, observation_space=env.observation_space, action_space=env.action_space, device=env.device)
        DeterministicMixin.__init__(self)
        self.net = mlp(self.num_observations, 1)

    def compute(self, inputs, role):
        return self.net(inputs["observations"]), {}


def mean_episode_length(env, agent, steps: int = 300) -> float:
    """Mean length of the episodes that end within ``steps`` steps (CartPole: ~22 at random, 500 at best)."""
    obs, _ = env.reset()
    running, lengths = torch.zeros(env.num_envs, device=env.device), []
    with torch.no_grad():
        for _ in range(steps):
            action, _ = agent.act(obs, None, timestep=0, timesteps=1)
            obs, _, terminated, truncated, _ = env.step(action)
            done = (terminated | truncated).view(-1)
            running += 1
            lengths += running[done].tolist()
            running[done] = 0
    return sum(lengths) / max(len(lengths), 1)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--timesteps", type=int, default=800, help="vector steps to train for")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--library-default", action="store_true", help="skrl's own time-out handling")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    env = to_skrl(gpu_envs.make("CartPole-v1", num_envs=args.num_envs, device=args.device, seed=args.seed))
    cfg = PPO_CFG(rollouts=32, learning_epochs=4, mini_batches=4, learning_rate=3e-3)
    cfg.experiment.write_interval = cfg.experiment.checkpoint_interval = 0  # no TensorBoard files, no checkpoints
    agent = PPO(
        models={"policy": Policy(env), "value": Value(env)},
        memory=RandomMemory(memory_size=32, num_envs=env.num_envs, device=env.device),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=env.device,
        cfg=cfg,
    )
    if not args.library_default:
        env.bootstrap_from(agent)  # time-outs: r + gamma * V(true final observation)
    before = mean_episode_length(env, agent)
    trainer_cfg = SequentialTrainerCfg(
        timesteps=args.timesteps, headless=True, disable_progressbar=None, close_environment_at_exit=False
    )
    SequentialTrainer(cfg=trainer_cfg, env=env, agents=agent).train()
    after = mean_episode_length(env, agent)
    print(f"mean episode length: {before:.1f} before training, {after:.1f} after")
    return {"before": before, "after": after}


if __name__ == "__main__":
    main()
