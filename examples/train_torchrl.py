"""torchrl's own PPO (Collector, GAE, ClipPPOLoss) on a gpu_envs env: the only gpu_envs line is ``to_torchrl``.

torchrl's GAE bootstraps truncated episodes from ``("next", "observation")``, which
``to_torchrl`` fills with the TRUE final observation (the post-reset one goes to the
next root), so time-outs are valued correctly.

Run::

    python examples/train_torchrl.py                      # CartPole-v1, ~200k env-steps
    python examples/train_torchrl.py --device cuda --num-envs 1024
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector
from torchrl.modules import MLP, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

import gpu_envs
from gpu_envs.interop import to_torchrl


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--steps", type=int, default=64, help="steps per env and batch")
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    env = to_torchrl(gpu_envs.make("CartPole-v1", num_envs=args.num_envs, device=args.device, seed=args.seed))
    n_obs = env.observation_spec["observation"].shape[-1]
    logits = TensorDictModule(MLP(n_obs, 2, num_cells=[64, 64]), in_keys=["observation"], out_keys=["logits"])
    actor = ProbabilisticActor(
        logits,
        ["logits"],
        spec=env.action_spec,
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    ).to(args.device)
    value = ValueOperator(MLP(n_obs, 1, num_cells=[64, 64]), in_keys=["observation"]).to(args.device)
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=value)
    loss = ClipPPOLoss(actor, value, entropy_coeff=0.01)
    optim = torch.optim.Adam(loss.parameters(), lr=2.5e-3)

    frames = args.num_envs * args.steps
    collector = Collector(
        env, actor, frames_per_batch=frames, total_frames=frames * args.batches, auto_register_policy_transforms=False
    )
    lengths, running = [], torch.zeros(args.num_envs, dtype=torch.long, device=args.device)
    for i, batch in enumerate(collector):
        lengths.append(mean_episode_length(batch["next", "done"].squeeze(-1), running))
        for _ in range(4):
            with torch.no_grad():
                advantage(batch)
            for minibatch in batch.reshape(-1).split(frames // 4):
                losses = loss(minibatch)
                total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                optim.zero_grad()
                total.backward()
                torch.nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
                optim.step()
        collector.update_policy_weights_()
        if i % 10 == 0:
            print(f"batch {i:4d}  mean episode length {lengths[-1]:7.1f}")
    collector.shutdown()
    return {"lengths": lengths}


def mean_episode_length(done: torch.Tensor, running: torch.Tensor) -> float:
    """The mean length of the episodes that ended in a ``[N, T]`` batch of done flags.

    ``running`` holds each env's steps into its current episode, carried from batch to
    batch (updated in place). Where no episode ended, the mean of the running lengths: a
    lower bound, never above the time limit (frames / episodes once reported 2048 for
    CartPole, whose episodes stop at 500).
    """
    ended = []
    for t in range(done.shape[1]):
        running += 1
        ended.append(running[done[:, t]].clone())
        running.masked_fill_(done[:, t], 0)
    finished = torch.cat(ended)
    return float((finished if finished.numel() else running).float().mean())


if __name__ == "__main__":
    main()
