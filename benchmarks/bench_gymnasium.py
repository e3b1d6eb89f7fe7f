"""Overhead of the gymnasium backend over raw gymnasium (issue: CPU fallback, <= 30% / 10%).

CartPole-v1 in a gymnasium ``SyncVectorEnv`` with SAME_STEP auto-reset, at N in {8, 256}:

(a) raw: ``venv.step(action)`` with a fixed numpy action, on the vector env built by
    ``gym.make_vec(..., vectorization_mode="sync", vector_kwargs={"autoreset_mode": SAME_STEP})`` (gymnasium's
    defaults otherwise);
(b) gpu_envs: ``gpu_envs.make("CartPole-v1", N, device="cpu", backend="gymnasium")``
    with a fixed action tensor and ``step_and_maybe_reset`` (final observations, done
    flags and TensorDicts included);
(c) torchrl: ``GymWrapper`` over the same kind of vector env, ``step_and_maybe_reset``,
    when torchrl is installed;
(d) gym_lean: the raw loop on a vector env built the way ``gpu_envs.make`` builds its
    own (``copy=False``, no ``PassiveEnvChecker`` layer), to show how much of (b) is
    the construction and how much the wrapper;
(e) floor: that lean vector env plus ONLY the work the contract needs, in the same
    run: the action as numpy, the final observations of ended rows swapped into a copy
    of the observations (numpy), one ``from_numpy`` per leaf (root and next
    observations, reward as float32 ``[N, 1]``, the three flags ``[N, 1]``), the two
    TensorDicts and the caller's ``td.set``: the limit of any wrapper over this env;
(f) guarded floor: (e) plus the per-step guards gpu_envs' contract keeps on every
    step of every backend, written inline: the action's metadata (type, shape, dtype,
    device) compared with the spec's, the call guard (refuse while a call is
    unfinished, the call number a second thread would change) and the stale-input
    check (the root's stamp read, the next root and ``td["next"]`` stamped). Its
    distance to (e) is what those checks cost; gpu_envs' distance to (f) is the rest
    of the wrapper (its layers, the backend's own bookkeeping).

Time is thread CPU time, ``torch.set_num_threads(1)``, interleaved rounds in one
process, medians.

    python -m benchmarks.bench_gymnasium --json benchmarks/results/gymnasium.json
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np

if __package__ in (None, ""):  # run as a script: our benchmarks package, not torchrl's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from tensordict import TensorDict

import gpu_envs
from benchmarks.timing import interleave, overhead_row, sizes_main
from gpu_envs.utils.tensordicts import fast_entries, new_td, set_entry, stamp, stamp_of

SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
COLUMNS = [
    ("N", "N"),
    ("raw_us", "raw us/step"),
    ("floor_us", "floor us/step"),
    ("floor_overhead", "floor overhead"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("gpu_envs_overhead", "gpu_envs overhead"),
    ("gpu_envs_vs_floor", "gpu_envs - floor"),
    ("guarded_floor_us", "guarded floor us/step"),
    ("gpu_envs_vs_guarded_floor", "gpu_envs - guarded floor"),
    ("torchrl_us", "torchrl us/step"),
    ("torchrl_overhead", "torchrl overhead"),
    ("gym_lean_us", "raw, gpu_envs' build us/step"),
    ("gym_lean_overhead", "vs raw"),
]


def _raw_venv(n: int, lean: bool = False) -> gym.vector.VectorEnv:
    vector_kwargs = {"autoreset_mode": SAME_STEP, **({"copy": False} if lean else {})}
    extra = {"disable_env_checker": True} if lean else {}
    return gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync", vector_kwargs=vector_kwargs, **extra)


def floor_step_fn(n: int, action: torch.Tensor, guards: bool = False) -> tuple:
    """The lean vector env + numpy final-obs swap + one from_numpy per leaf + two TensorDicts + td.set.

    ``guards``: with the contract's per-step checks written inline (the module's (f)).
    """
    venv = _raw_venv(n, lean=True)
    obs, _ = venv.reset(seed=0)
    batch, device = torch.Size([n]), torch.device("cpu")
    false = torch.zeros(n, 1, dtype=torch.bool)
    root = {"observation": torch.from_numpy(obs.copy()), "done": false, "terminated": false, "truncated": false}
    state = {"td": new_td(root, batch, device), "pending": None, "calls": 0, "stamp": 0}
    shape, dtype = action.shape, action.dtype

    def guard_in(td: TensorDict) -> int:
        """The checks before the env moves: unfinished call, stale input, action metadata."""
        if state["pending"] is not None:
            raise RuntimeError("an earlier call did not finish")
        dated = stamp_of(td)
        if dated is not None and dated != state["stamp"]:
            raise RuntimeError("stale input")
        act = fast_entries(td)["action"]
        if act.__class__ is not torch.Tensor or act.shape != shape or act.dtype is not dtype or act.device != device:
            raise RuntimeError("bad action")
        state["pending"] = "step"
        call = state["calls"] = state["calls"] + 1
        return call

    def step() -> None:
        td = state["td"]
        td.set("action", action)
        call = guard_in(td) if guards else 0
        obs, reward, terminated, truncated, info = venv.step(action.numpy())
        done = np.logical_or(terminated, truncated)
        root_obs = torch.from_numpy(obs.copy())
        next_obs = root_obs
        if "final_obs" in info:
            swapped = obs.copy()
            final = info["final_obs"]
            for i in np.flatnonzero(info["_final_obs"]).tolist():
                swapped[i] = final[i]
            next_obs = torch.from_numpy(swapped)
        nxt = {"observation": next_obs, "reward": torch.from_numpy(reward.astype(np.float32).reshape(n, 1))}
        nxt["done"] = torch.from_numpy(done.reshape(n, 1))
        nxt["terminated"] = torch.from_numpy(terminated.reshape(n, 1))
        nxt["truncated"] = torch.from_numpy(truncated.reshape(n, 1))
        nxt["final_obs_missing"] = false
        following = new_td(nxt, batch, device)
        set_entry(td, "next", following)
        root = {"observation": root_obs, "done": false, "terminated": false, "truncated": false}
        state["td"] = new_td(root, batch, device)
        if guards:  # date the outputs, release the guard (refused if another thread stepped meanwhile)
            state["stamp"] = number = state["stamp"] + 1
            stamp(following, -number)
            stamp(state["td"], number)
            if state["calls"] != call:
                raise RuntimeError("overlapping calls")
            state["pending"] = None

    return step, venv


def contenders(n: int) -> tuple[dict, list]:
    """The step functions to time, and the envs to close afterwards."""
    action_np = (np.arange(n) % 2).astype(np.int64)
    action = torch.as_tensor(action_np)

    raw = _raw_venv(n)
    raw.reset(seed=0)

    ours = gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", backend="gymnasium", seed=0)
    state = {"ours": ours.reset()}

    def ours_step() -> None:
        td = state["ours"]
        td.set("action", action)
        state["ours"] = ours.step_and_maybe_reset(td)[1]

    lean = _raw_venv(n, lean=True)
    lean.reset(seed=0)
    floor, floor_venv = floor_step_fn(n, action)
    guarded_floor, guarded_venv = floor_step_fn(n, action, guards=True)
    out = {
        "raw": lambda: raw.step(action_np),
        "floor": floor,
        "guarded_floor": guarded_floor,
        "gpu_envs": ours_step,
        "gym_lean": lambda: lean.step(action_np),
    }
    envs = [raw, ours, lean, floor_venv, guarded_venv]
    if importlib.util.find_spec("torchrl") is not None:
        from torchrl.envs import GymWrapper

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = GymWrapper(_raw_venv(n), categorical_action_encoding=True, device="cpu")
            state["torchrl"] = theirs.reset()

        def torchrl_step() -> None:
            td = state["torchrl"]
            td.set("action", action)
            state["torchrl"] = theirs.step_and_maybe_reset(td)[1]

        out["torchrl"] = torchrl_step
        envs.append(theirs)
    return out, envs


def run(
    quick: bool = False, sizes: tuple[int, ...] = (8, 256), steps: int | None = None, rounds: int | None = None
) -> dict:
    """Time every contender at each N; returns the table for ``gpu-envs bench``."""
    torch.set_num_threads(1)
    rows = []
    for n in sizes:
        per_round = steps or (max(20, 4000 // n) if quick else max(50, 40000 // n))
        fns, envs = contenders(n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            times = interleave(fns, steps=per_round, rounds=rounds or (5 if quick else 21))
        for env in envs:
            env.close()
        rows.append(overhead_row(times, N=n))
    columns = [c for c in COLUMNS if any(c[0] in r for r in rows)]
    return {
        "title": "bench_gymnasium: CartPole-v1 SyncVectorEnv (SAME_STEP) on cpu, 1 thread",
        "rows": rows,
        "columns": columns,
    }


def main() -> None:
    sizes_main(__doc__, run, "gymnasium", [8, 256])


if __name__ == "__main__":
    main()
