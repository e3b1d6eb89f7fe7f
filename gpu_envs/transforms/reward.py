"""Reward transforms: ``RewardScale`` (affine), ``ClipReward`` (clamp), ``ScalarizeReward`` (weighted sum).

Each rewrites ``("next", "reward")`` with a new tensor (the env's is left untouched) and
updates the reward spec's bounds to match; in an env of agent groups ``RewardScale`` and
``ClipReward`` rewrite each agent's ``("next", group, "reward")`` alike (the team reward
is then the transformed sum, not the sum of the transformed rewards). ``RewardScale`` and ``ClipReward`` act
elementwise, so they also take the vector rewards ``[N, K]`` of multi-objective envs;
``ScalarizeReward`` turns those into the ``[N, 1]`` reward learners need.

Example::

    env = TransformedEnv(base, EpisodeStats(), RewardScale(0.1), ClipReward(-1.0, 1.0))
    # EpisodeStats sees raw rewards; the learner sees clip(0.1 * r, -1, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, SpecError
from gpu_envs.contract.groups import groups_in
from gpu_envs.contract.specs import Box
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.utils.arguments import as_number

__all__ = ["ClipReward", "RewardScale", "ScalarizeReward"]

REWARD = ("next", "reward")


def group_rewards(info_spec: Any) -> list[tuple[str, str, str]]:
    """``("next", group, "reward")`` of every agent group (their per-agent rewards ride in the info spec)."""
    return [("next", group, "reward") for group in groups_in(info_spec)]


def _reward_box(spec: object, who: str) -> Box:
    if not isinstance(spec, Box):
        raise SpecError(f"{who} needs a Box reward spec, got {spec!r}.")
    return spec


def _times(bound: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """``bound * scale`` in float64 where ``0 * inf`` is 0 (a zero scale maps everything to loc).

    ``scale`` may be a tensor of per-element weights (``ScalarizeReward``)."""
    out = bound.double() * scale
    return torch.where(torch.isnan(out), 0.0, out)


class RewardScale(Transform):
    """``reward <- reward * scale + loc`` (same order as torchrl's ``RewardScaling``).

    Example: ``RewardScale(0.01)`` for Pendulum's rewards in ``[-16.3, 0]``.
    """

    def __init__(self, scale: float, loc: float = 0.0) -> None:
        super().__init__()
        self.scale = as_number(scale, "RewardScale scale", allow_inf=False)
        self.loc = as_number(loc, "RewardScale loc", allow_inf=False)

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        box = _reward_box(specs.reward_spec, "RewardScale")
        a = _times(box.low, self.scale) + self.loc
        b = _times(box.high, self.scale) + self.loc
        low, high = torch.minimum(a, b), torch.maximum(a, b)
        self.keys = [REWARD, *group_rewards(specs.info_spec)]
        return specs.replace(reward_spec=Box(low, high, box.shape, box.dtype, device=specs.device))

    def step(self, td: TensorDictBase) -> TensorDictBase:
        for key in self.keys:  # the reward, and each agent's in an env of agent groups
            td.set(key, td.get(key) * self.scale + self.loc)
        return td

    def __repr__(self) -> str:
        return f"RewardScale(scale={self.scale}, loc={self.loc})"


class ClipReward(Transform):
    """``reward <- clamp(reward, low, high)``; either bound may be infinite.

    Example: ``ClipReward(-1.0, 1.0)`` (Atari-style reward clipping).
    """

    def __init__(self, low: float = -1.0, high: float = 1.0) -> None:
        super().__init__()
        self.low = as_number(low, "ClipReward low")
        self.high = as_number(high, "ClipReward high")
        if self.low > self.high:
            raise InvalidArgumentError(f"ClipReward needs low <= high, got low={self.low}, high={self.high}.")

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        box = _reward_box(specs.reward_spec, "ClipReward")
        low = box.low.double().clamp(self.low, self.high)
        high = box.high.double().clamp(self.low, self.high)
        self.keys = [REWARD, *group_rewards(specs.info_spec)]
        return specs.replace(reward_spec=Box(low, high, box.shape, box.dtype, device=specs.device))

    def step(self, td: TensorDictBase) -> TensorDictBase:
        for key in self.keys:  # the reward, and each agent's in an env of agent groups
            td.set(key, td.get(key).clamp(self.low, self.high))
        return td

    def __repr__(self) -> str:
        return f"ClipReward(low={self.low}, high={self.high})"


class ScalarizeReward(Transform):
    """``reward <- sum_k weights[k] * reward[..., k]``: a vector reward ``[N, K]`` becomes ``[N, 1]``.

    For multi-objective envs (``gpu_envs.backends.mo_gymnasium``), whose K objectives a
    learner, ``gae`` or ``EpisodeStats`` cannot use as they are. ``weights`` holds K
    finite numbers; the reward spec becomes a ``(1,)`` Box bounded by the weighted
    bounds of the objectives. Put ``EpisodeStats`` after it (it needs the scalar).

    Example::

        env = TransformedEnv(gpu_envs.wrap(mo_gymnasium.make("deep-sea-treasure-v0")),
                             ScalarizeReward([0.9, 0.1]), EpisodeStats())
    """

    def __init__(self, weights: Sequence[float] | torch.Tensor) -> None:
        super().__init__()
        try:
            if torch.as_tensor(weights).dtype == torch.bool:
                raise TypeError("bools are not weights")
            w = torch.as_tensor(weights, dtype=torch.float64).detach().cpu()
        except (TypeError, ValueError, RuntimeError):
            raise InvalidArgumentError(
                f"ScalarizeReward weights must be a sequence of numbers, got {weights!r}."
            ) from None
        if w.dim() != 1 or w.numel() == 0 or not bool(torch.isfinite(w).all()):
            raise InvalidArgumentError(
                f"ScalarizeReward weights must be a non-empty 1-D sequence of finite numbers (one per objective), got {weights!r}."
            )
        self.weights = w

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        box = _reward_box(specs.reward_spec, "ScalarizeReward")
        k = self.weights.numel()
        if tuple(box.shape) != (k,):
            raise SpecError(
                f"ScalarizeReward has {k} weights but the env's reward has shape {tuple(box.shape)} per env; pass one "
                "weight per objective (the env's single_reward_spec.shape)."
            )
        specs = super().setup(specs)
        self._w = self.weights.to(device=specs.device, dtype=torch.float32)
        w = self.weights.to(box.low.device)
        a, b = _times(box.low, w), _times(box.high, w)
        low, high = torch.minimum(a, b).sum().reshape(1), torch.maximum(a, b).sum().reshape(1)
        return specs.replace(reward_spec=Box(low, high, (1,), torch.float32, device=specs.device))

    def step(self, td: TensorDictBase) -> TensorDictBase:
        td.set(REWARD, (td.get(REWARD) * self._w).sum(-1, keepdim=True))
        return td

    def __repr__(self) -> str:
        return f"ScalarizeReward(weights={self.weights.tolist()})"
