"""``to_skrl``: skrl's wrapper contract, exact against the sequential oracle.

The real skrl PPO training run is examples/train_skrl.py (tests/test_train_examples.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

pytest.importorskip("skrl")

from skrl.envs.wrappers.torch import Wrapper

import gpu_envs
from gpu_envs.interop import to_skrl
from tests.fakes import reference_rollout
from tests.isaac_fakes import FakeIsaacDirectEnv, FakeIsaacManagerEnv
from tests.sync_guard import no_sync

N, T = 6, 40
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def test_spaces_are_one_envs_and_signals_are_columns():
    env = to_skrl(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0))
    assert isinstance(env, Wrapper)
    assert isinstance(env.observation_space, spaces.Box) and env.observation_space.shape == (4,)
    assert env.action_space == spaces.Discrete(2) and env.state_space is None
    assert (env.num_envs, env.device) == (4, torch.device("cpu"))
    obs, info = env.reset()
    assert obs.shape == (4, 4) and info == {} and env.state() is None
    obs, reward, terminated, truncated, _ = env.step(torch.ones(4, 1, dtype=torch.int64))  # skrl's categorical layout
    assert obs.shape == (4, 4) and reward.shape == terminated.shape == truncated.shape == (4, 1)
    assert terminated.dtype == truncated.dtype == torch.bool


def test_steps_match_the_sequential_reference():
    """Observations (post-reset: what skrl acts on next), rewards, terminated and truncated, step by step."""
    actions = np.random.default_rng(0).integers(0, 2, size=(N, T))
    expected = reference_rollout(N, actions)
    env = to_skrl(gpu_envs.wrap(FakeIsaacDirectEnv(N, compute_final_obs=True)))
    obs, _ = env.reset()
    np.testing.assert_array_equal(obs.numpy(), expected["observation"][:, 0])
    for t in range(T):
        action = torch.as_tensor(actions[:, t], dtype=torch.float32).unsqueeze(-1)
        obs, reward, terminated, truncated, _ = env.step(action)
        np.testing.assert_array_equal(obs.numpy(), expected["root"][:, t], err_msg=f"obs, step {t}")
        np.testing.assert_array_equal(reward.squeeze(-1).numpy(), expected["reward"][:, t].astype(np.float32))
        np.testing.assert_array_equal(terminated.squeeze(-1).numpy(), expected["terminated"][:, t])
        np.testing.assert_array_equal(truncated.squeeze(-1).numpy(), expected["truncated"][:, t])
    ended = expected["terminated"] | expected["truncated"]
    assert ended.all(axis=0).any() and expected["truncated"].any() and expected["terminated"].any()


def test_a_later_reset_keeps_the_episodes_running():
    env = to_skrl(gpu_envs.wrap(FakeIsaacDirectEnv(N)))
    env.reset()
    stepped, *_ = env.step(torch.zeros(N, 1))
    again, _ = env.reset()  # skrl's trainers call reset() at every train()/eval()
    assert torch.equal(again, stepped) and again[:, 2].tolist() == [1.0] * N


def test_isaac_groups_become_observation_and_state():
    direct = to_skrl(gpu_envs.wrap(FakeIsaacDirectEnv(N, state=True)))
    assert direct.observation_space.shape == (3,) and direct.state_space.shape == (3,)
    obs, _ = direct.reset()
    assert torch.equal(direct.state(), 2 * obs)
    manager = to_skrl(gpu_envs.wrap(FakeIsaacManagerEnv(N)))
    assert isinstance(manager.state_space, spaces.Dict)
    manager.reset()
    for _ in range(3):  # every first episode ends at step 3: Isaac's metrics come along
        obs, _, terminated, truncated, infos = manager.step(torch.zeros(N, 1))
    assert (terminated | truncated).all() and "Episode_Termination/time_out" in infos["log"]
    # skrl flattens a Dict group key by key, sorted: ("counts" [3], "progress" [1])
    assert torch.equal(manager.state()[:, :3], obs) and torch.equal(manager.state()[:, 3], obs[:, 2] / 7)


def test_vector_rewards_are_refused():
    pytest.importorskip("mo_gymnasium")
    import mo_gymnasium  # noqa: F401  (registers the mo- ids)

    env = gpu_envs.make("mo-mountaincarcontinuous-v0", num_envs=2, device="cpu")
    with pytest.raises(gpu_envs.SpecError, match="ScalarizeReward"):
        to_skrl(env)


def test_refuses_what_is_not_a_gpu_envs_env():
    with pytest.raises(gpu_envs.NotAnEnvError, match="to_skrl"):
        to_skrl(object())


@pytest.mark.parametrize("device", DEVICES)
def test_step_never_syncs(device):
    env = to_skrl(gpu_envs.make("CartPole-v1", num_envs=16, device=device, seed=0))
    env.reset()
    env.step(torch.zeros(16, 1, dtype=torch.int64, device=device))  # the first step validates (allowed to sync)
    ended = torch.zeros((), device=device)
    with no_sync():
        for _ in range(100):
            _, _, terminated, truncated, _ = env.step(torch.randint(0, 2, (16, 1), device=device))
            ended += (terminated | truncated).sum()
    assert ended.item() > 0, "the guarded steps covered auto-resets"
