"""bench_simulators' rows for EnvPool, Brax, MuJoCo Playground and ManiSkill3: raw step vs gpu_envs vs their trainer paths.

Each ``<name>_rows(sizes, steps, rounds)`` runs in a process that has the simulator (EnvPool
in the main venv; Brax/Playground and ManiSkill in their cached venvs,
``scripts/simulator_venv.sh brax | maniskill``) and returns one row per task and N, in
the columns of ``benchmarks/bench_simulators.py``. Contenders step their own instance of
the task with the same fixed, smooth actions at the same N:

* ``raw``: the simulator's own batched step as it ships (EnvPool ``pool.step`` -- of the
  very pool gpu_envs wraps: EnvPool's contenders all drive that ONE pool, so they pay
  for the same simulator state and the same worker threads --, Brax's /
  Playground's jitted training env ``VmapWrapper + EpisodeWrapper + AutoResetWrapper``,
  ManiSkill's bare env ``step``), numpy/JAX out, final observations lost or not kept;
* ``gpu_envs``: ``step_and_maybe_reset`` of ``gpu_envs.wrap``/``make``, exact final
  observations, TensorDicts out;
* ``trainer``: the torch path a trainer uses with it -- EnvPool's own loop as CleanRL
  writes it (``pool.step`` then ``torch.as_tensor`` of every output), Brax's
  ``TorchWrapper(VectorGymWrapper)``, Playground's ``RSLRLBraxWrapper``, ManiSkill's
  ``ManiSkillVectorEnv``;
* ``floor``: EnvPool: the pool's step plus ONLY the work the exact TensorDict contract
  needs, in the same run: the action as numpy, ``pool.reset(ids)`` of the rows that ended
  (in the same step, as any exact wrapper must: EnvPool would otherwise ignore their next
  action), their reset observations swapped into a copy of the observations, one
  ``from_numpy`` per leaf (float32 reward, ``[N, 1]`` flags, info entries) and the two
  TensorDicts. ``gpu_envs - floor`` is what gpu_envs spends above it (in points of raw);
  Brax / Playground: the raw jitted training step handed over to torch the cheapest way
  -- the torch action as a numpy view into the jitted call, the observation, reward and
  done read back as zero-copy tensors, the two TensorDicts. Its auto-reset is Brax's
  own (final observations lost, no fresh reset draws): gpu_envs' exact same-step reset
  runs fused in its one jitted call, and ``gpu_envs - floor`` counts it too;
  ManiSkill: the bare env's step plus ManiSkill's own partial reset of the envs that
  ended (``reset(options={"env_idx": ...})``, as ``ManiSkillVectorEnv`` calls it: the
  raw step never resets, any exact auto-reset must), ``[N, 1]`` views and the two
  TensorDicts;
* ``collect`` (EnvPool Pong only): ``gpu_envs.rollout.collect`` per step, against
  gpu_envs' single step (target: within +10%).

Time is the process's CPU time (``time.process_time``, every thread: EnvPool's and XLA's
workers included), interleaved rounds, medians, ``torch.set_num_threads(1)``. EnvPool and
ManiSkill rows also keep every round on the calling thread's clock and on wall time
(``benchmarks.timing.interleave_clocks``) and add ``bench_simulators``' spread columns:
paired per-round overheads ``median [95% CI of the median] (min..max)``, the main-thread extra in %
of the raw step's CPU time (what a wrapper's own Python costs: EnvPool's worker threads,
whose CPU time moves with how long the main thread stays away, are not in it) and a
verdict (met / not met / unresolved). ManiSkill's ``gpu_envs vs trainer`` is what gpu_envs
adds on top of the ``ManiSkillVectorEnv`` it steps.

    python -m benchmarks.simulator_rows --json benchmarks/results/simulators_jax_envpool.json
    python -m benchmarks.simulator_rows --only envpool --sizes 8
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
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
    paired_ratios,
    per_round_us,
    save_json,
    spread,
    spread_columns,
)

REPO = Path(__file__).resolve().parent.parent


def _brief(row: dict) -> dict:
    """A row as printed while the benchmark runs: without its per-round samples (those go to the JSON)."""
    return {k: v for k, v in row.items() if k != "per_round_us"}


COLUMNS = [
    ("simulator", "simulator"),
    ("task", "task"),
    ("N", "N"),
    ("raw_us", "raw us/step"),
    ("gpu_envs_us", "gpu_envs us/step"),
    ("gpu_envs_overhead", "gpu_envs vs raw"),
    ("trainer_us", "trainer path us/step"),
    ("trainer_overhead", "trainer vs raw"),
    ("floor_us", "floor us/step"),
    ("floor_overhead", "floor vs raw"),
    ("gpu_envs_vs_floor", "gpu_envs - floor"),
    ("collect_us", "collect us/step"),
    ("collect_vs_step", "collect vs gpu_envs step"),
    ("resets_per_step", "resets/step"),
    ("target", "target"),
    # per interleaved round, against the raw step of the same round: median [95% CI of the median] (min..max)
    ("gpu_envs_spread", "gpu_envs vs raw per round"),
    ("floor_spread", "floor vs raw per round"),
    ("trainer_spread", "trainer vs raw per round"),
    ("gpu_envs_vs_trainer", "gpu_envs vs trainer per round"),
    ("gpu_envs_floor_pts", "gpu_envs - floor per round, % of raw"),
    ("gpu_envs_thread_pts", "gpu_envs main-thread extra, % of raw"),
    ("floor_thread_pts", "floor main-thread extra, % of raw"),
    ("gpu_envs_wall", "gpu_envs vs raw, wall"),
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


class _TdLoop:
    """gpu_envs' ``step_and_maybe_reset`` in a loop, ``action()`` each step; counts ended rows.

    The transitions are kept and their ended rows counted when asked, after the timing:
    summing ``done`` every step (two torch ops and a nested lookup) would charge the
    benchmark's own bookkeeping to gpu_envs -- about a tenth of an EnvPool CartPole step.
    """

    def __init__(self, env: Any, action: Callable[[], torch.Tensor]) -> None:
        self.env, self.action = env, action
        self.td = env.reset(seed=0)
        self.stepped: list = []

    def __call__(self) -> None:
        self.td.set("action", self.action())
        td, self.td = self.env.step_and_maybe_reset(self.td)
        self.stepped.append(td)

    @property
    def resets_per_step(self) -> float:
        ended = sum(int(td["next", "done"].sum()) for td in self.stepped)
        return round(ended / max(len(self.stepped), 1), 3)


def _cycle(actions: list) -> Callable[[], Any]:
    clock = [0]

    def next_action() -> Any:
        clock[0] += 1
        return actions[clock[0] % len(actions)]

    return next_action


def _smooth(n: int, size: int, scale: float = 0.5, period: int = 64) -> list[np.ndarray]:
    """Slow sinusoids, one phase per row and joint (float32 [n, size])."""
    phase = np.random.default_rng(0).uniform(0, 2 * math.pi, size=(n, size))
    return [(scale * np.sin(0.1 * t + phase)).astype(np.float32) for t in range(period)]


# ------------------------------------------------------------------------- EnvPool
ENVPOOL_TASKS = {"CartPole-v1": {}, "Ant-v4": {}, "Pong-v5": {}}


def _envpool_actions(task: str, n: int) -> list[np.ndarray]:
    if task == "Ant-v4":
        return [a.astype(np.float64) for a in _smooth(n, 8)]
    high = 2 if task == "CartPole-v1" else 6
    rng = np.random.default_rng(1)
    return [rng.integers(0, high, size=n) for _ in range(64)]


def envpool_floor(pool: Any, n: int, action: Callable[[], torch.Tensor], info_names: list[str]) -> Callable[[], None]:
    """EnvPool's step plus only the exact contract's work (the module docstring's ``floor``)."""
    from gpu_envs.utils.tensordicts import new_td, set_entry

    batch, device = torch.Size([n]), torch.device("cpu")
    false = torch.zeros(n, 1, dtype=torch.bool)
    first, _ = pool.reset()
    state = {"td": new_td({"observation": torch.from_numpy(first)}, batch, device)}

    def step() -> None:
        td = state["td"]
        act = action()
        td.set("action", act)
        obs, reward, terminated, truncated, info = pool.step(act.numpy())
        done = terminated | truncated
        root = obs
        if done.any():  # the ended rows start again now, not on the next step
            reset_obs, reset_info = pool.reset(np.flatnonzero(done).astype(np.int32))
            root = obs.copy()
            root[reset_info["env_id"]] = reset_obs
        nxt = {
            "observation": torch.from_numpy(obs),
            "reward": torch.from_numpy(reward.astype(np.float32).reshape(n, 1)),
            "done": torch.from_numpy(done.reshape(n, 1)),
            "terminated": torch.from_numpy(terminated.reshape(n, 1)),
            "truncated": torch.from_numpy(truncated.reshape(n, 1)),
            "final_obs_missing": false,
        }
        for name in info_names:
            nxt[name] = torch.from_numpy(np.asarray(info[name]))
        set_entry(td, "next", new_td(nxt, batch, device))
        state["td"] = new_td(
            {"observation": torch.from_numpy(root), "done": false, "terminated": false, "truncated": false},
            batch,
            device,
        )

    return step


def envpool_rows(sizes: tuple[int, ...], steps: int, rounds: int) -> list[dict]:
    import envpool

    import gpu_envs
    from gpu_envs.rollout import collect

    rows = []
    for task in ENVPOOL_TASKS:
        for n in sizes:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pool = envpool.make(task, env_type="gymnasium", num_envs=n, seed=0)
            actions = _envpool_actions(task, n)
            torch_actions = [torch.as_tensor(a) for a in actions]
            # Every contender drives this ONE pool (gpu_envs wraps it): they all pay for the same
            # simulator state and the same worker threads, whose CPU time varies from one pool
            # instance to the next; their interleaved steps only mix the episodes.
            ours = gpu_envs.wrap(pool, device="cpu")
            # the info entries gpu_envs hands over too (its key names aside)
            floor = envpool_floor(pool, n, _cycle(torch_actions), ours.backend.info_names)
            loop = _TdLoop(ours, _cycle(torch_actions))
            raw_action, trainer_action = _cycle(actions), _cycle(torch_actions)
            # gpu_envs and the floor call the pool's step / reset timed (their own cost is the rest);
            # raw and the trainer loop call the untimed originals
            pool_step = pool.step
            inside = CallClock()
            inside.instrument(pool, "step", "reset")

            def trainer_step(step=pool_step, action=trainer_action) -> None:
                # CleanRL's envpool loop: numpy in, every output to a torch tensor on the device
                obs, reward, terminated, truncated, _ = step(action().numpy())
                torch.as_tensor(obs), torch.as_tensor(reward).view(-1), torch.as_tensor(terminated | truncated)

            contenders: dict[str, Callable[[], object]] = {
                "raw": lambda step=pool_step, action=raw_action: step(action()),
                "gpu_envs": loop,
                "trainer": trainer_step,
                "floor": floor,
            }
            if task == "Pong-v5":
                collected = gpu_envs.make(task, num_envs=n, backend="envpool", device="cpu", seed=0)
                collected.reset(seed=0)
                collect(collected, None, steps=steps)  # allocates the cached buffer
                calls = [0]

                def collect_chunk(env=collected, calls=calls) -> None:
                    # a round calls each contender `steps` times: the first call collects all `steps`
                    # steps, so a round's time per call is collect's time per step
                    if calls[0] % steps == 0:
                        collect(env, None, steps=steps)
                    calls[0] += 1

                contenders["collect"] = collect_chunk
            load = load_average()
            samples = interleave_clocks(
                contenders, steps=steps, rounds=rounds, clocks={**CLOCKS, "inside": inside}, warmup=1
            )
            times = medians(samples["cpu"])
            row = overhead_row(times, simulator="EnvPool 1.2.5 (cpu)", task=task, N=n, target="<= +10% at N=8")
            row |= spread_columns(samples, 1.10, names=("gpu_envs", "floor"))
            row |= own_columns(samples, 1.10, names=("gpu_envs", "floor"))
            row["resets_per_step"] = loop.resets_per_step
            row["rounds"], row["load"] = f"{rounds} x {steps} steps", f"{load}..{load_average()}"
            row["per_round_us"] = per_round_us(samples)  # JSON only
            if "collect" in times:
                row["collect_vs_step"] = f"{times['collect'] / times['gpu_envs'] - 1:+.1%}"
                row.pop("collect_overhead", None)
            rows.append(row)
            print(f"  [envpool] {task} N={n}: {_brief(row)}", file=sys.stderr)
            ours.close()
    return rows


# ------------------------------------------------------------------- Brax / Playground
def _jax_raw(training_env: Any, n: int, size: int, key_per_row: bool) -> Callable[[], None]:
    """The jitted training env's step (auto-reset on), blocking on its observation as a consumer would.

    ``key_per_row``: its reset takes ``[N, 2]`` keys (Playground's ``wrap_for_brax_training``),
    else one key (``brax.envs.create(batch_size=N)`` splits it).
    """
    import jax
    import jax.numpy as jnp

    step = jax.jit(training_env.step)
    key = jax.random.PRNGKey(0)
    state = [jax.jit(training_env.reset)(jax.random.split(key, n) if key_per_row else key)]
    actions = [jnp.asarray(a) for a in _smooth(n, size)]
    action = _cycle(actions)

    def raw() -> None:
        state[0] = step(state[0], action())
        state[0].obs.block_until_ready()

    return raw


def _jax_floor(training_env: Any, n: int, size: int, key_per_row: bool) -> Callable[[], None]:
    """The raw training step plus only the torch handover (the module docstring's Brax ``floor``)."""
    import jax

    from gpu_envs.utils.tensordicts import new_td, set_entry

    step = jax.jit(training_env.step)
    key = jax.random.PRNGKey(0)
    state = [jax.jit(training_env.reset)(jax.random.split(key, n) if key_per_row else key)]
    action = _cycle([torch.as_tensor(a) for a in _smooth(n, size)])
    batch, device = torch.Size([n]), torch.device("cpu")
    false = torch.zeros(n, 1, dtype=torch.bool)
    read = lambda x: torch.from_dlpack(np.asarray(x))  # noqa: E731 - a CPU JAX array's buffer, shared
    tds = [new_td({"observation": read(state[0].obs)}, batch, device)]

    def floor() -> None:
        td = tds[0]
        act = action()
        td.set("action", act)
        state[0] = out = step(state[0], act.numpy())
        obs, done = read(out.obs), read(out.done).bool().view(n, 1)
        nxt = {"observation": obs, "reward": read(out.reward).view(n, 1), "done": done, "terminated": done}
        nxt["truncated"] = nxt["final_obs_missing"] = false
        set_entry(td, "next", new_td(nxt, batch, device))
        tds[0] = new_td({"observation": obs, "done": false, "terminated": false, "truncated": false}, batch, device)

    return floor


def brax_rows(sizes: tuple[int, ...], steps: int, rounds: int) -> list[dict]:
    import brax.envs
    from brax.envs.wrappers import gym as brax_gym
    from brax.envs.wrappers import torch as brax_torch

    import gpu_envs

    rows = []
    for task in ("inverted_pendulum", "ant"):
        for n in sizes:
            size = brax.envs.get_environment(task).action_size
            raw = _jax_raw(brax.envs.create(task, batch_size=n, episode_length=1000), n, size, key_per_row=False)
            ours = gpu_envs.make(f"brax/{task}", num_envs=n, device="cpu")
            loop = _TdLoop(ours, _cycle([torch.as_tensor(a) for a in _smooth(n, size)]))
            trainer = brax_torch.TorchWrapper(
                brax_gym.VectorGymWrapper(brax.envs.create(task, batch_size=n, episode_length=1000)), device="cpu"
            )
            trainer.reset()
            trainer_action = _cycle([torch.as_tensor(a) for a in _smooth(n, size)])
            contenders = {"raw": raw, "gpu_envs": loop, "trainer": lambda t=trainer, a=trainer_action: t.step(a())}
            contenders["floor"] = _jax_floor(brax.envs.create(task, batch_size=n, episode_length=1000), n, size, False)
            times = interleave(contenders, steps=steps, rounds=rounds, warmup=2, timer=time.process_time)
            row = overhead_row(times, simulator="Brax 0.14.2 (jax cpu)", task=task, N=n, target="<= +10% at N=8")
            row["resets_per_step"] = loop.resets_per_step
            rows.append(row)
            print(f"  [brax] {task} N={n}: {_brief(row)}", file=sys.stderr)
    return rows


def playground_rows(sizes: tuple[int, ...], steps: int, rounds: int) -> list[dict]:
    from mujoco_playground import registry, wrapper
    from mujoco_playground._src.wrapper_torch import RSLRLBraxWrapper

    import gpu_envs

    overrides = {"impl": "jax"}
    rows = []
    for task in ("CartpoleBalance",):
        for n in sizes:
            env = registry.load(task, config_overrides=overrides)
            raw = _jax_raw(
                wrapper.wrap_for_brax_training(env, episode_length=1000), n, env.action_size, key_per_row=True
            )
            ours = gpu_envs.make(f"playground/{task}", num_envs=n, device="cpu", config_overrides=overrides)
            loop = _TdLoop(ours, _cycle([torch.as_tensor(a) for a in _smooth(n, env.action_size)]))
            with open(os.devnull, "w") as sink:  # it prints while it compiles
                stdout, sys.stdout = sys.stdout, sink
                try:
                    trainer = RSLRLBraxWrapper(registry.load(task, config_overrides=overrides), n, 0, 1000, 1)
                    trainer.reset()
                finally:
                    sys.stdout = stdout
            trainer_action = _cycle([torch.as_tensor(a) for a in _smooth(n, env.action_size)])
            contenders = {"raw": raw, "gpu_envs": loop, "trainer": lambda t=trainer, a=trainer_action: t.step(a())}
            training = wrapper.wrap_for_brax_training(
                registry.load(task, config_overrides=overrides), episode_length=1000
            )
            contenders["floor"] = _jax_floor(training, n, env.action_size, True)
            times = interleave(contenders, steps=steps, rounds=rounds, warmup=2, timer=time.process_time)
            row = overhead_row(
                times, simulator="MuJoCo Playground 0.2.0 (mjx jax cpu)", task=task, N=n, target="<= +10% at N=8"
            )
            row["resets_per_step"] = loop.resets_per_step
            rows.append(row)
            print(f"  [playground] {task} N={n}: {_brief(row)}", file=sys.stderr)
    return rows


# ----------------------------------------------------------------------- ManiSkill
def maniskill_floor(env: Any, action: Callable[[], torch.Tensor]) -> Callable[[], None]:
    """The bare env's step plus only what the exact TensorDict contract needs (the module docstring's ``floor``).

    ManiSkill's own partial reset of the ended envs (``reset(options={"env_idx": ...})``, as
    ``ManiSkillVectorEnv`` calls it) -- the raw step never resets: a PickCube episode is 50
    steps and its reset costs ManiSkill a few steps' worth --, the step's observation kept
    as the final one, the caller's ``td.set("action")``, ``[N, 1]`` reward and flags and
    the two TensorDicts, as EnvPool's floor.
    """
    from gpu_envs.utils.tensordicts import new_td, set_entry

    first, _ = env.reset(seed=0)
    n = first.shape[0]
    batch, device = torch.Size([n]), first.device
    false = torch.zeros(n, 1, dtype=torch.bool)
    state = {"td": new_td({"observation": first}, batch, device)}

    def step() -> None:
        td = state["td"]
        act = action()
        td.set("action", act)
        obs, reward, terminated, truncated, _ = env.step(act)
        done = terminated | truncated
        root = obs
        if done.any():  # ManiSkill's observations are fresh tensors: obs stays the final one
            root, _ = env.reset(options={"env_idx": done.nonzero().view(-1)})
        nxt = {
            "observation": obs,
            "reward": reward.view(n, 1),
            "done": done.view(n, 1),
            "terminated": terminated.view(n, 1),
            "truncated": truncated.view(n, 1),
            "final_obs_missing": false,
        }
        set_entry(td, "next", new_td(nxt, batch, device))
        state["td"] = new_td(
            {"observation": root, "done": false, "terminated": false, "truncated": false}, batch, device
        )

    return step


def maniskill_rows(sizes: tuple[int, ...], steps: int, rounds: int) -> list[dict]:
    icd = os.path.join(sys.prefix, "lavapipe", "lvp_icd.json")
    if os.path.exists(icd):
        os.environ.setdefault("VK_ICD_FILENAMES", icd)
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401 - registers the ids
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

    import gpu_envs

    kw = {"num_envs": 1, "obs_mode": "state", "sim_backend": "physx_cpu", "render_backend": "none"}
    rows = []
    for task in ("PickCube-v1",):
        bare = gym.make(task, **kw)
        bare.reset(seed=0)
        vector = ManiSkillVectorEnv(gym.make(task, **kw))
        vector.reset(seed=0)
        # the simulator's calls inside gpu_envs and ManiSkillVectorEnv, timed: their own cost is the rest
        inside = CallClock()
        inside.instrument(vector._env, "step", "reset")
        bare_of_ours = gym.make(task, **kw)
        inside.instrument(bare_of_ours, "step", "reset")
        ours = gpu_envs.wrap(bare_of_ours)
        actions = [torch.as_tensor(a) for a in _smooth(1, 8)]
        loop = _TdLoop(ours, _cycle(actions))
        raw_action, vector_action = _cycle(actions), _cycle(actions)
        floor_env = gym.make(task, **kw)
        floor = maniskill_floor(floor_env, _cycle(actions))
        inside.instrument(floor_env, "step", "reset")
        contenders = {
            "raw": lambda a=raw_action, env=bare: env.step(a()),
            "gpu_envs": loop,
            "trainer": lambda a=vector_action, env=vector: env.step(a()),
            "floor": floor,
        }
        load = load_average()
        samples = interleave_clocks(
            contenders, steps=steps, rounds=rounds, clocks={**CLOCKS, "inside": inside}, warmup=1
        )
        row = overhead_row(
            medians(samples["cpu"]), simulator="ManiSkill3 3.0.1 (physx cpu)", task=task, N=1, target="<= +5%"
        )
        row |= spread_columns(samples, 1.05, names=("gpu_envs", "floor", "trainer"))
        row |= own_columns(samples, 1.05, names=("gpu_envs", "floor", "trainer"))
        # gpu_envs steps a ManiSkillVectorEnv (auto-reset, final observations kept): the trainer
        # contender is that very wrapper, so this is what gpu_envs adds on top of it
        row["gpu_envs_vs_trainer"] = spread(paired_ratios(samples["cpu"], "gpu_envs", baseline="trainer"))
        row["resets_per_step"] = loop.resets_per_step
        row["rounds"], row["load"] = f"{rounds} x {steps} steps", f"{load}..{load_average()}"
        row["per_round_us"] = per_round_us(samples)  # JSON only
        rows.append(row)
        print(f"  [maniskill] {task} N=1: {_brief(row)}", file=sys.stderr)
    return rows


# ----------------------------------------------------------------------- running
# name -> (package that must import, rows function, venv of scripts/simulator_venv.sh, or None for the main venv)
SIMULATORS: dict[str, tuple[str, Callable[..., list[dict]], str | None]] = {
    "envpool": ("envpool", envpool_rows, None),
    "brax": ("brax", brax_rows, "brax"),
    "playground": ("mujoco_playground", playground_rows, "brax"),
    "maniskill": ("mani_skill", maniskill_rows, "maniskill"),
}


def _venv(name: str) -> Path | None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "simulator_venv.sh"), name], capture_output=True, text=True, timeout=7200
    )
    lines = done.stdout.strip().splitlines()
    path = Path(lines[-1]) if done.returncode == 0 and lines else None
    return path if path is not None and (path / ".complete").exists() else None


def rows_for(name: str, sizes: tuple[int, ...], steps: int, rounds: int) -> tuple[list[dict], str | None]:
    package, rows, venv_name = SIMULATORS[name]
    if importlib.util.find_spec(package) is not None:
        return rows(sizes, steps, rounds), None
    venv = _venv(venv_name) if venv_name else None
    if venv is None:
        return [], f"{name} skipped: {package} is not installed here" + (
            f" (scripts/simulator_venv.sh {venv_name})" if venv_name else ""
        )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [
            str(venv / "bin" / "python"),
            "-m",
            "benchmarks.simulator_rows",
            "--only",
            name,
            "--in-process",
            "--json",
            str(out),
        ]
        cmd += ["--sizes", *map(str, sizes), "--steps", str(steps), "--rounds", str(rounds)]
        done = subprocess.run(
            cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=7200
        )
        sys.stderr.write(done.stderr[-4000:])
        if done.returncode != 0 or not out.exists():
            return [], f"{name} failed (exit {done.returncode})"
        return json.loads(out.read_text())["rows"], None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(SIMULATORS), default=None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--in-process", action="store_true", help="run here (a simulator venv's python)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = tuple(args.sizes)
    names = args.only or list(SIMULATORS)
    if args.in_process:
        rows = [row for name in names for row in SIMULATORS[name][1](sizes, args.steps, args.rounds)]
        save_json(args.json, {"benchmark": "simulators", "rows": rows})
        return
    rows, notes = [], []
    for name in names:
        found, note = rows_for(name, sizes, args.steps, args.rounds)
        rows += found
        notes += [note] if note else []
    title = "simulators: raw step vs gpu_envs vs the trainer path (cpu, process CPU time)"
    print(
        format_table(
            title + (" -- " + "; ".join(notes) if notes else ""),
            rows,
            [c for c in COLUMNS if any(c[0] in r for r in rows)],
        )
    )
    save_json(args.json, {"benchmark": "simulators", "device": "cpu", "rows": rows, "notes": notes})


if __name__ == "__main__":
    main()
