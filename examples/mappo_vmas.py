"""MAPPO on VMAS navigation with torchrl's MultiAgentMLP and ClipPPOLoss, fed by gpu_envs' collect.

The env is ``gpu_envs.make("vmas/navigation")``: four agents in one group ``"agents"``,
``td["agents", "observation"]`` ``[N, 4, 18]``, each agent's action, reward and flags under
the group (torchrl's multi-agent layout), and the TRUE final observation on rows that
ended. The policy is decentralised (each agent sees its own observation, parameters
shared), the critic centralised (MAPPO: every agent's value sees all observations).
``collect`` fills a ``[N, T]`` buffer; torchrl's GAE reads each agent's done and
terminated flags, which gpu_envs hands out per agent already.

Run::

    python examples/mappo_vmas.py                      # ~2 min on a laptop CPU
    python examples/mappo_vmas.py --iterations 30 --num-envs 120
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal
from torchrl.objectives import ClipPPOLoss, ValueEstimators

import gpu_envs
from gpu_envs.rollout import collect

GROUP = "agents"


def build(env, hidden: int) -> tuple[ProbabilisticActor, TensorDictModule]:
    """The decentralised policy and the centralised critic over group ``agents``."""
    n_agents = len(env.group_map[GROUP])
    n_obs = env.single_observation_spec[GROUP, "observation"].shape[-1]
    action_spec = env.full_action_spec[GROUP, "action"]
    n_act = action_spec.shape[-1]
    policy_net = torch.nn.Sequential(
        MultiAgentMLP(
            n_agent_inputs=n_obs,
            n_agent_outputs=2 * n_act,
            n_agents=n_agents,
            centralised=False,
            share_params=True,
            depth=2,
            num_cells=hidden,
            activation_class=torch.nn.Tanh,
        ),
        NormalParamExtractor(),
    )
    module = TensorDictModule(policy_net, in_keys=[(GROUP, "observation")], out_keys=[(GROUP, "loc"), (GROUP, "scale")])
    low = action_spec.low.reshape(-1, n_act)[0]
    high = action_spec.high.reshape(-1, n_act)[0]
    policy = ProbabilisticActor(
        module,
        in_keys=[(GROUP, "loc"), (GROUP, "scale")],
        out_keys=[(GROUP, "action")],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": low, "high": high},
        return_log_prob=True,
    )
    critic_net = MultiAgentMLP(
        n_agent_inputs=n_obs,
        n_agent_outputs=1,
        n_agents=n_agents,
        centralised=True,
        share_params=True,
        depth=2,
        num_cells=hidden,
        activation_class=torch.nn.Tanh,
    )
    critic = TensorDictModule(critic_net, in_keys=[(GROUP, "observation")], out_keys=[(GROUP, "state_value")])
    return policy, critic


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=60)
    p.add_argument("--agents", type=int, default=3, help="navigation's n_agents")
    p.add_argument("--steps", type=int, default=100, help="steps per env and iteration (the episode length)")
    p.add_argument("--iterations", type=int, default=12)
    p.add_argument("--epochs", type=int, default=10, help="PPO passes over each batch")
    p.add_argument("--minibatch", type=int, default=400)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    env = gpu_envs.make(
        "vmas/navigation", num_envs=args.num_envs, max_episode_steps=args.steps, seed=args.seed, n_agents=args.agents
    )
    policy, critic = build(env, args.hidden)
    loss = ClipPPOLoss(policy, critic, clip_epsilon=0.2, entropy_coeff=1e-4, normalize_advantage=False)
    loss.set_keys(
        reward=(GROUP, "reward"),
        action=(GROUP, "action"),
        value=(GROUP, "state_value"),
        done=(GROUP, "done"),
        terminated=(GROUP, "terminated"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.9)
    optim = torch.optim.Adam(loss.parameters(), lr=args.lr)

    returns = []
    for i in range(args.iterations):
        with set_exploration_type(ExplorationType.RANDOM):  # sample actions (torchrl's collectors do this too)
            batch = collect(env, policy, steps=args.steps)  # [N, T]; each agent's keys under "agents"
        returns.append(float(batch["next", GROUP, "reward"].sum(1).mean()))  # per agent, per env, per batch
        with torch.no_grad():
            loss.value_estimator(
                batch, params=loss.critic_network_params, target_params=loss.target_critic_network_params
            )
        flat = batch.reshape(-1)
        for _ in range(args.epochs):
            for idx in torch.randperm(flat.shape[0]).split(args.minibatch):
                out = loss(flat[idx])
                total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                optim.zero_grad()
                total.backward()
                torch.nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
                optim.step()
        print(f"iteration {i:3d}  mean return per agent {returns[-1]:8.3f}")
    env.close()
    return {"returns": returns}


if __name__ == "__main__":
    main()
