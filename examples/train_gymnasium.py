"""CleanRL-style PPO on gymnasium's vector API, fed by a gpu_envs env: the env line is the only change.

The training loop below is written for any ``gymnasium.vector.VectorEnv`` (CleanRL's
``ppo.py``: numpy in and out, gymnasium's NEXT_STEP auto-reset, episode returns from
``RecordEpisodeStatistics``). Swapping gymnasium's env for a gpu_envs one is one line::

    envs = gymnasium.make_vec("CartPole-v1", num_envs=8)                          # plain gymnasium
    envs = to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu"))   # gpu_envs

Time-outs are bootstrapped, not treated as terminations. CleanRL's ``ppo.py`` sets
``next_done = terminations | truncations`` and so bootstraps 0 where an episode was cut by
its time limit: a biased target wherever time limits cut episodes. Here (see
:func:`advantages_and_returns`) a truncated step's target is ``r + gamma * V(s_T)``, with
``s_T`` the true final observation, which gymnasium's NEXT_STEP auto-reset returns as the
observation of the step that ended (the next step only resets: it is left out of the
loss); only a termination bootstraps 0. ``--time-outs terminate`` runs CleanRL's original
rule, for comparison (benchmarks/bench_bootstrap.py).

Run::

    python examples/train_gymnasium.py                      # gpu_envs' CartPole, 100k steps
    python examples/train_gymnasium.py --envs gymnasium     # the same loop on gymnasium's own
    python examples/train_gymnasium.py --time-outs terminate   # CleanRL's rule: time-outs bootstrap 0
"""

from __future__ import annotations

import argparse

import gymnasium
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

import gpu_envs
from gpu_envs.interop import to_gymnasium


def make_envs(source: str, num_envs: int) -> gymnasium.vector.VectorEnv:
    if source == "gpu_envs":
        envs = to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=num_envs, device="cpu"))
    else:
        envs = gymnasium.make_vec("CartPole-v1", num_envs=num_envs)
    return gymnasium.wrappers.vector.RecordEpisodeStatistics(envs)


def mlp(n_in: int, n_out: int, std: float) -> nn.Sequential:
    layers = [nn.Linear(n_in, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_out)]
    for layer, gain in zip(layers[::2], (np.sqrt(2), np.sqrt(2), std), strict=True):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


class Agent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic, self.actor = mlp(obs_dim, 1, 1.0), mlp(obs_dim, n_actions, 0.01)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        dist = Categorical(logits=self.actor(obs))
        action = dist.sample() if action is None else action
        return action, dist.log_prob(action), dist.entropy(), self.critic(obs).squeeze(-1)


def advantages_and_returns(rewards, values, dones, terms, next_value, next_done, next_term, gamma: float, lam: float,
                           bootstrap_time_outs: bool = True):  # fmt: skip
    """GAE over ``[T, N]`` tensors collected from a NEXT_STEP vector env, the CleanRL way.

    Row ``t`` holds the step taken from ``obs[t]``; ``dones[t]`` / ``terms[t]`` say whether
    the PREVIOUS step ended / terminated (so row ``t`` is a reset-only step), and
    ``next_*`` are the same for the last step. Where step ``t`` ended, ``obs[t + 1]`` is its
    true final observation (NEXT_STEP returns it, and resets on the following step), so
    ``values[t + 1]`` is V(s_T): a truncated step's target is ``r + gamma * V(s_T)``, a
    terminated one's ``r``; the advantage never runs on past an end. With
    ``bootstrap_time_outs=False`` every end counts as a termination (CleanRL's rule).
    Returns ``(advantages, returns)``.
    """
    steps = rewards.shape[0]
    advantages, last = torch.zeros_like(rewards), torch.zeros_like(rewards[0])
    for t in reversed(range(steps)):
        ended = next_done if t == steps - 1 else dones[t + 1]
        terminal = (next_term if t == steps - 1 else terms[t + 1]) if bootstrap_time_outs else ended
        value_next = next_value if t == steps - 1 else values[t + 1]
        delta = rewards[t] + gamma * value_next * (1.0 - terminal) - values[t]
        advantages[t] = last = delta + gamma * lam * (1.0 - ended) * last
    return advantages, advantages + values


def train(envs, total_steps: int = 100_000, steps: int = 128, lr: float = 1e-3, epochs: int = 4, minibatches: int = 4,
          gamma: float = 0.99, lam: float = 0.95, clip: float = 0.2, ent_coef: float = 0.01, seed: int = 1,
          bootstrap_time_outs: bool = True) -> list[float]:  # fmt: skip
    """Train PPO on ``envs`` (a NEXT_STEP vector env); returns the return of every finished episode, in order."""
    mode = envs.metadata.get("autoreset_mode", gymnasium.vector.AutoresetMode.NEXT_STEP)
    if mode != gymnasium.vector.AutoresetMode.NEXT_STEP:
        raise ValueError(f"this loop reads final observations the NEXT_STEP way; the env auto-resets {mode}")
    torch.manual_seed(seed)
    n = envs.num_envs
    agent = Agent(envs.single_observation_space.shape[0], envs.single_action_space.n)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    obs = torch.zeros(steps, n, *envs.single_observation_space.shape)
    actions, logprobs, rewards, dones, terms, values = (torch.zeros(steps, n) for _ in range(6))
    next_obs = torch.as_tensor(envs.reset(seed=seed)[0])
    next_done, next_term = torch.zeros(n), torch.zeros(n)
    episode_returns: list[float] = []
    for iteration in range(total_steps // (steps * n)):
        optimizer.param_groups[0]["lr"] = lr * (1 - iteration / (total_steps // (steps * n)))
        for t in range(steps):
            obs[t], dones[t], terms[t] = next_obs, next_done, next_term
            with torch.no_grad():
                action, logprobs[t], _, values[t] = agent.act(next_obs)
            actions[t] = action
            step_obs, reward, terminated, truncated, info = envs.step(action.cpu().numpy())
            next_obs, rewards[t] = torch.as_tensor(step_obs), torch.as_tensor(reward)
            next_done = torch.as_tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
            next_term = torch.as_tensor(terminated, dtype=torch.float32)
            if "episode" in info:
                episode_returns += info["episode"]["r"][info["_episode"]].tolist()
        # NEXT_STEP: a step taken right after an end (dones[t] = 1) only resets: left out of the loss
        with torch.no_grad():
            next_value = agent.critic(next_obs).squeeze(-1)  # V(s_T) too, where the last step ended
            advantages, returns = advantages_and_returns(
                rewards, values, dones, terms, next_value, next_done, next_term, gamma, lam, bootstrap_time_outs
            )
        valid = (1.0 - dones).reshape(-1)
        b_obs, b_actions, b_logprobs = obs.reshape(-1, obs.shape[-1]), actions.reshape(-1), logprobs.reshape(-1)
        b_adv, b_returns = advantages.reshape(-1), returns.reshape(-1)
        for _ in range(epochs):
            for idx in torch.randperm(steps * n).chunk(minibatches):
                _, logprob, entropy, value = agent.act(b_obs[idx], b_actions[idx].long())
                ratio = (logprob - b_logprobs[idx]).exp()
                adv = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip))
                loss_per_step = pg_loss + 0.5 * (value - b_returns[idx]) ** 2 - ent_coef * entropy
                loss = (loss_per_step * valid[idx]).sum() / valid[idx].sum().clamp(min=1)
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
    envs.close()
    return episode_returns


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--envs", choices=["gpu_envs", "gymnasium"], default="gpu_envs", help="who provides CartPole-v1"
    )
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--time-outs",
        choices=["bootstrap", "terminate"],
        default="bootstrap",
        help="bootstrap time-outs from V(final observation) (exact), or treat them as terminations (CleanRL's ppo.py)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    envs = make_envs(args.envs, args.num_envs)
    returns = train(
        envs, total_steps=args.total_steps, seed=args.seed, bootstrap_time_outs=args.time_outs == "bootstrap"
    )
    print(
        f"{len(returns)} episodes; mean return of the first 20: {np.mean(returns[:20]):.1f}, last 20: {np.mean(returns[-20:]):.1f}"
    )
    return returns


if __name__ == "__main__":
    main()
