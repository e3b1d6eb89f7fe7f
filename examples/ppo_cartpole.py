"""PPO on the built-in CartPole-v1, in one file: gpu_envs.make + collect + gae, no RL library.

The loop is CleanRL's PPO (clipped surrogate, GAE, minibatch epochs, entropy bonus,
annealed learning rate) with the environment side done by gpu_envs:

* ``collect(env, agent.act, steps=T)`` fills the same ``[N, T]`` TensorDict every
  iteration, on the env's device, and episodes carry over between iterations;
* ``gae(...)`` bootstraps truncated episodes (CartPole's 500-step limit) from the value
  of their TRUE final observation ``("next", "observation")``, not the reset one.

Run::

    python examples/ppo_cartpole.py                 # full run: solves CartPole-v1 (>= 475)
    python examples/ppo_cartpole.py --quick         # ~100k steps, a few seconds
    python examples/ppo_cartpole.py --device cuda --num-envs 1024 --compile
    torchrun --standalone --nproc_per_node=2 examples/ppo_cartpole.py --distributed
    python examples/ppo_cartpole.py --checkpoint run.pt            # saved after every iteration
    python examples/ppo_cartpole.py --checkpoint run.pt --resume run.pt   # after a crash: continue

Checkpoint and resume are bit-exact: a checkpoint holds the env's state
(``env.get_state()``: every row's cart, step count and random stream, and the cached
observations the next step acts on), the policy, the optimizer, torch's random state,
the iteration and the episode returns in progress, so a run resumed in a new process
ends with the same parameters and returns, bit for bit, as one that never stopped
(``tests/test_ppo_checkpoint.py`` checks it).

With ``--distributed`` (under torchrun) every process collects its own shard of
``--num-envs`` envs (``gpu_envs.make(..., distributed=True)``: disjoint seeds, device
``cuda:LOCAL_RANK`` or the CPU) and the gradients are averaged by DDP (gloo on the CPU,
NCCL on CUDA); ``--total-steps`` counts the env-steps of all processes. The last line
printed (by rank 0) is a JSON summary: world size, env-steps over all ranks, wall time,
evaluation returns.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributions import Categorical
from torch.nn.parallel import DistributedDataParallel

import gpu_envs
import gpu_envs.distributed
from gpu_envs.rollout import collect, gae


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=600_000, help="env-steps to train for")
    p.add_argument("--num-envs", type=int, default=32, help="parallel envs N")
    p.add_argument("--steps", type=int, default=128, help="steps per collection T (batch = N * T)")
    p.add_argument("--lr", type=float, default=2.5e-3)
    p.add_argument("--epochs", type=int, default=4, help="passes over each batch")
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lam", type=float, default=0.95, help="GAE lambda")
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--eval-episodes", type=int, default=100, help="0: no evaluation")
    p.add_argument(
        "--device",
        default=None,
        help="torch device (default: cpu; with --distributed, cuda:LOCAL_RANK if CUDA is there)",
    )
    p.add_argument(
        "--distributed", action="store_true", help="under torchrun: one env shard per process, DDP gradients"
    )
    p.add_argument("--compile", action="store_true", help="collect with torch.compile")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--quick", action="store_true", help="small budget (100k steps): shows learning, not a solve")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--checkpoint", metavar="PATH", help="save a checkpoint to PATH after every iteration")
    p.add_argument("--resume", metavar="PATH", help="continue the run saved in PATH (same options as that run)")
    p.add_argument(
        "--stop-after", type=int, default=None, metavar="K", help="stop after iteration K, as an interrupted run would"
    )
    args = p.parse_args(argv)
    if args.distributed and (args.checkpoint or args.resume):
        p.error("--checkpoint/--resume save one process's run; they do not combine with --distributed")
    if args.quick:
        args.total_steps = min(args.total_steps, 100_000)
    return args


def layer(n_in: int, n_out: int, std: float = math.sqrt(2)) -> nn.Linear:
    lin = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.zeros_(lin.bias)
    return lin


class Agent(nn.Module):
    """Separate actor and critic MLPs (64-64, tanh), as in CleanRL."""

    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
        self.actor = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_actions, 0.01))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs)

    def dist(self, obs: torch.Tensor) -> Categorical:
        return Categorical(logits=self.actor(obs), validate_args=False)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probability of ``action``, entropy and value: the loss's inputs, in one call (what DDP wraps)."""
        dist = self.dist(obs)
        return dist.log_prob(action), dist.entropy(), self.value(obs).squeeze(-1)

    @torch.no_grad()
    def act(self, td):
        """The collection policy: TensorDict in, ``"action"`` sampled into it."""
        td["action"] = self.dist(td["observation"]).sample()
        return td

    @torch.no_grad()
    def act_greedy(self, td):
        td["action"] = self.actor(td["observation"]).argmax(-1)
        return td


def first_episode_returns(traj) -> torch.Tensor:
    """Return of each env's first episode in a rollout [N, T] (it must end within T)."""
    done = traj["next", "done"].squeeze(-1)
    before_end = (done.cumsum(1) - done.long()) == 0  # steps up to and including the first end
    return (traj["next", "reward"].squeeze(-1) * before_end).sum(1)


def evaluate(agent: Agent, episodes: int, device: str, seed: int, greedy: bool) -> float:
    """Mean return over ``episodes`` fresh episodes (one per env; CartPole ends by step 500)."""
    env = gpu_envs.make("CartPole-v1", num_envs=episodes, device=device, seed=seed)
    traj = collect(env, agent.act_greedy if greedy else agent.act, steps=500)
    return first_episode_returns(traj).mean().item()


# the options that do not change the run (where it is saved, when it stops, what is printed and evaluated);
# a resumed run must share every other one with the run it continues (gamma, clip, threads, compile, ...)
CONTROL_OPTIONS = ("checkpoint", "resume", "stop_after", "quiet", "eval_episodes")


def run_options(args: argparse.Namespace) -> dict:
    """Every option that changes the run: what a checkpoint keeps and a resume compares."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in CONTROL_OPTIONS}


def save_checkpoint(
    path: str, env, agent: Agent, opt, args: argparse.Namespace, iteration: int, running, history
) -> None:
    """Everything the rest of the run depends on, written atomically (a crash mid-write keeps the last one)."""
    state = {
        "iteration": iteration,
        "options": run_options(args),
        "env": env.get_state(),  # every row: carts, step counts, random streams, next observations
        "agent": agent.state_dict(),
        "optimizer": opt.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(env.device) if env.device.type == "cuda" else None,
        "running": running.clone(),
        "history": list(history),
    }
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def load_checkpoint(path: str, env, agent: Agent, opt, args: argparse.Namespace, running) -> tuple[int, list]:
    """Restore a :func:`save_checkpoint` into a freshly built run; returns ``(next iteration, history)``."""
    state = torch.load(path, map_location="cpu", weights_only=False)  # RNG states must stay CPU tensors
    saved, given = state["options"], run_options(args)
    missing = "(not saved)"
    differ = {k: (saved.get(k, missing), v) for k, v in given.items() if saved.get(k, missing) != v}
    if differ:
        raise SystemExit(f"--resume {path}: options differ from the saved run's (saved, given): {differ}")
    env.reset()  # the env must have been reset once; set_state then replaces every row
    env.set_state(state["env"])
    agent.load_state_dict(state["agent"])
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] is not None:
        torch.cuda.set_rng_state(state["cuda_rng"], env.device)
    running.copy_(state["running"])
    return state["iteration"], state["history"]


def train(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    device = "cpu" if args.device is None and not args.distributed else args.device
    env = gpu_envs.make(
        "CartPole-v1", num_envs=args.num_envs, device=device, seed=args.seed, distributed=args.distributed
    )
    world, main = env.world_size, env.rank == 0
    n, t_len = env.num_envs, args.steps
    agent = Agent(env.single_observation_spec["observation"].shape[0], env.action_spec.n).to(env.device)
    model = agent
    if world > 1:  # same initial weights everywhere (DDP also broadcasts rank 0's); gradients averaged
        model = DistributedDataParallel(agent, device_ids=[env.device] if env.device.type == "cuda" else None)
        torch.manual_seed(args.seed + env.rank)  # but each rank samples its own actions and minibatches
    opt = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)
    batch = n * t_len
    mb_size = batch // args.minibatches
    iterations = max(1, args.total_steps // (batch * world))
    running = torch.zeros(n, device=env.device)  # return of each env's ongoing episode
    history = []  # (env-steps, mean return of the episodes that ended in that iteration)
    first = 0
    if args.resume:
        first, history = load_checkpoint(args.resume, env, agent, opt, args, running)
    start = time.perf_counter()

    for it in range(first, iterations):
        for group in opt.param_groups:  # linear learning-rate annealing
            group["lr"] = args.lr * (1.0 - it / iterations)

        traj = collect(env, agent.act, steps=t_len, compile=args.compile)  # [N, T], written in place

        with torch.no_grad():
            obs, action = traj["observation"], traj["action"]
            reward = traj["next", "reward"].squeeze(-1)
            value = agent.value(obs).squeeze(-1)
            # V of ("next", "observation"): the TRUE final observation where an episode ended
            next_value = agent.value(traj["next", "observation"]).squeeze(-1)
            adv, target = gae(
                reward, value, next_value,
                traj["next", "terminated"], traj["next", "truncated"], traj["next", "final_obs_missing"],
                gamma=args.gamma, lam=args.lam,
            )  # fmt: skip
            logp_old = agent.dist(obs).log_prob(action)

            # episode returns, carried across collections like the episodes themselves
            done = traj["next", "done"].squeeze(-1)
            ended_sum, ended = torch.zeros((), device=env.device), done.sum()
            for t in range(t_len):
                running += reward[:, t]
                ended_sum += (running * done[:, t]).sum()
                running *= ~done[:, t]

        b_obs, b_act = obs.reshape(batch, -1), action.reshape(batch)
        b_logp, b_adv, b_target = logp_old.reshape(batch), adv.reshape(batch), target.reshape(batch)
        for _ in range(args.epochs):
            perm = torch.randperm(batch, device=env.device)
            for i in range(0, batch, mb_size):
                idx = perm[i : i + mb_size]
                logp, entropy, value = model(b_obs[idx], b_act[idx])
                ratio = (logp - b_logp[idx]).exp()
                mb_adv = b_adv[idx]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio, -mb_adv * ratio.clamp(1 - args.clip, 1 + args.clip)).mean()
                v_loss = 0.5 * (value - b_target[idx]).pow(2).mean()
                loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                opt.step()

        episodes = torch.stack([ended_sum, ended.to(ended_sum.dtype)])
        if world > 1:  # the episodes of every rank, for the log
            dist.all_reduce(episodes)
        ended_sum, n_ended = episodes[0].item(), int(episodes[1].item())  # one sync per iteration, for the log
        mean_ret = ended_sum / n_ended if n_ended else float("nan")
        steps_done = (it + 1) * batch * world
        history.append((steps_done, mean_ret))
        if main and not args.quiet and (it % 10 == 0 or it == iterations - 1):
            elapsed = time.perf_counter() - start
            print(f"iter {it + 1:4d}/{iterations}  env-steps {steps_done:>9,}  "
                  f"mean return {mean_ret:7.1f} ({n_ended} episodes)  {elapsed:6.1f}s")  # fmt: skip
        if args.checkpoint:
            save_checkpoint(args.checkpoint, env, agent, opt, args, it + 1, running, history)
        if args.stop_after is not None and it + 1 >= args.stop_after:
            break

    wall = time.perf_counter() - start
    result = {
        "world_size": world,
        "rank": env.rank,
        "env_steps": len(history) * batch * world,
        "wall_s": wall,
        "final_train_return": history[-1][1],
        "history": history,
        "eval_return": None,
        "eval_return_greedy": None,
    }
    result["parameters"] = {k: v.detach().cpu().clone() for k, v in agent.state_dict().items()}
    if main and args.eval_episodes > 0:  # every rank holds the same weights: one evaluation is enough
        result["eval_return"] = evaluate(agent, args.eval_episodes, env.device, args.seed + 1000, greedy=False)
        result["eval_return_greedy"] = evaluate(agent, args.eval_episodes, env.device, args.seed + 2000, greedy=True)
    env.close()
    return result


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    try:
        result = train(args)
    finally:
        gpu_envs.distributed.shutdown()
    if result["rank"] == 0:
        if result["eval_return"] is not None:
            print(
                f"done: {result['env_steps']:,} env-steps in {result['wall_s']:.1f}s "
                f"({result['env_steps'] / result['wall_s']:,.0f} env-steps/s incl. learning); "
                f"last-iteration training return {result['final_train_return']:.1f}; "
                f"evaluation over {args.eval_episodes} episodes: {result['eval_return']:.1f} (sampled actions), "
                f"{result['eval_return_greedy']:.1f} (greedy); solved (>= 475): {result['eval_return'] >= 475}"
            )
        summary = {k: result[k] for k in ("world_size", "env_steps", "wall_s", "final_train_return", "eval_return")}
        print(json.dumps({**summary, "eval_return_greedy": result["eval_return_greedy"]}))
    return result


if __name__ == "__main__":
    main()
