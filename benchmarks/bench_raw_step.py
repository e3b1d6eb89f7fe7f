"""The built-in envs' own eager step: pooled counter-based draws vs direct ones vs a torch.Generator.

The built-in envs reset ended rows inside ``step`` (same-step auto-reset), so every step
draws a reset candidate for every row. Three ways to draw it, each env stepped with
``env.step(action)`` (no wrapper), interleaved in one process, thread CPU time, one torch
thread, medians:

(a) ``generator``: the shipped physics with the draws the envs had before, from a
    ``torch.Generator`` (one ``uniform_`` per step into a reused buffer; no per-row
    counters): the reference the counter-based generator must match in eager mode. Its
    draws depend on N and on the other rows, it cannot be traced by ``torch.compile``,
    and a CUDA graph must register it: why it was replaced;
(b) ``direct``: the shipped env stepped inside ``capturing()``: the draws computed
    from the counters with ~20 int64 ops per step (what a compiled or captured step
    records, and what every eager step cost before the pool);
(c) ``pooled``: the shipped env: each row's next P draws precomputed in one int32 pass
    and gathered per step (:mod:`gpu_envs.builtin.draw_pool`); the same values as (b) bit
    for bit.

CartPole-v1 (4 lanes per draw) and Pendulum-v1 (2 lanes), ``expose_final_obs=False``,
at N in {8, 256, 4096}; fixed alternating actions. These envs are built with
``GPU_ENVS_NATIVE=0``: the draws of the pure-torch step (the one CUDA, ``torch.compile``
and the fallback without a C compiler run); the native CPU step draws only for the rows
that end (:mod:`gpu_envs.builtin.native`).

Then, in the same run, the peers table (:mod:`benchmarks.step_peers`): the default
``step_and_maybe_reset`` loop with random actions next to gymnasium's numpy
``CartPoleVectorEnv``, a numpy-vectorised Pendulum and ``SyncVectorEnv(1)``, at N in
{1, 8, 64, 1024, 16384}, with ratio columns (``--no-peers`` skips it, ``--peer-sizes``
picks N); and the to_gymnasium table: ``to_gymnasium(make("CartPole-v1", N))`` with
numpy and torch arrays, NEXT_STEP and SAME_STEP, next to gymnasium's ``SyncVectorEnv``
and ``CartPoleVectorEnv`` at N in {8, 64} (``--no-adapter`` skips it).

    python benchmarks/bench_raw_step.py --json benchmarks/results/raw_step.json
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks import step_peers
from benchmarks.timing import bench_result, env_var, format_table, interleave, save_json
from gpu_envs.builtin import CartPoleEnv, PendulumEnv
from gpu_envs.utils.capture import capturing

SIZES = (8, 256, 4096)


class GeneratorDraws:
    """Reset candidates from a ``torch.Generator``, as the built-in envs drew them before.

    One ``uniform_`` per step into a reused buffer (one per lane where the lanes' bounds
    differ: CartPole one, Pendulum two, as their old steps had).
    """

    def __init__(self, env, low: list[float], high: list[float]) -> None:
        self.buffer = torch.empty(env.num_envs, len(low), device=env.device)
        self.generator = torch.Generator(device=env.device).manual_seed(0)
        if len(set(low)) == 1 and len(set(high)) == 1:
            self.parts = [(self.buffer, low[0], high[0])]
        else:
            self.parts = [(self.buffer[:, lane], lo, hi) for lane, (lo, hi) in enumerate(zip(low, high, strict=True))]

    def uniform(self) -> torch.Tensor:
        for part, low, high in self.parts:
            part.uniform_(low, high, generator=self.generator)
        return self.buffer


@contextlib.contextmanager
def torch_step() -> Iterator[None]:
    """Built-in envs built inside run their pure-torch step (``GPU_ENVS_NATIVE=0``)."""
    with env_var("GPU_ENVS_NATIVE", "0"):
        yield


def generator_env(cls: type, n: int, **kwargs):
    """The shipped env with its step's draws from a ``torch.Generator`` and no per-row counters.

    The physics, the in-place state and the flags are the shipped step's; only the draws
    are the old ones (and the counters' increment, which the old step did not have, is
    left out): the step as it was, but for its in-place writes (the same op count).
    """
    with torch_step():  # the step that draws from reset_draws (the native one draws in C)
        env = cls(n, **kwargs)
    if cls is CartPoleEnv:
        low, high = [env.reset_low] * 4, [env.reset_high] * 4
    else:
        low, high = [-env.default_x_init, -env.default_y_init], [env.default_x_init, env.default_y_init]
    env.reset_draws = GeneratorDraws(env, low, high)
    env.rng.advance = lambda mask=None: None  # the Generator-based step counted nothing per row
    return env


ENVS = {"CartPole-v1": CartPoleEnv, "Pendulum-v1": PendulumEnv}


def _stepper(env, action: torch.Tensor, context) -> object:
    """``env.step(action)`` inside ``context`` (the same ``with`` for every contender)."""
    env.reset(seed=0)

    def step() -> None:
        with context():
            env.step(action)

    return step


def contenders(env_id: str, n: int) -> dict:
    cls = ENVS[env_id]
    if env_id == "CartPole-v1":
        action = torch.arange(n) % 2
    else:
        action = (torch.arange(n, dtype=torch.float32) % 3 - 1).view(n, 1)
    make = {"expose_final_obs": False, "seed": 0}
    with torch_step():  # the pure-torch step's draws (see the module's docstring)
        return {
            "generator": _stepper(generator_env(cls, n, **make), action, contextlib.nullcontext),
            "direct": _stepper(cls(n, **make), action, capturing),
            "pooled": _stepper(cls(n, **make), action, contextlib.nullcontext),
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


def run_peers(
    quick: bool = False, sizes: tuple[int, ...] = step_peers.SIZES, steps: int | None = None, rounds: int | None = None
) -> dict:
    """One row per (env, N): the default step loop vs gymnasium's numpy vector envs (:mod:`benchmarks.step_peers`)."""
    torch.set_num_threads(1)
    rows = []
    for env_id in step_peers.ENV_IDS:
        for n in sizes:
            n_steps = steps or max(10 if quick else 30, (4000 if quick else 20000) // max(n, 64))
            times = interleave(step_peers.contenders(env_id, n), steps=n_steps, rounds=rounds or (3 if quick else 11))
            rows.append(step_peers.row_of(env_id, n, times))
    cpu = torch.backends.cpu.get_cpu_capability()
    title = (
        f"bench_raw_step peers: default step_and_maybe_reset loop vs gymnasium, random actions, cpu ({cpu}), 1 thread"
    )
    return bench_result(title, rows, step_peers.COLUMNS)


def run_adapter(
    quick: bool = False,
    sizes: tuple[int, ...] = step_peers.ADAPTER_SIZES,
    steps: int | None = None,
    rounds: int | None = None,
) -> dict:
    """One row per N: ``to_gymnasium`` in each mode vs gymnasium's SyncVectorEnv and CartPoleVectorEnv."""
    torch.set_num_threads(1)
    rows = []
    for n in sizes:
        times = interleave(
            step_peers.adapter_contenders(n),
            steps=steps or (50 if quick else 300),
            rounds=rounds or (3 if quick else 11),
        )
        rows.append(step_peers.adapter_row(n, times))
    title = "bench_raw_step to_gymnasium: make('CartPole-v1', N) behind gymnasium's API vs gymnasium, random actions, cpu, 1 thread"
    return bench_result(title, rows, step_peers.ADAPTER_COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="N of the draws table")
    parser.add_argument("--peer-sizes", type=int, nargs="+", default=list(step_peers.SIZES), help="N of the peers")
    parser.add_argument("--no-draws", action="store_true", help="no draws table")
    parser.add_argument("--no-peers", action="store_true", help="no peers table")
    parser.add_argument("--no-adapter", action="store_true", help="no to_gymnasium table")
    parser.add_argument("--steps", type=int, default=None, help="steps per round (default: by N)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    payload: dict = {"benchmark": "raw_step", "device": "cpu"}
    if not args.no_draws:
        result = run(args.quick, tuple(args.sizes), args.steps, args.rounds)
        print(format_table(result["title"], result["rows"], result["columns"]))
        payload["rows"] = result["rows"]
    if not args.no_peers:
        peers = run_peers(args.quick, tuple(args.peer_sizes), args.steps, args.rounds)
        print(format_table(peers["title"], peers["rows"], peers["columns"]))
        payload["peers"] = peers["rows"]
    if not args.no_adapter:
        adapter = run_adapter(args.quick, steps=args.steps, rounds=args.rounds)
        print(format_table(adapter["title"], adapter["rows"], adapter["columns"]))
        payload["to_gymnasium"] = adapter["rows"]
    save_json(args.json, payload)


if __name__ == "__main__":
    main()
