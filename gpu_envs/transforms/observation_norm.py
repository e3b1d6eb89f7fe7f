"""``ObservationNorm``: running mean/variance normalisation of observations, on the device.

For each normalised key it keeps the count, mean and sum of squared deviations (M2) of
every observation seen so far, merged batch by batch with the parallel form of Welford's
algorithm (Chan et al.), in float64, with tensor ops only: no host sync, so it runs
inside a CUDA-graph-friendly step loop. Observations are mapped to
``(obs - mean) / sqrt(var + eps)`` (optionally clipped to ``[-clip, clip]``) in both
``("next", key)`` and the root, with the same statistics, so a row that did not end
sees the same normalised value as next observation and as next root.

What updates the statistics: each step's ``("next", key)`` rows and each reset's
observations on the reset rows. Rows that carry a placeholder (``("next",
"final_obs_missing")``) or any non-finite value are left out with a mask, so NaN
placeholders never poison the mean. ``freeze()`` stops updating (evaluation, or a
pretrained normaliser loaded with ``load_statistics``); ``unfreeze()`` resumes.

Several processes (torchrun): each merges only what it sees, with no communication per
step; :func:`gpu_envs.distributed.sync_stats` then merges every process's statistics
since the last sync into every process (counts, means and M2, the same parallel
formula), so all of them normalise with the same, global statistics. The statistics
stay ONE set of tensors updated in place (what :meth:`ObservationNorm.live_state`
exposes, so CUDA graphs and ``torch.compile`` see the synced values); a snapshot of
them at the last sync (or ``load_statistics``) tells what this process added since,
which is what it contributes to the next sync: shared statistics are never counted
twice.

By default every floating-point observation key is normalised (integer keys are left
alone); pass ``keys`` to choose. The observation spec keeps its shapes and dtypes; its
bounds become ``(-inf, inf)`` (``[-clip, clip]`` with ``clip``).

Example::

    >>> import gpu_envs
    >>> from gpu_envs.transforms import ObservationNorm, TransformedEnv
    >>> norm = ObservationNorm(clip=10.0)
    >>> env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=16, device="cpu", seed=0), norm)
    >>> traj = env.rollout(50)
    >>> norm.freeze()                       # statistics stop moving (evaluation)
    ObservationNorm(keys=['observation'], clip=10.0, frozen)
    >>> sorted(norm.statistics())           # what torch.save(norm.statistics(), path) keeps
    ['observation.count', 'observation.m2', 'observation.mean']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, SpecError
from gpu_envs.contract.specs import Box, Composite
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.keys import Key, is_key, next_key
from gpu_envs.utils.arguments import as_bool, as_number

__all__ = ["ObservationNorm"]


def _name(key: Key) -> str:
    return "/".join(key) if isinstance(key, tuple) else key


Moments = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (count, mean, M2), float64


def merge_moments(a: Moments, b: Moments) -> Moments:
    """Count, mean and M2 of the union of two samples (Chan et al.'s parallel update).

    ``count`` tensors broadcast against ``mean``/``M2``; an empty side (count 0) leaves
    the other unchanged. Pure tensor ops: no host sync.
    """
    count_a, mean_a, m2_a = a
    count_b, mean_b, m2_b = b
    total = count_a + count_b
    frac = count_b / total.clamp(min=1)  # 0 when b is empty: nothing changes
    delta = mean_b - mean_a
    return total, mean_a + delta * frac, m2_a + (m2_b + delta * delta * count_a * frac)


def remove_moments(total: Moments, a: Moments) -> Moments:
    """The moments ``b`` with ``merge_moments(a, b) == total``: what ``total`` adds to its part ``a``.

    Count 0 (and zero mean and M2) when nothing was added. Pure tensor ops: no host sync.
    """
    count, mean, m2 = total
    count_a, mean_a, m2_a = a
    count_b = count - count_a
    some = count_b > 0
    mean_b = torch.where(some, mean + (mean - mean_a) * (count_a / count_b.clamp(min=1)), 0.0)
    delta = mean_b - mean_a
    m2_b = torch.where(some, (m2 - m2_a - delta * delta * count_a * count_b / count.clamp(min=1)).clamp(min=0), 0.0)
    return count_b, mean_b, m2_b


class ObservationNorm(Transform):
    """Normalise observation keys with running statistics (see the module docstring).

    Args:
        keys: observation keys to normalise (a key or a list of keys; tuple keys for
            nested entries); ``None`` means every floating-point observation key.
        eps: added to the variance before the square root.
        clip: if given, normalised values are clamped to ``[-clip, clip]``.
        frozen: start frozen (statistics not updated until :meth:`unfreeze`).

    Attributes:
        keys: the normalised keys (known after the env is built).
        frozen: True while the statistics are not updated.
    """

    def __init__(
        self,
        keys: Key | Sequence[Key] | None = None,
        *,
        eps: float = 1e-8,
        clip: float | None = None,
        frozen: bool = False,
    ) -> None:
        super().__init__()
        given: Any = keys  # checked below: one key, a list of keys, or None
        if isinstance(given, (str, tuple)):
            given = [given]
        if given is not None:
            given = list(given) if isinstance(given, (list, set, frozenset)) else given
            if not isinstance(given, list) or not given or not all(is_key(k) for k in given):
                raise InvalidArgumentError(
                    f"ObservationNorm keys must be an observation key (a string, or a tuple of strings for nested "
                    f"entries), a list of them, or None (every float key); got {given!r}."
                )
        self._requested: list[Key] | None = None if given is None else given
        self.eps = as_number(eps, "ObservationNorm eps", minimum=0.0, strict_minimum=True, allow_inf=False)
        self.clip = None if clip is None else as_number(clip, "ObservationNorm clip", minimum=0.0, strict_minimum=True)
        self.frozen = as_bool(frozen, "ObservationNorm frozen")
        self.keys: list[Key] = []

    # ------------------------------------------------------------------ setup
    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        leaves = dict(specs.observation_spec.items(include_nested=True, leaves_only=True))
        if self._requested is None:
            self.keys = [k for k, s in leaves.items() if s.dtype is not None and s.dtype.is_floating_point]
            if not self.keys:
                raise SpecError(
                    f"ObservationNorm found no floating-point observation key among {list(leaves)}; "
                    "integer observations are not normalised. Drop the transform or cast the observations."
                )
        else:
            for key in self._requested:
                if key not in leaves:
                    raise SpecError(
                        f"ObservationNorm key {key!r} is not an observation key; available: {list(leaves)}."
                    )
                dtype = leaves[key].dtype
                if dtype is None or not dtype.is_floating_point:
                    raise SpecError(
                        f"ObservationNorm key {key!r} has dtype {leaves[key].dtype}; only floating-point "
                        "observations can be normalised."
                    )
            self.keys = list(self._requested)
        dev = specs.device
        f64 = {"dtype": torch.float64, "device": dev}
        self._count, self._mean, self._m2, self._loc, self._scale, self._view = {}, {}, {}, {}, {}, {}
        self._synced: dict[Key, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        obs_spec = cast(Composite, specs.observation_spec.to(dev))  # Spec.to keeps the class (a Composite)
        bound = math.inf if self.clip is None else self.clip
        for key in self.keys:
            leaf = leaves[key]
            # shape (1,), not (): torch.compile (2.13, CPU) drops in-place updates of 0-d float64 tensors
            self._count[key] = torch.zeros(1, **f64)
            self._mean[key] = torch.zeros(leaf.shape, **f64)
            self._m2[key] = torch.zeros(leaf.shape, **f64)
            self._loc[key] = torch.zeros(leaf.shape, dtype=leaf.dtype, device=dev)
            self._scale[key] = torch.ones(leaf.shape, dtype=leaf.dtype, device=dev)
            # the statistics at the last sync / load_statistics (count, mean, M2): shared already
            self._synced[key] = (torch.zeros(1, **f64), torch.zeros(leaf.shape, **f64), torch.zeros(leaf.shape, **f64))
            self._view[key] = (specs.num_envs,) + (1,) * len(leaf.shape)
            obs_spec[key] = Box(-bound, bound, leaf.shape, leaf.dtype, device=dev)
        return specs.replace(observation_spec=obs_spec)

    # ------------------------------------------------------------- data hooks
    def step(self, td: TensorDictBase) -> TensorDictBase:
        missing = td.get(("next", "final_obs_missing"), None)
        keep = None if missing is None else ~missing.view(self.num_envs)
        for key in self.keys:
            x = td.get(next_key(key))
            if not self.frozen:
                self._update(key, x, keep)
            td.set(next_key(key), self._normalize(key, x))
        return td

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        if not self.frozen:
            rows = mask.view(self.num_envs)
            for key in self.keys:
                self._update(key, td.get(key), rows)
        return self.root(td)

    def root(self, td: TensorDictBase) -> TensorDictBase:
        for key in self.keys:
            td.set(key, self._normalize(key, td.get(key)))
        return td

    def _normalize(self, key: Key, x: torch.Tensor) -> torch.Tensor:
        out = (x - self._loc[key]) * self._scale[key]
        return out if self.clip is None else out.clamp(-self.clip, self.clip)

    def _update(self, key: Key, x: torch.Tensor, rows: torch.Tensor | None) -> None:
        """Merge the batch statistics of the finite rows of ``x`` (and of ``rows``) in place."""
        n = self.num_envs
        valid = torch.isfinite(x).reshape(n, -1).all(dim=1)
        if rows is not None:
            valid = valid & rows
        m = valid.view(self._view[key])
        count_b = valid.sum().to(torch.float64)
        safe_b = count_b.clamp(min=1)
        mean_b = torch.where(m, x, 0).sum(dim=0).to(torch.float64) / safe_b
        dev = torch.where(m, x - mean_b.to(x.dtype), 0)
        m2_b = (dev * dev).sum(dim=0).to(torch.float64)
        self._set(key, merge_moments(self._moments(key), (count_b, mean_b, m2_b)))

    def _moments(self, key: Key) -> Moments:
        return self._count[key].view(()), self._mean[key], self._m2[key]

    def _set(self, key: Key, moments: Moments) -> None:
        """Write ``moments`` into ``key``'s statistics tensors, in place, and refresh loc/scale."""
        count, mean, m2 = moments
        self._m2[key].copy_(m2)
        self._mean[key].copy_(mean)
        self._count[key].copy_(count.view(1))
        self._refresh(key)

    def _refresh(self, key: Key) -> None:
        count = self._count[key].view(())
        var = torch.where(count > 0, self._m2[key] / count.clamp(min=1), 1.0)
        self._loc[key].copy_(self._mean[key])
        self._scale[key].copy_(torch.rsqrt(var + self.eps))

    # ------------------------------------------------------------- statistics
    def freeze(self) -> ObservationNorm:
        """Stop updating the statistics (normalisation continues). Returns ``self``."""
        self.frozen = True
        return self

    def unfreeze(self) -> ObservationNorm:
        """Resume updating the statistics. Returns ``self``."""
        self.frozen = False
        return self

    def mean(self, key: Key | None = None) -> torch.Tensor:
        """Running mean of ``key`` (default: the only/first normalised key), float64."""
        return self._mean[self._key(key)].clone()

    def var(self, key: Key | None = None) -> torch.Tensor:
        """Running (population) variance of ``key``, float64; 1 before any data."""
        key = self._key(key)
        count = self._count[key].view(())
        return torch.where(count > 0, self._m2[key] / count.clamp(min=1), 1.0)

    def count(self, key: Key | None = None) -> torch.Tensor:
        """Number of observations merged into ``key``'s statistics, float64 scalar."""
        return self._count[self._key(key)].clone().view(())

    def _key(self, key: Key | None) -> Key:
        if not self.keys:
            raise InvalidArgumentError("ObservationNorm has no statistics yet: build the TransformedEnv first.")
        if key is None:
            return self.keys[0]
        if key not in self._mean:
            raise InvalidArgumentError(f"{key!r} is not normalised here; normalised keys: {self.keys}.")
        return key

    # --------------------------------------------- sharing across processes
    def pending_stats(self) -> torch.Tensor:
        """Count, mean and M2 of what each key merged since the last sync, flat float64."""
        parts = []
        for key in self.keys:
            count, mean, m2 = remove_moments(self._moments(key), self._synced_moments(key))
            parts.append(torch.cat([count.view(1), mean.reshape(-1), m2.reshape(-1)]))
        return torch.cat(parts)

    def merge_stats(self, gathered: torch.Tensor) -> None:
        """Add every process's pending statistics (rows, rank order) to the synced ones, in place."""
        gathered, start = gathered.to(device=self.device, dtype=torch.float64), 0
        for key in self.keys:
            shape, size = self._mean[key].shape, self._mean[key].numel()
            total = self._synced_moments(key)
            for row in gathered:
                part = row[start : start + 1 + 2 * size]
                total = merge_moments(total, (part[0], part[1 : 1 + size].view(shape), part[1 + size :].view(shape)))
            start += 1 + 2 * size
            self._set(key, total)
            self._mark_synced(key)

    def _synced_moments(self, key: Key) -> Moments:
        count, mean, m2 = self._synced[key]
        return count.view(()), mean, m2

    def _mark_synced(self, key: Key) -> None:
        for snapshot, now in zip(self._synced[key], (self._count[key], self._mean[key], self._m2[key]), strict=True):
            snapshot.copy_(now)

    def live_state(self) -> dict[str, torch.Tensor]:
        out = {}
        for key in self.keys:
            synced_count, synced_mean, synced_m2 = self._synced[key]
            for field, tensor in (
                ("count", self._count[key]),
                ("mean", self._mean[key]),
                ("m2", self._m2[key]),
                ("loc", self._loc[key]),
                ("scale", self._scale[key]),
                ("synced_count", synced_count),
                ("synced_mean", synced_mean),
                ("synced_m2", synced_m2),
            ):
                out[f"{_name(key)}.{field}"] = tensor
        return out

    def statistics(self) -> dict[str, torch.Tensor]:
        """``{"<key>.count"|"<key>.mean"|"<key>.m2": tensor}``; nested keys are joined with ``/``."""
        out = {}
        for key in self.keys:
            out[f"{_name(key)}.count"] = self._count[key].clone().view(())
            out[f"{_name(key)}.mean"] = self._mean[key].clone()
            out[f"{_name(key)}.m2"] = self._m2[key].clone()
        return out

    def load_statistics(self, state: dict[str, torch.Tensor]) -> None:
        """Restore saved statistics (as synced ones: a later sync does not count them once per process)."""
        self._check_state(state, self.statistics())
        for key in self.keys:
            self._count[key].copy_(state[f"{_name(key)}.count"].reshape(1))
            self._mean[key].copy_(state[f"{_name(key)}.mean"])
            self._m2[key].copy_(state[f"{_name(key)}.m2"])
            self._refresh(key)
            self._mark_synced(key)

    def __repr__(self) -> str:
        keys = self.keys or self._requested or "float keys"
        extra = "" if self.clip is None else f", clip={self.clip}"
        return f"ObservationNorm(keys={keys}{extra}{', frozen' if self.frozen else ''})"
