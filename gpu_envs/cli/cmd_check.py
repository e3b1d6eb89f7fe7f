"""``gpu-envs check ENV``: validate an env (specs, determinism, final observations)."""

from __future__ import annotations

import argparse

from gpu_envs.cli.common import Subcommands, add_env_arguments, make_env


def add_parser(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "check",
        help="validate an env: specs vs data, determinism, final observations",
        description=(
            "Roll out NUM_ENVS copies of ENV_ID twice for STEPS steps with seeded random actions and "
            "check that every reset and step output lies inside its spec, that the two rollouts are "
            "identical, and that final observations are consistent (placeholders only on ended rows, "
            "no NaN elsewhere, final observations distinct from the post-reset ones, which look like "
            "fresh resets). Prints one line per check; exit code 0 if none failed, 1 otherwise."
        ),
    )
    add_env_arguments(parser, num_envs=16, steps=300, env_required=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpu_envs.env_checker import check_env

    with make_env(args) as env:
        report = check_env(env, steps=args.steps, seed=args.seed, name=args.env_id)
    print(report.format())
    return 0 if report.ok else 1
