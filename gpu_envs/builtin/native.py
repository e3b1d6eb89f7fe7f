"""A native CPU kernel for the built-in CartPole step: one C call instead of ~20 small aten ops.

Why: on a CPU, an eager CartPole step at small and medium N is dispatch-bound (~25 aten
ops of ~1.5-3 us each: most of the step at N <= 1024, and gymnasium's numpy
``CartPoleVectorEnv`` beat it). Here everything after the trigonometry -- the force,
the accelerations, the Euler update, termination, truncation, the counter-based reset
draws of the rows that ended (only those), the auto-reset and the step counts -- runs in
one C loop over the rows, in place on the env's own tensors (their data pointers).

* **The same values bit for bit.** ``cos``/``sin`` still come from torch (its SLEEF
  kernels, which C's ``libm`` does not reproduce); every other float operation is written
  to round as torch's eager CPU kernels round it (``addcmul`` as one fused multiply-add,
  ``add`` with an exact ``alpha * action`` for 0/1 actions, IEEE division), and the draws
  are the generator's integer hash (:mod:`gpu_envs.builtin.counter_rng`). The tests step
  both paths side by side over many steps and resets and compare every output bit.
* **Its own health check.** Each step returns 0 only if every action was valid
  (CartPole: 0 or 1; Pendulum: finite) and every value it wrote is finite, read off the
  bits while they are in registers; the env keeps the verdict as ``last_step_clean``
  (:class:`~gpu_envs.contract.protocols.SelfCheckedStep`), so the default health checks
  of a hand-written loop skip their own look of a clean step.
* **Built at first use, cached.** The source below is compiled by the system C compiler
  into ``~/.cache/gpu_envs/native/kernels-<hash>.so`` once per machine and loaded by later
  processes (:class:`gpu_envs.utils.native_library.NativeLibrary`: ``$CC``,
  ``$GPU_ENVS_NATIVE_CACHE``, atomic builds).
* **Optional.** With no compiler (or ``GPU_ENVS_NATIVE=0``), a failed build, a non-CPU
  device, a traced or captured step, or an action that is not a contiguous int64 tensor,
  the pure-torch step runs: the same results, only slower. :func:`kernels` returns None
  then; nothing is raised on the hot path.

Example (``kernels()`` is None where no compiler exists; the step is the same either way):

>>> from gpu_envs.builtin import native
>>> lib = native.kernels()
>>> native.available() == (lib is not None)
True
>>> lib is None or hasattr(lib, "cartpole_step")
True
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import torch

from gpu_envs.utils.native_library import NativeLibrary, cache_dir

__all__ = ["SOURCE", "StepConstants", "available", "build_into", "cache_dir", "kernels", "step_constants"]

SOURCE = r"""
#include <stdint.h>
#include <math.h>

/* fmaf is one instruction only where the CPU has FMA: on x86-64 build both and let the
   loader pick (GCC/Clang function multiversioning); the results are the same (fmaf is
   exactly rounded either way), only the speed differs. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KERNEL __attribute__((target_clones("fma", "default")))
#else
#define KERNEL
#endif

/* Not finite (inf or NaN): the exponent bits all ones, read on the bits (no arithmetic). */
static inline int nonfinite(float v) {
    union { float f; uint32_t u; } b;
    b.f = v;
    return (b.u & 0x7F800000u) == 0x7F800000u;
}

static inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16; x *= 0x236F7153u;
    x ^= x >> 12; x *= 0x33CD8663u;
    x ^= x >> 15; x *= 0x3E06B66Bu;
    x ^= x >> 16;
    return x;
}

/* What an env's step and partial reset pass the same at every call (its tensors' pointers and
   constants, read once at setup): one pointer per call instead of eleven arguments, since ctypes
   converts every argument of every call (~60 ns each). Mirrored by gpu_envs.builtin.native.StepConstants. */
typedef struct {
    int64_t n;              /* rows */
    float *state;           /* [N, lanes] */
    int64_t *elapsed;       /* [N] step counts */
    int64_t limit;          /* max_episode_steps */
    const int64_t *key;     /* [N, 2] counter-RNG keys */
    int64_t *counter;       /* [N] counter-RNG counters */
    const float *low, *scale, *below_high;  /* [lanes] reset bounds */
    int64_t needs_clamp;    /* clamp draws below high */
    const float *c;         /* the env's step constants */
} StepConstants;

/* Row i's next counter-based draw of `lanes` values of the reset bounds into out (the generator's
   integer hash: gpu_envs/builtin/counter_rng.py); its counter moves on and its step count goes to 0. */
static inline void draw_fresh(const StepConstants *k, int64_t i, int64_t lanes, float *out) {
    const uint64_t start = (uint64_t)k->key[2 * i], step = (uint64_t)k->key[2 * i + 1];
    const uint64_t base = (uint64_t)k->counter[i] * (uint64_t)lanes;
    for (int64_t j = 0; j < lanes; j++) {
        const uint32_t pos = (uint32_t)(base + (uint64_t)j);
        const uint32_t bits = mix32((uint32_t)(start + (uint64_t)pos * step));
        float v = fmaf((float)(bits >> 8), k->scale[j], k->low[j]);
        if (k->needs_clamp && v > k->below_high[j]) v = k->below_high[j];
        out[j] = v;
    }
    k->counter[i] += 1;
    k->elapsed[i] = 0;
}

/* One CartPole-v1 step of every row (see gpu_envs/builtin/cartpole.py for the torch twin).
   c: force_neg, force_step, k_pml, den_const, den_cos2, tau[4], bounds[4].
   Returns 0 when every action was 0 or 1 and every observation written is finite (the
   health look's checks, made on values already in registers), else 1. */
KERNEL int cartpole_step(
    const StepConstants *k, const float *cosv, const float *sinv, const int64_t *action,
    float *obs, float *final_obs, float *reward, uint8_t *terminated, uint8_t *truncated, uint8_t *done)
{
    const int64_t n = k->n, limit = k->limit;
    float *state = k->state;
    int64_t *elapsed = k->elapsed;
    const float *c = k->c;
    const float force_neg = c[0], force_step = c[1], k_pml = c[2], den_const = c[3], den_cos2 = c[4];
    const float neg_k_pml = -k_pml;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float *s = state + 4 * i;
        const float x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
        const float cs = cosv[i], sn = sinv[i];
        float temp = fmaf(force_step, (float)action[i], force_neg);
        temp = fmaf(k_pml * (theta_dot * theta_dot), sn, temp);
        float theta_acc = fmaf(-cs, temp, sn);
        theta_acc = theta_acc / fmaf(den_cos2 * cs, cs, den_const);
        const float x_acc = fmaf(neg_k_pml * theta_acc, cs, temp);
        float nw[4];
        nw[0] = fmaf(x_dot, c[5], x);
        nw[1] = fmaf(x_acc, c[6], x_dot);
        nw[2] = fmaf(theta_dot, c[7], theta);
        nw[3] = fmaf(theta_acc, c[8], theta_dot);
        const int term = (fabsf(nw[0]) > c[9]) | (fabsf(nw[1]) > c[10]) | (fabsf(nw[2]) > c[11])
                         | (fabsf(nw[3]) > c[12]);
        const int64_t e = elapsed[i] + 1;
        const int trunc = e >= limit;
        const int d = term | trunc;
        float *o = obs + 4 * i, *f = final_obs + 4 * i;
        for (int j = 0; j < 4; j++) f[j] = nw[j];
        bad |= ((uint64_t)action[i] > 1u) | nonfinite(nw[0]) | nonfinite(nw[1]) | nonfinite(nw[2])
               | nonfinite(nw[3]);
        if (d) {
            draw_fresh(k, i, 4, nw);
        } else {
            elapsed[i] = e;
        }
        for (int j = 0; j < 4; j++) { o[j] = nw[j]; s[j] = nw[j]; bad |= nonfinite(nw[j]); }
        reward[i] = 1.0f;
        terminated[i] = (uint8_t)term;
        truncated[i] = (uint8_t)trunc;
        done[i] = (uint8_t)d;
    }
    return bad;
}

/* One Pendulum-v1 step of every row, up to the observation's trigonometry (see
   gpu_envs/builtin/pendulum.py). sinv/cosv/angle: sin th, cos th, atan2(sin, cos) of the
   pre-step state. Writes the reward, the flags, the new state (auto-reset included), the
   step counts and counters, new thdot into new_thdot and [post th | new th] into angles [2N].
   c: max_torque, max_speed, dt, k_sin, k_u.
   Returns 0 when every action, reward and state written is finite (the health look's
   checks: the observation is the trigonometry of a finite state), else 1. */
KERNEL int pendulum_step(
    const StepConstants *k, const float *sinv, const float *angle, const float *action,
    float *reward, uint8_t *terminated, uint8_t *truncated, float *new_thdot_out, float *angles)
{
    const int64_t n = k->n, limit = k->limit;
    float *state = k->state;
    int64_t *elapsed = k->elapsed;
    const float *c = k->c;
    const float max_torque = c[0], max_speed = c[1], dt = c[2], k_sin = c[3], k_u = c[4];
    const float k_thdot = -0.1f, k_u2 = -0.001f;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float *s = state + 2 * i;
        const float th = s[0], thdot = s[1], sn = sinv[i], a = angle[i];
        float u = action[i];
        u = u < -max_torque ? -max_torque : (u > max_torque ? max_torque : u);
        float r = fmaf(-a, a, 0.0f);
        r = fmaf(k_thdot * thdot, thdot, r);
        r = fmaf(k_u2 * u, u, r);
        float nd = fmaf(k_sin, sn, thdot);
        nd = fmaf(k_u, u, nd);
        nd = nd < -max_speed ? -max_speed : (nd > max_speed ? max_speed : nd);
        const float nt = fmaf(dt, nd, th);
        const int64_t e = elapsed[i] + 1;
        const int trunc = e >= limit;
        float post[2] = {nt, nd};
        if (trunc) {
            draw_fresh(k, i, 2, post);
        } else {
            elapsed[i] = e;
        }
        bad |= nonfinite(action[i]) | nonfinite(r) | nonfinite(nt) | nonfinite(nd) | nonfinite(post[0])
               | nonfinite(post[1]);
        s[0] = post[0];
        s[1] = post[1];
        reward[i] = r;
        terminated[i] = 0;
        truncated[i] = (uint8_t)trunc;
        new_thdot_out[i] = nd;
        angles[i] = post[0];
        angles[n + i] = nt;
    }
    return bad;
}

/* A partial reset: rows where mask[i] take their next counter-based draw (draw_fresh); the other
   rows are untouched. */
void reset_rows(const StepConstants *k, int64_t lanes, const uint8_t *mask)
{
    for (int64_t i = 0; i < k->n; i++) {
        if (mask[i]) draw_fresh(k, i, lanes, k->state + lanes * i);
    }
}

/* The observations [cos th, sin th, thdot] of a Pendulum step, in one call: obs[i] from the post-step
   state (cosv[i], sinv[i], state[2 i + 1]) and, unless final is NULL, final[i] from the pre-reset one
   (cosv[n + i], sinv[n + i], new_thdot[i]): angles [post th | new th] gave cosv / sinv. */
void pendulum_obs(int64_t n, const float *cosv, const float *sinv, const float *state, const float *new_thdot,
                  float *obs, float *final)
{
    for (int64_t i = 0; i < n; i++) {
        obs[3 * i] = cosv[i];
        obs[3 * i + 1] = sinv[i];
        obs[3 * i + 2] = state[2 * i + 1];
    }
    if (!final) return;
    for (int64_t i = 0; i < n; i++) {
        final[3 * i] = cosv[n + i];
        final[3 * i + 1] = sinv[n + i];
        final[3 * i + 2] = new_thdot[i];
    }
}
"""


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    fn = lib.cartpole_step
    fn.argtypes = [p, p, p, p, p, p, p, p, p, p]  # StepConstants*, cos, sin, action, then the six outputs
    fn.restype = i32  # 0: the step's actions and outputs passed the health look's checks
    fn = lib.pendulum_step
    fn.argtypes = [p, p, p, p, p, p, p, p, p]  # StepConstants*, sin, angle, action, outputs, scratch
    fn.restype = i32
    fn = lib.reset_rows
    fn.argtypes = [p, i64, p]  # StepConstants*, lanes, mask
    fn.restype = None
    fn = lib.pendulum_obs
    fn.argtypes = [i64, p, p, p, p, p, p]  # final may be None (NULL): not exposed
    fn.restype = None


class StepConstants(ctypes.Structure):
    """The C ``StepConstants`` of :data:`SOURCE`: what a native step or reset passes the same at every call, packed once.

    ctypes converts each argument of each call (~60 ns apiece), so the env's pointers and
    constants travel as one pointer (:meth:`address`). The env keeps this object, and the
    tensors it points into, alive as long as it steps.

    Example::

        >>> import torch
        >>> state = torch.zeros(4, 4)
        >>> constants = StepConstants(n=4, state=state.data_ptr(), limit=500)
        >>> constants.n, constants.limit, constants.state == state.data_ptr()
        (4, 500, True)
    """

    _fields_ = [  # ctypes reads the layout from this class attribute
        ("n", ctypes.c_int64),
        ("state", ctypes.c_void_p),
        ("elapsed", ctypes.c_void_p),
        ("limit", ctypes.c_int64),
        ("key", ctypes.c_void_p),
        ("counter", ctypes.c_void_p),
        ("low", ctypes.c_void_p),
        ("scale", ctypes.c_void_p),
        ("below_high", ctypes.c_void_p),
        ("needs_clamp", ctypes.c_int64),
        ("c", ctypes.c_void_p),
    ]

    def address(self) -> int:
        """This structure's address, the kernels' first argument."""
        return ctypes.addressof(self)


def step_constants(
    state: torch.Tensor,
    elapsed: torch.Tensor,
    limit: int,
    rng: Any,
    bounds: Any,
    consts: list[float],
) -> StepConstants:
    """An env's :class:`StepConstants`: its state, step counts, random streams, reset bounds and step constants.

    ``rng`` is the env's :class:`~gpu_envs.builtin.counter_rng.CounterRNG` (its ``key`` and
    ``counter``), ``bounds`` its default reset :class:`~gpu_envs.builtin.counter_rng.UniformBounds`;
    ``consts`` its step constants (the kernel's ``c``). The tensors passed are never re-bound
    by the env; the ones made here (the bounds' rows, the constants) are kept alive by the
    returned structure (its ``tensors``).
    """
    rows = torch.stack((bounds.low, bounds.scale, bounds.below_high))
    c = torch.tensor(consts, dtype=torch.float32)
    low, scale, below_high = (row.data_ptr() for row in rows)
    packed = StepConstants(
        n=state.shape[0],
        state=state.data_ptr(),
        elapsed=elapsed.data_ptr(),
        limit=limit,
        key=rng.key.data_ptr(),
        counter=rng.counter.data_ptr(),
        low=low,
        scale=scale,
        below_high=below_high,
        needs_clamp=int(bounds.needs_clamp),
        c=c.data_ptr(),
    )
    packed.tensors = (rows, c)  # what it points into, alive as long as it is
    return packed


_LIBRARY = NativeLibrary("kernels", SOURCE, _declare, "the built-in envs use their pure-torch step")


def available() -> bool:
    """True if the native kernels can be used here (built or buildable, not switched off)."""
    return kernels() is not None


def build_into(directory: Path) -> ctypes.CDLL:
    """Build the library into ``directory`` (unless it is there already) and load it; raises on failure."""
    return _LIBRARY.build_into(directory)


def kernels() -> ctypes.CDLL | None:
    """The loaded native library (built first if needed), or None where it cannot be had.

    ``GPU_ENVS_NATIVE=0`` switches it off (the pure-torch step runs). A failed build is
    reported once as a ``RuntimeWarning`` and not retried in this process
    (:class:`gpu_envs.utils.native_library.NativeLibrary`).
    """
    return _LIBRARY.load()
