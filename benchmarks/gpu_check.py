"""The one prepared check for a machine with an NVIDIA GPU (about 5-8 minutes on an H200).

Run from the repository root::

    python benchmarks/gpu_check.py [--budget-s 420] [--json benchmarks/results/gpu_check.json]
    python benchmarks/gpu_check.py --smoke      # the same steps on the CPU, tiny sizes (CI runs it)

It does, in order, each step isolated (an exception fails that step, and the run goes on),
and prints ONE table of checks and one throughput table at the end:

1. ``pytest tests/test_sync_guard.py tests/test_draw_pool.py tests/test_native_step.py``
   (the sync guard, the built-in envs' pooled draws equal to direct ones, on CUDA as well
   as the CPU, and the native CPU step equal to the torch step on the host's CPU);
2. a training-like loop that may not synchronise: eager, compiled and CUDA-graph
   collections of CartPole with an MLP policy, plus the critic and ``gae`` on each batch,
   under ``torch.cuda.set_sync_debug_mode("error")`` (``--smoke``: eager and compiled
   under the dispatch-mode sync guard of ``tests/sync_guard.py``);
3. correctness: CUDA-graph collections equal eager ones, exactly (the counting env with
   masked final observations, and built-in CartPole; ``--smoke``: the CPU emulation of
   CUDA graphs in ``tests/graph_emulation.py``);
4. memory: ``--collections`` collections with no growth (``torch.cuda.memory_stats``;
   ``--smoke``: the process's RSS);
   then the default ``step_and_maybe_reset`` loop of CartPole-v1 and Pendulum-v1 (random
   actions, no flag) in us/step at N in {8, 1024, 65536, 2^20} (``--smoke``: {8, 64});
5. throughput of built-in CartPole-v1 (random actions), sizes in increasing order, in
   env-steps/s: eager vs ``compile=True`` vs ``cudagraph=True`` vs both (``--smoke``:
   N in {8, 64}, eager and compiled).

``--budget-s`` bounds the whole run (default 420 s, start-up excluded): a step that would
not fit in what is left, judged from what the earlier ones took, is skipped, saying so;
the largest N is measured last. Exit status 0 when every step that ran passed, 1 when one
failed, 2 without CUDA (and without ``--smoke``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make gpu_envs, benchmarks and tests importable
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.timing import memory_bytes, sync  # noqa: E402

MODES = ("eager", "compile", "cudagraph", "compile+cudagraph")
PYTEST_FILES = ("tests/test_sync_guard.py", "tests/test_draw_pool.py", "tests/test_native_step.py")
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIPPED"


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass(frozen=True)
class Plan:
    """Sizes and modes of one run: the GPU's, or the CPU smoke run's tiny ones."""

    device: torch.device
    smoke: bool
    sizes: tuple[int, ...]
    modes: tuple[str, ...]
    steps: int
    repeats: int
    collections: int
    loop_envs: int
    loop_iterations: int
    graph_envs: int
    memory_envs: int

    @staticmethod
    def from_args(args: argparse.Namespace) -> Plan:
        """The GPU run's sizes, or with ``--smoke`` the CPU's tiny ones; the options override."""
        smoke = bool(args.smoke)
        base = _SMOKE if smoke else _GPU
        device = torch.device("cpu") if smoke else torch.device("cuda", torch.cuda.current_device())
        chosen = {name: getattr(args, name) or base[name] for name in ("sizes", "steps", "repeats", "collections")}
        return Plan(device=device, smoke=smoke, **{**base, **chosen, "sizes": tuple(sorted(chosen["sizes"]))})


# what a run measures: on the GPU, and in the CPU smoke run (tiny, every step that can run there)
_GPU = dict(
    sizes=(4096, 65536, 1048576), modes=MODES, steps=64, repeats=10, collections=1000,
    loop_envs=4096, loop_iterations=10, graph_envs=1024, memory_envs=65536,
)  # fmt: skip
_SMOKE = dict(
    sizes=(8, 64), modes=("eager", "compile"), steps=16, repeats=3, collections=50,
    loop_envs=64, loop_iterations=3, graph_envs=16, memory_envs=256,
)  # fmt: skip


class Budget:
    """The time left for the run; a step is started only if its estimate fits."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.perf_counter()

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)

    def fits(self, estimate: float) -> bool:
        return estimate <= self.left()


class Policy(torch.nn.Module):
    """A small MLP actor, sampling by Gumbel-max (no host sync, graph-capturable)."""

    def __init__(self, obs_dim: int = 4, n_actions: int = 2) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(obs_dim, 64), torch.nn.Tanh(), torch.nn.Linear(64, n_actions))

    @torch.no_grad()
    def forward(self, td):
        logits = self.net(td["observation"])
        noise = -torch.log(-torch.log(torch.rand_like(logits).clamp_(1e-9, 1.0)))
        td["action"] = (logits + noise).argmax(-1)
        td["logits"] = logits
        return td


# --------------------------------------------------------------------------- the checks
def check_pytest(plan: Plan, budget: Budget) -> tuple[bool, str]:
    cmd = [sys.executable, "-m", "pytest", *PYTEST_FILES, "-q", "-p", "no:cacheprovider"]
    timeout = max(30.0, min(240.0, budget.left()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f}s"
    last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-2000:], sep="\n")
    return proc.returncode == 0, last


def _loop_modes(plan: Plan) -> dict[str, dict]:
    modes = {"eager": {}, "compile": {"compile": True}}
    if not plan.smoke:
        modes["cudagraph"] = {"cudagraph": True}
    return modes


def check_no_sync_loop(plan: Plan, budget: Budget) -> tuple[bool, str]:
    """Collections + critic + gae with every host sync an error (CUDA debug mode or the guard)."""
    import gpu_envs
    from gpu_envs.rollout import RolloutBuffer, collect, gae
    from tests.sync_guard import no_sync

    device, n = plan.device, plan.loop_envs
    env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    policy = Policy().to(device)
    critic = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
    modes = _loop_modes(plan)
    bufs = {mode: RolloutBuffer(env, 32) for mode in modes}
    for mode, buf in bufs.items():  # warm-up outside the check: first-step validation, compile, capture
        for _ in range(2):
            collect(env, policy, buffer=buf, **modes[mode])
    ended = torch.zeros((), device=device)
    if plan.smoke:
        guard = no_sync()
    else:
        torch.cuda.synchronize(device)
        torch.cuda.set_sync_debug_mode("error")
        guard = contextlib.nullcontext()
    adv = torch.zeros(())
    try:
        with guard:
            for _ in range(plan.loop_iterations):
                for mode, buf in bufs.items():
                    traj = collect(env, policy, buffer=buf, **modes[mode])
                    with torch.no_grad():
                        value = critic(traj["observation"])
                        next_value = critic(traj["next", "observation"])
                        adv, _ = gae(
                            traj["next", "reward"], value, next_value, traj["next", "terminated"],
                            traj["next", "truncated"], traj["next", "final_obs_missing"], gamma=0.99, lam=0.95,
                        )  # fmt: skip
                    ended += traj["next", "done"].sum()
    finally:
        if not plan.smoke:
            torch.cuda.set_sync_debug_mode(0)
    count = int(ended.item())
    ok = count > 0 and bool(torch.isfinite(adv).all())
    detail = f"{plan.loop_iterations} x {len(modes)} modes ({', '.join(modes)}) x 32 steps, N={n}, no sync; {count} episodes ended"
    if plan.smoke:
        # the dispatch-mode guard cannot see inside compiled kernels (compiled code runs the
        # chunk eagerly under it); there a host sync would be a graph break: make that an error
        with torch._dynamo.error_on_graph_break(True):
            for _ in range(plan.loop_iterations):
                collect(env, policy, buffer=bufs["compile"], compile=True)
        detail += "; compiled collections with graph breaks as errors"
    return ok, detail


def _equal(a, b) -> tuple[bool, str]:
    for key in a.keys(True, True):
        x, y = a[key], b[key]
        if x.is_floating_point():
            same = torch.equal(torch.isnan(x), torch.isnan(y)) and torch.equal(x.nan_to_num(0.0), y.nan_to_num(0.0))
            if not same:
                return False, f"{key}: max diff {(x.nan_to_num(0.0) - y.nan_to_num(0.0)).abs().max().item():.3g}"
        elif not torch.equal(x, y):
            return False, f"{key} differs"
    return True, "identical"


def check_graph_equals_eager(plan: Plan, budget: Budget) -> tuple[bool, str]:
    import gpu_envs
    from gpu_envs.rollout import RolloutBuffer, collect
    from gpu_envs.rollout.cudagraph import GraphCollector
    from tests.fakes import CountingTorchVectorEnv

    api = None
    if plan.smoke:
        from tests.graph_emulation import EmulatedGraphs

        api = EmulatedGraphs()
    device = plan.device

    def count_policy(td):
        obs = td["observation"]
        td["action"] = ((obs[:, 0] + obs[:, 2]) % 2).long()
        return td

    def runs(make, policy, graph):
        env = make()
        buf = RolloutBuffer(env, 20)
        if not graph:
            return torch.cat([collect(env, policy, buffer=buf).clone() for _ in range(4)], dim=1)
        if api is None:
            return torch.cat([collect(env, policy, buffer=buf, cudagraph=True).clone() for _ in range(4)], dim=1)
        collector = GraphCollector(env, policy, buf, api=api)
        return torch.cat([collector.collect().clone() for _ in range(4)], dim=1)

    def counting():
        env = gpu_envs.wrap(CountingTorchVectorEnv(64, device, final_obs="masked"))
        env.reset(seed=0)
        return env

    def cartpole():
        return gpu_envs.make("CartPole-v1", num_envs=plan.graph_envs, device=device, seed=0)

    def sim_to_real():  # the per-row queues and streams of the sim-to-real transforms, replayed
        from gpu_envs.transforms import Delay, History, InitTracker, Randomize, TransformedEnv

        delay = Delay(action_steps=(0, 3), observation_steps=(0, 2), hold_probability=0.2)
        randomize = Randomize({"masspole": (0.05, 0.5), "length": (0.3, 1.0)})
        return TransformedEnv(cartpole(), InitTracker(), randomize, delay, History(length=4))

    ok_count, msg_count = _equal(runs(counting, count_policy, False), runs(counting, count_policy, True))
    ok_cart, msg_cart = _equal(runs(cartpole, None, False), runs(cartpole, None, True))
    ok_s2r, msg_s2r = _equal(runs(sim_to_real, None, False), runs(sim_to_real, None, True))
    what = "emulated graphs (CPU)" if plan.smoke else "CUDA graphs"
    detail = f"{what}: counting env {msg_count}; CartPole {msg_cart}; CartPole + InitTracker, Randomize, Delay, History {msg_s2r}"
    return ok_count and ok_cart and ok_s2r, detail


def check_default_step(plan: Plan, budget: Budget) -> tuple[bool, str]:
    """The default ``step_and_maybe_reset`` loop (no flag, random actions) of CartPole-v1 and Pendulum-v1, us/step.

    Issue 25 item 2's loop on the plan's device (wall time around a sync on CUDA): on a
    GPU every small op of the step is a kernel launch. Passes when every size stepped.
    """
    from benchmarks.step_peers import gpu_envs_loop
    from benchmarks.timing import interleave

    sizes = (8, 64) if plan.smoke else (8, 1024, 65536, 1048576)
    parts = []
    for env_id in ("CartPole-v1", "Pendulum-v1"):
        for n in sizes:
            loop = gpu_envs_loop(env_id, n, device=plan.device)
            seconds = interleave({"step": loop}, steps=20 if plan.smoke else 100, rounds=3, device=plan.device)["step"]
            parts.append(f"{env_id} N={n}: {seconds * 1e6:.0f} us")
    return True, "default step loop: " + "; ".join(parts)


def check_collect_grid(plan: Plan, budget: Budget) -> tuple[bool, str]:
    """``collect(env, steps=T)`` against a plain step loop over the same steps (issue 25 items 1, 6), on the device.

    ``benchmarks/bench_collect_grid.py``'s two contenders at a few N x T (wall time around
    a sync on CUDA): the buffer's writes are coalesced time-major rows. Passes when every
    cell ran; the detail gives collect's speed over the loop's and ns per env-step.
    """
    from benchmarks.bench_collect_grid import collect_contender, loop_contender
    from benchmarks.timing import interleave

    cells = ((8, 16), (64, 64)) if plan.smoke else ((1024, 16), (1024, 256), (65536, 16), (65536, 256), (1048576, 64))
    parts = []
    for n, t in cells:
        contenders = {"loop": loop_contender(n, t, plan.device), "collect": collect_contender(n, t, plan.device)}
        times = interleave(contenders, steps=1 if plan.smoke else 3, rounds=3, device=plan.device)
        ratio, ns = times["loop"] / times["collect"], times["collect"] / (n * t) * 1e9
        parts.append(f"N={n} T={t}: collect {ratio:.2f}x the loop, {ns:.2f} ns/env-step")
    return True, "collect vs loop: " + "; ".join(parts)


def check_transforms(plan: Plan, budget: Budget) -> tuple[bool, str]:
    """History and Delay over the bare built-in step (issue 28 item 6), on the device.

    ``benchmarks/bench_transforms.py``'s contenders (wall time around a sync on CUDA, where
    the transforms run their torch ops): the issue's target is each within +15% of the
    bare step at N = 4096. Passes when every contender stepped.
    """
    from benchmarks.bench_transforms import contenders
    from benchmarks.timing import interleave

    parts = []
    for n in (8,) if plan.smoke else (64, 4096):
        every = contenders("CartPole-v1", n, plan.device)
        picked = {name: every[name] for name in ("raw", "empty", "history", "delay")}
        times = interleave(picked, steps=10 if plan.smoke else 100, rounds=3, device=plan.device)
        over = ", ".join(f"{name} {times[name] / times['raw'] - 1:+.0%}" for name in ("empty", "history", "delay"))
        parts.append(f"N={n}: bare {times['raw'] * 1e6:.0f} us, {over}")
    return True, "CartPole transforms over the bare step: " + "; ".join(parts)


def check_multiagent(plan: Plan, budget: Budget) -> tuple[bool, str]:
    """VMAS navigation as agent groups through gpu_envs against VMAS stepped by hand (issue 27 item 6), on the device.

    ``benchmarks/bench_multiagent.py``'s two contenders (wall time around a sync on CUDA),
    one episode end per row in each round. Passes when every size stepped; where VMAS is
    not installed there is nothing to measure (say so, pass).
    """
    import importlib.util

    if importlib.util.find_spec("vmas") is None:
        return True, "vmas not installed (pip install '.[vmas]'): not measured"
    from benchmarks.bench_multiagent import AGENTS, gpu_envs_contender, raw_contender
    from benchmarks.timing import interleave

    horizon = 5 if plan.smoke else 50
    parts = []
    for n in (8,) if plan.smoke else (1024, 16384):
        actions = torch.rand(n, AGENTS, 2, device=plan.device) * 2 - 1
        contenders = {
            "raw": raw_contender(n, horizon, actions, str(plan.device)),
            "gpu_envs": gpu_envs_contender(n, horizon, actions, str(plan.device)),
        }
        times = interleave(contenders, steps=horizon, rounds=1 if plan.smoke else 3, warmup=1, device=plan.device)
        parts.append(
            f"N={n}: by hand {times['raw'] * 1e3:.2f} ms, gpu_envs {times['gpu_envs'] / times['raw'] - 1:+.1%}"
        )
    return True, "VMAS navigation: " + "; ".join(parts)


def check_memory(plan: Plan, budget: Budget) -> tuple[bool, str]:
    import gpu_envs
    from gpu_envs.rollout import RolloutBuffer, collect

    device, n = plan.device, plan.memory_envs
    env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    notes, ok = [], True
    modes = (("eager", {}),) if plan.smoke else (("eager", {}), ("cudagraph", {"cudagraph": True}))
    # one leaked [N] tensor per collection would be GiBs on a GPU; the CPU RSS is noisier
    limit = 4 * 2**20 if not plan.smoke else 8 * 2**20
    for mode, kw in modes:
        buf = RolloutBuffer(env, 8)
        for _ in range(5):
            collect(env, buffer=buf, **kw)
        before = memory_bytes(device)
        for _ in range(plan.collections):
            collect(env, buffer=buf, **kw)
        after = memory_bytes(device)
        ok &= after - before <= limit
        notes.append(f"{mode} {before / 2**20:.1f} -> {after / 2**20:.1f} MiB")
    what = "CUDA allocated" if device.type == "cuda" else "RSS"
    return ok, f"{plan.collections} collections, N={n} T=8, {what}: " + "; ".join(notes)


# --------------------------------------------------------------------------- throughput
# a first guess of what a (mode, N) cell costs before any was measured, seconds
_FIRST_GUESS = {"eager": 10.0, "compile": 90.0, "cudagraph": 20.0, "compile+cudagraph": 60.0}


def throughput(plan: Plan, budget: Budget) -> tuple[list[dict], list[str]]:
    """Rows ``{N, <mode>: rate text, <mode>_rate}``, smallest N first, and the failures."""
    import gpu_envs
    from gpu_envs.rollout import RolloutBuffer, collect

    device, steps, rows, failures = plan.device, plan.steps, [], []
    took: dict[str, float] = {}
    for n in plan.sizes:
        row: dict = {"N": n}
        try:
            env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
        except Exception as err:
            failures.append(f"N={n}: {type(err).__name__}: {err}")
            rows.append({**row, **dict.fromkeys(plan.modes, f"FAILED: {type(err).__name__}")})
            continue
        for mode in plan.modes:
            estimate = 1.5 * took.get(mode, _FIRST_GUESS[mode])
            if not budget.fits(estimate):
                row[mode] = "skipped (budget)"
                log(f"N={n:>8} {mode:<18} skipped: ~{estimate:.0f}s would not fit in the {budget.left():.0f}s left")
                continue
            kw = {"compile": "compile" in mode, "cudagraph": "cudagraph" in mode}
            t_cell = time.perf_counter()
            try:
                buf = RolloutBuffer(env, steps)
                t0 = time.perf_counter()
                for _ in range(3):  # warm-up: first chunk, compile, capture, then a steady call
                    collect(env, buffer=buf, **kw)
                sync(device)
                warm = time.perf_counter() - t0
                t0 = time.perf_counter()
                for _ in range(plan.repeats):
                    collect(env, buffer=buf, **kw)
                sync(device)
                rate = n * steps * plan.repeats / (time.perf_counter() - t0)
                row[mode] = f"{rate:.3g}"
                row[f"{mode}_rate"] = rate
                log(f"N={n:>8} {mode:<18} {rate:12.4g} env-steps/s (warm-up {warm:.1f}s)")
            except Exception as err:
                row[mode] = f"FAILED: {type(err).__name__}"
                failures.append(f"N={n} {mode}: {type(err).__name__}: {err}")
                log(f"N={n} {mode} failed:\n{traceback.format_exc()}")
            took[mode] = max(time.perf_counter() - t_cell, 1.0)
        eager = row.get("eager_rate")
        best = max((row.get(f"{m}_rate", 0.0) for m in plan.modes), default=0.0)
        if eager:
            row["speedup"] = f"{best / eager:.1f}x"
        rows.append(row)
        del env
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows, failures


# --------------------------------------------------------------------------- main
CHECKS: list[tuple[str, float, float, Callable]] = [
    # name, estimated seconds on a GPU, on the CPU smoke run, function
    ("pytest " + " ".join(PYTEST_FILES), 100.0, 65.0, check_pytest),
    ("no-sync training loop", 150.0, 120.0, check_no_sync_loop),
    ("cudagraph == eager transitions", 40.0, 20.0, check_graph_equals_eager),
    ("memory stable", 40.0, 20.0, check_memory),
    ("default step loop", 40.0, 10.0, check_default_step),
    ("collect vs step loop grid", 40.0, 10.0, check_collect_grid),
    ("VMAS agent groups vs by hand", 60.0, 15.0, check_multiagent),
    ("History and Delay over the bare step", 40.0, 10.0, check_transforms),
]


def run_checks(plan: Plan, budget: Budget) -> list[dict]:
    results = []
    for name, gpu_estimate, cpu_estimate, fn in CHECKS:
        estimate = cpu_estimate if plan.smoke else gpu_estimate
        if not budget.fits(estimate):
            detail = f"~{estimate:.0f}s would not fit in the {budget.left():.0f}s left of --budget-s"
            results.append({"check": name, "ok": SKIP, "detail": detail})
            log(f"check: {name} -> {SKIP}: {detail}")
            continue
        log(f"check: {name}")
        t0 = time.perf_counter()
        try:
            ok, detail = fn(plan, budget)
        except Exception as err:
            ok, detail = False, f"{type(err).__name__}: {err}"
            traceback.print_exc()
        detail = f"{detail} ({time.perf_counter() - t0:.0f}s)"
        results.append({"check": name, "ok": PASS if ok else FAIL, "detail": detail})
        log(f"  -> {PASS if ok else FAIL}: {detail}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="every step that can run on the CPU, tiny sizes (no GPU needed)"
    )
    parser.add_argument(
        "--budget-s", type=float, default=420.0, help="time for the whole run; steps that would not fit are skipped"
    )
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="throughput batch sizes (measured smallest first)"
    )
    parser.add_argument("--steps", type=int, default=None, help="steps per collection T")
    parser.add_argument("--repeats", type=int, default=None, help="timed collections per mode")
    parser.add_argument("--collections", type=int, default=None, help="collections in the memory check")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device is visible (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}, built with CUDA {torch.version.cuda}). Run this script on a machine with an "
            "NVIDIA GPU and a CUDA build of torch, or run `python benchmarks/gpu_check.py --smoke` on the CPU.",
            file=sys.stderr,
        )
        return 2
    budget = Budget(args.budget_s)
    plan = Plan.from_args(args)
    if plan.smoke:
        torch.set_num_threads(1)
        where = "CPU smoke run (tiny sizes)"
    else:
        where = torch.cuda.get_device_name(plan.device)
    log(f"{where}, torch {torch.__version__}, budget {args.budget_s:.0f}s")
    checks = run_checks(plan, budget)
    rows, failures = throughput(plan, budget)

    from benchmarks.timing import format_table, save_json

    print()
    print(format_table("gpu_check: checks", checks, [("check", "check"), ("ok", "result"), ("detail", "detail")]))
    print()
    cols = [("N", "N")] + [(m, f"{m} env-steps/s") for m in plan.modes] + [("speedup", "best / eager")]
    print(format_table(f"gpu_check: built-in CartPole-v1 collect, T={plan.steps}, random actions, {where}", rows, cols))
    big = [r for r in rows if r["N"] == 1048576]
    if big and not plan.smoke:
        rate = max(big[0].get("cudagraph_rate", 0.0), big[0].get("compile+cudagraph_rate", 0.0))
        print(
            f"\ntarget: >= 1e9 env-steps/s with CUDA graphs at N = 2^20: {rate:.3g} -> {'met' if rate >= 1e9 else 'NOT met'}"
        )
    failed = [c["check"] for c in checks if c["ok"] == FAIL] + failures
    skipped = [c["check"] for c in checks if c["ok"] == SKIP] + [
        f"N={r['N']} {m}" for r in rows for m in plan.modes if str(r.get(m, "")).startswith("skipped")
    ]
    print(f"\ngpu_check: {len(checks) - len([c for c in checks if c['ok'] != PASS])} checks passed, {len(failed)} failed, "
          f"{len(skipped)} skipped; total {budget.seconds - budget.left():.0f}s")  # fmt: skip
    for line in failed:
        print(f"  FAILED: {line}")
    for line in skipped:
        print(f"  skipped (budget): {line}")
    save_json(
        args.json, {"benchmark": "gpu_check", "smoke": plan.smoke, "checks": checks, "rows": rows, "failures": failures}
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
