"""Shared timing helpers for the benchmarks: interleaved runs, medians, a table, JSON.

These machines are shared and noisy, so absolute times are unstable; every benchmark
measures its contenders side by side in ONE process, interleaving short rounds (A, B,
C, A, B, C, ...) and comparing medians, and reports ratios. Time is the CPU time of
the calling thread (``time.thread_time``), so other processes on the machine do not
count; with ``torch.set_num_threads(1)`` that is all the work torch does on the CPU.
On CUDA, where the work is the device's, wall time around a synchronise is used.

Example::

    results = interleave({"raw": raw_step, "gpu_envs": wrapped_step}, steps=200, rounds=15)
    print_table("N=64", results, baseline="raw")
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch


def sync(device: torch.device | None) -> None:
    """Wait for ``device``'s queued work (CUDA); nothing to wait for elsewhere."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def memory_bytes(device: torch.device) -> int:
    """What a leak would grow: CUDA's allocated bytes on a GPU (after a sync), else this process's RSS."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.memory_stats(device)["allocated_bytes.all.current"]
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def clock(device: torch.device | None = None) -> Callable[[], float]:
    """The clock for ``device``: thread CPU time, or wall time on CUDA (device work)."""
    return time.perf_counter if device is not None and device.type == "cuda" else time.thread_time


def interleave(
    contenders: dict[str, Callable[[], object]],
    steps: int,
    rounds: int,
    warmup: int = 2,
    device: torch.device | None = None,
    timer: Callable[[], float] | None = None,
) -> dict[str, float]:
    """Median seconds per call of each contender, measured in interleaved rounds.

    ``timer`` replaces :func:`clock`'s choice: ``time.process_time`` counts the CPU time
    of every thread of the process, so a contender that steps its envs in worker threads
    (EnvPool) is charged for them, as the calling thread's own time would not.
    """
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    now = timer or clock(device)
    for r in range(warmup + rounds):
        for name, fn in contenders.items():
            sync(device)
            start = now()
            for _ in range(steps):
                fn()
            sync(device)
            if r >= warmup:
                samples[name].append((now() - start) / steps)
    return {name: statistics.median(values) for name, values in samples.items()}


def overhead_row(times: dict[str, float], **leading: object) -> dict:
    """A step table's row: ``leading`` entries, each contender's ``<name>_us`` and its ``<name>_overhead`` over ``raw``.

    With a ``floor`` contender, also ``gpu_envs_vs_floor``: gpu_envs' distance to it, in points of the raw step.
    """
    row: dict = dict(leading)
    for name, seconds in times.items():
        row[f"{name}_us"] = round(seconds * 1e6, 1)
        if name != "raw":
            row[f"{name}_overhead"] = f"{seconds / times['raw'] - 1:+.1%}"
    if "floor" in times:
        row["gpu_envs_vs_floor"] = f"{(times['gpu_envs'] - times['floor']) / times['raw'] * 100:+.1f} pts"
    return row


def format_table(title: str, rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """A plain-text table; ``columns`` is a list of (key, header)."""
    cells = [[str(row.get(key, "")) for key, _ in columns] for row in rows]
    widths = [max(len(header), *(len(c[i]) for c in cells)) for i, (_, header) in enumerate(columns)]
    line = "  ".join(header.ljust(w) for (_, header), w in zip(columns, widths, strict=True))
    out = [title, line, "-" * len(line)]
    out += ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)) for cell in cells]
    return "\n".join(out)


def bench_result(title: str, rows: list[dict], columns: list[tuple[str, str]]) -> dict:
    """The ``run(quick)`` result of a benchmark: its rows and the columns they fill."""
    return {"title": title, "rows": rows, "columns": [c for c in columns if any(c[0] in r for r in rows)]}


def sizes_main(doc: str, run: Callable[..., dict], name: str, sizes: list[int]) -> None:
    """The command line of a benchmark timed at several N (``--sizes --steps --rounds --quick --json``).

    ``run(quick, sizes, steps, rounds)`` gives the table, printed and saved as ``name``.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=sizes)
    parser.add_argument("--steps", type=int, default=None, help="steps per round (default: by N)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 15)")
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    result = run(args.quick, tuple(args.sizes), args.steps, args.rounds)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": name, "device": "cpu", "rows": result["rows"]})


def save_json(path: str | Path | None, payload: dict) -> None:
    """Write the raw numbers (and machine facts) as JSON where asked."""
    if path is None:
        return
    payload = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        **payload,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2))
