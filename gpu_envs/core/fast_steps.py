"""The steps of the common case, bound once: an env's ``step_transition`` straight into the contract.

:class:`~gpu_envs.core.env.BatchedEnv`'s generic step serves every backend: a :class:`RawStep`,
the flat or TensorDict layout, final observations given or merged, info entries, nested
observation keys. For the common case -- the backend's step is one call of an env's
``step_transition`` (``Backend.plain_transition``: the built-in envs, one
``"observation"`` tensor, flags already ``[N, 1]``, outputs trusted), a float32 reward,
no action values to check -- the env binds, after its first (validated) step, the
closures made here with every lookup resolved once:

* ``step(td)`` and ``step_and_reset(td)``: what ``BatchedEnv.step`` and
  ``step_and_maybe_reset`` do on that path and nothing else: the action's metadata
  check, the env call, the placeholder fill where the env keeps no final observations,
  and the two TensorDicts, key for key the generic path's (``tests/test_step_path.py``);
* ``values(action)``: the same step returning the transition's tensors in the order of
  :data:`TRANSITION_KEYS` instead of building TensorDicts, for a collection loop with
  random actions, which copies them straight into its buffer (see
  :func:`gpu_envs.rollout.loop.fused_writer`).

All three keep the env's state as the generic step does: the cached root, the
interrupted-step flag (``_ready``: cleared around the env call, so an exception escaping
it leaves the env marked) and ``_last_done``.

Example::

    steps = bind_fast_steps(env, env.backend.plain_transition())
    td, root = steps.step_and_reset(td)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from tensordict import TensorDict, TensorDictBase

import gpu_envs.utils.tensordicts as tds
from gpu_envs.contract.keys import TRANSITION_KEYS
from gpu_envs.utils.arguments import STEP_CALLS, check_td
from gpu_envs.utils.tensordicts import get_entry, new_td, set_entry

__all__ = ["TRANSITION_KEYS", "FastSteps", "bind_fast_steps"]

class FastSteps(NamedTuple):
    """The closures :func:`bind_fast_steps` makes (module docstring)."""

    step: Callable[[TensorDictBase], torch.Tensor]
    step_and_reset: Callable[[TensorDictBase], tuple[TensorDictBase, TensorDict]]
    values: Callable[[torch.Tensor], tuple[torch.Tensor, ...]]


def bind_fast_steps(env: Any, transition: Callable[[torch.Tensor], tuple]) -> FastSteps:
    """The closures of the common case for ``env`` (a ``BatchedEnv``) over ``transition``.

    ``transition`` is the backend's ``plain_transition()``; the caller checked that the
    case holds (see the module docstring).
    """
    final_obs, tensor, td_class = env._final_obs, torch.Tensor, TensorDict
    shape, dtype, device, batch = env._action_shape, env._action_dtype, env.device, env.batch_size
    fill, none_missing, false = final_obs.filler("observation"), final_obs.none_missing, env._false
    direct = tds.DIRECT

    def advance(action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The env call, the root cached, placeholders on ended rows: the ``"next"`` entries in order."""
        obs, reward, terminated, truncated, done, next_obs = transition(action)
        final_obs.root_obs = {"observation": obs}
        if next_obs is None:  # no final observations kept: placeholders on ended rows
            return fill(done, obs), reward, done, terminated, truncated, done
        return next_obs, reward, done, terminated, truncated, none_missing

    def step(td: TensorDictBase) -> torch.Tensor:
        if not env._ready:
            env._raise_not_ready("step")
        if direct and td.__class__ is td_class:
            action = td._tensordict.get("action")
        else:
            check_td(td, STEP_CALLS)  # a dict, None, a (td, root) tuple: refused before anything moves
            action = get_entry(td, "action")
        if action.__class__ is not tensor or action.shape != shape or action.dtype != dtype or action.device != device:
            env._check_action(action)  # raises, unless a tensor subclass with the right metadata
        env._ready = False
        next_obs, reward, done, terminated, truncated, missing = advance(action)
        data = {"observation": next_obs, "reward": reward, "done": done, "terminated": terminated}
        data["truncated"] = truncated
        data["final_obs_missing"] = missing
        set_entry(td, "next", new_td(data, batch, device))
        env._ready = True
        return done

    def step_and_reset(td: TensorDictBase) -> tuple[TensorDictBase, TensorDict]:
        step(td)
        env._last_done = false
        root = {"observation": final_obs.root_obs["observation"], "done": false, "terminated": false}
        root["truncated"] = false
        return td, new_td(root, batch, device)

    def values(action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not env._ready:
            env._raise_not_ready("step")
        if action.__class__ is not tensor or action.shape != shape or action.dtype != dtype or action.device != device:
            env._check_action(action)
        previous = final_obs.root_obs["observation"]
        env._ready = False
        obs, reward, terminated, truncated, done, next_obs = transition(action)  # advance(), inlined: per step
        final_obs.root_obs = {"observation": obs}
        if next_obs is None:
            next_obs, missing = fill(done, obs), done
        else:
            missing = none_missing
        env._last_done = false
        env._ready = True
        return previous, false, false, false, action, next_obs, reward, done, terminated, truncated, missing

    return FastSteps(step, step_and_reset, values)
