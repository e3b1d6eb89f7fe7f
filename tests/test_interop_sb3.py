"""``to_sb3`` against SB3's own ``DummyVecEnv`` of single counting envs, and PPO training on it.

``DummyVecEnv`` is SB3's sequential reference: it steps N single envs one by one and
resets them by hand, putting the true final observation in ``terminal_observation``. Our
VecEnv over the batched counting envs must give the same observations, rewards, dones
and infos at every step, for the torch and gymnasium backends and a TransformedEnv.
"""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecMonitor

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError, ResetNeededError
from gpu_envs.interop import to_sb3
from gpu_envs.transforms import EpisodeStats, TransformedEnv
from tests.example_files import load_example
from tests.fakes import CountingEnv, CountingTorchVectorEnv
from tests.gym_fakes import counting_vector_env

N, T = 6, 160


def counting_env(source: str):
    if source == "torch":
        return gpu_envs.wrap(CountingTorchVectorEnv(N), device="cpu")
    if source == "gymnasium":
        return gpu_envs.wrap(counting_vector_env(N, "same_step"), device="cpu")
    return TransformedEnv(gpu_envs.wrap(CountingTorchVectorEnv(N), device="cpu"), EpisodeStats())


@pytest.mark.parametrize("source", ["torch", "gymnasium", "transformed"])
def test_steps_equal_sb3_dummy_vec_env(source):
    actions = np.random.default_rng(0).integers(0, 2, size=(T, N))
    ours = to_sb3(counting_env(source))
    ref = DummyVecEnv([lambda i=i: CountingEnv(i) for i in range(N)])
    assert isinstance(ours, VecEnv)
    assert ours.observation_space.shape == ref.observation_space.shape and ours.action_space == ref.action_space
    np.testing.assert_array_equal(ours.reset(), ref.reset())
    all_dones, truncations = [], []
    for t in range(T):
        obs, rewards, dones, infos = ours.step(actions[t])
        want_obs, want_rewards, want_dones, want_infos = ref.step(actions[t])
        assert obs.dtype == want_obs.dtype and rewards.dtype == np.float32 and dones.dtype == bool
        np.testing.assert_array_equal(obs, want_obs, err_msg=f"t={t}")
        np.testing.assert_array_equal(rewards, want_rewards, err_msg=f"t={t}")
        np.testing.assert_array_equal(dones, want_dones, err_msg=f"t={t}")
        for i, (info, want) in enumerate(zip(infos, want_infos, strict=True)):
            assert info["TimeLimit.truncated"] == want["TimeLimit.truncated"], (t, i)
            assert ("terminal_observation" in info) == ("terminal_observation" in want), (t, i)
            if "terminal_observation" in want:
                np.testing.assert_array_equal(info["terminal_observation"], want["terminal_observation"])
            if source == "gymnasium":
                assert info["step_count"] == want["step_count"]
            if source == "transformed" and want_dones[i]:  # EpisodeStats' entry: the episode's length
                assert info["episode_length"] == want["terminal_observation"][2]
        all_dones.append(want_dones)
        truncations.append([info["TimeLimit.truncated"] for info in want_infos])
    dones, truncated = np.stack(all_dones), np.stack(truncations)
    assert dones.all(axis=1).any() and (~dones).all(axis=1).any()
    assert truncated.any() and (dones & ~truncated).any()
    ours.close()
    assert ours.env.is_closed


def test_seed_attributes_methods_and_wrappers():
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu"), EpisodeStats())
    venv = to_sb3(env)
    assert venv.seed(3) == [3, 4, 5, 6]
    first = venv.reset()
    venv.seed(3)
    np.testing.assert_array_equal(venv.reset(), first)
    assert venv.get_attr("num_envs") == [4] * 4 and venv.get_attr("device", indices=[1]) == [env.device]
    assert venv.render_mode is None and venv.has_attr("single_action_spec") and not venv.has_attr("nope")
    venv.set_attr("validate", True)
    assert env.validate is True
    assert venv.env_method("root")[0]["observation"].shape == (4, 4)
    assert venv.env_is_wrapped(EpisodeStats) == [True] * 4
    assert venv.env_is_wrapped(VecMonitor) == [False] * 4
    with pytest.raises(InvalidArgumentError, match="without indices"):
        venv.set_attr("validate", False, indices=[0])
    with pytest.raises(InvalidArgumentError, match="outside"):
        venv.get_attr("num_envs", indices=[7])


def test_pendulum_box_actions_and_errors():
    venv = to_sb3(gpu_envs.make("Pendulum-v1", num_envs=3, device="cpu", seed=0))
    with pytest.raises(ResetNeededError):
        venv.step(np.zeros((3, 1), np.float32))
    obs = venv.reset()
    assert obs.shape == (3, 3) and venv.action_space.shape == (1,)
    obs, rewards, dones, infos = venv.step(np.zeros((3, 1)))  # float64 from a user is cast to the spec's float32
    assert rewards.shape == (3,) and not dones.any() and all(info == {"TimeLimit.truncated": False} for info in infos)
    with pytest.raises(InvalidArgumentError, match="options"):
        venv.set_options({"low": 0.1})  # refused when given: a later reset would fail on every call
    venv._options = [{"low": 0.1}] * 3  # set behind set_options' back: still refused by reset
    with pytest.raises(InvalidArgumentError, match="options"):
        venv.reset()
    venv.set_options(None)
    for bad in (-1, 1.5, "3"):
        with pytest.raises(InvalidArgumentError, match="seed"):
            venv.seed(bad)  # refused when given, not at the next reset
    assert venv.seed(np.int64(5)) == [5, 6, 7] and venv.reset().shape == (3, 3)


def _mean_return(model, venv, episodes: int = 40) -> float:
    """Mean return of ``model``'s deterministic policy (None: uniform random actions)."""
    obs = venv.reset()
    returns, running = [], np.zeros(venv.num_envs)
    rng = np.random.default_rng(0)
    while len(returns) < episodes:
        if model is None:
            actions = rng.integers(0, 2, size=venv.num_envs)
        else:
            actions, _ = model.predict(obs, deterministic=True)
        obs, rewards, dones, _ = venv.step(actions)
        running += rewards
        returns += running[dones].tolist()
        running[dones] = 0
    return float(np.mean(returns))


@pytest.mark.slow
def test_sb3_ppo_learns_cartpole(one_thread):
    """examples/train_sb3.py: SB3's PPO on to_sb3(make("CartPole-v1", num_envs=8)), briefly."""
    evaluation = to_sb3(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=1))
    random = _mean_return(None, evaluation)
    model = load_example("train_sb3").train(total_steps=20_000)
    trained = _mean_return(model, evaluation)
    assert len(model.ep_info_buffer) > 0  # VecMonitor's episode statistics reach SB3's logger
    assert random < 30 and trained > 150, (random, trained)
