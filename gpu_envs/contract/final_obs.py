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
from collections.abc import Callable

import torch

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Composite

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


def check_placeholder(value: float | int, dtype: torch.dtype, key: object) -> None:
    """Refuse a ``missing_obs_value`` that ``dtype`` cannot hold exactly (NaN in ints, 2.5 in ints, 300 in uint8)."""
    if dtype.is_floating_point or dtype.is_complex:
        magnitude = abs(value)  # 1e40 in float32 would silently become inf; inf and NaN are asked for as such
        if math.isfinite(magnitude) and magnitude > torch.finfo(dtype).max:
            raise InvalidArgumentError(
                f"missing_obs_value={value!r} overflows observation {key!r} of dtype {dtype} (it would become inf); "
                f"pass a value within +-{torch.finfo(dtype).max:.3g}, or inf/NaN explicitly, or None (NaN)."
            )
        return
    fits = math.isfinite(value) and float(value).is_integer()
    if fits and dtype == torch.bool:
        fits = value in (0, 1)
    elif fits:
        info = torch.iinfo(dtype)
        fits = info.min <= value <= info.max
    if not fits:
        raise InvalidArgumentError(
            f"missing_obs_value={value!r} cannot be stored in observation {key!r} of dtype {dtype}; pass a value "
            "that dtype holds exactly (e.g. -1 or 0 for integer observations), or None (NaN for floats, 0 for integers)."
        )


def _default_placeholder(dtype: torch.dtype) -> float | int | bool:
    if dtype.is_floating_point or dtype.is_complex:
        return math.nan
    if dtype == torch.bool:
        return False
    return 0


class _KeyPlan:
    """How one observation key is masked, decided once: plain ``where``, or whole rows viewed as one element."""

    def __init__(self, shape: torch.Size, dtype: torch.dtype, device: torch.device, num_envs: int, value) -> None:
        self.shape = (num_envs, *shape)
        self.dtype = dtype
        self.placeholder = torch.tensor(value, dtype=dtype, device=device)  # 0-dim, broadcast
        self.mask_shape = (num_envs,) + (1,) * len(shape)  # the [N, 1] mask viewed as [N, 1, ..., 1]
        self.row_dtype = _row_dtype(shape, dtype, num_envs, device)
        if self.row_dtype is not None:
            row = torch.full((1, *shape), value, dtype=dtype, device=device)
            self.placeholder_row = row.view(1, -1).view(self.row_dtype)
            self.ratio = self.row_dtype.itemsize // dtype.itemsize
            self.flat = len(shape) == 1  # [N, k] views as [N, 1] rows (and back) in one step
        elif len(shape) == 1:  # [N, k]: the [N, 1] mask broadcasts as it is (no view, no row test)
            self.fill = self._fill_rows_of_one_dim
            self.where = torch.where

    def rows(self, x: torch.Tensor) -> torch.Tensor | None:
        """``x`` ``[N, *shape]`` as ``[N, 1]`` whole-row elements, or None if it cannot be viewed so.

        Eager only: torch.compile fuses the per-row loop anyway, and tracing
        ``storage_offset()`` would break its graph.
        """
        if self.row_dtype is None or torch.compiler.is_compiling():
            return None
        if not x.is_contiguous() or x.storage_offset() % self.ratio:
            return None
        return x.view(self.row_dtype) if self.flat else x.view(self.shape[0], -1).view(self.row_dtype)

    def unrows(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.view(self.dtype) if self.flat else rows.view(self.dtype).view(self.shape)

    def _fill_rows_of_one_dim(self, mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.where(mask, self.placeholder, x)

    def fill(self, mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``x`` with the placeholder on rows where ``mask`` ``[N, 1]`` is True."""
        rows = self.rows(x)
        if rows is not None:
            return self.unrows(torch.where(mask, self.placeholder_row, rows))
        return torch.where(mask.view(self.mask_shape), self.placeholder, x)

    def where(self, mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``torch.where`` of two ``[N, *shape]`` observations under a ``[N, 1]`` row mask."""
        rows_a = self.rows(a)
        rows_b = None if rows_a is None else self.rows(b)
        if rows_b is not None:
            return self.unrows(torch.where(mask, rows_a, rows_b))
        return torch.where(mask.view(self.mask_shape), a, b)


class FinalObsTransform:
    """Swap in final observations on ended rows and cache the post-reset ones.

    Args:
        observation_spec: Composite whose leaves are the observation keys.
        num_envs: batch size ``N``.
        missing_obs_value: placeholder for ended rows without a final observation; a
            number, or ``None`` for NaN (floats) / 0 (integers) / False (bool).

    How each key is masked (plain ``where`` or whole-row views, the placeholder tensors)
    is planned once here, so a step runs one ``where`` per key and nothing else.
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
        self._plans: dict = {}
        device = next((observation_spec[k].device for k in self.keys), None)
        # "no placeholder anywhere": one constant, never written (outputs are read-only)
        self.none_missing = torch.zeros(num_envs, 1, dtype=torch.bool, device=device)
        for key in self.keys:
            leaf = observation_spec[key]
            value = _default_placeholder(leaf.dtype) if missing_obs_value is None else missing_obs_value
            check_placeholder(value, leaf.dtype, key)
            self._plans[key] = _KeyPlan(leaf.shape, leaf.dtype, leaf.device, num_envs, value)
        self._fills = [(key, plan.fill) for key, plan in self._plans.items()]
        self._wheres = [(key, plan.where) for key, plan in self._plans.items()]

    def filler(self, key: object) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """``fill(mask, x)``: ``x`` (observation ``key``) with the placeholder on rows where ``mask`` ``[N, 1]`` is True."""
        return self._plans[key].fill

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
            return {k: fill(done, obs[k]) for k, fill in self._fills}, done
        if final_mask is None:  # a final observation for every ended row
            return {k: where(done, final_obs[k], obs[k]) for k, where in self._wheres}, self.none_missing
        plans = self._plans
        valid = done & final_mask.view(done.shape)
        missing = done ^ valid
        next_obs = {k: plan.where(valid, final_obs[k], plan.fill(missing, obs[k])) for k, plan in plans.items()}
        return next_obs, missing
