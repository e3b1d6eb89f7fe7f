"""``to_sb3`` against SB3's own ``DummyVecEnv`` of single counting envs, and PPO training on it.

``DummyVecEnv`` is SB3's sequential reference: it steps N single envs one by one and
resets them by hand, putting the true final observation in ``terminal_observation``. Our
VecEnv over the batched counting envs must give the same observations, rewards, dones
and infos at every step, for the torch and gymnasium backends and a TransformedEnv.
"""

from __future__ import annotations

from copy import deepcopy

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecMonitor

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError, ResetNeededError
from gpu_envs.interop import to_sb3
from gpu_envs.transforms import EpisodeStats, TransformedEnv
from tests.example_files import load_example
from tests.fakes import CountingEnv, CountingTorchVectorEnv, reference_rollout
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


@pytest.mark.parametrize("source", ["builtin", "torch", "gymnasium"])
def test_returned_arrays_and_infos_are_the_callers(source):
    """What a step returns is the caller's, as DummyVecEnv's copies are: writing into it changes nothing else.

    SB3's PPO adds to ``rewards`` in place, VecMonitor writes into the info dicts and
    users keep observations: neither the env (its root, its later steps) nor arrays
    handed out on other steps may see those writes, and later steps never rewrite
    what an earlier step returned.
    """

    def make():
        if source == "builtin":
            return to_sb3(gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", seed=5))
        return to_sb3(counting_env(source))

    ours, twin = make(), make()
    ours.reset(), twin.reset()
    actions = np.random.default_rng(1).integers(0, 2, size=(60, N))
    kept, ended_steps = [], 0
    for t in range(60):
        got = ours.step(actions[t])
        want = twin.step(actions[t])
        obs, rewards, dones, infos = got
        np.testing.assert_array_equal(obs, want[0])
        np.testing.assert_array_equal(rewards, want[1])
        np.testing.assert_array_equal(dones, want[2])
        for info, other in zip(infos, want[3], strict=True):
            assert info.keys() == other.keys() and info is not other
        kept.append((obs, rewards, dones, infos, deepcopy((obs, rewards, dones, infos))))
        ended_steps += bool(dones.any())
        # the caller writes into everything it was given
        obs += 100.0
        rewards += 7.0
        dones[:] = ~dones
        for info in infos:
            info["episode"] = {"r": 1.0}
            if "terminal_observation" in info:
                info["terminal_observation"] += 50.0
    assert ended_steps > 0
    np.testing.assert_array_equal(ours.env.root()["observation"].numpy(), twin.env.root()["observation"].numpy())
    for _, _, _, infos, _ in kept[1:]:
        assert all(info is not earlier for info in infos for earlier in kept[0][3])  # fresh dicts on every step
    # nothing a later step did rewrote what an earlier step handed out (the caller's writes stay as made)
    for obs, rewards, dones, infos, (obs0, rewards0, dones0, infos0) in kept:
        np.testing.assert_array_equal(obs, obs0 + 100.0)
        np.testing.assert_array_equal(rewards, rewards0 + 7.0)
        np.testing.assert_array_equal(dones, ~dones0)
        for info, info0 in zip(infos, infos0, strict=True):
            if "terminal_observation" in info0:
                np.testing.assert_array_equal(info["terminal_observation"], info0["terminal_observation"] + 50.0)
    ours.close(), twin.close()


@pytest.mark.parametrize("final_obs", ["info", "masked", "none"])
def test_withheld_final_observations_are_marked_against_the_oracle(final_obs):
    """``final_obs_missing`` exactly on the ended rows whose final observation the env withheld (placeholders NaN)."""
    actions = np.random.default_rng(2).integers(0, 2, size=(N, T))
    ref = reference_rollout(N, actions, final_obs)
    venv = to_sb3(gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs=final_obs), device="cpu"))
    np.testing.assert_array_equal(venv.reset(), ref["observation"][:, 0])
    given = withheld = 0
    for t in range(T):
        obs, rewards, dones, infos = venv.step(actions[:, t])
        np.testing.assert_array_equal(obs, ref["root"][:, t])
        np.testing.assert_array_equal(rewards, ref["reward"][:, t])
        ended = ref["terminated"][:, t] | ref["truncated"][:, t]
        np.testing.assert_array_equal(dones, ended)
        for i, info in enumerate(infos):
            missing = bool(ref["final_obs_missing"][i, t])
            assert info.get("final_obs_missing", False) is missing, (t, i)
            assert info["TimeLimit.truncated"] == bool(ref["truncated"][i, t] and not ref["terminated"][i, t])
            assert ("terminal_observation" in info) == ended[i], (t, i)
            if ended[i]:  # the true final observation, or the NaN placeholder where withheld
                np.testing.assert_array_equal(info["terminal_observation"], ref["next_observation"][i, t])
                given, withheld = given + (not missing), withheld + missing
    assert (withheld > 0) == (final_obs != "info") and (given > 0) == (final_obs != "none")
    venv.close()


def test_seed_attributes_methods_and_wrappers():
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu"), EpisodeStats())
    venv = to_sb3(env)
    assert venv.seed(3) == [3, 4, 5, 6]
    first = venv.reset()
    venv.seed(3)
    np.testing.assert_array_equal(venv.reset(), first)
    assert venv.get_attr("num_envs") == [4] * 4 and venv.get_attr("device", indices=[1]) == [env.device]
    assert venv.render_mode is None and venv.has_attr("single_action_spec") and not venv.has_attr("nope")
    venv.set_attr("validate_actions", True)
    assert env.validate_actions is True
    assert venv.env_method("root")[0]["observation"].shape == (4, 4)
    assert venv.env_is_wrapped(EpisodeStats) == [True] * 4
    assert venv.env_is_wrapped(VecMonitor) == [False] * 4
    with pytest.raises(InvalidArgumentError, match="without indices"):
        venv.set_attr("validate_actions", False, indices=[0])
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


class GoalEnv(gym.Env):
    """A goal-conditioned env with gymnasium-robotics' ``compute_reward`` (what HER's replay buffer calls)."""

    observation_space = gym.spaces.Dict(
        {k: gym.spaces.Box(-1, 1, (2,), np.float32) for k in ("observation", "achieved_goal", "desired_goal")}
    )
    action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {k: np.zeros(2, np.float32) for k in self.observation_space}, {}

    def step(self, action):
        obs = {k: np.clip(action, -1, 1).astype(np.float32) for k in self.observation_space}
        return obs, 0.0, False, False, {}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -np.linalg.norm(achieved_goal - desired_goal, axis=-1)

    def render(self):
        return np.zeros((4, 6, 3), np.uint8)


def test_sb3s_vec_env_protocol_reaches_the_sub_envs():
    """SB3's own vec-env code over to_sb3: ``render_mode`` passed through (VecNormalize's render tests),
    ``env_is_wrapped(Monitor)`` sees a sub-env's Monitor, HER's ``env_method("compute_reward", ..., indices=[0])``."""
    from stable_baselines3.common.monitor import Monitor

    fns = [lambda: Monitor(GoalEnv(render_mode="rgb_array")) for _ in range(3)]
    venv = to_sb3(
        gpu_envs.wrap(gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP), device="cpu")
    )
    assert venv.render_mode == "rgb_array" and venv.get_attr("render_mode") == ["rgb_array"] * 3
    assert venv.env_is_wrapped(Monitor) == [True, True, True] and venv.env_is_wrapped(Monitor, indices=[1]) == [True]
    achieved, desired = np.zeros((5, 2), np.float32), np.ones((5, 2), np.float32)
    rewards = venv.env_method("compute_reward", achieved, desired, [{}] * 5, indices=[0])
    assert len(rewards) == 1 and np.allclose(rewards[0], -np.sqrt(2.0))
    venv.reset()
    images = venv.get_images()
    assert len(images) == 3 and images[0].shape == (4, 6, 3)
    plain = to_sb3(gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", backend="gymnasium"))
    assert plain.env_is_wrapped(Monitor) == [False, False] and plain.render_mode is None
    with pytest.raises(AttributeError, match="compute_reward"):
        to_sb3(gpu_envs.make("CartPole-v1", num_envs=2, device="cpu")).env_method("compute_reward", 0, 0, {})
