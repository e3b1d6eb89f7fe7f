"""Device-resident envs: wrapper overhead over Isaac Lab's contract (issue 4, targets 10% / 5%).

(1) The Isaac-contract fake (``tests/isaac_fakes.py``: a direct env with
    ``compute_final_obs``, buffers rewritten in place, same-step resets) at N in
    {64, 4096}; target: gpu_envs at most 10% over the raw loop.
(2) Real Isaac Lab ``Isaac-Cartpole-Direct`` (CPU, Newton/MJWarp) at N = 256, where its
    venv exists (``scripts/isaaclab_venv.sh``); target: at most 5% over the raw loop.
    Isaac Lab needs Python 3.12, so this part runs in a subprocess with that venv's
    python (or in-process when run by it).

Contenders: ``raw`` = ``env.step(action)`` in a loop; ``floor`` (fake only) = the raw
fake plus only what the TensorDict contract needs for it (:func:`floor_step_fn`: copies
of the in-place reward and flags, one final-observation ``where`` per group, the
``[N, 1]`` views, the two TensorDicts and the caller's ``td.set``), the limit of any
wrapper, so ``gpu_envs - floor`` (points of raw) is what the wrapper itself costs;
``gpu_envs`` = the same env through ``gpu_envs.wrap`` with ``step_and_maybe_reset``
(copies of the in-place buffers, final observations and TensorDicts included);
``torchrl native`` = torchrl's ``IsaacLabWrapper``
with ``native_autoreset=True`` (its default path rejects direct envs) and
``step_and_maybe_reset``, where torchrl is importable by the Isaac Lab venv (real Isaac
Lab only: torchrl batches real isaaclab classes, not the fake). Fixed actions,
interleaved rounds in one process, ``torch.set_num_threads(1)``.

    python -m benchmarks.bench_device --json benchmarks/results/device.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: our benchmarks package, not torchrl's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import gpu_envs
from benchmarks.timing import format_table, interleave, overhead_row, save_json
from gpu_envs.utils.tensordicts import new_td, set_entry

REPO = Path(__file__).resolve().parent.parent
VENV_NAME = "isaaclab-3.0.0-py312"
COLUMNS = [
    ("env", "env"),
    ("N", "N"),
    ("raw_us", "raw us/step"),
    ("floor_us", "floor us/step"),
    ("floor_overhead", "floor overhead"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("gpu_envs_overhead", "gpu_envs overhead"),
    ("gpu_envs_vs_floor", "gpu_envs - floor"),
    ("target", "target"),
    ("torchrl_native_us", "torchrl native us/step"),
    ("torchrl_native_overhead", "torchrl native overhead"),
    ("env_steps_per_s", "env-steps/s (gpu_envs)"),
]


def _looping(env: Any, action: torch.Tensor):
    """``step_and_maybe_reset`` in a loop, for gpu_envs and torchrl alike."""
    state = {"td": env.reset()}

    def step():
        td = state["td"]
        td.set("action", action)
        state["td"] = env.step_and_maybe_reset(td)[1]

    return step


def _torchrl(env: Any, action: torch.Tensor, device: torch.device) -> dict:
    """torchrl's IsaacLabWrapper with ``native_autoreset=True``.

    Its default path does not batch direct envs (torchrl 0.14.1 raises "Partial resets
    are not handled at this level" on the first step where some row ends).
    """
    if importlib.util.find_spec("torchrl") is None:
        return {}
    from torchrl.envs.libs.isaac_lab import IsaacLabWrapper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        native = IsaacLabWrapper(env, device=device, native_autoreset=True)
    return {"torchrl_native": _looping(native, action)}


def floor_step_fn(env: Any, action: torch.Tensor):
    """The raw fake plus ONLY what the TensorDict contract needs for it (the ``floor`` contender).

    Its reward and flags are rewritten in place by the next step, so they are copied
    (the two flags in one ``stack``); its observations are fresh tensors, so they are
    not. Ended rows get the final observation with one ``where`` per group, from
    ``extras["final_obs"]`` (stale between resets: only ended rows read it).
    Then the ``[N, 1]`` flag views, ``done``, the two TensorDicts and the caller's
    ``td.set``. No wrapper can do less and keep transitions intact.
    """
    n = env.num_envs
    device = torch.device(env.device)
    obs, _ = env.reset(seed=0)
    batch = torch.Size([n])
    false = torch.zeros(n, 1, dtype=torch.bool, device=device)
    state = {"td": new_td({**obs, "done": false, "terminated": false, "truncated": false}, batch, device)}

    def step() -> None:
        td = state["td"]
        td.set("action", action)
        obs, reward, terminated, truncated, extras = env.step(action)
        flags = torch.stack((terminated, truncated)).view(2, n, 1)
        terminated, truncated = flags[0], flags[1]
        done = terminated | truncated
        final = extras.get("final_obs", obs)  # absent only before any row ended: nothing to swap
        nxt = {key: torch.where(done, final[key], value) for key, value in obs.items()}
        nxt["reward"] = reward.clone().view(n, 1)
        nxt["done"] = done
        nxt["terminated"] = terminated
        nxt["truncated"] = truncated
        nxt["final_obs_missing"] = false
        set_entry(td, "next", new_td(nxt, batch, device))
        state["td"] = new_td({**obs, "done": false, "terminated": false, "truncated": false}, batch, device)

    return step


def fake_contenders(n: int, device: torch.device) -> dict:
    sys.path.insert(0, str(REPO))  # tests/ holds the fake
    from tests.isaac_fakes import FakeIsaacDirectEnv

    def make_env():
        return FakeIsaacDirectEnv(n, str(device), compute_final_obs=True)

    action = (torch.arange(n, device=device) % 2).float().unsqueeze(-1)
    raw = make_env()
    raw.reset(seed=0)
    # No torchrl here: its IsaacLabWrapper only treats real isaaclab classes as batched
    # (on the fake its default path refuses the partial reset, the native one resets twice).
    return {
        "raw": lambda: raw.step(action),
        "floor": floor_step_fn(make_env(), action),
        "gpu_envs": _looping(gpu_envs.wrap(make_env()), action),
    }


def bench_fake(sizes: list[int], steps: int, rounds: int, device: torch.device) -> list[dict]:
    rows = []
    for n in sizes:
        times = interleave(fake_contenders(n, device), steps=steps, rounds=rounds, device=device)
        rows.append(overhead_row(times, env="Isaac-contract fake", N=n, target="<= +10%"))
    return rows


# ---------------------------------------------------------------- real Isaac Lab
def bench_real(n: int, steps: int, rounds: int) -> list[dict]:
    """In a process that has Isaac Lab: the direct cartpole at ``n`` envs on the CPU."""
    sys.path.insert(0, str(REPO))
    import gymnasium as gym

    from tests.isaaclab.cartpoles import direct_cfg

    cfg = direct_cfg(num_envs=n, compute_final_obs=True)
    cfg.episode_length_s = 5.0  # the task's own episode length
    isaac = gym.make("Isaac-Cartpole-Direct", cfg=cfg)  # one simulation per process: shared by all
    action = (torch.arange(n) % 2).float().unsqueeze(-1) - 0.5
    isaac.reset(seed=0)
    ours = gpu_envs.wrap(isaac)
    contenders = {"raw": lambda: isaac.step(action), "gpu_envs": _looping(ours, action)}
    contenders.update(_torchrl(isaac, action, torch.device(isaac.unwrapped.device)))
    times = interleave(contenders, steps=steps, rounds=rounds, warmup=1)
    ours.close()
    row = overhead_row(times, env="Isaac-Cartpole-Direct (real, cpu)", N=n, target="<= +5%")
    row["env_steps_per_s"] = round(n / times["gpu_envs"])
    if "torchrl_native" not in times:
        row["torchrl_native_us"] = "not installed"
    return [row]


def isaaclab_python() -> Path | None:
    """The Isaac Lab venv's python, if scripts/isaaclab_venv.sh built it."""
    root = os.environ.get("ISAACLAB_VENV") or os.path.join(
        os.environ.get("GPU_ENVS_CACHE", os.path.expanduser("~/.cache/gpu_envs")), VENV_NAME
    )
    python = Path(root) / "bin" / "python"
    return python if (Path(root) / ".complete").exists() and python.exists() else None


def real_rows(n: int, steps: int, rounds: int) -> tuple[list[dict], str | None]:
    """Rows for real Isaac Lab (in-process or via its venv), or ``([], why not)``."""
    if importlib.util.find_spec("isaaclab") is not None:
        return bench_real(n, steps, rounds), None
    python = isaaclab_python()
    if python is None:
        return [], "real Isaac Lab skipped: no venv (build it with scripts/isaaclab_venv.sh)"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "real.json"
        cmd = [str(python), "-m", "benchmarks.bench_device", "--real-only", "--real-n", str(n)]
        cmd += ["--real-steps", str(steps), "--real-rounds", str(rounds), "--json", str(out)]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0 or not out.exists():
            return [], f"real Isaac Lab failed (exit {done.returncode}): {done.stderr.strip()[-800:]}"
        return json.loads(out.read_text())["rows"], None


# ------------------------------------------------------------------- entry points
def run(quick: bool = False) -> dict:
    """All rows (fake, then real Isaac Lab where available) for ``gpu-envs bench``."""
    torch.set_num_threads(1)
    device = torch.device("cpu")
    steps, rounds = (50, 5) if quick else (200, 15)
    rows = bench_fake([64, 4096], steps, rounds, device)
    real, note = real_rows(256, 5 if quick else 10, 5 if quick else 15)
    rows += real
    title = "bench_device: Isaac Lab contract, step_and_maybe_reset vs raw env.step (cpu, 1 thread)"
    if note:
        title += f" -- {note}"
    return {"title": title, "rows": rows, "columns": [c for c in COLUMNS if any(c[0] in r for r in rows)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 4096], help="fake env sizes")
    parser.add_argument("--steps", type=int, default=200, help="steps per round (fake)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--real-n", type=int, default=256)
    parser.add_argument("--real-steps", type=int, default=10, help="steps per round (real Isaac Lab)")
    parser.add_argument("--real-rounds", type=int, default=15)
    parser.add_argument("--real-only", action="store_true", help="only real Isaac Lab, in this process")
    parser.add_argument("--no-real", action="store_true", help="skip real Isaac Lab")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.real_only:
        rows, note = bench_real(args.real_n, args.real_steps, args.real_rounds), None
    else:
        rows = bench_fake(args.sizes, args.steps, args.rounds, torch.device("cpu"))
        note = "real Isaac Lab skipped (--no-real)"
        if not args.no_real:
            real, note = real_rows(args.real_n, args.real_steps, args.real_rounds)
            rows += real
    columns = [c for c in COLUMNS if any(c[0] in r for r in rows)]
    title = "bench_device: Isaac Lab contract, step_and_maybe_reset vs raw env.step (cpu, 1 thread)"
    print(format_table(title + (f" -- {note}" if note else ""), rows, columns))
    save_json(args.json, {"benchmark": "device", "rows": rows, "note": note})


if __name__ == "__main__":
    main()
