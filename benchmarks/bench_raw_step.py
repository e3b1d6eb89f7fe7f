"""The built-in envs' own eager step: pooled counter-based draws vs direct ones vs a torch.Generator.

The built-in envs reset ended rows inside ``step`` (same-step auto-reset), so every step
draws a reset candidate for every row. Three ways to draw it, each env stepped with
``env.step(action)`` (no wrapper), interleaved in one process, thread CPU time, one torch
thread, medians:

(a) ``generator``: the step as it was with a ``torch.Generator`` (one ``uniform_`` per
    step into a reused buffer, state re-bound): kept here as the reference the
    counter-based generator must match in eager mode. Its draws depend on N and on the
    other rows, it cannot be traced by ``torch.compile``, and a CUDA graph must register
    it: why it was replaced;
(b) ``direct``: the shipped env stepped inside ``direct_draws()``: the draws computed
    from the counters with ~20 int64 ops per step (what a compiled or captured step
    records, and what every eager step cost before the pool);
(c) ``pooled``: the shipped env: each row's next P draws precomputed in one int32 pass
    and gathered per step (:mod:`gpu_envs.envs.draw_pool`); the same values as (b) bit
    for bit.

CartPole-v1 (4 lanes per draw) and Pendulum-v1 (2 lanes), ``expose_final_obs=False``,
at N in {8, 256, 4096}; fixed alternating actions.

    python benchmarks/bench_raw_step.py --json benchmarks/results/raw_step.json
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks.timing import bench_result, interleave, sizes_main
from gpu_envs.envs import CartPoleEnv, PendulumEnv
from gpu_envs.envs.draw_pool import direct_draws

SIZES = (8, 256, 4096)


class GeneratorCartPole(CartPoleEnv):
    """CartPole's step as it was with a ``torch.Generator`` (the reference, not shipped)."""

    def _build(self) -> None:
        super()._build()
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(0)
        self._reset_buf = torch.empty(self.num_envs, 4, device=self.device)
        self._zero_steps = torch.zeros((), dtype=torch.int64, device=self.device)

    def _advance(self, action: torch.Tensor, columns: bool) -> tuple:  # env.step's [N] layout only
        s = self._state
        _, x_dot, theta, theta_dot = s.unbind(1)
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = torch.add(self._force_neg, action, alpha=self._force_step)
        temp = torch.addcmul(temp, theta_dot * theta_dot, sin, value=self._k_pml)
        theta_acc = torch.addcmul(sin, cos, temp, value=-1.0)
        theta_acc = theta_acc / torch.addcmul(self._den_const, cos, cos, value=self._den_cos2)
        x_acc = torch.addcmul(temp, theta_acc, cos, value=-self._k_pml)
        new = torch.addcmul(s, torch.stack((x_dot, x_acc, theta_dot, theta_acc), 1), self._tau)
        out_of_bounds = new.abs() > self._bounds
        terminated = out_of_bounds.view(torch.int32).view(-1).bool() if self._row_views else out_of_bounds.any(1)
        elapsed = self._elapsed + self._one
        truncated = elapsed >= self._limit
        done = terminated | truncated
        self._reset_buf.uniform_(self.reset_low, self.reset_high, generator=self._generator)
        done_rows = done.unsqueeze(1)
        if self._row_views:
            post = torch.where(done_rows, self._reset_buf.view(torch.complex128), new.view(torch.complex128))
            self._state = post.view(torch.float32)
        else:
            self._state = torch.where(done_rows, self._reset_buf, new)
        self._elapsed = torch.where(done, self._zero_steps, elapsed)
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return self._state.clone(), reward, terminated, truncated, done, new


class GeneratorPendulum(PendulumEnv):
    """Pendulum's step as it was with a ``torch.Generator`` (the reference, not shipped)."""

    def _build(self) -> None:
        super()._build()
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(0)
        self._fresh_th = torch.empty(self.num_envs, device=self.device)
        self._fresh_thdot = torch.empty(self.num_envs, device=self.device)
        self._zero_steps = torch.zeros((), dtype=torch.int64, device=self.device)

    def _advance(self, action: torch.Tensor, columns: bool) -> tuple:  # env.step's [N] layout only
        th, thdot = self._state.unbind(1)
        u = action.reshape(self.num_envs)
        if u.dtype != torch.float32:
            u = u.to(torch.float32)
        u = u.clamp(-self.max_torque, self.max_torque)
        sin = torch.sin(th)
        angle = torch.atan2(sin, torch.cos(th))
        reward = torch.addcmul(self._zero, angle, angle, value=-1.0)
        reward = torch.addcmul(reward, thdot, thdot, value=-0.1)
        reward = torch.addcmul(reward, u, u, value=-0.001)
        new_thdot = torch.add(thdot, sin, alpha=self._k_sin)
        new_thdot = torch.add(new_thdot, u, alpha=self._k_u).clamp_(-self.max_speed, self.max_speed)
        new_th = torch.add(th, new_thdot, alpha=self.dt)
        elapsed = self._elapsed + self._one_step
        truncated = elapsed >= self._limit
        terminated = torch.zeros_like(truncated)
        self._fresh_th.uniform_(-self.default_x_init, self.default_x_init, generator=self._generator)
        self._fresh_thdot.uniform_(-self.default_y_init, self.default_y_init, generator=self._generator)
        post_th = torch.where(truncated, self._fresh_th, new_th)
        post_thdot = torch.where(truncated, self._fresh_thdot, new_thdot)
        self._state = torch.stack((post_th, post_thdot), 1)
        self._elapsed = torch.where(truncated, self._zero_steps, elapsed)
        obs = torch.stack((torch.cos(post_th), torch.sin(post_th), post_thdot), 1)
        return obs, reward, terminated, truncated, truncated, None


ENVS = {"CartPole-v1": (CartPoleEnv, GeneratorCartPole), "Pendulum-v1": (PendulumEnv, GeneratorPendulum)}


def _stepper(env, action: torch.Tensor, context=contextlib.nullcontext):
    env.reset(seed=0)

    def step() -> None:
        with context():
            env.step(action)

    return step


def contenders(env_id: str, n: int) -> dict:
    shipped, reference = ENVS[env_id]
    if env_id == "CartPole-v1":
        action = torch.arange(n) % 2
    else:
        action = (torch.arange(n, dtype=torch.float32) % 3 - 1).view(n, 1)
    make = {"expose_final_obs": False, "seed": 0}
    return {
        "generator": _stepper(reference(n, **make), action),
        "direct": _stepper(shipped(n, **make), action, direct_draws),
        # the same context manager around the pooled step, so that (b) - (c) is the draws only
        "pooled": _stepper(shipped(n, **make), action, contextlib.nullcontext),
    }


COLUMNS = [
    ("env", "env"),
    ("N", "N"),
    ("generator_us", "torch.Generator us/step"),
    ("direct_us", "direct draws us/step"),
    ("pooled_us", "pooled draws us/step"),
    ("direct_vs_generator", "direct vs generator"),
    ("pooled_vs_generator", "pooled vs generator"),
]


def run(
    quick: bool = False, sizes: tuple[int, ...] = SIZES, steps: int | None = None, rounds: int | None = None
) -> dict:
    """One row per (env, N): us per raw eager step with each way of drawing."""
    torch.set_num_threads(1)
    rows = []
    for env_id in ENVS:
        for n in sizes:
            n_steps = steps or (50 if quick else (400 if n <= 256 else 100))
            times = interleave(contenders(env_id, n), steps=n_steps, rounds=rounds or (3 if quick else 15))
            row = {"env": env_id, "N": n}
            for name, seconds in times.items():
                row[f"{name}_us"] = round(seconds * 1e6, 1)
            for name in ("direct", "pooled"):
                row[f"{name}_vs_generator"] = f"{times[name] / times['generator'] - 1:+.1%}"
            rows.append(row)
    return bench_result("bench_raw_step: built-in envs' eager env.step, cpu, 1 thread", rows, COLUMNS)


def main() -> None:
    sizes_main(__doc__, run, "raw_step", list(SIZES))


if __name__ == "__main__":
    main()
