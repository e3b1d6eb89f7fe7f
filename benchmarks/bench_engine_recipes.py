"""The engine recipes built on gpu_envs.SimulatorEnv: the engine's own step vs the SimulatorEnv step vs gpu_envs.

For ``examples/mujoco_warp_cartpole.py`` (MuJoCo Warp), ``examples/newton_pendulum.py``
(Newton) and ``examples/genesis_cartpole.py`` (Genesis), at each N, with the same fixed action
(0.3 of a Box's range; action 1 of a Discrete space), each contender on its own instance:

* ``raw``: the task's ``physics_step(action)`` and ``observe()``: the engine stepping and the
  observation read, nothing else (no reward, no ends, no resets);
* ``hand``: what a user writes around the engine without gpu_envs, the floor of any env of
  the task: step, observe, reward, ends (the task's own and a step counter's limit) and, on
  steps where a row ended, the task's ``reset_rows`` of those rows and a second
  observation. A fixed push ends rows often in some recipes (Genesis' cart-pole: on most
  steps), so the engine's reset is in this floor as it is in every env;
* ``base``: the SimulatorEnv's own ``step`` (rewards, the time limit, the same-step masked
  reset, the true final observation): what the env contract costs on top of the engine;
* ``gpu_envs``: ``gpu_envs.wrap(task)`` with ``step_and_maybe_reset``: the TensorDicts, checks
  and bookkeeping of the BatchedEnv on top of that.

Each recipe needs its engine, so each runs in the venv that has it (the mjlab tier's for MuJoCo
Warp, the Newton tier's, the Genesis tier's)::

    VENV=$(scripts/simulator_venv.sh mjlab | tail -n 1)
    PYTHONPATH=$PWD "$VENV/bin/python" benchmarks/bench_engine_recipes.py --recipe mujoco_warp
    VENV=$(scripts/simulator_venv.sh newton | tail -n 1)
    PYTHONPATH=$PWD "$VENV/bin/python" benchmarks/bench_engine_recipes.py --recipe newton
    VENV=$(scripts/simulator_venv.sh genesis | tail -n 1)
    PYTHONPATH=$PWD "$VENV/bin/python" benchmarks/bench_engine_recipes.py --recipe genesis

Time is the process's CPU time (``time.process_time``: Warp's and Genesis' CPU kernels included),
``torch.set_num_threads(1)``, interleaved rounds, medians; JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium
import torch

import gpu_envs
from benchmarks.timing import bench_result, format_table, interleave, overhead_row, save_json

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {
    "mujoco_warp": ("mujoco_warp_cartpole", "MuJoCoWarpCartPole", "mujoco_warp"),
    "newton": ("newton_pendulum", "NewtonPendulum", "newton"),
    "genesis": ("genesis_cartpole", "GenesisCartPole", "genesis"),
}


def load_recipe(name: str):
    """The example module of recipe ``name`` and its task class (an ImportError names the venv to use)."""
    module_name, class_name, engine = RECIPES[name]
    if importlib.util.find_spec(engine) is None:
        raise SystemExit(
            f"{engine} is not installed here: run this in the venv that has it (this file's docstring says which)."
        )
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "examples" / f"{module_name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(module_name, module)
    spec.loader.exec_module(module)
    return module, getattr(module, class_name)


def fixed_action(task: gpu_envs.SimulatorEnv) -> torch.Tensor:
    """Every row's action of every step: 0.3 of a Box's range, or action 1 of a Discrete space."""
    if isinstance(task.single_action_space, gymnasium.spaces.Discrete):
        return torch.ones(task.num_envs, dtype=torch.int64)
    return torch.full((task.num_envs, 1), 0.3)


def hand_loop(task_class: type, n: int, action: torch.Tensor) -> Callable[[], object]:
    """The task stepped by hand with its ended rows reset (no gpu_envs; the module docstring's ``hand``)."""
    task = task_class(num_envs=n, device="cpu")
    task.reset(seed=0)
    limit = task.max_episode_steps
    steps = torch.zeros(n, dtype=torch.int64)
    generator = torch.Generator().manual_seed(0)
    lanes = task.reset_noise

    def step() -> object:
        task.physics_step(action)
        obs = task.observe()
        task.reward()
        steps.add_(1)
        ended = task.terminated().reshape(n).to(torch.bool)
        if limit is not None:
            ended = ended | (steps >= limit)
        if bool(ended.any()):  # on the CPU: the host reads the ends, as the SimulatorEnv does there
            task.reset_rows(ended, torch.rand(n, lanes, generator=generator))  # fresh starts, as an env draws
            steps.masked_fill_(ended, 0)
            obs = task.observe()
        return obs

    return step


def contenders(task_class: type, n: int) -> dict[str, Callable[[], object]]:
    raw = task_class(num_envs=n, device="cpu")
    action = fixed_action(raw)
    raw.reset(seed=0)
    base = task_class(num_envs=n, device="cpu")
    base.reset(seed=0)
    env = gpu_envs.wrap(task_class(num_envs=n, device="cpu"), seed=0)
    state = {"root": env.reset()}

    def raw_step() -> object:
        raw.physics_step(action)
        return raw.observe()

    def gpu_envs_step() -> object:
        root = state["root"]
        root.set("action", action)
        _, state["root"] = env.step_and_maybe_reset(root)
        return state["root"]

    return {
        "raw": raw_step,
        "hand": hand_loop(task_class, n, action),
        "base": lambda: base.step(action),
        "gpu_envs": gpu_envs_step,
    }


COLUMNS = [
    ("recipe", "recipe"),
    ("num_envs", "N"),
    ("raw_us", "engine us/step"),
    ("hand_us", "by hand us"),
    ("hand_overhead", "by hand vs engine"),
    ("base_us", "SimulatorEnv us"),
    ("base_overhead", "SimulatorEnv vs engine"),
    ("gpu_envs_us", "gpu_envs us"),
    ("gpu_envs_overhead", "gpu_envs vs engine"),
    ("own_us", "gpu_envs - SimulatorEnv us"),
    ("vs_hand", "gpu_envs vs by hand"),
]


def run(recipe: str, sizes: tuple[int, ...] = (64, 1024), steps: int = 20, rounds: int = 9) -> dict:
    torch.set_num_threads(1)
    _, task_class = load_recipe(recipe)
    rows = []
    for n in sizes:
        times = interleave(contenders(task_class, n), steps=steps, rounds=rounds, timer=time.process_time)
        row = overhead_row(times, recipe=recipe, num_envs=n)
        row["own_us"] = round((times["gpu_envs"] - times["base"]) * 1e6, 1)
        row["vs_hand"] = f"{times['gpu_envs'] / times['hand'] - 1:+.1%}"
        rows.append(row)
    return bench_result(f"{recipe}: engine step vs SimulatorEnv vs gpu_envs (process CPU time, medians)", rows, COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=list(RECIPES), required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = run(args.recipe, tuple(args.sizes), args.steps, args.rounds)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "engine_recipes", "recipe": args.recipe, "rows": result["rows"]})


if __name__ == "__main__":
    main()
