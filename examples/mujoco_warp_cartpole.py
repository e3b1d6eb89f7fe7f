"""A cart-pole on MuJoCo Warp, built on gpu_envs.SimulatorEnv: the engine steps, gpu_envs does the env.

MuJoCo Warp (``mujoco_warp``) batches MuJoCo models as Warp arrays ("worlds") and has no env
API. Here the task is five methods on :class:`gpu_envs.SimulatorEnv`: the controls and the
state are zero-copy torch views of the Warp arrays (``wp.to_torch``), ``physics_step`` writes
the force and calls ``mjw.step`` twice (a 0.02 s control step, as gymnasium's CartPole),
``reset_rows`` writes the chosen rows' initial state and clears their solver warm start
with ``torch.where`` / ``masked_fill_`` (cheaper than the engine's ``reset_data``, which runs
over every array of every world). gpu_envs adds the
time limit, the same-step auto-reset with the true final observation, masked resets, per-row
seeds, snapshots and everything downstream. It runs on Warp's CPU device here (no GPU) and on
a GPU unchanged (``device="cuda"``).

Needs ``mujoco`` and ``mujoco-warp`` (the mjlab tier's venv has both:
``VENV=$(scripts/simulator_venv.sh mjlab | tail -n 1)``). Run::

    PYTHONPATH=$PWD "$VENV/bin/python" examples/mujoco_warp_cartpole.py
"""

from __future__ import annotations

import gymnasium
import mujoco
import mujoco_warp as mjw
import numpy as np
import torch
import warp as wp

import gpu_envs
from gpu_envs.rollout import collect

# a cart on a rail and a 1 m pole on a hinge; the motor pushes the cart with up to 10 N
CARTPOLE_XML = """
<mujoco model="cartpole">
  <option timestep="0.01"/>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.2 0.1 0.05" mass="1.0"/>
      <body name="pole">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 1.0" size="0.03" mass="0.1"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slider" gear="10" ctrlrange="-1 1" ctrllimited="true"/></actuator>
</mujoco>
"""
FRAME_SKIP = 2  # physics steps per control step: 0.02 s
X_LIMIT, ANGLE_LIMIT = 2.4, 12 * 2 * np.pi / 360  # gymnasium's CartPole ends there


class MuJoCoWarpCartPole(gpu_envs.SimulatorEnv):
    """Observation ``(x, theta, x_dot, theta_dot)``; action: the force in ``[-1, 1]`` (times 10 N); reward 1 per step."""

    reset_noise = 4  # qpos and qvel uniform in [-0.05, 0.05), as gymnasium's CartPole
    default_max_episode_steps = 500

    def setup(self) -> None:
        self.single_observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.mj_model = mujoco.MjModel.from_xml_string(CARTPOLE_XML)
        with wp.ScopedDevice(str(self.device)):
            self.model = mjw.put_model(self.mj_model)
            self.data = mjw.make_data(self.mj_model, nworld=self.num_envs)
        # zero-copy torch views of the engine's own arrays, [N, nq] / [N, nv] / [N, nu], and of what else a
        # reset must clear so that an episode does not depend on the one before (the solver's warm start, time)
        self.qpos, self.qvel, self.ctrl = (wp.to_torch(a) for a in (self.data.qpos, self.data.qvel, self.data.ctrl))
        self.warmstart, self.time = wp.to_torch(self.data.qacc_warmstart), wp.to_torch(self.data.time)

    def physics_step(self, action: torch.Tensor) -> None:
        self.ctrl.copy_(action.reshape(self.num_envs, 1))
        for _ in range(FRAME_SKIP):
            mjw.step(self.model, self.data)

    def observe(self) -> torch.Tensor:
        return torch.cat((self.qpos, self.qvel), 1)

    def reward(self) -> torch.Tensor:
        return torch.ones(self.num_envs, device=self.device)

    def terminated(self) -> torch.Tensor:
        return (self.qpos[:, 0].abs() > X_LIMIT) | (self.qpos[:, 1].abs() > ANGLE_LIMIT)

    def reset_rows(self, rows: torch.Tensor, noise: torch.Tensor) -> None:
        fresh = noise * 0.1 - 0.05
        mask = rows.unsqueeze(1)
        self.qpos.copy_(torch.where(mask, fresh[:, :2], self.qpos))
        self.qvel.copy_(torch.where(mask, fresh[:, 2:], self.qvel))
        # what mjw.reset_data(model, data, reset=rows) would clear besides, on these rows only: it runs over every
        # array of every world, a full step's cost again on every step (this model has no activations or mocaps)
        self.warmstart.masked_fill_(mask, 0.0)
        self.time.masked_fill_(rows, 0.0)

    def state(self) -> dict[str, torch.Tensor]:
        return {"qpos": self.qpos, "qvel": self.qvel, "ctrl": self.ctrl}


def linear_policy(weights: torch.Tensor):
    """Row ``i`` pushes ``tanh(obs @ weights[i])``: one linear controller per row."""

    def policy(td):
        return td.set("action", torch.tanh((td["observation"] * weights).sum(1, keepdim=True)))

    return policy


def cross_entropy_search(env, iterations: int = 6, steps: int = 150, elite: int = 8, seed: int = 0) -> list[float]:
    """Train linear controllers by the cross-entropy method: every row tries its own, the best rows refit the next.

    Returns the mean episode ends per row in each iteration's collection (lower: the poles stay up longer).
    """
    gen = torch.Generator().manual_seed(seed)
    mean, std = torch.zeros(4), torch.full((4,), 2.0)
    ends_per_iteration = []
    for _ in range(iterations):
        weights = mean + std * torch.randn(env.num_envs, 4, generator=gen)
        traj = collect(env, linear_policy(weights), steps=steps)
        ends = traj["next", "done"].view(env.num_envs, steps).sum(1).float()
        ends_per_iteration.append(ends.mean().item())
        best = weights[ends.argsort()[:elite]]
        mean, std = best.mean(0), best.std(0) + 0.05
    return ends_per_iteration


def main(num_envs: int = 64) -> dict:
    env = gpu_envs.wrap(MuJoCoWarpCartPole(num_envs=num_envs, device="cpu"), seed=0)
    report = gpu_envs.check_env(env, steps=100)
    print(report.format())
    env.reset()
    ends = cross_entropy_search(env)
    print("episode ends per row, per iteration:", " ".join(f"{e:.2f}" for e in ends))
    return {"check_env": report.ok, "ends": ends}


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
