"""Throughput of gpu_envs' built-in CartPole through the interop adapters vs each library's own envs.

* gymnasium: ``to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=N), arrays="numpy")``
  vs gymnasium's own ``SyncVectorEnv`` of ``CartPole-v1`` (``make_vec(...,
  vectorization_mode="sync")``), both in NEXT_STEP mode (gymnasium's default), at N = 8
  and 256 (issue 9's target: ours at least 5x at N = 256);
* Stable-Baselines3: ``to_sb3(gpu_envs.make("CartPole-v1", num_envs=8))`` vs SB3's
  ``DummyVecEnv`` of gymnasium ``CartPole-v1``, at N = 8 (when SB3 is installed);
* torchrl: ``to_torchrl(gpu_envs.make("CartPole-v1", num_envs=N))`` vs torchrl's own
  ``GymWrapper`` over the same built-in env, in its fastest form for it
  (``convert_actions_to_numpy=False, categorical_action_encoding=True``, as
  ``CartPoleEnv``'s docstring says), both through ``step_and_maybe_reset`` (what
  torchrl's collectors call), at N = 64 and 4096 (target: ours at least 2x; when
  torchrl is installed).

Each contender steps with fixed actions (numpy for the numpy libraries, a tensor drawn
once from the action spec for torchrl); env-steps/s = N / time per step. Interleaved rounds in one process,
thread CPU time, ``torch.set_num_threads(1)``, medians (see ``benchmarks/timing.py``).

For the gymnasium and SB3 rows a ``floor`` runs in the same rounds: what any adapter
over this env must do, in the cheapest way and nothing else.

* gymnasium: the gpu_envs env calls with tensors -- ``step_and_maybe_reset``, plus
  NEXT_STEP's masked ``reset`` of the rows that ended on the previous step (the env
  below resets ended rows itself, so their next step is discarded and they start
  afresh).
* SB3 (``sb3_floor_stepper``): the VecEnv contract as ``DummyVecEnv`` keeps it, on top
  of ``step_and_maybe_reset``: SB3's numpy actions as a tensor (``torch.from_numpy``),
  numpy views of the observations, rewards ``[N]`` and dones ``[N]``, and a fresh list
  of N fresh info dicts with ``"TimeLimit.truncated"`` (and, on rows that ended, their
  ``"terminal_observation"``; the ``terminated`` flags and final observations are read
  only on steps where a row ended). No checks, no copies.

``floor speedup`` is the best any adapter over this env could reach; ``adapter /
floor`` is the share of the adapter's step that the floor's work takes. The ``target``
column reads issue 16's targets (gymnasium: >= 1x at N = 8, >= 5x at N = 256; SB3:
>= 1x at N = 8; torchrl: >= 2x).

    python -m benchmarks.bench_interop --json benchmarks/results/interop.json
    python -m benchmarks.bench_interop --libraries stable-baselines3 --rounds 21   # one library's rows
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

if __package__ in (None, ""):  # run as a script: our benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import gpu_envs
from benchmarks.timing import bench_result, format_table, interleave, save_json
from gpu_envs.interop import to_gymnasium
from gpu_envs.utils.tensordicts import get_entry, new_td, set_entry

TORCHRL_SIZES = (64, 4096)
# torchrl's GymWrapper in its fastest form for the built-in envs: actions stay index tensors
GYM_WRAPPER_FASTEST = {"convert_actions_to_numpy": False, "categorical_action_encoding": True}
COLUMNS = [
    ("library", "library"),
    ("N", "N"),
    ("gymnasium_sync_steps_per_s", "gymnasium SyncVectorEnv steps/s"),
    ("sb3_dummy_steps_per_s", "SB3 DummyVecEnv steps/s"),
    ("torchrl_gymwrapper_steps_per_s", "torchrl GymWrapper steps/s"),
    ("gpu_envs_steps_per_s", "gpu_envs adapter steps/s"),
    ("speedup", "gpu_envs speedup"),
    ("floor_steps_per_s", "floor steps/s"),
    ("floor_speedup", "floor speedup"),
    ("of_floor", "adapter / floor"),
    ("target", "target"),
]
# issue 16 (gymnasium, SB3) and issue 9 (torchrl): the least speedup over the library's own env, by (library, N)
TARGETS = {("gymnasium", 8): 1.0, ("gymnasium", 256): 5.0, ("stable-baselines3", 8): 1.0, ("torchrl", 64): 2.0}
TARGETS[("torchrl", 4096)] = 2.0


def floor_stepper(env, next_step: bool) -> Callable[[], None]:
    """The env calls an adapter cannot avoid (module docstring), on tensors, with a fixed action."""
    n = env.num_envs
    action = torch.as_tensor((np.arange(n) % 2).astype(np.int64))
    state = {"td": env.reset(seed=0), "pending": None}

    def step() -> None:
        td = state["td"]
        td.set("action", action)
        td, root = env.step_and_maybe_reset(td)
        if next_step:
            if state["pending"] is not None:  # rows that ended last step start afresh
                root = env.reset(td=new_td({"_reset": state["pending"]}, env.batch_size, env.device))
            done = td["next", "done"].view(n)
            state["pending"] = done if bool(done.any()) else None
        state["td"] = root

    return step


def sb3_floor_stepper(env) -> Callable[[], object]:
    """What any SB3 VecEnv over ``env`` must do per step (module docstring), and nothing else."""
    n = env.num_envs
    actions = (np.arange(n) % 2).astype(np.int64)
    rows = range(n)
    state = {"td": env.reset(seed=0)}

    def step() -> object:
        td = state["td"]
        set_entry(td, "action", torch.from_numpy(actions))
        td, root = env.step_and_maybe_reset(td)
        state["td"] = root
        nxt = get_entry(td, "next")
        obs = get_entry(root, "observation").numpy()
        rewards = get_entry(nxt, "reward").numpy().reshape(n)
        dones = get_entry(nxt, "done").numpy().reshape(n)
        infos = [{"TimeLimit.truncated": False} for _ in rows]
        ended = dones.tolist()
        if True in ended:
            terminated = get_entry(nxt, "terminated").numpy().reshape(n).tolist()
            final = get_entry(nxt, "observation").numpy()
            for i in rows:
                if ended[i]:
                    infos[i]["TimeLimit.truncated"] = not terminated[i]
                    infos[i]["terminal_observation"] = final[i]
        return obs, rewards, dones, infos

    return step


def gymnasium_contenders(n: int) -> tuple[dict[str, Callable[[], object]], list]:
    actions = (np.arange(n) % 2).astype(np.int64)
    theirs = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync")
    ours = to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=0), arrays="numpy")
    floor = gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=0)
    theirs.reset(seed=0)
    ours.reset(seed=0)
    fns = {
        "gymnasium_sync": lambda: theirs.step(actions),
        "floor": floor_stepper(floor, next_step=True),
        "gpu_envs": lambda: ours.step(actions),
    }
    return fns, [theirs, ours, floor]


def sb3_contenders(n: int) -> tuple[dict[str, Callable[[], object]], list]:
    from stable_baselines3.common.vec_env import DummyVecEnv

    from gpu_envs.interop import to_sb3

    actions = (np.arange(n) % 2).astype(np.int64)
    theirs = DummyVecEnv([lambda: gym.make("CartPole-v1")] * n)
    ours = to_sb3(gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=0))
    floor = gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=0)
    theirs.reset()
    ours.reset()
    fns = {
        "sb3_dummy": lambda: theirs.step(actions),
        "floor": sb3_floor_stepper(floor),
        "gpu_envs": lambda: ours.step(actions),
    }
    return fns, [theirs, ours, floor]


def torchrl_contenders(n: int) -> tuple[dict[str, Callable[[], object]], list]:
    from torchrl.envs import GymWrapper

    from gpu_envs.builtin import CartPoleEnv
    from gpu_envs.interop import to_torchrl

    theirs = GymWrapper(CartPoleEnv(num_envs=n, device="cpu", seed=0), **GYM_WRAPPER_FASTEST)
    ours = to_torchrl(gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=0))
    return {"torchrl_gymwrapper": _torchrl_stepper(theirs), "gpu_envs": _torchrl_stepper(ours)}, [theirs, ours]


def _torchrl_stepper(env) -> Callable[[], None]:
    """A step with a fixed action (drawn once) on the current root, advancing it like a collector."""
    action = env.action_spec.rand()
    state = {"td": env.reset()}

    def step() -> None:
        td = state["td"].set("action", action)
        state["td"] = env.step_and_maybe_reset(td)[1]

    return step


def measure(library: str, n: int, make: Callable, quick: bool, steps: int | None, rounds: int | None) -> dict:
    fns, envs = make(n)
    steps = steps or (max(10, 2000 // n) if quick else max(30, 12000 // n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seconds = interleave(fns, steps=steps, rounds=rounds or (5 if quick else 15))
    for env in envs:
        env.close()
    row: dict = {"library": library, "N": n}
    for name, per_step in seconds.items():
        row[f"{name}_steps_per_s"] = round(n / per_step)
    theirs = next(name for name in seconds if name not in ("gpu_envs", "floor"))
    speedup = seconds[theirs] / seconds["gpu_envs"]
    row["speedup"] = f"{speedup:.2f}x"
    if "floor" in seconds:
        row["floor_speedup"] = f"{seconds[theirs] / seconds['floor']:.2f}x"
        row["of_floor"] = f"{seconds['floor'] / seconds['gpu_envs']:.0%}"
    target = TARGETS.get((library, n))
    if target is not None:
        row["target"] = f">= {target:g}x: {'met' if speedup >= target else 'NOT met'}"
    return row


def gymnasium_rows(quick: bool, sizes: tuple[int, ...], steps: int | None, rounds: int | None) -> list[dict]:
    """to_gymnasium vs gymnasium's SyncVectorEnv, one row per N."""
    return [measure("gymnasium", n, gymnasium_contenders, quick, steps, rounds) for n in sizes]


def sb3_rows(quick: bool, steps: int | None, rounds: int | None) -> list[dict]:
    """to_sb3 vs SB3's DummyVecEnv at N = 8 (no row without SB3)."""
    if importlib.util.find_spec("stable_baselines3") is None:
        return []
    return [measure("stable-baselines3", 8, sb3_contenders, quick, steps, rounds)]


def torchrl_rows(quick: bool, steps: int | None, rounds: int | None) -> list[dict]:
    """to_torchrl vs torchrl's GymWrapper at N = 64 and 4096 (no row without torchrl)."""
    if importlib.util.find_spec("torchrl") is None:
        return []
    return [measure("torchrl", n, torchrl_contenders, quick, steps, rounds) for n in TORCHRL_SIZES]


LIBRARIES = ("gymnasium", "stable-baselines3", "torchrl")


def run(
    quick: bool = False,
    sizes: tuple[int, ...] = (8, 256),
    steps: int | None = None,
    rounds: int | None = None,
    libraries: tuple[str, ...] = LIBRARIES,
) -> dict:
    """The table's rows for ``libraries`` (the ``gpu-envs bench`` interface: all); ``sizes`` are the gymnasium rows' N."""
    torch.set_num_threads(1)
    rows: list[dict] = []
    if "gymnasium" in libraries:
        rows += gymnasium_rows(quick, sizes, steps, rounds)
    if "stable-baselines3" in libraries:
        rows += sb3_rows(quick, steps, rounds)
    if "torchrl" in libraries:
        rows += torchrl_rows(quick, steps, rounds)
    return bench_result("bench_interop: CartPole-v1 through the interop adapters on cpu, 1 thread", rows, COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 256], help="the gymnasium rows' N")
    parser.add_argument("--steps", type=int, default=None, help="steps per round (default: by N)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 15)")
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES), help="rows to measure")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    result = run(args.quick, tuple(args.sizes), args.steps, args.rounds, tuple(args.libraries))
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "interop", "device": "cpu", "rows": result["rows"]})


if __name__ == "__main__":
    main()
