"""``gpu-envs list``: the env ids each installed backend can make."""

from __future__ import annotations

import argparse

from gpu_envs.cli.common import Subcommands


def add_parser(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "list",
        help="print the env ids each installed backend can make",
        description="Print the env ids `make` accepts, per installed backend.",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import gpu_envs

    for backend, ids in gpu_envs.available_envs().items():
        print(f"{backend} ({len(ids)}):")
        for env_id in ids:
            print(f"  {env_id}")
    return 0
