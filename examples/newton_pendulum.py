"""A pendulum swing-up on Newton (Isaac Lab 3's physics), built on gpu_envs.SimulatorEnv.

Newton (``newton``) simulates many copies ("worlds") of a model built with its
``ModelBuilder``, as Warp arrays, and has no env API. The task here is gymnasium's
Pendulum-v1 on it: a uniform 1 kg, 1 m rod on a hinge (about its pivot ``I = m l^2 / 3``,
so ``theta'' = 3 g / (2 l) sin(theta) + 3 u / (m l^2)``, gymnasium's equation, with Newton's
``g = 9.81``), a torque in ``[-2, 2]`` N m, reduced-coordinate Featherstone dynamics with
five 0.01 s substeps per 0.05 s control step, ``theta = 0`` upright, reward
``-(theta^2 + 0.1 theta_dot^2 + 0.001 u^2)``, 200-step episodes. The joint state and the
joint torques are zero-copy torch views of Newton's arrays (``wp.to_torch``); gpu_envs adds the
time limit, the same-step auto-reset with the true final observation, masked resets,
per-row seeds and snapshots.

Needs ``newton`` (the Newton tier's venv: ``VENV=$(scripts/simulator_venv.sh newton | tail -n 1)``). Run::

    PYTHONPATH=$PWD "$VENV/bin/python" examples/newton_pendulum.py
"""

from __future__ import annotations

import math

import gymnasium
import newton
import numpy as np
import torch
import warp as wp

import gpu_envs
from gpu_envs.rollout import collect

SUBSTEPS, SUBSTEP_DT = 5, 0.01  # a 0.05 s control step, as gymnasium's Pendulum
MAX_TORQUE, MAX_SPEED = 2.0, 8.0


def pendulum_model(num_worlds: int, device: str) -> newton.Model:
    """``num_worlds`` copies of a rod hinged at one end (its joint angle 0 hangs straight down)."""
    rod = newton.ModelBuilder()
    link = rod.add_link()
    rod.add_shape_box(link, hx=0.05, hy=0.05, hz=0.5, cfg=newton.ModelBuilder.ShapeConfig(density=100.0))  # 1 kg
    joint = rod.add_joint_revolute(
        parent=-1,
        child=link,
        axis=wp.vec3(0.0, 1.0, 0.0),
        parent_xform=wp.transform(p=wp.vec3(0.0, 0.0, 0.0), q=wp.quat_identity()),
        child_xform=wp.transform(p=wp.vec3(0.0, 0.0, 0.5), q=wp.quat_identity()),  # the pivot at the rod's top
    )
    rod.add_articulation([joint], label="pendulum")
    builder = newton.ModelBuilder()
    builder.replicate(rod, num_worlds)
    return builder.finalize(device=device)


def upright_angle(q: torch.Tensor) -> torch.Tensor:
    """The angle from upright in ``[-pi, pi)`` of a joint angle measured from hanging down."""
    return torch.remainder(q, 2 * math.pi) - math.pi


class NewtonPendulum(gpu_envs.SimulatorEnv):
    """Observation ``(cos theta, sin theta, theta_dot)`` with ``theta`` from upright; action: the torque."""

    reset_noise = 2  # theta in [-pi, pi), theta_dot in [-1, 1), as gymnasium's Pendulum
    default_max_episode_steps = 200

    def setup(self) -> None:
        self.single_observation_space = gymnasium.spaces.Box(
            np.array([-1.0, -1.0, -MAX_SPEED], np.float32), np.array([1.0, 1.0, MAX_SPEED], np.float32)
        )
        self.single_action_space = gymnasium.spaces.Box(-MAX_TORQUE, MAX_TORQUE, (1,), np.float32)
        self.model = pendulum_model(self.num_envs, str(self.device))
        self.solver = newton.solvers.SolverFeatherstone(self.model)
        self.state_now, self.state_next = self.model.state(), self.model.state()
        self.control = self.model.control()
        self.q, self.qd = wp.to_torch(self.state_now.joint_q), wp.to_torch(self.state_now.joint_qd)
        self.torque = wp.to_torch(self.control.joint_f)
        self.applied = torch.zeros(self.num_envs, device=self.device)  # this step's clipped torque
        self.theta_before = torch.zeros(self.num_envs, device=self.device)  # the state the reward reads
        self.theta_dot_before = torch.zeros(self.num_envs, device=self.device)

    def physics_step(self, action: torch.Tensor) -> None:
        self.applied.copy_(action.reshape(self.num_envs).clamp(-MAX_TORQUE, MAX_TORQUE))
        self.theta_before.copy_(upright_angle(self.q))  # the reward reads the state before the step, as gymnasium's
        self.theta_dot_before.copy_(self.qd)
        self.torque.copy_(self.applied)
        for _ in range(SUBSTEPS):
            self.state_now.clear_forces()
            self.solver.step(self.state_now, self.state_next, self.control, None, SUBSTEP_DT)
            self.state_now.assign(self.state_next)  # one live state: the torch views stay valid
        self.qd.clamp_(-MAX_SPEED, MAX_SPEED)

    def observe(self) -> torch.Tensor:
        theta = upright_angle(self.q)
        return torch.stack((theta.cos(), theta.sin(), self.qd), 1)

    def reward(self) -> torch.Tensor:
        theta, theta_dot = self.theta_before, self.theta_dot_before
        return -(theta * theta + 0.1 * theta_dot * theta_dot + 0.001 * self.applied * self.applied)

    def terminated(self) -> torch.Tensor:
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)  # the time limit only

    def reset_rows(self, rows: torch.Tensor, noise: torch.Tensor) -> None:
        theta = noise[:, 0] * 2 * math.pi - math.pi  # from upright
        self.q.copy_(torch.where(rows, theta + math.pi, self.q))
        self.qd.copy_(torch.where(rows, noise[:, 1] * 2 - 1, self.qd))

    def state(self) -> dict[str, torch.Tensor]:
        return {"q": self.q, "qd": self.qd}


def energy_shaping(td):
    """A hand-written swing-up controller: pump energy until near the top, then a PD controller holds it."""
    cos, sin, theta_dot = td["observation"].unbind(1)
    theta = torch.atan2(sin, cos)
    energy = theta_dot**2 / 6 + 9.81 / 2 * (cos - 1)  # per m l^2: 0 at rest upright, below it when hanging
    pump = -MAX_TORQUE * energy.sign() * torch.sign(theta_dot + 1e-3)  # power u * theta_dot towards energy 0
    hold = -10.0 * theta - 2.0 * theta_dot
    action = torch.where(cos > 0.8, hold, pump).clamp(-MAX_TORQUE, MAX_TORQUE)
    return td.set("action", action.unsqueeze(1))


def main(num_envs: int = 32) -> dict:
    short = gpu_envs.wrap(NewtonPendulum(num_envs=num_envs, device="cpu", max_episode_steps=25), seed=0)
    report = gpu_envs.check_env(short, steps=60)  # short episodes: the checks see ends and resets
    print(report.format())
    env = gpu_envs.wrap(NewtonPendulum(num_envs=num_envs, device="cpu"), seed=0)
    env.reset()
    random = collect(env, None, steps=200)["next", "reward"].mean().item()
    env.reset()
    controlled = collect(env, energy_shaping, steps=200)["next", "reward"].mean().item()
    print(f"mean reward per step: random torques {random:.2f}, energy-shaping controller {controlled:.2f}")
    return {"check_env": report.ok, "random": random, "controlled": controlled}


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
