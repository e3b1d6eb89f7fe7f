"""The ``gpu-envs`` command line: roll out an env, list env ids.

Examples::

    gpu-envs rollout                               # built-in CartPole-v1, 64 envs
    gpu-envs rollout Pendulum-v1 --num-envs 4096 --steps 200 --device cpu --seed 1
    gpu-envs list
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import torch

DEFAULT_ENV = "CartPole-v1"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-envs",
        description="Batched RL environments as TensorDicts on the learner's device.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    roll = sub.add_parser(
        "rollout",
        help="roll out an env with random actions and print a summary",
        description=(
            "Roll out NUM_ENVS copies of ENV_ID for STEPS steps with random actions, showing a "
            "progress bar, then print a summary: env-steps/s, episodes finished, mean episode "
            "return and length."
        ),
    )
    roll.add_argument("env_id", nargs="?", default=DEFAULT_ENV, metavar="ENV_ID", help=f"env id (default: {DEFAULT_ENV}, built in)")
    roll.add_argument("--num-envs", type=int, default=64, metavar="N", help="number of parallel envs (default: 64)")
    roll.add_argument("--steps", type=int, default=1000, metavar="T", help="vector steps to run (default: 1000)")
    roll.add_argument("--device", default=None, metavar="D", help="torch device, e.g. cpu or cuda:0 (default: cuda if available, else cpu)")
    roll.add_argument("--seed", type=int, default=0, metavar="S", help="reset seed (default: 0)")
    roll.add_argument("--backend", default="auto", metavar="B", help="backend: auto, torch, gymnasium, ... (default: auto)")
    roll.set_defaults(func=run_rollout)

    lst = sub.add_parser("list", help="print the env ids each installed backend can make", description="Print the env ids `make` accepts, per installed backend.")
    lst.set_defaults(func=run_list)
    return parser


def run_rollout(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    import gpu_envs

    if args.steps < 1:
        raise gpu_envs.InvalidArgumentError(f"--steps must be >= 1, got {args.steps}.")
    console = Console(stderr=False)
    env = gpu_envs.make(args.env_id, num_envs=args.num_envs, device=args.device, backend=args.backend, seed=args.seed)
    with env:
        stats = _EpisodeTally(env.num_envs, env.device)
        td = env.reset()
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        start = time.perf_counter()
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task(f"{args.env_id} x{env.num_envs}", total=args.steps)
            for i in range(args.steps):
                td.set("action", env.action_spec.rand(env.batch_size, generator=env.generator))
                td, root = env.step_and_maybe_reset(td)
                stats.update(td["next", "reward"], td["next", "done"])
                td = root
                if i % 16 == 15 or i == args.steps - 1:
                    progress.update(task, completed=i + 1)
        if env.device.type == "cuda":
            torch.cuda.synchronize(env.device)
        elapsed = time.perf_counter() - start
    table = Table(title=f"gpu-envs rollout: {args.env_id} on {env.device}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    episodes, mean_return, mean_length = stats.summary()
    table.add_row("backend", env.backend.describe())
    table.add_row("envs x steps", f"{env.num_envs} x {args.steps}")
    table.add_row("env-steps/s", f"{env.num_envs * args.steps / elapsed:,.0f}")
    table.add_row("episodes finished", f"{episodes}")
    table.add_row("mean episode return", "n/a" if episodes == 0 else f"{mean_return:.2f}")
    table.add_row("mean episode length", "n/a" if episodes == 0 else f"{mean_length:.1f}")
    console.print(table)
    return 0


class _EpisodeTally:
    """Running episode return/length per env, summed on the device (no per-step sync)."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.ret = torch.zeros(num_envs, 1, device=device)
        self.len = torch.zeros(num_envs, 1, device=device)
        self.count = torch.zeros((), device=device)
        self.ret_sum = torch.zeros((), device=device)
        self.len_sum = torch.zeros((), device=device)

    def update(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        self.ret += reward
        self.len += 1
        d = done.to(self.ret.dtype)
        self.count += d.sum()
        self.ret_sum += (self.ret * d).sum()
        self.len_sum += (self.len * d).sum()
        self.ret *= 1 - d
        self.len *= 1 - d

    def summary(self) -> tuple[int, float, float]:
        n = int(self.count.item())
        if n == 0:
            return 0, float("nan"), float("nan")
        return n, self.ret_sum.item() / n, self.len_sum.item() / n


def run_list(args: argparse.Namespace) -> int:
    import gpu_envs

    for backend, ids in gpu_envs.available_envs().items():
        print(f"{backend} ({len(ids)}):")
        for env_id in ids:
            print(f"  {env_id}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpu-envs`` console script."""
    from gpu_envs.errors import GpuEnvsError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except GpuEnvsError as err:
        print(f"gpu-envs: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
