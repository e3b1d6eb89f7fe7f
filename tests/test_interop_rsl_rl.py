"""``to_rsl_rl``: rsl_rl's VecEnv contract, exact against the sequential oracle.

The real OnPolicyRunner training run is examples/train_rsl_rl.py (tests/test_train_examples.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("rsl_rl")

from rsl_rl.env import VecEnv

import gpu_envs
from gpu_envs.interop import to_rsl_rl
from gpu_envs.transforms import RewardScale, ScalarizeReward, TransformedEnv
from tests.fakes import reference_rollout
from tests.isaac_fakes import FakeIsaacDirectEnv, FakeIsaacManagerEnv
from tests.sync_guard import no_sync

N, T = 6, 40
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _actions(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, size=(N, T))


@pytest.mark.parametrize("compute_final_obs", [True, False])
def test_steps_match_the_sequential_reference(compute_final_obs):
    """Observations (post-reset, the next step's input), rewards, dones and time_outs, step by step."""
    actions = _actions()
    expected = reference_rollout(N, actions)
    env = to_rsl_rl(gpu_envs.wrap(FakeIsaacDirectEnv(N, compute_final_obs=compute_final_obs)))
    assert isinstance(env, VecEnv)
    obs = env.get_observations()
    assert list(obs.keys()) == ["policy"] and obs.batch_size == (N,)
    np.testing.assert_array_equal(obs["policy"].numpy(), expected["observation"][:, 0])
    for t in range(T):
        action = torch.as_tensor(actions[:, t], dtype=torch.float32).unsqueeze(-1)
        obs, rewards, dones, extras = env.step(action)
        assert rewards.shape == dones.shape == extras["time_outs"].shape == (N,)
        np.testing.assert_array_equal(obs["policy"].numpy(), expected["root"][:, t], err_msg=f"obs, step {t}")
        np.testing.assert_array_equal(rewards.numpy(), expected["reward"][:, t].astype(np.float32))
        np.testing.assert_array_equal(dones.numpy(), expected["terminated"][:, t] | expected["truncated"][:, t])
        np.testing.assert_array_equal(extras["time_outs"].numpy(), expected["truncated"][:, t])
        assert torch.equal(env.get_observations()["policy"], obs["policy"])
        np.testing.assert_array_equal(env.episode_length_buf.numpy(), expected["root"][:, t, 2])
    ended = expected["terminated"] | expected["truncated"]
    assert ended.all(axis=0).any() and expected["truncated"].any() and expected["terminated"].any()


def test_isaac_groups_pass_through_and_episode_metrics_reach_the_log():
    env = to_rsl_rl(gpu_envs.wrap(FakeIsaacManagerEnv(N)))
    assert set(env.get_observations().keys()) == {"policy", "critic"}
    for _ in range(3):  # every first episode ends at step 3
        _, _, dones, extras = env.step(torch.zeros(N, 1))
    assert dones.all()
    assert "Episode_Termination/time_out" in extras["log"]
    assert env.cfg is env.env.backend.base.cfg


def test_builtin_env_contract_and_its_own_time_limit():
    env = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0))
    assert (env.num_envs, env.num_actions, env.device, env.max_episode_length) == (4, 1, torch.device("cpu"), 200)
    obs = env.get_observations()
    assert list(obs.keys()) == ["policy"] and obs["policy"].shape == (4, 3)
    for t in range(1, 201):
        _, _, dones, extras = env.step(torch.zeros(4, 1))
        assert bool(extras["time_outs"].all()) == (t == 200) == bool(dones.all())
        assert env.episode_length_buf.tolist() == [t % 200] * 4
    assert dones.dtype == torch.long and extras["time_outs"].dtype == torch.bool


def test_writing_episode_length_buf_moves_the_builtin_env_truncation():
    """rsl_rl's init_at_random_ep_len: the written lengths decide when each running episode is truncated."""
    env = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0))
    env.episode_length_buf = torch.tensor([0, 150, 199, 10])
    truncated_at = {}
    for t in range(1, 201):
        _, _, _, extras = env.step(torch.zeros(4, 1))
        for row in extras["time_outs"].nonzero().flatten().tolist():
            truncated_at.setdefault(row, t)
    assert truncated_at == {0: 200, 1: 50, 2: 1, 3: 190}


def test_max_episode_length_comes_from_the_env_or_the_caller():
    builtin = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", max_episode_steps=100)
    pendulum = lambda: gpu_envs.make("Pendulum-v1", num_envs=2, device="cpu", max_episode_steps=50)  # noqa: E731
    assert to_rsl_rl(pendulum()).max_episode_length == 50
    assert to_rsl_rl(pendulum(), max_episode_length=50).max_episode_length == 50
    with pytest.raises(gpu_envs.InvalidArgumentError, match="contradicts the env's own limit of 50"):
        to_rsl_rl(pendulum(), max_episode_length=60)
    gym_env = gpu_envs.make("Pendulum-v1", num_envs=2, device="cpu", backend="gymnasium")
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"max_episode_length=\.\.\."):
        _ = to_rsl_rl(gym_env).max_episode_length
    assert to_rsl_rl(gym_env, max_episode_length=200).max_episode_length == 200
    with pytest.raises(gpu_envs.InvalidArgumentError, match="Pendulum-v1"):
        to_rsl_rl(builtin)  # discrete actions: rsl_rl has no such policy


def test_envs_without_a_step_counter_get_one_kept_by_the_adapter():
    env = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=3, device="cpu", backend="gymnasium", seed=0), 200)
    for _ in range(5):
        env.step(torch.zeros(3, 1))
    assert env.episode_length_buf.tolist() == [5, 5, 5]
    with pytest.warns(UserWarning, match="not when the env truncates"):
        env.episode_length_buf = torch.full((3,), 198)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        env.episode_length_buf = torch.full((3,), 198)
    _, _, dones, _ = env.step(torch.zeros(3, 1))
    assert env.episode_length_buf.tolist() == [199, 199, 199] and not dones.any()
    with pytest.raises(gpu_envs.InvalidArgumentError, match="shape"):
        env.episode_length_buf = torch.zeros(2)


def test_transformed_envs_and_reset():
    inner = gpu_envs.make("Pendulum-v1", num_envs=2, device="cpu", seed=0)
    env = to_rsl_rl(TransformedEnv(inner, RewardScale(0.5)))
    plain = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=2, device="cpu", seed=0))
    _, scaled, _, _ = env.step(torch.ones(2, 1))
    _, raw, _, _ = plain.step(torch.ones(2, 1))
    assert torch.allclose(scaled, 0.5 * raw)
    assert env.episode_length_buf.tolist() == [1, 1]  # read through the transformed env
    obs, extras = env.reset()
    assert env.episode_length_buf.tolist() == [0, 0] and obs["policy"].shape == (2, 3) and extras == {}


def test_vector_rewards_are_refused_until_scalarised():
    pytest.importorskip("mo_gymnasium")
    import mo_gymnasium  # noqa: F401  (registers the mo- ids)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gpu_envs.make("mo-mountaincarcontinuous-v0", num_envs=3, device="cpu", seed=0)
    with pytest.raises(gpu_envs.SpecError, match="ScalarizeReward"):
        to_rsl_rl(env)
    vec_env = to_rsl_rl(TransformedEnv(env, ScalarizeReward([1.0, 0.5])), max_episode_length=999)
    _, rewards, _, _ = vec_env.step(torch.zeros(3, 1))
    assert rewards.shape == (3,)


@pytest.mark.parametrize("device", DEVICES)
def test_step_never_syncs(device):
    env = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=16, device=device, seed=0, max_episode_steps=20))
    env.step(torch.zeros(16, 1, device=device))  # the first step validates (allowed to sync)
    time_outs = torch.zeros((), device=device)
    with no_sync():
        for _ in range(50):
            _, _, _, extras = env.step(torch.rand(16, 1, device=device) * 4 - 2)
            time_outs += extras["time_outs"].sum()
    assert time_outs.item() > 0, "the guarded steps covered auto-resets"
