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
import contextlib
import gc
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def env_var(name: str, value: str | None) -> Iterator[None]:
    """Inside, the environment variable ``name`` is ``value`` (None: unset); the old value comes back after.

    with env_var("GPU_ENVS_NATIVE", "0"):
        env = gpu_envs.make("CartPole-v1", num_envs=8)   # the pure-torch step
    """
    before = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Inside, the objects alive on entry are out of the garbage collector's reach (``gc.freeze``).

    With torch, tensordict and torchrl imported, a full collection walks about a million
    objects. It then lands in whichever contender's round happens to trigger it, and moves
    that round by tens of microseconds per step. Frozen, a collection walks only what the
    rounds themselves allocate. That is the cost each contender's own allocations cause, which
    stays in the timing. ``gc`` stays enabled.

        with frozen_heap():
            per_round = interleave_clocks(...)
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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

    With a ``floor`` contender (or another ``<name>_floor``), also ``gpu_envs_vs_floor``
    (``gpu_envs_vs_<name>_floor``): gpu_envs' distance to it, in points of the raw step.
    """
    row: dict = dict(leading)
    for name, seconds in times.items():
        row[f"{name}_us"] = round(seconds * 1e6, 1)
        if name != "raw":
            row[f"{name}_overhead"] = f"{seconds / times['raw'] - 1:+.1%}"
    for name in times:
        if name == "floor" or name.endswith("_floor"):
            row[f"gpu_envs_vs_{name}"] = f"{(times['gpu_envs'] - times[name]) / times['raw'] * 100:+.1f} pts"
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


def interleave_clocks(
    contenders: dict[str, Callable[[], object]],
    steps: int,
    rounds: int,
    clocks: dict[str, Callable[[], float]],
    warmup: int = 1,
    device: torch.device | None = None,
    setups: dict[str, Callable[[], object]] | None = None,
    alternate: bool = False,
) -> dict[str, dict[str, list[float]]]:
    """Seconds per call of each contender in every round, on every clock: ``{clock: {contender: [per round]}}``.

    Like :func:`interleave`, but it keeps each round's sample (for a spread, and for ratios
    paired round by round: contenders of one round ran seconds apart, under the same load)
    and reads several clocks around the same calls -- e.g. ``time.process_time`` (every
    thread: a simulator's workers too), ``time.thread_time`` (the calling thread: where a
    wrapper's own Python runs) and ``time.perf_counter`` (wall). A CUDA ``device`` is
    synchronised around each round, as :func:`interleave` does. ``setups[name]``, where
    given, runs untimed before each of that contender's rounds (contenders that are one
    object in different settings). ``alternate`` runs every other round in reverse order, so
    no contender always follows the same one (a paired difference then carries no order bias).

        samples = interleave_clocks({"raw": raw, "gpu_envs": ours}, 20, 15, {"cpu": time.process_time})
        paired_ratios(samples["cpu"], "gpu_envs")  # one gpu_envs/raw ratio per round
    """
    samples: dict[str, dict[str, list[float]]] = {c: {name: [] for name in contenders} for c in clocks}
    readers = list(clocks.items())
    for r in range(warmup + rounds):
        items = list(contenders.items())
        for name, fn in reversed(items) if alternate and r % 2 else items:
            if setups is not None and name in setups:
                setups[name]()
            sync(device)
            start = [read() for _, read in readers]
            for _ in range(steps):
                fn()
            sync(device)
            end = [read() for _, read in readers]
            if r >= warmup:
                for (clock, _), a, b in zip(readers, start, end, strict=True):
                    samples[clock][name].append((b - a) / steps)
    return samples


def paired_ratios(per_round: dict[str, list[float]], name: str, baseline: str = "raw") -> list[float]:
    """``name``'s time over ``baseline``'s, round by round (both from :func:`interleave_clocks`)."""
    return [a / b for a, b in zip(per_round[name], per_round[baseline], strict=True)]


def median_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval of the median: the order statistics ``x(k)..x(n+1-k)``.

    The true median lies below ``x(k)`` only when fewer than ``k`` samples fall below it, a
    Binomial(n, 1/2) tail: ``k`` is the largest with both tails within ``1 - confidence``
    together (n = 15 rounds: the 4th to the 12th smallest, 96%). Too few samples for the
    confidence (n < 6 at 95%) give the whole range.
    """
    ordered, n = sorted(values), len(values)
    k, tail = 0, 0.0
    while k < n // 2:
        nxt = tail + math.comb(n, k) / 2**n  # P(fewer than k + 1 samples below the median)
        if 2 * nxt > 1 - confidence:
            break
        k, tail = k + 1, nxt
    k = max(k, 1)
    return ordered[k - 1], ordered[n - k]


def verdict(values: list[float], limit: float, confidence: float = 0.95) -> str:
    """``met`` when the median of ``values`` is within ``limit`` with ``confidence`` (:func:`median_ci`'s upper
    end is), ``not met`` when it is above it (the lower end is), else ``unresolved``: run longer."""
    if len(values) < 6:
        return "unresolved (< 6 rounds)"
    low, high = median_ci(values, confidence)
    return "met" if high <= limit else "not met" if low > limit else "unresolved"


def spread(values: list[float], fmt: str = "{:+.1%}", shift: float = -1.0) -> str:
    """``median [95% CI of the median] (min..max)`` of ``values`` (each shifted by ``shift``: ratios as overheads)."""
    low, high = median_ci(values)
    f = lambda v: fmt.format(v + shift)  # noqa: E731
    return f"{f(statistics.median(values))} [{f(low)}..{f(high)}] ({f(min(values))}..{f(max(values))})"


def spread_columns(
    samples: dict[str, dict[str, list[float]]],
    limit: float,
    names: tuple[str, ...] = ("gpu_envs",),
    cpu: str = "cpu",
    thread: str | None = "thread",
    wall: str | None = "wall",
) -> dict:
    """A step row's columns that say whether a difference is resolved, from :func:`interleave_clocks`' samples.

    For each contender of ``names`` (against ``raw``, round by round): ``<name>_spread`` (its
    overhead on the ``cpu`` clock as ``median [95% CI of the median] (min..max)``, :func:`spread`), ``<name>_thread_pts``
    (what it adds on the calling thread, in % of the raw step's ``cpu`` time: a wrapper's own
    Python runs there, a simulator's worker threads do not) and ``<name>_wall``; for the first
    name a ``verdict`` (and ``thread_verdict``) against ``limit`` (:func:`verdict`: met / not met /
    unresolved, from the CI), e.g. ``limit=1.05`` for +5%; with a ``floor`` contender, ``<first name>_floor_pts``:
    its distance to the floor per round, in % of that round's raw step.
    """
    row: dict = {}
    raw_cpu = samples[cpu]["raw"]
    for i, name in enumerate(names):
        if name not in samples[cpu]:
            continue
        ratios = paired_ratios(samples[cpu], name)
        row[f"{name}_spread"] = spread(ratios)
        if i == 0:
            row["verdict"] = verdict(ratios, limit)
        if thread is not None:
            own, base = samples[thread][name], samples[thread]["raw"]
            pts = [1 + (a - b) / c for a, b, c in zip(own, base, raw_cpu, strict=True)]
            row[f"{name}_thread_pts"] = spread(pts)
            if i == 0:
                row["thread_verdict"] = verdict(pts, limit)
        if wall is not None:
            row[f"{name}_wall"] = spread(paired_ratios(samples[wall], name))
    if "floor" in samples[cpu] and names and names[0] != "floor":
        # the first contender's distance to the floor, round by round, in points of that round's raw step
        first, floor = samples[cpu][names[0]], samples[cpu]["floor"]
        row[f"{names[0]}_floor_pts"] = spread(
            [(a - b) / c for a, b, c in zip(first, floor, raw_cpu, strict=True)], fmt="{:+.1%}", shift=0.0
        )
    return row


def per_round_us(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, list[float]]]:
    """:func:`interleave_clocks`' samples in microseconds per step, rounded: for a row's JSON."""
    return {c: {name: [round(v * 1e6, 1) for v in values] for name, values in by.items()} for c, by in samples.items()}


def load_average() -> str:
    """The machine's 1-minute load average (``uptime``'s first number), to print with a table."""
    return f"{os.getloadavg()[0]:.2f}"


CLOCKS = {"cpu": time.process_time, "thread": time.thread_time, "wall": time.perf_counter}
"""The clocks of :func:`interleave_clocks` in the simulator benchmarks: process CPU, calling thread, wall."""


def medians(per_round: dict[str, list[float]]) -> dict[str, float]:
    """Each contender's median over rounds (what :func:`interleave` returns)."""
    return {name: statistics.median(values) for name, values in per_round.items()}


class CallClock:
    """A clock for :func:`interleave_clocks` that advances only inside some methods: the simulator's calls.

    ``instrument(obj, "step", "reset")`` replaces those methods ON THAT OBJECT with timed
    calls (calling-thread CPU time, the outermost call only). A contender's time on this
    clock is what it spent inside the simulator; its thread time minus that is its OWN
    cost -- the wrapper's Python around the simulator, measured without the simulator's
    noise (``own_columns``). Contenders that must not pay the timing keep the originals.

        inside = CallClock()
        raw_step = pool.step            # the original, for the raw contender
        inside.instrument(pool, "step", "reset")
        samples = interleave_clocks(contenders, 20, 15, {**CLOCKS, "inside": inside})
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._depth = 0

    def __call__(self) -> float:
        return self.seconds

    def instrument(self, obj: object, *names: str) -> None:
        for name in names:
            setattr(obj, name, self._timed(getattr(obj, name)))

    def _timed(self, fn: Callable) -> Callable:
        def timed(*args: object, **kwargs: object) -> object:
            self._depth += 1
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.thread_time() - start

        return timed


def own_columns(
    samples: dict[str, dict[str, list[float]]],
    limit: float,
    names: tuple[str, ...] = ("gpu_envs",),
    cpu: str = "cpu",
    thread: str = "thread",
    inside: str = "inside",
) -> dict:
    """Each contender's own cost per step (thread time outside the simulator's calls: :class:`CallClock`).

    ``<name>_own_us`` (median us/step), ``<name>_own_pct`` (per round, in % of that round's raw
    step: ``median [95% CI] (min..max)``) and, for the first name, ``own_verdict`` against ``limit``.
    """
    row: dict = {}
    raw_cpu = samples[cpu]["raw"]
    for i, name in enumerate(names):
        if name not in samples[cpu]:
            continue
        own = [t - s for t, s in zip(samples[thread][name], samples[inside][name], strict=True)]
        row[f"{name}_own_us"] = round(statistics.median(own) * 1e6, 1)
        pct = [1 + o / r for o, r in zip(own, raw_cpu, strict=True)]
        row[f"{name}_own_pct"] = spread(pct)
        if i == 0:
            row["own_verdict"] = verdict(pct, limit)
    return row
