"""Which entries of a transition TensorDict a replay buffer keeps, and the checks on what it is given.

A transition (``collect()``'s ``[N, T]`` TensorDict, or one step's ``[N]``) holds root
entries (the observation keys, ``"action"``, anything a policy recorded) and ``"next"``
entries (next observations, ``"reward"``, the done flags, ``"final_obs_missing"``, info
entries). The buffer keeps every leaf except the root done flags (they repeat the previous
step's), and reads:

* observation keys: the keys present both at the root and under ``"next"`` (other than the
  reward and the done flags): ``"observation"``, or Isaac Lab's groups;
* ``("next", "reward")``, ``("next", "terminated")``, ``("next", "truncated")`` and
  ``"action"``, which must be there; ``("next", "done")`` is their ``|`` when absent. The
  three flags are bool ``[.., 1]`` per step (the buffer keeps them packed);
* in an env of agent groups, the groups' actions ``(group, "action")`` stand for
  ``"action"``, and each agent's reward ``("next", group, "reward")`` is summed over an
  n-step window as ``("next", "reward")`` is (:attr:`Layout.reward_keys`).

Example::

    layout = Layout.of(traj, batch_dims=2)
    layout.observation_keys     # [("observation",)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.keys import ACTION, DONE_KEYS, NEXT, REWARD

Key = tuple[str, ...]
REQUIRED = ((ACTION,), (NEXT, REWARD), (NEXT, "terminated"), (NEXT, "truncated"))  # (ACTION,): or group actions
FLAG_KEYS = ((NEXT, "done"), (NEXT, "terminated"), (NEXT, "truncated"))  # bool [.., 1], kept packed


def as_key(key: Any) -> Key:
    return (key,) if isinstance(key, str) else tuple(key)


@dataclass(frozen=True)
class Layout:
    """The kept leaves of a transition: ``key -> (event shape, dtype)``, and the observation keys."""

    leaves: dict[Key, tuple[torch.Size, torch.dtype]]
    observation_keys: tuple[Key, ...]
    has_done: bool
    # ("next", "reward") and every agent group's ("next", group, "reward"): each summed over n-step windows
    reward_keys: tuple[Key, ...] = ((NEXT, REWARD),)

    @classmethod
    def of(cls, td: TensorDictBase, batch_dims: int) -> Layout:
        """The layout of ``td`` (batch dims ``[N]`` or ``[N, T]``), or a clear error if it is not a transition."""
        leaves: dict[Key, tuple[torch.Size, torch.dtype]] = {}
        for key in td.keys(include_nested=True, leaves_only=True):
            key = as_key(key)
            if len(key) == 1 and key[0] in DONE_KEYS:
                continue  # the root flags repeat the previous step's "next" ones
            value = td.get(key)
            leaves[key] = (value.shape[batch_dims:], value.dtype)
        group_actions = [key for key in leaves if len(key) == 2 and key[1] == ACTION and key[0] != NEXT]
        missing = [key for key in REQUIRED if key not in leaves and not (key == (ACTION,) and group_actions)]
        if missing:
            raise InvalidArgumentError(
                f"a replay buffer stores transitions, which need {[k if len(k) > 1 else k[0] for k in REQUIRED]}; "
                f"this TensorDict lacks {missing}. Extend it with collect()'s output or env.step(td)'s result."
            )
        for key in FLAG_KEYS:
            if key in leaves and leaves[key] != (torch.Size([1]), torch.bool):
                raise InvalidArgumentError(
                    f"{key} must be bool with one column per transition ([N, 1] per step), as gpu_envs' envs give; "
                    f"got shape {tuple(leaves[key][0])} and dtype {leaves[key][1]}."
                )
        skip = {REWARD, *DONE_KEYS, "final_obs_missing"}
        observation_keys = tuple(
            key[1:] for key in leaves if key[0] == NEXT and key[1] not in skip and key[1:] in leaves
        )
        if not observation_keys:
            raise InvalidArgumentError(
                "no observation key is present both at the root and under 'next' (e.g. 'observation' and "
                "('next', 'observation')): a transition needs both to be replayed."
            )
        group_rewards = tuple(key for key in leaves if len(key) == 3 and key[0] == NEXT and key[2] == REWARD)
        return cls(leaves, observation_keys, (NEXT, "done") in leaves, ((NEXT, REWARD), *group_rewards))

    def check(self, td: TensorDictBase, batch_dims: int) -> None:
        """``td`` has this layout's leaves, with the same event shapes and dtypes (host metadata only)."""
        for key, (shape, dtype) in self.leaves.items():
            value = td.get(key, None)
            if value is None:
                raise InvalidArgumentError(f"this TensorDict lacks {key}, which the buffer's first extend had.")
            if value.shape[batch_dims:] != shape or value.dtype != dtype:
                raise InvalidArgumentError(
                    f"{key} has shape {tuple(value.shape[batch_dims:])} and dtype {value.dtype} per transition; "
                    f"the buffer stores {tuple(shape)} {dtype} (from its first extend)."
                )
