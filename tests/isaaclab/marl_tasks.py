"""The multi-agent cart + double pendulum (``Isaac-Pendulum-MARL-Direct``) as the MARL tests drive it.

Shared by ``test_marl.py`` and ``test_marl_apart.py``: the action schedule (smooth, so
that continuity checks hold; even rows push the cart hard), the task built by hand, a
subclass of the real task whose agents end apart, and a gymnasium wrapper that keeps
Isaac Lab's own outputs before gpu_envs reads them.

Example::

    env = pendulum_env(pendulum_marl_cfg(compute_final_obs=True))
    obs, extras = env.reset(seed=SEED)
    obs, reward, terminated, truncated, extras = env.step(actions(0))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from tests.isaaclab.cartpoles import NUM_ENVS

ID = "Isaac-Pendulum-MARL-Direct"
AGENTS = ("cart", "pendulum")
STEPS = 45  # past the first time-out (29 steps of 1/60 s) and the falls before it
SEED = 7


def actions(t: int, n: int = NUM_ENVS) -> dict[str, torch.Tensor]:
    """Step ``t``'s actions per agent ``[n, 1]``: smooth in ``t``; even rows push the cart hard."""
    rows = torch.arange(n, dtype=torch.float32)
    cart = 0.4 * torch.sin(0.2 * t + rows) + (rows % 2 == 0).float() * 1.5
    pendulum = 0.3 * torch.cos(0.15 * t + 0.5 * rows)
    return {"cart": cart.view(n, 1), "pendulum": pendulum.view(n, 1)}


def group_actions(t: int) -> dict:
    """The same actions as the groups' entries ``(group, "action")`` ``[N, 1, 1]`` (one agent per group)."""
    return {(agent, "action"): value.unsqueeze(1) for agent, value in actions(t).items()}


def clone(values: dict) -> dict:
    return {key: value.clone() for key, value in values.items()}


def pendulum_env(cfg: Any) -> Any:
    """The task's ``PendulumMARLEnv`` itself (no gymnasium wrapper)."""
    import isaaclab_tasks  # noqa: F401  (registers the Isaac-* ids)
    from isaaclab_tasks.core.pendulum.pendulum_marl_env import PendulumMARLEnv

    return PendulumMARLEnv(cfg)


def split_dones_env(cfg: Any) -> Any:
    """The real task, changed as a task author could: agents that end apart, and a state of its own.

    The pendulum agent also terminates when the upper link leans past 0.6 rad (the cart
    agent only when the cart leaves the track or the pole falls); the state is the 3
    joint positions, kept in ONE buffer rewritten in place (``cfg.state_space = 3``).
    """
    import isaaclab_tasks  # noqa: F401
    from isaaclab_tasks.core.pendulum.pendulum_marl_env import PendulumMARLEnv

    class SplitDonesPendulumEnv(PendulumMARLEnv):
        def _get_dones(self):
            terminated, time_outs = super()._get_dones()
            leaning = self.joint_pos[:, 1].abs() > 0.6  # joint 1: cart_to_pole
            return {"cart": terminated["cart"], "pendulum": terminated["pendulum"] | leaning}, time_outs

        def _get_states(self):
            if not hasattr(self, "joint_state"):
                self.joint_state = torch.zeros(self.num_envs, 3, device=self.device)
            self.joint_state.copy_(self.joint_pos)
            return self.joint_state

    cfg.state_space = 3
    return SplitDonesPendulumEnv(cfg)


class Recorder(gym.Wrapper):
    """Keeps clones of what Isaac Lab returned from each ``step``, before gpu_envs reads it."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.steps: list[dict] = []

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, extras = self.env.step(action)
        base = self.env.unwrapped
        self.steps.append(
            {
                "obs": clone(obs),
                "reward": clone(reward),
                "terminated": clone(terminated),
                "truncated": clone(truncated),
                "state": base.state().clone(),
                "reset": base.episode_length_buf.eq(0),  # the rows Isaac Lab reset in this step
            }
        )
        return obs, reward, terminated, truncated, extras
