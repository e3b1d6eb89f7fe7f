"""Reset to chosen states: snapshot interesting rows, keep stepping, restore them later into other rows.

A curriculum in a few lines: run CartPole with a random policy, snapshot the rows whose
pole leans the most (the hard states), keep training-style stepping, then restore those
snapshots into OTHER rows -- every copy continues exactly as the original row did from
that moment (same physics, same step count toward the time limit, same reset draws when
its episode ends), which this example checks by replaying the same actions.

``env.get_state(rows)`` returns a TensorDict ``[len(rows)]``; ``env.set_state(state,
rows)`` writes it into ``rows`` (``state[i]`` picks snapshot rows, so one snapshot row
can be copied into many rows: ``env.set_state(state[[0, 0, 0]], rows=[4, 5, 6])``).

Run::

    python examples/reset_to_state.py
    python examples/reset_to_state.py --env Pendulum-v1 --num-envs 64
"""

from __future__ import annotations

import argparse

import torch

import gpu_envs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1", choices=["CartPole-v1", "Pendulum-v1"])
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--hard", type=int, default=3, help="rows to snapshot (the most tilted poles)")
    p.add_argument("--steps", type=int, default=40, help="steps replayed after each restore")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def steps(env, actions: list) -> torch.Tensor:
    """Step with ``actions`` from the current root; returns the next observations ``[T, N, ...]``."""
    td, out = env.root(), []
    for action in actions:
        td["action"] = action
        td, root = env.step_and_maybe_reset(td)
        out.append(td["next", "observation"])
        td = root
    return torch.stack(out)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    env = gpu_envs.make(args.env, num_envs=args.num_envs, seed=args.seed)
    gen = torch.Generator(device=env.device).manual_seed(args.seed)
    env.reset(seed=args.seed)
    steps(env, [env.action_spec.rand(generator=gen) for _ in range(25)])

    # 1. the interesting rows: the largest pole angle (CartPole's theta, Pendulum's |sin th|)
    obs = env.root()["observation"]
    lean = obs[:, 2].abs() if args.env == "CartPole-v1" else obs[:, 1].abs()
    hard = lean.topk(args.hard).indices.sort().values
    snapshot = env.get_state(hard)  # TensorDict [hard]: simulator state, step counts, random streams, observations
    print(f"snapshot rows {hard.tolist()} (lean {lean[hard].tolist()})")

    # 2. what those rows do from here, under some actions
    actions = [env.action_spec.rand(generator=gen) for _ in range(args.steps)]
    original = steps(env, actions)

    # 3. keep stepping: the batch moves on
    steps(env, [env.action_spec.rand(generator=gen) for _ in range(50)])

    # 4. restore the hard states into OTHER rows (the last ones), and replay the same actions there
    targets = torch.arange(args.num_envs - args.hard, args.num_envs, device=env.device)
    env.set_state(snapshot, rows=targets)
    source = torch.arange(args.num_envs, device=env.device)
    source[targets] = hard
    replay = steps(env, [a[source] for a in actions])
    exact = torch.equal(replay[:, targets], original[:, hard])
    print(
        f"restored into rows {targets.tolist()}: continuation identical to the originals' over {args.steps} steps: {exact}"
    )
    env.close()
    return {"rows": hard.tolist(), "targets": targets.tolist(), "exact": exact}


if __name__ == "__main__":
    main()
