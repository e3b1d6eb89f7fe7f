"""The one prepared check for a machine with an NVIDIA GPU (about 5-8 minutes on an H200).

Run from the repository root::

    python benchmarks/gpu_check.py [--json benchmarks/results/gpu_check.json]

It does, in order, and prints ONE table at the end:

1. ``pytest tests/test_sync_guard.py`` (the sync guard, on CUDA as well as the CPU);
2. a training-like loop under ``torch.cuda.set_sync_debug_mode("error")``: eager,
   compiled and CUDA-graph collections of CartPole with an MLP policy, plus the
   critic and ``gae`` on each batch -- any host sync raises;
3. correctness on the GPU: CUDA-graph collections equal eager ones (the counting env
   with masked final observations, exactly; built-in CartPole, exactly expected);
4. memory: 1,000 collections with no growth of ``torch.cuda.memory_stats``;
5. throughput of built-in CartPole-v1 (random actions) at N in {4096, 65536, 1048576}:
   eager vs ``compile=True`` vs ``cudagraph=True`` vs both, in env-steps/s.

Exit status 0 when every check passed, 1 when one failed, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make gpu_envs, benchmarks and tests importable
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SIZES = (4096, 65536, 1048576)
MODES = ("eager", "compile", "cudagraph", "compile+cudagraph")


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


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


def check_pytest(timeout: int) -> tuple[bool, str]:
    cmd = [sys.executable, "-m", "pytest", "tests/test_sync_guard.py", "-q", "-p", "no:cacheprovider"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout}s"
    last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-2000:], sep="\n")
    return proc.returncode == 0, last


def check_sync_debug_loop(device: torch.device, iterations: int = 10) -> tuple[bool, str]:
    """Eager, compiled and graphed collections + critic + gae under sync debug mode "error"."""
    import gpu_envs
    from gpu_envs.rollout import RolloutBuffer, collect, gae

    env = gpu_envs.make("CartPole-v1", num_envs=4096, device=device, seed=0)
    policy = Policy().to(device)
    critic = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
    bufs = {mode: RolloutBuffer(env, 32) for mode in ("eager", "compile", "cudagraph")}
    kwargs = {"eager": {}, "compile": {"compile": True}, "cudagraph": {"cudagraph": True}}
    for mode, buf in bufs.items():  # warm-up outside the check: first-step validation, compile, capture
        for _ in range(2):
            collect(env, policy, buffer=buf, **kwargs[mode])
    torch.cuda.synchronize(device)
    ended = torch.zeros((), device=device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(iterations):
            for mode, buf in bufs.items():
                traj = collect(env, policy, buffer=buf, **kwargs[mode])
                with torch.no_grad():
                    value = critic(traj["observation"])
                    next_value = critic(traj["next", "observation"])
                    adv, _ = gae(
                        traj["next", "reward"], value, next_value, traj["next", "terminated"],
                        traj["next", "truncated"], traj["next", "final_obs_missing"], gamma=0.99, lam=0.95,
                    )  # fmt: skip
                ended += traj["next", "done"].sum()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    n = int(ended.item())
    ok = n > 0 and bool(torch.isfinite(adv).all())
    return ok, f"{iterations} x 3 modes x 32 steps, N=4096, no sync; {n} episodes ended"


def _equal(a, b) -> tuple[bool, str]:
    worst = ""
    for key in a.keys(True, True):
        x, y = a[key], b[key]
        if x.is_floating_point():
            same = torch.equal(torch.isnan(x), torch.isnan(y)) and torch.equal(x.nan_to_num(0.0), y.nan_to_num(0.0))
            if not same:
                worst = f"{key}: max diff {(x.nan_to_num(0.0) - y.nan_to_num(0.0)).abs().max().item():.3g}"
                return False, worst
        elif not torch.equal(x, y):
            return False, f"{key} differs"
    return True, "identical"


def check_graph_equals_eager(device: torch.device) -> tuple[bool, str]:
    import gpu_envs
    from gpu_envs.rollout import RolloutBuffer, collect
    from tests.fakes import CountingTorchVectorEnv

    def count_policy(td):
        obs = td["observation"]
        td["action"] = ((obs[:, 0] + obs[:, 2]) % 2).long()
        return td

    def runs(make, policy, graph):
        env = make()
        buf = RolloutBuffer(env, 20)
        return torch.cat([collect(env, policy, buffer=buf, cudagraph=graph).clone() for _ in range(4)], dim=1)

    def counting():
        env = gpu_envs.wrap(CountingTorchVectorEnv(64, device, final_obs="masked"))
        env.reset(seed=0)
        return env

    def cartpole():
        return gpu_envs.make("CartPole-v1", num_envs=1024, device=device, seed=0)

    ok_count, msg_count = _equal(runs(counting, count_policy, False), runs(counting, count_policy, True))
    ok_cart, msg_cart = _equal(runs(cartpole, None, False), runs(cartpole, None, True))
    # the counting env must match exactly; CartPole should too (same kernels, same RNG stream)
    return ok_count and ok_cart, f"counting env: {msg_count}; CartPole: {msg_cart}"


def check_memory(device: torch.device, collections: int) -> tuple[bool, str]:
    import gpu_envs
    from gpu_envs.rollout import RolloutBuffer, collect

    env = gpu_envs.make("CartPole-v1", num_envs=65536, device=device, seed=0)
    notes, ok = [], True
    for mode, kw in (("eager", {}), ("cudagraph", {"cudagraph": True})):
        buf = RolloutBuffer(env, 8)
        for _ in range(5):
            collect(env, buffer=buf, **kw)
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_stats(device)["allocated_bytes.all.current"]
        for _ in range(collections):
            collect(env, buffer=buf, **kw)
        torch.cuda.synchronize(device)
        after = torch.cuda.memory_stats(device)["allocated_bytes.all.current"]
        ok &= after - before <= 4 * 2**20  # a leak of even one [N] tensor per collection would be GiBs
        notes.append(f"{mode} {before / 2**20:.1f} -> {after / 2**20:.1f} MiB")
    return ok, f"{collections} collections, N=65536 T=8: " + "; ".join(notes)


def throughput(device: torch.device, sizes, steps: int, repeats: int, deadline: float) -> list[dict]:
    import gpu_envs
    from gpu_envs.rollout import RolloutBuffer, collect

    rows = []
    for n in sizes:
        env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
        row = {"N": n}
        for mode in MODES:
            if time.perf_counter() > deadline:
                row[mode] = "skipped (time)"
                continue
            kw = {"compile": "compile" in mode, "cudagraph": "cudagraph" in mode}
            buf = RolloutBuffer(env, steps)
            try:
                t0 = time.perf_counter()
                for _ in range(3):  # warm-up: first step, compile, capture, then a steady call
                    collect(env, buffer=buf, **kw)
                torch.cuda.synchronize(device)
                warm = time.perf_counter() - t0
                t0 = time.perf_counter()
                for _ in range(repeats):
                    collect(env, buffer=buf, **kw)
                torch.cuda.synchronize(device)
                rate = n * steps * repeats / (time.perf_counter() - t0)
                row[mode] = f"{rate:.3g}"
                row[f"{mode}_rate"] = rate
                log(f"N={n:>8} {mode:<18} {rate:12.4g} env-steps/s (warm-up {warm:.1f}s)")
            except Exception as err:
                row[mode] = f"FAILED: {type(err).__name__}"
                log(f"N={n} {mode} failed:\n{traceback.format_exc()}")
            del buf
        eager = row.get("eager_rate")
        best = max((row.get(f"{m}_rate", 0.0) for m in MODES), default=0.0)
        if eager:
            row["speedup"] = f"{best / eager:.1f}x"
        rows.append(row)
        del env
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--steps", type=int, default=64, help="steps per collection T")
    parser.add_argument("--repeats", type=int, default=10, help="timed collections per mode")
    parser.add_argument("--collections", type=int, default=1000, help="collections in the memory check")
    parser.add_argument("--budget-s", type=float, default=450.0, help="skip remaining throughput runs after this")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device is visible (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}, built with CUDA {torch.version.cuda}). Run this script on a machine with an "
            "NVIDIA GPU and a CUDA build of torch.",
            file=sys.stderr,
        )
        return 2
    start = time.perf_counter()
    deadline = start + args.budget_s
    device = torch.device("cuda", torch.cuda.current_device())
    log(f"device {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    checks = []
    for name, fn in (
        ("pytest tests/test_sync_guard.py", lambda: check_pytest(timeout=240)),
        ('sync debug mode "error" loop', lambda: check_sync_debug_loop(device)),
        ("cudagraph == eager transitions", lambda: check_graph_equals_eager(device)),
        ("memory stable", lambda: check_memory(device, args.collections)),
    ):
        log(f"check: {name}")
        try:
            ok, detail = fn()
        except Exception as err:
            ok, detail = False, f"{type(err).__name__}: {err}"
            traceback.print_exc()
        checks.append({"check": name, "ok": ok, "detail": detail})
        log(f"  -> {'PASS' if ok else 'FAIL'}: {detail}")
    rows = throughput(device, args.sizes, args.steps, args.repeats, deadline)

    from benchmarks.timing import format_table, save_json

    print()
    print(format_table("gpu_check: checks", [{**c, "ok": "PASS" if c["ok"] else "FAIL"} for c in checks],
                       [("check", "check"), ("ok", "result"), ("detail", "detail")]))  # fmt: skip
    print()
    cols = [("N", "N")] + [(m, f"{m} env-steps/s") for m in MODES] + [("speedup", "best / eager")]
    title = (
        f"gpu_check: built-in CartPole-v1 collect, T={args.steps}, random actions, {torch.cuda.get_device_name(device)}"
    )
    print(format_table(title, rows, cols))
    big = [r for r in rows if r["N"] == 1048576]
    if big:
        rate = max(big[0].get("cudagraph_rate", 0.0), big[0].get("compile+cudagraph_rate", 0.0))
        print(
            f"\ntarget: >= 1e9 env-steps/s with CUDA graphs at N = 2^20: {rate:.3g} -> {'met' if rate >= 1e9 else 'NOT met'}"
        )
    print(f"total {time.perf_counter() - start:.0f}s")
    save_json(args.json, {"benchmark": "gpu_check", "checks": checks, "rows": rows})
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
