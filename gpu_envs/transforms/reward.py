"""Reward transforms: ``RewardScale`` (affine) and ``ClipReward`` (clamp), on the device.

Both rewrite ``("next", "reward")`` with a new tensor (the env's is left untouched) and
update the reward spec's bounds to match.

Example::

    env = TransformedEnv(base, EpisodeStats(), RewardScale(0.1), ClipReward(-1.0, 1.0))
    # EpisodeStats sees raw rewards; the learner sees clip(0.1 * r, -1, 1)
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDictBase

from gpu_envs.errors import InvalidArgumentError, SpecError
from gpu_envs.specs import Box
from gpu_envs.transforms.base import EnvSpecs, Transform

__all__ = ["ClipReward", "RewardScale"]

REWARD = ("next", "reward")


def _number(value: object, what: str, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"{what} must be a number, got {value!r}.")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise InvalidArgumentError(f"{what} must be a {'non-NaN' if allow_inf else 'finite'} number, got {value}.")
    return value


def _reward_box(spec: object, who: str) -> Box:
    if not isinstance(spec, Box):
        raise SpecError(f"{who} needs a Box reward spec, got {spec!r}.")
    return spec


def _times(bound: torch.Tensor, scale: float) -> torch.Tensor:
    """``bound * scale`` in float64 where ``0 * inf`` is 0 (a zero scale maps everything to loc)."""
    out = bound.double() * scale
    return torch.where(torch.isnan(out), 0.0, out)


class RewardScale(Transform):
    """``reward <- reward * scale + loc`` (same order as torchrl's ``RewardScaling``).

    Example: ``RewardScale(0.01)`` for Pendulum's rewards in ``[-16.3, 0]``.
    """

    def __init__(self, scale: float, loc: float = 0.0) -> None:
        super().__init__()
        self.scale = _number(scale, "RewardScale scale")
        self.loc = _number(loc, "RewardScale loc")

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        box = _reward_box(specs.reward_spec, "RewardScale")
        a = _times(box.low, self.scale) + self.loc
        b = _times(box.high, self.scale) + self.loc
        low, high = torch.minimum(a, b), torch.maximum(a, b)
        return specs.replace(reward_spec=Box(low, high, box.shape, box.dtype, device=specs.device))

    def step(self, td: TensorDictBase) -> TensorDictBase:
        td.set(REWARD, td.get(REWARD) * self.scale + self.loc)
        return td

    def __repr__(self) -> str:
        return f"RewardScale(scale={self.scale}, loc={self.loc})"


class ClipReward(Transform):
    """``reward <- clamp(reward, low, high)``; either bound may be infinite.

    Example: ``ClipReward(-1.0, 1.0)`` (Atari-style reward clipping).
    """

    def __init__(self, low: float = -1.0, high: float = 1.0) -> None:
        super().__init__()
        self.low = _number(low, "ClipReward low", allow_inf=True)
        self.high = _number(high, "ClipReward high", allow_inf=True)
        if self.low > self.high:
            raise InvalidArgumentError(f"ClipReward needs low <= high, got low={self.low}, high={self.high}.")

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        box = _reward_box(specs.reward_spec, "ClipReward")
        low = box.low.double().clamp(self.low, self.high)
        high = box.high.double().clamp(self.low, self.high)
        return specs.replace(reward_spec=Box(low, high, box.shape, box.dtype, device=specs.device))

    def step(self, td: TensorDictBase) -> TensorDictBase:
        td.set(REWARD, td.get(REWARD).clamp(self.low, self.high))
        return td

    def __repr__(self) -> str:
        return f"ClipReward(low={self.low}, high={self.high})"
