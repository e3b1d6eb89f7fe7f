"""Stable-Baselines3 PPO on gpu_envs' CartPole-v1: one ``to_sb3`` call, no other glue.

Run::

    python examples/train_sb3.py                 # 20k steps: from ~20 (random) to ~500
"""

from __future__ import annotations

import argparse

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

import gpu_envs
from gpu_envs.interop import to_sb3


def train(total_steps: int = 20_000, num_envs: int = 8, seed: int = 0) -> PPO:
    """PPO with rl-zoo's CartPole-v1 settings; VecMonitor feeds SB3's episode statistics."""
    venv = VecMonitor(to_sb3(gpu_envs.make("CartPole-v1", num_envs=num_envs, device="cpu", seed=seed)))
    model = PPO(
        "MlpPolicy", venv, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
        learning_rate=1e-3, ent_coef=0.0, seed=seed, device="cpu",
    )  # fmt: skip
    return model.learn(total_timesteps=total_steps)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-steps", type=int, default=20_000)
    parser.add_argument("--num-envs", type=int, default=8)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = train(args.total_steps, args.num_envs)
    mean, std = evaluate_policy(model, model.get_env(), n_eval_episodes=20)
    print(f"mean return over 20 episodes: {mean:.1f} +- {std:.1f}")
    return mean


if __name__ == "__main__":
    main()
