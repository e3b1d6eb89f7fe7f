"""Wrapper overhead over a raw torch vector env (issue: foundation, target <= 25% / 10%).

A plain torch CartPole vector env with no final observations (Isaac Lab style: the
built-in CartPoleEnv with ``expose_final_obs=False``) is stepped at N in {1, 64, 4096}:

(a) raw: ``env.step(action)`` in a loop;
(b) gpu_envs: the same env through ``gpu_envs.wrap`` with ``step_and_maybe_reset``
    (the final-obs placeholders, done flags and TensorDicts included);
(c) torchrl: ``GymWrapper(env, convert_actions_to_numpy=False)`` with its
    ``step_and_maybe_reset``, when torchrl is installed.

Same fixed actions, interleaved rounds in one process, ``torch.set_num_threads(1)``.

    python benchmarks/bench_overhead.py --json benchmarks/results/overhead.json
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script: our benchmarks package, not torchrl's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import gpu_envs
from benchmarks.timing import bench_result, format_table, interleave, save_json
from gpu_envs.envs import CartPoleEnv


def contenders(n: int, device: torch.device) -> dict:
    action = (torch.arange(n, device=device) % 2).long()

    raw_env = CartPoleEnv(n, device=device, expose_final_obs=False)
    raw_env.reset(seed=0)

    ours = gpu_envs.wrap(CartPoleEnv(n, device=device, expose_final_obs=False))
    state = {"ours": ours.reset(seed=0)}

    def ours_step():
        td = state["ours"]
        td.set("action", action)
        state["ours"] = ours.step_and_maybe_reset(td)[1]

    out = {"raw": lambda: raw_env.step(action), "gpu_envs": ours_step}
    if importlib.util.find_spec("torchrl") is not None:
        from torchrl.envs import GymWrapper

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = GymWrapper(
                CartPoleEnv(n, device=device, expose_final_obs=False),
                convert_actions_to_numpy=False,
                categorical_action_encoding=True,
                device=device,
            )
        state["torchrl"] = theirs.reset()

        def torchrl_step():
            td = state["torchrl"]
            td.set("action", action)
            state["torchrl"] = theirs.step_and_maybe_reset(td)[1]

        out["torchrl"] = torchrl_step
    return out


COLUMNS = [
    ("N", "N"),
    ("raw_us", "raw us/step"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("gpu_envs_overhead", "gpu_envs overhead"),
    ("torchrl_us", "torchrl us/step"),
    ("torchrl_overhead", "torchrl overhead"),
]


def measure(sizes: list[int], steps: int, rounds: int, device: torch.device, warmup: int = 2) -> list[dict]:
    """One row per N: us/step of each contender and the overheads over raw."""
    rows = []
    for n in sizes:
        times = interleave(contenders(n, device), steps=steps, rounds=rounds, warmup=warmup, device=device)
        row = {"N": n}
        for name, seconds in times.items():
            row[f"{name}_us"] = round(seconds * 1e6, 1)
            if name != "raw":
                row[f"{name}_overhead"] = f"{seconds / times['raw'] - 1:+.1%}"
        rows.append(row)
    return rows


def _result(rows: list[dict], device: torch.device) -> dict:
    return bench_result(f"bench_overhead: plain torch CartPole (no final obs) on {device}, 1 thread", rows, COLUMNS)


def run(quick: bool = False) -> dict:
    """The table for ``gpu-envs bench``: N in {1, 64, 4096} on CPU (quick: N in {1, 64}, few rounds)."""
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if quick:
        rows = measure([1, 64], steps=50, rounds=3, device=device, warmup=1)
    else:
        rows = measure([1, 64, 4096], steps=200, rounds=15, device=device)
    return _result(rows, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 4096])
    parser.add_argument("--steps", type=int, default=200, help="steps per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    result = _result(measure(args.sizes, args.steps, args.rounds, device), device)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "overhead", "device": str(device), "rows": result["rows"]})


if __name__ == "__main__":
    main()
