"""gpu_envs: batched RL environments as TensorDicts on the learner's device.

Two entry points pick the backend for you::

    import gpu_envs
    env = gpu_envs.make("CartPole-v1", num_envs=4096)         # built-in torch env
    env = gpu_envs.wrap(my_vector_env)                         # any supported env object
    env = gpu_envs.wrap(MyTask(num_envs=4096))                 # a gpu_envs.SimulatorEnv on any engine
    td = env.reset(seed=0)
    traj = env.rollout(steps=64)                               # TensorDict [N, T]

This module only re-exports; ``docs/ARCHITECTURE.md`` maps where everything lives.
"""

from __future__ import annotations

from gpu_envs.builtin.simulator import SimulatorEnv
from gpu_envs.contract.errors import (
    ActionError,
    AutoresetModeError,
    BackendError,
    ClosedEnvError,
    ConcurrentCallError,
    DeviceMismatchError,
    GpuEnvsError,
    HealthCheckError,
    InterruptedStepError,
    InvalidArgumentError,
    MissingComponentError,
    NotAnEnvError,
    NotCopyableError,
    ObservationError,
    ResetMaskError,
    ResetNeededError,
    RolloutError,
    SnapshotError,
    SpecError,
    StaleInputError,
    StepTimeoutError,
    UnknownBackendError,
    UnknownEnvError,
    UnsupportedSpaceError,
)
from gpu_envs.core.env import BatchedEnv
from gpu_envs.env_checker import check_env
from gpu_envs.factory import available_envs, make, wrap, wrap_ray
from gpu_envs.gymnasium_ids import register_gymnasium_ids
from gpu_envs.utils.devices import default_device
from gpu_envs.utils.watchdog import watchdog

__version__ = "0.1.0"

# gymnasium.make_vec("gpu_envs/CartPole-v1", ...) and gymnasium.make(...) build the built-in envs once gpu_envs is imported
register_gymnasium_ids()

__all__ = [
    "ActionError",
    "AutoresetModeError",
    "BackendError",
    "BatchedEnv",
    "ClosedEnvError",
    "ConcurrentCallError",
    "DeviceMismatchError",
    "GpuEnvsError",
    "HealthCheckError",
    "InterruptedStepError",
    "InvalidArgumentError",
    "MissingComponentError",
    "NotAnEnvError",
    "NotCopyableError",
    "ObservationError",
    "ResetMaskError",
    "ResetNeededError",
    "RolloutError",
    "SimulatorEnv",
    "SnapshotError",
    "SpecError",
    "StaleInputError",
    "StepTimeoutError",
    "UnknownBackendError",
    "UnknownEnvError",
    "UnsupportedSpaceError",
    "__version__",
    "available_envs",
    "check_env",
    "default_device",
    "make",
    "watchdog",
    "wrap",
    "wrap_ray",
]


def __dir__() -> list[str]:
    """The public names only (submodules loaded on import are reached by their full names)."""
    return sorted(__all__)
