"""dtype conversions between torch and numpy, and the dtypes each spec kind accepts."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gpu_envs.contract.errors import SpecError

_TORCH_TO_NUMPY: dict[torch.dtype, np.dtype] = {
    torch.bool: np.dtype(np.bool_),
    torch.uint8: np.dtype(np.uint8),
    torch.uint16: np.dtype(np.uint16),
    torch.uint32: np.dtype(np.uint32),
    torch.uint64: np.dtype(np.uint64),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
}
_NUMPY_TO_TORCH: dict[np.dtype, torch.dtype] = {v: k for k, v in _TORCH_TO_NUMPY.items()}

# dtypes whose arithmetic/comparisons torch supports on every device
INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def torch_dtype(np_dtype: Any) -> torch.dtype:
    """Torch dtype matching a numpy dtype (``np.float32``, ``"uint8"``, ``np.dtype(bool)``...).

    A ``torch.dtype`` is returned unchanged. Example: ``torch_dtype(np.uint8) is torch.uint8``.
    """
    if isinstance(np_dtype, torch.dtype):
        return np_dtype
    try:
        key = np.dtype(np_dtype)
    except TypeError as err:
        raise SpecError(f"{np_dtype!r} is not a numpy dtype; pass e.g. np.float32 or 'int64'.") from err
    if key not in _NUMPY_TO_TORCH:
        raise SpecError(
            f"numpy dtype {key} has no torch equivalent here; use one of {sorted(str(d) for d in _NUMPY_TO_TORCH)}."
        )
    return _NUMPY_TO_TORCH[key]


def numpy_dtype(torch_dtype: Any) -> np.dtype:
    """Numpy dtype matching a torch dtype (``torch.bool`` -> ``np.bool_`` ...).

    Numpy-like dtypes are normalised with ``np.dtype``. ``torch.bfloat16`` has no numpy
    twin and raises :class:`SpecError`. Example: ``numpy_dtype(torch.int8) == np.int8``.
    """
    if not isinstance(torch_dtype, torch.dtype):
        try:
            return np.dtype(torch_dtype)
        except TypeError as err:
            raise SpecError(f"{torch_dtype!r} is not a dtype; pass e.g. torch.float32.") from err
    if torch_dtype not in _TORCH_TO_NUMPY:
        raise SpecError(
            f"torch dtype {torch_dtype} has no numpy equivalent; cast the spec to a supported "
            f"dtype (e.g. torch.float32) before converting it to gymnasium."
        )
    return _TORCH_TO_NUMPY[torch_dtype]


def checked_dtype(dtype: Any, allowed: tuple[torch.dtype, ...], what: str) -> torch.dtype:
    try:
        dt = torch_dtype(dtype)
    except SpecError as err:
        raise SpecError(f"{what}: {err}") from None
    if dt not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise SpecError(f"{what} does not support dtype {dt}; use one of: {names}.")
    return dt
