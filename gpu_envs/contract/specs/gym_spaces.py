"""Conversion between specs and gymnasium spaces."""

from __future__ import annotations

import gymnasium
import numpy as np
import torch

from gpu_envs.contract.errors import SpecError, UnsupportedSpaceError
from gpu_envs.contract.specs.base import DeviceLike, Spec
from gpu_envs.contract.specs.box import Box
from gpu_envs.contract.specs.composite import Composite
from gpu_envs.contract.specs.discrete import Binary, Discrete, MultiDiscrete
from gpu_envs.contract.specs.dtypes import torch_dtype


def spec_from_gym(space: gymnasium.spaces.Space, device: DeviceLike = "cpu") -> Spec:
    """Spec equivalent to a gymnasium ``space`` (one env's, e.g. a ``single_*`` space), on ``device``.

    The result is a per-env spec; add the batch dims with ``.expand(...)``. (A batched
    space such as a vector env's ``action_space`` has no batch marker, so it converts to
    a per-env spec of its full shape: convert the ``single_*`` space instead.)

    Box -> :class:`Box` (a bool Box with bounds 0/1 -> :class:`Binary`), Discrete ->
    :class:`Discrete`, MultiDiscrete -> :class:`MultiDiscrete`, MultiBinary ->
    ``Binary(dtype=torch.int8)``, Dict -> :class:`Composite`, Tuple ->
    ``Composite(tuple_like=True)`` with keys ``"0"``, ``"1"``, ... Other spaces raise
    :class:`UnsupportedSpaceError`.

    Example::

        >>> spec_from_gym(gymnasium.spaces.Discrete(3, start=1))
        Discrete(n=3, start=1, dtype=int64, device=cpu)
    """
    spaces = gymnasium.spaces
    if isinstance(space, spaces.Box):
        if space.dtype == np.bool_:
            if not (space.low == 0).all() or not (space.high == 1).all():
                raise UnsupportedSpaceError(
                    f"bool {space!r} has fixed entries (low == high == 1 or 0); only bool Boxes with "
                    "bounds 0/1 are supported. Give a custom spec or drop the fixed entries."
                )
            return Binary(tuple(space.shape), dtype=torch.bool, device=device)
        box = Box(
            torch.from_numpy(np.array(space.low)),
            torch.from_numpy(np.array(space.high)),
            tuple(space.shape),
            torch_dtype(space.dtype),
            device,
        )
        return box.with_bounded(
            torch.from_numpy(np.array(space.bounded_below)), torch.from_numpy(np.array(space.bounded_above))
        )
    if isinstance(space, spaces.Discrete):
        return Discrete(int(space.n), torch_dtype(space.dtype), device, start=int(space.start))
    if isinstance(space, spaces.MultiDiscrete):
        return MultiDiscrete(space.nvec, torch_dtype(space.dtype), device, start=space.start)
    if isinstance(space, spaces.MultiBinary):
        return Binary(space.n, dtype=torch.int8, device=device)
    if isinstance(space, spaces.Dict):
        return Composite({k: spec_from_gym(s, device) for k, s in space.spaces.items()}, device=device)
    if isinstance(space, spaces.Tuple):
        children = {str(i): spec_from_gym(s, device) for i, s in enumerate(space.spaces)}
        return Composite(children, device=device, tuple_like=True)
    raise UnsupportedSpaceError(
        f"{type(space).__name__} space {space!r} has no fixed-shape tensor spec. Flatten or replace it "
        "with a gymnasium wrapper (e.g. an ObservationWrapper to a Box/Dict), or pass a custom "
        "observation/action spec."
    )


def spec_to_gym(spec: Spec) -> gymnasium.spaces.Space:
    """The gymnasium space of ``spec`` (same as ``spec.to_gym()``; batched specs give batched spaces)."""
    if not isinstance(spec, Spec):
        raise SpecError(f"spec_to_gym expects a Spec, got {type(spec).__name__}.")
    return spec.to_gym()
