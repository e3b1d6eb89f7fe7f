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

# torch's CPU `where` is slow when a [N, 1] mask broadcasts over short rows (a per-row
# inner loop of a few elements). For large batches, rows of 2, 4, 8 or 16 bytes are
# viewed as ONE element of these dtypes, so the mask no longer broadcasts. `where` only
# moves bits, so the result is bit-exact for any dtype.
_ROW_DTYPES = {2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.complex128}
ROW_VIEW_MIN_ENVS = 256


def _row_dtype(shape: torch.Size, dtype: torch.dtype, num_envs: int, device: torch.device) -> torch.dtype | None:
    row_bytes = math.prod(shape) * dtype.itemsize
    if num_envs < ROW_VIEW_MIN_ENVS or len(shape) == 0 or device.type not in ("cpu", "cuda"):
        return None
    return _ROW_DTYPES.get(row_bytes)


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
        self.num_envs = num_envs
        self.missing_obs_value = missing_obs_value
        self.root_obs: ObsDict = {}
        self._placeholder: dict = {}  # 0-dim, broadcast over [N, *shape]
        self._placeholder_row: dict = {}  # [1, 1] in the row dtype (row-view path only)
        self._mask_shape: dict = {}  # the [N, 1] done mask viewed as [N, 1, ..., 1]
        self._row_dtype: dict = {}
        device = next((observation_spec[k].device for k in self.keys), None)
        # "no placeholder anywhere": one constant, never written (outputs are read-only)
        self._none_missing = torch.zeros(num_envs, 1, dtype=torch.bool, device=device)
        for key in self.keys:
            leaf = observation_spec[key]
            value = _default_placeholder(leaf.dtype) if missing_obs_value is None else missing_obs_value
            self._placeholder[key] = torch.tensor(value, dtype=leaf.dtype, device=leaf.device)
            self._mask_shape[key] = (num_envs,) + (1,) * len(leaf.shape)
            row_dtype = _row_dtype(leaf.shape, leaf.dtype, num_envs, leaf.device)
            self._row_dtype[key] = row_dtype
            if row_dtype is not None:
                row = torch.full((1, *leaf.shape), value, dtype=leaf.dtype, device=leaf.device)
                self._placeholder_row[key] = row.view(1, -1).view(row_dtype)

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
            return {k: self._fill(done, obs[k], k) for k in self.keys}, done
        if final_mask is None:  # a final observation for every ended row
            return {k: self._where(done, final_obs[k], obs[k], k) for k in self.keys}, self._none_missing
        valid = done & final_mask.view(done.shape)
        missing = done ^ valid
        next_obs = {k: self._where(valid, final_obs[k], self._fill(missing, obs[k], k), k) for k in self.keys}
        return next_obs, missing

    def _fill(self, mask: torch.Tensor, x: torch.Tensor, key) -> torch.Tensor:
        """``x`` with the placeholder on rows where ``mask`` ``[N, 1]`` is True."""
        if self._row_dtype[key] is not None and self._viewable(x, key):
            return self._unrows(torch.where(mask, self._placeholder_row[key], self._rows(x, key)), x)
        return torch.where(self._rank_mask(mask, key), self._placeholder[key], x)

    def _where(self, mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor, key) -> torch.Tensor:
        """``torch.where`` of two ``[N, *shape]`` observations under a ``[N, 1]`` row mask."""
        if self._row_dtype[key] is not None and self._viewable(a, key) and self._viewable(b, key):
            return self._unrows(torch.where(mask, self._rows(a, key), self._rows(b, key)), b)
        return torch.where(self._rank_mask(mask, key), a, b)

    def _rank_mask(self, mask: torch.Tensor, key) -> torch.Tensor:
        shape = self._mask_shape[key]
        return mask if len(shape) == 2 else mask.view(shape)

    def _viewable(self, x: torch.Tensor, key) -> bool:
        ratio = self._row_dtype[key].itemsize // x.dtype.itemsize
        return x.is_contiguous() and x.storage_offset() % ratio == 0

    def _rows(self, x: torch.Tensor, key) -> torch.Tensor:
        return x.view(self.num_envs, -1).view(self._row_dtype[key])

    @staticmethod
    def _unrows(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return rows.view(like.dtype).view(like.shape)
