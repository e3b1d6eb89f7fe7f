"""Built-in pure-torch batched environments (no simulator dependency, any device).

Each follows the torch vector env protocol of :mod:`gpu_envs.backends.torch_envs` and
reproduces a gymnasium classic-control env exactly (same equations, constants, initial
state distribution, termination and truncation limits), in float32, for N rows at once.
:class:`SimulatorEnv` is the base for a task of the user's on any physics engine.

Example::

    from gpu_envs.builtin import BUILTIN_ENVS

    env = BUILTIN_ENVS["CartPole-v1"](num_envs=1024, device="cpu", seed=0)
    obs, _ = env.reset()
"""

from __future__ import annotations

from gpu_envs.builtin.cartpole import CartPoleEnv
from gpu_envs.builtin.pendulum import PendulumEnv
from gpu_envs.builtin.simulator import SimulatorEnv

BUILTIN_ENVS: dict[str, type] = {
    "CartPole-v1": CartPoleEnv,
    "Pendulum-v1": PendulumEnv,
}

__all__ = ["BUILTIN_ENVS", "CartPoleEnv", "PendulumEnv", "SimulatorEnv"]
