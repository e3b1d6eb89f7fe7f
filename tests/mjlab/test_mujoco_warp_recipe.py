"""examples/mujoco_warp_cartpole.py: a task on MuJoCo Warp built on gpu_envs.SimulatorEnv, by DESIGN.md's physics method.

Runs in the mjlab tier's venv (it has ``mujoco`` and ``mujoco-warp``):

* every transition follows the engine: teacher-forced, each row's state before the step is
  copied into classic MuJoCo (``mujoco.MjData``, float64 on the CPU), given the same control
  and stepped ``FRAME_SKIP`` times; the env's next observation -- the TRUE final one on rows
  that ended -- must equal it (float32 vs float64: 1e-4);
* final observations satisfy the ending condition (``|x| > 2.4`` or ``|theta| > 12 deg``) or the
  time limit, and only then; reset observations lie in the reset range ``[-0.05, 0.05)``;
* ``gpu_envs.check_env`` passes, and the cross-entropy search of the example learns to keep
  the poles up (fewer episode ends per row than its first, random controllers).
"""

from __future__ import annotations

import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

import gpu_envs
from tests.example_files import load_example

pytestmark = pytest.mark.slow  # MuJoCo Warp kernels (cached in ~/.cache/warp after the first run)

ROOT = Path(__file__).resolve().parents[2]
N, LIMIT = 16, 40


@pytest.fixture(scope="module")
def recipe():
    return load_example("mujoco_warp_cartpole")


def test_transitions_follow_classic_mujoco_and_episodes_end_where_they_should(recipe):
    task = recipe.MuJoCoWarpCartPole(num_envs=N, device="cpu", max_episode_steps=LIMIT)
    env = gpu_envs.wrap(task, seed=1)
    data = mujoco.MjData(task.mj_model)
    root = env.reset()
    assert (root["observation"].abs() <= 0.05).all()
    gen = torch.Generator().manual_seed(2)
    ended = {"terminated": 0, "truncated": 0}
    for _ in range(120):
        qpos, qvel = task.qpos.double().numpy().copy(), task.qvel.double().numpy().copy()
        action = torch.rand(N, 1, generator=gen) * 2 - 1
        elapsed = task.elapsed_steps.clone()
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        want = np.zeros((N, 4))
        for i in range(N):  # each row in classic MuJoCo from the same state and control
            mujoco.mj_resetData(task.mj_model, data)
            data.qpos[:], data.qvel[:], data.ctrl[:] = qpos[i], qvel[i], float(action[i])
            for _ in range(recipe.FRAME_SKIP):
                mujoco.mj_step(task.mj_model, data)
            want[i] = np.concatenate([data.qpos, data.qvel])
        final = td["next", "observation"]
        np.testing.assert_allclose(final.double().numpy(), want, rtol=0, atol=1e-4)
        terminated, truncated = td["next", "terminated"].view(-1), td["next", "truncated"].view(-1)
        outside = (final[:, 0].abs() > recipe.X_LIMIT) | (final[:, 1].abs() > recipe.ANGLE_LIMIT)
        assert torch.equal(terminated, outside)
        assert torch.equal(truncated, ~outside & (elapsed + 1 >= LIMIT))
        done = terminated | truncated
        assert (root["observation"][done].abs() <= 0.05).all()  # fresh episodes: the reset range
        assert torch.equal(root["observation"][~done], final[~done])
        ended["terminated"] += int(terminated.sum())
        ended["truncated"] += int(truncated.sum())
    assert ended["terminated"] > 10 and ended["truncated"] > 0, ended


def test_check_env_passes_and_the_example_learns(recipe):
    result = recipe.main(num_envs=64)
    assert result["check_env"]
    ends = result["ends"]
    assert ends[-1] < 0.5 * ends[0], ends  # the poles stay up: fewer ends per row than the random start


def test_the_recipe_benchmark_times_the_engine_the_env_and_gpu_envs():
    sys.path.insert(0, str(ROOT))
    from benchmarks import bench_engine_recipes

    (row,) = bench_engine_recipes.run("mujoco_warp", sizes=(8,), steps=2, rounds=1)["rows"]
    assert row["raw_us"] > 0 and row["hand_us"] > 0 and row["base_us"] > 0 and row["gpu_envs_us"] > 0
