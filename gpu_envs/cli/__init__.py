"""The ``gpu-envs`` command line: roll out, validate, benchmark and list envs.

Examples::

    gpu-envs rollout                               # built-in CartPole-v1, 64 envs
    gpu-envs rollout Pendulum-v1 --num-envs 4096 --steps 200 --device cpu --seed 1
    gpu-envs check CartPole-v1 --backend gymnasium # specs, determinism, final observations
    gpu-envs bench --quick --only overhead --json results.json --plot bench.png
    gpu-envs list

Each subcommand lives in its own module (``cmd_rollout``, ``cmd_check``, ``cmd_bench``,
``cmd_list``) with an ``add_parser(subparsers)`` and a ``run(args) -> exit code``.

Exit codes and errors: a user error (a bad argument, an unknown env id, a missing
library, an output path that cannot be written: any :class:`gpu_envs.GpuEnvsError`,
argument-parsing error, gymnasium ``DependencyNotInstalled`` or ``ModuleNotFoundError``)
is ONE line on stderr and exit status 2; an unexpected failure
is one line and exit status 1; ``--debug`` (before or after the subcommand) shows the
traceback instead. Ctrl-C during ``rollout`` or ``bench`` prints what was measured so far
and exits 130, as shells expect.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from gpu_envs.cli import cmd_bench, cmd_check, cmd_list, cmd_rollout
from gpu_envs.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_USAGE", "build_parser", "main"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the fix (``--help``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _add_debug(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--debug", action="store_true", default=default, help="show the full traceback of an error instead of one line"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = OneLineParser(
        prog="gpu-envs",
        description="Batched RL environments as TensorDicts on the learner's device.",
    )
    _add_debug(parser, False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for module in (cmd_rollout, cmd_check, cmd_bench, cmd_list):
        module.add_parser(sub)
    for command in sub.choices.values():  # also after the subcommand; SUPPRESS keeps a --debug given before it
        _add_debug(command, argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpu-envs`` console script; returns the exit code."""
    from gpu_envs.contract.errors import GpuEnvsError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except GpuEnvsError as err:
        if args.debug:
            raise
        print(f"gpu-envs: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("gpu-envs: interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:
        if args.debug:
            raise
        missing = _missing_library(err)
        if missing:
            print(f"gpu-envs: error: {missing}", file=sys.stderr)
            return EXIT_USAGE
        print(
            f"gpu-envs: unexpected error: {type(err).__name__}: {_one_line(err)} (run again with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR


def _missing_library(err: Exception) -> str | None:
    """The one-line message of an error that says a library is not installed (a user error), else None.

    ``make`` turns the missing packages it sees into ``MissingComponentError`` already;
    this catches the rest: gymnasium's ``DependencyNotInstalled`` (an id whose entry
    point needs Box2D or MuJoCo) and a ``ModuleNotFoundError`` from an env's own imports.
    """
    from gymnasium.error import DependencyNotInstalled

    from gpu_envs.registry import install_hint

    if isinstance(err, DependencyNotInstalled):
        return f"a library this env needs is not installed: {_one_line(err)}"
    if isinstance(err, ModuleNotFoundError) and err.name:
        name = err.name.split(".")[0]
        return f"the Python package {name!r} is not installed: {install_hint(name)}"
    return None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())
