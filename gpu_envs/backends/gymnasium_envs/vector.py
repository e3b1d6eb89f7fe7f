"""Facts about gymnasium vector envs the gymnasium backend relies on.

* :func:`autoreset_mode`: the declared auto-reset mode (NEXT_STEP when none is, as
  gymnasium assumes);
* :func:`next_step_resets`: the masked reset that makes a NEXT_STEP env exact: its own
  ``reset(options={"reset_mask": ...})`` for gymnasium's Sync/AsyncVectorEnv (not an
  AsyncVectorEnv with ``shared_memory=False``, whose workers keep the pending reset
  after a masked reset), the env's own next-step reset moved forward for gymnasium's
  ``CartPoleVectorEnv`` (:mod:`.row_resets`); any other NEXT_STEP env is refused with a
  fix that works;
* :func:`episode_statistics`: the info entries a vector ``RecordEpisodeStatistics``
  adds only when episodes end, to declare them up front.

Example::

    if autoreset_mode(venv) == gym.vector.AutoresetMode.NEXT_STEP:
        reset_rows = next_step_resets(venv)      # reset_rows(mask) -> (obs, info)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from gpu_envs.backends.gymnasium_envs.internals import private
from gpu_envs.backends.gymnasium_envs.row_resets import RowReset, row_reset
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


def next_step_resets(env: gym.vector.VectorEnv) -> RowReset:
    """The masked reset that clears a NEXT_STEP env's pending auto-reset, or a refusal naming a fix that works."""
    base = env.unwrapped
    if isinstance(base, gym.vector.SyncVectorEnv) or (
        isinstance(base, gym.vector.AsyncVectorEnv) and base.shared_memory
    ):
        return lambda mask: env.reset(options={"reset_mask": mask})
    spec = getattr(base, "spec", None)
    made = f"gym.make_vec({spec.id!r}, {base.num_envs}" if spec is not None and spec.id else "gym.make_vec(id, n"
    sync = (
        f"{made}, vectorization_mode='sync') (a SyncVectorEnv in NEXT_STEP mode, whose masked resets gpu_envs uses; "
        f"gymnasium's vector wrappers accept it), {made}, vectorization_mode='sync', vector_kwargs={{'autoreset_mode': "
        "gym.vector.AutoresetMode.SAME_STEP}), or gpu_envs.make(id, num_envs=n, backend='gymnasium')"
    )
    reset_rows = row_reset(base)
    if reset_rows is not None:
        if env is base:
            return reset_rows
        raise AutoresetModeError(
            f"{type(env).__name__} wraps gymnasium's {type(base).__name__} (NEXT_STEP, a reset that resets every "
            "row): gpu_envs resets its ended rows itself, in the same step, which only the bare env allows (the "
            f"wrappers in between would not see those resets). Wrap the bare env and use gpu_envs' transforms "
            f"instead of gymnasium's wrappers, or build {sync}."
        )
    if isinstance(base, gym.vector.AsyncVectorEnv):
        raise AutoresetModeError(
            f"{type(base).__name__} runs in NEXT_STEP auto-reset mode, which gpu_envs makes exact through masked "
            "resets, but its AsyncVectorEnv uses shared_memory=False, whose workers do not clear the pending "
            "auto-reset on a masked reset (gymnasium 1.x). Build it with shared_memory=True (the default), or with "
            "autoreset_mode=gym.vector.AutoresetMode.SAME_STEP."
        )
    raise AutoresetModeError(
        f"{type(base).__name__} runs in NEXT_STEP auto-reset mode (the default when none is declared): an ended "
        "row's next step ignores its action and returns its reset observation (a wasted step), and gpu_envs knows "
        "no masked reset of this class that clears it. Either build the env from gymnasium's own vector envs: "
        f"{sync}; or, for your own class, declare metadata['autoreset_mode'] = gym.vector.AutoresetMode.SAME_STEP "
        "and return the ended rows' final observations in info['final_obs'] (masked by info['_final_obs']), or "
        "DISABLED and reset exactly the rows of reset(options={'reset_mask': mask})."
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
