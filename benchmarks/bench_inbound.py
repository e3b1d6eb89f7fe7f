"""Overhead of the inbound adapters over the libraries' own vector envs stepped raw.

For each library (skipped when not installed), at N = 8 by default:

* sb3: ``DummyVecEnv`` of gymnasium CartPole-v1, ``venv.step(actions)`` vs
  ``gpu_envs.wrap(venv)`` and ``step_and_maybe_reset`` (TensorDicts, true final obs);
* legacy_gym: gym 0.26 ``SyncVectorEnv`` of gym's CartPole-v1, the same way;
* mo_gymnasium: ``MOSyncVectorEnv`` of deep-sea-treasure-v0 (rewards ``[N, 2]``);
* minigrid: gymnasium ``SyncVectorEnv`` (SAME_STEP) of MiniGrid-Empty-8x8-v0 raw (the
  mission left as text) vs ``gpu_envs.make`` (mission as bytes).

Each contender steps a fixed action; interleaved rounds in one process,
``torch.set_num_threads(1)``.

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
from benchmarks.timing import bench_result, interleave, sizes_main

COLUMNS = [
    ("env", "env"),
    ("N", "N"),
    ("raw_us", "raw us/step"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("gpu_envs_overhead", "gpu_envs overhead"),
]


def _sb3(n: int) -> tuple[object, object]:
    from stable_baselines3.common.vec_env import DummyVecEnv

    def build() -> object:
        return DummyVecEnv([lambda: gym.make("CartPole-v1")] * n)

    raw = build()
    raw.seed(0)  # SB3: seeds apply at the next reset, which takes no seed
    raw.reset()
    return raw, gpu_envs.wrap(build(), device="cpu")


def _legacy_gym(n: int) -> tuple[object, object]:
    import gym as old_gym

    def build() -> object:
        return old_gym.vector.SyncVectorEnv([lambda: old_gym.make("CartPole-v1", disable_env_checker=True)] * n)

    raw = build()
    raw.reset(seed=0)
    return raw, gpu_envs.wrap(build(), device="cpu")


def _mo_gymnasium(n: int) -> tuple[object, object]:
    import mo_gymnasium
    from mo_gymnasium.wrappers.vector import MOSyncVectorEnv

    raw = MOSyncVectorEnv([lambda: mo_gymnasium.make("deep-sea-treasure-v0")] * n)
    raw.reset(seed=0)
    return raw, gpu_envs.make("deep-sea-treasure-v0", num_envs=n, device="cpu")


def _minigrid(n: int) -> tuple[object, object]:
    import minigrid  # noqa: F401  (registers the ids)

    raw = gym.make_vec(
        "MiniGrid-Empty-8x8-v0",
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    raw.reset(seed=0)
    return raw, gpu_envs.make("MiniGrid-Empty-8x8-v0", num_envs=n, device="cpu")


# (row name, package that must be installed, builder of (raw vector env, reset; wrapped BatchedEnv), action count)
CASES: list[tuple[str, str, Callable[[int], tuple[object, object]], int]] = [
    ("sb3 DummyVecEnv CartPole-v1", "stable_baselines3", _sb3, 2),
    ("gym 0.26 SyncVectorEnv CartPole-v1", "gym", _legacy_gym, 2),
    ("MOSyncVectorEnv deep-sea-treasure-v0", "mo_gymnasium", _mo_gymnasium, 4),
    ("MiniGrid-Empty-8x8-v0 (SAME_STEP)", "minigrid", _minigrid, 3),
]


def _steppers(raw: object, ours: gpu_envs.BatchedEnv, n: int, actions: int) -> dict:
    action_np = (np.arange(n) % actions).astype(np.int64)
    action = torch.as_tensor(action_np)
    state = {"td": ours.reset(seed=0)}

    def ours_step() -> None:
        td = state["td"]
        td.set("action", action)
        state["td"] = ours.step_and_maybe_reset(td)[1]

    return {"raw": lambda: raw.step(action_np), "gpu_envs": ours_step}


def run(quick: bool = False, sizes: tuple[int, ...] = (8,), steps: int | None = None, rounds: int | None = None) -> dict:
    """Time raw vs wrapped for every installed library; returns the table for ``gpu-envs bench``."""
    torch.set_num_threads(1)
    rows = []
    for name, package, build, actions in CASES:
        if importlib.util.find_spec(package) is None:
            continue
        for n in sizes:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw, ours = build(n)
                fns = _steppers(raw, ours, n, actions)
                per_round = steps or (max(20, 1000 // n) if quick else max(50, 4000 // n))
                times = interleave(fns, steps=per_round, rounds=rounds or (5 if quick else 15))
            raw.close()
            ours.close()
            rows.append(
                {
                    "env": name,
                    "N": n,
                    "raw_us": round(times["raw"] * 1e6, 1),
                    "gpu_envs_us": round(times["gpu_envs"] * 1e6, 1),
                    "gpu_envs_overhead": f"{times['gpu_envs'] / times['raw'] - 1:+.1%}",
                }
            )
    return bench_result("bench_inbound: inbound adapters vs the libraries' vector envs, cpu, 1 thread", rows, COLUMNS)


def main() -> None:
    sizes_main(__doc__, run, "inbound", [8])


if __name__ == "__main__":
    main()
