"""The ``gpu-envs`` command line: roll out, validate, benchmark and list envs.

Examples::

    gpu-envs rollout                               # built-in CartPole-v1, 64 envs
    gpu-envs rollout Pendulum-v1 --num-envs 4096 --steps 200 --device cpu --seed 1
    gpu-envs check CartPole-v1 --backend gymnasium # specs, determinism, final observations
    gpu-envs bench --quick --only overhead --json results.json --plot bench.png
    gpu-envs list

Each subcommand lives in its own module (``cmd_rollout``, ``cmd_check``, ``cmd_bench``,
``cmd_list``) with an ``add_parser(subparsers)`` and a ``run(args) -> exit code``.
Errors raised on purpose (:class:`gpu_envs.GpuEnvsError`) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpu_envs.cli import cmd_bench, cmd_check, cmd_list, cmd_rollout

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="gpu-envs",
        description="Batched RL environments as TensorDicts on the learner's device.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (cmd_rollout, cmd_check, cmd_bench, cmd_list):
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpu-envs`` console script; returns the exit code."""
    from gpu_envs.errors import GpuEnvsError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except GpuEnvsError as err:
        print(f"gpu-envs: error: {err}", file=sys.stderr)
        return 2
