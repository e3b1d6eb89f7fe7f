"""The gymnasium-facing boundary of the built-in envs: :class:`GymnasiumActions`.

The built-in envs are gymnasium ``VectorEnv``s of torch tensors whose own ``step`` takes
tensors on their device only. ``gymnasium.make_vec("gpu_envs/<id>", n, arrays="torch",
autoreset_mode="same_step")`` (:mod:`gpu_envs.gymnasium_ids`, which registers the ids)
returns the env itself behind :class:`GymnasiumActions`, which takes actions the way
gymnasium's envs do (numpy arrays such as ``envs.action_space.sample()``, lists, tensors
on another device: converted once; a tensor on the env's device passes through) and
forwards everything else to the env (``envs.unwrapped`` is the env itself). Actions are
checked there, on every step: the shape and dtype kind always (an integer index for
``Discrete``: a float would be applied as 0 N and turn the observations into float64),
and the values of actions on the host (numpy, lists, CPU tensors: free there):
``Discrete`` indices in range (CartPole would push with 90 N), finite ``Box`` values. A
refusal is an :class:`~gpu_envs.contract.errors.ActionError` naming the rows, their
values and the fix; nothing is stepped.

Example::

    envs = GymnasiumActions(CartPoleEnv(num_envs=8))
    obs, info = envs.reset(seed=0)
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())   # tensors
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import gymnasium
import numpy as np
import torch
from gymnasium import spaces

from gpu_envs.contract.errors import ActionError, UnsupportedSpaceError
from gpu_envs.utils.arrays import any_to_torch

if TYPE_CHECKING:
    from gpu_envs.builtin.base import BatchedTorchEnv

__all__ = ["GymnasiumActions"]


class GymnasiumActions(gymnasium.vector.VectorActionWrapper):
    """A built-in env that takes actions as gymnasium's envs do (numpy, lists): the conversion at the boundary.

    A tensor on the env's device passes through (no copy); anything else numpy reads,
    or a tensor elsewhere, is copied once to the env's device. Every other attribute
    (``device``, ``state``, ``autoreset_mode``, ...) is the env's.
    """

    env: BatchedTorchEnv

    def actions(self, actions: Any) -> torch.Tensor:
        device = self.env.device
        if isinstance(actions, torch.Tensor):
            self._check_meta(tuple(actions.shape), actions.dtype.is_floating_point, actions.dtype.is_complex)
            if actions.device.type == "cpu":
                self._check_values(actions.detach().numpy())
            return actions if actions.device == device else actions.to(device)
        array = np.asarray(actions)
        self._check_meta(array.shape, array.dtype.kind == "f", array.dtype.kind not in "biuf")
        self._check_values(array)
        return any_to_torch(array.astype(self._np_dtype, copy=False), device)

    # ----------------------------------------------------------------- checks
    @property
    def _np_dtype(self) -> np.dtype:
        return cast(np.dtype, self.env.action_space.dtype)  # the built-in envs' spaces all have one

    def _check_meta(self, shape: tuple, floating: bool, other: bool) -> None:
        space, batched = self.env.single_action_space, self.env.action_space
        if space.shape is None or batched.shape is None:
            raise UnsupportedSpaceError(f"{self._name()}: the action space {space!r} has no shape to check actions by.")
        want = tuple(batched.shape)
        if shape != want:
            raise ActionError(
                f"{self._name()}: the actions have shape {shape}; this env takes {want}: one action of shape "
                f"{tuple(space.shape)} for each of its {self.env.num_envs} envs, as envs.action_space says "
                "(e.g. envs.action_space.sample()). Nothing was stepped."
            )
        integer = isinstance(space, spaces.Discrete)
        if other or (integer and floating):
            kind = "integer indices" if integer else "numbers"
            raise ActionError(
                f"{self._name()}: the actions are {'floats' if floating else 'not numbers'}; this env takes {kind} "
                f"({space!r}). Pass integer indices (e.g. np.argmax(logits, axis=-1) or envs.action_space.sample()); "
                "floats are not truncated silently. Nothing was stepped."
            )

    def _check_values(self, array: np.ndarray) -> None:
        space = self.env.single_action_space
        if isinstance(space, spaces.Discrete) and array.size:
            low, high = int(space.start), int(space.start + space.n - 1)
            bad = (array < low) | (array > high)
            if bad.any():
                raise ActionError(
                    f"{self._name()}: action values outside {space!r} (valid: {low}..{high}) on {_rows(array, bad)}. "
                    "Nothing was stepped. Sample actions from envs.action_space, or map the policy's output into that "
                    "range (e.g. an argmax over the logits)."
                )
        elif isinstance(space, spaces.Box) and array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ActionError(
                f"{self._name()}: non-finite action values (NaN or inf) on {_rows(array, ~np.isfinite(array))}; "
                f"{space!r} needs finite values. Nothing was stepped. Check the policy's outputs (a NaN loss, a "
                "diverged network), or replace them (np.nan_to_num) before stepping."
            )

    def _name(self) -> str:
        spec = getattr(self.env, "spec", None)
        return f"make_vec({getattr(spec, 'id', None) or type(self.env).__name__!r})"

    def __getattr__(self, name: str) -> Any:
        # only called for names not found normally: the env's (torchrl's GymWrapper reads autoreset_mode)
        if name.startswith("_") or "env" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.env, name)


def _rows(array: np.ndarray, bad: np.ndarray) -> str:
    """The first rows where ``bad`` holds and their actions, as text."""
    per_row = bad.reshape(bad.shape[0], -1).any(axis=1)
    rows = np.flatnonzero(per_row)
    shown = ", ".join(f"row {i}: {array[i].tolist()!r}" for i in rows[:8].tolist())
    return shown + (f" (and {rows.size - 8} more rows)" if rows.size > 8 else "")
