"""Step 3 of the step path (:mod:`gpu_envs.core.step_path`): the four named ways one simulator step is run.

:meth:`~gpu_envs.core.step_path.StepPath.bind` binds one of them as the path's
:class:`Advance`; each has one method, ``run(action) -> RawStep``:

* :class:`FirstStep`: the backend's ``step``, validated field by field, then the path's
  later parts are bound;
* :class:`DirectStep`: the function a backend hands from
  :meth:`~gpu_envs.backends.base.Backend.direct_step` (the built-in envs' ``raw_step``);
* :class:`BackendStep`: the backend's own ``step``;
* :class:`WatchedStep`: either of the last two, its outputs' metadata compared on every
  step (backends handing on tensors they did not make).

Example:

    >>> import torch
    >>> from gpu_envs.builtin import CartPoleEnv
    >>> env = CartPoleEnv(4, seed=0)
    >>> _ = env.reset()
    >>> advance = DirectStep(env.raw_step)  # the built-in env's own step, called as it is
    >>> raw = advance.run(torch.zeros(4, dtype=torch.long))
    >>> raw.obs["observation"].shape, raw.done.shape
    (torch.Size([4, 4]), torch.Size([4, 1]))
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Protocol

import torch

from gpu_envs.backends.base import Backend, RawStep
from gpu_envs.contract.keys import ObsDict
from gpu_envs.core.step_validation import StepValidator

__all__ = ["Advance", "Advanced", "BackendStep", "DirectStep", "FirstStep", "WatchedStep"]


class Advance(Protocol):
    """Step 3 of the path, as bound by :meth:`StepPath.bind`: one simulator step, as a RawStep."""

    def run(self, action: torch.Tensor) -> RawStep: ...


class BackendStep:
    """The backend's own ``step``: the advance of backends without a direct step."""

    __slots__ = ("backend",)

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def run(self, action: torch.Tensor) -> RawStep:
        return self.backend.step(action)


class DirectStep:
    """The function a backend hands from :meth:`~gpu_envs.backends.base.Backend.direct_step`, called as the step.

    For the built-in envs, their own ``raw_step``: a built-in step is one call of the
    env, with nothing of the backend in between.
    """

    __slots__ = ("step",)

    def __init__(self, step: Callable[[torch.Tensor], RawStep]) -> None:
        self.step = step

    def run(self, action: torch.Tensor) -> RawStep:
        return self.step(action)


class WatchedStep:
    """An advance whose outputs' metadata are compared with the specs on every step.

    For backends that hand on tensors someone else made (a user's torch env, Isaac Lab):
    a shape or dtype that changes after the first step is an error naming it, never a
    silent broadcast. No value is read (no host sync).
    """

    __slots__ = ("check", "inner")

    def __init__(self, inner: Advance, check: Callable[[RawStep], None]) -> None:
        self.inner = inner
        self.check = check

    def run(self, action: torch.Tensor) -> RawStep:
        raw = self.inner.run(action)
        self.check(raw)
        return raw


class FirstStep:
    """The first step's advance: the backend's ``step``, checked field by field; then the path's later parts.

    ``bind_later`` is a weak reference to the path's method that binds them (the part
    holds no strong reference back to its path: a dropped env is freed at once, with its
    simulator).
    """

    __slots__ = ("backend", "bind_later", "validator")

    def __init__(self, backend: Backend, validator: StepValidator, bind_later: weakref.WeakMethod) -> None:
        self.backend = backend
        self.validator = validator
        self.bind_later = bind_later

    def run(self, action: torch.Tensor) -> RawStep:
        raw = self.backend.step(action)
        self.validator.raw_step(raw)
        bind = self.bind_later()
        if bind is not None:
            bind()
        return raw


class Advanced:
    """What steps 3-4 made of one action (:meth:`~gpu_envs.core.step_path.StepPath.advance`): the RawStep and the final-obs rule's result.

    One record per path, written in place by every step (no allocation): read it before
    the next step. ``call`` is the guard's call number of the step (None inside a
    compiled chunk), which :meth:`~gpu_envs.core.step_path.StepPath.finish` checks.
    """

    __slots__ = ("call", "final_obs_missing", "next_obs", "raw")

    def __init__(self) -> None:
        self.raw: RawStep
        self.next_obs: ObsDict = {}
        self.final_obs_missing: torch.Tensor
        self.call: int | None = None
