"""Real simulators: gpu_envs' step against the simulator's raw step and its own trainer wrapper, at equal N.

One section per simulator (:data:`SIMULATORS`): mjlab and Isaac Lab (here), EnvPool,
Brax, MuJoCo Playground and ManiSkill3 (their rows come from
``benchmarks/simulator_rows.py``, in the same columns). Each is measured in a process
that has the simulator: in this one where it is importable, else in a subprocess with
the python of its cached venv (``scripts/simulator_venv.sh mjlab | brax | maniskill``;
Isaac Lab: ``scripts/isaaclab_venv.sh``; EnvPool lives in the main venv). A simulator
without a venv is listed as skipped, with the command that builds it.

Contenders for mjlab and Isaac Lab (simulator_rows.py's docstring lists the others'),
all stepping the same task with the same fixed actions at the same N:

* ``raw``: the simulator's own ``step`` as it ships (its auto-reset on, final observations lost);
* ``gpu_envs``: ``gpu_envs.wrap(env)`` with ``step_and_maybe_reset``, exact final
  observations (for mjlab: its auto-reset off, ended rows reset by gpu_envs in the same step);
* ``gpu_envs_auto``: mjlab only, ``wrap(env, exact_final_obs=False)``: mjlab's own
  auto-reset, placeholders for final observations (what gpu_envs costs without them);
* ``trainer``: the simulator's own trainer wrapper (mjlab's and Isaac Lab's rsl_rl
  ``RslRlVecEnvWrapper``), ``step``;
* ``gpu_envs_rsl_rl``: ``gpu_envs.interop.to_rsl_rl(gpu_envs.wrap(env))``, ``step``: what
  replaces that trainer wrapper, exact final observations included;
* ``floor``: mjlab only, mjlab's own exact flow with no wrapper -- its auto-reset off, the
  ended rows reset by ``reset(env_ids=...)`` right after ``step`` -- what exact final
  observations cost mjlab itself (a second forward / sense / observation pass on steps
  where rows end). ``gpu_envs - floor`` is what gpu_envs adds above it.

Each contender steps its own instance of the task (gpu_envs changes how mjlab resets).
Two regimes per task: the task's own episode length with standing-still actions (resets
are rare: the cost of the step itself) and 1 s episodes with swinging actions, every row
started at a random point of its episode (rows reset on most steps: what a large batch
sees on every step, and where exact final
observations cost mjlab a second ``forward``/sensor/observation pass). Time is the CPU
time of the process (``time.process_time``: other processes on a shared machine do not
count), interleaved rounds, medians, ``torch.set_num_threads(1)``; target: gpu_envs
within +5% of the raw step.

Whether a difference is resolved: every round's time is kept on three clocks (process
CPU, the calling thread's CPU, wall: ``benchmarks.timing.interleave_clocks``) and each
contender is compared with the raw step OF THE SAME ROUND (seconds apart, under the same
load). The ``... per round`` columns give those paired overheads as ``median [95%
confidence interval of the median] (min..max)`` (the interval is distribution-free:
order statistics, ``benchmarks.timing.median_ci``); ``main-thread extra`` is what a
contender adds on the calling thread in % of the raw step's process CPU time (where a
wrapper's own Python runs; a simulator's worker threads -- EnvPool's -- are not counted);
``verdict`` is ``met`` when the whole interval is within the target, ``not met`` when it
is all above, ``unresolved`` otherwise (run longer: ``--steps``, ``--rounds``). ``own``
is a contender's thread time OUTSIDE the simulator's calls it makes (mjlab's ``step`` /
``reset``, timed by a ``benchmarks.timing.CallClock``): the wrapper's own Python, free of
the simulator's noise, so it decides what gpu_envs adds even where whole steps of the
same work differ by tens of percent between rounds (``verdict (gpu_envs own)``). Each
row says its rounds and the machine's 1-minute load average before..after it; the JSON
keeps every round (``per_round_us``).

    python -m benchmarks.bench_simulators --json benchmarks/results/simulators.json
    python -m benchmarks.bench_simulators --only mjlab --sizes 16 64
    python -m benchmarks.bench_simulators --only envpool brax     # at their default N=8
    python -m benchmarks.bench_simulators --only mjlab --sizes 8 --steps 10 --rounds 25 \
        --mjlab-contenders floor     # long enough to resolve +-5% (see "verdict" above)

Adding a simulator: write ``<name>_rows(sizes, steps, rounds) -> list[dict]`` (run in a
process that has it) and add a :class:`Simulator` entry naming its package, venv and default sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks.timing import (
    CLOCKS,
    CallClock,
    format_table,
    interleave,
    interleave_clocks,
    load_average,
    medians,
    overhead_row,
    own_columns,
    per_round_us,
    save_json,
    spread_columns,
)

REPO = Path(__file__).resolve().parent.parent


def _brief(row: dict) -> dict:
    """A row as printed while the benchmark runs: without its per-round samples (those go to the JSON)."""
    return {k: v for k, v in row.items() if k != "per_round_us"}


COLUMNS = [
    ("simulator", "simulator"),
    ("task", "task"),
    ("regime", "regime"),
    ("N", "N"),
    ("raw_us", "raw us/step"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("gpu_envs_overhead", "gpu_envs vs raw"),
    ("gpu_envs_auto_overhead", "gpu_envs (no final obs) vs raw"),
    ("trainer_us", "trainer wrapper us/step"),
    ("trainer_overhead", "trainer vs raw"),
    ("gpu_envs_rsl_rl_overhead", "to_rsl_rl vs raw"),
    ("floor_us", "floor us/step"),
    ("floor_overhead", "floor vs raw"),
    ("gpu_envs_vs_floor", "gpu_envs - floor"),
    ("collect_us", "collect us/step"),
    ("collect_vs_step", "collect vs gpu_envs step"),
    ("resets_per_step", "resets/step"),
    ("target", "target"),
    # per interleaved round, against the raw step of the same round: median [95% CI of the median] (min..max)
    ("gpu_envs_spread", "gpu_envs vs raw per round"),
    ("gpu_envs_floor_pts", "gpu_envs - floor per round, % of raw"),
    ("gpu_envs_thread_pts", "gpu_envs main-thread extra, % of raw"),
    ("floor_thread_pts", "floor main-thread extra, % of raw"),
    ("gpu_envs_wall", "gpu_envs vs raw, wall"),
    ("floor_spread", "floor vs raw per round"),
    ("trainer_spread", "trainer vs raw per round"),
    ("gpu_envs_vs_trainer", "gpu_envs vs trainer per round"),
    ("gpu_envs_auto_spread", "gpu_envs (no final obs) per round"),
    ("gpu_envs_own_us", "gpu_envs own us/step (outside the simulator's calls)"),
    ("gpu_envs_own_pct", "gpu_envs own, % of raw per round"),
    ("floor_own_us", "floor own us/step"),
    ("trainer_own_us", "trainer own us/step"),
    ("verdict", "verdict (cpu)"),
    ("thread_verdict", "verdict (main thread)"),
    ("own_verdict", "verdict (gpu_envs own)"),
    ("rounds", "rounds"),
    ("load", "load avg"),
]


@dataclass(frozen=True)
class Simulator:
    """Where a simulator's benchmark runs: its package, how to find its venv, the rows function."""

    name: str
    package: str
    rows: Callable[[tuple[int, ...], int, int], list[dict]]
    venv: Callable[[], Path | None]
    build_hint: str
    sizes: tuple[int, ...] = (16, 64)  # the N measured when --sizes is not given


def _quiet():
    """Simulators print tables and seeds on construction and reset: keep the benchmark's output readable."""
    return contextlib.redirect_stdout(io.StringIO())


class _TdLoop:
    """gpu_envs' ``step_and_maybe_reset`` in a loop, with ``action()`` as each step's action."""

    def __init__(self, env: Any, action: Callable[[], torch.Tensor]) -> None:
        self.env = env
        self.action = action
        self.td = env.reset(seed=0)

    def __call__(self) -> None:
        self.td.set("action", self.action())
        self.td = self.env.step_and_maybe_reset(self.td)[1]


class _ResetCounter:
    """Counts the rows a contender's steps end (reported as resets per step).

    It keeps each step's ``done`` and sums them when asked, after the timing: summing in
    the step would charge the benchmark's bookkeeping to the contender that keeps count.
    """

    def __init__(self) -> None:
        self.dones: list[torch.Tensor] = []

    def add(self, done: torch.Tensor) -> None:
        self.dones.append(done)

    @property
    def per_step(self) -> float:
        return round(sum(int(d.sum()) for d in self.dones) / max(len(self.dones), 1), 2)


# --------------------------------------------------------------------------- mjlab
MJLAB_TASKS = {"Mjlab-Cartpole-Balance": 1, "Mjlab-Velocity-Flat-Unitree-Go1": 12}  # task id -> action size


def _mjlab_env(task_id: str, n: int, episode_length_s: float | None) -> Any:
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg(task_id)
    cfg.scene.num_envs = n
    cfg.seed = 0
    if episode_length_s is not None:
        cfg.episode_length_s = episode_length_s
    with _quiet():
        return ManagerBasedRlEnv(cfg, device="cpu")


def _mjlab_actions(n: int, size: int, swing: bool) -> Callable[[], torch.Tensor]:
    """Fixed actions: zeros (standing still), or slow sinusoids with a phase per row and joint."""
    if not swing:
        zeros = torch.zeros(n, size)
        return lambda: zeros
    phase = torch.rand(n, size, generator=torch.Generator().manual_seed(0)) * 2 * math.pi
    table = [torch.sin(0.3 * t + phase) for t in range(64)]
    clock = [0]

    def next_action() -> torch.Tensor:
        clock[0] += 1
        return table[clock[0] % len(table)]

    return next_action


def mjlab_contenders(
    task_id: str, n: int, swing: bool
) -> tuple[dict[str, Callable[[], None]], _ResetCounter, CallClock]:
    """The six contenders over their own instances of ``task_id`` (see the module doc).

    The :class:`CallClock` times the mjlab calls of the ``gpu_envs`` and ``floor`` contenders
    (their instances' ``step`` and ``reset``): what each spends outside them is its own cost.
    """
    from mjlab.rl import RslRlVecEnvWrapper

    import gpu_envs
    from gpu_envs.interop import to_rsl_rl

    episode = 1.0 if swing else None
    size = MJLAB_TASKS[task_id]
    names = ("raw", "gpu_envs", "auto", "trainer", "rsl_rl", "floor")
    action = {name: _mjlab_actions(n, size, swing) for name in names}
    counter = _ResetCounter()
    raw = _mjlab_env(task_id, n, episode)
    floor = _mjlab_env(task_id, n, episode)
    floor.cfg.auto_reset = False  # mjlab's own exact flow: step returns the final observations
    with _quiet():
        raw.reset(seed=0)
        floor.reset(seed=0)
        ours = gpu_envs.wrap(_mjlab_env(task_id, n, episode))
        auto = gpu_envs.wrap(_mjlab_env(task_id, n, episode), exact_final_obs=False)
        trainer = RslRlVecEnvWrapper(_mjlab_env(task_id, n, episode))
        ours_rsl = to_rsl_rl(gpu_envs.wrap(_mjlab_env(task_id, n, episode)))

    def raw_step() -> None:
        _, _, terminated, truncated, _ = raw.step(action["raw"]())
        counter.add(terminated | truncated)

    def floor_step() -> None:
        # what exact final observations cost mjlab itself, with no wrapper: the ended rows
        # reset by the caller in the same step (a second forward / sense / observation pass)
        _, _, terminated, truncated, _ = floor.step(action["floor"]())
        ended = (terminated | truncated).nonzero().view(-1)
        if ended.numel():
            floor.reset(env_ids=ended)

    with _quiet():
        steps = {
            "raw": raw_step,
            "gpu_envs": _TdLoop(ours, action["gpu_envs"]),
            "gpu_envs_auto": _TdLoop(auto, action["auto"]),
            "trainer": lambda: trainer.step(action["trainer"]()),
            "gpu_envs_rsl_rl": lambda: ours_rsl.step(action["rsl_rl"]()),
            "floor": floor_step,
        }
    inside = CallClock()
    inside.instrument(ours.backend.env, "step", "reset")
    inside.instrument(floor, "step", "reset")
    if swing:  # mid-episode everywhere, as in training (rsl_rl's init_at_random_ep_len): resets from the first step
        for sim in (raw, ours.backend.base, auto.backend.base, trainer.unwrapped, ours_rsl.env.backend.base, floor):
            generator = torch.Generator().manual_seed(1)
            sim.episode_length_buf = torch.randint(0, sim.max_episode_length, (n,), generator=generator)
    return {name: _quietly(step) for name, step in steps.items()}, counter, inside


def _quietly(step: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        with _quiet():
            step()

    return run


MJLAB_TASK_IDS: tuple[str, ...] | None = None
"""``--mjlab-tasks``: the mjlab tasks measured; None: all of :data:`MJLAB_TASKS`."""
MJLAB_REGIMES: tuple[str, ...] = ("standing", "swinging")
"""``--mjlab-regimes``: ``standing`` (own episodes, resets rare), ``swinging`` (1 s episodes)."""
MJLAB_CONTENDERS: tuple[str, ...] | None = None
"""``--mjlab-contenders``: the mjlab contenders timed besides ``raw`` and ``gpu_envs``; None: all six.

Fewer per round, more rounds per minute."""


def mjlab_rows(sizes: tuple[int, ...], steps: int, rounds: int) -> list[dict]:
    """In a process that has mjlab: every task, both regimes, at each N."""
    rows = []
    for task_id in MJLAB_TASK_IDS or tuple(MJLAB_TASKS):
        for swing in [regime == "swinging" for regime in MJLAB_REGIMES]:
            for n in sizes:
                contenders, counter, inside = mjlab_contenders(task_id, n, swing)
                if MJLAB_CONTENDERS is not None:
                    contenders = {
                        k: v for k, v in contenders.items() if k in ("raw", "gpu_envs") or k in MJLAB_CONTENDERS
                    }
                load = load_average()
                clocks = {**CLOCKS, "inside": inside}
                samples = interleave_clocks(contenders, steps=steps, rounds=rounds, clocks=clocks, warmup=1)
                regime = "1 s episodes, swinging" if swing else "own episodes, standing"
                row = overhead_row(
                    medians(samples["cpu"]),
                    simulator="mjlab 1.6.0 (cpu)",
                    task=task_id,
                    regime=regime,
                    N=n,
                    target="<= +5%",
                )
                # mjlab steps in the calling thread (its Warp CPU kernels too): thread time = process time
                row |= spread_columns(samples, 1.05, names=("gpu_envs", "floor", "gpu_envs_auto"), thread=None)
                row |= own_columns(samples, 1.05, names=("gpu_envs", "floor"))
                row["resets_per_step"] = counter.per_step
                row["rounds"], row["load"] = f"{rounds} x {steps} steps", f"{load}..{load_average()}"
                row["per_round_us"] = per_round_us(samples)  # JSON only
                rows.append(row)
                print(f"  [mjlab] {task_id} {regime} N={n}: {_brief(row)}", file=sys.stderr)
    return rows


# ------------------------------------------------------------------------ Isaac Lab
def isaaclab_rows(sizes: tuple[int, ...], steps: int, rounds: int) -> list[dict]:
    """In a process that has Isaac Lab: the direct cartpole (``compute_final_obs=True``) at each N."""
    return [_isaaclab_row(n, steps, rounds) for n in sizes]


def _isaaclab_row(n: int, steps: int, rounds: int) -> dict:
    """Isaac Lab runs one simulation per process: the four contenders take turns stepping it."""
    import gymnasium as gym
    from isaaclab_rl.rsl_rl import RslRlVecEnvWrapper

    import gpu_envs
    from gpu_envs.interop import to_rsl_rl

    sys.path.insert(0, str(REPO))
    from tests.isaaclab.cartpoles import direct_cfg

    cfg = direct_cfg(num_envs=n, compute_final_obs=True)
    cfg.episode_length_s = 5.0  # the task's own episode length
    isaac = gym.make("Isaac-Cartpole-Direct", cfg=cfg)
    action = (torch.arange(n) % 2).float().unsqueeze(-1) - 0.5
    isaac.reset(seed=0)
    ours = gpu_envs.wrap(isaac)
    trainer = RslRlVecEnvWrapper(isaac)
    ours_rsl = to_rsl_rl(ours)
    contenders = {
        "raw": lambda: isaac.step(action),
        "gpu_envs": _TdLoop(ours, lambda: action),
        "trainer": lambda: trainer.step(action),
        "gpu_envs_rsl_rl": lambda: ours_rsl.step(action),
    }
    times = interleave(contenders, steps=steps, rounds=rounds, warmup=1, timer=time.process_time)
    ours.close()
    return overhead_row(
        times,
        simulator="Isaac Lab 3.0.0 (cpu)",
        task="Isaac-Cartpole-Direct",
        regime="own episodes",
        N=n,
        target="<= +5%",
    )


# ------------------------------------------------------------------------- venvs
def _cache() -> Path:
    return Path(os.environ.get("GPU_ENVS_CACHE", os.path.expanduser("~/.cache/gpu_envs")))


def simulator_venv(name: str) -> Path | None:
    """The finished venv of ``scripts/simulator_venv.sh name`` (without building it), or None."""
    try:
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "simulator_venv.sh"), name, "--path"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    venv = Path(lines[-1]) if done.returncode == 0 and lines else None
    return venv if venv is not None and (venv / ".complete").exists() else None


def isaaclab_venv() -> Path | None:
    root = Path(os.environ.get("ISAACLAB_VENV") or _cache() / "isaaclab-3.0.0-py312")
    return root if (root / ".complete").exists() else None


def _rows_of(name: str) -> Callable[[tuple[int, ...], int, int], list[dict]]:
    """``simulator_rows.<name>_rows``, imported when called (in the process that has the simulator)."""

    def rows(sizes: tuple[int, ...], steps: int, rounds: int) -> list[dict]:
        from benchmarks import simulator_rows

        return getattr(simulator_rows, f"{name}_rows")(sizes, steps, rounds)

    return rows


SIMULATORS = {
    "mjlab": Simulator(
        "mjlab", "mjlab", mjlab_rows, lambda: simulator_venv("mjlab"), "scripts/simulator_venv.sh mjlab"
    ),
    "isaaclab": Simulator("isaaclab", "isaaclab", isaaclab_rows, isaaclab_venv, "scripts/isaaclab_venv.sh"),
    # targets at N=8 (simulator_rows' docstring); ManiSkill3 runs one env on CPU PhysX whatever the sizes
    "envpool": Simulator(
        "envpool", "envpool", _rows_of("envpool"), lambda: None, "pip install '.[envpool]' in the gpu_envs clone", (8,)
    ),
    "brax": Simulator(
        "brax", "brax", _rows_of("brax"), lambda: simulator_venv("brax"), "scripts/simulator_venv.sh brax", (8,)
    ),
    "playground": Simulator(
        "playground",
        "mujoco_playground",
        _rows_of("playground"),
        lambda: simulator_venv("brax"),
        "scripts/simulator_venv.sh brax",
        (8,),
    ),
    "maniskill": Simulator(
        "maniskill",
        "mani_skill",
        _rows_of("maniskill"),
        lambda: simulator_venv("maniskill"),
        "scripts/simulator_venv.sh maniskill",
        (1,),
    ),
}


def rows_for(sim: Simulator, sizes: tuple[int, ...], steps: int, rounds: int) -> tuple[list[dict], str | None]:
    """``sim``'s rows, in this process or in its venv's python; ``([], why not)`` when it cannot run."""
    if importlib.util.find_spec(sim.package) is not None:
        return sim.rows(sizes, steps, rounds), None
    venv = sim.venv()
    if venv is None:
        return [], f"{sim.name} skipped: no venv (build it with {sim.build_hint})"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [str(venv / "bin" / "python"), "-m", "benchmarks.bench_simulators", "--only", sim.name, "--in-process"]
        cmd += ["--sizes", *map(str, sizes), "--steps", str(steps), "--rounds", str(rounds), "--json", str(out)]
        if sim.name == "mjlab":
            cmd += ["--mjlab-regimes", *MJLAB_REGIMES]
            cmd += ["--mjlab-contenders", *MJLAB_CONTENDERS] if MJLAB_CONTENDERS is not None else []
            cmd += ["--mjlab-tasks", *MJLAB_TASK_IDS] if MJLAB_TASK_IDS is not None else []
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0 or not out.exists():
            return [], f"{sim.name} failed (exit {done.returncode}): {done.stderr.strip()[-800:]}"
        return json.loads(out.read_text())["rows"], None


def run(
    quick: bool = False,
    only: tuple[str, ...] | None = None,
    sizes: tuple[int, ...] | None = None,
    steps: int | None = None,
    rounds: int | None = None,
) -> dict:
    """Every simulator's rows (``only``: those), at ``sizes`` or each simulator's own default N."""
    torch.set_num_threads(1)
    steps, rounds = steps or (3 if quick else 10), rounds or (3 if quick else 9)
    rows, notes = [], []
    for name in only or tuple(SIMULATORS):
        sim = SIMULATORS[name]
        found, note = rows_for(sim, sizes or ((8,) if quick else sim.sizes), steps, rounds)
        rows += found
        if note:
            notes.append(note)
    title = "bench_simulators: real simulators, gpu_envs vs raw step vs their trainer wrappers (cpu, 1 thread)"
    if notes:
        title += " -- " + "; ".join(notes)
    return {
        "title": title,
        "rows": rows,
        "columns": [c for c in COLUMNS if any(c[0] in r for r in rows)],
        "notes": notes,
    }


def main() -> None:
    global MJLAB_CONTENDERS, MJLAB_TASK_IDS, MJLAB_REGIMES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(SIMULATORS), default=None)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="N (default: mjlab, Isaac Lab 16 64; others 8; --quick: 8)"
    )
    parser.add_argument("--steps", type=int, default=None, help="steps per round (default 10)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 9)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--in-process", action="store_true", help="run the simulators here (a venv's python)")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    parser.add_argument(
        "--mjlab-contenders",
        nargs="+",
        default=None,
        choices=["gpu_envs_auto", "trainer", "gpu_envs_rsl_rl", "floor"],
        help="time only these mjlab contenders besides raw and gpu_envs (more rounds in the same time)",
    )
    parser.add_argument("--mjlab-tasks", nargs="+", default=None, choices=list(MJLAB_TASKS))
    parser.add_argument("--mjlab-regimes", nargs="+", default=list(MJLAB_REGIMES), choices=["standing", "swinging"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    MJLAB_CONTENDERS = tuple(args.mjlab_contenders) if args.mjlab_contenders else None
    MJLAB_TASK_IDS = tuple(args.mjlab_tasks) if args.mjlab_tasks else None
    MJLAB_REGIMES = tuple(args.mjlab_regimes)
    if args.in_process:
        steps, rounds = args.steps or 10, args.rounds or 9
        names = args.only or list(SIMULATORS)
        rows = [
            row
            for name in names
            for row in SIMULATORS[name].rows(tuple(args.sizes or SIMULATORS[name].sizes), steps, rounds)
        ]
        save_json(args.json, {"benchmark": "simulators", "rows": rows})
        return
    only, sizes = (tuple(args.only) if args.only else None), (tuple(args.sizes) if args.sizes else None)
    result = run(args.quick, only, sizes, args.steps, args.rounds)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "simulators", "device": "cpu", "rows": result["rows"], "notes": result["notes"]})


if __name__ == "__main__":
    main()
