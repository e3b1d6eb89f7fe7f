"""Every gpu_envs env in the training libraries people already use, with one call.

Each function takes any :class:`~gpu_envs.BatchedEnv` (every backend, a
``TransformedEnv`` too) and returns that library's own env type:

* :func:`to_gymnasium` -> a ``gymnasium.vector.VectorEnv`` (numpy or torch arrays,
  NEXT_STEP or SAME_STEP auto-reset): CleanRL-style loops and gymnasium's wrappers;
* :func:`to_sb3` -> a Stable-Baselines3 ``VecEnv``;
* :func:`to_torchrl` -> a torchrl ``EnvBase``;
* :func:`to_rsl_rl` -> an rsl_rl ``VecEnv``;
* :func:`to_skrl` -> an skrl env wrapper;
* :func:`to_rl_games` -> an rl_games vec env, registered for its ``Runner``.

rsl_rl, skrl and rl_games approximate the value target of a time-out; their adapters'
``bootstrap_from(runner_or_agent)`` makes it exact, ``r + gamma * V(s_T)`` from the true
final observation (see :mod:`gpu_envs.interop.time_outs`).

One module per library (``gpu_envs/interop/<library>.py``), imported only when its
function is first used, so a library that is not installed costs nothing until then;
using it raises :class:`~gpu_envs.contract.errors.MissingComponentError` naming the pip extra
that installs it (see :mod:`gpu_envs.interop.libraries`). The adapters only translate
the BatchedEnv contract (``step_and_maybe_reset``'s transition and next root): auto-reset
and final observations stay the env's job.

Example::

    >>> import gpu_envs
    >>> from gpu_envs.interop import to_gymnasium
    >>> envs = to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu"))   # instead of gymnasium.make_vec
    >>> obs, info = envs.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
    >>> type(obs).__name__, obs.shape
    ('ndarray', (8, 4))
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module of this package that defines it
CONSUMERS = {
    "to_gymnasium": "gymnasium",
    "to_sb3": "sb3",
    "to_torchrl": "torchrl",
    "to_rsl_rl": "rsl_rl",
    "to_skrl": "skrl",
    "to_rl_games": "rl_games",
}

__all__ = sorted(CONSUMERS)


def __getattr__(name: str) -> Any:
    module = CONSUMERS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(CONSUMERS))
