"""Collection throughput on CPU: gpu_envs collect (eager, compiled) vs EnvPool, gymnasium, torchrl.

CartPole-v1 at N = 8, 256 and 4096 on the CPU, random actions, ONE thread each, every
contender interleaved with the others in one process (medians of rounds), in env-steps
per second of CPU time (``time.process_time``: EnvPool steps its envs in a worker thread,
which the calling thread's own CPU time would not see; torch runs on one thread). A
round times a block of calls of each contender (16 at N = 8, 4 at N = 256, 1 at
N = 4096: a few ms each), so that what is measured is its steady speed rather than the
cold start after the previous contender filled the caches:

(a) ``collect(env, steps=T)``: the built-in torch CartPole, eager, into the preallocated
    ``[N, T]`` buffer (transitions with true final observations, done flags, ...);
(b) ``collect(env, steps=T, compile=True)``: the same as ``T / K`` calls of one compiled
    ``K``-step function (``gpu_envs.rollout.compiled``);
(c) gymnasium's ``SyncVectorEnv`` of CartPole-v1 (``gym.make_vec(..., "sync")``, numpy),
    stepped with random actions -- the usual CPU baseline;
(d) EnvPool (C++, ``envpool.make("CartPole-v1", env_type="gymnasium", num_envs=N,
    num_threads=1)``), stepped with random numpy actions, when installed (``pip install
    envpool``; CI installs it); its steps return numpy arrays and store nothing;
(e) torchrl's ``rollout`` over the same torch env (``GymWrapper(CartPoleEnv(N),
    convert_actions_to_numpy=False, categorical_action_encoding=True)``), when installed;
    its default info reader splits ``info["final_obs"]`` row by row, so it is also shown
    on the env built with ``expose_final_obs=False`` (faster, but without true final
    observations).

Targets (issue 8): compiled collect at least EnvPool's env-steps/s at N = 8 and at least
10x EnvPool at N = 4096; compiled at least as fast as eager at N = 4096.

Then image observations (issue 16: uint8 frames collected within +10% of the single-step
cost): ``collect(env, steps=T)`` per step against the same env's single
``step_and_maybe_reset`` per step with random actions, on uint8 ``[8, 4, 84, 84]`` frame
stacks -- :class:`benchmarks.image_envs.SyntheticFrames` (pure torch, always there) and
EnvPool's ``Pong-v5`` (when installed) -- at one torch thread and at torch's default
thread count, wall time (a copy that waits for busy intra-op threads is waiting, not
computing).

Then memory: ``--collections`` (1,000) collections in a row must not grow the process
(RSS from /proc/self/statm on the CPU; ``torch.cuda.memory_stats`` on a GPU).

    python benchmarks/bench_rollout.py --json benchmarks/results/rollout.json
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

import gpu_envs
from benchmarks.timing import bench_result, format_table, interleave, memory_bytes, save_json
from gpu_envs.rollout import collect

SIZES = (8, 256, 4096)
EAGER, COMPILED = "gpu_envs collect", "gpu_envs collect (compile)"
GYMNASIUM, ENVPOOL, TORCHRL = "gymnasium SyncVectorEnv", "EnvPool", "torchrl rollout"
COLUMNS = [
    ("contender", "contender"),
    ("steps_per_s", "env-steps/s"),
    ("vs_envpool", "x EnvPool"),
    ("vs_gymnasium", "x gymnasium sync"),
    ("vs_torchrl", "x torchrl"),
    ("single_us", "single step us"),
    ("collect_us", "collect us/step"),
    ("vs_single", "collect vs single"),
    ("note", "note"),
]
IMAGE_TARGET = 0.10  # collect's uint8 steps within +10% of single steps (issue 16)
DEFAULT_THREADS = torch.get_num_threads()  # read before run() pins one thread
ENVPOOL_MISSING = "EnvPool not installed (pip install envpool): its rows are skipped"


def envpool_available() -> bool:
    return importlib.util.find_spec("envpool") is not None


def envpool_contender(n: int, steps: int) -> tuple:
    """EnvPool's CartPole-v1, one worker thread, ``steps`` steps with random numpy actions."""
    import envpool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=n, num_threads=1, seed=0)
    pool.reset()
    rng = np.random.default_rng(1)

    def envpool_steps() -> None:
        for _ in range(steps):
            pool.step(rng.integers(0, 2, size=n))

    return envpool_steps, n * steps


def contenders(n: int, steps: int, gym_steps: int, device: torch.device) -> dict[str, tuple]:
    """name -> (callable doing one unit of work, env-steps per call)."""
    out: dict[str, tuple] = {}
    eager = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    out[EAGER] = (lambda: collect(eager, steps=steps), n * steps)
    compiled = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    for _ in range(2):  # the first chunk runs eagerly, the next call compiles: outside the timing
        collect(compiled, steps=steps, compile=True)
    out[COMPILED] = (lambda: collect(compiled, steps=steps, compile=True), n * steps)

    import gymnasium as gym

    vec = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync")
    vec.reset(seed=0)
    rng = np.random.default_rng(0)

    def gym_steps_fn() -> None:
        for _ in range(gym_steps):
            vec.step(rng.integers(0, 2, size=n))

    out[GYMNASIUM] = (gym_steps_fn, n * gym_steps)

    if envpool_available():
        out[ENVPOOL] = envpool_contender(n, steps)

    if importlib.util.find_spec("torchrl") is not None:
        from torchrl.envs import GymWrapper

        from gpu_envs.builtin import CartPoleEnv

        def torchrl_contender(expose_final_obs: bool) -> tuple:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs = GymWrapper(
                    CartPoleEnv(n, device=device, seed=0, expose_final_obs=expose_final_obs),
                    convert_actions_to_numpy=False,
                    categorical_action_encoding=True,
                    device=device,
                )
                theirs.rollout(2, break_when_any_done=False)

            def torchrl_rollout() -> None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    theirs.rollout(steps, break_when_any_done=False)

            return torchrl_rollout, n * steps

        out[TORCHRL] = torchrl_contender(True)
        # the same env without info["final_obs"]: torchrl's transitions then lack the true
        # final observations, but this shows its rollout loop without its per-row info reader
        out[f"{TORCHRL} (no final obs)"] = torchrl_contender(False)
    return out


def image_row(name: str, build, n: int, steps: int, rounds: int, threads: int) -> dict:
    """collect per step vs single ``step_and_maybe_reset`` steps of one uint8 image env, at ``threads``."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        collected, single = gpu_envs.wrap(build(n), device="cpu"), gpu_envs.wrap(build(n), device="cpu")
        sample = single.action_spec.sampler(generator=single.generator)
        state = {"td": single.reset()}

        def single_steps() -> None:
            for _ in range(steps):
                td = state["td"]
                td.set("action", sample())
                state["td"] = single.step_and_maybe_reset(td)[1]

        collect(collected, steps=steps)  # lays out the buffer: outside the timing
        times = interleave(
            {"single": single_steps, "collect": lambda: collect(collected, steps=steps)},
            steps=1,
            rounds=rounds,
            warmup=1,
            timer=time.perf_counter,
        )
        collected.close()
        single.close()
    finally:
        torch.set_num_threads(previous)
    one, many = times["single"] / steps, times["collect"] / steps
    ratio = many / one - 1
    return {
        "contender": f"uint8 frames: {name} N={n} threads={threads}",
        "single_us": round(one * 1e6, 1),
        "collect_us": round(many * 1e6, 1),
        "vs_single": f"{ratio:+.1%}",
        "collect_vs_single": ratio,
        "note": f"target <= +{IMAGE_TARGET:.0%}: {'met' if ratio <= IMAGE_TARGET else 'NOT met'}",
    }


def image_rows(quick: bool, n: int = 8) -> list[dict]:
    """The uint8 image rows: the synthetic frames env, and EnvPool Pong when installed, at 1 and default threads."""
    from benchmarks.image_envs import EnvPoolFrames, SyntheticFrames, envpool_available

    envs = [("SyntheticFrames", SyntheticFrames, 32, 3 if quick else 7)]
    if envpool_available():
        envs.append(("EnvPool Pong-v5", EnvPoolFrames, 16, 2 if quick else 5))
    rows = []
    for name, build, steps, rounds in envs:
        for threads in sorted({1, DEFAULT_THREADS}):
            rows.append(image_row(name, build, n, steps, rounds, threads))
    if not envpool_available():
        rows.append({"contender": f"uint8 frames: EnvPool Pong-v5 N={n}", "note": ENVPOOL_MISSING})
    return rows


def calls_per_round(n: int) -> int:
    """Calls timed together per round: a few ms of work for the fast contenders."""
    return max(1, min(16, 1024 // n))


def measure_speed(n: int, steps: int, gym_steps: int, rounds: int, device: torch.device) -> list[dict]:
    units = contenders(n, steps, gym_steps, device)
    times = interleave(
        {k: fn for k, (fn, _) in units.items()},
        steps=calls_per_round(n),
        rounds=rounds,
        warmup=1,
        device=device,
        timer=time.process_time,
    )
    return rate_rows(n, {k: units[k][1] / times[k] for k in units})


def rate_rows(n: int, rate: dict[str, float]) -> list[dict]:
    """The table rows of one batch size from each contender's env-steps/s."""
    rows = []
    for name, r in rate.items():
        row = {"contender": f"{name} N={n}", "steps_per_s": f"{r:,.0f}", "env_steps_per_s": r}
        for column, base in (("vs_envpool", ENVPOOL), ("vs_gymnasium", GYMNASIUM), ("vs_torchrl", TORCHRL)):
            if base in rate:
                row[column] = f"{r / rate[base]:.2f}x"
        rows.append(row)
    notes = {
        COMPILED: f"compiled / eager = {rate[COMPILED] / rate[EAGER]:.2f}",
        ENVPOOL: "C++ envs, 1 worker thread; numpy out, nothing stored",
        TORCHRL: "same env; torchrl reads info['final_obs'] row by row",
        f"{TORCHRL} (no final obs)": "env without final obs (wrong bootstrap data)",
    }
    for row, name in zip(rows, rate, strict=True):
        if name in notes:
            row["note"] = notes[name]
    if ENVPOOL not in rate:
        rows.append({"contender": f"{ENVPOOL} N={n}", "note": ENVPOOL_MISSING})
    return rows


def measure_memory(n: int, steps: int, collections: int, device: torch.device) -> dict:
    """Memory before and after ``collections`` collections (after a warm-up)."""
    env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    for _ in range(20):
        collect(env, steps=steps)
    before = memory_bytes(device)
    for _ in range(collections):
        collect(env, steps=steps)
    after = memory_bytes(device)
    what = "CUDA allocated" if device.type == "cuda" else "RSS"
    growth = after - before
    return {
        "contender": f"memory: {collections} collections N={n} T={steps}",
        "note": f"{what} {before / 2**20:.1f} -> {after / 2**20:.1f} MiB ({growth / 2**20:+.2f} MiB)",
        "growth_bytes": growth,
    }


def targets(rows: list[dict]) -> list[str]:
    """The issue's targets, read from the rows: met or not, with the numbers."""
    rate = {row["contender"]: row["env_steps_per_s"] for row in rows if "env_steps_per_s" in row}
    lines = []
    for n, factor in ((SIZES[0], 1.0), (SIZES[-1], 10.0)):
        ours, theirs = rate.get(f"{COMPILED} N={n}"), rate.get(f"{ENVPOOL} N={n}")
        if ours is not None and theirs is not None:
            verdict = "met" if ours >= factor * theirs else "NOT met"
            lines.append(f"compiled >= {factor:g}x EnvPool at N={n}: {ours / theirs:.2f}x -> {verdict}")
        elif ours is not None:
            lines.append(f"compiled >= {factor:g}x EnvPool at N={n}: not measured ({ENVPOOL_MISSING})")
    ours, eager = rate.get(f"{COMPILED} N={SIZES[-1]}"), rate.get(f"{EAGER} N={SIZES[-1]}")
    if ours is not None and eager is not None:
        verdict = "met" if ours >= eager else "NOT met"
        lines.append(f"compiled >= eager at N={SIZES[-1]}: {ours / eager:.2f}x -> {verdict}")
    for row in rows:
        if "collect_vs_single" in row:
            verdict = "met" if row["collect_vs_single"] <= IMAGE_TARGET else "NOT met"
            what = row["contender"].removeprefix("uint8 frames: ")
            lines.append(
                f"uint8 collect <= +{IMAGE_TARGET:.0%} of single steps, {what}: {row['vs_single']} -> {verdict}"
            )
    return lines


def _result(rows: list[dict], device: torch.device) -> dict:
    result = bench_result(f"bench_rollout: CartPole-v1 collection on {device}, 1 thread, CPU time", rows, COLUMNS)
    result["targets"] = targets(rows)
    return result


def run(quick: bool = False, sizes: tuple[int, ...] = SIZES) -> dict:
    """The table for ``gpu-envs bench``: N = 8, 256, 4096 on CPU (quick: fewer steps and rounds)."""
    torch.set_num_threads(1)
    device = torch.device("cpu")
    steps, rounds = (16, 3) if quick else (32, 7)
    rows = []
    for n in sizes:
        rows += measure_speed(n, steps=steps, gym_steps=2 if n > 256 else 16, rounds=rounds, device=device)
    rows += image_rows(quick)
    rows.append(measure_memory(1024 if quick else 4096, steps=8, collections=100 if quick else 1000, device=device))
    return _result(rows, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="batch sizes N")
    parser.add_argument("--steps", type=int, default=32, help="steps per collection T")
    parser.add_argument("--gym-steps", type=int, default=None, help="SyncVectorEnv steps per timed call")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--collections", type=int, default=1000, help="collections in the memory check")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-images", action="store_true", help="skip the uint8 image rows")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    rows = []
    for n in args.sizes:
        gym_steps = args.gym_steps or (2 if n > 256 else 16)
        rows += measure_speed(n, args.steps, gym_steps, args.rounds, device)
    if not args.no_images and device.type == "cpu":
        rows += image_rows(quick=False)
    rows.append(measure_memory(max(args.sizes), 8, args.collections, device))
    result = _result(rows, device)
    print(format_table(result["title"], result["rows"], result["columns"]))
    print("\n".join(["", *result["targets"]]))
    save_json(
        args.json, {"benchmark": "rollout", "device": str(device), "rows": result["rows"], "targets": result["targets"]}
    )


if __name__ == "__main__":
    main()
