"""``gpu-envs bench``: run the benchmark suite and print ONE table of speed ratios.

The benchmarks live in the source checkout (``benchmarks/bench_<name>.py`` next to the
``gpu_envs`` package), not in the installed package. Each module exposes
``run(quick: bool = False) -> {"title", "rows", "columns"}``; missing modules are
skipped with a note.

How rows become ratios. A numeric row entry named ``<contender>_us`` / ``_ms`` / ``_s``
is a time per step (lower is better); ``<contender>_sps`` / ``_steps_per_s`` /
``_per_s`` is a throughput (higher is better); when a row has times, its rates are
ignored (derived). Contenders whose name starts with ``gpu_envs`` are ours,
``torchrl*`` is torchrl, and the baseline is ``raw*`` when present, else the first
other contender (e.g. gymnasium's ``SyncVectorEnv``). Each of our contenders becomes one
line: its own number and its speed relative to the baseline and to torchrl (``2.00x`` =
twice as fast, ``0.90x`` = 10% slower).

* Wide rows hold several contenders (``raw_us``, ``gpu_envs_us``, ``torchrl_us``); the
  columns before the first measurement name the case (``N=64``, an env name).
* Long rows name one contender each in a ``"contender"`` text entry (``"gpu_envs
  collect N=4096"``: the trailing ``N=...`` is the case) with one measurement; a long row
  with a ``"note"`` and no measurement (a memory check) is shown as it is.
* A benchmark may instead give the lines itself as ``result["ratios"]``: dicts with
  ``case``, ``contender``, ``value``, ``vs_raw`` and ``vs_torchrl`` (text).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from gpu_envs.cli.common import EXIT_INTERRUPTED, Subcommands, check_output_path

NAMES = ("overhead", "gymnasium", "device", "rollout", "inbound", "interop")
TIME_SUFFIXES = (("_us", 1e-6), ("_ms", 1e-3), ("_s", 1.0))
RATE_SUFFIXES = ("_steps_per_s", "_per_s", "_sps")
_CASE = re.compile(r"\s+(N=\d+)$")
COLUMNS = [
    ("benchmark", "benchmark"),
    ("case", "case"),
    ("contender", "contender"),
    ("value", "value"),
    ("vs_raw", "speed vs raw env"),
    ("vs_torchrl", "speed vs torchrl"),
]


def add_parser(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "bench",
        help="run the benchmark suite and print one table of speed ratios",
        description=(
            "Run the benchmarks of the source checkout (benchmarks/bench_*.py: overhead, gymnasium, "
            "device, rollout, inbound, interop) and print ONE table: for each case, gpu_envs' number and its speed "
            "relative to the raw env and to torchrl (when installed). Needs a source checkout."
        ),
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer sizes, steps and rounds (a smoke run, noisy numbers)"
    )
    parser.add_argument(
        "--json", default=None, metavar="PATH", help="also save every benchmark's rows and the table as JSON"
    )
    parser.add_argument(
        "--plot",
        default=None,
        metavar="PATH.png",
        help="also draw the overhead and collection results as a picture (png, svg or pdf; needs matplotlib)",
    )
    parser.add_argument(
        "--only",
        default=",".join(NAMES),
        metavar="NAMES",
        help=f"comma-separated subset of: {', '.join(NAMES)} (default: all)",
    )
    parser.set_defaults(func=run)


def benchmarks_dir() -> Path:
    """``benchmarks/`` of the source checkout this ``gpu_envs`` was imported from."""
    import gpu_envs
    from gpu_envs.contract.errors import MissingComponentError

    root = Path(gpu_envs.__file__).resolve().parents[1]
    directory = root / "benchmarks"
    if not (directory / "timing.py").is_file():
        raise MissingComponentError(
            f"no benchmarks found at {directory}: `gpu-envs bench` runs the benchmarks of a source checkout, "
            "and this gpu_envs was installed without them. Clone the repository and install it with "
            "`pip install -e .`, then run `gpu-envs bench` again."
        )
    return directory


PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def check_plotting() -> None:
    """Refuse ``--plot`` without matplotlib, before any benchmark runs."""
    import importlib.util

    from gpu_envs.contract.errors import MissingComponentError

    if importlib.util.find_spec("matplotlib") is None:
        raise MissingComponentError(
            "--plot needs matplotlib: pip install '.[plot]' in the gpu_envs clone (or matplotlib), then run again."
        )


def machine_label() -> str:
    """What the numbers were measured on, for the picture's title (``CPU, 2-core machine``)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"CPU, {os.cpu_count()}-core machine"


def parse_only(text: str) -> list[str]:
    """``"overhead,rollout"`` -> ``["overhead", "rollout"]``, refusing unknown names."""
    from gpu_envs.contract.errors import InvalidArgumentError

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMES]
    if unknown or not names:
        raise InvalidArgumentError(
            f"--only got {unknown or text!r}; choose among {', '.join(NAMES)} (comma-separated)."
        )
    return names


def _load(name: str, directory: Path) -> Any | None:
    if not (directory / f"bench_{name}.py").is_file():
        print(f"note: skipping {name}: {directory / f'bench_{name}.py'} does not exist yet.", file=sys.stderr)
        return None
    root = str(directory.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    module = importlib.import_module(f"benchmarks.bench_{name}")
    if not callable(getattr(module, "run", None)):
        print(f"note: skipping {name}: benchmarks/bench_{name}.py has no run(quick) function.", file=sys.stderr)
        return None
    return module


# ----------------------------------------------------------------------- ratios


def _unit(key: Any) -> tuple[str, float] | None:
    """``("rate", 1)`` or ``("time", seconds per unit)`` for a measurement key, else None."""
    if not isinstance(key, str):
        return None
    if any(key.endswith(s) for s in RATE_SUFFIXES):
        return "rate", 1.0
    for suffix, factor in TIME_SUFFIXES:
        if key.endswith(suffix):
            return "time", factor
    return None


def _measurements(row: dict) -> dict[str, tuple[str, float]]:
    """``{contender: ("time" | "rate", value)}`` from a row's numeric entries (seconds, steps/s).

    Times win: when a row has any, its rates (usually derived from them) are ignored.
    """
    found: dict[str, dict[str, float]] = {"time": {}, "rate": {}}
    for key, value in row.items():
        unit = _unit(key)
        if unit is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        kind, factor = unit
        suffix = next(s for s in (*RATE_SUFFIXES, *(t for t, _ in TIME_SUFFIXES)) if key.endswith(s))
        found[kind][key[: -len(suffix)]] = float(value) * factor
    kind = "time" if found["time"] else "rate"
    return {name: (kind, value) for name, value in found[kind].items()}


def _case(row: dict, columns: list) -> str:
    """The leading columns (before the first measurement) of a row: ``N=64``, an env name..."""
    parts = []
    for key, header in columns:
        if _unit(key) is not None:
            break
        if key in row:
            value = row[key]
            parts.append(str(value) if isinstance(value, str) else f"{header}={value}")
    return " ".join(parts)


def _speed(kind: str, value: float) -> float:
    if kind == "rate":
        return value
    return 1.0 / value if value > 0 else float("inf")


def _show(kind: str, value: float) -> str:
    if kind == "time":
        return f"{value * 1e6:,.1f} us/step"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:,.2f}{suffix} steps/s"
    return f"{value:,.0f} steps/s"


def _groups(result: dict) -> tuple[list[tuple[str, dict]], list[dict]]:
    """``[(case, {contender: measurement})]`` and info lines, from wide or long rows.

    Wide rows hold several contenders (``raw_us``, ``gpu_envs_us``...). Long rows name
    one contender in a ``"contender"`` text entry (a trailing ``N=...`` is the case)
    with one measurement; rows of the same case are grouped. Long rows without a
    measurement but with a ``"note"`` (e.g. a memory check) become info lines.
    """
    columns = result.get("columns") or []
    groups: dict[str, dict] = {}
    info = []
    for row in result.get("rows", []):
        measured = _measurements(row)
        label = row.get("contender")
        if isinstance(label, str):  # long form: one contender per row
            match = _CASE.search(label)
            case = match.group(1) if match else ""
            contender = label[: match.start()].strip() if match else label
            if len(measured) == 1:
                groups.setdefault(case, {})[contender] = next(iter(measured.values()))
            elif "note" in row:
                info.append({"case": case, "contender": contender, "value": str(row["note"])})
            continue
        if measured:
            groups.setdefault(_case(row, columns), {}).update(measured)
    return list(groups.items()), info


def _ratio_lines(case: str, measured: dict) -> list[dict]:
    ours = [c for c in measured if c.startswith("gpu_envs")]
    torchrl = next((c for c in measured if c.startswith("torchrl")), None)
    others = [c for c in measured if c not in ours and c != torchrl]
    if not ours:
        ours, others = others, []
    raw = next((c for c in others if c.startswith("raw")), None)
    baseline = raw or (others[0] if others else None)
    lines = []
    for contender in ours:
        kind, value = measured[contender]
        speed = _speed(kind, value)
        line = {"case": case, "contender": contender, "value": _show(kind, value)}
        for column, ref in (("vs_raw", baseline), ("vs_torchrl", torchrl)):
            if ref is None or ref == contender:
                line[column] = "n/a"
                continue
            ratio = speed / _speed(*measured[ref])
            named = column == "vs_raw" and ref != "raw"  # say which baseline when it is not the raw env
            line[column] = f"{ratio:.2f}x" + (f" ({ref})" if named else "")
        lines.append(line)
    return lines


def ratio_rows(name: str, result: dict) -> list[dict]:
    """The lines of the combined table for one benchmark's result (see the module docstring)."""
    if result.get("ratios"):
        return [{"benchmark": name, **row} for row in result["ratios"]]
    groups, info = _groups(result)
    out = [{"benchmark": name, **line} for case, measured in groups for line in _ratio_lines(case, measured)]
    out += [{"benchmark": name, "vs_raw": "", "vs_torchrl": "", **line} for line in info]
    if not out:
        out.append(
            {"benchmark": name, "case": "", "contender": "(no contender columns)", "value": result.get("title", "")}
        )
    return out


def print_table(title: str, lines: list[dict]) -> None:
    """The combined table, rendered with rich like the rest of the CLI."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for key, header in COLUMNS:
        table.add_column(header, justify="right" if key in ("value", "vs_raw", "vs_torchrl") else "left")
    for line in lines:
        table.add_row(*(str(line.get(key, "")) for key, _ in COLUMNS))
    # a pipe or a file gets the whole table, not one squeezed to 80 columns
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def run(args: argparse.Namespace) -> int:
    names = parse_only(args.only)
    check_output_path(args.json, "--json")
    check_output_path(args.plot, "--plot", PLOT_SUFFIXES)
    if args.plot:
        check_plotting()
    directory = benchmarks_dir()
    # torchrl logs INFO lines to stdout, which would interleave with the table
    os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")
    logging.getLogger("torchrl").setLevel(os.environ["RL_LOGGING_LEVEL"])
    results: dict[str, dict] = {}
    lines: list[dict] = []
    failed = []
    interrupted = None
    for name in names:
        module = _load(name, directory)
        if module is None:
            continue
        print(f"running {name}{' (quick)' if args.quick else ''} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            result = module.run(quick=args.quick)
        except KeyboardInterrupt:  # Ctrl-C: show what was measured so far
            interrupted = name
            break
        except Exception as err:  # one broken benchmark must not hide the others
            print(f"note: {name} failed: {type(err).__name__}: {err}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"  {name} done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        results[name] = result
        lines += ratio_rows(name, result)
        for part, sub in result.items():  # a second table of the same benchmark (bench_overhead's collect rows)
            if isinstance(sub, dict) and "rows" in sub:
                lines += ratio_rows(f"{name} {part}", sub)
    from benchmarks.timing import save_json

    if lines:
        print_table(
            f"gpu-envs bench{' --quick' if args.quick else ''}: speed of gpu_envs vs the raw envs and torchrl", lines
        )
    else:
        print("no benchmark ran." if interrupted is None else "no benchmark finished.")
    if args.json:
        save_json(
            args.json,
            {"benchmark": "suite", "quick": args.quick, "results": results, "table": lines, "interrupted": interrupted},
        )
        print(f"saved {args.json}", file=sys.stderr)
    if args.plot and results:
        from gpu_envs.cli.bench_plot import plot_results

        plot_results(results, args.plot, machine_label())
        print(f"saved {args.plot}", file=sys.stderr)
    if interrupted is not None:
        done = ", ".join(results) or "none"
        print(f"gpu-envs bench: interrupted during {interrupted}; finished: {done}.", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 1 if failed or not lines else 0
