"""``History``: each observation key becomes a window of its last K values, reset-aware.

``History(keys="observation", length=K)`` turns ``td[key]`` ``[N, *obs]`` into
``[N, K, *obs]``: the row's last K observations, **oldest first** (``window[:, -1]`` is the
current one). That is Isaac Lab's order for its observation-manager ``history_length``
(flattened there to ``[N, K * obs]`` unless ``flatten_history_dim=False``) and mjlab's; here
the window is never flattened (``td[key].flatten(1)`` gives their flat layout).

Exactly what each row holds:

* after a reset of a row (a full reset, a masked ``reset(td)`` with ``"_reset"``, or the
  auto-reset of ``step_and_maybe_reset``), its window is K copies of its reset
  observation: a fresh episode never sees the previous one;
* after a step, ``("next", key)`` is the window ending in the step's next observation; on
  rows that ended, that is the TRUE final observation (the env's, or its placeholder where
  the backend flags ``("next", "final_obs_missing")``), after K - 1 of that episode's own
  observations;
* the root handed back by ``step_and_maybe_reset`` holds, on the rows that ended, the new
  episode's window (K copies of the reset observation) and, on the others, the same window
  as ``("next", key)``;
* a masked or partial reset touches only its rows: the other rows' windows go on.

State: one window per key (kept time-major, ``[K, N, *obs]``, so that a step's shift is one
contiguous copy; the TensorDicts hold ``[N, K, *obs]`` views of new tensors) and a ``[N, 1]`` flag of the rows whose window
must restart from the next root (they ended in the last step), updated in place with
``torch.where`` (no host sync, the same ops every step: CUDA-graph and ``compile=True``
safe); ``get_state`` / ``set_state`` snapshot both per row. Any observation dtype works
(uint8 image frames are stacked as uint8); the spec's bounds are the per-step bounds
repeated K times.

Example::

    >>> import gpu_envs
    >>> from gpu_envs.transforms import History, TransformedEnv
    >>> env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0), History(length=3))
    >>> root = env.reset()
    >>> root["observation"].shape                   # [N, K, 3], oldest first
    torch.Size([4, 3, 3])
    >>> bool((root["observation"] == root["observation"][:, -1:]).all())   # a fresh episode: K copies
    True
    >>> root["action"] = env.action_spec.rand(generator=env.generator)
    >>> td, root = env.step_and_maybe_reset(root)
    >>> bool((td["next", "observation"][:, :-1] == td["observation"][:, 1:]).all())   # shifted by one
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.specs import Box, Composite
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.keys import Key, as_keys, read, write
from gpu_envs.utils.arguments import as_int
from gpu_envs.utils.row_views import row_dtype, where_rows

__all__ = ["History"]


class History(Transform):
    """The last ``length`` observations of each key, oldest first (see the module docstring).

    Args:
        keys: the observation key(s) to keep a history of (a key, a tuple key for a nested
            entry, or a list of them); default ``"observation"``.
        length: K >= 1, the window's length (K = 1 only adds the window dim).

    Attributes:
        keys: the keys, as a list.
        length: K.
    """

    def __init__(self, keys: Key | Sequence[Key] = "observation", length: int = 4) -> None:
        super().__init__()
        self.keys: list[Key] = as_keys(keys, "History")
        self.length = as_int(length, "History length", minimum=1)
        self._windows: list[torch.Tensor] = []

    # ------------------------------------------------------------------ setup
    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        leaves = dict(specs.observation_spec.items(include_nested=True, leaves_only=True))
        n, k, dev = specs.num_envs, self.length, specs.device
        obs_spec = cast(Composite, specs.observation_spec.to(dev))
        self._windows = []
        for key in self.keys:
            leaf = leaves.get(key)
            if leaf is None:
                raise SpecError(f"History key {key!r} is not an observation key; available: {list(leaves)}.")
            if not isinstance(leaf, Box):
                raise SpecError(
                    f"History key {key!r} has a {type(leaf).__name__} spec; History stacks Box observations (float or "
                    "integer, images included). Keep a history of a Box key, or turn this one into a Box first."
                )
            low = leaf.low.to(dev).unsqueeze(0).expand(k, *leaf.shape)
            high = leaf.high.to(dev).unsqueeze(0).expand(k, *leaf.shape)
            obs_spec[key] = Box(low, high, (k, *leaf.shape), leaf.dtype, device=dev)
            # time-major ([K, N, *obs]): a step's shift is one contiguous cat; the TensorDicts and the
            # snapshots see the [N, K, *obs] view
            self._windows.append(torch.zeros(k, n, *leaf.shape, dtype=leaf.dtype, device=dev))
        # rows whose window restarts from the next root: they ended in the last step
        self._restart = torch.zeros(n, 1, dtype=torch.bool, device=dev)
        self._views = [(1, n) + (1,) * (w.dim() - 2) for w in self._windows]
        # each window's rows as single elements for the restart's where (gpu_envs.utils.row_views), or None
        self._rows = [row_dtype(w.shape[2:], w.dtype, n) for w in self._windows]
        self.row_state = tuple(self.live_state())
        return specs.replace(observation_spec=obs_spec)

    # ------------------------------------------------------------- data hooks
    def step(self, td: TensorDictBase) -> TensorDictBase:
        for key, window in zip(self.keys, self._windows, strict=True):
            nxt = torch.cat([window[1:], read(td, key, nxt=True).unsqueeze(0)])  # a new tensor: the output
            window.copy_(nxt)
            write(td, key, nxt.transpose(0, 1), nxt=True)
        self._restart.copy_(read(td, "done", nxt=True))
        return td

    def root(self, td: TensorDictBase) -> TensorDictBase:
        # rows that ended restart from their root's (reset) observation; done once (the flag
        # is cleared), so calling root again gives the same windows
        restart = self._restart
        for key, window, view, rows in zip(self.keys, self._windows, self._views, self._rows, strict=True):
            now = where_rows(
                restart.view(view), read(td, key).unsqueeze(0), window, 2, rows
            )  # a new tensor: the output
            window.copy_(now)
            write(td, key, now.transpose(0, 1))
        restart.zero_()
        return td

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        self._restart.logical_or_(mask.view(self.num_envs, 1))
        return self.root(td)

    # ----------------------------------------------------------------- state
    def live_state(self) -> dict[str, torch.Tensor]:
        state = {f"window_{i}": w.transpose(0, 1) for i, w in enumerate(self._windows)}  # [N, K, *obs] views
        if self._windows:
            state["restart"] = self._restart
        return state

    def __repr__(self) -> str:
        return f"History(keys={self.keys!r}, length={self.length})"
