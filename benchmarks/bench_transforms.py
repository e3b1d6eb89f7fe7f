"""What each sim-to-real transform costs per step, over the bare built-in env and the empty TransformedEnv.

Built-in CartPole-v1 and Pendulum-v1 on the CPU at N in {64, 4096}, a fixed action per
row, one ``step_and_maybe_reset`` per step (the caller's ``td.set("action", a)``
included), each contender in its own env built with the same seed:

* bare: the env itself, no TransformedEnv;
* empty (the floor): ``TransformedEnv(env)`` with no transform: the layer every transform
  sits in, so a transform's own cost is its distance to this row;
* History: ``History(length=4)`` on the observation;
* Delay: ``Delay(action_steps=(0, 3), observation_steps=(0, 2))``;
* InitTracker: ``InitTracker()``;
* all three: ``InitTracker(), Delay(...), History(length=4)``;
* History / Delay (torch ops): the same transforms built with ``GPU_ENVS_NATIVE=0``, so
  they run their torch ops instead of their C kernel (``gpu_envs.transforms.native_rows``):
  what the kernel saves, side by side;
* History floor: what History's contract costs at the least, a transform that hands the
  transition and the root a new ``[N, 4, *obs]`` window each (one ``clone`` of a kept
  window each) and keeps nothing: two fresh windows per step are memory traffic 8x an
  observation's, which no implementation avoids.

Columns: microseconds per step and each contender's overhead over the bare step; the
issue's target is History and Delay each within +15% of the bare step at N = 4096.

The compiled table repeats the bare, History, Delay and all-three contenders as
``collect(env, policy, steps=64, compile=True)`` (a fixed zero action from a policy, so the
policy is inside the compiled chunks; the first calls, which compile, are warm-up), per
step: there the transforms' ops fuse with the env's step. Time is thread CPU time
(``time.thread_time``), ``torch.set_num_threads(1)``, interleaved rounds in one process,
medians.

    python benchmarks/bench_transforms.py --json benchmarks/results/transforms.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


import torch

import gpu_envs
from benchmarks.timing import bench_result, env_var, format_table, interleave, overhead_row, save_json
from gpu_envs.rollout import collect
from gpu_envs.transforms import Delay, History, InitTracker, Transform, TransformedEnv
from gpu_envs.transforms.base import EnvSpecs
from gpu_envs.transforms.keys import write

SIZES = [64, 4096]
ENVS = ("CartPole-v1", "Pendulum-v1")

CONTENDERS: dict[str, Callable[[], list]] = {
    "empty": lambda: [],
    "history": lambda: [History(length=4)],
    "delay": lambda: [Delay(action_steps=(0, 3), observation_steps=(0, 2))],
    "init_tracker": lambda: [InitTracker()],
    "all_three": lambda: [InitTracker(), Delay(action_steps=(0, 3), observation_steps=(0, 2)), History(length=4)],
}


class HistoryFloor(Transform):
    """History's outputs and nothing else: a new ``[N, 4, *obs]`` window (a clone) in each transition and root."""

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        obs = specs.observation_spec["observation"]
        self._window = torch.zeros(specs.num_envs, 4, *obs.shape, dtype=obs.dtype, device=specs.device)
        return specs

    def step(self, td):
        write(td, "observation", self._window.clone(), nxt=True)
        return td

    def root(self, td):
        write(td, "observation", self._window.clone())
        return td


# the same transforms on their torch ops: built with GPU_ENVS_NATIVE=0 (their C kernel is looked up at setup)
TORCH_OPS = {"history_torch": "history", "delay_torch": "delay"}


def stepper(env: object) -> Callable[[], object]:
    """One ``step_and_maybe_reset`` with a fixed action (the same for every contender)."""
    root = env.reset()  # type: ignore[attr-defined]
    action = env.action_spec.zero()  # type: ignore[attr-defined]
    state = {"root": root}

    def step() -> object:
        td = state["root"]
        td.set("action", action)
        _, state["root"] = env.step_and_maybe_reset(td)  # type: ignore[attr-defined]
        return state["root"]

    return step


def contenders(env_id: str, n: int, device: str | torch.device = "cpu") -> dict[str, Callable[[], object]]:
    def build():
        return gpu_envs.make(env_id, num_envs=n, device=device, seed=0)

    out = {"raw": stepper(build())}  # "raw": the baseline name overhead_row compares with
    for name, transforms in CONTENDERS.items():
        out[name] = stepper(TransformedEnv(build(), *transforms()))
    out["history_outputs"] = stepper(TransformedEnv(build(), HistoryFloor()))
    for name, same in TORCH_OPS.items():
        env = build()  # the env's own native step stays on: only the transforms' kernel is left out
        with env_var("GPU_ENVS_NATIVE", "0"):
            out[name] = stepper(TransformedEnv(env, *CONTENDERS[same]()))
    return out


COMPILED_STEPS = 64


def compiled_collector(env: object) -> Callable[[], object]:
    """One compiled ``collect`` of ``COMPILED_STEPS`` steps with a fixed zero action (the same policy object each call)."""
    env.reset()  # type: ignore[attr-defined]
    action = env.action_spec.zero()  # type: ignore[attr-defined]

    def policy(td):
        return td.set("action", action)

    return lambda: collect(env, policy, steps=COMPILED_STEPS, compile=True)


def compiled_contenders(env_id: str, n: int) -> dict[str, Callable[[], object]]:
    def build():
        return gpu_envs.make(env_id, num_envs=n, device="cpu", seed=0)

    out = {"raw": compiled_collector(build())}
    for name in ("history", "delay", "all_three"):
        out[name] = compiled_collector(TransformedEnv(build(), *CONTENDERS[name]()))
    return out


COMPILED_COLUMNS = [
    ("env", "env"),
    ("num_envs", "N"),
    ("raw_us", "bare us/step"),
    ("history_overhead", "History"),
    ("delay_overhead", "Delay"),
    ("all_three_overhead", "all three"),
]

COLUMNS = [
    ("env", "env"),
    ("num_envs", "N"),
    ("raw_us", "bare us"),
    ("empty_us", "empty us"),
    ("empty_overhead", "empty"),
    ("history_overhead", "History"),
    ("history_torch_overhead", "History (torch ops)"),
    ("history_outputs_overhead", "History floor"),
    ("delay_overhead", "Delay"),
    ("delay_torch_overhead", "Delay (torch ops)"),
    ("init_tracker_overhead", "InitTracker"),
    ("all_three_overhead", "all three"),
]


def run(
    quick: bool = False,
    sizes: tuple[int, ...] = tuple(SIZES),
    steps: int | None = None,
    rounds: int | None = None,
    compiled: bool = True,
) -> dict:
    """The eager table, then (``compiled``) the compiled one at the largest N under ``result["compiled"]``."""
    torch.set_num_threads(1)
    rows = []
    for env_id in ENVS:
        for n in sizes:
            per = steps or (20 if quick else (200 if n < 4096 else 50))
            times = interleave(contenders(env_id, n), steps=per, rounds=rounds or (3 if quick else 15))
            rows.append(overhead_row(times, env=env_id, num_envs=n))
    compiled_rows = []
    for env_id in ENVS if compiled else ():
        n = max(sizes)
        times = interleave(compiled_contenders(env_id, n), steps=1, rounds=rounds or (3 if quick else 9), warmup=2)
        compiled_rows.append(overhead_row({k: v / COMPILED_STEPS for k, v in times.items()}, env=env_id, num_envs=n))
    result = bench_result(
        "sim-to-real transforms per step over the bare built-in env (eager step_and_maybe_reset; thread CPU time, "
        "medians)",
        rows,
        COLUMNS,
    )
    result["compiled"] = bench_result(
        f"the same through collect(compile=True), {COMPILED_STEPS} steps per call, per step",
        compiled_rows,
        COMPILED_COLUMNS,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 15, compiled 9)")
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    result = run(args.quick, tuple(args.sizes), None, args.rounds)
    for table in (result, result["compiled"]):
        print(format_table(table["title"], table["rows"], table["columns"]))
        print()
    save_json(
        args.json,
        {"benchmark": "transforms", "device": "cpu", "rows": result["rows"], "compiled": result["compiled"]["rows"]},
    )


if __name__ == "__main__":
    main()
