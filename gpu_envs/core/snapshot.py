"""Per-row snapshot and restore: ``env.get_state(rows)`` and ``env.set_state(state, rows)``.

A snapshot of some rows is a TensorDict ``[len(rows)]`` holding everything their
continuation depends on, so that restoring it -- into the same rows or into others, now
or a thousand steps later, in this process or a new one (``torch.save``) -- makes the
continuation bitwise what the snapshot rows would have done:

* ``("root", <obs key>)``: the cached observations the next step acts on;
* ``"last_done"`` ``[k, 1]``: the rows the last ``step`` reset (a masked ``reset`` after
  ``env.step`` serves their cached observation, see ``BatchedEnv.reset``);
* ``("backend", ...)``: the simulator's state of those rows, from the backend's
  :meth:`~gpu_envs.backends.base.Backend.get_state` (backends that declare
  ``snapshot_rows``): the built-in envs' state, step counts and per-row random streams;
  a torch env's own ``get_state`` (:class:`~gpu_envs.contract.protocols.RowStateEnv`);
  a JAX env's carry; deep copies of gymnasium sub-envs (with their ``np_random``);
* ``"shared"``: one object for the whole batch (``NonTensorData``), here the env's
  random-action ``generator``: what is shared by all rows is restored only by a full
  ``set_state(state)`` (``rows=None``), never by a restore of some rows.

``rows`` is ``None`` (every row, in order), a sequence of ints, a 1-D integer tensor or
a bool mask ``[N]``. Reading it synchronises with the host once (its length and range are
checked): snapshots are for checkpoints, curricula and resets to chosen states, not for
every step. ``set_state`` checks the state's batch size, keys, shapes and dtypes against
the env's own layout before anything moves, and refuses repeated rows; a backend that
raises while restoring leaves the env refusing calls until ``reset()``.

Example::

    >>> import torch
    >>> import gpu_envs
    >>> env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
    >>> root = env.reset()
    >>> saved = env.get_state(rows=[3, 7])          # TensorDict [2]
    >>> saved.batch_size
    torch.Size([2])
    >>> for _ in range(5):                          # keep stepping
    ...     root["action"] = torch.ones(8, dtype=torch.int64)
    ...     _, root = env.step_and_maybe_reset(root)
    >>> env.set_state(saved, rows=[0, 1])           # rows 0 and 1 continue as rows 3 and 7 did then
    >>> torch.equal(env.root()["observation"][:2], saved["root", "observation"])
    True

    A checkpoint of every row: ``torch.save(env.get_state(), "env.pt")`` (load it with
    ``weights_only=False``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase, is_non_tensor

from gpu_envs.backends.base import Backend
from gpu_envs.contract.errors import InvalidArgumentError, SnapshotError
from gpu_envs.core.step_path import StepPath

__all__ = ["RowSnapshots", "leaves_of", "row_indices", "shared_of"]

Rows = None | Sequence[int] | torch.Tensor | np.ndarray


def row_indices(rows: Rows, num_envs: int, device: torch.device, who: str, *, distinct: bool) -> torch.Tensor:
    """``rows`` as int64 indices ``[k]`` on ``device``, checked (one host sync); ``None`` -> every row."""
    if rows is None:
        return torch.arange(num_envs, device=device)
    if isinstance(rows, (int, np.integer, str, bytes)):
        raise InvalidArgumentError(
            f"{who}: rows must be a sequence of row indices, a 1-D integer tensor or a bool mask [{num_envs}], "
            f"got {rows!r}; for one row pass [{rows!r}]."
        )
    try:
        index = rows if isinstance(rows, torch.Tensor) else torch.as_tensor(np.asarray(rows))
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(
            f"{who}: rows must be a sequence of row indices, a 1-D integer tensor or a bool mask [{num_envs}], "
            f"got {type(rows).__name__} ({err})."
        ) from None
    if index.dtype == torch.bool:
        if tuple(index.shape) not in ((num_envs,), (num_envs, 1)):
            raise InvalidArgumentError(
                f"{who}: a bool rows mask must have shape ({num_envs},), got {tuple(index.shape)}."
            )
        index = index.reshape(num_envs).nonzero().view(-1)
    elif index.numel() == 0 and index.dim() == 1:
        index = index.to(torch.int64)
    if index.dim() != 1 or index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        raise InvalidArgumentError(
            f"{who}: rows must be a 1-D sequence of integer row indices, got {tuple(index.shape)} {index.dtype}."
        )
    index = index.to(device=device, dtype=torch.int64)
    host = index.cpu()
    if host.numel() and (int(host.min()) < 0 or int(host.max()) >= num_envs):
        raise InvalidArgumentError(
            f"{who}: rows must lie in [0, {num_envs}) (this env's rows; negative indices are not taken), got "
            f"{host.tolist() if host.numel() <= 16 else 'values out of range'}."
        )
    if distinct and host.unique().numel() != host.numel():
        raise InvalidArgumentError(
            f"{who}: rows repeat ({host.tolist() if host.numel() <= 16 else 'some rows twice'}); each row can be "
            "restored from one snapshot row only. To copy one snapshot row into several rows, index the state: "
            "env.set_state(state[[0, 0]], rows=[a, b])."
        )
    return index


def leaves_of(td: TensorDictBase, prefix: tuple = ()) -> dict[tuple, Any]:
    """Every leaf of ``td`` by its full key: tensors and non-tensor entries (``NonTensorStack``) alike."""
    out: dict[tuple, Any] = {}
    for key in td.keys():  # noqa: SIM118 - iterating a TensorDict walks its batch, not its keys
        value = td.get(key)
        if isinstance(value, TensorDictBase) and not is_non_tensor(value):
            out.update(leaves_of(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out


def shared_of(value: Any) -> Any:
    """The one object of a ``"shared"`` entry (``NonTensorData``; a stack of them after ``torch.cat``: its first)."""
    if isinstance(value, NonTensorStack):
        items = value.tolist()
        while isinstance(items, list) and items:
            items = items[0]
        return items if not isinstance(items, list) else None
    return getattr(value, "data", None)


def _describe(value: Any) -> tuple:
    """What a leaf's layout is: ``("tensor", row shape, dtype)`` or ``("object",)``."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape[1:]), value.dtype)
    return ("object",)


def check_layout(state: Any, layout: dict[tuple, tuple], rows: int, who: str) -> None:
    """Refuse a state whose type, batch size, keys, shapes or dtypes are not ``layout``'s (a ``get_state``'s)."""
    if not isinstance(state, TensorDictBase):
        raise InvalidArgumentError(
            f"{who} takes the TensorDict that get_state() returned (or a part or a copy of it), got "
            f"{type(state).__module__}.{type(state).__name__}."
        )
    if tuple(state.batch_size) != (rows,):
        raise InvalidArgumentError(
            f"{who}: the state has batch size {tuple(state.batch_size)} but {rows} rows are restored; pass the "
            f"get_state() of {rows} rows (state[i] of a larger snapshot picks some), or rows= naming "
            f"{state.batch_size[0] if state.batch_dims == 1 else 'as many'} rows."
        )
    got = leaves_of(state)
    missing = sorted(map(str, set(layout) - set(got)))
    extra = sorted(map(str, set(got) - set(layout)))
    if missing or extra:
        raise InvalidArgumentError(
            f"{who}: the state's keys differ from this env's snapshot layout (missing {missing or 'none'}, "
            f"unexpected {extra or 'none'}); pass a get_state() of an env built like this one."
        )
    for key, want in layout.items():
        have = _describe(got[key])
        if have != want:
            raise InvalidArgumentError(
                f"{who}: state entry {key} is {_layout_text(have)}, this env's is {_layout_text(want)} per row; pass a "
                "get_state() of an env built like this one."
            )


def _layout_text(layout: tuple) -> str:
    return f"a tensor {layout[1]} {layout[2]}" if layout[0] == "tensor" else "a Python object"


class RowSnapshots:
    """``get_state``/``set_state`` of one :class:`~gpu_envs.core.env.BatchedEnv` (see the module docstring).

    Args:
        path: the env's step path (its cached root observations and ``last_done``, its guard).
        backend: the env's backend (its ``get_state``/``set_state``).
        generator: the env's random-action generator (shared state).
    """

    def __init__(self, path: StepPath, backend: Backend, generator: torch.Generator) -> None:
        self.path = path
        self.backend = backend
        self.generator = generator
        self.num_envs = backend.num_envs
        self.device = path.device
        self._layout: dict[tuple, tuple] | None = None  # the leaves of a get_state, found once

    def _ready(self, call: str) -> None:
        path = self.path
        if path.guard.pending is not None:
            path.refuse(call)  # closed, never reset, or a call that did not finish
        if not self.backend.capabilities.snapshot_rows:
            raise SnapshotError(self.backend.snapshot_refusal())

    def get(self, rows: Rows) -> TensorDict:
        """The snapshot of ``rows`` (module docstring)."""
        self._ready("get_state")
        index = row_indices(rows, self.num_envs, self.device, "get_state", distinct=False)
        return self._get(index)

    def _get(self, index: torch.Tensor) -> TensorDict:
        k = int(index.shape[0])
        path = self.path
        state = TensorDict({}, batch_size=[k])
        for key, value in path.root_obs.items():
            state.set(("root", *key) if isinstance(key, tuple) else ("root", key), value.index_select(0, index))
        state.set("last_done", path.last_done.index_select(0, index))
        backend = self.backend.get_state(index)
        if not isinstance(backend, TensorDictBase) or tuple(backend.batch_size) != (k,):
            raise SnapshotError(
                f"the {self.backend.describe()} backend's get_state gave {type(backend).__name__} "
                f"{tuple(getattr(backend, 'batch_size', ()))}, not a TensorDict [{k}] (a gpu_envs bug: please report it)."
            )
        state.set("backend", backend)
        state.set("shared", NonTensorData({"generator": self.generator.get_state()}, batch_size=[k]))
        return state

    def layout(self) -> dict[tuple, tuple]:
        """The leaves of this env's snapshots: ``{key: ("tensor", row shape, dtype) | ("object",)}``."""
        if self._layout is None:
            sample = self._get(torch.zeros(1, dtype=torch.int64, device=self.device))
            self._layout = {key: _describe(value) for key, value in leaves_of(sample).items()}
        return self._layout

    def set(self, state: Any, rows: Rows) -> None:
        """Restore ``state`` into ``rows`` (module docstring); the shared part only when ``rows`` is None."""
        self._ready("set_state")
        index = row_indices(rows, self.num_envs, self.device, "set_state", distinct=True)
        k = int(index.shape[0])
        check_layout(state, self.layout(), k, "set_state")
        shared = shared_of(state.get("shared"))
        generator = shared.get("generator") if isinstance(shared, dict) else None
        if not isinstance(generator, torch.Tensor):
            raise InvalidArgumentError(
                "set_state: the state's 'shared' entry has no generator state; pass a get_state()."
            )
        path = self.path
        roots = {}
        for key, value in path.root_obs.items():
            saved = state.get(("root", *key) if isinstance(key, tuple) else ("root", key))
            roots[key] = value.index_copy(0, index, saved.to(self.device))  # new tensors: handed-out roots stay
        last_done = path.last_done.index_copy(0, index, state.get("last_done").to(self.device))
        guard = path.guard
        guard.start("set_state")  # a backend failing half-way leaves the env refusing calls until reset()
        try:
            self.backend.set_state(_to_device(state.get("backend"), self.device), index)
        except InvalidArgumentError:  # refused before anything moved (the backend's values check): usable as before
            guard.finish()
            raise
        path.root_obs = roots
        path.last_done = last_done
        path.moved()  # roots and td["next"] handed out before the restore are stale now
        if rows is None:
            self.generator.set_state(generator.cpu())
        guard.finish()


def _to_device(state: TensorDictBase, device: torch.device) -> TensorDictBase:
    """Tensor leaves on ``device`` (a checkpoint loaded on the CPU restores into a GPU env); objects as they are."""
    if all(not isinstance(v, torch.Tensor) or v.device == device for v in leaves_of(state).values()):
        return state
    return state.to(device)
