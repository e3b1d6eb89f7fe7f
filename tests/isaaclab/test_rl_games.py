"""rl_games' PPO on the real Isaac Lab direct cartpole through ``to_rl_games(gpu_envs.wrap(env))``.

Isaac Lab's own rl_games agent config for the task (its ``rl_games_direct_ppo_cfg.yaml``,
clipping included), gpu_envs in between instead of Isaac Lab's ``RlGamesVecEnvWrapper``,
and exact time-outs: with ``compute_final_obs`` the stored targets of truncated steps are
``shaped(r) + gamma * V(s_T)`` with the true final observations Isaac Lab returned.
"""

from __future__ import annotations

import contextlib
import copy
import io
from pathlib import Path

import gymnasium as gym
import pytest
import torch
import yaml

import gpu_envs
from gpu_envs.interop import to_rl_games
from tests.isaaclab.cartpoles import adopt, close_live, direct_cfg

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")  # Isaac Lab's own

NUM_ENVS = 64
EPISODE_LENGTH_S = 1.0  # 60 steps: time-outs within a rollout of 32 steps after the first


@pytest.fixture(scope="module")
def vec_env():
    import isaaclab_tasks  # noqa: F401  (registers Isaac-Cartpole-Direct)

    cfg = direct_cfg(num_envs=NUM_ENVS, compute_final_obs=True)
    cfg.episode_length_s = EPISODE_LENGTH_S
    env = adopt(lambda: gpu_envs.wrap(gym.make("Isaac-Cartpole-Direct", cfg=cfg)))
    isaac = yaml.safe_load(Path(agents_folder(), "rl_games_direct_ppo_cfg.yaml").read_text())["params"]
    yield to_rl_games(
        env, clip_observations=isaac["env"]["clip_observations"], clip_actions=isaac["env"]["clip_actions"]
    )
    close_live()


def agents_folder() -> Path:
    import isaaclab_tasks.core.cartpole.agents as agents

    return Path(agents.__file__).parent


def isaac_params(vec, tmp_path, **config) -> dict:
    """Isaac Lab's rl_games config for the direct cartpole, set for this env on the CPU."""
    params = copy.deepcopy(yaml.safe_load((agents_folder() / "rl_games_direct_ppo_cfg.yaml").read_text())["params"])
    params.pop("env")  # the wrapper's clipping, given to to_rl_games
    params["torch_threads"] = 0
    params["config"].update(
        env_name=vec.env_name,
        num_actors=vec.num_envs,
        device="cpu",
        device_name="cpu",
        torch_compile=False,
        train_dir=str(tmp_path),
        minibatch_size=vec.num_envs * params["config"]["horizon_length"] // 4,
        save_frequency=0,
        save_best_after=10**9,
        print_stats=False,
        **config,
    )
    return params


def test_env_info_follows_isaac_labs_wrapper(vec_env):
    info = vec_env.get_env_info()
    assert info["observation_space"].shape == (4,) and info["observation_space"].high.tolist() == [5.0] * 4
    assert (info["action_space"].low.tolist(), info["action_space"].high.tolist()) == ([-1.0], [1.0])
    obs = vec_env.reset()
    assert set(obs) == {"obs"} and obs["obs"].shape == (NUM_ENVS, 4)
    obs, rewards, dones, infos = vec_env.step(torch.full((NUM_ENVS, 1), 3.0))  # clamped to 1
    assert rewards.shape == dones.shape == infos["time_outs"].shape == (NUM_ENVS,)
    assert obs["obs"].abs().max() <= 5.0


@pytest.mark.slow
def test_time_out_targets_use_isaac_labs_true_final_observations(vec_env, tmp_path):
    from rl_games.torch_runner import Runner

    runner, params = Runner(), isaac_params(vec_env, tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        runner.load({"params": params})
        agent = runner.algo_factory.create(runner.algo_name, base_name="run", params=runner.params)
    agent.writer.close()  # rl_games' TensorBoard writer (unused by a rollout; rl_games never closes it)
    vec_env.bootstrap_from(agent)
    finals, rewards, truncations = [], [], []  # per step of the rollout
    step = vec_env.env.step_and_maybe_reset

    def spy(td):  # what Isaac Lab returned: the true final observations (compute_final_obs), clipped as rl_games sees
        td, root = step(td)
        finals.append(td["next", "policy"].clamp(-5, 5).clone())
        rewards.append(td["next", "reward"].view(-1).clone())
        truncations.append(td["next", "truncated"].view(-1).clone())
        return td, root

    vec_env.env.step_and_maybe_reset = spy
    base = vec_env.env.backend.base
    try:
        agent.init_tensors()
        agent.obs = agent.env_reset()
        # an untrained policy drops the pole long before the time limit: start every row near it instead
        # (rl_games' rollouts are 32 steps: each row times out within this one unless the pole falls first)
        base.episode_length_buf[:] = base.max_episode_length - torch.randint(2, 30, (NUM_ENVS,))
        with torch.no_grad():
            batch = agent.play_steps()
    finally:
        del vec_env.env.step_and_maybe_reset
    truncated = torch.stack(truncations)  # [T, N]
    assert truncated.sum() >= NUM_ENVS // 4, "the rollout covered time-outs"
    with torch.no_grad():
        v_final = agent.get_values({"obs": torch.stack(finals).flatten(0, 1)}).view(truncated.shape)
    scale = params["config"]["reward_shaper"]["scale_value"]  # Isaac Lab's: 0.1
    exact = scale * torch.stack(rewards) + agent.gamma * torch.where(truncated, v_final, 0.0)
    stored = agent.experience_buffer.tensor_dict["rewards"][..., 0]
    torch.testing.assert_close(stored, exact, rtol=1e-5, atol=1e-5)
    returns = batch["returns"][:, 0].view(NUM_ENVS, -1).T  # rl_games flattens env-major
    torch.testing.assert_close(returns[truncated], exact[truncated], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_rl_games_runner_trains_the_direct_cartpole(vec_env, tmp_path):
    from rl_games.common.algo_observer import DefaultAlgoObserver
    from rl_games.torch_runner import Runner

    def mean_step_reward(agent, steps: int = 60) -> float:
        obs, total = vec_env.reset(), 0.0
        with torch.no_grad():
            for _ in range(steps):
                mean_action = agent.get_action_values(agent.obs_to_tensors(obs))["mus"]
                obs, rewards, _, _ = vec_env.step(agent.preprocess_actions(mean_action))
                total += rewards.mean().item()
        return total / steps

    class Keep(DefaultAlgoObserver):
        def after_init(self, algo):
            super().after_init(algo)
            self.algo, self.before = algo, mean_step_reward(algo)  # the untrained policy

    keep = Keep()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        runner = Runner(keep)
        with contextlib.redirect_stdout(io.StringIO()):
            runner.load({"params": isaac_params(vec_env, tmp_path, max_epochs=60, mini_epochs=4)})
            vec_env.bootstrap_from(runner)
            runner.run({"train": True, "play": False})
        after = mean_step_reward(keep.algo)
        keep.algo.writer.close()  # rl_games never closes its TensorBoard writer
    finally:
        torch.set_num_threads(threads)
    # per step: +1/60 for staying alive, minus the pole-angle and velocity penalties
    assert after > keep.before + 0.01, (keep.before, after)
