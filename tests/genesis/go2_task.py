"""A Unitree Go2 locomotion task in rsl_rl's ``VecEnv`` style on Genesis 1.4.5 (its CPU backend), for the Genesis tier.

The pattern of Genesis' own ``examples/locomotion/go2_env.py`` (and of legged_gym), written small
for tests: N Go2s on a plane (the URDF shipped in Genesis' wheel, ``urdf/go2/urdf/go2.urdf``),
PD position control of the 12 joints around the default standing angles, a fixed forward
velocity command. ``step`` advances every row one control step, computes rewards and dones,
resets the ended rows inside ``step`` (``reset_idx``) and returns the NEXT episode's
observation there, with ``extras["time_outs"]`` for the time-limit ends -- what rsl_rl reads.

* observation group ``"policy"`` (a TensorDict, as rsl_rl 3 and Genesis' task return it), 45
  columns: base angular velocity (body frame, x0.25) 3, projected gravity 3, commands (scaled) 3,
  joint positions minus the default angles 12, joint velocities (x0.05) 12, last actions 12;
* reward: forward-velocity tracking ``exp(-|cmd_xy - v_xy|^2 / 0.25)`` plus 0.2 for staying
  alive, times the control step;
* termination: base roll or pitch (Genesis' ``quat_to_xyz``, degrees) beyond ``tilt_limit``, or
  a solver error in that row; time limit: ``episode_length_buf >= max_episode_length``
  (``time_outs``, as legged_gym: set on every row at its limit, fallen or not);
* as Genesis' task: the reward tensor is rewritten in place every step, ``extras`` is one dict
  rewritten every step, ``time_outs`` are floats;
* ``final_obs_hook=True`` puts the full batch's observations computed BEFORE ``reset_idx`` in
  ``extras["final_obs"]`` (gpu_envs' documented hook for such tasks).

Resets are deterministic (the standing pose at rest, the same command), so a task's state
depends on the actions alone. ``reset()`` resets every row (Genesis' ``Go2Env.reset``).
"""

from __future__ import annotations

from typing import Any

import genesis as gs
import torch
from genesis.utils.geom import inv_quat, quat_to_xyz, transform_by_quat
from tensordict import TensorDict

JOINT_NAMES = (
    "FR_hip_joint",
    "FR_thigh_joint",
    "FR_calf_joint",
    "FL_hip_joint",
    "FL_thigh_joint",
    "FL_calf_joint",
    "RR_hip_joint",
    "RR_thigh_joint",
    "RR_calf_joint",
    "RL_hip_joint",
    "RL_thigh_joint",
    "RL_calf_joint",
)
DEFAULT_ANGLES = {"hip": 0.0, "FR_thigh": 0.8, "FL_thigh": 0.8, "RR_thigh": 1.0, "RL_thigh": 1.0, "calf": -1.5}
BASE_INIT_POS = (0.0, 0.0, 0.42)
BASE_INIT_QUAT = (1.0, 0.0, 0.0, 0.0)
COMMAND = (0.5, 0.0, 0.0)  # forward velocity x, y (m/s), yaw rate (rad/s): Genesis' go2 training command
KP, KD = 20.0, 0.5
ACTION_SCALE, CLIP_ACTIONS = 0.25, 100.0
OBS_SCALES = {"lin_vel": 2.0, "ang_vel": 0.25, "dof_pos": 1.0, "dof_vel": 0.05}
TRACKING_SIGMA, ALIVE = 0.25, 0.2
NUM_OBS = 45


def init_genesis() -> None:
    """``gs.init`` on the CPU backend, once per process (Genesis refuses a second ``init``)."""
    try:
        gs.init(backend=gs.cpu, logging_level="warning")
    except gs.GenesisException as error:
        if "already initialized" not in str(error):
            raise


def default_angle(joint: str) -> float:
    """The standing angle of ``joint`` (Genesis' go2 configuration)."""
    leg, part, _ = joint.split("_")
    return DEFAULT_ANGLES.get(f"{leg}_{part}", DEFAULT_ANGLES.get(part, 0.0))


def tilt_degrees(quat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(roll, pitch)`` in degrees of base orientations ``quat`` ``[N, 4]`` (w, x, y, z), as Genesis' task reads them."""
    rpy = quat_to_xyz(quat, rpy=True, degrees=True)
    return rpy[:, 0], rpy[:, 1]


class Go2Task:
    """N Go2s in one Genesis scene with rsl_rl's VecEnv members (see the module docstring)."""

    def __init__(
        self,
        num_envs: int = 4,
        max_episode_length: int = 30,
        *,
        final_obs_hook: bool = False,
        tilt_limit: float = 10.0,
        dt: float = 0.02,
        substeps: int = 2,
    ) -> None:
        init_genesis()
        self.num_envs = num_envs
        self.num_actions = len(JOINT_NAMES)
        self.num_obs = NUM_OBS
        self.max_episode_length = max_episode_length
        self.final_obs_hook = final_obs_hook
        self.tilt_limit = tilt_limit
        self.dt = dt
        self.device = gs.device
        self.cfg: dict[str, Any] = {"dt": dt, "tilt_limit": tilt_limit}  # rsl_rl's runners read env.cfg

        self.scene = gs.Scene(
            sim_options=gs.options.SimOptions(dt=dt, substeps=substeps),
            rigid_options=gs.options.RigidOptions(enable_self_collision=False, max_collision_pairs=20),
            show_viewer=False,
        )
        self.scene.add_entity(gs.morphs.URDF(file="urdf/plane/plane.urdf", fixed=True))
        self.robot = self.scene.add_entity(
            gs.morphs.URDF(file="urdf/go2/urdf/go2.urdf", pos=BASE_INIT_POS, quat=BASE_INIT_QUAT)
        )
        self.scene.build(n_envs=num_envs)

        self.motors_dof_idx = [self.robot.get_joint(name).dof_start for name in JOINT_NAMES]
        self.robot.set_dofs_kp([KP] * self.num_actions, self.motors_dof_idx)
        self.robot.set_dofs_kv([KD] * self.num_actions, self.motors_dof_idx)

        def tensor(values: Any) -> torch.Tensor:
            return torch.tensor(values, dtype=gs.tc_float, device=self.device)

        self.default_dof_pos = tensor([default_angle(name) for name in JOINT_NAMES])
        # the robot's qpos: base position, base quaternion, then its joints in the entity's order
        joint_order = [joint.name for joint in self.robot.joints[1:]]
        self.init_qpos = tensor([*BASE_INIT_POS, *BASE_INIT_QUAT, *(default_angle(name) for name in joint_order)])
        self.commands = tensor(COMMAND).repeat(num_envs, 1)
        self.commands_scale = tensor([OBS_SCALES["lin_vel"], OBS_SCALES["lin_vel"], OBS_SCALES["ang_vel"]])
        self.global_gravity = tensor([0.0, 0.0, -1.0])

        self.actions = torch.zeros((num_envs, self.num_actions), dtype=gs.tc_float, device=self.device)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.rew_buf = torch.zeros(num_envs, dtype=gs.tc_float, device=self.device)
        self.extras: dict[str, Any] = {}
        self.reset()

    # ------------ rsl_rl's VecEnv ------------
    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self.obs_buf}, batch_size=[self.num_envs], device=self.device)

    def reset(self) -> TensorDict:
        """Every row back to the standing pose (Genesis' ``Go2Env.reset``)."""
        self.reset_idx(torch.arange(self.num_envs, device=self.device))
        self.obs_buf = self.compute_observations()
        return self.get_observations()

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.actions = torch.clip(actions.to(gs.tc_float), -CLIP_ACTIONS, CLIP_ACTIONS)
        target = self.actions * ACTION_SCALE + self.default_dof_pos
        self.robot.control_dofs_position(target, self.motors_dof_idx)
        self.scene.step()
        self.episode_length_buf += 1

        self.obs_buf = self.compute_observations()  # the state this step reached, every row
        lin_vel_error = torch.sum(torch.square(self.commands[:, :2] - self.base_lin_vel[:, :2]), dim=1)
        # in place, as Genesis' task does: the returned reward tensor is rewritten by the next step
        torch.mul(torch.exp(-lin_vel_error / TRACKING_SIGMA) + ALIVE, self.dt, out=self.rew_buf)
        roll, pitch = tilt_degrees(self.base_quat)
        fell = (roll.abs() > self.tilt_limit) | (pitch.abs() > self.tilt_limit)
        fell |= self.scene.rigid_solver.get_error_envs_mask()
        time_outs = self.episode_length_buf >= self.max_episode_length
        dones = fell | time_outs

        # one extras dict, rewritten every step (as Genesis' task does); time_outs as floats, as Genesis gives them
        self.extras["time_outs"] = time_outs.to(gs.tc_float)
        self.extras["log"] = {"/reward": self.rew_buf.mean()}
        if self.final_obs_hook:  # the observation of every row before reset_idx, in the observations' structure
            self.extras["final_obs"] = self.get_observations()
        ended = dones.nonzero(as_tuple=False).flatten()
        if len(ended):
            self.reset_idx(ended)
            self.obs_buf = self.compute_observations()
        return self.get_observations(), self.rew_buf, dones, self.extras

    # ------------ the task ------------
    def reset_idx(self, envs_idx: torch.Tensor) -> None:
        """Rows ``envs_idx`` (indices) back to the standing pose at rest, a new episode."""
        self.robot.set_qpos(self.init_qpos.expand(len(envs_idx), -1), envs_idx=envs_idx, zero_velocity=True)
        self.actions = self.actions.index_fill(0, envs_idx, 0.0)
        self.episode_length_buf[envs_idx] = 0

    def compute_observations(self) -> torch.Tensor:
        """Reads the robots' state from the simulator; the observation ``[N, 45]`` (a fresh tensor)."""
        self.base_quat = self.robot.get_quat()
        inv_base_quat = inv_quat(self.base_quat)
        self.base_lin_vel = transform_by_quat(self.robot.get_vel(), inv_base_quat)
        self.base_ang_vel = transform_by_quat(self.robot.get_ang(), inv_base_quat)
        self.projected_gravity = transform_by_quat(self.global_gravity.expand(self.num_envs, 3), inv_base_quat)
        self.dof_pos = self.robot.get_dofs_position(self.motors_dof_idx)
        self.dof_vel = self.robot.get_dofs_velocity(self.motors_dof_idx)
        return torch.cat(
            (
                self.base_ang_vel * OBS_SCALES["ang_vel"],
                self.projected_gravity,
                self.commands * self.commands_scale,
                (self.dof_pos - self.default_dof_pos) * OBS_SCALES["dof_pos"],
                self.dof_vel * OBS_SCALES["dof_vel"],
                self.actions,
            ),
            dim=-1,
        )

    def close(self) -> None:
        self.scene.destroy()
