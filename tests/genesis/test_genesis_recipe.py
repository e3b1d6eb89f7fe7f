"""examples/genesis_cartpole.py on Genesis, by DESIGN.md's physics method.

* the model is gymnasium's cart-pole: the recipe's MJCF in a ONE-env Genesis scene built here by
  hand, one control step from a state changes the velocities by gymnasium's closed-form
  accelerations (a uniform 1 m, 0.1 kg pole on a 1 kg cart) times 0.02 s;
* every transition follows the engine: teacher-forced, each row's observation before the step
  (the whole state) goes into that scene, which takes the same push and one control step; the
  env's next observation -- the TRUE final one on rows that ended -- must equal it (1e-5);
* final observations satisfy the ending condition (``|x| > 2.4`` or ``|theta| > 12 deg``) or the
  time limit, and only then; reset observations lie in the reset range ``[-0.05, 0.05)``; a
  final observation lies closer to the previous one than the reset one does (continuity), and
  rows that did not end carry their next observation into the next root unchanged;
* a masked reset writes its rows only; ``gpu_envs.check_env`` passes, and the example's LQR
  balancer keeps the poles up far longer than random pushes.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import genesis as gs
import pytest
import torch

import gpu_envs
from tests.example_files import load_example

pytestmark = pytest.mark.slow  # Genesis kernels (cached in ~/.cache/quadrants after the first run)

ROOT = Path(__file__).resolve().parents[2]
N, LIMIT, STEPS = 6, 25, 60
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def recipe():
    return load_example("genesis_cartpole")


class OneCartPole:
    """The recipe's MJCF in a Genesis scene of its own (one env), built and stepped by hand with Genesis' calls."""

    def __init__(self, recipe) -> None:
        recipe.init_genesis(CPU)
        self.scene = gs.Scene(sim_options=gs.options.SimOptions(dt=0.02, substeps=2), show_viewer=False)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "cartpole.xml"
            path.write_text(recipe.CARTPOLE_XML)
            self.cartpole = self.scene.add_entity(gs.morphs.MJCF(file=str(path), default_armature=None))
        self.scene.build(n_envs=1)

    def step(self, obs: torch.Tensor, push: int) -> torch.Tensor:
        """The observation one control step after ``obs`` ``(x, x_dot, theta, theta_dot)``, pushed right if ``push``."""
        self.cartpole.set_qpos(obs[0::2].view(1, 2))
        self.cartpole.set_dofs_velocity(obs[1::2].view(1, 2))
        self.cartpole.control_dofs_force(torch.tensor([[10.0 if push else -10.0]]), [0])
        self.scene.step()
        qpos, qvel = self.cartpole.get_qpos()[0], self.cartpole.get_dofs_velocity()[0]
        return torch.stack((qpos[0], qvel[0], qpos[1], qvel[1]))


def gymnasium_accelerations(obs: torch.Tensor, force: float) -> tuple[float, float]:
    """gymnasium CartPole's ``(x_acc, theta_acc)`` at ``obs`` (its equations, with Genesis' g = 9.81)."""
    _, _, theta, theta_dot = (float(v) for v in obs)
    total_mass, pole_mass, half_length = 1.1, 0.1, 0.5
    temp = (force + pole_mass * half_length * theta_dot**2 * math.sin(theta)) / total_mass
    theta_acc = (9.81 * math.sin(theta) - math.cos(theta) * temp) / (
        half_length * (4.0 / 3.0 - pole_mass * math.cos(theta) ** 2 / total_mass)
    )
    return temp - pole_mass * half_length * theta_acc * math.cos(theta) / total_mass, theta_acc


def test_one_genesis_step_has_gymnasiums_cart_pole_dynamics(recipe):
    one = OneCartPole(recipe)
    gen = torch.Generator().manual_seed(0)
    for _ in range(8):
        obs = (torch.rand(4, generator=gen) * 2 - 1) * torch.tensor([1.0, 0.5, 0.15, 0.5])
        push = int(torch.randint(2, (1,), generator=gen))
        x_acc, theta_acc = gymnasium_accelerations(obs, 10.0 if push else -10.0)
        after = one.step(obs, push)
        # the velocities change by the accelerations over the 0.02 s step (both change a little within it)
        assert float(after[1] - obs[1]) / recipe.DT == pytest.approx(x_acc, rel=0.01, abs=0.02)
        assert float(after[3] - obs[3]) / recipe.DT == pytest.approx(theta_acc, rel=0.01, abs=0.02)


def test_transitions_follow_genesis_stepped_by_hand_and_episodes_end_where_they_should(recipe):
    env = gpu_envs.wrap(recipe.GenesisCartPole(num_envs=N, device="cpu", max_episode_steps=LIMIT), seed=1)
    one = OneCartPole(recipe)
    root = env.reset()
    assert (root["observation"].abs() <= 0.05).all()
    gen = torch.Generator().manual_seed(2)
    balanced = torch.arange(N) < N // 2  # these rows balance (and reach the time limit), the others push at random
    lengths = torch.zeros(N, dtype=torch.long)
    ended = {"terminated": 0, "truncated": 0}
    for _ in range(STEPS):
        before = root["observation"].clone()
        lqr = recipe.lqr_policy(root.clone())["action"]
        action = torch.where(balanced, lqr, torch.randint(2, (N,), generator=gen))
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        lengths += 1
        final = td["next", "observation"]
        for i in range(N):  # each row in its own scene, from the same state and with the same push
            torch.testing.assert_close(final[i], one.step(before[i], int(action[i])), atol=1e-5, rtol=0)
        terminated, truncated = td["next", "terminated"].view(-1), td["next", "truncated"].view(-1)
        outside = (final[:, 0].abs() > recipe.X_LIMIT) | (final[:, 2].abs() > recipe.ANGLE_LIMIT)
        assert torch.equal(terminated, outside)
        assert torch.equal(truncated, ~outside & (lengths == LIMIT))
        done = terminated | truncated
        fresh = root["observation"]
        assert (fresh[done].abs() <= 0.05).all()  # fresh episodes: the reset range
        assert torch.equal(fresh[~done], final[~done])  # the other rows untouched by the masked reset
        # continuity: the final position is one step from the previous one, the reset one is a new episode
        moved = (final - before)[:, 0::2].abs().amax(1)
        jumped = (fresh - before)[:, 0::2].abs().amax(1)
        assert (moved[terminated] < jumped[terminated]).all()
        lengths[done] = 0
        ended["terminated"] += int(terminated.sum())
        ended["truncated"] += int(truncated.sum())
    assert ended["terminated"] >= 5 and ended["truncated"] >= N // 2, ended


def test_a_masked_reset_writes_only_its_rows(recipe):
    env = gpu_envs.wrap(recipe.GenesisCartPole(num_envs=4, device="cpu"), seed=3)
    root = env.reset()
    for _ in range(10):  # move every row out of the reset range
        root["action"] = torch.ones(4, dtype=torch.long)
        _, root = env.step_and_maybe_reset(root)
    before = root["observation"].clone()
    assert (before.abs().amax(1) > 0.05).all()
    mask = torch.tensor([[True], [False], [True], [False]])
    after = env.reset(td=root.set("_reset", mask))["observation"]
    assert torch.equal(after[[1, 3]], before[[1, 3]])
    assert (after[[0, 2]].abs() <= 0.05).all()


def test_check_env_passes_and_the_lqr_balancer_beats_random_pushes(recipe):
    result = recipe.main(num_envs=8, steps=150)
    assert result["check_env"]
    assert result["lqr"] == 0.0 and result["random"] >= 3.0, result  # random episodes last ~20 steps


def test_the_recipe_benchmark_times_the_engine_the_env_and_gpu_envs():
    sys.path.insert(0, str(ROOT))
    from benchmarks import bench_engine_recipes

    (row,) = bench_engine_recipes.run("genesis", sizes=(8,), steps=2, rounds=1)["rows"]
    assert row["raw_us"] > 0 and row["hand_us"] > 0 and row["base_us"] > 0 and row["gpu_envs_us"] > 0
