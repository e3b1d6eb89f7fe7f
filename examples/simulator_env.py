"""A task of your own on any engine, in five methods: gpu_envs.SimulatorEnv does the rest.

``Reach2D`` is a point mass on a plane that must reach a target drawn per episode. The
physics here is three lines of torch; on a real engine (Newton, MuJoCo Warp, Genesis) the
same methods call the engine: ``physics_step`` sets its controls and steps it, ``observe``
reads its state through a zero-copy view (``wp.to_torch``), ``reset_rows`` writes the
initial state of the chosen rows. gpu_envs adds the time limit, the same-step auto-reset
with the true final observation, masked resets, per-row seeds, snapshots, specs, health
checks, ``collect`` and every trainer adapter.

Run::

    python examples/simulator_env.py
"""

from __future__ import annotations

import gymnasium
import torch

import gpu_envs
from gpu_envs.rollout import collect


class Reach2D(gpu_envs.SimulatorEnv):
    """Observation: position, velocity and target (6 numbers); action: a force in [-1, 1]^2."""

    reset_noise = 4  # start position and target, 2 + 2 uniform numbers per reset row
    default_max_episode_steps = 100

    def setup(self) -> None:
        self.single_observation_space = gymnasium.spaces.Box(-5.0, 5.0, (6,))
        self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (2,))
        n, dev = self.num_envs, self.device
        self.pos, self.vel, self.target = (torch.zeros(n, 2, device=dev) for _ in range(3))

    def physics_step(self, action: torch.Tensor) -> None:
        self.vel.mul_(0.9).add_(0.1 * action.clamp(-1, 1))
        self.pos.add_(0.1 * self.vel)

    def observe(self) -> torch.Tensor:
        return torch.cat((self.pos, self.vel, self.target), 1)

    def reward(self) -> torch.Tensor:
        return -(self.pos - self.target).norm(dim=1)

    def terminated(self) -> torch.Tensor:  # reached, or left the arena
        return ((self.pos - self.target).norm(dim=1) < 0.05) | (self.pos.abs() > 4.0).any(1)

    def reset_rows(self, rows: torch.Tensor, noise: torch.Tensor) -> None:
        mask = rows.unsqueeze(1)
        self.pos.copy_(torch.where(mask, noise[:, :2] * 2 - 1, self.pos))
        self.target.copy_(torch.where(mask, noise[:, 2:] * 2 - 1, self.target))
        self.vel.masked_fill_(mask, 0.0)

    def state(self) -> dict[str, torch.Tensor]:
        return {"pos": self.pos, "vel": self.vel, "target": self.target}


def steer(td):
    """A proportional-derivative controller: push towards the target, brake the velocity."""
    obs = td["observation"]
    return td.set("action", 3.0 * (obs[:, 4:] - obs[:, :2]) - obs[:, 2:4])


def mean_step_reward(env, policy) -> float:
    return collect(env, policy, steps=200)["next", "reward"].mean().item()


def main(num_envs: int = 256) -> dict:
    env = gpu_envs.wrap(Reach2D(num_envs=num_envs, device="cpu"), seed=0)
    report = gpu_envs.check_env(env, steps=150)
    print(report.format())
    env.reset()
    random = mean_step_reward(env, None)
    controller = mean_step_reward(env, steer)
    print(f"mean reward per step: random {random:.3f}, proportional controller {controller:.3f}")
    return {"check_env": report.ok, "random": random, "controller": controller}


if __name__ == "__main__":
    main()
