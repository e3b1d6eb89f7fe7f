"""The CPU's first looks for bad values: each hand-written step in C, each collection in numpy, in place.

Why: a manual ``step_and_maybe_reset`` loop (the README's first example) must hear about a
NaN action or observation at the step it happened, but on a CPU each small tensor op
costs ~1-3 us, as much as a whole built-in step at small N. Keeping the steps and
scanning them in batches (:meth:`gpu_envs.core.health.HealthMonitor.defer`, what CUDA
does) copies every kept tensor once more; looking at each step's tensors where they lie,
while they are in the cache, costs one C loop each: the bits of every float compared
with the exponent of inf/NaN (no arithmetic, so no overflow and no rounding), integer
actions compared with their range. A clean step (nearly every step) costs that and
nothing else; a step with a fault goes to the exact per-row check
(:meth:`~gpu_envs.core.health.HealthMonitor.faults`), which records the row, the step
and the value at once.

:func:`host_look` returns None where the look cannot run -- no C compiler,
``GPU_ENVS_NATIVE=0``, a device other than the CPU, or a dtype the C code does not read
(complex observations, an unsigned integer action wider than a byte) -- and the monitor
keeps the batched scan instead: the same record, a different cost.

:class:`ActionCheck` is the value check an action spec asks for (integer ranges or finite
floats), which both looks and the monitor's exact checks read.

:func:`healthy_on_host` is the same idea for a collection's ``[N, T]`` buffer (one numpy
reduction per entry, where it lies), the first look of
:meth:`~gpu_envs.core.health.HealthMonitor.scan` on the CPU.

Example::

    >>> import torch
    >>> from gpu_envs.core.health_look import host_look
    >>> look = host_look(torch.int64, (0, 1), None, [torch.float32])
    >>> flags = torch.zeros(4, 1, dtype=torch.bool)
    >>> obs, reward = torch.zeros(4, 3), torch.ones(4, 1)
    >>> look is None or look(torch.tensor([0, 1, 1, 0]), [obs], reward, flags)
    True
    >>> look is None or look(torch.tensor([0, 2, 1, 0]), [obs], reward, flags)  # 2 is outside Discrete(2)
    False
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.specs import Binary, Box, Discrete, MultiDiscrete, Spec
from gpu_envs.utils.native_library import NativeLibrary

__all__ = ["ActionCheck", "HostLook", "first_bad", "healthy_on_host", "host_look", "look_for", "np_sum", "row_sum"]

SOURCE = r"""
#include <stdint.h>

/* A float is not finite exactly when its exponent bits are all ones: compared on the bits,
   with no arithmetic, the loops vectorise and nothing overflows. Float kinds: 0 float32,
   1 float64, 2 float16, 3 bfloat16. */
#define BAD(T, E, x) ((T)(((x) & (E)) == (E)))

/* 1 when no element of rows x width is inf or NaN; rows whose skip byte is set are left
   out (skip may be NULL). Narrow rows (the usual observation) get loops of a fixed width. */
#define FINITE(T, E)                                                                   \
    static int finite_##T(const T *v, int64_t rows, int64_t width, const uint8_t *skip) \
    {                                                                                  \
        T bad = 0;                                                                     \
        int skipping = 0;                                                              \
        if (skip)                                                                      \
            for (int64_t i = 0; i < rows; i++) skipping |= skip[i];                    \
        if (!skipping) {                                                               \
            for (int64_t i = 0; i < rows * width; i++) bad |= BAD(T, E, v[i]);         \
            return !bad;                                                               \
        }                                                                              \
        switch (width) {                                                               \
        case 1: ROWS(T, E, 1) case 2: ROWS(T, E, 2) case 3: ROWS(T, E, 3)              \
        case 4: ROWS(T, E, 4) default: ROWS(T, E, width)                               \
        }                                                                              \
    }
#define ROWS(T, E, W)                                                                  \
    for (int64_t i = 0; i < rows; i++) {                                               \
        T b = 0;                                                                       \
        for (int64_t j = 0; j < (W); j++) b |= BAD(T, E, v[i * (W) + j]);              \
        bad |= b & (T)(skip[i] == 0);                                                  \
    }                                                                                  \
    return !bad;

FINITE(uint32_t, 0x7f800000u)
FINITE(uint64_t, 0x7ff0000000000000ull)
FINITE(uint16_t, 0x7c00u)

int finite_rows(const void *x, int64_t rows, int64_t width, int kind, const uint8_t *skip)
{
    if (kind == 0) return finite_uint32_t((const uint32_t *)x, rows, width, skip);
    if (kind == 1) return finite_uint64_t((const uint64_t *)x, rows, width, skip);
    if (kind == 2) return finite_uint16_t((const uint16_t *)x, rows, width, skip);
    if (kind == 3) { /* bfloat16: the float32 exponent, in the upper half */
        const uint16_t *v = (const uint16_t *)x;
        uint16_t bad = 0;
        for (int64_t i = 0; i < rows; i++) {
            if (skip && skip[i]) continue;
            for (int64_t j = 0; j < width; j++) bad |= BAD(uint16_t, 0x7f80u, v[i * width + j]);
        }
        return !bad;
    }
    return 0;
}

/* 1 when every integer of rows x width lies in [low[j], high[j]] (j: its column). Integer
   kinds: 0 int64, 1 int32, 2 int16, 3 int8, 4 uint8. One column: the distance from low
   as an unsigned number, so one comparison per value (and the loop vectorises). */
#define RANGE(T)                                                                       \
    {                                                                                  \
        const T *v = (const T *)a;                                                     \
        if (width == 1) {                                                              \
            uint64_t top = 0, span = (uint64_t)(high[0] - low[0]);                     \
            for (int64_t i = 0; i < rows; i++) {                                       \
                uint64_t d = (uint64_t)((int64_t)v[i] - low[0]);                       \
                top = d > top ? d : top;                                               \
            }                                                                          \
            return top <= span;                                                        \
        }                                                                              \
        int bad = 0;                                                                   \
        for (int64_t i = 0; i < rows; i++)                                             \
            for (int64_t j = 0; j < width; j++) {                                      \
                int64_t value = (int64_t)v[i * width + j];                             \
                bad |= (value < low[j]) | (value > high[j]);                           \
            }                                                                          \
        return !bad;                                                                   \
    }

int ints_in_range(const void *a, int64_t rows, int64_t width, int kind, const int64_t *low, const int64_t *high)
{
    if (kind == 0) RANGE(int64_t)
    if (kind == 1) RANGE(int32_t)
    if (kind == 2) RANGE(int16_t)
    if (kind == 3) RANGE(int8_t)
    if (kind == 4) RANGE(uint8_t)
    return 0;
}

/* One step in one call: the reward, the first observation (its placeholder rows skipped)
   and the action (action_kind -1: not checked; 0-3: a float kind, checked for finiteness;
   10 + an integer kind: checked against low/high). 1 when all are clean. */
int look_step(const void *reward, int64_t rows, int64_t reward_width, int reward_kind,
              const void *obs, int64_t obs_width, int obs_kind, const uint8_t *skip,
              const void *action, int64_t action_rows, int64_t action_width, int action_kind,
              const int64_t *low, const int64_t *high)
{
    if (!finite_rows(reward, rows, reward_width, reward_kind, 0)) return 0;
    if (obs && !finite_rows(obs, rows, obs_width, obs_kind, skip)) return 0;
    if (action_kind < 0) return 1;
    if (action_kind < 10) return finite_rows(action, action_rows, action_width, action_kind, 0);
    return ints_in_range(action, action_rows, action_width, action_kind - 10, low, high);
}
"""

_FLOAT_KINDS = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}
_INT_KINDS = {torch.int64: 0, torch.int32: 1, torch.int16: 2, torch.int8: 3, torch.uint8: 4}


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.finite_rows.argtypes = [p, i64, i64, i32, p]
    lib.finite_rows.restype = i32
    lib.ints_in_range.argtypes = [p, i64, i64, i32, p, p]
    lib.ints_in_range.restype = i32
    lib.look_step.argtypes = [p, i64, i64, i32, p, i64, i32, p, p, i64, i64, i32, p, p]
    lib.look_step.restype = i32


_LIBRARY = NativeLibrary(
    "health_look",
    SOURCE,
    _declare,
    "hand-written CPU loops keep their steps and scan them in batches",
    flags=("-O3", "-shared", "-fPIC"),
)


class ActionCheck:
    """An action spec's value check: integer ranges (Discrete, MultiDiscrete, integer Binary) or finite floats."""

    def __init__(self, spec: Spec | None, device: torch.device) -> None:
        self.spec = spec
        self.low: torch.Tensor | None = None
        self.high: torch.Tensor | None = None
        self.finite = isinstance(spec, Box) and cast(torch.dtype, spec.dtype).is_floating_point  # a Box has a dtype
        bounds: tuple[torch.Tensor, torch.Tensor] | None = None  # (spec None: nothing checked)
        if isinstance(spec, Discrete):
            bounds = torch.tensor(spec.start, device=device), torch.tensor(spec.start + spec.n - 1, device=device)
            self.valid = f"{spec.start}..{spec.start + spec.n - 1}"
        elif isinstance(spec, MultiDiscrete):
            bounds = spec.start.to(device), (spec.start + spec.nvec - 1).to(device)
            self.valid = f"low {bounds[0].tolist()} .. high {bounds[1].tolist()} per element"
        elif isinstance(spec, Binary) and spec.dtype != torch.bool:
            bounds = torch.tensor(0, device=device), torch.tensor(1, device=device)
            self.valid = "0..1"
        self.active = bounds is not None or self.finite
        if bounds is not None:  # and the host's copy of the bounds (the CPU scan's first look)
            self.low, self.high = bounds
            self.low_np, self.high_np = bounds[0].cpu().numpy().reshape(-1), bounds[1].cpu().numpy().reshape(-1)
            self.width = max(1, int(self.low_np.size))

    def bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(low, high)`` of an integer-range check (``active`` and not ``finite``)."""
        if self.low is None or self.high is None:
            raise InvalidArgumentError(f"the action spec {self.spec!r} has no integer range to check actions against.")
        return self.low, self.high


class HostLook:
    """``look(action, obs, reward, missing) -> bool``: True when one CPU step certainly holds no fault.

    Args:
        lib: the loaded library.
        action_kind: ``("range", int kind, low [k] int64, high [k] int64)``,
            ``("finite", float kind)`` or None (the action is not checked).
        obs_kinds: the float kind of each checked observation, in the order the call
            passes them.

    One C call looks at the reward, the first observation and the action; each further
    observation key costs one more. A tensor that is not contiguous is looked at through
    a contiguous copy (rare: the built-in envs and most backends hand contiguous
    tensors). False never means a fault for certain: the caller's exact check decides.
    """

    def __init__(self, lib: ctypes.CDLL, action_kind: tuple | None, obs_kinds: Sequence[int]) -> None:
        self._finite = lib.finite_rows
        self._step = lib.look_step
        self._range: tuple[torch.Tensor, torch.Tensor] | None = None  # kept alive: their pointers are passed
        self._bounds: tuple[int | None, int | None] = (None, None)
        self._width = 1
        if action_kind is None:
            self._kind = -1
        elif action_kind[0] == "finite":
            self._kind = action_kind[1]
        else:
            self._kind = 10 + action_kind[1]
            low, high = self._range = action_kind[2], action_kind[3]
            self._width = low.numel()
            self._bounds = (low.data_ptr(), high.data_ptr())
        self._obs_kinds = list(obs_kinds)
        self._first_kind = self._obs_kinds[0] if self._obs_kinds else 0  # float32: the reward, when no obs

    def __call__(
        self, action: torch.Tensor, obs: Sequence[torch.Tensor], reward: torch.Tensor, missing: torch.Tensor
    ) -> bool:
        reward, action = reward.contiguous(), action.contiguous()
        n = reward.shape[0] or 1
        first = obs[0].contiguous() if obs else reward  # (no observation checked: the reward again, harmlessly)
        size = action.numel()
        kind = self._kind
        skip = missing.contiguous().data_ptr()
        clean = self._step(
            reward.data_ptr(),
            n,
            reward.numel() // n,
            _FLOAT_KINDS.get(reward.dtype, -1),
            first.data_ptr(),
            first.numel() // n,
            self._first_kind,
            skip,
            action.data_ptr(),
            1 if kind < 10 else size // self._width,  # a float action: one row of all its values
            size if kind < 10 else self._width,
            kind,
            *self._bounds,
        )
        if not clean or len(obs) < 2:
            return bool(clean)
        for x, kind in zip(obs[1:], self._obs_kinds[1:], strict=True):
            x = x.contiguous()
            if not self._finite(x.data_ptr(), n, x.numel() // n, kind, skip):
                return False
        return True


def look_for(
    check: ActionCheck, action_spec: Spec, obs_dtypes: Sequence[torch.dtype], device: torch.device
) -> HostLook | None:
    """:func:`host_look` for a monitor's action ``check``, None off the CPU."""
    if device.type != "cpu":
        return None
    dtype = cast(torch.dtype, action_spec.dtype) if check.active else None
    if check.active and not check.finite:
        return host_look(dtype, check.bounds(), None, obs_dtypes)
    return host_look(None, None, dtype, obs_dtypes)


def host_look(
    action_dtype: torch.dtype | None,
    action_range: tuple[torch.Tensor, torch.Tensor] | tuple[int, int] | None,
    action_finite_dtype: torch.dtype | None,
    obs_dtypes: Sequence[torch.dtype],
) -> HostLook | None:
    """The CPU look for one env's checks, or None where it cannot run (module docstring).

    Args:
        action_dtype, action_range: an integer action and its ``(low, high)`` per element
            (scalars or 1-d tensors), or None.
        action_finite_dtype: a float action checked for finiteness, or None.
        obs_dtypes: the dtypes of the checked (floating-point) observations.
    """
    lib = _LIBRARY.load()
    if lib is None:
        return None
    kinds = [_FLOAT_KINDS.get(dtype) for dtype in obs_dtypes]
    if any(kind is None for kind in kinds):
        return None
    action_kind: tuple | None = None
    if action_range is not None:
        kind = _INT_KINDS.get(action_dtype) if action_dtype is not None else None
        if kind is None:
            return None
        low = torch.as_tensor(action_range[0], dtype=torch.int64).reshape(-1).clone()
        high = torch.as_tensor(action_range[1], dtype=torch.int64).reshape(-1).clone()
        if low.numel() != high.numel():
            return None
        action_kind = ("range", kind, low, high)
    elif action_finite_dtype is not None:
        kind = _FLOAT_KINDS.get(action_finite_dtype)
        if kind is None:
            return None
        action_kind = ("finite", kind)
    return HostLook(lib, action_kind, [kind for kind in kinds if kind is not None])


def healthy_on_host(data: Any, nxt: Any, check: ActionCheck, obs_keys: list) -> bool:
    """True when a CPU collection's ``[N, T]`` buffer certainly holds no fault: one pass per entry, in place.

    Each entry's memory is read where it lies (the buffer is time-major: an entry is a
    transposed view of one dense block), by the C loops above where the library is
    there, else by one numpy reduction per entry.

    ``check`` is the monitor's action check. The first look of
    :meth:`gpu_envs.core.health.HealthMonitor.scan` on the CPU.

    False (look closer, with the per-row ops) when anything is off, when a final
    observation was withheld (placeholders), or for dtypes numpy does not have.
    """
    lib = _LIBRARY.load()
    if lib is not None:
        clean = _healthy_in_c(lib, data, nxt, check, obs_keys)
        if clean is not None:
            return clean
    try:
        missing = nxt.get("final_obs_missing").detach().numpy()
        if missing.any():
            return False
        if check.active:
            action = data.get("action").detach().numpy()
            if check.finite:
                if not np.isfinite(np_sum(action)):
                    return False
            elif action.size and (
                (action.reshape(-1, check.width) < check.low_np).any()
                or (action.reshape(-1, check.width) > check.high_np).any()
            ):
                return False
        # (a sum that overflows only sends the collection to the closer look)
        total = np_sum(nxt.get("reward").detach().numpy())
        for key in obs_keys:
            total += np_sum(nxt.get(key).detach().numpy())
        return bool(np.isfinite(total))
    except (TypeError, RuntimeError):  # bfloat16, or a tensor numpy cannot view
        return False


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """``[N]``: each row's sum (one fast reduction; half floats summed in float32, so they do not overflow)."""
    flat = x.reshape(x.shape[0], -1)
    return flat.sum(1, dtype=torch.float32) if flat.element_size() < 4 else flat.sum(1)


def first_bad(x: torch.Tensor, bad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(any bad [rows], the first bad element's value [rows] as float64)`` of ``[rows, k]`` tensors."""
    if bad.shape[1] == 1:
        return bad.view(-1), x.view(-1).to(torch.float64)
    first = bad.to(torch.uint8).argmax(1, keepdim=True)
    return bad.any(1), x.gather(1, first).view(-1).to(torch.float64)


def np_sum(array: np.ndarray) -> float:
    """The sum in the array's own float type (half floats in float32), as a Python float."""
    return float(array.sum(dtype=np.float32) if array.dtype.itemsize < 4 else array.sum())


def _dense(x: torch.Tensor) -> torch.Tensor | None:
    """``x``, or its first two dims swapped, where that is one dense block (the buffer's time-major entries)."""
    if x.is_contiguous():
        return x
    if x.dim() >= 2 and (swapped := x.transpose(0, 1)).is_contiguous():
        return swapped
    return None


def _healthy_in_c(lib: ctypes.CDLL, data: Any, nxt: Any, check: ActionCheck, obs_keys: list) -> bool | None:
    """:func:`healthy_on_host` with the C loops: every value once, in memory order; None where they cannot read it."""
    missing = _dense(nxt.get("final_obs_missing"))
    if missing is None:
        return None
    if bool(missing.numpy().any()):
        return False  # placeholders: the closer look handles them
    entries = [nxt.get("reward"), *(nxt.get(key) for key in obs_keys)]
    dense = [_dense(x) for x in entries]
    if any(x is None or x.dtype not in _FLOAT_KINDS for x in dense):
        return None
    if check.active:
        action = _dense(data.get("action"))
        if action is None:
            return None
        if check.finite:
            if action.dtype not in _FLOAT_KINDS:
                return None
            dense.append(action)
        else:
            kind = _INT_KINDS.get(action.dtype)
            if kind is None:
                return None
            low, high = (bound.to(torch.int64).reshape(-1).contiguous() for bound in check.bounds())
            width = low.numel()
            if not lib.ints_in_range(
                action.data_ptr(), action.numel() // width, width, kind, low.data_ptr(), high.data_ptr()
            ):
                return False
    return all(lib.finite_rows(x.data_ptr(), 1, x.numel(), _FLOAT_KINDS[x.dtype], None) for x in dense if x is not None)
