"""One named layout for a step's arrays: packed in RawStep's order, unpacked into a RawStep.

A backend over a CPU simulator (gymnasium, the Ray fleet) copies a step's host arrays
into one staging buffer (:class:`~gpu_envs.utils.arrays.HostStaging`); the JAX backend
packs its jitted step's outputs into a few flat buffers
(:class:`~gpu_envs.backends.jax.pack.PackedLayout`). Both need a fixed order of fields
on the way in and the same fields found again on the way out. :class:`StepLayout` is
that order, named once per backend after :class:`~gpu_envs.backends.base.RawStep`'s
fields -- observation leaves, reward, terminated, truncated, done, final observation
leaves, final mask, info leaves -- so that no backend slices its buffers by index
arithmetic:

* :attr:`StepLayout.fields`: ``[(shape, torch dtype), ...]`` in that order, for the
  staging buffer (a group the layout leaves out has no field);
* :meth:`StepLayout.pack`: a step's values by field name -> the flat list the buffer
  takes (``None`` for a group this step does not have, e.g. no final observations);
* :meth:`StepLayout.unpack`: the buffer's flat output -> the :class:`RawStep`.

Example::

    layout = StepLayout({"observation": ((8, 4), torch.float32)}, num_envs=8)
    stage = HostStaging(layout.fields, "cuda")
    raw = layout.unpack(stage.publish(layout.pack(obs=[obs], reward=r, terminated=te,
                                                  truncated=tr, done=d, final_obs=[final])))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from gpu_envs.backends.base import NO_INFO, RawStep

__all__ = ["StepLayout"]

Field = tuple[tuple[int, ...], torch.dtype]
_new_tuple = tuple.__new__


class StepLayout:
    """The fields of one backend's steps, in RawStep's order (see the module docstring).

    Args:
        obs: observation key -> ``(batched shape, torch dtype)``, in the backend's key order.
        num_envs: ``N``.
        reward_shape: the batched reward shape, ``(N, 1)`` by default (``(N, K)``: K objectives).
        flag_shape: the batched shape of terminated/truncated/done, ``(N, 1)`` by default.
        final_obs: the layout holds final observation leaves (the observations' fields again).
        final_mask: the shape of the final mask field, or ``None`` for no such field.
        info: info key -> ``(batched shape, torch dtype)``.
    """

    def __init__(
        self,
        obs: Mapping[Any, Field],
        num_envs: int,
        *,
        reward_shape: Sequence[int] | None = None,
        flag_shape: Sequence[int] | None = None,
        final_obs: bool = True,
        final_mask: Sequence[int] | None = None,
        info: Mapping[Any, Field] | None = None,
    ) -> None:
        info = dict(info or {})
        self.obs_keys = list(obs)
        self.info_keys = list(info)
        n = num_envs
        reward_shape = (n, 1) if reward_shape is None else tuple(reward_shape)
        flag_shape = (n, 1) if flag_shape is None else tuple(flag_shape)
        obs_fields = [(tuple(shape), dtype) for shape, dtype in obs.values()]
        groups: list[tuple[str, list[Field]]] = [
            ("obs", obs_fields),
            ("reward", [(reward_shape, torch.float32)]),
            ("terminated", [(flag_shape, torch.bool)]),
            ("truncated", [(flag_shape, torch.bool)]),
            ("done", [(flag_shape, torch.bool)]),
            ("final_obs", obs_fields if final_obs else []),
            ("final_mask", [] if final_mask is None else [(tuple(final_mask), torch.bool)]),
            ("info", [(tuple(shape), dtype) for shape, dtype in info.values()]),
        ]
        self.fields: list[Field] = [field for _, fields in groups for field in fields]
        self.slices: dict[str, slice] = {}
        start = 0
        for name, fields in groups:
            self.slices[name] = slice(start, start + len(fields))
            start += len(fields)
        self.has_final_obs = final_obs
        self.has_final_mask = final_mask is not None
        self._no_obs = [None] * len(self.obs_keys)
        self._obs, self._final, self._info = self.slices["obs"], self.slices["final_obs"], self.slices["info"]
        self._reward = self.slices["reward"].start
        self._mask = self.slices["final_mask"].start
        self._lone = self.obs_keys[0] if len(self.obs_keys) == 1 else None  # one observation key: no zip

    def pack(
        self,
        obs: Sequence[Any],
        reward: Any,
        terminated: Any,
        truncated: Any,
        done: Any,
        final_obs: Sequence[Any] | None = None,
        final_mask: Any = None,
        info: Sequence[Any] = (),
    ) -> list:
        """The flat list of a step's values (leaves in key order; ``None`` skips a group this step lacks)."""
        values = [*obs, reward, terminated, truncated, done]
        if self.has_final_obs:
            values += self._no_obs if final_obs is None else final_obs
        if self.has_final_mask:
            values.append(final_mask)
        values += info
        return values

    def unpack(self, flat: Sequence[Any], obs_are_final: bool = False) -> RawStep:
        """The :class:`RawStep` of a packed step's outputs.

        ``None`` outputs are groups the step did not have; with ``obs_are_final`` a step
        without final observation leaves hands its observations as ``final_obs`` too
        (valid on every row: no row ended, or they were taken before the rows were reset).
        """
        lone, r = self._lone, self._reward
        obs = {lone: flat[0]} if lone is not None else dict(zip(self.obs_keys, flat[self._obs], strict=True))
        final_obs = obs if obs_are_final else None
        if self.has_final_obs:
            start = self._final.start
            if flat[start] is not None:
                final_obs = {lone: flat[start]} if lone is not None else dict(zip(self.obs_keys, flat[self._final], strict=True))
        final_mask = flat[self._mask] if self.has_final_mask else None
        info = dict(zip(self.info_keys, flat[self._info], strict=True)) if self.info_keys else NO_INFO
        # RawStep(obs, reward, terminated, truncated, done, final_obs, final_mask, info), positionally:
        # a NamedTuple built through tuple.__new__ (its keyword constructor costs ~1 us per step)
        return _new_tuple(RawStep, (obs, flat[r], flat[r + 1], flat[r + 2], flat[r + 3], final_obs, final_mask, info))
