"""How wrong each trainer's time-out targets are, and whether exact ones learn better.

Part 1, value-target error. For each trainer (rsl_rl, skrl PPO, rl_games) on built-in
Pendulum-v1 (200-step limit) and CartPole-v1 (500-step limit), briefly trained first so
that its critic means something, one more rollout is collected with real time-outs (each
row's step counter starts close to the limit, as rsl_rl's ``init_at_random_ep_len`` does)
and the trainer's own stored value target (its return) of every truncated step is
compared with the exact one, ``r + gamma * V(s_T)``, evaluated with the same critic
(snapshot taken before the rollout) on the true final observation that gpu_envs recorded.
Reported: the mean absolute error, with the library's default and with gpu_envs'
``bootstrap_from``, next to the mean |V| for scale. Where isaaclab is importable (run it
with the Isaac Lab tier's venv, ``scripts/isaaclab_venv.sh``), Isaac Lab's direct cartpole
(``compute_final_obs``) gets rsl_rl and rl_games rows too; trainers missing from the venv
get a row that says so. mjlab is not covered here.

Part 2, learning. rsl_rl's PPO on Pendulum-v1 cut at 50 steps (a time-out every 50 steps
on every row), library default vs ``bootstrap_from``, over several seeds; the final policy
is evaluated (its mean action) on the standard 200-step Pendulum-v1. Reported as mean ±
std of the final return, and the difference in units of its standard error.

Run::

    python -m benchmarks.bench_bootstrap                 # ~10 min on 2 loaded CPU cores
    python -m benchmarks.bench_bootstrap --quick         # a smoke run (tests use it)
    python -m benchmarks.bench_bootstrap --json benchmarks/results/bootstrap.json
    $(scripts/isaaclab_venv.sh | tail -n 1)/bin/python -m benchmarks.bench_bootstrap --errors-only   # + Isaac Lab
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import io
import math
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from tensordict import TensorDict

import gpu_envs
from benchmarks.timing import format_table, save_json
from gpu_envs.rollout import collect

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example(name: str) -> ModuleType:
    """``examples/<name>.py`` as a module (the rl_games config is the example's)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorder:
    """Spies on ``env.step_and_maybe_reset``: the true next/final observation, reward and truncation of each step."""

    def __init__(self, env: Any, obs_key: str) -> None:
        self.env, self.obs_key, self.steps = env, obs_key, []
        self._step = env.step_and_maybe_reset
        env.step_and_maybe_reset = self

    def __call__(self, td):
        td, root = self._step(td)
        nxt = td["next"]
        observation = nxt[self.obs_key].clone()
        self.steps.append((observation, nxt["reward"].view(-1).clone(), nxt["truncated"].view(-1).clone()))
        return td, root

    def stack(self, last: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(final obs [T, N, obs], reward [T, N], truncated [T, N])`` of the last ``last`` steps."""
        obs, reward, truncated = zip(*self.steps[-last:], strict=True)
        return torch.stack(obs), torch.stack(reward), torch.stack(truncated)

    def close(self) -> None:
        del self.env.step_and_maybe_reset


class Builtin:
    """A built-in env id: a fresh env per run; its step counter (``elapsed_steps``) decides truncation."""

    obs_key, clip = "observation", None

    def __init__(self, env_id: str) -> None:
        self.name = env_id
        self.discrete = env_id.startswith("CartPole")

    def make(self, num_envs: int, seed: int, **kwargs: Any) -> Any:
        return gpu_envs.make(self.name, num_envs=num_envs, device="cpu", seed=seed, **kwargs)

    @staticmethod
    def near_time_limit(env: Any, steps: int) -> None:
        """Start every row's step counter within ``steps`` of the limit, so each times out in the next rollout."""
        builtin = env.backend.env
        builtin.elapsed_steps = builtin.max_episode_steps - torch.randint(1, steps, (env.num_envs,))


class IsaacCartpole:
    """Isaac Lab's direct cartpole on the CPU with ``compute_final_obs`` (one simulation per process: built once)."""

    name, obs_key, discrete = "Isaac-Cartpole-Direct", "policy", False
    clip = (5.0, 1.0)  # Isaac Lab's rl_games config: clip_observations, clip_actions
    _env: Any = None

    def make(self, num_envs: int, seed: int, **kwargs: Any) -> Any:
        if IsaacCartpole._env is None:
            import gymnasium

            from tests.isaaclab.cartpoles import adopt, direct_cfg  # the tier's CPU configuration and assets

            cfg = direct_cfg(num_envs=num_envs, compute_final_obs=True)
            cfg.episode_length_s = 2.0
            IsaacCartpole._env = adopt(lambda: gpu_envs.wrap(gymnasium.make("Isaac-Cartpole-Direct", cfg=cfg)))
        return IsaacCartpole._env

    @staticmethod
    def near_time_limit(env: Any, steps: int) -> None:
        base = env.backend.base
        base.episode_length_buf[:] = base.max_episode_length - torch.randint(1, steps, (env.num_envs,))


def target_error(returns: torch.Tensor, exact: torch.Tensor, truncated: torch.Tensor, values: torch.Tensor) -> dict:
    """MAE of the stored targets on the truncated rows, their count, and mean |V| for scale."""
    rows = truncated.bool()
    return {
        "time_outs": int(rows.sum()),
        "mean_abs_v": round(values[rows].abs().mean().item(), 3),
        "mae": (returns[rows] - exact[rows]).abs().mean().item(),
    }


# ---------------------------------------------------------------------------------------------- rsl_rl
RSL_RL_CFG = {
    "save_interval": 10**6,
    "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
    "algorithm": {"class_name": "PPO", "learning_rate": 1e-3, "gamma": 0.95, "lam": 0.95, "entropy_coef": 0.0},
    "actor": {
        "class_name": "MLPModel",
        "hidden_dims": [64, 64],
        "obs_normalization": True,
        "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0},
    },
    "critic": {"class_name": "MLPModel", "hidden_dims": [64, 64], "obs_normalization": True},
}


def rsl_rl_runner(source: Any, num_envs: int, steps: int, seed: int, exact: bool, **make: Any):
    from rsl_rl.runners import OnPolicyRunner

    from gpu_envs.interop import to_rsl_rl

    torch.manual_seed(seed)
    vec = to_rsl_rl(source.make(num_envs, seed, **make))
    with contextlib.redirect_stdout(io.StringIO()):
        runner = OnPolicyRunner(vec, {**copy.deepcopy(RSL_RL_CFG), "num_steps_per_env": steps}, log_dir=None)
    if exact:
        vec.bootstrap_from(runner)
    return vec, runner


def rsl_rl_error(source: Any, exact: bool, quick: bool, seed: int = 0) -> dict:
    n, steps = (32, 16) if quick else (128, 32)
    vec, runner = rsl_rl_runner(source, n, steps, seed, exact)
    with contextlib.redirect_stdout(io.StringIO()):
        runner.learn(2 if quick else 15, init_at_random_ep_len=True)  # a critic worth the name
        critic = copy.deepcopy(runner.alg.critic)
        source.near_time_limit(vec.env, steps)
        recorder = Recorder(vec.env, source.obs_key)
        runner.learn(1)
    recorder.close()
    final, reward, truncated = recorder.stack(steps)
    with torch.no_grad():
        v = critic(TensorDict({"policy": final.flatten(0, 1)}, batch_size=[final.shape[0] * n])).view(steps, n)
    gamma = runner.alg.gamma
    exact_target = reward + gamma * v
    return target_error(runner.alg.storage.returns[..., 0], exact_target, truncated, v)


# ---------------------------------------------------------------------------------------------- skrl
def skrl_error(source: Any, mode: str, quick: bool, seed: int = 0) -> dict:
    """``mode``: "default" (time_limit_bootstrap=False), "time_limit_bootstrap" (skrl's option) or "exact"."""
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import CategoricalMixin, DeterministicMixin, GaussianMixin, Model
    from skrl.trainers.torch import SequentialTrainer, SequentialTrainerCfg

    from gpu_envs.interop import to_skrl

    discrete = source.discrete
    n, steps = (32, 16) if quick else (128, 32)
    torch.manual_seed(seed)
    env = to_skrl(source.make(n, seed))

    def net(n_out: int) -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(env.observation_space.shape[0], 64), torch.nn.Tanh(), torch.nn.Linear(64, n_out)
        )

    class Policy(CategoricalMixin if discrete else GaussianMixin, Model):
        def __init__(self) -> None:
            Model.__init__(self, observation_space=env.observation_space, action_space=env.action_space)
            (CategoricalMixin if discrete else GaussianMixin).__init__(self)
            self.net = net(self.num_actions)
            self.log_std = torch.nn.Parameter(torch.zeros(1))

        def compute(self, inputs, role):
            out = self.net(inputs["observations"])
            return (out, {}) if discrete else (out, {"log_std": self.log_std})

    class Value(DeterministicMixin, Model):
        def __init__(self) -> None:
            Model.__init__(self, observation_space=env.observation_space, action_space=env.action_space)
            DeterministicMixin.__init__(self)
            self.net = net(1)

        def compute(self, inputs, role):
            return self.net(inputs["observations"]), {}

    cfg = PPO_CFG(rollouts=steps, learning_epochs=4, mini_batches=4, discount_factor=0.99, learning_rate=1e-3)
    cfg.time_limit_bootstrap = mode == "time_limit_bootstrap"
    cfg.experiment.write_interval = cfg.experiment.checkpoint_interval = 0
    agent = PPO(
        models={"policy": Policy(), "value": Value()},
        memory=RandomMemory(memory_size=steps, num_envs=n),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device="cpu",
        cfg=cfg,
    )
    if mode == "exact":
        env.bootstrap_from(agent)

    def train(rollouts: int) -> None:
        trainer_cfg = SequentialTrainerCfg(
            timesteps=rollouts * steps, headless=True, disable_progressbar=True, close_environment_at_exit=False
        )
        SequentialTrainer(cfg=trainer_cfg, env=env, agents=agent).train()

    env.reset()
    with contextlib.redirect_stdout(io.StringIO()):
        train(2 if quick else 15)
        value = copy.deepcopy(agent.value)
        source.near_time_limit(env.env, steps)
        recorder = Recorder(env.env, source.obs_key)
        train(1)
    recorder.close()
    final, reward, truncated = recorder.stack(steps)
    with torch.no_grad():
        v, _ = value.act({"observations": final.flatten(0, 1), "states": None}, role="value")
    v = v.view(steps, n)
    exact_target = reward + cfg.discount_factor * v
    return target_error(agent.memory.get_tensor_by_name("returns")[..., 0], exact_target, truncated, v)


# ---------------------------------------------------------------------------------------------- rl_games
def rl_games_error(source: Any, exact: bool, quick: bool, seed: int = 0) -> dict:
    from rl_games.torch_runner import Runner

    from gpu_envs.interop import to_rl_games

    discrete = source.discrete
    n, steps = (32, 16) if quick else (128, 32)
    torch.manual_seed(seed)
    clip_obs, clip_actions = source.clip or (None, None)
    vec = to_rl_games(
        source.make(n, seed), name="bench_bootstrap", clip_observations=clip_obs, clip_actions=clip_actions
    )
    params = copy.deepcopy(example("train_rl_games").PARAMS)
    params["seed"] = seed
    params["config"].update(
        env_name=vec.env_name, num_actors=n, horizon_length=steps, minibatch_size=n * steps // 4, gamma=0.99
    )
    if discrete:
        params["algo"]["name"], params["model"]["name"] = "a2c_discrete", "discrete_a2c"
        params["network"]["space"] = {"discrete": {}}
    with tempfile.TemporaryDirectory() as runs, contextlib.redirect_stdout(io.StringIO()):
        params["config"]["train_dir"] = runs
        runner = Runner()
        runner.load({"params": params})
        agent = runner.algo_factory.create(runner.algo_name, base_name="run", params=runner.params)
        agent.writer.close()
        if exact:
            vec.bootstrap_from(agent)
        agent.init_tensors()
        agent.obs = agent.env_reset()
        for _ in range(2 if quick else 15):  # rl_games' own epochs: a critic worth the name
            agent.train_epoch()
        source.near_time_limit(vec.env, steps)
        recorder = Recorder(vec.env, source.obs_key)
        with torch.no_grad():
            batch = agent.play_steps()
    recorder.close()
    final, reward, truncated = recorder.stack(steps)
    if clip_obs is not None:
        final = final.clamp(-clip_obs, clip_obs)  # what the adapter hands rl_games
    with torch.no_grad():
        v = agent.get_values({"obs": final.flatten(0, 1)}).view(steps, n)
    scale = params["config"]["reward_shaper"]["scale_value"]
    exact_target = scale * reward + agent.gamma * v
    returns = batch["returns"][:, 0].view(n, steps).T  # rl_games flattens env-major
    return target_error(returns, exact_target, truncated, v)


def error_rows(quick: bool) -> list[dict]:
    """One row per (trainer, env): the MAE of its time-out targets with the library default and with bootstrap_from.

    Built-in Pendulum-v1 and CartPole-v1 always; Isaac Lab's direct cartpole where isaaclab is installed
    (run this from the tier's venv); a trainer that is not installed gets a row that says so.
    """
    sources: list[Any] = [Builtin("Pendulum-v1"), Builtin("CartPole-v1")]
    if importlib.util.find_spec("isaaclab") is not None:
        sources.append(IsaacCartpole())
    cases: list[tuple[str, str, Any, Callable[[bool], dict]]] = []
    for source in sources:
        if not source.discrete:
            cases.append(("rsl_rl PPO", "rsl_rl", source, lambda exact, s=source: rsl_rl_error(s, exact, quick)))
        cases.append(("rl_games PPO", "rl_games", source, lambda exact, s=source: rl_games_error(s, exact, quick)))
        if isinstance(source, Builtin):
            cases += [
                (
                    "skrl PPO",
                    "skrl",
                    source,
                    lambda exact, s=source: skrl_error(s, "exact" if exact else "default", quick),
                ),
                (
                    "skrl PPO time_limit_bootstrap",
                    "skrl",
                    source,
                    lambda exact, s=source: skrl_error(s, "exact" if exact else "time_limit_bootstrap", quick),
                ),
            ]
    rows = []
    for trainer, library, source, measure in cases:
        if importlib.util.find_spec(library) is None:
            rows.append(
                {"trainer": trainer, "env": source.name, "mae_default": "n/a", "mae_exact": f"{library} not installed"}
            )
            continue
        default, exact = measure(False), measure(True)
        rows.append(
            {
                "trainer": trainer,
                "env": source.name,
                "time_outs": default["time_outs"],
                "mean_abs_v": default["mean_abs_v"],
                "mae_default": f"{default['mae']:.4f}",
                "mae_exact": f"{exact['mae']:.1e}",
            }
        )
    rows.append(
        {
            "trainer": "rsl_rl PPO",
            "env": "CartPole-v1",
            "mae_default": "n/a",
            "mae_exact": "n/a (discrete actions: rsl_rl has no policy for them)",
        }
    )
    return rows


# ---------------------------------------------------------------------------------------------- learning
def evaluate_pendulum(policy: Callable[[TensorDict], torch.Tensor], seed: int) -> float:
    """Mean 200-step return of ``policy``'s mean action on the standard Pendulum-v1 (64 fresh episodes)."""
    env = gpu_envs.make("Pendulum-v1", num_envs=64, device="cpu", seed=seed)
    with torch.no_grad():
        traj = collect(env, lambda td: td.set("action", policy(TensorDict({"policy": td["observation"]}, [64]))), 200)
    return traj["next", "reward"].sum(dim=1).mean().item()


def learning_run(seed: int, exact: bool, quick: bool, limit: int) -> float:
    n, steps, iterations = (32, 16, 3) if quick else (128, 32, 30)
    _, runner = rsl_rl_runner(Builtin("Pendulum-v1"), n, steps, seed, exact, max_episode_steps=limit)
    with contextlib.redirect_stdout(io.StringIO()):
        runner.learn(iterations, init_at_random_ep_len=True)
    return evaluate_pendulum(runner.get_inference_policy(), seed=10_000 + seed)


def learning_rows(quick: bool, seeds: int, limit: int) -> tuple[list[dict], str]:
    results: dict[str, list[float]] = {"rsl_rl default (V(s_t))": [], "gpu_envs bootstrap_from (V(s_T))": []}
    for seed in range(seeds):  # interleaved, so that machine load hits both alike
        for name, exact in zip(results, (False, True), strict=True):
            results[name].append(learning_run(seed, exact, quick, limit))
    rows = []
    for name, finals in results.items():
        std = statistics.stdev(finals) if len(finals) > 1 else 0.0
        rows.append(
            {
                "variant": name,
                "seeds": len(finals),
                "final_return": f"{statistics.mean(finals):.1f} ± {std:.1f}",
                "per_seed": " ".join(f"{x:.0f}" for x in finals),
            }
        )
    a, b = results.values()
    spread = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) if len(a) > 1 else math.nan
    diff = statistics.mean(b) - statistics.mean(a)
    z = diff / spread if spread and spread > 0 else math.nan
    verdict = (
        "within noise (|diff| < 2 standard errors)" if not abs(z) >= 2 else "beyond noise (|diff| >= 2 standard errors)"
    )
    return rows, f"exact - default: {diff:+.1f} ({z:+.2f} standard errors): {verdict}"


ERROR_COLUMNS = [
    ("trainer", "trainer"),
    ("env", "env"),
    ("time_outs", "time-outs"),
    ("mean_abs_v", "mean |V|"),
    ("mae_default", "MAE library default"),
    ("mae_exact", "MAE gpu_envs exact"),
]
LEARNING_COLUMNS = [
    ("variant", "variant"),
    ("seeds", "seeds"),
    ("final_return", "final return"),
    ("per_seed", "per seed"),
]


def run(quick: bool = False, seeds: int | None = None, limit: int = 50, learning: bool = True) -> dict:
    torch.set_num_threads(1)
    seeds = seeds or (2 if quick else 5)
    result = {"errors": {"title": "value targets of truncated steps vs r + gamma * V(s_T) (same critic)"}}
    result["errors"]["rows"] = error_rows(quick)
    if learning:
        rows, verdict = learning_rows(quick, seeds, limit)
        result["learning"] = {
            "title": f"rsl_rl PPO, Pendulum-v1 cut at {limit} steps; final return on the 200-step task",
            "rows": rows,
            "verdict": verdict,
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs (a smoke test, not a measurement)")
    parser.add_argument("--seeds", type=int, default=None, help="learning runs per variant (default 5; 2 quick)")
    parser.add_argument("--limit", type=int, default=50, help="Pendulum's time limit in the learning runs")
    parser.add_argument("--errors-only", action="store_true", help="the target errors only, no learning runs")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    result = run(args.quick, args.seeds, args.limit, learning=not args.errors_only)
    print(format_table(result["errors"]["title"], result["errors"]["rows"], ERROR_COLUMNS))
    if "learning" in result:
        print()
        print(format_table(result["learning"]["title"], result["learning"]["rows"], LEARNING_COLUMNS))
        print(result["learning"]["verdict"])
    save_json(args.json, {"benchmark": "bootstrap", "device": "cpu", **result})


if __name__ == "__main__":
    main()
