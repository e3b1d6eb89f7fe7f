"""Collection throughput on CPU: gpu_envs collect vs gymnasium SyncVectorEnv vs torchrl.

Built-in CartPole-v1 at N = 4096 on the CPU, random actions, one thread, contenders
interleaved in one process (medians of rounds):

(a) ``collect(env, steps=T)``: the eager collection into the preallocated buffer;
(b) ``collect(env, steps=T, compile=True)``: the same under ``torch.compile``;
(c) gymnasium's ``SyncVectorEnv`` of CartPole-v1 (``gym.make_vec(..., "sync")``, numpy),
    stepped with random actions -- the usual CPU baseline;
(d) torchrl's ``rollout`` over the same torch env (``GymWrapper(CartPoleEnv(N),
    convert_actions_to_numpy=False, categorical_action_encoding=True)``), when installed;
    its default info reader splits ``info["final_obs"]`` row by row, so it is also shown
    on the env built with ``expose_final_obs=False`` (faster, but without true final
    observations).

Why compiled is slower than eager here (CPU, N = 4096): the built-in envs draw their
reset states from their own ``torch.Generator`` (seeded reproducibility), and dynamo
cannot put a generator-taking op in a graph, so every step is cut at that call -- five
frames deep (collect's step, ``step_and_maybe_reset``, ``step``, the backend, the env),
which makes ~20 compiled regions per step, each with its guard check; and inductor's
C++ for the CartPole physics comes out as a scalar loop (``std::sin``/``std::cos`` on
the strided columns), slower than ATen's vectorised kernels that eager mode already
runs as one short chain. Compilation is aimed at GPUs (fused Triton kernels, and CUDA
graphs with ``cudagraph=True``); ``benchmarks/gpu_check.py`` measures it there.

Then memory: ``--collections`` (1,000) collections in a row must not grow the process
(RSS from /proc/self/statm on the CPU; ``torch.cuda.memory_stats`` on a GPU).

    python benchmarks/bench_rollout.py --json benchmarks/results/rollout.json
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

import gpu_envs
from benchmarks.timing import bench_result, format_table, interleave, save_json
from gpu_envs.rollout import collect

COLUMNS = [
    ("contender", "contender"),
    ("steps_per_s", "env-steps/s"),
    ("vs_gymnasium", "x gymnasium sync"),
    ("vs_torchrl", "x torchrl"),
    ("note", "note"),
]


def contenders(n: int, steps: int, gym_steps: int, device: torch.device) -> dict[str, tuple]:
    """name -> (callable doing one unit of work, env-steps per call)."""
    out: dict[str, tuple] = {}
    eager = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    out["gpu_envs collect"] = (lambda: collect(eager, steps=steps), n * steps)
    compiled = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    collect(compiled, steps=steps, compile=True)  # compile outside the timing
    out["gpu_envs collect (compile)"] = (lambda: collect(compiled, steps=steps, compile=True), n * steps)

    import gymnasium as gym

    vec = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync")
    vec.reset(seed=0)
    rng = np.random.default_rng(0)

    def gym_steps_fn() -> None:
        for _ in range(gym_steps):
            vec.step(rng.integers(0, 2, size=n))

    out["gymnasium SyncVectorEnv"] = (gym_steps_fn, n * gym_steps)

    if importlib.util.find_spec("torchrl") is not None:
        from torchrl.envs import GymWrapper

        from gpu_envs.envs import CartPoleEnv

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

        out["torchrl rollout"] = torchrl_contender(True)
        # the same env without info["final_obs"]: torchrl's transitions then lack the true
        # final observations, but this shows its rollout loop without its per-row info reader
        out["torchrl rollout (no final obs)"] = torchrl_contender(False)
    return out


def measure_speed(n: int, steps: int, gym_steps: int, rounds: int, device: torch.device) -> list[dict]:
    units = contenders(n, steps, gym_steps, device)
    times = interleave({k: fn for k, (fn, _) in units.items()}, steps=1, rounds=rounds, warmup=1, device=device)
    rate = {k: units[k][1] / times[k] for k in units}
    rows = []
    for name, r in rate.items():
        row = {"contender": f"{name} N={n}", "steps_per_s": f"{r:,.0f}", "env_steps_per_s": r}
        if "gymnasium SyncVectorEnv" in rate:
            row["vs_gymnasium"] = f"{r / rate['gymnasium SyncVectorEnv']:.1f}x"
        if "torchrl rollout" in rate:
            row["vs_torchrl"] = f"{r / rate['torchrl rollout']:.2f}x"
        rows.append(row)
    notes = {
        "gpu_envs collect (compile)": f"compiled / eager = {rate['gpu_envs collect (compile)'] / rate['gpu_envs collect']:.2f}",
        "torchrl rollout": "same env; torchrl reads info['final_obs'] row by row",
        "torchrl rollout (no final obs)": "env without final obs (wrong bootstrap data)",
    }
    for row, name in zip(rows, rate, strict=True):
        if name in notes:
            row["note"] = notes[name]
    return rows


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_memory(n: int, steps: int, collections: int, device: torch.device) -> dict:
    """Memory before and after ``collections`` collections (after a warm-up)."""
    env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    cuda = device.type == "cuda"
    for _ in range(20):
        collect(env, steps=steps)
    if cuda:
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_stats(device)["allocated_bytes.all.current"]
    else:
        before = _rss_bytes()
    for _ in range(collections):
        collect(env, steps=steps)
    if cuda:
        torch.cuda.synchronize(device)
        after = torch.cuda.memory_stats(device)["allocated_bytes.all.current"]
    else:
        after = _rss_bytes()
    what = "CUDA allocated" if cuda else "RSS"
    growth = after - before
    return {
        "contender": f"memory: {collections} collections N={n} T={steps}",
        "note": f"{what} {before / 2**20:.1f} -> {after / 2**20:.1f} MiB ({growth / 2**20:+.2f} MiB)",
        "growth_bytes": growth,
    }


def _result(rows: list[dict], device: torch.device) -> dict:
    return bench_result(f"bench_rollout: built-in CartPole-v1 collection on {device}, 1 thread", rows, COLUMNS)


def run(quick: bool = False) -> dict:
    """The table for ``gpu-envs bench``: N = 4096 on CPU (quick: N = 1024, few rounds)."""
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if quick:
        rows = measure_speed(1024, steps=16, gym_steps=2, rounds=3, device=device)
        rows.append(measure_memory(1024, steps=8, collections=100, device=device))
    else:
        rows = measure_speed(4096, steps=32, gym_steps=2, rounds=7, device=device)
        rows.append(measure_memory(4096, steps=8, collections=1000, device=device))
    return _result(rows, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=32, help="steps per collection T")
    parser.add_argument("--gym-steps", type=int, default=2, help="SyncVectorEnv steps per timed call")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--collections", type=int, default=1000, help="collections in the memory check")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    rows = measure_speed(args.num_envs, args.steps, args.gym_steps, args.rounds, device)
    rows.append(measure_memory(args.num_envs, 8, args.collections, device))
    result = _result(rows, device)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "rollout", "device": str(device), "rows": result["rows"]})


if __name__ == "__main__":
    main()
