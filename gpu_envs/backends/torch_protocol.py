"""How an object is recognised as a torch vector env, and the fast step it may hand over.

The protocol itself is described in :mod:`gpu_envs.backends.torch_envs`; these are the
three questions its backend asks of an object: does it have the protocol's shape
(:func:`looks_like_torch_vector_env`), does its ``raw_step`` stand for its ``step``
(:func:`raw_step_of`), and where in a step's info are its final observations
(:func:`final_obs_in`).

Example:

>>> from gpu_envs.backends.torch_protocol import final_obs_in, looks_like_torch_vector_env, raw_step_of
>>> from gpu_envs.builtin import CartPoleEnv
>>> env = CartPoleEnv(2)
>>> looks_like_torch_vector_env(env), raw_step_of(env) is not None
(True, True)
>>> final_obs_in({"final_obs": "F", "_final_obs": "M"})
('final_obs', 'F', 'M')
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

from gpu_envs.contract.raw_step import RawStep

__all__ = [
    "FINAL_OBS_KEYS",
    "REQUIRED_ATTRIBUTES",
    "REQUIRED_METHODS",
    "final_obs_in",
    "looks_like_torch_vector_env",
    "raw_step_of",
]

REQUIRED_METHODS = ("reset", "step")
REQUIRED_ATTRIBUTES = ("num_envs", "single_observation_space", "single_action_space")
# (final observations, their [N] validity mask) in a step's info: ours, then ManiSkill3's.
FINAL_OBS_KEYS = (("final_obs", "_final_obs"), ("final_observation", "_final_observation"))


def looks_like_torch_vector_env(obj: Any) -> bool:
    """True if ``obj`` has the methods and attributes of the protocol above.

    A gymnasium env without a ``device`` attribute speaks numpy: it is left to the
    gymnasium backend.
    """
    shaped = all(callable(getattr(obj, m, None)) for m in REQUIRED_METHODS) and all(
        hasattr(obj, a) for a in REQUIRED_ATTRIBUTES
    )
    if not shaped:
        return False
    import gymnasium as gym

    return getattr(obj, "device", None) is not None or not isinstance(obj, (gym.Env, gym.vector.VectorEnv))


def raw_step_of(env: Any) -> Callable[[torch.Tensor], RawStep] | None:
    """The env's ``raw_step`` when it stands for its ``step``, else None.

    A subclass that overrides ``step`` below the class defining ``raw_step`` (or
    overrides it on the instance) changes what a step does, and calling the
    ``raw_step`` would bypass that, so the plain ``step`` is used. An env with the
    method's old name, ``step_transition`` (a plain tuple of the fields), is taken with
    a DeprecationWarning.
    """
    # the old name only for an env that predates raw_step (`raw_step = None` says: no fast path)
    name = "raw_step" if hasattr(env, "raw_step") else "step_transition"
    method = getattr(env, name, None)
    if not callable(method) or "step" in getattr(env, "__dict__", {}):
        return None
    mro = type(env).__mro__
    owner = next((c for c in mro if name in c.__dict__), None)  # None: set on the instance
    stepper = next((c for c in mro if "step" in c.__dict__), None)
    if owner is not None and stepper is not None and mro.index(stepper) < mro.index(owner):
        return None  # step overridden below the class that wrote the raw step
    if name == "raw_step":
        return cast("Callable[[torch.Tensor], RawStep]", method)
    warnings.warn(
        f"{type(env).__name__}.step_transition is the old name of the torch protocol's fast path: name it raw_step "
        "and return a gpu_envs.contract.raw_step.RawStep; the old name goes away in the next release.",
        DeprecationWarning,
        stacklevel=3,
    )
    return lambda action: RawStep(*cast("tuple[Any, ...]", method(action)))


def final_obs_in(info: Mapping | None) -> tuple[str, Any, Any]:
    """``(key, final observations, [N] mask or None)`` from a step's info; ``final`` is None if absent."""
    if info:
        for key, mask_key in FINAL_OBS_KEYS:
            final = info.get(key)
            if final is not None:
                return key, final, info.get(mask_key)
    return "", None, None
