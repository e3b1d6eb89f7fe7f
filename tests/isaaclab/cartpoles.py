"""Isaac Lab 3.0.0 cartpoles on the CPU (Newton / MJWarp physics), built for gpu_envs' tests.

Also the multi-agent cart + double pendulum (``Isaac-Pendulum-MARL-Direct``, a
``DirectMARLEnv`` with a ``cart`` and a ``pendulum`` agent): :func:`pendulum_marl_cfg`.

Robot assets come from the project's own copy in ``tests/isaaclab/assets``: Isaac Lab
reads ``ISAACSIM_ASSET_ROOT`` when it is first imported, so this module sets it before
importing isaaclab (import it first). Isaac Lab allows one simulation per process:
:func:`build` closes the previous env before it builds the next one.

Example (also used by ``benchmarks/bench_device.py``)::

    from tests.isaaclab.cartpoles import direct_cfg
    env = gym.make("Isaac-Cartpole-Direct", cfg=direct_cfg(num_envs=256))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).parent / "assets"
os.environ["ISAACSIM_ASSET_ROOT"] = str(ASSETS)

import gymnasium as gym  # noqa: E402
import isaaclab  # noqa: E402, F401  (fails loudly where the venv lacks it)

import gpu_envs  # noqa: E402

NUM_ENVS = 16
# Short episodes so that time-outs (truncations) happen within a few dozen steps.
EPISODE_LENGTH_S = 0.5
_live: list[gpu_envs.BatchedEnv] = []


def _cpu_newton(cfg: Any, num_envs: int, compute_final_obs: bool) -> Any:
    from isaaclab_newton.physics import MJWarpSolverCfg, NewtonCfg

    cfg.sim.device = "cpu"
    cfg.sim.physics = NewtonCfg(
        solver_cfg=MJWarpSolverCfg(njmax=5, nconmax=3, cone="pyramidal", impratio=1, integrator="implicitfast"),
        num_substeps=1,
        use_cuda_graph=False,
    )
    cfg.scene.num_envs = num_envs
    cfg.scene.ground = None
    cfg.seed = 0
    cfg.episode_length_s = EPISODE_LENGTH_S
    cfg.compute_final_obs = compute_final_obs
    return cfg


def direct_cfg(num_envs: int = NUM_ENVS, compute_final_obs: bool = False) -> Any:
    from isaaclab_tasks.core.cartpole.cartpole_direct_env_cfg import CartpoleEnvCfg

    cfg = _cpu_newton(CartpoleEnvCfg(), num_envs, compute_final_obs)
    cfg.scene.light = None
    return cfg


def manager_cfg(num_envs: int = NUM_ENVS, compute_final_obs: bool = False) -> Any:
    from isaaclab_tasks.core.cartpole.cartpole_manager_env_cfg import CartpoleEnvCfg

    cfg = _cpu_newton(CartpoleEnvCfg(), num_envs, compute_final_obs)
    cfg.scene.distant_light = None
    return cfg


def pendulum_marl_cfg(num_envs: int = NUM_ENVS, compute_final_obs: bool = False) -> Any:
    """The multi-agent cart-double-pendulum task on the CPU; its USD is ``assets/.../CartDoublePendulum``."""
    from isaaclab_tasks.core.pendulum.pendulum_marl_env_cfg import PendulumMARLEnvCfg

    cfg = _cpu_newton(PendulumMARLEnvCfg(), num_envs, compute_final_obs)
    cfg.scene.light = None
    return cfg


# Each case builds its env a different way, so that every entry point is exercised.
CASES = {
    # gym.make'd direct task: detected through gymnasium's OrderEnforcing wrapper
    "direct-final_obs": lambda: gpu_envs.wrap(
        gym.make("Isaac-Cartpole-Direct", cfg=direct_cfg(compute_final_obs=True))
    ),
    # the DirectRLEnv subclass itself
    "direct-no_final_obs": lambda: gpu_envs.wrap(_direct_env(direct_cfg()), device="cpu"),
    # gpu_envs.make through Isaac Lab's gym registry
    "manager-final_obs": lambda: gpu_envs.make(
        "Isaac-Cartpole", num_envs=NUM_ENVS, device="cpu", backend="isaaclab", cfg=manager_cfg(), compute_final_obs=True
    ),
    # the ManagerBasedRLEnv itself
    "manager-no_final_obs": lambda: gpu_envs.wrap(_manager_env(manager_cfg())),
}


def _direct_env(cfg: Any) -> Any:
    import isaaclab_tasks  # noqa: F401
    from isaaclab_tasks.core.cartpole.cartpole_direct_env import CartpoleEnv

    return CartpoleEnv(cfg)


def _manager_env(cfg: Any) -> Any:
    from isaaclab.envs import ManagerBasedRLEnv

    return ManagerBasedRLEnv(cfg)


def build(case: str) -> gpu_envs.BatchedEnv:
    """Close the live env (one simulation per process), then build ``case``."""
    if "Isaac-Cartpole" not in gym.registry:
        import isaaclab_tasks  # noqa: F401  (registers Isaac-Cartpole and friends)
    return adopt(CASES[case])


def adopt(make: Callable[[], gpu_envs.BatchedEnv]) -> gpu_envs.BatchedEnv:
    """Close the live env (one simulation per process), then build one with ``make()`` and keep it live."""
    close_live()
    env = make()
    _live.append(env)
    return env


def close_live() -> None:
    while _live:
        _live.pop().close()
