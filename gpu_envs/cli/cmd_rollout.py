"""``gpu-envs rollout``: random-action collection with a progress bar and an episode summary.

The env is wrapped in :class:`~gpu_envs.transforms.EpisodeStats` and stepped with
:func:`gpu_envs.rollout.advance` in chunks of up to :data:`CHUNK` steps (episodes carry
over between chunks; no transition is kept, so memory is O(N) whatever ``--steps`` is:
the summary needs only the per-env counters). The progress bar moves between chunks;
the episode summary is read (one sync) at the end.

Under torchrun with ``--distributed`` every process rolls out its own shard of
``--num-envs`` envs (:mod:`gpu_envs.distributed`); the episode statistics are merged at
the end and rank 0 alone shows the progress bar and prints the job's global summary::

    torchrun --standalone --nproc_per_node=2 -m gpu_envs.cli rollout --distributed

Ctrl-C stops the rollout: the summary of the chunks completed so far is printed and
the exit status is 130 (under torchrun, each interrupted rank prints its own shard's:
the collectives that merge them would need every rank).

``--record out.mp4`` films env 0's first whole episode (first frame to the true final
one) with :class:`~gpu_envs.transforms.RecordEpisodes`: the built-in envs' torch
renderer, or an env's image observation. It needs the video extra
(``pip install '.[video]'`` in the gpu_envs clone); ``--record-every M`` films episodes 0, M, 2M, ...
of env 0 instead, as ``out-episode{e}.mp4``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

import torch

from gpu_envs.cli.common import EXIT_INTERRUPTED, Subcommands, add_env_arguments, check_output_path, make_env

if TYPE_CHECKING:
    from gpu_envs.transforms import RecordEpisodes

CHUNK = 32  # steps per advance() call: one progress update per chunk


def add_parser(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "rollout",
        help="roll out an env with random actions and print a summary",
        description=(
            "Roll out NUM_ENVS copies of ENV_ID for STEPS steps with random actions, showing a "
            "progress bar, then print a summary: env-steps/s, episodes finished, mean episode "
            "return and length. No transition is kept (memory grows with NUM_ENVS, not STEPS)."
        ),
    )
    add_env_arguments(parser, num_envs=64, steps=1000, env_required=False)
    parser.add_argument(
        "--record",
        metavar="OUT.mp4",
        default=None,
        help="film env 0's first whole episode into this mp4 (needs: pip install '.[video]' in the gpu_envs clone)",
    )
    parser.add_argument(
        "--record-every",
        type=int,
        metavar="M",
        default=None,
        help="with --record: film episodes 0, M, 2M, ... of env 0 (files OUT-episode{e}.mp4)",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="under torchrun: each process rolls out its own shard of NUM_ENVS envs; rank 0 prints the global summary",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from gpu_envs import distributed
    from gpu_envs.rollout import advance
    from gpu_envs.transforms import EpisodeStats, ScalarizeReward, TransformedEnv

    console = Console()
    stats = EpisodeStats()
    interrupted = False
    check_record_args(args)
    recorder = None
    try:
        base = make_env(args)
        if args.record is not None and _needs_pixels(base):  # a gymnasium env: film its rgb_array render
            base.close()
            base = make_env(args, from_pixels=True, pixels_only=False)
        recorder = _recorder(args, base)
        objectives = _objectives(base)  # a multi-objective env: the summary's return sums its K objectives
        scalarize = [ScalarizeReward([1.0] * objectives)] if objectives > 1 else []
        with TransformedEnv(base, *scalarize, stats, *([recorder] if recorder else [])) as env:
            main = env.rank == 0
            env.reset()
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            start = time.perf_counter()
            done = 0
            if main:
                print(
                    f"rolling out {env.num_envs} x {args.steps} steps of {args.env_id} on {env.device} "
                    "(Ctrl-C stops and prints the summary so far)",
                    file=sys.stderr,
                    flush=True,
                )
            with Progress(*columns, console=console, transient=False, disable=not main) as progress:
                label = f"{args.env_id} x{env.num_envs}" + (f" x{env.world_size} ranks" if env.world_size > 1 else "")
                task = progress.add_task(label, total=args.steps)
                try:
                    while done < args.steps:
                        size = min(CHUNK, args.steps - done)
                        advance(env, size)  # episodes carry over; no transition is kept (O(N) memory)
                        done += size
                        progress.update(task, completed=done)
                except KeyboardInterrupt:  # Ctrl-C: report the chunks completed so far
                    interrupted = True
            if env.device.type == "cuda":
                torch.cuda.synchronize(env.device)
            elapsed = time.perf_counter() - start
            # the collectives need every rank: an interrupted rank reports its own shard only
            ranks = 1 if interrupted else env.world_size
            if not interrupted:
                elapsed = distributed.all_max(elapsed)  # the job is as slow as its slowest rank
                distributed.sync_stats(stats)  # every rank's episodes, on every rank
            summary = stats.summary()
            title = f"gpu-envs rollout: {args.env_id} on {env.device}"
            if interrupted:
                title += (
                    f" (interrupted after {done} of {args.steps} steps{', this rank' if env.world_size > 1 else ''})"
                )
            table = Table(title=title)
            table.add_column("metric")
            table.add_column("value", justify="right")
            table.add_row("backend", env.backend.describe())
            if ranks > 1:
                table.add_row("processes (ranks)", f"{ranks}")
            total_envs = env.num_envs * ranks
            table.add_row("envs x steps", f"{total_envs} x {done}")
            table.add_row("env-steps/s", "n/a" if done == 0 else f"{total_envs * done / elapsed:,.0f}")
            table.add_row("episodes finished", f"{summary.episodes}")
            what = "mean episode return" + (f" (sum of {objectives} objectives)" if objectives > 1 else "")
            table.add_row(what, "n/a" if summary.episodes == 0 else f"{summary.mean_return:.2f}")
            table.add_row("mean episode length", "n/a" if summary.episodes == 0 else f"{summary.mean_length:.1f}")
        if main or interrupted:
            console.print(table)
        if recorder is not None:
            videos, recorder = recorder.close(), None
            _report_videos(videos, args, file=sys.stderr)
    finally:
        if recorder is not None:  # an error or Ctrl-C before the end: no half-written video left
            recorder.close()
        distributed.shutdown()
    return EXIT_INTERRUPTED if interrupted else 0


def check_record_args(args: argparse.Namespace) -> None:
    """Refuse a bad ``--record``/``--record-every`` before anything is built."""
    from gpu_envs.contract.errors import InvalidArgumentError

    if args.record is None:
        if args.record_every is not None:
            raise InvalidArgumentError("--record-every needs --record OUT.mp4.")
        return
    if not args.record.endswith(".mp4"):
        raise InvalidArgumentError(f"--record {args.record}: the video is an mp4; give a path ending in .mp4.")
    if args.record_every is not None and args.record_every < 1:
        raise InvalidArgumentError(f"--record-every must be >= 1, got {args.record_every}.")
    check_output_path(args.record, "--record", (".mp4",))
    from gpu_envs.utils.video import require_av

    require_av()


def _objectives(env: Any) -> int:
    """How many objectives the env's reward has (1 for a scalar reward ``[N, 1]``)."""
    shape = tuple(env.single_reward_spec.shape)
    return shape[-1] if shape else 1


def _needs_pixels(env: Any) -> bool:
    """A gymnasium-backend env without frames to film: rebuilt with its ``rgb_array`` render as ``"pixels"``."""
    backend = getattr(env, "backend", None)
    drawn = callable(getattr(getattr(backend, "env", None), "render_observations", None))
    return getattr(backend, "name", None) == "gymnasium" and not drawn and "pixels" not in env.single_observation_spec


def _recorder(args: argparse.Namespace, env: Any) -> RecordEpisodes | None:
    """The RecordEpisodes of ``--record`` (rank 0 only, under torchrun)."""
    if args.record is None or getattr(env, "rank", 0) != 0:
        return None
    from gpu_envs.transforms import RecordEpisodes

    render: dict[str, Any] = {"render": "pixels"} if "pixels" in env.single_observation_spec else {}
    if args.record_every is None:
        return RecordEpisodes.for_env(env, args.record, rows=[0], max_videos=1, **render)
    path = args.record[: -len(".mp4")] + "-episode{episode}.mp4"
    return RecordEpisodes.for_env(env, path, rows=[0], every=args.record_every, **render)


def _report_videos(videos: list, args: argparse.Namespace, file: TextIO) -> None:
    if videos:
        shown = ", ".join(str(v) for v in videos[:5]) + (f" (+{len(videos) - 5} more)" if len(videos) > 5 else "")
        print(f"recorded {len(videos)} episode(s) of env 0: {shown}", file=file)
    else:
        print(
            f"no episode of env 0 ended within {args.steps} steps: nothing recorded (run more --steps)",
            file=file,
        )
