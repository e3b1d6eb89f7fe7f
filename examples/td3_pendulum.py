"""TD3 with many envs and n-step targets from ``gpu_envs.replay.ReplayBuffer`` (FastTD3 style), on built-in Pendulum.

Every iteration steps all ``N`` envs once (``collect(..., steps=1)``), adds the ``[N, 1]``
transitions to the buffer and takes a few gradient steps on large batches. The buffer's
n-step targets stop at terminations and bootstrap through Pendulum's 200-step time-outs
from the true final observation: ``target = reward + discount * min(Q1, Q2)(next)``.
Everything stays on ``--device`` (the buffer never waits for it).

With ``--history K`` the policy sees the last K observations (``History``) and with
``--action-delay LO HI`` each env applies its actions 0..2 steps late, the delay drawn per
episode (``Delay``); ``--randomize`` gives each env its own pendulum mass and length, drawn
again each episode within +-20% (``Randomize``): the sim-to-real transforms, in training and
in evaluation alike.

Run::

    python examples/td3_pendulum.py                      # 64 envs, 192k env steps, ~1 min of one CPU thread
    python examples/td3_pendulum.py --history 3 --action-delay 0 2 --randomize
    python examples/td3_pendulum.py --device cuda --num-envs 1024 --batch-size 8192
"""

from __future__ import annotations

import argparse
import copy

import torch
from torch import nn

import gpu_envs
from gpu_envs.replay import ReplayBuffer
from gpu_envs.rollout import collect
from gpu_envs.transforms import Delay, History, Randomize, TransformedEnv

MAX_TORQUE = 2.0


def mlp(n_in: int, n_out: int, hidden: int = 128) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_out)
    )


class Actor(nn.Module):
    def __init__(self, obs_dim: int = 3) -> None:
        super().__init__()
        self.net = mlp(obs_dim, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return MAX_TORQUE * torch.tanh(self.net(obs.flatten(1)))  # a History window [B, K, 3] as [B, 3K]


class Critics(nn.Module):
    """Two Q functions (TD3's clipped double Q)."""

    def __init__(self, obs_dim: int = 3) -> None:
        super().__init__()
        self.q1, self.q2 = mlp(obs_dim + 1, 1), mlp(obs_dim + 1, 1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs.flatten(1), action / MAX_TORQUE], dim=-1)
        return self.q1(x), self.q2(x)


RANDOMIZED = {"m": (0.8, 1.2), "l": (0.8, 1.2)}  # gymnasium's 1.0 +- 20%


def make_env(num_envs: int, device: str, seed: int, history: int = 1, action_delay: tuple[int, int] | None = None,
             randomize: bool = False):  # fmt: skip
    """Built-in Pendulum, through ``Randomize``, ``Delay`` and ``History`` where asked (training and evaluation)."""
    env = gpu_envs.make("Pendulum-v1", num_envs=num_envs, device=device, seed=seed)
    transforms: list = [Randomize(RANDOMIZED)] if randomize else []
    if action_delay is not None and action_delay != (0, 0):
        transforms.append(Delay(action_steps=action_delay))
    if history > 1:
        transforms.append(History(length=history))
    return TransformedEnv(env, *transforms) if transforms else env


def critic_target(nxt, actor_target: Actor, critics_target: Critics) -> torch.Tensor:
    """TD3's target ``reward + discount * min(Q1, Q2)(next, smoothed next action)``, ``[B, 1]`` for any n_step."""
    next_action = actor_target(nxt["observation"])
    noise = (0.2 * torch.randn_like(next_action)).clamp(-0.5, 0.5)
    next_action = (next_action + noise * MAX_TORQUE).clamp(-MAX_TORQUE, MAX_TORQUE)
    return nxt["reward"] + nxt["discount"] * torch.min(*critics_target(nxt["observation"], next_action))


def evaluate(actor: Actor, num_envs: int, device: str, seed: int, **env_options) -> float:
    """Mean 200-step return of the deterministic policy over ``num_envs`` fresh episodes."""
    env = make_env(num_envs, device, seed, **env_options)
    with torch.no_grad():
        traj = collect(env, lambda td: td.set("action", actor(td["observation"])), steps=200)
    return traj["next", "reward"].sum(dim=1).mean().item()


def train(num_envs: int = 64, iterations: int = 3000, updates: int = 2, batch_size: int = 256, n_step: int = 3,
          gamma: float = 0.99, lr: float = 1e-3, device: str = "cpu", seed: int = 0, log_every: int = 250,
          history: int = 1, action_delay: tuple[int, int] | None = None, randomize: bool = False) -> dict:  # fmt: skip
    """Train TD3; returns ``{"curve": [(env steps, evaluation return)], "final": evaluation return}``."""
    torch.manual_seed(seed)
    options = {"history": history, "action_delay": action_delay, "randomize": randomize}
    env = make_env(num_envs, device, seed, **options)
    actor, critics = Actor(3 * history).to(device), Critics(3 * history).to(device)
    actor_target, critics_target = copy.deepcopy(actor), copy.deepcopy(critics)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=lr)
    critic_opt = torch.optim.Adam(critics.parameters(), lr=lr)
    rb = ReplayBuffer(200_000, device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    warmup = max(1, 2000 // num_envs)  # random actions first, as TD3 does

    def explore(td):
        with torch.no_grad():
            action = actor(td["observation"]) + 0.2 * MAX_TORQUE * torch.randn(num_envs, 1, device=device)
        return td.set("action", action.clamp(-MAX_TORQUE, MAX_TORQUE))

    curve = []
    for it in range(iterations):
        rb.extend(collect(env, None if it < warmup else explore, steps=1))
        if it < warmup:
            continue
        for u in range(updates):
            batch = rb.sample(batch_size, n_step=n_step, gamma=gamma, generator=generator)
            obs, action, nxt = batch["observation"], batch["action"], batch["next"]
            with torch.no_grad():
                target = critic_target(nxt, actor_target, critics_target)
            q1, q2 = critics(obs, action)
            critic_loss = (q1 - target).pow(2).mean() + (q2 - target).pow(2).mean()
            critic_opt.zero_grad()
            critic_loss.backward()
            critic_opt.step()
            if u % 2 == 1:  # delayed policy updates
                actor_loss = -critics(obs, actor(obs))[0].mean()
                actor_opt.zero_grad()
                actor_loss.backward()
                actor_opt.step()
                with torch.no_grad():
                    for net, target_net in ((actor, actor_target), (critics, critics_target)):
                        for p, p_target in zip(net.parameters(), target_net.parameters(), strict=True):
                            p_target.lerp_(p, 0.005)
        if log_every and (it + 1) % log_every == 0:
            curve.append(((it + 1) * num_envs, evaluate(actor, 16, device, seed + it, **options)))
    return {"curve": curve, "final": evaluate(actor, 64, device, seed + 10**6, **options)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--iterations", type=int, default=3000)
    p.add_argument("--updates", type=int, default=2, help="gradient steps per iteration")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--n-step", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--history", type=int, default=1, help="the policy sees the last K observations (History)")
    p.add_argument("--action-delay", type=int, nargs=2, default=None, metavar=("LO", "HI"),
                   help="each env applies actions LO..HI steps late, drawn per episode (Delay)")  # fmt: skip
    p.add_argument("--randomize", action="store_true", help="each env's mass and length drawn per episode (Randomize)")
    args = p.parse_args(argv)
    delay = None if args.action_delay is None else tuple(args.action_delay)
    result = train(args.num_envs, args.iterations, args.updates, args.batch_size, args.n_step,
                   device=args.device, seed=args.seed, history=args.history, action_delay=delay,
                   randomize=args.randomize)  # fmt: skip
    for steps, ret in result["curve"]:
        print(f"{steps:>8} env steps: mean return {ret:8.1f}")
    print(f"final mean return over 64 episodes: {result['final']:.1f} (random policy: about -1200; solved: above -200)")
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
