"""What the subcommands share: exit codes, and the arguments of those that build an env (``rollout``, ``check``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Protocol

DEFAULT_ENV = "CartPole-v1"
EXIT_ERROR = 1  # an unexpected failure
EXIT_USAGE = 2  # a user error: bad arguments, unknown env, missing library, unwritable path
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it


class Subcommands(Protocol):
    """What a subcommand module's ``add_parser(sub)`` uses of ``parser.add_subparsers()`` (argparse's action)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def add_env_arguments(parser: argparse.ArgumentParser, *, num_envs: int, steps: int, env_required: bool) -> None:
    """ENV_ID, --num-envs, --steps, --device, --seed and --backend."""
    if env_required:
        parser.add_argument("env_id", metavar="ENV_ID", help="env id, e.g. CartPole-v1 (`gpu-envs list` shows them)")
    else:
        parser.add_argument(
            "env_id",
            nargs="?",
            default=DEFAULT_ENV,
            metavar="ENV_ID",
            help=f"env id (default: {DEFAULT_ENV}, built in)",
        )
    parser.add_argument(
        "--num-envs", type=int, default=num_envs, metavar="N", help=f"number of parallel envs (default: {num_envs})"
    )
    parser.add_argument("--steps", type=int, default=steps, metavar="T", help=f"vector steps to run (default: {steps})")
    parser.add_argument(
        "--device",
        default=None,
        metavar="D",
        help="torch device, e.g. cpu or cuda:0 (default: cuda if available, else cpu)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="reset seed (default: 0)")
    parser.add_argument(
        "--backend", default="auto", metavar="B", help="backend: auto, torch, gymnasium, ... (default: auto)"
    )


def make_env(args: argparse.Namespace, **options: Any) -> Any:
    """``gpu_envs.make`` from the parsed arguments (and ``options``), refusing ``--steps < 1`` first.

    An id that a package registers on import (``MiniGrid-...``, ``mo-...``, ``ALE/...``:
    :data:`gpu_envs.factory.REGISTERING_PACKAGES`) gets that package imported first when
    it is installed, as a script's ``import minigrid`` would; a shell user cannot.
    """
    import importlib
    import importlib.util

    import gpu_envs
    from gpu_envs.factory import registering_package

    if args.steps < 1:
        raise gpu_envs.InvalidArgumentError(f"--steps must be >= 1, got {args.steps}.")
    if args.num_envs < 1:
        raise gpu_envs.InvalidArgumentError(f"--num-envs must be >= 1, got {args.num_envs}.")
    known = registering_package(args.env_id)
    if known is not None and importlib.util.find_spec(known[0]) is not None:
        importlib.import_module(known[0])
    return gpu_envs.make(
        args.env_id,
        num_envs=args.num_envs,
        device=args.device,
        backend=args.backend,
        seed=args.seed,
        distributed=getattr(args, "distributed", False),
        **options,
    )


def check_output_path(path: str | None, option: str, suffixes: tuple[str, ...] = ()) -> None:
    """Refuse an output path that cannot be written, before any benchmark runs."""
    from gpu_envs.contract.errors import InvalidArgumentError

    if path is None:
        return
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise InvalidArgumentError(
            f"{option} {path} is a directory; give a file name, e.g. {option} {target / 'bench'}{suffixes[0] if suffixes else '.json'}."
        )
    if suffixes and target.suffix.lower() not in suffixes:
        raise InvalidArgumentError(
            f"{option} {path}: the picture's type comes from its suffix; use one of {', '.join(suffixes)}."
        )
    if not parent.is_dir():
        raise InvalidArgumentError(f"{option} {path}: the folder {parent} does not exist; create it first.")
    # a real write, not os.access (which says yes to root, and knows nothing of /proc or a
    # read-only filesystem); a file that was not there is removed again
    existed = target.exists()
    try:
        with open(target, "ab"):
            pass
    except OSError as err:
        raise InvalidArgumentError(
            f"{option} {path} cannot be written ({err.strerror}); choose another path."
        ) from None
    if not existed:
        target.unlink()
