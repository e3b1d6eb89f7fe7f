"""Per-row physical parameters of a built-in env (domain randomization), as one ``[N, P]`` tensor.

A built-in env steps with gymnasium's constants until ``env.set_params(...)`` is called;
from then on every row has its own values of the env's ``param_names`` (CartPole: gravity,
cart and pole masses, half pole length, force magnitude; Pendulum: mass, length, gravity,
max torque), which its physics reads per row. The values live in one float32 tensor
updated in place (never re-bound: the env's ``live_state()["params"]``, so snapshots,
CUDA graphs and ``torch.compile`` see them like the physical state).

``set_params(rows=..., **values)`` takes, for each named parameter, a number (every chosen
row) or a tensor: ``[N]`` with ``rows`` a bool ``[N]`` mask (written where the mask is True,
with ``torch.where``: no host sync, what :class:`~gpu_envs.transforms.Randomize` calls at
every reset), or ``[k]`` for ``k`` row indices. Numbers are checked (finite and positive);
tensor values are not read on the host (that would synchronise): a caller drawing them
keeps them in range.

Example::

    >>> from gpu_envs.builtin.params import RowParams
    >>> p = RowParams({"mass": 1.0, "length": 1.0}, num_envs=3, device="cpu")
    >>> p.set(rows=[1], mass=2.5)
    >>> p.column("mass").tolist()
    [1.0, 2.5, 1.0]
"""

from __future__ import annotations

import math
from typing import Any

import torch

from gpu_envs.contract.errors import InvalidArgumentError

__all__ = ["RowParams"]


class RowParams:
    """``[N, P]`` float32 values of named parameters, with gymnasium's constants as defaults."""

    def __init__(self, defaults: dict[str, float], num_envs: int, device: torch.device | str) -> None:
        self.names = tuple(defaults)
        self.defaults = dict(defaults)
        self.num_envs = num_envs
        self.values = torch.tensor([list(defaults.values())] * num_envs, dtype=torch.float32, device=device)
        self._columns = dict(zip(self.names, self.values.unbind(1), strict=True))  # views, never re-bound

    def column(self, name: str) -> torch.Tensor:
        """The live ``[N]`` view of one parameter."""
        return self._columns[name]

    def as_dict(self) -> dict[str, torch.Tensor]:
        """Copies of every parameter's ``[N]`` values."""
        return {name: column.clone() for name, column in self._columns.items()}

    def at_defaults(self) -> bool:
        """Whether every row holds the default values (reads the tensor: one host sync)."""
        defaults = torch.tensor(list(self.defaults.values()), dtype=torch.float32, device=self.values.device)
        return bool((self.values == defaults).all())

    def set(self, rows: Any = None, **values: Any) -> None:
        """Write ``values`` into ``rows`` (None: all; a bool ``[N]`` mask; or indices) -- see the module docstring."""
        if not values:
            raise InvalidArgumentError(f"set_params needs at least one parameter; this env has {list(self.names)}.")
        unknown = sorted(set(values) - set(self.names))
        if unknown:
            raise InvalidArgumentError(
                f"set_params: unknown parameter(s) {unknown}; this env's parameters are {list(self.names)}."
            )
        device = self.values.device
        mask = self._mask(rows, device)
        for name, value in values.items():
            column = self._columns[name]
            if isinstance(value, torch.Tensor):
                value = value.to(device=device, dtype=torch.float32)
                if mask is not None:
                    if value.shape not in ((), (self.num_envs,)):
                        raise InvalidArgumentError(
                            f"set_params: {name} with a row mask must be a number or a [{self.num_envs}] tensor, got "
                            f"{tuple(value.shape)}."
                        )
                    column.copy_(torch.where(mask, value, column))
                else:
                    index = self._index(rows, device)
                    if value.shape not in ((), (int(index.shape[0]),)):
                        raise InvalidArgumentError(
                            f"set_params: {name} for {int(index.shape[0])} rows must be a number or a "
                            f"[{int(index.shape[0])}] tensor, got {tuple(value.shape)}."
                        )
                    column.index_copy_(0, index, value.expand(index.shape))
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InvalidArgumentError(
                    f"set_params: {name} must be a finite positive number or a tensor, got {value!r}."
                )
            if mask is not None:
                column.masked_fill_(mask, float(value))
            else:
                column.index_fill_(0, self._index(rows, device), float(value))

    def _mask(self, rows: Any, device: torch.device) -> torch.Tensor | None:
        """``rows`` as a bool ``[N]`` mask on ``device`` when it is one, else None (indices, or all rows)."""
        if isinstance(rows, torch.Tensor) and rows.dtype == torch.bool:
            if rows.numel() != self.num_envs:
                raise InvalidArgumentError(
                    f"set_params: a row mask must have {self.num_envs} entries, got shape {tuple(rows.shape)}."
                )
            return rows.reshape(self.num_envs).to(device)
        return None

    def _index(self, rows: Any, device: torch.device) -> torch.Tensor:
        if rows is None:
            return torch.arange(self.num_envs, device=device)
        index = torch.as_tensor(list(rows) if isinstance(rows, range) else rows, dtype=torch.int64).reshape(-1)
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.num_envs):
            raise InvalidArgumentError(f"set_params: rows must lie in [0, {self.num_envs}), got {index.tolist()[:8]}.")
        return index.to(device)
