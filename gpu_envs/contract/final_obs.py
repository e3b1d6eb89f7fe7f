"""The final-observation rule, in one place: a torch form and a numpy form of the same rule.

An auto-resetting vector env (Isaac Lab, gymnasium SAME_STEP, the built-in envs) returns
the *post-reset* observation on rows whose episode just ended. A learner needs the
*final* observation of the episode in the transition (to bootstrap truncated episodes)
and the post-reset one as the start of the next step. A backend hands both in its
:class:`~gpu_envs.backends.base.RawStep` (``obs``: post-reset; ``final_obs`` with
``final_mask``: the pre-reset observations, where it has them), and THE RULE makes the
transition's ``("next", key)`` and ``("next", "final_obs_missing")`` from them:

* ``final_mask`` None: ``final_obs`` is valid on every row (each row's pre-reset
  observation: the final one where an episode ended, the plain next one elsewhere), and
  it IS the next observation; nothing is missing;
* ``final_mask`` a ``[N]`` / ``[N, 1]`` bool tensor: ``final_obs`` is valid on those rows
  only. Ended rows where it is valid take it; ended rows where it is not get the
  placeholder (``missing_obs_value``: NaN for floats, 0 for integers by default) and
  ``final_obs_missing`` is True on exactly those rows; rows that did not end keep ``obs``;
* ``final_obs`` None (the simulator keeps nothing: Isaac Lab without
  ``compute_final_obs``): every ended row gets the placeholder and is missing.

Forms of the rule:

* torch (:class:`FinalObsRule`, what :class:`~gpu_envs.core.env.BatchedEnv` runs on
  every step): ``torch.where`` masks only, no host sync, planned once per key; the ONE
  placeholder fill of the library is :meth:`FinalObsRule.filler`'s;
* numpy (:func:`final_obs_numpy`): what a CPU backend does before anything becomes a
  tensor (the gymnasium backend's same-step swap and NEXT_STEP handling, and so the Ray
  workers, which run it): the final observations an env gives per ended row written
  into fresh copies of the observations, and the ``final_mask`` for the rows it did not
  give (whose placeholders the torch form fills).

Each backend declares which kind of final observation it gives (:class:`FinalObsKind`,
``Backend.capabilities.final_obs`` of every backend; ``docs/ARCHITECTURE.md`` has the
table).

Example::

    rule = FinalObsRule(env.single_observation_spec, num_envs)
    next_obs, missing = rule(raw.obs, raw.done, raw.final_obs, raw.final_mask)
"""

from __future__ import annotations

import enum
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import torch

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Composite
from gpu_envs.utils.row_views import ROW_VIEW_MIN_ENVS, row_dtype, rows_of

__all__ = [
    "ROW_VIEW_MIN_ENVS",
    "FinalObsCache",
    "FinalObsKind",
    "FinalObsRule",
    "check_placeholder",
    "final_obs_numpy",
]


class _KindsWithOldNames(enum.EnumMeta):
    """``FinalObsKind.SAME_STEP``, the old name of ``WRAPPER_RESET``: kept one release, with a warning."""

    def __getattr__(cls, name: str) -> Any:
        if name == "SAME_STEP":
            warnings.warn(
                "FinalObsKind.SAME_STEP was renamed FinalObsKind.WRAPPER_RESET (gymnasium's AutoresetMode.SAME_STEP "
                "means something else); the old name goes away in the next release.",
                DeprecationWarning,
                stacklevel=2,
            )
            return cls.WRAPPER_RESET
        raise AttributeError(name)


class FinalObsKind(str, enum.Enum, metaclass=_KindsWithOldNames):
    """Which final observations a backend gives (``Backend.capabilities.final_obs``; the docs table's column).

    The values are the phrases of ``docs/ARCHITECTURE.md``, so a backend may also declare
    the phrase itself. (Not to be confused with gymnasium's ``AutoresetMode``, which says
    when a vector env resets: a gymnasium ``SAME_STEP`` env gives ``SIMULATOR`` final
    observations, a ``NEXT_STEP`` one is made ``WRAPPER_RESET`` by gpu_envs.)

    Example::

        FinalObsKind("exact from the simulator") is FinalObsKind.SIMULATOR
    """

    #: the simulator keeps the final observation and hands it over (gymnasium SAME_STEP
    #: ``final_obs``, Isaac Lab with ``compute_final_obs``, the built-in envs)
    SIMULATOR = "exact from the simulator"
    #: gpu_envs resets the ended rows itself, inside the same ``step`` call, after reading
    #: their final observation: the simulator runs without its own auto-reset, or its
    #: next-step reset is turned into a same-step one
    WRAPPER_RESET = "exact by same-step handling in gpu_envs"
    #: the simulator resets inside ``step`` and keeps nothing: placeholders, and
    #: ``("next", "final_obs_missing")`` True on those rows
    PLACEHOLDER = "placeholder + final_obs_missing"


_OBJECT = np.dtype(object)


def _row_dtype(shape: torch.Size, dtype: torch.dtype, num_envs: int, device: torch.device) -> torch.dtype | None:
    # whole rows as single elements (gpu_envs.utils.row_views: torch's CPU `where` is slow
    # when a [N, 1] mask broadcasts over short rows), on the devices whose views allow it
    return row_dtype(shape, dtype, num_envs) if device.type in ("cpu", "cuda") else None


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
            self.flat = len(shape) == 1  # [N, k] views as [N, 1] rows (and back) in one step
        elif len(shape) == 1:  # [N, k]: the [N, 1] mask broadcasts as it is (no view, no row test)
            self.fill = self._fill_rows_of_one_dim
            self.where = cast("Callable[..., torch.Tensor]", torch.where)  # (mask, a, b), as the method

    def rows(self, x: torch.Tensor) -> torch.Tensor | None:
        """``x`` ``[N, *shape]`` as ``[N, 1]`` whole-row elements, or None if it cannot be viewed so.

        :func:`gpu_envs.utils.row_views.rows_of` (eager only: torch.compile fuses the per-row
        loop anyway, and tracing ``storage_offset()`` would break its graph).
        """
        return None if self.row_dtype is None else rows_of(x, 1, self.row_dtype)

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
        if rows_a is not None and rows_b is not None:  # rows_b is None whenever rows_a is
            return self.unrows(torch.where(mask, rows_a, rows_b))
        return torch.where(mask.view(self.mask_shape), a, b)


class FinalObsRule:
    """The rule's torch form (module docstring): ``(next_obs, final_obs_missing)`` from a step's observations.

    Args:
        observation_spec: Composite whose leaves are the observation keys (one env's).
        num_envs: batch size ``N``.
        missing_obs_value: placeholder for ended rows without a final observation; a
            number, or ``None`` for NaN (floats) / 0 (integers) / False (bool).

    How each key is masked (plain ``where`` or whole-row views, the placeholder tensors)
    is planned once here, so a step runs at most one ``where`` per key and nothing else.
    The results are fresh tensors or the backend's own (given away, never written).
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
        self._plans: dict = {}
        device = next((observation_spec[k].device for k in self.keys), None)
        # "no placeholder anywhere": one constant, never written (outputs are read-only)
        self.none_missing = torch.zeros(num_envs, 1, dtype=torch.bool, device=device)
        for key in self.keys:
            leaf = observation_spec[key]
            dtype, leaf_device = leaf.dtype, leaf.device
            if dtype is None or leaf_device is None:
                raise InvalidArgumentError(f"observation {key!r} has no single dtype and device; give it a leaf spec.")
            value = _default_placeholder(dtype) if missing_obs_value is None else missing_obs_value
            check_placeholder(value, dtype, key)
            self._plans[key] = _KeyPlan(leaf.shape, dtype, leaf_device, num_envs, value)
        self._fills = [(key, plan.fill) for key, plan in self._plans.items()]
        self._wheres = [(key, plan.where) for key, plan in self._plans.items()]
        # one observation key (most envs): no comprehension over keys on the way
        self._lone = self.keys[0] if len(self.keys) == 1 else None
        self._lone_fill = self._plans[self._lone].fill if self._lone is not None else None

    def filler(self, key: object) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """``fill(mask, x)``: ``x`` (observation ``key``) with the placeholder on rows where ``mask`` ``[N, 1]`` is True.

        The library's one placeholder fill (the numpy form leaves placeholders to it).
        """
        return self._plans[key].fill

    def __call__(
        self,
        obs: ObsDict,
        done: torch.Tensor,
        final_obs: ObsDict | None,
        final_mask: torch.Tensor | None,
    ) -> tuple[ObsDict, torch.Tensor]:
        """``(next_obs, final_obs_missing)`` of one step (the rule of the module docstring).

        ``obs``: the post-reset observations; ``done``: the step's ``[N, 1]`` bool flag;
        ``final_obs``/``final_mask``: as in :class:`~gpu_envs.backends.base.RawStep`.
        A ``final_mask`` that IS ``done`` (valid on exactly the ended rows) takes one
        ``where`` per key, as the general case would compute it, without its extra ops.
        """
        if final_obs is None:  # nothing to swap in: placeholders on every ended row
            lone, lone_fill = self._lone, self._lone_fill  # both None, or both set
            if lone is not None and lone_fill is not None:
                return {lone: lone_fill(done, obs[lone])}, done
            return {k: fill(done, obs[k]) for k, fill in self._fills}, done
        if final_mask is None:  # valid on every row: it is the next observation
            return final_obs, self.none_missing
        if final_mask is done:  # valid on exactly the ended rows
            return {k: where(done, final_obs[k], obs[k]) for k, where in self._wheres}, self.none_missing
        plans = self._plans
        valid = done & final_mask.view(done.shape)
        missing = done ^ valid
        next_obs = {k: plan.where(valid, final_obs[k], plan.fill(missing, obs[k])) for k, plan in plans.items()}
        return next_obs, missing


class FinalObsCache(FinalObsRule):
    """The rule as torchrl's ``VecGymEnvTransform``-style module: it also caches the next root.

    ``fo(obs, done, final_obs, final_mask)`` returns what :class:`FinalObsRule` returns
    and keeps ``obs`` (the post-reset observations) as :attr:`root_obs`, the input of the
    next step. (:class:`~gpu_envs.core.env.BatchedEnv` keeps its root in its step path
    and runs the rule itself.)

    Example::

        fo = FinalObsCache(env.single_observation_spec, env.num_envs)
        next_obs, missing = fo(raw.obs, raw.done, raw.final_obs, raw.final_mask)
        fo.root_obs  # observations to act on next
    """

    def __init__(
        self,
        observation_spec: Composite,
        num_envs: int,
        missing_obs_value: float | int | None = None,
    ) -> None:
        super().__init__(observation_spec, num_envs, missing_obs_value)
        self.root_obs: ObsDict = {}

    def __call__(
        self,
        obs: ObsDict,
        done: torch.Tensor,
        final_obs: ObsDict | None,
        final_mask: torch.Tensor | None,
    ) -> tuple[ObsDict, torch.Tensor]:
        self.root_obs = obs
        return super().__call__(obs, done, final_obs, final_mask)


# -------------------------------------------------------------------- numpy form
def final_obs_numpy(
    obs: Sequence[np.ndarray],
    done: np.ndarray,
    final: Any,
    rows: np.ndarray | None = None,
    *,
    read_row: Callable[[Any], Sequence[np.ndarray]] | None = None,
    dtypes: Sequence[np.dtype] | None = None,
    every_end: bool = False,
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """The rule's numpy form: a :class:`~gpu_envs.backends.base.RawStep`'s ``final_obs`` and ``final_mask``.

    Args:
        obs: the step's observation leaves ``[N, ...]`` (post-reset on ended rows).
        done: ``[N]`` bool, the rows that ended.
        final: the final observations the env gives: leaves ``[N, ...]`` (valid on
            ``rows``), or gymnasium's per-row object array (``info["final_obs"]``: one
            observation per ended row, ``None`` elsewhere) read with ``read_row``; or
            ``None`` when ``obs`` itself holds the final observation on every row (a
            NEXT_STEP or DISABLED env's step, before its ended rows are reset).
        rows: ``[N]`` bool, the rows on which ``final`` holds one (the env's own mask);
            ``None``: every ended row (an object array: the rows whose entry is not None).
        read_row: an object array entry -> its leaves (one per observation key); ``None``
            for a lone leaf (the entry is the observation itself).
        dtypes: the leaves' dtypes (default: ``obs``'s).
        every_end: the env is known to give a final observation for exactly the ended
            rows (gymnasium's own vector envs): ``rows`` is taken as it is, and no mask
            is made.

    Returns:
        ``(final_obs, final_mask)``: fresh leaves holding the final observation on every
        ended row that has one and ``obs`` elsewhere, and ``None`` when that is every
        ended row (then they are the transition's next observations, valid on every row),
        else the ``[N]`` rows that have one (the torch form puts the placeholder on the
        other ended rows).
    """
    if len(obs) == 1 and (dtypes is None or len(dtypes) == 1):  # one leaf (most envs): no comprehension's frame
        leaf = obs[0]
        dtype = leaf.dtype if dtypes is None else dtypes[0]
        out = [leaf.copy() if leaf.dtype is dtype else np.array(leaf, dtype)]
    else:
        dtypes = [leaf.dtype for leaf in obs] if dtypes is None else dtypes
        out = [
            leaf.copy() if leaf.dtype is dtype else np.array(leaf, dtype)
            for leaf, dtype in zip(obs, dtypes, strict=True)
        ]
    if final is None:  # the observations are the final ones: fresh copies, valid on every row
        return out, None
    if rows is not None and rows.__class__ is not np.ndarray:
        rows = np.asarray(rows, bool)
    if final.__class__ is np.ndarray and final.dtype is _OBJECT:  # one entry per row, None where absent
        if rows is None:
            rows = np.fromiter((entry is not None for entry in final), bool, len(final))
        take = rows if every_end else rows & done
        index = take.nonzero()[0].tolist()  # a loop over the ended rows only
        if read_row is None:  # a lone leaf: the entry is the observation itself
            (dst,) = out
            for i in index:
                dst[i] = final[i]
        else:
            for i in index:
                for dst, leaf in zip(out, read_row(final[i]), strict=True):
                    dst[i] = leaf
    else:
        take = done if rows is None else rows & done
        for dst, src in zip(out, final, strict=True):
            dst[take] = src[take]
    if rows is None or every_end:
        return out, None
    # take is rows & done, a subset of done: equal when it counts as many rows
    return out, None if np.count_nonzero(take) == np.count_nonzero(done) else take


def __getattr__(name: str) -> Any:
    """``FinalObsTransform``, the old name of :class:`FinalObsCache` (it is not a Transform): one release, with a warning."""
    if name == "FinalObsTransform":
        warnings.warn(
            "FinalObsTransform was renamed FinalObsCache (the rule plus the cached next root; not a Transform); "
            "the old name goes away in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return FinalObsCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
