"""Wrapper overhead over a raw torch vector env, next to the floor the contract allows.

Step rows: a plain torch CartPole vector env with no final observations (Isaac Lab
style: the built-in CartPoleEnv with ``expose_final_obs=False``) is stepped at N in
{1, 64, 4096}; every contender does the caller's ``td.set("action", a)`` where it has
a TensorDict:

(a) raw: ``env.step(action)`` in a loop;
(b) floor: the raw env plus ONLY the work the TensorDict contract needs, in the same
    run: the env's step in the contract's layout (its ``raw_step``: a RawStep's
    fields, ``[N, 1]`` flags it already holds), the placeholder ``where`` on ended rows (final
    observations are not exposed), the two TensorDicts (the transition's ``"next"`` and
    the next root, built the cheapest way the installed tensordict allows) and the
    caller's ``td.set``. It is the limit of any wrapper: our distance to it is what the
    wrapper itself costs;
(c) gpu_envs: the same env through ``gpu_envs.wrap`` with ``step_and_maybe_reset``;
(d) torchrl: ``GymWrapper(env, convert_actions_to_numpy=False)`` with its
    ``step_and_maybe_reset``, when torchrl is installed (for reference);
(e) gpu_envs with ``health_checks=False`` and with ``health_checks="step"`` (the same env
    as (c), switched between rounds, so only the checks differ; every other round runs the
    contenders in reverse order, so neither follows the other every time): what the
    default checks of a hand-written loop cost ((c) against checks off: "default checks
    cost", points of the raw step, paired round by round, with its 95% confidence
    interval and the verdict on the 3-point target; on the CPU the built-in envs' native
    step checks its own values and the core only reads its verdict, other envs get one C
    look per step, ``gpu_envs.core.health_look``) and what flagging bad values with
    device ops on every step costs ("every-step checks cost").

The distance to the floor is given twice, in points of the raw step: the difference of
the two medians, and the median of the per-round differences (with its 95% confidence
interval; the two ran next to each other in every round, so a busy machine moves both).

Collect rows: ``collect(env, steps=T)`` (built-in CartPole-v1, final observations
exposed, random actions) against a plain loop that steps the raw env with the same
random actions and writes the same transitions (the 12 entries of collect's buffer,
under ``torch.inference_mode`` as collect does) into a preallocated ``[N, T]`` buffer
with one ``torch._foreach_copy_`` per step: the least any collection loop can do.
Random actions take collect's tensors-only path for the built-in envs; the "with
policy" columns repeat both sides with a policy (a fixed linear layer and an argmax,
``td["action"]`` set from ``td["observation"]``), which takes the TensorDict path
every policy takes. The "checks" columns repeat collect with ``health_checks=False``:
what the default health checks (one scan of each collection's buffer) cost, in points of
the raw loop.

Time is thread CPU time (``time.thread_time``), ``torch.set_num_threads(1)``,
interleaved rounds in one process, medians. The step rows run with the objects alive
before them frozen out of the garbage collector (:func:`~benchmarks.timing.frozen_heap`):
a full collection of the imported libraries' objects landing in a random round moved
single runs by 10-20 points at N = 8.

    python benchmarks/bench_overhead.py --json benchmarks/results/overhead.json
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script: our benchmarks package, not torchrl's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from tensordict import TensorDict

import gpu_envs
from benchmarks.timing import (
    bench_result,
    clock,
    format_table,
    frozen_heap,
    interleave,
    interleave_clocks,
    medians,
    overhead_row,
    save_json,
    spread,
    verdict,
)
from gpu_envs.builtin import CartPoleEnv
from gpu_envs.contract.final_obs import ROW_VIEW_MIN_ENVS
from gpu_envs.rollout import collect
from gpu_envs.utils.tensordicts import new_td, set_entry
from gpu_envs.utils.torch_internals import foreach_copy


def floor_step_fn(n: int, device: torch.device, action: torch.Tensor):
    """Raw env + placeholder ``where`` + two TensorDicts + the caller's ``td.set``.

    From ``ROW_VIEW_MIN_ENVS`` envs on, the ``where`` masks whole ``[N, 4]`` rows as single
    elements, as gpu_envs' final-observation swap does.
    """
    env = CartPoleEnv(n, device=device, expose_final_obs=False)
    obs, _ = env.reset(seed=0)
    batch = torch.Size([n])
    false = torch.zeros(n, 1, dtype=torch.bool, device=device)
    nan = torch.tensor(math.nan, device=device)
    nan_row = torch.full((1, 4), math.nan, device=device).view(torch.complex128)
    rows = n >= ROW_VIEW_MIN_ENVS
    state = {"td": TensorDict({"observation": obs, "done": false, "terminated": false, "truncated": false}, batch)}

    def step() -> None:
        td = state["td"]
        td.set("action", action)
        obs, reward, terminated, truncated, done, _, _, _ = env.raw_step(action)
        obs = obs["observation"]
        if rows:
            next_obs = torch.where(done, nan_row, obs.view(torch.complex128)).view(torch.float32)
        else:
            next_obs = torch.where(done, nan, obs)
        nxt = {"observation": next_obs, "reward": reward, "done": done, "terminated": terminated}
        nxt["truncated"] = truncated
        nxt["final_obs_missing"] = done
        set_entry(td, "next", new_td(nxt, batch, device))
        root = {"observation": obs, "done": false, "terminated": false, "truncated": false}
        state["td"] = new_td(root, batch, device)

    return step


CHECK_MODES = {"gpu_envs": True, "checks_off": False, "checks_step": "step"}
"""The health mode each gpu_envs contender runs its rounds in (one env, switched between rounds)."""


def check_setups(env) -> dict:
    """For :func:`~benchmarks.timing.interleave_clocks`: set the shared env's health mode before each contender's round."""
    return {name: lambda mode=mode: setattr(env, "health_checks", mode) for name, mode in CHECK_MODES.items()}


def contenders(n: int, device: torch.device) -> tuple[dict, object]:
    """The step contenders, and the gpu_envs env three of them share (:data:`CHECK_MODES`)."""
    action = (torch.arange(n, device=device) % 2).long()

    raw_env = CartPoleEnv(n, device=device, expose_final_obs=False)
    raw_env.reset(seed=0)

    # one env for gpu_envs and its two other health modes (switched between rounds: check_setups): the
    # checks' cost is then the only difference, not two env objects' places in memory
    ours = gpu_envs.wrap(CartPoleEnv(n, device=device, expose_final_obs=False))
    ours_state = {"ours": ours.reset(seed=0)}

    def ours_step():
        td = ours_state["ours"]
        td.set("action", action)
        ours_state["ours"] = ours.step_and_maybe_reset(td)[1]

    state: dict = {}
    out = {
        "raw": lambda: raw_env.step(action),
        "floor": floor_step_fn(n, device, action),
        "gpu_envs": ours_step,
        # the health checks: off, and on every step ("collect", the default, checks nothing per step)
        "checks_off": ours_step,
        "checks_step": ours_step,
    }
    if importlib.util.find_spec("torchrl") is not None:
        from torchrl.envs import GymWrapper

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = GymWrapper(
                CartPoleEnv(n, device=device, expose_final_obs=False),
                convert_actions_to_numpy=False,
                categorical_action_encoding=True,
                device=device,
            )
        state["torchrl"] = theirs.reset()

        def torchrl_step():
            td = state["torchrl"]
            td.set("action", action)
            state["torchrl"] = theirs.step_and_maybe_reset(td)[1]

        out["torchrl"] = torchrl_step
    return out, ours


class LinearArgmaxPolicy:
    """A fixed linear layer and an argmax: a policy's TensorDict round trip at almost no compute."""

    def __init__(self, device: torch.device) -> None:
        self.weight = torch.randn(4, 2, generator=torch.Generator().manual_seed(0)).to(device)

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs @ self.weight).argmax(-1)

    def __call__(self, td):
        td.set("action", self.act(td.get("observation")))
        return td


def plain_collect_fn(n: int, steps: int, device: torch.device, policy: LinearArgmaxPolicy | None = None):
    """The raw env and a hand-written loop storing the same transitions as ``collect``.

    With ``policy``, each action is ``policy.act(obs)`` instead of a random draw.
    """
    env = CartPoleEnv(n, device=device, seed=0)
    obs, _ = env.reset()
    generator = torch.Generator(device=device)
    generator.manual_seed(0)
    false = torch.zeros(n, 1, dtype=torch.bool, device=device)
    buf = {
        "observation": torch.zeros(n, steps, 4, device=device),
        "action": torch.zeros(n, steps, dtype=torch.int64, device=device),
        "next_observation": torch.zeros(n, steps, 4, device=device),
        "reward": torch.zeros(n, steps, 1, device=device),
        "final_obs_missing": torch.zeros(n, steps, 1, dtype=torch.bool, device=device),
    }
    for name in ("done", "terminated", "truncated", "next_done", "next_terminated", "next_truncated"):
        buf[name] = torch.zeros(n, steps, 1, dtype=torch.bool, device=device)
    order = list(buf)
    columns = [[buf[k].select(1, t) for k in order] for t in range(steps)]
    state = {"obs": obs}

    def run() -> None:
        obs = state["obs"]
        with torch.inference_mode():
            for t in range(steps):
                if policy is None:
                    action = torch.randint(0, 2, (n,), generator=generator, device=device)
                else:
                    action = policy.act(obs)
                next_obs, reward, terminated, truncated, done, final, _, _ = env.raw_step(action)
                next_obs, final = next_obs["observation"], final["observation"]
                values = {
                    "observation": obs,
                    "action": action,
                    "next_observation": final,
                    "reward": reward,
                    "final_obs_missing": false,
                    "done": false,
                    "terminated": false,
                    "truncated": false,
                    "next_done": done,
                    "next_terminated": terminated,
                    "next_truncated": truncated,
                }
                foreach_copy(columns[t], [values[k] for k in order])
                obs = next_obs
        state["obs"] = obs

    return run


def collect_contenders(n: int, steps: int, device: torch.device) -> dict:
    """Random actions (``policy=None``: collect's tensors-only path) and a policy (its TensorDict path)."""
    env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    collect(env, steps=steps)  # allocates the buffer, validates the first step
    policy = LinearArgmaxPolicy(device)
    policy_env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    collect(policy_env, policy, steps=steps)
    # the same without the health checks (the default scans each collection once)
    off_env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0, health_checks=False)
    collect(off_env, steps=steps)
    off_policy_env = gpu_envs.make("CartPole-v1", num_envs=n, device=device, seed=0, health_checks=False)
    collect(off_policy_env, policy, steps=steps)
    return {
        "raw loop": plain_collect_fn(n, steps, device),
        "gpu_envs collect": lambda: collect(env, steps=steps),
        "gpu_envs collect, checks off": lambda: collect(off_env, steps=steps),
        "raw loop + policy": plain_collect_fn(n, steps, device, policy),
        "gpu_envs collect + policy": lambda: collect(policy_env, policy, steps=steps),
        "gpu_envs collect + policy, checks off": lambda: collect(off_policy_env, policy, steps=steps),
    }


COLUMNS = [
    ("N", "N"),
    ("raw_us", "raw us/step"),
    ("floor_us", "floor us/step"),
    ("floor_overhead", "floor overhead"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("gpu_envs_overhead", "gpu_envs overhead"),
    ("gpu_envs_vs_floor", "gpu_envs - floor"),
    ("gpu_envs_vs_floor_paired", "gpu_envs - floor: median [95% CI] (min..max), paired per round"),
    ("checks_off_us", "checks off us/step"),
    ("checks_default_cost", "default checks cost: median [95% CI] (min..max), paired per round"),
    ("checks_default_target", "within 3 pts"),
    ("checks_step_us", "checks every step us/step"),
    ("checks_step_cost", "every-step checks cost"),
    ("torchrl_us", "torchrl us/step"),
    ("torchrl_overhead", "torchrl overhead"),
]
COLLECT_COLUMNS = [
    ("N", "N"),
    ("T", "T"),
    ("raw_loop_us", "raw loop us/env-step x N"),
    ("gpu_envs_collect_us", "collect us/env-step x N"),
    ("gpu_envs_collect_overhead", "collect overhead"),
    ("policy_loop_us", "policy: raw loop"),
    ("policy_collect_us", "policy: collect"),
    ("policy_collect_overhead", "policy: overhead"),
    ("checks_off_collect_us", "checks off: collect us"),
    ("checks_cost", "checks cost"),
    ("policy_checks_cost", "policy: checks cost"),
]


CHECKS_TARGET_POINTS = 3.0
"""Issue 26's target: the default health checks of a hand-written loop within 3 points of the raw step."""


def _overhead(seconds: float, base: float) -> str:
    return f"{seconds / base - 1:+.1%}"


def measure(sizes: list[int], steps: int, rounds: int, device: torch.device, warmup: int = 2) -> list[dict]:
    """One row per N: us/step of each contender, the overheads over raw and the gap to the floor."""
    rows = []
    for n in sizes:
        clocks = {"cpu": clock(device)}
        fns, ours = contenders(n, device)
        setups = check_setups(ours)
        with frozen_heap():  # (full collections of the imported libraries' objects landed in random rounds)
            per_round = interleave_clocks(fns, steps, rounds, clocks, warmup, device, setups, alternate=True)["cpu"]
        times = medians(per_round)
        row = overhead_row(times, N=n)
        row["checks_step_cost"] = f"{(times['checks_step'] - times['checks_off']) / times['raw'] * 100:+.1f} pts"
        # the default checks' cost paired round by round (the two ran seconds apart, under the same load)
        cost = [
            (on - off) / raw * 100
            for on, off, raw in zip(per_round["gpu_envs"], per_round["checks_off"], per_round["raw"], strict=True)
        ]
        row["checks_default_cost"] = spread(cost, fmt="{:+.1f} pts", shift=0.0)
        # the distance to the floor paired round by round, as the checks' cost: steadier than the difference of
        # two medians on a busy machine (neighbouring rounds share the load)
        gap = [
            (ours - floor) / raw * 100
            for ours, floor, raw in zip(per_round["gpu_envs"], per_round["floor"], per_round["raw"], strict=True)
        ]
        row["gpu_envs_vs_floor_paired"] = spread(gap, fmt="{:+.1f} pts", shift=0.0)
        row["checks_default_target"] = verdict(cost, CHECKS_TARGET_POINTS)
        rows.append(row)
    return rows


def measure_collect(sizes: list[int], steps: int, rounds: int, device: torch.device, warmup: int = 2) -> list[dict]:
    """One row per N: collect vs the plain raw loop, per step of the whole batch."""
    rows = []
    for n in sizes:
        times = interleave(collect_contenders(n, steps, device), steps=1, rounds=rounds, warmup=warmup, device=device)
        row = {"N": n, "T": steps}
        row["raw_loop_us"] = round(times["raw loop"] / steps * 1e6, 1)
        row["gpu_envs_collect_us"] = round(times["gpu_envs collect"] / steps * 1e6, 1)
        row["gpu_envs_collect_overhead"] = _overhead(times["gpu_envs collect"], times["raw loop"])
        off, off_policy = times["gpu_envs collect, checks off"], times["gpu_envs collect + policy, checks off"]
        row["checks_off_collect_us"] = round(off / steps * 1e6, 1)
        row["checks_cost"] = f"{(times['gpu_envs collect'] - off) / times['raw loop'] * 100:+.1f} pts"
        row["policy_checks_cost"] = (
            f"{(times['gpu_envs collect + policy'] - off_policy) / times['raw loop + policy'] * 100:+.1f} pts"
        )
        row["policy_loop_us"] = round(times["raw loop + policy"] / steps * 1e6, 1)
        row["policy_collect_us"] = round(times["gpu_envs collect + policy"] / steps * 1e6, 1)
        row["policy_collect_overhead"] = _overhead(times["gpu_envs collect + policy"], times["raw loop + policy"])
        rows.append(row)
    return rows


def _result(rows: list[dict], collect_rows: list[dict], device: torch.device) -> dict:
    result = bench_result(f"bench_overhead: plain torch CartPole (no final obs) on {device}, 1 thread", rows, COLUMNS)
    result["collect"] = bench_result(
        f"bench_overhead collect: built-in CartPole-v1 collect vs a plain raw loop on {device}, 1 thread",
        collect_rows,
        COLLECT_COLUMNS,
    )
    return result


def run(quick: bool = False) -> dict:
    """The tables for ``gpu-envs bench``: N in {1, 64, 4096} on CPU (quick: N in {1, 64}, few rounds)."""
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if quick:
        rows = measure([1, 64], steps=50, rounds=3, device=device, warmup=1)
        collect_rows = measure_collect([64], steps=16, rounds=3, device=device, warmup=1)
    else:
        rows = measure([1, 64, 4096], steps=200, rounds=15, device=device)
        collect_rows = measure_collect([64, 4096], steps=64, rounds=15, device=device)
    return _result(rows, collect_rows, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 4096])
    parser.add_argument("--steps", type=int, default=200, help="steps per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--collect-sizes", type=int, nargs="*", default=[64, 4096])
    parser.add_argument("--collect-steps", type=int, default=64, help="T of each collection")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    rows = measure(args.sizes, args.steps, args.rounds, device)
    collect_rows = measure_collect(args.collect_sizes, args.collect_steps, args.rounds, device)
    result = _result(rows, collect_rows, device)
    print(format_table(result["title"], result["rows"], result["columns"]))
    print()
    print(format_table(result["collect"]["title"], result["collect"]["rows"], result["collect"]["columns"]))
    save_json(args.json, {"benchmark": "overhead", "device": str(device), "rows": rows, "collect_rows": collect_rows})


if __name__ == "__main__":
    main()
