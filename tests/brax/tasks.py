"""Brax 0.14.2 and MuJoCo Playground 0.2.0 (JAX on the CPU), built for gpu_envs' tests.

Import this module first in every test module of the tier: where Brax is missing (the
main suite) it skips the module with the reason and the command that runs the tier;
under ``GPU_ENVS_REQUIRE_BRAX=1`` (what ``scripts/test.sh`` sets when it runs the tier in
its venv) a missing Brax is an error, never a skip::

    VENV=$(scripts/simulator_venv.sh brax | tail -n 1)
    GPU_ENVS_REQUIRE_BRAX=1 PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -m "slow or not slow" tests/brax

The oracle (:func:`reference`) is the unbatched env itself, jitted and stepped one row
at a time with the key chain gpu_envs gives row ``i`` (``fold_in(PRNGKey(seed), i)``,
``key, sub = split(key)`` before every reset), reset by hand when the episode ends (the
env's ``done``) or reaches ``episode_length`` -- what gpu_envs' batched, jitted, same-step
auto-reset must reproduce row by row. JIT compiling a Brax or MJX step takes tens of
seconds on a CPU, so each test module builds its batched env once (module fixtures).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("GPU_ENVS_REQUIRE_BRAX") != "1":
    pytest.importorskip(
        "brax",
        reason="the Brax / Playground tier runs in its own venv: VENV=$(scripts/simulator_venv.sh brax | tail -n 1) && "
        'PYTHONPATH=$PWD "$VENV/bin/python" -m pytest tests/brax',
    )

import jax
import jax.numpy as jnp


def reference(
    env, actions: np.ndarray, seed: int, episode_length: int, rows: list[int] | None = None, jit: bool = True
) -> dict[str, np.ndarray]:
    """N unbatched envs stepped one by one (``actions`` ``[N, T, A]``), reset by hand at the end of an episode.

    Returns ``[N, T, ...]`` arrays: ``observation``, ``next_observation`` (the TRUE final
    observation where an episode ended), ``root`` (the next step's input), ``reward``,
    ``terminated``, ``truncated``. ``rows`` picks the rows (their indices give their key
    chains; default all); ``jit=False`` for an env whose methods are jitted already.
    """
    reset, step = (jax.jit(env.reset), jax.jit(env.step)) if jit else (env.reset, env.step)
    n, steps = actions.shape[:2]
    out: dict[str, list] = {
        k: [] for k in ("observation", "next_observation", "root", "reward", "terminated", "truncated")
    }
    for i in range(n) if rows is None else rows:
        row: dict[str, list] = {k: [] for k in out}
        key = jax.random.fold_in(jax.random.PRNGKey(seed), i)
        key, sub = jax.random.split(key)
        state, elapsed = reset(sub), 0
        for t in range(steps):
            row["observation"].append(np.asarray(state.obs))
            state = step(state, jnp.asarray(actions[i, t], jnp.float32))
            elapsed += 1
            terminated = bool(state.done != 0)
            truncated = elapsed >= episode_length and not terminated
            row["next_observation"].append(np.asarray(state.obs))
            row["reward"].append(float(state.reward))
            row["terminated"].append(terminated)
            row["truncated"].append(truncated)
            if terminated or truncated:
                key, sub = jax.random.split(key)
                state, elapsed = reset(sub), 0
            row["root"].append(np.asarray(state.obs))
        for k, v in row.items():
            out[k].append(np.stack(v))
    return {k: np.stack(v) for k, v in out.items()}


def batched(env, actions: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """The same keys from a gpu_envs env's ``step_and_maybe_reset``."""
    import torch

    td = env.reset(seed=seed)
    got: dict[str, list] = {}
    for t in range(actions.shape[1]):
        td["action"] = torch.as_tensor(actions[:, t], dtype=torch.float32)
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        for name, value in (
            ("observation", td["observation"]),
            ("next_observation", nxt["observation"]),
            ("root", root["observation"]),
            ("reward", nxt["reward"].squeeze(-1)),
            ("terminated", nxt["terminated"].squeeze(-1)),
            ("truncated", nxt["truncated"].squeeze(-1)),
            ("final_obs_missing", nxt["final_obs_missing"].squeeze(-1)),
        ):
            got.setdefault(name, []).append(value.clone())
        td = root
    import torch

    return {k: torch.stack(v, dim=1).numpy() for k, v in got.items()}


def assert_matches(got: dict, want: dict, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Flags equal; floats equal up to the rounding a vmapped XLA computation may change."""
    for key in ("terminated", "truncated"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    for key in ("observation", "next_observation", "root", "reward"):
        np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=atol, err_msg=key)
    assert not got["final_obs_missing"].any()


def smooth_actions(levels, steps: int, size: int) -> np.ndarray:
    """Row ``i`` holds ``levels[i]`` on every step (smooth: the last-action terms hide nothing)."""
    return np.repeat(np.asarray(levels, np.float32)[:, None, None], steps, axis=1).repeat(size, axis=2)
