"""Helpers every backend may use: observation dicts, specs from spaces, devices, one owner per simulator.

Backends import these from here, never from one another (a backend module is one env
family's adapter and nothing else):

* :func:`flatten_obs` -- a tensor/array or a (nested) dict of them as a flat
  :data:`~gpu_envs.contract.keys.ObsDict`; :func:`observation_spec_from_space` -- the
  matching observation ``Composite`` of a gymnasium space;
* :func:`env_device` -- an env object's own device, checked against the one asked for;
* :func:`check_same_step` -- refuse an env that declares another auto-reset mode;
* :func:`flag_columns` -- a flat ``[N]`` reward and flags as the ``[N, 1]`` columns of
  a :class:`~gpu_envs.backends.base.RawStep`; :data:`NO_INFO` -- a step's empty info;
* :func:`claim_simulator` / :func:`release_simulator` / :func:`innermost` -- one
  ``BatchedEnv`` per simulator object;
* :func:`numpy2_advice` -- what to do when an env's own code uses a name numpy 2 removed.

Example::

    obs = flatten_obs({"policy": p, "critic": c})        # {"policy": p, "critic": c}
    spec = observation_spec_from_space(env.single_observation_space, device)
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from gpu_envs.backends.base import NO_INFO, Backend
from gpu_envs.contract.errors import (
    AutoresetModeError,
    BackendError,
    DeviceMismatchError,
    InvalidArgumentError,
    NotAnEnvError,
)
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Composite, spec_from_gym
from gpu_envs.utils.devices import resolve_device, same_device

__all__ = [
    "NO_INFO",
    "check_same_step",
    "claim_simulator",
    "env_device",
    "flag_columns",
    "flatten_obs",
    "innermost",
    "numpy2_advice",
    "observation_spec_from_space",
    "release_simulator",
]


def flatten_obs(obs: Any, default_key: str = "observation") -> ObsDict:
    """A tensor/array or (nested) dict of them -> flat dict keyed by str / tuple keys."""
    if not isinstance(obs, Mapping):  # one tensor (or foreign array)
        return {default_key: obs}
    flat: ObsDict = {}

    def visit(prefix: tuple, node: Mapping) -> None:
        for name, value in node.items():
            key = prefix + (name,)
            if isinstance(value, Mapping):
                visit(key, value)
            else:
                flat[key[0] if len(key) == 1 else key] = value

    visit((), obs)
    return flat


def observation_spec_from_space(space: Any, device: torch.device, default_key: str = "observation") -> Composite:
    """The observation Composite for a single-env gymnasium space (Dict -> one key per group)."""
    spec = spec_from_gym(space, device=device)
    if isinstance(spec, Composite):
        return spec
    return Composite({default_key: spec}, device=device)


def env_device(env: Any, device: torch.device | str | None) -> torch.device:
    """The env's device, checked against the requested one (no silent cross-device copies)."""
    env_device = getattr(env, "device", None)
    if env_device is None:
        return resolve_device(device) if device is not None else torch.device("cpu")
    try:
        env_device = torch.device(env_device)
    except (RuntimeError, TypeError, ValueError):
        raise NotAnEnvError(
            f"{type(env).__name__}.device is {env_device!r}, not a torch device; set it to the torch.device its "
            "tensors live on."
        ) from None
    if device is None:
        return env_device
    wanted = resolve_device(device)
    if same_device(wanted, env_device):
        return env_device
    raise DeviceMismatchError(
        f"{type(env).__name__} lives on {env_device} but device={wanted} was requested. "
        f"Build the env on {wanted}, or wrap it with device={env_device!s} (gpu_envs never "
        "copies device-resident data through another device behind your back)."
    )


def check_same_step(env: Any) -> None:
    """Refuse envs that declare another auto-reset mode: their transitions would be wrong."""
    import gymnasium as gym

    mode = (getattr(env, "metadata", None) or {}).get("autoreset_mode")
    if mode is None or mode == gym.vector.AutoresetMode.SAME_STEP or str(mode).lower() in ("same_step", "samestep"):
        return
    raise AutoresetModeError(
        f"{type(env).__name__} declares autoreset_mode={mode}, but torch vector envs must reset ended rows "
        "inside step (SAME_STEP), reporting final observations in info['final_obs']. Build the env with "
        "autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP."
    )


def flag_columns(
    reward: Any,
    terminated: Any,
    truncated: Any,
    reward_shape: tuple[int, ...],
    describe: str = "the backend",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flat ``[N]`` reward and flags as ``(reward, terminated, truncated, done)`` columns of a RawStep.

    ``reward_shape`` is ``(N, 1)`` (or ``(N, K)`` for K objectives); flags become
    ``[N, 1]`` views and ``done = terminated | truncated``; a reward that is not float32
    is cast once. Views only, no copy of the flags. Values that are not torch tensors of
    ``N`` values each are a :class:`~gpu_envs.contract.errors.BackendError` naming them
    (``describe`` names the backend).
    """
    n = reward_shape[0]
    try:
        columns = (reward.view(reward_shape), terminated.view(n, 1), truncated.view(n, 1))
    except (AttributeError, RuntimeError, TypeError, ValueError):
        raise _bad_columns(describe, reward_shape, reward=reward, terminated=terminated, truncated=truncated) from None
    reward, terminated, truncated = columns
    if reward.dtype != torch.float32:
        reward = reward.to(torch.float32)
    return reward, terminated, truncated, terminated | truncated


def copied_flag_columns(
    reward: Any, terminated: Any, truncated: Any, num_envs: int, describe: str = "the backend"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`flag_columns` for a simulator that rewrites its reward and flag buffers every
    step (Isaac Lab, mjlab): the values are COPIED (the two flags in one op) straight into
    the ``[N, 1]`` layout, so a transition handed out stays as it was.
    """
    n = num_envs
    try:
        flags = torch.stack((terminated, truncated)).view(2, n, 1)
        reward = reward.view(n, 1).to(torch.float32, copy=True)
    except (AttributeError, RuntimeError, TypeError):  # not N values each: say which
        flag_columns(reward, terminated, truncated, (n, 1), describe)
        raise
    terminated, truncated = flags[0], flags[1]
    return reward, terminated, truncated, terminated | truncated


def _bad_columns(describe: str, reward_shape: tuple[int, ...], **values: Any) -> BackendError:
    """The error for the first of ``values`` that is not a tensor of the right number of values."""
    n = reward_shape[0]
    for name, value in values.items():
        want = math.prod(reward_shape) if name == "reward" else n
        if not isinstance(value, torch.Tensor):
            return BackendError(
                f"{describe} returned {name} as a {type(value).__module__}.{type(value).__name__}, not a torch.Tensor; "
                f"expected {want} values. Return torch tensors (e.g. torch.as_tensor(x, device=...)), or wrap a "
                "numpy env as a gymnasium VectorEnv."
            )
        if value.numel() != want:
            return BackendError(
                f"{describe} returned {name} {tuple(value.shape)}; expected {want} values ([N] or [N, 1])."
            )
    return BackendError(f"{describe} returned a reward or flags that cannot be viewed as [N, 1] columns.")


# id(simulator) -> weak reference to the backend driving it. Two BatchedEnvs stepping one
# simulator would interleave their steps (each caching its own root), silently.
_OWNERS: dict[int, weakref.ref] = {}


def claim_simulator(simulator: Any, backend: Backend) -> None:
    """Record ``backend`` as the only driver of ``simulator``; refuse a second live one.

    ``simulator`` should be the innermost object (``env.unwrapped``), so that two
    wrappers around one simulator are caught too. The claim ends with
    :func:`release_simulator` (``BatchedEnv.close``) or when the backend is garbage
    collected.
    """
    key = id(simulator)
    owner = _OWNERS.get(key)
    current = owner() if owner is not None else None
    if current is not None and current is not backend:
        raise InvalidArgumentError(
            f"this {type(simulator).__name__} is already driven by another BatchedEnv ({current.describe()}); "
            "two BatchedEnvs over one simulator would interleave their steps silently. Close the other env first "
            "(env.close()), keep using it, or build a second simulator."
        )
    _OWNERS[key] = weakref.ref(
        backend, lambda _ref, key=key: _OWNERS.pop(key, None) if _OWNERS.get(key) is _ref else None
    )


def release_simulator(backend: Backend) -> None:
    """End every claim of ``backend`` (it was closed)."""
    for key, ref in list(_OWNERS.items()):
        if ref() is backend:
            _OWNERS.pop(key, None)


def innermost(env: Any) -> Any:
    """The simulator behind ``env``: ``env.unwrapped`` when it exists and works, else ``env``.

    An adapter object that stands for another library's env (the SB3 and gym shims) names
    that env in its ``gpu_envs_simulator`` attribute, so wrapping the same foreign env
    twice is caught through two different shims.
    """
    try:
        inner = getattr(env, "unwrapped", env)
    except Exception:  # a wrapper whose property raises: claim the wrapper
        inner = env
    inner = env if inner is None else inner
    foreign = getattr(inner, "gpu_envs_simulator", None)
    return inner if foreign is None else innermost(foreign)


# numpy 2's message for a removed alias: "`np.float_` was removed in the NumPy 2.0 release. Use `np.float64` instead."
_NUMPY2_REMOVED = re.compile(r"`?(np\.\w+)`? was removed in the NumPy 2\.0 release\. Use `?([\w.]+)`? instead")


def numpy2_advice(message: str) -> str:
    """Advice for an env failing on a name numpy 2 removed (``np.float_``, ``np.bool8``...), or ``""``.

    numpy's own hint ("use np.float64 instead") is for the code's author; the user of a gym-era
    env needs to know which of their options works: an older numpy, an edit of the env's
    code, or the env's gymnasium version.
    """
    found = _NUMPY2_REMOVED.search(message)
    if found is None:
        return ""
    name, replacement = found.groups()
    return (
        f" The env's code (or gym's, for gym's own envs) uses {name}, which numpy 2 removed: pin numpy<2 in this "
        f"environment (pip install 'numpy<2'), or replace {name} with {replacement} in the env's code; gymnasium's "
        "version of a gym env (import gymnasium as gym) runs on numpy 2."
    )
