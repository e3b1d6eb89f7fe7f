"""Scaling out, measured: the Ray backend vs gymnasium's vector envs, and torchrun shards vs one process.

(a) A CPU-heavy env, Pendulum-v1 with ``frame_skip=50`` (50 physics steps per env step),
    N = 16, each behind ``gpu_envs`` (same TensorDicts, ``step_and_maybe_reset``):

    * ``ray``: ``make(..., backend="ray", num_workers=2)``, two Ray actors of 8 envs;
    * ``async``: ``make(..., backend="gymnasium", vectorization="async")``: gymnasium's
      ``AsyncVectorEnv``, one process per env (16 here);
    * ``sync``: ``make(..., backend="gymnasium")``: ``SyncVectorEnv``, all in this process.

    Interleaved rounds in one process; the speed is WALL-clock env-steps/s, since the
    work happens in other processes (thread CPU time would only see the driver). Next
    to it, the CPU time all processes of this benchmark used per step (the driver, its
    workers, Ray's own processes: everything below this process, from
    ``/proc/*/task/*/schedstat``): what each contender costs, whatever share of a busy
    machine its processes get. Target: the Ray backend within 1.5x of AsyncVectorEnv.

(b) Built-in CartPole-v1 collection (``collect``, random actions, CPU, 1 thread per
    process): ``torchrun`` with 2 ranks x N envs (``make(..., distributed=True)``)
    vs 1 process x 2N envs. Each launch is a fresh job of a few timed rounds; the two
    kinds alternate, and a rank's round counts as long as the slower rank's (the job
    is as fast as its slowest process). Wall-clock env-steps/s over all processes.

On a 2-core machine, (a) has 2 cores for 16 envs whatever the contender: parallel
processes can at best halve the time of ``sync``, and the driver's own work competes
with the workers for the same cores. On a machine shared with other jobs, the kernel
shares the cores out per process, so 16 AsyncVectorEnv processes get a larger share
than 2 Ray workers or the single ``sync`` process: compare the CPU column too. (b)
can at best double the throughput of one process, and only if nothing else runs.

    python -m benchmarks.bench_scale --json benchmarks/results/scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script (also by torchrun): this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import gpu_envs
from benchmarks.timing import format_table, save_json
from tests.processes import descendants

ROOT = Path(__file__).resolve().parents[1]
FRAME_SKIP = 50
FLEET_ENVS = 16
FLEET_COLUMNS = [
    ("contender", "contender"),
    ("ms_per_step", "wall ms per step (N=16)"),
    ("env_steps_per_s", "env-steps/s (wall)"),
    ("vs_async", "wall time vs async"),
    ("cpu_ms_per_step", "CPU ms per step, all processes"),
    ("cpu_vs_sync", "CPU vs sync"),
]
SHARD_COLUMNS = [
    ("contender", "contender"),
    ("envs", "envs in all"),
    ("env_steps_per_s", "env-steps/s (wall)"),
    ("vs_single", "vs 1 process"),
]


# ------------------------------------------------------------------ (a) fleets
def fleet_contenders() -> tuple[dict, list]:
    """One step function per contender (Pendulum-v1, frame_skip=50, N=16) and the envs to close."""
    kwargs = {"num_envs": FLEET_ENVS, "device": "cpu", "frame_skip": FRAME_SKIP, "seed": 0}
    envs = {
        "ray (2 workers)": gpu_envs.make(
            "Pendulum-v1", backend="ray", num_workers=2, ray_init_kwargs={"num_cpus": 2}, **kwargs
        ),
        "async (AsyncVectorEnv)": gpu_envs.make("Pendulum-v1", backend="gymnasium", vectorization="async", **kwargs),
        "sync (SyncVectorEnv)": gpu_envs.make("Pendulum-v1", backend="gymnasium", **kwargs),
    }
    action = torch.zeros(FLEET_ENVS, 1)
    steps = {}
    for name, env in envs.items():
        state = {"td": env.reset()}

        def step(env=env, state=state) -> None:
            td = state["td"]
            td["action"] = action
            state["td"] = env.step_and_maybe_reset(td)[1]

        steps[name] = step
    return steps, list(envs.values())


def _task_cpu_ns(pid: int) -> int:
    """On-CPU nanoseconds of every thread of ``pid`` so far (0 once it is gone)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def run_fleets(quick: bool) -> list[dict]:
    """Interleaved rounds of each contender: median wall and all-process CPU seconds per step."""
    fns, envs = fleet_contenders()
    steps, rounds, warmup = (5, 4, 1) if quick else (10, 12, 2)
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    try:
        pids = [os.getpid(), *descendants(os.getpid())]  # every process the contenders started (workers, Ray's)
        for r in range(warmup + rounds):
            for name, fn in fns.items():
                cpu0, start = sum(map(_task_cpu_ns, pids)), time.perf_counter()
                for _ in range(steps):
                    fn()
                elapsed, used = time.perf_counter() - start, sum(map(_task_cpu_ns, pids)) - cpu0
                if r >= warmup:
                    wall[name].append(elapsed / steps)
                    cpu[name].append(used * 1e-9 / steps)
    finally:
        for env in envs:
            env.close()
    times = {name: statistics.median(v) for name, v in wall.items()}
    costs = {name: statistics.median(v) for name, v in cpu.items()}
    async_time, sync_cost = times["async (AsyncVectorEnv)"], costs["sync (SyncVectorEnv)"]
    return [
        {
            "contender": name,
            "ms_per_step": round(seconds * 1e3, 2),
            "env_steps_per_s": round(FLEET_ENVS / seconds),
            "vs_async": f"{seconds / async_time:.2f}x",
            "cpu_ms_per_step": round(costs[name] * 1e3, 2),
            "cpu_vs_sync": f"{costs[name] / sync_cost:.2f}x",
        }
        for name, seconds in times.items()
    ]


# ------------------------------------------------------------------ (b) shards
def time_collection(num_envs: int, steps: int, rounds: int, distributed: bool) -> list[float]:
    """Wall seconds of ``rounds`` collections of ``steps`` steps (the slowest rank's, under torchrun)."""
    from gpu_envs.distributed import all_max
    from gpu_envs.rollout import collect

    torch.set_num_threads(1)
    env = gpu_envs.make("CartPole-v1", num_envs=num_envs, device="cpu", seed=0, distributed=distributed)
    collect(env, None, steps)  # warm-up: buffers allocated, caches filled
    out = []
    for _ in range(rounds):
        if distributed:
            torch.distributed.barrier()
        start = time.perf_counter()
        collect(env, None, steps)
        out.append(all_max(time.perf_counter() - start))
    env.close()
    return out


def _launch(args: list[str], nproc: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    proc = subprocess.run(
        [*cmd, str(Path(__file__).resolve()), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the benchmark job failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    line = next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("{"))
    return json.loads(line)["seconds"]


def run_shards(quick: bool, sizes: tuple[int, ...]) -> list[dict]:
    steps, rounds, launches = (64, 3, 1) if quick else (128, 5, 3)
    rows = []
    for n in sizes:
        samples: dict[str, list[float]] = {"1 process": [], "torchrun 2 ranks": []}
        for _ in range(launches):  # alternate the two kinds of job
            job = ["--job", str(n), str(steps), str(rounds)]
            samples["1 process"] += _launch(["--job", str(2 * n), str(steps), str(rounds), "--single"], nproc=1)
            samples["torchrun 2 ranks"] += _launch(job, nproc=2)
        single = statistics.median(samples["1 process"])
        for name, values in samples.items():
            seconds = statistics.median(values)
            rows.append(
                {
                    "contender": f"{name} x {2 * n if name == '1 process' else n}",
                    "envs": 2 * n,
                    "env_steps_per_s": round(2 * n * steps / seconds),
                    "vs_single": f"{single / seconds:.2f}x",
                }
            )
    return rows


def job_main(num_envs: int, steps: int, rounds: int, single: bool) -> None:
    """One benchmark job (run by torchrun): print the round times as JSON on rank 0."""
    from gpu_envs.distributed import init, shutdown

    shard = init() if not single else None
    try:
        seconds = time_collection(num_envs, steps, rounds, distributed=not single)
    finally:
        shutdown()
    if shard is None or shard.rank == 0:
        print(json.dumps({"seconds": seconds}))


# ---------------------------------------------------------------------- main
def run(quick: bool = False, shard_sizes: tuple[int, ...] = (256, 4096)) -> dict:
    """Both measurements: ``{"fleets": rows, "shards": rows}``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fleets = run_fleets(quick)
    return {"fleets": fleets, "shards": run_shards(quick, shard_sizes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and launches")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 4096], help="N per rank for (b)")
    parser.add_argument("--json", default="benchmarks/results/scale.json", help="where to save the numbers")
    parser.add_argument("--job", type=int, nargs=3, metavar=("N", "STEPS", "ROUNDS"), help=argparse.SUPPRESS)
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        job_main(*args.job, single=args.single)
        return
    result = run(args.quick, tuple(args.sizes))
    cores = os.cpu_count()
    print(
        format_table(
            f"(a) Pendulum-v1, frame_skip={FRAME_SKIP}, N={FLEET_ENVS}, {cores} cores: wall clock",
            result["fleets"],
            FLEET_COLUMNS,
        )
    )
    print()
    print(
        format_table(
            f"(b) built-in CartPole-v1 collection, cpu, 1 thread per process, {cores} cores",
            result["shards"],
            SHARD_COLUMNS,
        )
    )
    save_json(args.json, {"benchmark": "scale", "cores": cores, **result})


if __name__ == "__main__":
    main()
