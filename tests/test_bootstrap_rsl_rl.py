"""``to_rsl_rl(env).bootstrap_from(runner)``: rsl_rl's stored targets on time-outs are r + gamma * V(s_T).

The counting env (tests/fakes.py, through the Isaac Lab direct fake) makes every final
observation known in advance: its observations do not depend on the actions, so the
sequential reference gives s_t and s_T of every step, and the reward is the reference's
plus the action rsl_rl took. After one real ``runner.learn`` iteration, rsl_rl's own
storage is compared with targets computed here from a copy of the critic taken before
the iteration (the one rsl_rl collected with).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

pytest.importorskip("rsl_rl")

from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict

import gpu_envs
from gpu_envs.interop import to_rsl_rl
from tests.fakes import MAX_LEN, reference_rollout
from tests.isaac_fakes import FakeIsaacDirectEnv

N, T, GAMMA = 6, 24, 0.9


def train_cfg(critic_groups=("policy",), critic_class="MLPModel") -> dict:
    critic = {"class_name": critic_class, "hidden_dims": [16], "obs_normalization": True}
    if critic_class == "RNNModel":
        critic.update(rnn_type="gru", rnn_hidden_dim=8)
    return {
        "num_steps_per_env": T,
        "save_interval": 1000,
        "obs_groups": {"actor": ["policy"], "critic": list(critic_groups)},
        "algorithm": {
            "class_name": "PPO",
            "learning_rate": 1e-3,
            "gamma": GAMMA,
            "lam": 0.95,
            "num_mini_batches": 2,
            "num_learning_epochs": 1,
        },
        "actor": {
            "class_name": "MLPModel",
            "hidden_dims": [16],
            "obs_normalization": True,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0},
        },
        "critic": critic,
    }


def run_one_iteration(*, exact: bool, compute_final_obs: bool = True, state: bool = False, **cfg) -> dict:
    """One rsl_rl iteration on the counting env; rsl_rl's storage and the critic it collected with."""
    torch.manual_seed(0)
    env = FakeIsaacDirectEnv(N, compute_final_obs=compute_final_obs, state=state)
    vec = to_rsl_rl(gpu_envs.wrap(env), max_episode_length=MAX_LEN)
    runner = OnPolicyRunner(vec, train_cfg(**cfg), log_dir=None, device="cpu")
    if exact:
        vec.bootstrap_from(runner)
    critic = copy.deepcopy(runner.alg.critic)  # the critic of the collection (learn() updates it afterwards)
    runner.learn(num_learning_iterations=1)
    storage = runner.alg.storage
    return {
        "rewards": storage.rewards[..., 0].T.numpy(),  # [N, T]
        "returns": storage.returns[..., 0].T.numpy(),
        "values": storage.values[..., 0].T.numpy(),
        "actions": storage.actions[..., 0].T.numpy(),
        "critic": critic,
    }


def critic_values(critic, observations: np.ndarray, state: bool = False) -> np.ndarray:
    """V of counting observations ``[N, T, 3]`` (the critic group is 2 x counts with ``state``)."""
    obs = torch.as_tensor(observations).reshape(-1, 3)
    groups = {"policy": obs, "critic": 2 * obs} if state else {"policy": obs}
    with torch.inference_mode():
        values = critic(TensorDict(groups, batch_size=[obs.shape[0]]))
    return values.reshape(observations.shape[:2]).numpy()


@pytest.fixture(scope="module")
def reference():
    expected = reference_rollout(N, np.zeros((N, T), dtype=np.int64))
    assert expected["truncated"].sum() >= 5 and expected["terminated"].sum() >= 5
    return expected


@pytest.mark.slow
@pytest.mark.parametrize("state", [False, True], ids=["symmetric", "asymmetric-critic"])
def test_stored_targets_on_time_outs_bootstrap_from_the_true_final_observation(reference, state):
    got = run_one_iteration(exact=True, state=state, critic_groups=("critic",) if state else ("policy",))
    reward = reference["reward"] + got["actions"]  # the counting reward plus the action taken
    truncated = reference["truncated"]
    v_final = critic_values(got["critic"], reference["next_observation"], state)
    exact = reward + GAMMA * np.where(truncated, v_final, 0.0)
    np.testing.assert_allclose(got["rewards"], exact, rtol=1e-5, atol=1e-4)
    # a truncated step ends the GAE recursion: its return IS the exact target
    np.testing.assert_allclose(got["returns"][truncated], exact[truncated], rtol=1e-5, atol=1e-4)
    # and it is not what rsl_rl alone would have stored
    v_taken = critic_values(got["critic"], reference["observation"], state)
    assert np.abs(v_final - v_taken)[truncated].min() > 1e-3
    np.testing.assert_allclose(got["values"], v_taken, rtol=1e-5, atol=1e-5)  # V(s_t): the critic rsl_rl used


@pytest.mark.slow
def test_without_the_line_rsl_rl_bootstraps_from_the_value_of_the_state_acted_in(reference):
    """The library's default, documented in the module: r + gamma * V(s_t) on time-outs."""
    got = run_one_iteration(exact=False)
    reward = reference["reward"] + got["actions"]
    v_taken = critic_values(got["critic"], reference["observation"])
    expected = reward + GAMMA * np.where(reference["truncated"], v_taken, 0.0)
    np.testing.assert_allclose(got["rewards"], expected, rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_rows_without_a_final_observation_keep_rsl_rls_approximation(reference):
    """Isaac Lab without compute_final_obs: placeholders, so V(s_t) stays (and no NaN reaches rsl_rl)."""
    got = run_one_iteration(exact=True, compute_final_obs=False)
    reward = reference["reward"] + got["actions"]
    v_taken = critic_values(got["critic"], reference["observation"])
    expected = reward + GAMMA * np.where(reference["truncated"], v_taken, 0.0)
    assert np.isfinite(got["rewards"]).all()
    np.testing.assert_allclose(got["rewards"], expected, rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_a_recurrent_critics_hidden_state_is_left_as_it_was():
    """V(s_T) runs the critic once more per step; rsl_rl's own values V(s_t) must not change by it."""
    plain = run_one_iteration(exact=False, critic_class="RNNModel")
    exact = run_one_iteration(exact=True, critic_class="RNNModel")
    np.testing.assert_array_equal(plain["actions"], exact["actions"])
    np.testing.assert_allclose(plain["values"], exact["values"], rtol=0, atol=1e-6)
    assert not np.allclose(plain["rewards"], exact["rewards"])  # the time-out rows differ


def test_bootstrap_from_refuses_what_it_cannot_hook():
    vec = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0))
    other = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0))
    runner = OnPolicyRunner(other, train_cfg(), log_dir=None, device="cpu")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="OnPolicyRunner built on this env"):
        vec.bootstrap_from(runner)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="OnPolicyRunner"):
        vec.bootstrap_from(object())
    other.bootstrap_from(runner)
    hook = runner.alg.process_env_step
    other.bootstrap_from(runner)  # twice: the same hook, not a second bonus
    assert runner.alg.process_env_step is hook and hook.original.__func__ is type(runner.alg).process_env_step


def test_an_unsupported_rsl_rl_version_is_refused_by_name(monkeypatch):
    from gpu_envs.interop import time_outs

    monkeypatch.setattr(time_outs.metadata, "version", lambda package: "6.0.0")
    vec = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0))
    runner = OnPolicyRunner(vec, train_cfg(), log_dir=None, device="cpu")
    with pytest.raises(gpu_envs.MissingComponentError, match=r"rsl-rl-lib>=5.0,<6.*6\.0\.0 is installed"):
        vec.bootstrap_from(runner)


def test_episode_length_buf_refuses_counts_outside_the_episode():
    """Issue 19: -100 on a 200-step limit let episodes run 300 steps; now refused by name."""
    vec = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=3, device="cpu", seed=0))
    for bad in ([-100, 0, 0], [0, 200, 5]):
        with pytest.raises(gpu_envs.InvalidArgumentError, match=r"in \[0, 199\].*max_episode_length = 200"):
            vec.episode_length_buf = torch.tensor(bad)
    assert vec.episode_length_buf.tolist() == [0, 0, 0]  # nothing written
    vec.episode_length_buf = torch.tensor([0, 199, 5])  # the edges rsl_rl itself can write
    _, _, dones, extras = vec.step(torch.zeros(3, 1))
    assert extras["time_outs"].tolist() == [False, True, False] and dones.tolist() == [0, 1, 0]
    own = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=2, device="cpu", backend="gymnasium"), 50)
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"in \[0, 49\]"):
        own.episode_length_buf = torch.tensor([-1, 3])


def test_bootstrapping_steps_never_sync():
    """What the env side adds per step while bootstrapping (rows, final observations) waits for nothing."""
    from tests.sync_guard import no_sync

    vec = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=0, max_episode_steps=5))
    runner = OnPolicyRunner(vec, train_cfg(), log_dir=None, device="cpu")
    vec.bootstrap_from(runner)
    vec.step(torch.zeros(8, 1))  # the first step validates (allowed to sync)
    exact = torch.zeros((), dtype=torch.long)
    with no_sync():
        for _ in range(12):
            vec.step(torch.rand(8, 1) * 4 - 2)
            exact += vec.exact_time_outs.sum()
    assert exact.item() == 16 and vec.final_observations["policy"].shape == (8, 3)
