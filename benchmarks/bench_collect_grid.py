"""``collect`` against a plain step loop over an N x T grid (issue 25 items 1 and 6): does storing cost?

For each N in {1, 8, 64, 1024, 16384, 262144} and T in {16, 64, 256, 1024} (cells with
N x T above ``--max-elements``, 2^24 by default, are skipped: their buffer would not fit
comfortably in memory), built-in CartPole-v1 on the CPU, random actions, one torch thread,
thread CPU time, contenders interleaved in one process, medians of rounds:

(a) loop -- the floor: ``T`` calls of ``env.step_and_maybe_reset(td)`` with a random
    ``td["action"]`` each step, keeping nothing (``benchmarks.step_peers.gpu_envs_loop``:
    what a user's hand-written loop costs; its own env);
(b) collect -- ``collect(env, steps=T)``: the same steps, every transition stored in
    the ``[N, T]`` buffer (time-major storage: writing step t is one contiguous write);
(c) gymnasium -- gymnasium's numpy ``CartPoleVectorEnv``
    (``gym.make_vec("CartPole-v1", N, vectorization_mode="vector_entry_point")``,
    ``benchmarks.step_peers.gym_vector_loop``) stepped ``T`` times with random numpy
    actions (N >= 8; a peer, storing nothing);
(d) EnvPool -- ``envpool.make("CartPole-v1", env_type="gymnasium", num_envs=N,
    num_threads=1)`` stepped ``T`` times, when installed (``time.process_time``: its
    steps run in a worker thread).

Columns: ns per env-step of each; "collect / loop" (collect's speed over the loop's: the
target is >= 0.9x in every cell); "cost vs T=16" (collect's ns per env-step at this T over
its own at T = 16 for the same N: the target is <= 1.25x at T = 1024); "collect /
gymnasium" and "collect / EnvPool" (collect's speed over each peer's: above 1x, collect
stores every transition and is still faster).

    python -m benchmarks.bench_collect_grid --json benchmarks/results/collect_grid.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: our benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import gpu_envs
from benchmarks import bench_rollout
from benchmarks.step_peers import gpu_envs_loop, gym_vector_loop
from benchmarks.timing import format_table, save_json
from gpu_envs.rollout import collect

SIZES = (1, 8, 64, 1024, 16384, 262144)
STEPS = (16, 64, 256, 1024)
MAX_ELEMENTS = 1 << 24
COLUMNS = [
    ("N", "N"),
    ("T", "T"),
    ("loop_ns", "loop ns/env-step"),
    ("collect_ns", "collect ns/env-step"),
    ("collect_vs_loop", "collect / loop"),
    ("cost_vs_t16", "cost vs T=16"),
    ("gymnasium_ns", "gymnasium ns/env-step"),
    ("collect_vs_gymnasium", "collect / gymnasium"),
    ("envpool_ns", "EnvPool ns/env-step"),
    ("collect_vs_envpool", "collect / EnvPool"),
]


def loop_contender(n: int, steps: int, device: str | torch.device = "cpu") -> Callable[[], None]:
    """(a): the plain ``step_and_maybe_reset`` loop (``step_peers.gpu_envs_loop``) over ``steps`` steps, nothing kept."""
    return _repeated(gpu_envs_loop("CartPole-v1", n, device=device), steps)


def collect_contender(n: int, steps: int, device: str | torch.device = "cpu") -> Callable[[], None]:
    """(b): ``collect(env, steps=T)`` into its cached buffer."""
    env = gpu_envs.make("CartPole-v1", num_envs=n, seed=0, device=device)
    env.reset(seed=0)
    return lambda: collect(env, steps=steps)


def gymnasium_contender(n: int, steps: int) -> Callable[[], None]:
    """(c): gymnasium's numpy CartPoleVectorEnv, random actions (``step_peers.gym_vector_loop``)."""
    return _repeated(gym_vector_loop("CartPole-v1", n), steps)


def envpool_contender(n: int, steps: int) -> Callable[[], None] | None:
    """(d): EnvPool's CartPole with one worker thread (``bench_rollout.envpool_contender``); None where not installed."""
    return bench_rollout.envpool_contender(n, steps)[0] if bench_rollout.envpool_available() else None


def _repeated(step: Callable[[], object], times: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(times):
            step()

    return run


def measure(contenders: dict[str, tuple[Callable[[], None], Callable[[], float]]], repeat: int, rounds: int) -> dict:
    """Median seconds per call of each contender (``repeat`` calls per round, interleaved, one warm-up round)."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds + 1):
        for name, (fn, now) in contenders.items():
            start = now()
            for _ in range(repeat):
                fn()
            if r:
                samples[name].append((now() - start) / repeat)
    return {name: statistics.median(values) for name, values in samples.items()}


def run(
    sizes: tuple[int, ...] = SIZES,
    steps: tuple[int, ...] = STEPS,
    rounds: int = 5,
    max_elements: int = MAX_ELEMENTS,
    peers: bool = True,
) -> dict:
    """The grid: one row per (N, T) that fits, and the cells skipped."""
    torch.set_num_threads(1)
    rows, skipped = [], []
    for n in sizes:
        base = None
        for t in steps:
            if n * t > max_elements:
                skipped.append({"N": n, "T": t})
                continue
            contenders = {
                "loop": (loop_contender(n, t), time.thread_time),
                "collect": (collect_contender(n, t), time.thread_time),
            }
            if peers and n >= 8:
                contenders["gymnasium"] = (gymnasium_contender(n, t), time.thread_time)
                pool = envpool_contender(n, t)
                if pool is not None:
                    contenders["envpool"] = (pool, time.process_time)
            repeat = max(1, (1 << 16) // (n * t))
            times = measure(contenders, repeat, rounds)
            per = {name: seconds / (n * t) * 1e9 for name, seconds in times.items()}
            base = per["collect"] if base is None else base
            row = {
                "N": n,
                "T": t,
                "loop_ns": round(per["loop"], 2),
                "collect_ns": round(per["collect"], 2),
                "collect_vs_loop": f"{per['loop'] / per['collect']:.2f}x",
                "cost_vs_t16": f"{per['collect'] / base:.2f}x" if steps[0] == 16 else "",
            }
            for peer in ("gymnasium", "envpool"):
                if peer in per:
                    row[f"{peer}_ns"] = round(per[peer], 2)
                    row[f"collect_vs_{peer}"] = f"{per[peer] / per['collect']:.2f}x"
            rows.append(row)
    return {"rows": rows, "skipped": skipped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--steps", type=int, nargs="+", default=list(STEPS), help="T of each collection")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-elements", type=int, default=MAX_ELEMENTS, help="skip cells with N x T above this")
    parser.add_argument("--no-peers", action="store_true", help="no gymnasium / EnvPool columns")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    result = run(tuple(args.sizes), tuple(args.steps), args.rounds, args.max_elements, not args.no_peers)
    print(
        format_table(
            "bench_collect_grid: collect vs a plain step loop, CartPole-v1 on cpu, 1 thread", result["rows"], COLUMNS
        )
    )
    if result["skipped"]:
        print("skipped (N x T above --max-elements):", ", ".join(f"{c['N']}x{c['T']}" for c in result["skipped"]))
    save_json(args.json, {"benchmark": "collect_grid", "device": "cpu", **result})


if __name__ == "__main__":
    main()
