"""A native CPU kernel for the per-row windows and queues of ``History`` and ``Delay``: one C call per hook.

Why: on a CPU, a ``History`` or ``Delay`` step in torch is a chain of small eager ops
(a ``cat``, a ``copy_``, a ``where`` over a row mask, an ``index_select`` per queue, the
per-row draws), each 1-3 us of dispatch at N = 64 and 5-20 us at N = 4096: 1-5x the
built-in env's whole native step. What they do is move bytes: shift a row's window by one
slot, refill the rows that restarted, read each row's slot at its own delay. Here each
hook is one C loop over those bytes, on the transform's own state tensors, writing a
new output tensor (the TensorDicts get new tensors, as from the torch ops).

* **The same bytes.** Every kernel only copies bytes (any dtype: a row is ``rb`` bytes)
  or runs the transforms' integer streams (:mod:`gpu_envs.transforms.streams`: the same
  32-bit LCG step in ``uint64``), so the state and the outputs equal the torch path's bit
  for bit; ``tests/test_native_rows.py`` steps both paths side by side through
  auto-resets, masked resets and snapshots.
* **Used where it can be.** A transform takes the kernel at ``setup`` on a CPU env
  (:func:`kernels`) and runs its torch ops instead where
  :func:`gpu_envs.utils.native_library.native_allowed` says no (inside a ``torch.compile``
  trace, a graph capture or its emulation, under a ``TorchDispatchMode``, none of which
  would see a C call), and for an input whose shape, dtype or layout is not the one set
  up (the torch ops then say what is wrong). With no C compiler or ``GPU_ENVS_NATIVE=0``, :func:`kernels` is None
  and the torch ops run: the same results, slower. The library is built and cached like
  the built-in envs' (:class:`gpu_envs.utils.native_library.NativeLibrary`).

Example::

    >>> import torch
    >>> from gpu_envs.transforms import native_rows
    >>> lib = native_rows.kernels(torch.device("cpu"))       # None without a C compiler
    >>> window = torch.zeros(2, 3, 1)                  # [N, K, 1]: 2 rows, K = 3
    >>> obs, out = torch.tensor([[1.0], [2.0]]), torch.empty(2, 3, 1)
    >>> if lib is not None:
    ...     lib.history_step(2, 3, 4, window.data_ptr(), obs.data_ptr(), out.data_ptr(), None, None)
    ... else:
    ...     out = window.copy_(torch.cat([window[:, 1:], obs.unsqueeze(1)], 1)).clone()
    >>> out[:, :, 0].tolist()
    [[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]]
"""

from __future__ import annotations

import copy
import ctypes
from typing import Any

import torch

from gpu_envs.utils.native_library import NativeLibrary

__all__ = ["SOURCE", "KernelUser", "fits", "kernels"]

SOURCE = r"""
#include <stdint.h>
#include <string.h>

/* The loops below copy rows of rb bytes. ROWS(rb, BODY) runs BODY with RB a compile-time constant
   for the usual small rows (so each memcpy(_, _, RB) is a move or two the compiler inlines and the
   loop unrolls), and with RB = rb otherwise. */
#define ROWS(rb, BODY) do { \
    switch (rb) { \
    case 1: { const int64_t RB = 1; BODY; break; } \
    case 2: { const int64_t RB = 2; BODY; break; } \
    case 4: { const int64_t RB = 4; BODY; break; } \
    case 8: { const int64_t RB = 8; BODY; break; } \
    case 12: { const int64_t RB = 12; BODY; break; } \
    case 16: { const int64_t RB = 16; BODY; break; } \
    case 24: { const int64_t RB = 24; BODY; break; } \
    case 32: { const int64_t RB = 32; BODY; break; } \
    default: { const int64_t RB = rb; BODY; break; } \
    } \
} while (0)

/* History's step of one key: out[i] is window[i] moved back one slot with obs[i] as the newest,
   and window[i] becomes out[i]. window, out: [n, k, rb] (batch-major); obs: [n, rb]. With done
   (the step's [n] end flags), restart takes a copy of it. */
void history_step(int64_t n, int64_t k, int64_t rb, uint8_t *window, const uint8_t *obs, uint8_t *out,
                  uint8_t *restart, const uint8_t *done)
{
    const int64_t row = k * rb;
    if (k > 1) memcpy(out, window + rb, (size_t)(n * row - rb));  /* slot s + 1 -> s, across rows at once */
    uint8_t *newest = out + row - rb;
    ROWS(rb, for (int64_t i = 0; i < n; i++) memcpy(newest + i * row, obs + i * RB, RB));
    memcpy(window, out, (size_t)(n * row));
    if (done) memcpy(restart, done, (size_t)n);
}

/* History's root of one key: the rows where restart[i] refill every slot of their window with
   obs[i] (their reset observation); out is a copy of the windows. With clear, restart is zeroed. */
void history_root(int64_t n, int64_t k, int64_t rb, uint8_t *window, const uint8_t *obs, uint8_t *restart,
                  uint8_t *out, int64_t clear)
{
    const int64_t row = k * rb;
    ROWS(rb, for (int64_t i = 0; i < n; i++) {
        if (!restart[i]) continue;
        for (int64_t s = 0; s < k; s++) memcpy(window + i * row + s * RB, obs + i * RB, RB);
    });
    memcpy(out, window, (size_t)(n * row));
    if (clear) memset(restart, 0, (size_t)n);
}

/* A Delay queue [depth + 1, n, rb] (time-major, newest last): every slot moves one back, value is the newest. */
static void queue_push(int64_t n, int64_t depth, int64_t rb, uint8_t *queue, const uint8_t *value) {
    const size_t slot = (size_t)(n * rb);
    if (depth > 0) memmove(queue, queue + slot, (size_t)depth * slot);
    memcpy(queue + (size_t)depth * slot, value, slot);
}

/* out[i] = the queue's flat row index[2 i] ([(depth + 1) n, rb]): index points at one lane of [n, 2]. */
static void queue_read(int64_t n, int64_t rb, const uint8_t *queue, const int64_t *index, uint8_t *out) {
    ROWS(rb, for (int64_t i = 0; i < n; i++) memcpy(out + i * RB, queue + index[2 * i] * RB, RB));
}

/* Every slot of the rows where mask[i] set to value[i] ([n, rb]). */
static void queue_fill(int64_t n, int64_t depth, int64_t rb, uint8_t *queue, const uint8_t *mask,
                       const uint8_t *value) {
    ROWS(rb, for (int64_t i = 0; i < n; i++) {
        if (!mask[i]) continue;
        for (int64_t s = 0; s <= depth; s++) memcpy(queue + (s * n + i) * RB, value + i * RB, RB);
    });
}

static inline uint64_t lcg(uint64_t state) { return (state * 1664525u + 1013904223u) & 0xFFFFFFFFu; }

/* Delay's action side (its inv): with fill_first, the rows starting an episode fill their queue
   with the action; the action is pushed; out[i] is row i's action index[2 i] back. With applied
   (a hold probability), each row's hold stream moves on and, where its top 16 bits are below
   threshold and the row is not at its episode's first step, out[i] is the last applied action;
   applied becomes out. first is cleared. */
void delay_actions(int64_t n, int64_t depth, int64_t rb, uint8_t *queue, const uint8_t *action, const int64_t *index,
                   uint8_t *first, int64_t fill_first, uint8_t *applied, int64_t *hold_draws, int64_t threshold,
                   uint8_t *out)
{
    if (fill_first) queue_fill(n, depth, rb, queue, first, action);
    queue_push(n, depth, rb, queue, action);
    queue_read(n, rb, queue, index, out);
    if (applied) {
        ROWS(rb, for (int64_t i = 0; i < n; i++) {
            const uint64_t state = lcg((uint64_t)hold_draws[i]);
            hold_draws[i] = (int64_t)state;
            if ((int64_t)(state >> 16) < threshold && !first[i]) memcpy(out + i * RB, applied + i * RB, RB);
            memcpy(applied + i * RB, out + i * RB, RB);
        });
    }
    memset(first, 0, (size_t)n);
}

/* Delay's step of one observation key: obs pushed, out[i] row i's observation index[2 i] back.
   With done (the step's [n] end flags), restart takes a copy of it. */
void delay_observe(int64_t n, int64_t depth, int64_t rb, uint8_t *queue, const uint8_t *obs, const int64_t *index,
                   uint8_t *out, uint8_t *restart, const uint8_t *done)
{
    queue_push(n, depth, rb, queue, obs);
    queue_read(n, rb, queue, index, out);
    if (done) memcpy(restart, done, (size_t)n);
}

/* Delay's root, the rows where restart[i] (their episode starts): with draws, the episode stream
   moves on and both delays are drawn (lane j: 16 bits from bit shift_j, times span_j, >> 16, plus
   low_j; action lane 16, observation lane 0) and their read indices set (i + (depth_j - delay_j) n);
   with an action queue (action != NULL), its slots are zeroed and first[i] set. With clear,
   restart is zeroed. */
void delay_restart(int64_t n, uint8_t *restart, int64_t draws, int64_t *episode_draws, const int64_t *lows,
                   const int64_t *spans, const int64_t *depths, int64_t *delays, int64_t *index,
                   uint8_t *action, int64_t action_depth, int64_t action_rb, uint8_t *first, int64_t clear)
{
    static const int shifts[2] = {16, 0};
    for (int64_t i = 0; i < n; i++) {
        if (!restart[i]) continue;
        if (draws) {
            const uint64_t state = lcg((uint64_t)episode_draws[i]);
            episode_draws[i] = (int64_t)state;
            for (int j = 0; j < 2; j++) {
                const int64_t d = (int64_t)((((state >> shifts[j]) & 0xFFFFu) * (uint64_t)spans[j]) >> 16) + lows[j];
                delays[2 * i + j] = d;
                index[2 * i + j] = i + (depths[j] - d) * n;
            }
        }
        if (action) {
            for (int64_t s = 0; s <= action_depth; s++) memset(action + (s * n + i) * action_rb, 0, (size_t)action_rb);
            first[i] = 1;
        }
    }
    if (clear) memset(restart, 0, (size_t)n);
}

/* Delay's root of one observation key: the restarting rows fill their queue with obs[i] (their reset
   observation); out[i] is row i's observation index[2 i] back. With clear, restart is zeroed. */
void delay_fill_read(int64_t n, int64_t depth, int64_t rb, uint8_t *queue, const uint8_t *obs, uint8_t *restart,
                     const int64_t *index, uint8_t *out, int64_t clear)
{
    queue_fill(n, depth, rb, queue, restart, obs);
    queue_read(n, rb, queue, index, out);
    if (clear) memset(restart, 0, (size_t)n);
}
"""


def _declare(lib: ctypes.CDLL) -> None:
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    signatures = {
        "history_step": [i64, i64, i64, p, p, p, p, p],  # done may be None (NULL): restart left alone
        "history_root": [i64, i64, i64, p, p, p, p, i64],
        "delay_actions": [i64, i64, i64, p, p, p, p, i64, p, p, i64, p],
        "delay_observe": [i64, i64, i64, p, p, p, p, p, p],
        "delay_restart": [i64, p, i64, p, p, p, p, p, p, p, i64, i64, p, i64],
        "delay_fill_read": [i64, i64, i64, p, p, p, p, p, i64],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, None


_LIBRARY = NativeLibrary("row_queues", SOURCE, _declare, "History and Delay run their torch ops")


def kernels(device: torch.device) -> ctypes.CDLL | None:
    """The loaded library for a transform on ``device``: None off the CPU or where it cannot be had."""
    return _LIBRARY.load() if device.type == "cpu" else None


def fits(x: torch.Tensor, shape: torch.Size, dtype: torch.dtype) -> bool:
    """True if the kernel may read ``x`` as the ``shape`` x ``dtype`` bytes it was set up for (contiguous, on the CPU).

    An input that does not fit goes through the transform's torch ops, which broadcast,
    promote or raise as torch does: the kernel never reads past a tensor's bytes.
    """
    return x.dtype is dtype and x.shape == shape and x.is_contiguous() and x.is_cpu


class KernelUser:
    """Mixin of the transforms that keep the library in ``_lib`` (set at ``setup``): :attr:`native`, and deep copies.

    A deep copy shares the handle and copies the rest. The handle (a ``ctypes.CDLL``) cannot be deep-copied (``ValueError: ctypes objects
    containing pointers cannot be pickled``, which says nothing of the cause). Passed over,
    the copy goes on to what decides it: a set-up transform is bound to its env, which
    refuses with :class:`~gpu_envs.NotCopyableError` and says what works instead. The
    kernels take every pointer from the transform's own tensors at each call, so nothing
    else in the copy points into the original.
    """

    @property
    def native(self) -> bool:
        """True where the hooks run the C kernel: a CPU env, set up, a C compiler."""
        return getattr(self, "_lib", None) is not None

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        cls = type(self)
        twin = cls.__new__(cls)
        memo[id(self)] = twin
        for key, value in self.__dict__.items():
            twin.__dict__[key] = value if key == "_lib" else copy.deepcopy(value, memo)
        return twin
