"""The TensorDict key names of the contract, in one place.

torchrl's names, so that transitions drop into its losses and buffers: a root holds the
observation keys and :data:`DONE_KEYS`; ``env.step`` adds ``"next"`` with the next
observations, ``"reward"``, :data:`DONE_KEYS` and :data:`FINAL_OBS_MISSING`.
Observations travel between layers as an :data:`ObsDict`: a flat dict keyed by
TensorDict keys (a string, or a tuple of strings for a nested entry such as a gymnasium
``Dict`` inside a ``Dict``).

Example::

    >>> import gpu_envs
    >>> from gpu_envs.contract.keys import DONE_KEYS, NEXT
    >>> env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    >>> td = env.reset()
    >>> td["action"] = env.action_spec.rand()
    >>> td, root = env.step_and_maybe_reset(td)
    >>> {key: tuple(td[NEXT, key].shape) for key in DONE_KEYS}
    {'done': (4, 1), 'terminated': (4, 1), 'truncated': (4, 1)}
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "ACTION",
    "DONE_KEYS",
    "FINAL_OBS_MISSING",
    "NEXT",
    "OBSERVATION",
    "QUARANTINED",
    "RESET",
    "REWARD",
    "TRANSITION_KEYS",
    "ObsDict",
    "transition_keys",
]

ObsDict = dict[Any, torch.Tensor]

OBSERVATION = "observation"  # the key of a lone (non-Dict) observation
ACTION = "action"
NEXT = "next"
REWARD = "reward"
DONE_KEYS = ("done", "terminated", "truncated")  # done = terminated | truncated, each bool [N, 1]
FINAL_OBS_MISSING = "final_obs_missing"  # bool [N, 1]: a placeholder stands in for the final observation
RESET = "_reset"  # bool [N] or [N, 1] in reset(td=...): the rows to reset
# bool [N, 1] under "next": rows a wrapper (gpu_envs.wrappers.Quarantine) ended because a value was not finite;
# their transition is made finite by it, and the health checks leave those steps alone
QUARANTINED = "quarantined"


def transition_keys(obs_keys: Any) -> tuple:
    """Every key of a transition of an env with these observation keys and no info entries.

    Root observations and flags, the action, then ``"next"``'s entries, in the order the
    step path hands a transition's tensors to a buffer (``StepPath.values``); nested
    observation keys are tuples, under ``"next"`` too.

    Example::

        >>> transition_keys(["observation"]) == TRANSITION_KEYS
        True
        >>> ("next", "obs", "pos") in transition_keys([("obs", "pos")])   # nested keys stay tuples under "next"
        True
    """
    obs_keys = list(obs_keys)
    return (
        *obs_keys,
        *DONE_KEYS,
        ACTION,
        *((NEXT, *key) if isinstance(key, tuple) else (NEXT, key) for key in obs_keys),
        (NEXT, REWARD),
        *((NEXT, key) for key in DONE_KEYS),
        (NEXT, FINAL_OBS_MISSING),
    )


# The transition keys of an env with one "observation" and no info entries (the built-in envs).
TRANSITION_KEYS = transition_keys([OBSERVATION])
