"""What every adapter does at its boundary with another library.

* :func:`require_env`: the object has the BatchedEnv API (``make``/``wrap``'s result, or a
  ``TransformedEnv``), else a clear error;
* :class:`ObservationLayout`: a TensorDict's observation keys as the value a gymnasium
  space describes (one array for a lone ``"observation"`` key, else a dict, nested, or a
  tuple, mirroring the observation Composite), and those spaces;
* :func:`host_copy`: one device -> host copy of a tensor as a numpy array the caller owns;
* :func:`action_tensor`: numpy (or torch, on any device) actions as a tensor of the
  action spec's dtype on the env's device, passing through what already is one;
  :func:`reshaped_action_tensor` first takes them in any shape with the right number of
  values (skrl's ``[N, 1]`` for a ``[N]`` spec), refusing other counts by name.

Example::

    layout = ObservationLayout(env.single_observation_spec)
    obs = layout.build(lambda key: host_copy(root[key]))      # numpy, gymnasium's layout
    td["action"] = action_tensor(actions, env.action_spec, env.device)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import torch

from gpu_envs.contract.errors import ActionError, NotAnEnvError
from gpu_envs.contract.protocols import require_env_api
from gpu_envs.contract.specs import Composite, Spec
from gpu_envs.utils.arrays import any_to_torch
from gpu_envs.utils.devices import same_device

Key = str | tuple[str, ...]


def require_env(env: Any, consumer: str) -> None:
    """Refuse anything without the BatchedEnv API, naming what to build instead."""
    require_env_api(env, consumer, NotAnEnvError, f" Wrap it first: {consumer}(gpu_envs.wrap(your_env)).")


class ObservationLayout:
    """How an env's observation keys become the value its gymnasium space describes.

    A lone ``"observation"`` key is one array (a ``Box`` space); several keys (Isaac Lab's
    ``"policy"``/``"critic"`` groups, a gymnasium ``Dict``) are a dict, nested like the
    Composite, or a tuple for a ``tuple_like`` one.

    Attributes:
        keys: the TensorDict keys of the observation leaves.
        single_space: one env's gymnasium space; ``batched_space`` the whole batch's.
    """

    def __init__(self, single_spec: Composite, batched_spec: Composite) -> None:
        self.spec = single_spec
        self.keys: list[Key] = list(single_spec.keys(include_nested=True, leaves_only=True))
        self.lone = self.keys == ["observation"]
        self.single_space = (single_spec["observation"] if self.lone else single_spec).to_gym()
        self.batched_space = (batched_spec["observation"] if self.lone else batched_spec).to_gym()

    def build(self, leaf: Callable[[Key], Any]) -> Any:
        """The observation value, with ``leaf(key)`` at each leaf (an array, or one row of one)."""
        if self.lone:
            return leaf("observation")
        return self._node(self.spec, (), leaf)

    def _node(self, spec: Composite, prefix: tuple[str, ...], leaf: Callable[[Key], Any]) -> Any:
        items = {}
        for name, child in spec.items():
            path = (*prefix, name)
            if isinstance(child, Composite):
                items[name] = self._node(child, path, leaf)
            else:
                items[name] = leaf(path if prefix else name)
        if spec.tuple_like:
            return tuple(items[str(i)] for i in range(len(items)))
        return items


def host_copy(tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` copied once to the host, as a numpy array the caller may keep or modify."""
    if tensor.device.type == "cpu":
        return tensor.detach().numpy().copy()
    return tensor.detach().cpu().numpy()


def action_tensor(actions: Any, spec: Spec, device: torch.device) -> torch.Tensor:
    """``actions`` as a tensor on ``device`` with ``spec``'s dtype (within the same kind).

    A tensor already on ``device`` with the spec's dtype passes through (no copy, no
    sync). Numpy arrays (``action_space.sample()``, a learner's ``.cpu().numpy()``),
    lists, and tensors elsewhere are copied to ``device`` once. Floats become the spec's
    float dtype and integers its integer dtype (``np.float64`` torques, ``np.int32``
    indices); a float action for an integer spec is left as it is, so the env's own
    check names the dtype mismatch instead of truncating values silently.
    """
    tensor = any_to_torch(actions)
    if tensor.shape != spec.shape:
        raise ActionError(
            f"the actions have shape {tuple(tensor.shape)}; this env takes {tuple(spec.shape)} (one action per env, "
            "as its action_space says)."
        )
    dtype = spec.dtype
    if tensor.dtype != dtype and tensor.dtype.is_floating_point == dtype.is_floating_point:
        tensor = tensor.to(dtype)
    if not same_device(tensor.device, device):
        tensor = tensor.to(device)
    return tensor


def reshaped_action_tensor(actions: Any, spec: Spec, device: torch.device) -> torch.Tensor:
    """:func:`action_tensor` of ``actions`` reshaped to ``spec``'s shape (no copy for a contiguous tensor).

    For libraries whose policies emit actions in their own layout (skrl's ``[N, 1]``
    columns, rsl_rl's ``[N, num_actions]``): the number of values must match, else an
    :class:`~gpu_envs.contract.errors.ActionError` names both shapes instead of a reshape failing
    inside the adapter.
    """
    tensor = any_to_torch(actions)
    if tensor.numel() != spec.shape.numel():
        raise ActionError(
            f"the actions have shape {tuple(tensor.shape)} ({tensor.numel()} values); this env takes "
            f"{tuple(spec.shape)} ({spec.shape.numel()} values: one action per env, as its action_space says)."
        )
    return action_tensor(tensor.reshape(spec.shape), spec, device)


def gym_action_spaces(env: Any) -> tuple[gymnasium.spaces.Space, gymnasium.spaces.Space]:
    """``(single, batched)`` gymnasium action spaces of ``env``."""
    return env.single_action_spec.to_gym(), env.action_spec.to_gym()
