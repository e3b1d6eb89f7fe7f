"""True final observations for auto-resetting envs, on the device, without branching.

An auto-resetting vector env (Isaac Lab, gymnasium SAME_STEP, the built-in envs) returns
the *post-reset* observation on rows whose episode just ended. A learner needs the
*final* observation of the episode in the transition (to bootstrap truncated episodes)
and the post-reset one as the start of the next step. :class:`FinalObsTransform` does
what torchrl's ``VecGymEnvTransform`` does, with ``torch.where`` masks only:

* ``("next", key)`` = final observation on ended rows where the env gave one, the env's
  observation elsewhere;
* where the env gave none (Isaac Lab without ``compute_final_obs``), ended rows get a
  placeholder (``missing_obs_value``: NaN for floats, 0 for integers by default) and
  ``("next", "final_obs_missing")`` is True on exactly those rows;
* the post-reset observation is cached (:attr:`root_obs`) and served as the root of the
  next step, so no sub-env is reset twice or stepped more than once.

Example::

    fo = FinalObsTransform(env.observation_spec)
    next_obs, missing = fo(raw.obs, done, raw.final_obs, raw.final_mask)
    fo.root_obs  # observations to act on next
"""

from __future__ import annotations

import math

import torch

from gpu_envs.backends.base import ObsDict
from gpu_envs.specs import Composite


def _default_placeholder(dtype: torch.dtype) -> float | int | bool:
    if dtype.is_floating_point or dtype.is_complex:
        return math.nan
    if dtype == torch.bool:
        return False
    return 0


class FinalObsTransform:
    """Swap in final observations on ended rows and cache the post-reset ones.

    Args:
        observation_spec: Composite whose leaves are the observation keys.
        num_envs: batch size ``N``.
        missing_obs_value: placeholder for ended rows without a final observation; a
            number, or ``None`` for NaN (floats) / 0 (integers) / False (bool).
    """

    def __init__(
        self,
        observation_spec: Composite,
        num_envs: int,
        missing_obs_value: float | int | None = None,
    ) -> None:
        self.keys = list(observation_spec.keys(include_nested=True, leaves_only=True))
        self._placeholder: dict = {}
        self._mask_shape: dict = {}
        for key in self.keys:
            leaf = observation_spec[key]
            value = _default_placeholder(leaf.dtype) if missing_obs_value is None else missing_obs_value
            self._placeholder[key] = torch.tensor(value, dtype=leaf.dtype, device=leaf.device)
            # an obs [N, *shape] needs the [N, 1] done mask viewed as [N, 1, ..., 1].
            self._mask_shape[key] = (num_envs,) + (1,) * len(leaf.shape)
        self.root_obs: ObsDict = {}
        self.missing_obs_value = missing_obs_value

    def __call__(
        self,
        obs: ObsDict,
        done: torch.Tensor,
        final_obs: ObsDict | None,
        final_mask: torch.Tensor | None,
    ) -> tuple[ObsDict, torch.Tensor]:
        """Return ``(next_obs, final_obs_missing)`` and cache ``obs`` as the next root.

        ``done`` is the ``[N, 1]`` bool done flag of this step; ``final_mask`` is ``[N]``.
        """
        self.root_obs = obs
        if final_obs is None:  # nothing to swap in: placeholders on every ended row
            return {k: self._where(done, self._placeholder[k], obs[k], k) for k in self.keys}, done
        if final_mask is None:  # a final observation for every ended row
            missing = torch.zeros_like(done)
            return {k: self._where(done, final_obs[k], obs[k], k) for k in self.keys}, missing
        valid = done & final_mask.view(done.shape)
        missing = done ^ valid
        next_obs = {}
        for k in self.keys:
            value = self._where(missing, self._placeholder[k], obs[k], k)
            next_obs[k] = self._where(valid, final_obs[k], value, k)
        return next_obs, missing

    def _where(self, mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor, key) -> torch.Tensor:
        shape = self._mask_shape[key]
        if mask.dim() != len(shape):
            mask = mask.view(shape)
        return torch.where(mask, a, b)
