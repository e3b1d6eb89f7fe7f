"""Peak memory of a summary run: ``advance`` (what ``gpu-envs rollout`` runs) vs ``collect`` in chunks (issue 25 item 4).

Each row is a fresh ``python -c`` that builds the built-in CartPole-v1 with ``EpisodeStats``
at ``N`` envs, steps it ``T`` times with random actions, prints the summary and its own peak
resident set size (``ru_maxrss``):

* ``floor``: make + reset only (the env's own state, torch and the imports);
* ``advance``: :func:`gpu_envs.rollout.advance` in chunks of 32 steps, no transition kept;
* ``collect``: ``collect(env, None, 32)`` per chunk (the ``[N, 32]`` buffer cached on the env),
  what ``gpu-envs rollout`` ran before.

    python benchmarks/bench_summary_memory.py --json benchmarks/results/summary_memory.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import format_table, save_json

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, resource, sys, torch, gpu_envs
from gpu_envs.rollout import advance, collect
from gpu_envs.transforms import EpisodeStats, TransformedEnv
mode, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stats = EpisodeStats()
env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=0), stats)
env.reset()
done = 0
while mode != "floor" and done < steps:
    size = min(32, steps - done)
    advance(env, size) if mode == "advance" else collect(env, None, size)
    done += size
episodes = stats.summary().episodes if mode != "floor" else 0
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "episodes": episodes}))
"""
MODES = ("floor", "advance", "collect")


def measure(mode: str, n: int, steps: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(n), str(steps)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(cases: list[tuple[int, int]]) -> dict:
    rows = []
    for n, steps in cases:
        peaks = {mode: measure(mode, n, steps) for mode in MODES}
        rows.append(
            {
                "N": n,
                "T": steps,
                **{f"{mode}_mb": round(peaks[mode]["peak_mb"]) for mode in MODES},
                "advance_over_floor": f"{peaks['advance']['peak_mb'] / peaks['floor']['peak_mb']:.2f}x",
                "collect_over_advance": f"{peaks['collect']['peak_mb'] / peaks['advance']['peak_mb']:.2f}x",
                "same_episodes": peaks["advance"]["episodes"] == peaks["collect"]["episodes"],
            }
        )
    columns = [
        ("N", "N"),
        ("T", "T"),
        ("floor_mb", "floor MB"),
        ("advance_mb", "advance MB"),
        ("collect_mb", "collect MB"),
        ("advance_over_floor", "advance / floor"),
        ("collect_over_advance", "collect / advance"),
        ("same_episodes", "same episodes"),
    ]
    return {
        "title": "bench_summary_memory: peak RSS of a CartPole summary run, fresh processes",
        "rows": rows,
        "columns": columns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N only")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cases = [(4096, 50), (4096, 500)] if args.quick else [(65536, 50), (65536, 2000), (1 << 20, 50), (1 << 20, 200)]
    result = run(cases)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "summary_memory", "rows": result["rows"]})


if __name__ == "__main__":
    main()
