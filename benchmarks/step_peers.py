"""The built-in envs' default step loop next to gymnasium's own numpy vector envs (issue 25 item 2).

Contenders, each a loop of one step with a fresh random action per step (its draw included,
from each side's own generator), interleaved in one process, thread CPU time, one torch
thread, medians:

* ``gpu_envs``: ``gpu_envs.make(env_id, num_envs=N)`` with no flag, ``td.set("action", a)``
  and ``env.step_and_maybe_reset(td)``: what a user's hand-written loop costs;
* ``checks_off``: the same with ``health_checks=False`` (the default checks keep each
  step's tensors and scan them in batches: their share of the step);
* ``torch_step``: the default loop with the pure-torch step (``GPU_ENVS_NATIVE=0`` at
  construction; on a build without the native step, the same as ``gpu_envs``);
* ``gym_vector``: gymnasium's numpy-vectorised env of the same N, ``env.step(a)``:
  ``gym.make_vec("CartPole-v1", N, vectorization_mode="vector_entry_point")``
  (``CartPoleVectorEnv``), and for Pendulum-v1 (gymnasium has no vector Pendulum)
  :class:`NumpyPendulum` below, gymnasium's Pendulum physics vectorised the same way;
* ``sync1`` (N=1 only): ``gym.make_vec(env_id, 1, vectorization_mode="sync")``, gymnasium's
  ``SyncVectorEnv`` over one env.

Ratios: ``vs gym_vector`` is ``gym_vector / gpu_envs`` time (>= 1: gpu_envs is at least as
fast); ``vs sync1`` is ``gpu_envs / sync1`` time (target <= 1.5).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

import gpu_envs
from benchmarks.timing import env_var

SIZES = (1, 8, 64, 1024, 16384)
ENV_IDS = ("CartPole-v1", "Pendulum-v1")


class NumpyPendulum:
    """gymnasium's Pendulum-v1 for N rows in numpy (its float64 state), same-step auto-reset at 200 steps.

    Written the way gymnasium's ``CartPoleVectorEnv`` vectorises CartPole: one array op per
    term, ``(N,)`` arrays, the observation built per step.
    """

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.th = self.rng.uniform(-np.pi, np.pi, n)
        self.thdot = self.rng.uniform(-1.0, 1.0, n)
        self.steps = np.zeros(n, dtype=np.int32)

    def step(self, u: np.ndarray) -> tuple:
        u = np.clip(u.reshape(self.n), -2.0, 2.0)
        th, thdot = self.th, self.thdot
        angle = ((th + np.pi) % (2 * np.pi)) - np.pi
        cost = angle**2 + 0.1 * thdot**2 + 0.001 * u**2
        thdot = np.clip(thdot + (3 * 10.0 / 2 * np.sin(th) + 3.0 * u) * 0.05, -8.0, 8.0)
        th = th + thdot * 0.05
        self.steps += 1
        truncated = self.steps >= 200
        if truncated.any():
            k = int(truncated.sum())
            th[truncated] = self.rng.uniform(-np.pi, np.pi, k)
            thdot[truncated] = self.rng.uniform(-1.0, 1.0, k)
            self.steps[truncated] = 0
        self.th, self.thdot = th, thdot
        obs = np.stack((np.cos(th), np.sin(th), thdot), 1).astype(np.float32)
        return obs, -cost, np.zeros(self.n, dtype=bool), truncated, {}


def _torch_action(env_id: str, n: int, device: torch.device) -> Callable[[], torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(0)
    if env_id == "CartPole-v1":
        return lambda: torch.randint(0, 2, (n,), generator=g, device=device)
    return lambda: torch.empty(n, 1, device=device).uniform_(-2.0, 2.0, generator=g)  # one draw op, as numpy's


def _numpy_action(env_id: str, n: int, shape: tuple = ()) -> Callable[[], np.ndarray]:
    rng = np.random.default_rng(0)
    if env_id == "CartPole-v1":
        return lambda: rng.integers(0, 2, (n, *shape))
    return lambda: rng.uniform(-2.0, 2.0, (n, 1)).astype(np.float32)


def gpu_envs_loop(env_id: str, n: int, native: bool = True, **make) -> Callable[[], None]:
    """The default ``step_and_maybe_reset`` loop (``native=False``: built with ``GPU_ENVS_NATIVE=0``)."""
    with env_var("GPU_ENVS_NATIVE", None if native else "0"):
        env = gpu_envs.make(env_id, num_envs=n, seed=0, **make)
    state = {"td": env.reset()}
    draw = _torch_action(env_id, n, env.device)

    def step() -> None:
        td = state["td"]
        td.set("action", draw())
        state["td"] = env.step_and_maybe_reset(td)[1]

    return step


def gym_vector_loop(env_id: str, n: int) -> Callable[[], None]:
    if env_id == "CartPole-v1":
        env = gym.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point")
        env.reset(seed=0)
    else:
        env = NumpyPendulum(n)
    draw = _numpy_action(env_id, n)
    return lambda: env.step(draw())


def sync1_loop(env_id: str) -> Callable[[], None]:
    env = gym.make_vec(env_id, 1, vectorization_mode="sync")
    env.reset(seed=0)
    draw = _numpy_action(env_id, 1)
    return lambda: env.step(draw())


def contenders(env_id: str, n: int) -> dict[str, Callable[[], None]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = {
            "gpu_envs": gpu_envs_loop(env_id, n),
            "checks_off": gpu_envs_loop(env_id, n, health_checks=False),
            "torch_step": gpu_envs_loop(env_id, n, native=False),
            "gym_vector": gym_vector_loop(env_id, n),
        }
        if n == 1:
            out["sync1"] = sync1_loop(env_id)
    return out


COLUMNS = [
    ("env", "env"),
    ("N", "N"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("checks_off_us", "checks off us/step"),
    ("torch_step_us", "torch step us/step"),
    ("gym_vector_us", "gym vector us/step"),
    ("vs_gym_vector", "gym vector / gpu_envs"),
    ("checks_off_vs_gym_vector", "gym vector / checks off"),
    ("sync1_us", "SyncVectorEnv(1) us/step"),
    ("vs_sync1", "gpu_envs / sync1"),
]


def row_of(env_id: str, n: int, times: dict[str, float]) -> dict:
    row: dict = {"env": env_id, "N": n}
    for name, seconds in times.items():
        row[f"{name}_us"] = round(seconds * 1e6, 1)
    row["vs_gym_vector"] = f"{times['gym_vector'] / times['gpu_envs']:.2f}x"
    row["checks_off_vs_gym_vector"] = f"{times['gym_vector'] / times['checks_off']:.2f}x"
    if "sync1" in times:
        row["vs_sync1"] = f"{times['gpu_envs'] / times['sync1']:.2f}x"
    return row


# ----------------------------------------------------------------- to_gymnasium (issue 25 item 5)
ADAPTER_SIZES = (8, 64)


def adapter_contenders(n: int) -> dict[str, Callable[[], object]]:
    """``to_gymnasium(make("CartPole-v1", N))`` in each mode next to gymnasium's own vector envs, random actions."""
    from gpu_envs.interop import to_gymnasium

    def ours(arrays: str, mode: str) -> Callable[[], object]:
        envs = to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=n, seed=0), arrays=arrays, autoreset_mode=mode)
        envs.reset(seed=0)
        if arrays == "torch":
            draw_t = _torch_action("CartPole-v1", n, torch.device("cpu"))
            return lambda: envs.step(draw_t())
        draw = _numpy_action("CartPole-v1", n)
        return lambda: envs.step(draw())

    sync = gym.make_vec("CartPole-v1", n, vectorization_mode="sync")
    sync.reset(seed=0)
    vector = gym.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point")
    vector.reset(seed=0)
    draw_sync, draw_vector = _numpy_action("CartPole-v1", n), _numpy_action("CartPole-v1", n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "numpy_next": ours("numpy", "next_step"),
            "torch_next": ours("torch", "next_step"),
            "numpy_same": ours("numpy", "same_step"),
            "torch_same": ours("torch", "same_step"),
            "sync": lambda: sync.step(draw_sync()),
            "vector": lambda: vector.step(draw_vector()),
        }


ADAPTER_COLUMNS = [
    ("N", "N"),
    ("numpy_next_us", "numpy NEXT_STEP us"),
    ("torch_next_us", "torch NEXT_STEP us"),
    ("numpy_same_us", "numpy SAME_STEP us"),
    ("torch_same_us", "torch SAME_STEP us"),
    ("sync_us", "SyncVectorEnv us"),
    ("vector_us", "CartPoleVectorEnv us"),
    ("numpy_next_vs_sync", "SyncVectorEnv / numpy NEXT"),
    ("numpy_next_vs_vector", "CartPoleVectorEnv / numpy NEXT"),
    ("torch_vs_numpy", "torch NEXT / numpy NEXT"),
]


def adapter_row(n: int, times: dict[str, float]) -> dict:
    row: dict = {"N": n, **{f"{name}_us": round(s * 1e6, 1) for name, s in times.items()}}
    row["numpy_next_vs_sync"] = f"{times['sync'] / times['numpy_next']:.2f}x"
    row["numpy_next_vs_vector"] = f"{times['vector'] / times['numpy_next']:.2f}x"
    row["torch_vs_numpy"] = f"{times['torch_next'] / times['numpy_next']:.2f}x"
    return row
