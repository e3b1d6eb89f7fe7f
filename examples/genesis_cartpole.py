"""gymnasium's CartPole-v1 on Genesis, built on gpu_envs.SimulatorEnv: the engine steps, gpu_envs does the env.

Genesis (``genesis-world``) simulates N copies of a scene in one batched solver
(``scene.build(n_envs=N)``) and reads and writes their joint states as torch tensors, but
its tasks (rsl_rl-style, as its locomotion examples) reset rows inside ``step`` and lose the
final observation. Here the task is a handful of methods on :class:`gpu_envs.SimulatorEnv`:
a 1 kg cart on a rail and a uniform 0.1 kg, 1 m pole on a hinge, written as MJCF by this file
(no assets to download), pushed with +-10 N per env (``control_dofs_force``), one 0.02 s
control step of two substeps; observation ``(x, x_dot, theta, theta_dot)``, reward 1 per step,
termination at ``|x| > 2.4`` or ``|theta| > 12`` degrees, resets uniform in ``[-0.05, 0.05]``,
500-step episodes: gymnasium's CartPole-v1. Resets write only the ended rows, by a bool mask
(``set_qpos(..., envs_idx=rows)``: Genesis' masked kernels, no row index read on the host).
gpu_envs adds the time limit, the same-step auto-reset with the true final observation, masked
resets, per-row seeds and everything downstream. Genesis' default rotor inertia
(``default_armature=0.1``) is turned off, since gymnasium's cart-pole has none.

Needs ``genesis-world`` (the Genesis tier's venv: ``VENV=$(scripts/simulator_venv.sh genesis | tail -n 1)``).
The first run on a machine compiles Genesis' kernels (about 30 s on 2 cores, cached in
``~/.cache/quadrants`` for later runs). Run::

    PYTHONPATH=$PWD "$VENV/bin/python" examples/genesis_cartpole.py
"""

from __future__ import annotations

import math
import os
import tempfile

import genesis as gs
import gymnasium
import numpy as np
import torch

import gpu_envs
from gpu_envs.rollout import collect

CARTPOLE_XML = """
<mujoco model="cartpole">
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.2 0.1 0.05" mass="1.0" contype="0" conaffinity="0"/>
      <body name="pole">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <geom type="cylinder" fromto="0 0 0 0 0 1.0" size="0.02" mass="0.1" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
DT, SUBSTEPS = 0.02, 2  # gymnasium's CartPole control step, in two solver substeps
FORCE_MAG = 10.0
X_LIMIT, ANGLE_LIMIT = 2.4, 12 * 2 * math.pi / 360  # gymnasium's CartPole ends there
SLIDER = [0]  # the cart's dof (the pole's hinge is dof 1)
LQR_GAINS = (10.0, 17.2, 106.9, 28.2)  # LQR of the linearised cart-pole (Q = diag(1, 1, 10, 1), R = 0.01)


def init_genesis(device: torch.device) -> None:
    """``gs.init`` on the backend of ``device``, once per process (Genesis refuses a second ``init``)."""
    try:
        gs.init(backend=gs.cpu if device.type == "cpu" else gs.gpu, logging_level="warning")
    except gs.GenesisException as error:
        if "already initialized" not in str(error):
            raise


def cartpole_scene(num_envs: int, device: torch.device) -> tuple[gs.Scene, object]:
    """One Genesis scene of ``num_envs`` cart-poles, built; returns ``(scene, cart-pole entity)``."""
    init_genesis(device)
    scene = gs.Scene(sim_options=gs.options.SimOptions(dt=DT, substeps=SUBSTEPS), show_viewer=False)
    with tempfile.TemporaryDirectory() as folder:  # Genesis parses the file when the entity is added
        path = os.path.join(folder, "cartpole.xml")
        with open(path, "w") as file:
            file.write(CARTPOLE_XML)
        cartpole = scene.add_entity(gs.morphs.MJCF(file=path, default_armature=None))
    scene.build(n_envs=num_envs)
    return scene, cartpole


class GenesisCartPole(gpu_envs.SimulatorEnv):
    """Observation ``(x, x_dot, theta, theta_dot)``; action 0 / 1: push left / right with 10 N; reward 1 per step."""

    reset_noise = 4  # x, x_dot, theta, theta_dot uniform in [-0.05, 0.05), as gymnasium's CartPole
    default_max_episode_steps = 500

    def setup(self) -> None:
        high = np.array([2 * X_LIMIT, np.inf, 2 * ANGLE_LIMIT, np.inf], np.float32)
        self.single_observation_space = gymnasium.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gymnasium.spaces.Discrete(2)
        self.scene, self.cartpole = cartpole_scene(self.num_envs, self.device)

    def physics_step(self, action: torch.Tensor) -> None:
        force = FORCE_MAG * (2 * action.reshape(self.num_envs, 1).to(torch.float32) - 1)
        self.cartpole.control_dofs_force(force, SLIDER)
        self.scene.step()

    def observe(self) -> torch.Tensor:
        qpos, qvel = self.cartpole.get_qpos(), self.cartpole.get_dofs_velocity()
        self.qpos = qpos  # terminated() reads it: each Genesis getter is a kernel call (~250 us on the CPU)
        return torch.stack((qpos[:, 0], qvel[:, 0], qpos[:, 1], qvel[:, 1]), 1)

    def reward(self) -> torch.Tensor:
        return torch.ones(self.num_envs, device=self.device)

    def terminated(self) -> torch.Tensor:
        qpos = self.qpos  # the state observe() just read (SimulatorEnv calls it first, on the same state)
        return (qpos[:, 0].abs() > X_LIMIT) | (qpos[:, 1].abs() > ANGLE_LIMIT)

    def reset_rows(self, rows: torch.Tensor, noise: torch.Tensor) -> None:
        fresh = noise * 0.1 - 0.05  # columns in the observation's order
        # a bool mask writes only these rows; the kinematics are left to the next step, which redoes them anyway
        self.cartpole.set_qpos(fresh[:, 0::2], envs_idx=rows, zero_velocity=False, skip_forward=True)
        self.cartpole.set_dofs_velocity(fresh[:, 1::2], envs_idx=rows, skip_forward=True)


def lqr_policy(td):
    """A hand-written balancer: push towards where the LQR force of the linearised cart-pole points."""
    gains = torch.tensor(LQR_GAINS, device=td.device)
    return td.set("action", ((td["observation"] * gains).sum(1) > 0).long())


def main(num_envs: int = 16, steps: int = 200) -> dict:
    short = gpu_envs.wrap(GenesisCartPole(num_envs=num_envs, device="cpu", max_episode_steps=30), seed=0)
    report = gpu_envs.check_env(short, steps=60)  # short episodes: the checks see ends and resets
    print(report.format())
    env = gpu_envs.wrap(GenesisCartPole(num_envs=num_envs, device="cpu"), seed=0)
    ends = {}
    for name, policy in (("random", None), ("lqr", lqr_policy)):
        env.reset()
        ends[name] = collect(env, policy, steps=steps)["next", "done"].float().sum().item() / num_envs
    print(f"episode ends per row in {steps} steps: random pushes {ends['random']:.2f}, LQR {ends['lqr']:.2f}")
    return {"check_env": report.ok, **ends}


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
