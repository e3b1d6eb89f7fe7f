"""mjlab 1.6 tasks on the CPU, built for gpu_envs' tests (and ``benchmarks/bench_simulators.py``).

It imports mjlab: the tier's modules are collected only where mjlab is installed or
``GPU_ENVS_REQUIRE_MJLAB=1`` demands it (``tests/mjlab/conftest.py``).

Two of mjlab's own registered tasks are used as they ship, with shorter episodes so that
time limits come within a few dozen steps:

* ``Mjlab-Cartpole-Balance``: episodes end on the time limit only; resets put the cart
  within +-0.1 m and the pole within +-0.034 rad of upright, both velocities within
  +-0.01. Its observation terms have no noise and it has no commands, so random numbers
  are drawn in resets only.
* ``Mjlab-Velocity-Flat-Unitree-Go1``: episodes end when the trunk tilts past 70 degrees
  (``fell_over``, terminated) or on the time limit (truncated); resets stand the robot at
  its default joint pose, at rest, upright, with a random yaw. The actor group is noisy,
  the critic group is not.

Example::

    env = gpu_envs.wrap(raw_env(task_cfg(GO1, num_envs=8)))
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Iterator
from typing import Any

import torch
from mjlab.envs import ManagerBasedRlEnv
from mjlab.tasks.registry import load_env_cfg
from mjlab.tasks.velocity.mdp.rewards import feet_swing_height

CARTPOLE = "Mjlab-Cartpole-Balance"
GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"

# Cartpole-Balance's reset event ranges (mjlab/tasks/cartpole/cartpole_env_cfg.py)
CART_RESET = 0.1
POLE_RESET = 0.034
VEL_RESET = 0.01
# Go1: the fell_over termination angle, and where its terms sit in the critic group
GO1_TILT_LIMIT_DEG = 70.0
GO1_CRITIC = {
    "base_lin_vel": slice(0, 3),
    "base_ang_vel": slice(3, 6),
    "projected_gravity": slice(6, 9),
    "joint_pos": slice(9, 21),
    "joint_vel": slice(21, 33),
    "actions": slice(33, 45),
    "command": slice(45, 48),
}


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """mjlab prints tables of its managers and a line per seed: keep them out of the output."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def task_cfg(task_id: str, num_envs: int, episode_length_s: float | None = 1.0, seed: int = 0) -> Any:
    """The registered config of ``task_id`` for ``num_envs`` envs; ``seed`` fixes its construction-time randomisation."""
    cfg = load_env_cfg(task_id)
    cfg.scene.num_envs = num_envs
    cfg.seed = seed
    if episode_length_s is not None:
        cfg.episode_length_s = episode_length_s
    return cfg


def raw_env(cfg: Any, cls: type = ManagerBasedRlEnv) -> Any:
    """``cls(cfg, device="cpu")``, quietly."""
    with quiet():
        return cls(cfg, device="cpu")


def tilt_deg(projected_gravity: torch.Tensor) -> torch.Tensor:
    """The trunk's tilt from upright, in degrees, from the gravity vector in the body frame (as fell_over computes it)."""
    return torch.rad2deg(torch.acos(torch.clamp(-projected_gravity[..., 2], -1.0, 1.0)))


def smooth_actions(
    num_envs: int, num_actions: int, steps: int, seed: int = 0, amplitude: float = 1.0
) -> list[torch.Tensor]:
    """``steps`` actions ``[num_envs, num_actions]``: slow sinusoids with random phases per row and joint.

    Smooth actions keep the last-action terms of the observations close from one step to
    the next, so a final observation is near the one before it (docs/DESIGN.md's continuity check).
    """
    generator = torch.Generator().manual_seed(seed)
    phase = torch.rand(num_envs, num_actions, generator=generator) * 2 * math.pi
    return [amplitude * torch.sin(0.3 * (t + 1) + phase) for t in range(steps)]


def replay(actions: list[torch.Tensor]):
    """A rollout policy that plays ``actions`` in order: ``env.rollout(len(actions), policy=replay(actions))``."""
    queue = iter(actions)
    return lambda td: td.set("action", next(queue))


class FeetSwingHeightWithReset(feet_swing_height):
    """mjlab's Go1 ``foot_swing_height`` reward term with the ``reset`` mjlab 1.6 lacks.

    Upstream, the term keeps each foot's peak swing height in ``peak_heights`` and never
    clears it when an episode resets (the class has no ``reset``, so the reward manager
    never calls one): the first landing of a new episode is scored with the previous
    episode's peak, and two rollouts from ``reset(seed=s)`` differ. This subclass clears
    the rows that reset; with it, ``check_env`` finds the Go1 task deterministic.
    """

    def reset(self, env_ids: torch.Tensor | slice | None = None) -> None:
        self.peak_heights[slice(None) if env_ids is None else env_ids] = 0.0
