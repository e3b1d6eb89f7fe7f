"""``gpu-envs bench --plot PATH.png``: the benchmark tables drawn as two panels.

* Left, from ``bench_overhead``: time per step relative to the raw env, against N, for
  gpu_envs, the floor (the raw env plus only what the TensorDict contract needs) and
  torchrl (log scale: torchrl sits an order of magnitude above).
* Right, from ``bench_rollout``: collection env-steps/s against N for every contender it
  measured (gpu_envs eager and compiled, gymnasium's SyncVectorEnv, torchrl, EnvPool
  where installed), log-log.

A panel whose benchmark did not run says so. matplotlib is imported only here (the
``plot`` extra); the Agg backend draws without a display.

Example::

    from gpu_envs.cli.bench_plot import plot_results
    plot_results({"overhead": overhead_result, "rollout": rollout_result}, "bench.png", "CPU, 2-core machine")
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["collection_series", "overhead_series", "plot_results"]

OVERHEAD_CONTENDERS = (("gpu_envs", "gpu_envs"), ("floor", "floor (raw env + contract)"), ("torchrl", "torchrl"))
_LABEL = re.compile(r"^(?P<name>.*?)\s+N=(?P<n>\d+)$")


def overhead_series(result: dict | None) -> dict[str, list[tuple[int, float]]]:
    """``{label: [(N, time / raw time), ...]}`` from ``bench_overhead``'s step rows."""
    series: dict[str, list[tuple[int, float]]] = {}
    for row in (result or {}).get("rows", []):
        raw = row.get("raw_us")
        if not isinstance(raw, (int, float)) or raw <= 0:
            continue
        for key, label in OVERHEAD_CONTENDERS:
            value = row.get(f"{key}_us")
            if isinstance(value, (int, float)):
                series.setdefault(label, []).append((int(row["N"]), value / raw))
    return series


def collection_series(result: dict | None) -> dict[str, list[tuple[int, float]]]:
    """``{contender: [(N, env-steps/s), ...]}`` from ``bench_rollout``'s rows (``"name N=..."`` labels)."""
    series: dict[str, list[tuple[int, float]]] = {}
    for row in (result or {}).get("rows", []):
        match = _LABEL.match(str(row.get("contender", "")))
        rate = row.get("env_steps_per_s")
        if match and isinstance(rate, (int, float)) and rate > 0:
            series.setdefault(match["name"], []).append((int(match["n"]), float(rate)))
    return {name: sorted(points) for name, points in series.items()}


def _draw(ax: Any, series: dict, title: str, ylabel: str, empty: str, ylog: bool) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("N (parallel envs)")
    ax.set_ylabel(ylabel)
    if not series:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="gray")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    for label, points in series.items():
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    if ylog:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def plot_results(results: dict[str, dict], path: str | Path, machine: str) -> Path:
    """Draw the overhead and collection panels of ``results`` into ``path`` (png, svg or pdf)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    _draw(
        left,
        overhead_series(results.get("overhead")),
        "step time relative to the raw env (built-in CartPole, no final obs)",
        "time per step / raw env (1 = raw)",
        "bench_overhead did not run (--only overhead)",
        ylog=True,
    )
    left.axhline(1.0, color="black", linewidth=0.8)
    _draw(
        right,
        collection_series(results.get("rollout")),
        "collection throughput (CartPole-v1, random actions)",
        "env-steps/s",
        "bench_rollout did not run (--only rollout)",
        ylog=True,
    )
    fig.suptitle(f"gpu-envs bench on {machine}, 1 torch thread", fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
