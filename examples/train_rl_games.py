"""rl_games' PPO (its ``Runner``, as Isaac Lab's train script uses it) on a gpu_envs env, with exact time-outs.

The gpu_envs lines are ``to_rl_games`` (which registers the env for rl_games' config) and
``bootstrap_from`` (time-outs bootstrap from V(true final observation) instead of rl_games'
V(s_t)); the rest is rl_games' own config and runner.

Run::

    python examples/train_rl_games.py                   # Pendulum-v1, 256 envs, ~400k env-steps
    python examples/train_rl_games.py --library-default # rl_games' own time-out bootstrap
    python examples/train_rl_games.py --device cuda:0 --num-envs 4096
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import tempfile

import torch
from rl_games.common.algo_observer import DefaultAlgoObserver
from rl_games.torch_runner import Runner

import gpu_envs
from gpu_envs.interop import to_rl_games

PARAMS = {
    "seed": 0,
    "torch_threads": 0,  # leave torch's thread count alone
    "algo": {"name": "a2c_continuous"},
    "model": {"name": "continuous_a2c_logstd"},
    "network": {
        "name": "actor_critic",
        "separate": True,
        "space": {
            "continuous": {
                "mu_activation": "None",
                "sigma_activation": "None",
                "mu_init": {"name": "default"},
                "sigma_init": {"name": "const_initializer", "val": 0},
                "fixed_sigma": True,
            }
        },
        "mlp": {"units": [64, 64], "activation": "elu", "initializer": {"name": "default"}},
    },
    "config": {
        "name": "pendulum",
        "env_name": "gpu_envs",
        "device": "cpu",
        "torch_compile": False,
        "reward_shaper": {"scale_value": 0.1},
        "normalize_input": True,
        "normalize_value": True,
        "normalize_advantage": True,
        "value_bootstrap": True,
        "gamma": 0.95,
        "tau": 0.95,
        "learning_rate": 1e-3,
        "lr_schedule": "adaptive",
        "kl_threshold": 0.016,
        "score_to_win": 1e9,
        "max_epochs": 50,
        "save_frequency": 0,
        "save_best_after": 10**9,
        "grad_norm": 1.0,
        "entropy_coef": 0.0,
        "truncate_grads": True,
        "e_clip": 0.2,
        "clip_value": True,
        "horizon_length": 32,
        "minibatch_size": 2048,
        "mini_epochs": 5,
        "critic_coef": 2,
        "bounds_loss_coef": 0.0001,
        "print_stats": False,
    },
}


class EpisodeReturns(DefaultAlgoObserver):
    """Keeps the agent rl_games builds and the mean return of its last finished episodes at every epoch."""

    def after_init(self, algo):
        super().after_init(algo)
        self.algo, self.returns = algo, []

    def after_print_stats(self, frame, epoch_num, total_time):
        super().after_print_stats(frame, epoch_num, total_time)
        if self.algo.game_rewards.current_size > 0:
            self.returns.append(self.algo.game_rewards.get_mean()[0])


def evaluate(vec_env, agent, steps: int = 200) -> float:
    """Mean return over ``steps`` steps of every env from a fresh reset, acting with the policy's mean."""
    obs, total = vec_env.reset(), torch.zeros(vec_env.num_envs, device=vec_env.device)
    with torch.no_grad():
        for _ in range(steps):
            mean_action = agent.get_action_values(agent.obs_to_tensors(obs))["mus"]
            obs, rewards, _, _ = vec_env.step(agent.preprocess_actions(mean_action))  # rescaled to the bounds
            total += rewards
    return total.mean().item()


def train(num_envs: int = 256, epochs: int = 50, device: str = "cpu", seed: int = 0, exact: bool = True,
          max_episode_steps: int | None = None, quiet: bool = True) -> dict:  # fmt: skip
    """Train rl_games' PPO on Pendulum-v1.

    Returns ``{"returns": mean episode return after each epoch (rl_games' own statistics),
    "final": evaluate()'s 200-step return of the trained policy}``.
    """
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    vec_env = to_rl_games(gpu_envs.make("Pendulum-v1", num_envs=num_envs, device=device, seed=seed, **kwargs))
    params = copy.deepcopy(PARAMS)
    params["seed"] = seed
    params["config"].update(num_actors=vec_env.num_envs, env_name=vec_env.env_name, device=device, max_epochs=epochs)
    observer = EpisodeReturns()
    with tempfile.TemporaryDirectory() as runs, contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():  # fmt: skip
        params["config"]["train_dir"] = runs  # rl_games writes TensorBoard summaries and checkpoints there
        runner = Runner(observer)
        runner.load({"params": params})
        if exact:
            vec_env.bootstrap_from(runner)
        runner.run({"train": True, "play": False})
        observer.algo.writer.close()  # rl_games leaves its TensorBoard writer open
    final = evaluate(vec_env, observer.algo)
    vec_env.close()
    return {"returns": observer.returns, "final": final}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--library-default", action="store_true", help="rl_games' own time-out bootstrap (V(s_t))")
    args = p.parse_args(argv)
    result = train(args.num_envs, args.epochs, args.device, args.seed, exact=not args.library_default)
    if result["returns"]:
        print(
            f"mean episode return: {result['returns'][0]:.0f} in the first episodes (random policy), "
            f"{result['final']:.0f} for the trained policy's mean action"
        )
    else:  # rl_games' statistics hold finished episodes only (Pendulum's last 200 steps)
        print(
            f"no episode finished within {args.epochs} epochs (run more --epochs); "
            f"{result['final']:.0f} for the trained policy's mean action"
        )
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
