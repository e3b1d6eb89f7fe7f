"""Evaluate while training, inside the training batch: K rows act deterministically (EvalRows).

Isaac Lab allows one simulator per process, so there is no second env to evaluate in.
Here K of the N rows (``--eval-rows``) act with the policy's deterministic action (the
argmax), and count their own episodes; the other N - K rows train PPO as in
``examples/ppo_cartpole.py``. Every report shows both: the training rows' mean return
(sampled actions) and the evaluation rows' (greedy actions), from the same collection,
with no extra env and no extra step.

    python examples/eval_rows.py                          # CartPole-v1, 64 envs of which 8 evaluate
    python examples/eval_rows.py --total-steps 30000      # a short run

The pieces: ``EvalRows(rows)`` steers those rows with ``td["action_mode"]`` and keeps
their statistics (``eval_rows.summary()``); ``EpisodeStats(rows=eval_rows.train_rows(N))``
counts the training rows only; ``traj[eval_rows.train_index]`` is the training batch.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

import gpu_envs
from gpu_envs.rollout import collect, gae
from gpu_envs.transforms import EpisodeStats, EvalRows, TransformedEnv


def agent_class() -> type:
    """The actor-critic of ``examples/ppo_cartpole.py``, next to this file."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    from ppo_cartpole import Agent

    return Agent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=300_000, help="env-steps to train for (all rows)")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--eval-rows", type=int, default=8, help="rows that evaluate (the last K)")
    p.add_argument("--steps", type=int, default=128, help="steps per collection")
    p.add_argument("--lr", type=float, default=2.5e-3)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--report-every", type=int, default=5, help="iterations between reports")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def ppo_update(agent: nn.Module, opt: torch.optim.Optimizer, batch, args: argparse.Namespace) -> None:
    """CleanRL's PPO update on a ``[B, T]`` trajectory (the training rows)."""
    with torch.no_grad():
        obs, action = batch["observation"], batch["action"]
        value = agent.value(obs).squeeze(-1)
        next_value = agent.value(batch["next", "observation"]).squeeze(-1)  # the true final observation where one ended
        adv, target = gae(
            batch["next", "reward"].squeeze(-1), value, next_value,
            batch["next", "terminated"], batch["next", "truncated"], batch["next", "final_obs_missing"],
            gamma=0.99, lam=0.95,
        )  # fmt: skip
        logp_old = agent.dist(obs).log_prob(action)
    size = obs.shape[0] * obs.shape[1]
    b_obs, b_act, b_logp = obs.reshape(size, -1), action.reshape(size), logp_old.reshape(size)
    b_adv, b_target = adv.reshape(size), target.reshape(size)
    mb = size // args.minibatches
    for _ in range(args.epochs):
        perm = torch.randperm(size, device=obs.device)
        for i in range(0, size, mb):
            idx = perm[i : i + mb]
            logp, entropy, v = agent(b_obs[idx], b_act[idx])
            ratio = (logp - b_logp[idx]).exp()
            a = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
            pg = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
            loss = pg - 0.01 * entropy.mean() + 0.25 * (v - b_target[idx]).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            opt.step()


def train(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    n, k = args.num_envs, args.eval_rows
    eval_rows = EvalRows(range(n - k, n))  # the last K rows evaluate
    train_stats = EpisodeStats(rows=eval_rows.train_rows(n))
    env = TransformedEnv(
        gpu_envs.make("CartPole-v1", num_envs=n, device=args.device, seed=args.seed), train_stats, eval_rows
    )
    agent = agent_class()(env.single_observation_spec["observation"].shape[0], env.action_spec.n).to(env.device)
    opt = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)

    @torch.no_grad()
    def act(td):
        logits = agent.actor(td["observation"])
        td["action"] = torch.distributions.Categorical(logits=logits).sample()  # what the training rows take
        td["action_mode"] = logits.argmax(-1)  # what the evaluation rows take
        return td

    iterations = max(1, args.total_steps // (n * args.steps))
    history = []  # (env-steps, training rows' mean return, evaluation rows' mean return, their episodes)
    start = time.perf_counter()
    env.reset()
    for it in range(iterations):
        for group in opt.param_groups:
            group["lr"] = args.lr * (1.0 - it / iterations)
        traj = collect(env, act, steps=args.steps)
        ppo_update(agent, opt, traj[eval_rows.train_index], args)  # the training rows only
        if (it + 1) % args.report_every == 0 or it == iterations - 1:
            trained, evaluated = train_stats.summary(), eval_rows.summary()  # two small syncs per report
            train_stats.clear()
            eval_rows.clear()
            history.append(((it + 1) * n * args.steps, trained.mean_return, evaluated.mean_return, evaluated.episodes))
            if not args.quiet:
                print(
                    f"iter {it + 1:4d}/{iterations}  env-steps {history[-1][0]:>8,}  train return {trained.mean_return:7.1f}  "
                    f"eval return (greedy, {k} rows) {evaluated.mean_return:7.1f} over {evaluated.episodes} episodes  "
                    f"{time.perf_counter() - start:5.1f}s"
                )
    env.close()
    return {"history": history, "wall_s": time.perf_counter() - start, "iterations": iterations}


def main(argv: list[str] | None = None) -> dict:
    return train(parse_args(argv))


if __name__ == "__main__":
    main()
