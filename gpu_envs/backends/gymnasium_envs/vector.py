"""Facts about gymnasium vector envs the gymnasium backend relies on.

* :func:`autoreset_mode`: the declared auto-reset mode (NEXT_STEP when none is, as
  gymnasium assumes);
* :func:`check_next_step`: whether a NEXT_STEP env can be made exact through masked
  resets (gymnasium's own Sync/AsyncVectorEnv; not an AsyncVectorEnv with
  ``shared_memory=False``, whose workers keep the pending reset after a masked reset);
* :func:`episode_statistics`: the info entries a vector ``RecordEpisodeStatistics``
  adds only when episodes end, to declare them up front.

Example::

    if autoreset_mode(venv) == gym.vector.AutoresetMode.NEXT_STEP:
        check_next_step(venv)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from gpu_envs.backends.gymnasium_envs.internals import private
from gpu_envs.contract.errors import AutoresetModeError
from gpu_envs.contract.specs import Box

AutoresetMode = gym.vector.AutoresetMode


def autoreset_mode(env: gym.vector.VectorEnv) -> AutoresetMode:
    """The env's declared auto-reset mode; gymnasium assumes NEXT_STEP when none is declared."""
    mode = (getattr(env, "metadata", None) or {}).get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if isinstance(mode, AutoresetMode):
        return mode
    for member in AutoresetMode:
        if str(mode).replace("_", "").lower() in (member.value.lower(), member.name.replace("_", "").lower()):
            return member
    raise AutoresetModeError(
        f"{type(env).__name__} declares an unknown autoreset_mode={mode!r}; use a gymnasium.vector.AutoresetMode "
        "(SAME_STEP, NEXT_STEP or DISABLED)."
    )


def check_next_step(env: gym.vector.VectorEnv) -> None:
    """Refuse a NEXT_STEP env whose masked resets are not known to clear the pending auto-reset."""
    base = env.unwrapped
    if isinstance(base, gym.vector.SyncVectorEnv):
        return
    if isinstance(base, gym.vector.AsyncVectorEnv) and base.shared_memory:
        return
    why = (
        "its AsyncVectorEnv uses shared_memory=False, whose workers do not clear the pending auto-reset on a "
        "masked reset (gymnasium 1.x)"
        if isinstance(base, gym.vector.AsyncVectorEnv)
        else "only gymnasium's own SyncVectorEnv/AsyncVectorEnv are known to clear the pending auto-reset on "
        "reset(options={'reset_mask': ...})"
    )
    raise AutoresetModeError(
        f"{type(base).__name__} runs in NEXT_STEP auto-reset mode (the default when none is declared), which "
        f"gpu_envs can only turn into exact transitions through masked resets, but {why}. Build the env with "
        "autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP (or DISABLED), e.g. gym.make_vec(id, n, "
        "vector_kwargs={'autoreset_mode': gym.vector.AutoresetMode.SAME_STEP}), or use "
        "gpu_envs.make(id, num_envs=n, backend='gymnasium')."
    )


def episode_statistics(env: gym.vector.VectorEnv) -> dict:
    """Info entries a vector ``RecordEpisodeStatistics`` adds only when an episode ends."""
    node, found = env, {}
    while isinstance(node, gym.vector.VectorWrapper):
        if isinstance(node, gym.wrappers.vector.RecordEpisodeStatistics):
            key = private(node, "_stats_key")  # the info key it adds (gymnasium names it privately)
            found[(key, "r")] = Box(-np.inf, np.inf, (), torch.float64)
            found[(key, "l")] = Box(-np.inf, np.inf, (), torch.int64)
            found[(key, "t")] = Box(-np.inf, np.inf, (), torch.float64)
        node = node.env
    return found
