"""rsl_rl's OnPolicyRunner (the PPO Isaac Lab users train with) on a gpu_envs env, with exact time-outs.

The gpu_envs lines are ``to_rsl_rl`` and ``vec_env.bootstrap_from(runner)``: rsl_rl alone
bootstraps a time-out from V(s_t), the state the action was taken in; with the line the
target is r + gamma * V(s_T), the true final observation, with the runner's own critic.
The same lines train an Isaac Lab task: ``to_rsl_rl(gpu_envs.wrap(isaac_env))``.

Run::

    python examples/train_rsl_rl.py                        # Pendulum-v1, 256 envs, ~500k env-steps
    python examples/train_rsl_rl.py --library-default      # rsl_rl's own time-out bootstrap
    python examples/train_rsl_rl.py --device cuda --num-envs 4096
"""

from __future__ import annotations

import argparse
import contextlib
import io

import torch
from rsl_rl.runners import OnPolicyRunner

import gpu_envs
from gpu_envs.interop import to_rsl_rl

TRAIN_CFG = {
    "num_steps_per_env": 32,
    "save_interval": 1000,
    "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
    "algorithm": {"class_name": "PPO", "learning_rate": 1e-3, "gamma": 0.95, "lam": 0.95, "entropy_coef": 0.0},
    "actor": {
        "class_name": "MLPModel",
        "hidden_dims": [64, 64],
        "obs_normalization": True,
        "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0},
    },
    "critic": {"class_name": "MLPModel", "hidden_dims": [64, 64], "obs_normalization": True},
}


def mean_step_reward(env, policy, steps: int = 200) -> float:
    """Mean reward per env-step of ``policy`` (Pendulum: about -6 at random, near 0 when swung up)."""
    obs, total = env.get_observations(), 0.0
    with torch.inference_mode():
        for _ in range(steps):
            obs, rewards, _, _ = env.step(policy(obs))
            total += rewards.mean().item()
    return total / steps


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="hide rsl_rl's per-iteration log")
    p.add_argument("--library-default", action="store_true", help="rsl_rl's own time-out bootstrap (V(s_t))")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    env = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=args.num_envs, device=args.device, seed=args.seed))
    with contextlib.redirect_stdout(io.StringIO()) if args.quiet else contextlib.nullcontext():
        runner = OnPolicyRunner(env, TRAIN_CFG, log_dir=None, device=args.device)
        if not args.library_default:
            env.bootstrap_from(runner)  # time-outs: r + gamma * V(true final observation)
        before = mean_step_reward(env, runner.get_inference_policy())
        runner.learn(num_learning_iterations=args.iterations, init_at_random_ep_len=True)
    after = mean_step_reward(env, runner.get_inference_policy())
    print(f"mean reward per step: {before:.2f} before training, {after:.2f} after")
    return {"before": before, "after": after}


if __name__ == "__main__":
    main()
