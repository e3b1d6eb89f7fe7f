"""examples/newton_pendulum.py on Newton, by DESIGN.md's physics method.

* every transition follows the engine: teacher-forced, each row's joint state before the
  step goes into a ONE-world Newton model of the same rod, which takes the same clipped
  torque and the same five Featherstone substeps by hand; the env's next observation -- the
  TRUE final one on rows that ended -- and reward must equal it (1e-5);
* episodes end only at the 200-step-style time limit (here ``LIMIT`` steps), exactly
  ``LIMIT`` steps after each reset; reset observations lie in gymnasium's Pendulum reset range;
* ``gpu_envs.check_env`` passes, and the example's swing-up controller beats random torques.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import newton
import pytest
import torch
import warp as wp

import gpu_envs
from tests.example_files import load_example

pytestmark = pytest.mark.slow  # Warp kernels (cached in ~/.cache/warp after the first run)

ROOT = Path(__file__).resolve().parents[2]
N, LIMIT = 8, 12


@pytest.fixture(scope="module")
def recipe():
    return load_example("newton_pendulum")


class OneRod:
    """One world of the same rod, stepped by hand."""

    def __init__(self, recipe) -> None:
        self.recipe = recipe
        self.model = recipe.pendulum_model(1, "cpu")
        self.solver = newton.solvers.SolverFeatherstone(self.model)
        self.now, self.next = self.model.state(), self.model.state()
        self.control = self.model.control()

    def step(self, q: float, qd: float, torque: float) -> tuple[float, float]:
        wp.to_torch(self.now.joint_q).fill_(q)
        wp.to_torch(self.now.joint_qd).fill_(qd)
        wp.to_torch(self.control.joint_f).fill_(max(-2.0, min(2.0, torque)))
        for _ in range(self.recipe.SUBSTEPS):
            self.now.clear_forces()
            self.solver.step(self.now, self.next, self.control, None, self.recipe.SUBSTEP_DT)
            self.now.assign(self.next)
        return float(wp.to_torch(self.now.joint_q)[0]), max(-8.0, min(8.0, float(wp.to_torch(self.now.joint_qd)[0])))


def test_transitions_follow_newton_stepped_by_hand_and_episodes_end_at_the_limit(recipe):
    task = recipe.NewtonPendulum(num_envs=N, device="cpu", max_episode_steps=LIMIT)
    env = gpu_envs.wrap(task, seed=3)
    rod = OneRod(recipe)
    root = env.reset()
    gen = torch.Generator().manual_seed(4)
    lengths = torch.zeros(N, dtype=torch.long)
    ended = 0
    for _ in range(40):
        q, qd = task.q.clone(), task.qd.clone()
        action = torch.rand(N, 1, generator=gen) * 6 - 3  # beyond the torque limit on purpose: the clip is physics
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        lengths += 1
        for i in range(N):
            q_next, qd_next = rod.step(float(q[i]), float(qd[i]), float(action[i]))
            theta = math.remainder(q_next - math.pi, 2 * math.pi)
            want = torch.tensor([math.cos(theta), math.sin(theta), qd_next])
            torch.testing.assert_close(td["next", "observation"][i], want, atol=1e-5, rtol=0)
            theta0 = math.remainder(float(q[i]) - math.pi, 2 * math.pi)
            u = max(-2.0, min(2.0, float(action[i])))
            reward = -(theta0**2 + 0.1 * float(qd[i]) ** 2 + 0.001 * u**2)
            assert float(td["next", "reward"][i]) == pytest.approx(reward, abs=1e-4)
        truncated = td["next", "truncated"].view(-1)
        assert not td["next", "terminated"].any()
        assert torch.equal(truncated, lengths == LIMIT)
        fresh = root["observation"][truncated]
        assert (fresh[:, 2].abs() <= 1.0).all()  # theta_dot in [-1, 1); theta anywhere on the circle
        lengths[truncated] = 0
        ended += int(truncated.sum())
    assert ended == N * (40 // LIMIT)


def test_check_env_passes_and_the_controller_swings_up(recipe):
    result = recipe.main(num_envs=16)
    assert result["check_env"]
    assert result["controlled"] > result["random"] + 2.0, result


def test_the_recipe_benchmark_times_the_engine_the_env_and_gpu_envs():
    sys.path.insert(0, str(ROOT))
    from benchmarks import bench_engine_recipes

    (row,) = bench_engine_recipes.run("newton", sizes=(8,), steps=2, rounds=1)["rows"]
    assert row["raw_us"] > 0 and row["hand_us"] > 0 and row["base_us"] > 0 and row["gpu_envs_us"] > 0
