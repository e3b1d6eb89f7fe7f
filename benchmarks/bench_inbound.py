"""Overhead of the inbound adapters over the libraries' own vector envs stepped raw.

For each library (skipped when not installed), at N = 8 by default:

* sb3: ``DummyVecEnv`` of gymnasium CartPole-v1, ``venv.step(actions)`` vs
  ``gpu_envs.wrap(venv)`` and ``step_and_maybe_reset`` (TensorDicts, true final obs);
* legacy_gym: gym 0.26 ``SyncVectorEnv`` of gym's CartPole-v1, the same way;
* mo_gymnasium: ``MOSyncVectorEnv`` of deep-sea-treasure-v0 (rewards ``[N, 2]``) vs
  ``gpu_envs.make`` of the id (which steps the MO envs in SAME_STEP mode,
  :class:`gpu_envs.backends.mo_gymnasium.MOSameStepVectorEnv`);
* minigrid: gymnasium ``SyncVectorEnv`` (SAME_STEP) of MiniGrid-Empty-8x8-v0 raw (the
  mission left as text) vs ``gpu_envs.make`` (mission as bytes).

Next to them, for the first three, a ``floor``: the library's env plus ONLY the work the
TensorDict contract needs, in the same run -- the action as numpy, the true final
observations of the ended rows swapped into a copy of the observations (read the
library's way: SB3's ``terminal_observation`` infos, gym's ``final_observation``; the MO
envs stepped in SAME_STEP mode, since a NEXT_STEP env gives no final observation and
fresh start in one call), one ``from_numpy`` per leaf, the two TensorDicts and the
caller's ``td.set``. It is what any wrapper must spend; ``gpu_envs - floor`` is what the
adapter and the gymnasium backend beneath it spend on top. The issue's target is
gpu_envs within +30% of raw at N = 8 (the ``target`` column).

Each contender steps a fixed action; interleaved rounds in one process, thread CPU time,
``torch.set_num_threads(1)``, medians.

    python -m benchmarks.bench_inbound --json benchmarks/results/inbound.json
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

if __package__ in (None, ""):  # run as a script: our benchmarks package, not torchrl's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import gpu_envs
from benchmarks.timing import bench_result, interleave, overhead_row, sizes_main
from gpu_envs.utils.tensordicts import new_td, set_entry

TARGET = 0.30  # gpu_envs within +30% of raw at N = 8 (issue 16)
COLUMNS = [
    ("env", "env"),
    ("N", "N"),
    ("raw_us", "raw us/step"),
    ("floor_us", "floor us/step"),
    ("floor_overhead", "floor overhead"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("gpu_envs_overhead", "gpu_envs overhead"),
    ("gpu_envs_vs_floor", "gpu_envs - floor"),
    ("target", "<= +30%"),
]


# Each builder gives (raw vector env, reset; wrapped BatchedEnv; floor step or None). A floor
# step reads one step the library's way: (obs, reward, terminated, truncated, {row: final obs}).


def _sb3(n: int) -> tuple[object, object, object]:
    from stable_baselines3.common.vec_env import DummyVecEnv

    def build() -> object:
        return DummyVecEnv([lambda: gym.make("CartPole-v1")] * n)

    raw = build()
    raw.seed(0)  # SB3: seeds apply at the next reset, which takes no seed
    raw.reset()
    lean = build()
    lean.seed(0)
    first = lean.reset()

    def read(actions: np.ndarray) -> tuple:
        obs, reward, dones, infos = lean.step(actions)
        truncated = np.zeros(n, dtype=bool)
        final = {}
        for i in np.flatnonzero(dones).tolist():
            truncated[i] = infos[i].get("TimeLimit.truncated", False)
            final[i] = infos[i]["terminal_observation"]
        return obs, reward, dones & ~truncated, truncated, final

    return raw, gpu_envs.wrap(build(), device="cpu"), (first, read, lean)


def _legacy_gym(n: int) -> tuple[object, object, object]:
    import gym as old_gym

    def build() -> object:
        return old_gym.vector.SyncVectorEnv([lambda: old_gym.make("CartPole-v1", disable_env_checker=True)] * n)

    raw = build()
    raw.reset(seed=0)
    lean = build()
    first, _ = lean.reset(seed=0)

    def read(actions: np.ndarray) -> tuple:
        obs, reward, terminated, truncated, info = lean.step(actions)
        final = {}
        if "final_observation" in info:
            rows, values = info["_final_observation"], info["final_observation"]
            final = {i: values[i] for i in np.flatnonzero(rows).tolist()}
        return obs, reward, terminated, truncated, final

    return raw, gpu_envs.wrap(build(), device="cpu"), (first, read, lean)


def _mo_gymnasium(n: int) -> tuple[object, object, object]:
    import mo_gymnasium
    from mo_gymnasium.wrappers.vector import MOSyncVectorEnv

    from gpu_envs.backends.mo_gymnasium import MOSameStepVectorEnv

    raw = MOSyncVectorEnv([lambda: mo_gymnasium.make("deep-sea-treasure-v0")] * n)
    raw.reset(seed=0)
    lean = MOSameStepVectorEnv([lambda: mo_gymnasium.make("deep-sea-treasure-v0")] * n)
    first, _ = lean.reset(seed=0)

    def read(actions: np.ndarray) -> tuple:
        obs, reward, terminated, truncated, info = lean.step(actions)
        final = {}
        if "final_obs" in info:
            rows, values = info["_final_obs"], info["final_obs"]
            final = {i: values[i] for i in np.flatnonzero(rows).tolist()}
        return obs, reward, terminated, truncated, final

    return raw, gpu_envs.make("deep-sea-treasure-v0", num_envs=n, device="cpu"), (first, read, lean)


def _minigrid(n: int) -> tuple[object, object, object]:
    import minigrid  # noqa: F401  (registers the ids)

    raw = gym.make_vec(
        "MiniGrid-Empty-8x8-v0",
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    raw.reset(seed=0)
    return raw, gpu_envs.make("MiniGrid-Empty-8x8-v0", num_envs=n, device="cpu"), None


# (row name, package that must be installed, builder (see above), action count)
CASES: list[tuple[str, str, Callable[[int], tuple[object, object, object]], int]] = [
    ("sb3 DummyVecEnv CartPole-v1", "stable_baselines3", _sb3, 2),
    ("gym 0.26 SyncVectorEnv CartPole-v1", "gym", _legacy_gym, 2),
    ("MOSyncVectorEnv deep-sea-treasure-v0", "mo_gymnasium", _mo_gymnasium, 4),
    ("MiniGrid-Empty-8x8-v0 (SAME_STEP)", "minigrid", _minigrid, 3),
]


def floor_stepper(first: np.ndarray, read: Callable, n: int, action: torch.Tensor) -> Callable[[], None]:
    """A library step read its way, plus only the contract's work (module docstring)."""
    batch, device = torch.Size([n]), torch.device("cpu")
    false = torch.zeros(n, 1, dtype=torch.bool)
    state = {"td": new_td({"observation": torch.from_numpy(np.array(first))}, batch, device)}

    def step() -> None:
        td = state["td"]
        td.set("action", action)
        obs, reward, terminated, truncated, final = read(action.numpy())
        root_obs = torch.from_numpy(np.array(obs))
        next_obs = root_obs
        if final:
            swapped = np.array(obs)
            for i, value in final.items():
                swapped[i] = value
            next_obs = torch.from_numpy(swapped)
        done = np.logical_or(terminated, truncated)
        reward = np.asarray(reward, dtype=np.float32)
        nxt = {"observation": next_obs, "reward": torch.from_numpy(reward.reshape(n, -1))}
        nxt["done"] = torch.from_numpy(done.reshape(n, 1))
        nxt["terminated"] = torch.from_numpy(np.asarray(terminated, dtype=bool).reshape(n, 1))
        nxt["truncated"] = torch.from_numpy(np.asarray(truncated, dtype=bool).reshape(n, 1))
        nxt["final_obs_missing"] = false
        set_entry(td, "next", new_td(nxt, batch, device))
        root = {"observation": root_obs, "done": false, "terminated": false, "truncated": false}
        state["td"] = new_td(root, batch, device)

    return step


def _steppers(raw: object, ours: gpu_envs.BatchedEnv, floor: object, n: int, actions: int) -> dict:
    action_np = (np.arange(n) % actions).astype(np.int64)
    action = torch.as_tensor(action_np)
    state = {"td": ours.reset(seed=0)}

    def ours_step() -> None:
        td = state["td"]
        td.set("action", action)
        state["td"] = ours.step_and_maybe_reset(td)[1]

    fns = {"raw": lambda: raw.step(action_np)}
    if floor is not None:
        first, read, _ = floor
        fns["floor"] = floor_stepper(first, read, n, action)
    fns["gpu_envs"] = ours_step
    return fns


def run(
    quick: bool = False, sizes: tuple[int, ...] = (8,), steps: int | None = None, rounds: int | None = None
) -> dict:
    """Time raw vs floor vs wrapped for every installed library; returns the table for ``gpu-envs bench``."""
    torch.set_num_threads(1)
    rows = []
    for name, package, build, actions in CASES:
        if importlib.util.find_spec(package) is None:
            continue
        for n in sizes:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw, ours, floor = build(n)
                fns = _steppers(raw, ours, floor, n, actions)
                per_round = steps or (max(20, 1000 // n) if quick else max(50, 4000 // n))
                times = interleave(fns, steps=per_round, rounds=rounds or (5 if quick else 15))
            for env in (raw, ours, *(() if floor is None else (floor[2],))):
                env.close()
            row = overhead_row(times, env=name, N=n)
            if floor is not None:
                met = times["gpu_envs"] <= (1 + TARGET) * times["raw"]
                row["target"] = "met" if met else "NOT met"
            rows.append(row)
    return bench_result("bench_inbound: inbound adapters vs the libraries' vector envs, cpu, 1 thread", rows, COLUMNS)


def main() -> None:
    sizes_main(__doc__, run, "inbound", [8])


if __name__ == "__main__":
    main()
