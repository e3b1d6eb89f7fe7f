"""Per-row snapshots of a :class:`~gpu_envs.transforms.TransformedEnv`: the env's, plus each transform's state.

``TransformedEnv.get_state(rows)`` is the inner env's snapshot under ``"env"``
(:mod:`gpu_envs.core.snapshot`) with, for every transform ``i``:

* ``("transforms", "<i>", name)``: its per-row state tensors (``Transform.row_state``,
  e.g. ``EpisodeStats``' running return and length), the snapshot rows' values;
* ``"transforms_shared"``: one object for the batch (``NonTensorData``) holding copies of
  the state shared by all rows (``ObservationNorm``'s running mean and variance,
  ``EpisodeStats``' totals), restored only by a full ``set_state(state)`` (``rows=None``):
  restoring some rows leaves the statistics the other rows built up.

A transform whose state a snapshot cannot hold (``row_state = None``: ``RecordEpisodes``,
whose episodes in progress are frames on the host) makes ``get_state`` raise
:class:`~gpu_envs.contract.errors.SnapshotError` naming it.

Example::

    >>> import torch
    >>> import gpu_envs
    >>> from gpu_envs.transforms import EpisodeStats, TransformedEnv
    >>> env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0), EpisodeStats())
    >>> traj = env.rollout(30)
    >>> saved = env.get_state()          # env rows, running returns, and the totals
    >>> first = env.rollout(30)["next", "observation"]
    >>> env.set_state(saved)             # all of it back
    >>> torch.equal(env.rollout(30)["next", "observation"], first)
    True
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, SnapshotError
from gpu_envs.core.snapshot import Rows, leaves_of, row_indices, shared_of
from gpu_envs.transforms.base import Transform

__all__ = ["get_transformed_state", "set_transformed_state"]


def _row_names(t: Transform) -> tuple[str, ...]:
    names = t.row_state
    if names is None:
        raise SnapshotError(
            f"{type(t).__name__} keeps state a snapshot cannot hold, so this TransformedEnv cannot get_state/set_state "
            "rows exactly. Snapshot the env below it (env.env.get_state()), or build the env without this transform."
        )
    return names


def get_transformed_state(env: Any, rows: Rows) -> TensorDict:
    """The snapshot of a TransformedEnv's ``rows`` (module docstring)."""
    for t in env.transforms:  # refused before anything is copied
        _row_names(t)
    inner = env.env.get_state(rows)
    index = row_indices(rows, env.num_envs, env.device, "get_state", distinct=False)
    k = int(index.shape[0])
    state = TensorDict({"env": inner}, batch_size=[k])
    shared = {}
    for i, t in enumerate(env.transforms):
        names, tensors = _row_names(t), t.live_state()
        for name, value in tensors.items():
            if name in names:
                state.set(("transforms", str(i), name), value.index_select(0, index))
            else:
                shared[f"{i}.{name}"] = value.clone()
    state.set("transforms_shared", NonTensorData(shared, batch_size=[k]))
    return state


def set_transformed_state(env: Any, state: Any, rows: Rows) -> None:
    """Restore a :func:`get_transformed_state` into ``rows``: the env's part, then each transform's."""
    if not isinstance(state, TensorDictBase) or "env" not in state or "transforms_shared" not in state:
        raise InvalidArgumentError(
            "set_state of a TransformedEnv takes the TensorDict its get_state() returned (keys 'env', 'transforms', "
            f"'transforms_shared'), got {type(state).__name__}"
            + (f" with keys {sorted(map(str, state.keys()))}." if isinstance(state, TensorDictBase) else ".")
        )
    index = row_indices(rows, env.num_envs, env.device, "set_state", distinct=True)
    shared = shared_of(state.get("transforms_shared"))
    writes = []  # (live tensor, value, per row) checked before anything moves
    for i, t in enumerate(env.transforms):
        names = _row_names(t)
        for name, live in t.live_state().items():
            if name in names:
                value = state.get(("transforms", str(i), name), None)
                want = (int(index.shape[0]), *live.shape[1:])
            else:
                value = shared.get(f"{i}.{name}") if isinstance(shared, dict) else None
                want = tuple(live.shape)
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != want or value.dtype != live.dtype:
                got = f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else "missing"
                raise InvalidArgumentError(
                    f"set_state: transform {i} ({type(t).__name__}) state {name!r} must be {want} {live.dtype}, got "
                    f"{got}; pass a get_state() of a TransformedEnv built with the same transforms."
                )
            writes.append((live, value, name in names))
    extra = set(leaves_of(state.get("transforms"))) if "transforms" in state else set()
    expected = {(str(i), n) for i, t in enumerate(env.transforms) for n in _row_names(t)}
    if extra - expected:
        raise InvalidArgumentError(
            f"set_state: unexpected transform state {sorted(map(str, extra - expected))}; pass a get_state() of a "
            "TransformedEnv built with the same transforms."
        )
    env.env.set_state(state.get("env"), rows)
    for live, value, per_row in writes:
        if per_row:
            live.index_copy_(0, index, value.to(live.device))
        elif rows is None:
            live.copy_(value)
