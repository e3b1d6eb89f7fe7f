"""VMAS through gpu_envs against VMAS by hand and torchrl's VmasEnv: the cost of agent groups and exact resets.

At each N, each contender on its own VMAS navigation env (3 agents), the same fixed
actions, every env reset with seed 0 first. VMAS's navigation step draws no random
numbers, so without episode ends (the default: no horizon) every contender steps the SAME
trajectory, and round ``r`` of each covers the same steps: the ratios paired round by round
compare equal work. With ``--horizon H`` (``H`` steps a round, one episode end of every row
in each) the resets are in the rounds too, but the envs then draw their new starts from
VMAS's one process-wide random state, one after the other, and part of the spread is the
scenario's own (collisions cost time):

* ``raw``: VMAS by hand, as its users write it: ``step`` (per-agent lists), then the
  ended rows reset (``reset()`` when every row ended, else ``reset_at`` per index) and
  the observations read again -- VMAS has no auto-reset, so this is the floor of any
  exact loop;
* ``gpu_envs``: ``gpu_envs.make("vmas/navigation")`` with ``step_and_maybe_reset``
  (agent groups ``[N, A, ...]``, the team reward, each agent's flags, the TRUE final
  observation, TensorDicts);
* ``torchrl``: torchrl's ``VmasEnv`` with its ``step_and_maybe_reset`` (skipped where
  torchrl is not installed);
* ``own``: gpu_envs' own part alone, the floor of what the contract costs: the gpu_envs
  env with VMAS's ``step`` replaced by the result of one real step (the same tensors every
  time, no episode end), so only the backend's regrouping, the checks, the TensorDicts and
  the step path remain. VMAS's step scatters by tens of percent from round to round on
  this VM while this part does not, so ``own / by hand`` says what the paired ratios
  cannot resolve.

Thread CPU time (VMAS steps in the calling thread), ``torch.set_num_threads(1)``,
interleaved rounds, each round's ratios paired (its contenders ran seconds apart, under one
load), medians with a 95% interval and a verdict against +5%; ``--json`` saves the rows. Run::

    python -m benchmarks.bench_multiagent                       # N = 64, 1024, 4096
    python -m benchmarks.bench_multiagent --horizon 50          # episode ends and resets included
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import gpu_envs
from benchmarks.timing import bench_result, format_table, interleave_clocks, medians, save_json, spread_columns

SCENARIO = "navigation"
AGENTS = 3


def raw_contender(n: int, horizon: int | None, actions: torch.Tensor, device: str = "cpu") -> Callable[[], object]:
    """VMAS stepped by hand, its ended rows reset the way VMAS allows."""
    import vmas  # pyright: ignore[reportMissingImports]  # optional

    env = vmas.make_env(
        SCENARIO, num_envs=n, device=device, max_steps=horizon, seed=0, n_agents=AGENTS, terminated_truncated=True
    )
    env.reset(seed=0)
    per_agent = [actions[:, k] for k in range(AGENTS)]

    def step() -> object:
        obs, rewards, terminated, truncated, _ = env.step(list(per_agent))
        rows = (terminated | truncated).nonzero().view(-1).tolist()
        if len(rows) == n:
            obs = env.reset()
        elif rows:
            for row in rows:
                env.reset_at(row, return_observations=False)
            obs = env.get_from_scenario(get_observations=True, get_rewards=False, get_infos=False, get_dones=False)[0]
        return obs, rewards

    return step


def group_loop(env: object, actions: torch.Tensor) -> Callable[[], object]:
    """``step_and_maybe_reset`` with the same group actions every step, from the env's first root (both APIs alike)."""
    state = {"root": env.reset()}  # pyright: ignore[reportAttributeAccessIssue]  # a gpu_envs or torchrl env

    def step() -> object:
        root = state["root"]
        root.set(("agents", "action"), actions)
        _, state["root"] = env.step_and_maybe_reset(root)  # pyright: ignore[reportAttributeAccessIssue]
        return state["root"]

    return step


def gpu_envs_contender(n: int, horizon: int | None, actions: torch.Tensor, device: str = "cpu") -> Callable[[], object]:
    env = gpu_envs.make(
        f"vmas/{SCENARIO}", num_envs=n, device=device, max_episode_steps=horizon, seed=0, n_agents=AGENTS
    )
    return group_loop(env, actions)


def own_contender(n: int, actions: torch.Tensor, device: str = "cpu") -> Callable[[], object]:
    """The gpu_envs contender with VMAS's ``step`` replaced by one real step's result (the module docstring's ``own``)."""
    env = gpu_envs.make(f"vmas/{SCENARIO}", num_envs=n, device=device, seed=0, n_agents=AGENTS)
    loop = group_loop(env, actions)  # resets first
    simulator = env.backend.env
    result = simulator.step([actions[:, k] for k in range(AGENTS)])
    simulator.step = lambda _actions: result  # an instance attribute: this env only
    return loop


def torchrl_contender(n: int, horizon: int | None, actions: torch.Tensor) -> Callable[[], object] | None:
    if importlib.util.find_spec("torchrl") is None:
        return None
    from torchrl.envs.libs.vmas import VmasEnv

    env = VmasEnv(SCENARIO, num_envs=n, max_steps=horizon, seed=0, n_agents=AGENTS)
    env.set_seed(0)  # the next reset seeds VMAS: the same start as the others
    return group_loop(env, actions)


COLUMNS = [
    ("num_envs", "N"),
    ("raw_us", "VMAS by hand us/step"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("gpu_envs_spread", "gpu_envs vs by hand: median [95% CI] (min..max)"),
    ("verdict", "+5% target"),
    ("own_us", "gpu_envs' own us (VMAS step cached)"),
    ("own_share", "own / by hand"),
    ("torchrl_us", "torchrl VmasEnv us/step"),
    ("torchrl_spread", "torchrl vs by hand"),
    ("torchrl_over_gpu_envs", "torchrl / gpu_envs"),
]


def run(
    sizes: tuple[int, ...] = (64, 1024, 4096), horizon: int | None = None, steps: int = 20, rounds: int = 9
) -> dict:
    """One row per N; the overheads are ratios paired round by round (each round's contenders ran under one load).

    ``horizon`` None: no episode ends, ``steps`` steps a round; else ``horizon`` steps a round (module docstring).
    """
    per_round = steps if horizon is None else horizon
    torch.set_num_threads(1)
    rows = []
    for n in sizes:
        actions = torch.rand(n, AGENTS, 2, generator=torch.Generator().manual_seed(0)) * 2 - 1
        contenders = {
            "raw": raw_contender(n, horizon, actions),
            "gpu_envs": gpu_envs_contender(n, horizon, actions),
            "own": own_contender(n, actions),
        }
        torchrl = torchrl_contender(n, horizon, actions)
        if torchrl is not None:
            contenders["torchrl"] = torchrl
        samples = interleave_clocks(contenders, steps=per_round, rounds=rounds, clocks={"cpu": time.thread_time})
        times = medians(samples["cpu"])
        row: dict = {"num_envs": n, **{f"{name}_us": round(seconds * 1e6, 1) for name, seconds in times.items()}}
        row.update(spread_columns(samples, 1.05, names=("gpu_envs", "torchrl"), thread=None, wall=None))
        row["own_share"] = f"{times['own'] / times['raw']:.1%}"
        if "torchrl" in times:
            ratios = [a / b for a, b in zip(samples["cpu"]["torchrl"], samples["cpu"]["gpu_envs"], strict=True)]
            row["torchrl_over_gpu_envs"] = f"{statistics.median(ratios):.2f}x"
        rows.append(row)
    ends = (
        "no episode ends: one trajectory for all" if horizon is None else f"horizon {horizon}: one end per row a round"
    )
    title = (
        f"VMAS {SCENARIO} ({AGENTS} agents, {ends}): by hand vs gpu_envs vs torchrl "
        f"(thread CPU time, {rounds} rounds of {per_round} steps, ratios paired round by round)"
    )
    return bench_result(title, rows, COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--horizon", type=int, default=None, help="episode length (default: no episode ends)")
    parser.add_argument("--steps", type=int, default=20, help="steps a round without a horizon")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if importlib.util.find_spec("vmas") is None:
        raise SystemExit("vmas is not installed: pip install '.[vmas]' in the gpu_envs clone.")
    result = run(tuple(args.sizes), args.horizon, args.steps, args.rounds)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "multiagent", "rows": result["rows"]})


if __name__ == "__main__":
    main()
