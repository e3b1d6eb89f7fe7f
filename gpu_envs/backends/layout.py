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
* :meth:`StepLayout.unpack`: the buffer's flat output -> the :class:`RawStep`;
* :meth:`StepLayout.publisher`: the three in one call bound to a staging, for the step
  path (on the CPU, where staging is one fresh array per value, each value becomes its
  tensor directly, without the flat list in between).

Example::

    layout = StepLayout({"observation": ((8, 4), torch.float32)}, num_envs=8)
    stage = HostStaging(layout.fields, "cuda")
    raw = layout.unpack(stage.publish(layout.pack(obs=[obs], reward=r, terminated=te,
                                                  truncated=tr, done=d, final_obs=[final])))
    publish = layout.publisher(stage)   # the same, bound once: raw = publish([obs], r, te, tr, d, [final])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from gpu_envs.backends.base import NO_INFO, RawStep
from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.utils.arrays import HostStaging

__all__ = ["StepLayout"]

Field = tuple[tuple[int, ...], torch.dtype]
_new_tuple = tuple.__new__
_from_numpy = torch.from_numpy
_array = np.array
Publisher = Callable[..., RawStep]


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
                final_obs = (
                    {lone: flat[start]}
                    if lone is not None
                    else dict(zip(self.obs_keys, flat[self._final], strict=True))
                )
        final_mask = flat[self._mask] if self.has_final_mask else None
        info = dict(zip(self.info_keys, flat[self._info], strict=True)) if self.info_keys else NO_INFO
        # RawStep(obs, reward, terminated, truncated, done, final_obs, final_mask, info), positionally:
        # a NamedTuple built through tuple.__new__ (its keyword constructor costs ~1 us per step)
        return _new_tuple(RawStep, (obs, flat[r], flat[r + 1], flat[r + 2], flat[r + 3], final_obs, final_mask, info))

    def publisher(self, stage: HostStaging, owned: Sequence[bool] | None = None) -> Publisher:
        """``publish(obs, reward, terminated, truncated, done, final_obs=None, final_mask=None, info=(), obs_are_final=False)``.

        The :class:`RawStep` of a step's host arrays on ``stage``'s device:
        ``unpack(stage.publish(pack(...), owned), obs_are_final)``, bound once. On a
        packed stage (an accelerator) it is exactly that. On the CPU, where
        :class:`~gpu_envs.utils.arrays.HostStaging` copies each value once into a fresh
        array in its field's dtype (``np.array``) that ``torch.from_numpy`` shares, or
        shares a value that ``owned`` says the caller gives away, each value becomes its
        tensor directly: the same tensors, without the flat list and the per-field loop
        (a few microseconds of a small env's step). Values are arrays here; row blocks
        (:class:`~gpu_envs.utils.arrays.RowBlocks`) go through ``stage.publish``.

        ``stage`` must stage :attr:`fields`.
        """
        if list(stage.fields) != [(tuple(shape), dtype) for shape, dtype in self.fields]:
            raise InvalidArgumentError("publisher(stage): the stage was not built from this layout's fields.")
        owned = [False] * len(self.fields) if owned is None else [bool(give) for give in owned]
        if len(owned) != len(self.fields):
            raise InvalidArgumentError(f"publisher: owned has {len(owned)} flags for {len(self.fields)} fields.")
        if stage.packed:
            return self._packed_publisher(stage, owned)
        # per field: None to share the given-away array, else the numpy dtype to copy it into
        plan = [None if give else np_dtype for give, np_dtype in zip(owned, stage.np_dtypes, strict=True)]
        return self._host_publisher(plan)

    def _packed_publisher(self, stage: HostStaging, owned: list[bool]) -> Publisher:
        pack, unpack, publish = self.pack, self.unpack, stage.publish

        def publish_packed(
            obs, reward, terminated, truncated, done, final_obs=None, final_mask=None, info=(), obs_are_final=False
        ) -> RawStep:
            values = pack(obs, reward, terminated, truncated, done, final_obs, final_mask, info)
            return unpack(publish(values, owned), obs_are_final)

        return publish_packed

    def _host_publisher(self, plan: list) -> Publisher:
        keys, lone, info_keys = self.obs_keys, self._lone, self.info_keys
        obs_plan, final_plan, info_plan = plan[self._obs], plan[self._final], plan[self._info]
        r = self._reward
        reward_dt, terminated_dt, truncated_dt, done_dt = plan[r : r + 4]
        lone_dt = obs_plan[0] if lone is not None else None
        lone_final_dt = final_plan[0] if lone is not None and final_plan else None
        has_final, has_mask = self.has_final_obs, self.has_final_mask
        mask_dt = plan[self._mask] if has_mask else None

        def tensor(value: Any, dtype: np.dtype | None) -> torch.Tensor:
            """The value shared (``dtype`` None: given away) or copied once into ``dtype``."""
            return _from_numpy(value) if dtype is None else _from_numpy(_array(value, dtype))

        def publish_host(
            obs, reward, terminated, truncated, done, final_obs=None, final_mask=None, info=(), obs_are_final=False
        ) -> RawStep:
            if lone is not None:
                obs_t = {lone: tensor(obs[0], lone_dt)}
            else:
                obs_t = {key: tensor(leaf, dt) for key, leaf, dt in zip(keys, obs, obs_plan, strict=True)}
            final_t = obs_t if obs_are_final else None
            if has_final and final_obs is not None:
                if lone is not None:
                    final_t = {lone: tensor(final_obs[0], lone_final_dt)}
                else:
                    final_t = {key: tensor(leaf, dt) for key, leaf, dt in zip(keys, final_obs, final_plan, strict=True)}
            mask_t = None if final_mask is None or not has_mask else tensor(final_mask, mask_dt)
            info_t = NO_INFO
            if info_keys:
                info_t = {key: tensor(leaf, dt) for key, leaf, dt in zip(info_keys, info, info_plan, strict=True)}
            # RawStep(obs, reward, terminated, truncated, done, final_obs, final_mask, info), positionally (see unpack)
            flags = (tensor(reward, reward_dt), tensor(terminated, terminated_dt), tensor(truncated, truncated_dt))
            return _new_tuple(RawStep, (obs_t, *flags, tensor(done, done_dt), final_t, mask_t, info_t))

        return publish_host
