"""Whole rows of a tensor as single elements, so that a row mask selects them without broadcasting.

torch's CPU ``where`` is slow when an ``[N, 1]`` mask broadcasts over short rows (a per-row
inner loop of a few elements): about 100 us for a ``[4, 4096, 4]`` float window at
N = 4096. Rows of 2, 4, 8 or 16 bytes viewed as ONE element of :data:`ROW_DTYPES` make the
mask match element for element, 7x faster there. ``where`` only moves bits, so the
result is the same bit for bit, for any dtype.

Used by the final-observation rule (:mod:`gpu_envs.contract.final_obs`) and by the
transforms that restart rows of a window or a queue (``History``, ``Delay``). Eager only:
under ``torch.compile`` the plain ``where`` is traced (it fuses anyway, and the views would
break the graph).

Example::

    >>> import torch
    >>> from gpu_envs.utils.row_views import row_dtype, where_rows
    >>> window = torch.zeros(3, 512, 4)                 # [K, N, 4]: rows of 16 bytes
    >>> fresh = torch.ones(1, 512, 4)
    >>> mask = (torch.arange(512) % 2 == 0).view(1, 512, 1)
    >>> out = where_rows(mask, fresh, window, 2, row_dtype(torch.Size([4]), torch.float32, 512))
    >>> bool(torch.equal(out, torch.where(mask, fresh, window)))
    True
"""

from __future__ import annotations

import math

import torch

__all__ = ["ROW_DTYPES", "ROW_VIEW_MIN_ENVS", "row_dtype", "rows_of", "where_rows"]

ROW_DTYPES = {2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.complex128}
"""A row of this many bytes is viewed as one element of this dtype."""

ROW_VIEW_MIN_ENVS = 256
"""Below this many rows the views cost more than the broadcast they save."""


def row_dtype(shape: torch.Size, dtype: torch.dtype, num_envs: int) -> torch.dtype | None:
    """The dtype one row of ``shape`` x ``dtype`` is viewed as, or None (no such dtype, a scalar row, few rows)."""
    if num_envs < ROW_VIEW_MIN_ENVS or len(shape) == 0:
        return None
    return ROW_DTYPES.get(math.prod(shape) * dtype.itemsize)


def rows_of(x: torch.Tensor, lead: int, rows: torch.dtype) -> torch.Tensor | None:
    """``x`` ``[*lead dims, *row]`` as ``[*lead dims, 1]`` elements of ``rows``, or None where it cannot be viewed so.

    None inside a ``torch.compile`` trace (``storage_offset()`` would break the graph), for
    a tensor whose rows are not contiguous, and for one whose offset is not a whole
    number of rows' elements.
    """
    if torch.compiler.is_compiling() or not x.is_contiguous():
        return None
    if x.storage_offset() % (rows.itemsize // x.dtype.itemsize):
        return None
    return x.view(rows) if x.dim() == lead + 1 else x.view(*x.shape[:lead], -1).view(rows)


def where_rows(
    mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor, lead: int, rows: torch.dtype | None
) -> torch.Tensor:
    """``torch.where(mask, a, b)`` for ``a``, ``b`` ``[*lead dims, *row]`` and ``mask`` ``[*lead dims, 1, ...]``.

    With whole rows as single elements (:func:`rows_of`) where ``rows`` is a dtype and both
    can be viewed so; else the plain ``where``. Same values bit for bit either way.
    """
    if rows is not None:
        row_a = rows_of(a, lead, rows)
        row_b = None if row_a is None else rows_of(b, lead, rows)
        if row_a is not None and row_b is not None:
            picked = torch.where(mask.reshape(*mask.shape[:lead], 1), row_a, row_b)
            return picked.view(b.dtype).view(*picked.shape[:lead], *b.shape[lead:])
    return torch.where(mask, a, b)
