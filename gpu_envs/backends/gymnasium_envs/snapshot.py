"""Row snapshots of a gymnasium ``SyncVectorEnv``: deep copies of its sub-envs.

A row of a ``SyncVectorEnv`` is one sub-env object in this process: its whole state (the
physics, the wrappers' counters such as ``TimeLimit``'s, its ``np_random`` generator) is
the object itself, so ``copy.deepcopy`` of it is an exact snapshot, and installing a deep
copy of that snapshot as sub-env ``j`` makes row ``j`` continue exactly as the snapshot
row did (reset draws included). The vector env's own per-row bookkeeping
(``_autoreset_envs``, the cached per-row observations ``_env_obs``) is copied with it.
Exact as far as the sub-env's deep copy is complete: an env whose ``__deepcopy__`` leaves
out state it needs (a native handle shared between copies) must fix that itself; the
tests check gymnasium's classic-control envs with their wrappers.

Refused, with a :class:`~gpu_envs.contract.errors.SnapshotError` naming the way out:

* ``AsyncVectorEnv``: its sub-envs live in worker processes;
* a vector env inside vector wrappers (their state is per batch, not per sub-env) or
  any other vector env class, subclasses of ``SyncVectorEnv`` included (mo-gymnasium's
  keeps per-row buffers of its own);
* a sub-env ``copy.deepcopy`` cannot copy (an open window, a handle to a native
  simulator without ``__deepcopy__``).

Example::

    state = snapshot_rows(venv, np.array([0, 2]))   # TensorDict [2]: the sub-env copies
    restore_rows(venv, state, np.array([1, 3]))    # rows 1 and 3 become them
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import NonTensorStack, TensorDict, TensorDictBase

from gpu_envs.backends.gymnasium_envs.internals import private
from gpu_envs.contract.errors import SnapshotError

__all__ = ["refusal", "restore_rows", "snapshot_rows"]


def refusal(env: Any) -> str | None:
    """Why the rows of ``env`` cannot be snapshot (``None``: they can)."""
    base = env.unwrapped
    if isinstance(base, gym.vector.AsyncVectorEnv):
        return (
            "an AsyncVectorEnv's sub-envs live in worker processes, so gpu_envs cannot snapshot and restore its rows. "
            "Build it with vectorization_mode='sync' (gymnasium.make_vec) or as a SyncVectorEnv to use "
            "get_state/set_state."
        )
    if type(base) is not gym.vector.SyncVectorEnv:  # a subclass (mo-gymnasium's) may keep more per-row state
        return (
            f"{type(base).__name__} is not gymnasium's own SyncVectorEnv, whose per-row state gpu_envs knows (the "
            "sub-envs and two bookkeeping arrays): its rows cannot be snapshot exactly. Wrap a "
            "gymnasium.vector.SyncVectorEnv of the same envs to use get_state/set_state."
        )
    if env is not base:
        return (
            f"this SyncVectorEnv is inside vector wrappers ({type(env).__name__}), whose state is the batch's, not a "
            "sub-env's, so its rows cannot be snapshot one by one. Put the wrappers on the sub-envs instead "
            "(gymnasium.make_vec(..., wrappers=[...]) or gymnasium.vector.SyncVectorEnv([lambda: Wrapper(env)]))."
        )
    return None


def snapshot_rows(env: Any, rows: np.ndarray) -> TensorDict:
    """Deep copies of the sub-envs ``rows`` with their per-row bookkeeping, a TensorDict ``[len(rows)]``."""
    base = env.unwrapped
    autoreset = private(base, "_autoreset_envs")
    env_obs = private(base, "_env_obs")
    copies = []
    for row in rows.tolist():
        try:
            copies.append(copy.deepcopy((base.envs[row], env_obs[row])))
        except Exception as err:
            raise SnapshotError(
                f"sub-env {row} ({type(base.envs[row].unwrapped).__name__}) cannot be deep-copied ({type(err).__name__}: "
                f"{err}), so its row cannot be snapshot. Build it without the part that cannot be copied (a render "
                "window: render_mode=None), or give it a __deepcopy__."
            ) from err
    return TensorDict(
        {
            "sub_env": NonTensorStack.from_list(copies),
            "autoreset": torch.as_tensor(np.asarray(autoreset)[rows].copy()),
        },
        batch_size=[len(copies)],
    )


def restore_rows(env: Any, state: TensorDictBase, rows: np.ndarray) -> None:
    """Install deep copies of a :func:`snapshot_rows` as the sub-envs ``rows`` (the snapshot stays reusable)."""
    base = env.unwrapped
    autoreset = private(base, "_autoreset_envs")
    env_obs = private(base, "_env_obs")
    saved = state.get("sub_env")
    copies = saved.tolist() if isinstance(saved, NonTensorStack) else [saved.data] * len(rows)
    flags = state.get("autoreset").cpu().numpy()
    for row, value, flag in zip(rows.tolist(), copies, flags, strict=True):
        sub_env, obs = copy.deepcopy(value)
        base.envs[row] = sub_env
        env_obs[row] = obs
        autoreset[row] = flag
