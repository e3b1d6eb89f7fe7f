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

State: one ``[N, K, *obs]`` window per key and a ``[N, 1]`` flag of the rows whose window
must restart from the next root (they ended in the last step), updated in place (no host
sync, the same work every step: CUDA-graph and ``compile=True`` safe); the TensorDicts get
new contiguous ``[N, K, *obs]`` tensors each step, and ``get_state`` / ``set_state``
snapshot the state per row. On a CPU env each hook is one C call per key
(:mod:`gpu_envs.transforms.native_rows`: the window's shift, the restarted rows' refill);
on a GPU, under ``torch.compile`` and without a C compiler, a ``cat`` and a ``where``
(the same bytes). Any observation dtype works (uint8 image frames are stacked as uint8);
the spec's bounds are the per-step bounds repeated K times.

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
from gpu_envs.transforms.native_rows import KernelUser, fits, kernels
from gpu_envs.utils.arguments import as_int
from gpu_envs.utils.native_library import native_allowed
from gpu_envs.utils.row_views import row_dtype, where_rows

__all__ = ["History"]


class History(KernelUser, Transform):
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
            self._windows.append(torch.zeros(n, k, *leaf.shape, dtype=leaf.dtype, device=dev))
        # rows whose window restarts from the next root: they ended in the last step
        self._restart = torch.zeros(n, 1, dtype=torch.bool, device=dev)
        self._views = [(n, 1) + (1,) * (w.dim() - 2) for w in self._windows]
        # each window's rows as single elements for the restart's where (gpu_envs.utils.row_views), or None
        self._rows = [row_dtype(w.shape[2:], w.dtype, n) for w in self._windows]
        # the C kernel's view of each key: its input's shape and dtype, the bytes of one observation
        self._lib = kernels(dev)
        self._kernel_rows = [
            (torch.Size((n, *w.shape[2:])), w.dtype, w[0, 0].numel() * w.element_size()) for w in self._windows
        ]
        self.row_state = tuple(self.live_state())
        return specs.replace(observation_spec=obs_spec)

    # ------------------------------------------------------------- data hooks
    def step(self, td: TensorDictBase) -> TensorDictBase:
        lib = self._lib if native_allowed() else None
        restart, done = self._restart, read(td, "done", nxt=True)
        flags = lib is not None and fits(done, restart.shape, torch.bool)  # a kernel call may copy them
        copied = False
        for key, window, (shape, dtype, rb) in zip(self.keys, self._windows, self._kernel_rows, strict=True):
            obs = read(td, key, nxt=True)
            if lib is not None and fits(obs, shape, dtype):
                nxt = torch.empty_like(window)
                give = flags and not copied  # this call copies the end flags into restart
                lib.history_step(
                    shape[0], self.length, rb, window.data_ptr(), obs.data_ptr(), nxt.data_ptr(),
                    restart.data_ptr() if give else None, done.data_ptr() if give else None,
                )  # fmt: skip
                copied = copied or give
            else:
                nxt = torch.cat([window[:, 1:], obs.unsqueeze(1)], 1)  # a new tensor: the output
                window.copy_(nxt)
            write(td, key, nxt, nxt=True)
        if not copied:
            restart.copy_(done)
        return td

    def root(self, td: TensorDictBase) -> TensorDictBase:
        # rows that ended restart from their root's (reset) observation; done once (the flag
        # is cleared), so calling root again gives the same windows
        restart, lib = self._restart, self._lib if native_allowed() else None
        keyed = zip(self.keys, self._windows, self._views, self._rows, self._kernel_rows, strict=True)
        cleared, last_key = False, len(self.keys) - 1
        for i, (key, window, view, rows, (shape, dtype, rb)) in enumerate(keyed):
            obs = read(td, key)
            if lib is not None and fits(obs, shape, dtype):
                now = torch.empty_like(window)
                last = i == last_key  # the last key's call clears the flags
                lib.history_root(
                    shape[0], self.length, rb, window.data_ptr(), obs.data_ptr(), restart.data_ptr(), now.data_ptr(),
                    last,
                )  # fmt: skip
                cleared = last
            else:
                now = where_rows(restart.view(view), obs.unsqueeze(1), window, 2, rows)  # a new tensor: the output
                window.copy_(now)
            write(td, key, now)
        if not cleared:
            restart.zero_()
        return td

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        self._restart.logical_or_(mask.view(self.num_envs, 1))
        return self.root(td)

    # ----------------------------------------------------------------- state
    def live_state(self) -> dict[str, torch.Tensor]:
        state = {f"window_{i}": w for i, w in enumerate(self._windows)}
        if self._windows:
            state["restart"] = self._restart
        return state

    def __repr__(self) -> str:
        return f"History(keys={self.keys!r}, length={self.length})"
