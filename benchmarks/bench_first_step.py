"""Time to the first step in a fresh process, next to ``import torch, tensordict`` (issue 25 item 6).

Each row runs a fresh ``python -c`` (``--repeat`` times, medians) and reports its CPU time
(user + system of the process and of everything it waited for, e.g. the C compiler) and
its wall time:

* ``import torch, tensordict``: the floor any torch + TensorDict library pays;
* ``import gpu_envs``: the same imports plus gpu_envs (and gymnasium, which it imports);
* ``first step``: plus ``gpu_envs.make("CartPole-v1", num_envs=8)``, ``reset`` and one
  ``step_and_maybe_reset``, with the native CPU step's library already cached;
* ``first step, cold cache``: the same with an empty native cache (``GPU_ENVS_NATIVE_CACHE``
  pointing at a new directory): the one-time build with the system C compiler;
* ``first step, torch step``: the same with ``GPU_ENVS_NATIVE=0`` (no native kernel).

``gpu_envs share`` is a row's time minus the ``import torch, tensordict`` row's.

    python benchmarks/bench_first_step.py --json benchmarks/results/first_step.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import format_table, save_json

ROOT = Path(__file__).resolve().parents[1]
FIRST_STEP = (
    "import torch, tensordict, gpu_envs\n"
    "env = gpu_envs.make('CartPole-v1', num_envs=8)\n"
    "td = env.reset(seed=0)\n"
    "td.set('action', torch.zeros(8, dtype=torch.int64))\n"
    "env.step_and_maybe_reset(td)\n"
)
ROWS = (
    ("import torch, tensordict", "import torch, tensordict", {}),
    ("import gpu_envs", "import torch, tensordict, gpu_envs", {}),
    ("first step", FIRST_STEP, {}),
    ("first step, cold cache", FIRST_STEP, {"GPU_ENVS_NATIVE_CACHE": None}),
    ("first step, torch step", FIRST_STEP, {"GPU_ENVS_NATIVE": "0"}),
)


def measure(code: str, env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one fresh ``python -c code`` (its waited-for children included)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"the child failed ({proc.returncode}): {code!r}")
    return usage.ru_utime + usage.ru_stime, wall


def run(repeat: int = 5) -> dict:
    base = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    rows = []
    subprocess.run([sys.executable, "-c", FIRST_STEP], cwd=ROOT, env=base, check=True)  # warm the cache and disk
    for name, code, extra in ROWS:
        cpu, wall = [], []
        for _ in range(repeat):
            env = dict(base)
            with tempfile.TemporaryDirectory() as cold:
                for key, value in extra.items():
                    env[key] = cold if value is None else value
                c, w = measure(code, env)
            cpu.append(c)
            wall.append(w)
        rows.append(
            {"what": name, "cpu_s": round(statistics.median(cpu), 3), "wall_s": round(statistics.median(wall), 3)}
        )
    floor = rows[0]
    for row in rows:
        row["share_cpu_s"] = round(row["cpu_s"] - floor["cpu_s"], 3)
        row["share_wall_s"] = round(row["wall_s"] - floor["wall_s"], 3)
    columns = [
        ("what", "fresh process"),
        ("cpu_s", "CPU s"),
        ("share_cpu_s", "gpu_envs share CPU s"),
        ("wall_s", "wall s"),
        ("share_wall_s", "gpu_envs share wall s"),
    ]
    return {"title": f"bench_first_step: fresh python processes, medians of {repeat}", "rows": rows, "columns": columns}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = run(args.repeat)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "first_step", "rows": result["rows"]})


if __name__ == "__main__":
    main()
