"""rsl_rl's OnPolicyRunner on the real Isaac Lab direct cartpole through ``to_rsl_rl(gpu_envs.wrap(env))``.

The path a robotics user takes end to end: Isaac Lab's own task, Isaac Lab's own rsl_rl
agent config for it (converted for the installed rsl-rl-lib the way Isaac Lab's train
script does), gpu_envs in between instead of Isaac Lab's RslRlVecEnvWrapper.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io

import gymnasium as gym
import pytest
import torch

import gpu_envs
from gpu_envs.interop import to_rsl_rl
from tests.example_files import load_example
from tests.isaaclab.cartpoles import adopt, close_live, direct_cfg

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")  # Isaac Lab's own

NUM_ENVS = 256
EPISODE_LENGTH_S = 2.0  # 120 steps: long enough to see balancing, short enough for time-outs


@pytest.fixture(scope="module")
def vec_env():
    import isaaclab_tasks  # noqa: F401  (registers Isaac-Cartpole-Direct)

    cfg = direct_cfg(num_envs=NUM_ENVS)
    cfg.episode_length_s = EPISODE_LENGTH_S
    env = adopt(lambda: gpu_envs.wrap(gym.make("Isaac-Cartpole-Direct", cfg=cfg)))
    yield to_rsl_rl(env)
    close_live()


def test_contract_reads_and_writes_isaac_labs_own_buffers(vec_env):
    base = vec_env.env.backend.base
    assert (vec_env.num_envs, vec_env.num_actions, vec_env.device) == (NUM_ENVS, 1, torch.device("cpu"))
    assert vec_env.max_episode_length == base.max_episode_length > 100
    assert vec_env.cfg is base.cfg
    assert list(vec_env.get_observations().keys()) == ["policy"]
    assert vec_env.episode_length_buf is base.episode_length_buf
    # init_at_random_ep_len's write moves Isaac Lab's own truncation: row 1 times out at once
    length = torch.zeros(NUM_ENVS, dtype=torch.long)
    length[1] = vec_env.max_episode_length - 1
    vec_env.episode_length_buf = length
    obs, rewards, dones, extras = vec_env.step(torch.zeros(NUM_ENVS, 1))
    assert extras["time_outs"][1] and not extras["time_outs"][0]
    assert dones[1] == 1 and rewards.shape == dones.shape == (NUM_ENVS,) and obs["policy"].shape == (NUM_ENVS, 4)
    assert "Metrics/success_rate" in extras["log"]


@pytest.mark.slow
def test_on_policy_runner_trains_the_direct_cartpole(vec_env):
    from isaaclab_rl.rsl_rl import handle_deprecated_rsl_rl_cfg
    from isaaclab_tasks.core.cartpole.agents.rsl_rl_ppo_cfg import CartpoleDirectPPORunnerCfg
    from rsl_rl.runners import OnPolicyRunner

    mean_step_reward = load_example("train_rsl_rl").mean_step_reward

    agent_cfg = handle_deprecated_rsl_rl_cfg(CartpoleDirectPPORunnerCfg(), importlib.metadata.version("rsl-rl-lib"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        with contextlib.redirect_stdout(io.StringIO()):
            runner = OnPolicyRunner(vec_env, agent_cfg.to_dict(), log_dir=None, device="cpu")
            before = mean_step_reward(vec_env, runner.get_inference_policy(), steps=60)
            runner.learn(num_learning_iterations=12, init_at_random_ep_len=True)
        after = mean_step_reward(vec_env, runner.get_inference_policy(), steps=60)
    finally:
        torch.set_num_threads(threads)
    # per step: +1/60 for staying alive, minus the pole-angle and velocity penalties
    assert after > before + 0.01, (before, after)
