"""``to_rl_games``: rl_games' vec env contract, exact against the sequential oracle, and exact time-outs.

The counting env (tests/fakes.py through the Isaac Lab direct fake) gives every
observation, final ones included, whatever the actions. rl_games' own agent (built by its
``Runner`` from a config, as in training) collects one rollout with ``play_steps``; its
experience buffer and returns are compared with targets computed here with the same
agent (``play_steps`` does not change the model). The real training run is
examples/train_rl_games.py (tests/test_train_examples.py).
"""

from __future__ import annotations

import contextlib
import copy
import io

import numpy as np
import pytest
import torch

pytest.importorskip("rl_games")

from rl_games.common import env_configurations, vecenv
from rl_games.torch_runner import Runner

import gpu_envs
from gpu_envs.interop import to_rl_games
from tests.example_files import load_example
from tests.fakes import reference_rollout
from tests.isaac_fakes import FakeIsaacDirectEnv, FakeIsaacManagerEnv
from tests.sync_guard import no_sync

N, T, GAMMA, SCALE = 6, 24, 0.9, 0.1
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def agent_on(vec, tmp_path, *, central_value: bool = False, value_bootstrap: bool = True):
    """rl_games' a2c_continuous agent for ``vec``, built by its Runner from the example's config."""
    params = copy.deepcopy(load_example("train_rl_games").PARAMS)
    params["config"].update(
        num_actors=vec.num_envs,
        env_name=vec.env_name,
        horizon_length=T,
        minibatch_size=vec.num_envs * T,
        gamma=GAMMA,
        reward_shaper={"scale_value": SCALE},
        value_bootstrap=value_bootstrap,
        train_dir=str(tmp_path),
    )
    if central_value:
        params["config"]["central_value_config"] = {
            "minibatch_size": vec.num_envs * T,
            "mini_epochs": 1,
            "learning_rate": 1e-3,
            "normalize_input": True,
            "clip_value": False,
            "network": {
                "name": "actor_critic",
                "central_value": True,
                "mlp": {"units": [16], "activation": "elu", "initializer": {"name": "default"}},
            },
        }
    runner = Runner()
    with contextlib.redirect_stdout(io.StringIO()):
        runner.load({"params": params})
        agent = runner.algo_factory.create(runner.algo_name, base_name="run", params=runner.params)
    agent.writer.close()  # rl_games' TensorBoard writer (unused here; rl_games never closes it)
    return runner, agent


def play_one_rollout(agent) -> dict:
    """rl_games' own collection (``play_steps``), with its input normalisation trained a little beforehand."""
    torch.manual_seed(0)
    for net in [agent.model] + ([agent.central_value_net.model] if agent.has_central_value else []):
        net.train()
        net.norm_obs(torch.randn(256, 3) * 4 + 3)  # non-trivial running mean/std, frozen in play_steps (eval)
    agent.init_tensors()
    agent.obs = agent.env_reset()
    with torch.no_grad():
        batch = agent.play_steps()
    buffer = agent.experience_buffer.tensor_dict
    return {
        "rewards": buffer["rewards"][..., 0].T.numpy(),  # [N, T]
        "returns": batch["returns"][:, 0].reshape(N, T).numpy(),  # rl_games flattens env-major
        "applied": buffer["actions"][..., 0].clamp(-1, 1).T.numpy(),  # clip_actions=1: what the env received
    }


def values(agent, observations: np.ndarray, state: bool = False) -> np.ndarray:
    obs = torch.as_tensor(observations, dtype=torch.float32).reshape(-1, 3)
    inputs = {"obs": obs, "states": 2 * obs} if state else {"obs": obs}
    return agent.get_values(inputs).reshape(observations.shape[:2]).numpy()


@pytest.fixture(scope="module")
def reference():
    expected = reference_rollout(N, np.zeros((N, T), dtype=np.int64))
    assert expected["truncated"].sum() >= 5 and expected["terminated"].sum() >= 5
    return expected


def test_env_info_registration_and_steps_match_the_sequential_reference(reference, tmp_path):
    vec = to_rl_games(gpu_envs.wrap(FakeIsaacDirectEnv(N, compute_final_obs=True)), clip_actions=1.0)
    assert env_configurations.configurations["gpu_envs"]["env_creator"]() is vec
    assert vecenv.create_vec_env("gpu_envs", N) is vec
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"num_actors=5.*config\['num_actors'\] = 6"):
        vecenv.create_vec_env("gpu_envs", 5)
    info = vec.get_env_info()
    assert info["observation_space"].shape == (3,) and "state_space" not in info
    assert (info["action_space"].low.tolist(), info["action_space"].high.tolist()) == ([-1.0], [1.0])
    assert (info["agents"], info["value_size"]) == (1, 1)
    obs = vec.reset()
    np.testing.assert_array_equal(obs["obs"].numpy(), reference["observation"][:, 0])
    for t in range(T):
        obs, rewards, dones, infos = vec.step(torch.full((N, 1), 5.0))  # clamped to 1 on the way in
        np.testing.assert_array_equal(obs["obs"].numpy(), reference["root"][:, t])
        np.testing.assert_array_equal(rewards.numpy(), reference["reward"][:, t].astype(np.float32) + 1)
        np.testing.assert_array_equal(dones.numpy(), reference["terminated"][:, t] | reference["truncated"][:, t])
        np.testing.assert_array_equal(infos["time_outs"].numpy(), reference["truncated"][:, t])
    assert rewards.shape == dones.shape == (N,) and dones.dtype == torch.bool


def test_isaac_groups_become_obs_and_states_and_metrics_reach_episode():
    direct = to_rl_games(gpu_envs.wrap(FakeIsaacDirectEnv(N, state=True)), clip_actions=1.0)
    obs = direct.reset()
    assert set(obs) == {"obs", "states"} and torch.equal(obs["states"], 2 * obs["obs"])
    assert direct.get_env_info()["state_space"].shape == (3,)
    manager = to_rl_games(gpu_envs.wrap(FakeIsaacManagerEnv(N)), clip_actions=1.0, clip_observations=2.5)
    obs = manager.reset()
    assert obs["states"].shape == (N, 4)  # the manager's critic Dict group, flattened and concatenated
    for _ in range(3):  # every first episode ends at step 3
        obs, _, dones, infos = manager.step(torch.zeros(N, 1))
    assert dones.all() and "Episode_Termination/time_out" in infos["episode"]
    assert obs["obs"].max() <= 2.5 and manager.observation_space.high.tolist() == [2.5] * 3
    chosen = to_rl_games(
        gpu_envs.wrap(FakeIsaacDirectEnv(N, state=True)), obs_groups={"obs": ["policy", "critic"]}, clip_actions=1.0
    )
    assert chosen.reset()["obs"].shape == (N, 6) and chosen.state_space is None


def test_discrete_actions_train_with_a2c_discrete_layout():
    vec = to_rl_games(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0))
    assert vec.get_env_info()["action_space"].n == 2
    vec.reset()
    obs, rewards, dones, _ = vec.step(torch.ones(4, dtype=torch.int64))  # a2c_discrete's [N] actions
    assert obs["obs"].shape == (4, 4) and rewards.tolist() == [1.0] * 4 and not dones.any()


def test_bad_arguments_get_clear_errors(tmp_path):
    isaac = gpu_envs.wrap(FakeIsaacDirectEnv(N))
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"unbounded.*clip_actions=1.0"):
        to_rl_games(isaac)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="does not have"):
        to_rl_games(isaac, obs_groups={"obs": ["nope"]}, clip_actions=1.0)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="'obs' \\(required\\)"):
        to_rl_games(isaac, obs_groups={"states": ["policy"]}, clip_actions=1.0)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="positive number"):
        to_rl_games(isaac, clip_actions=-1.0)
    with pytest.raises(gpu_envs.NotAnEnvError, match="to_rl_games"):
        to_rl_games(object())
    vec = to_rl_games(isaac, clip_actions=1.0)
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"runner.load\(config\)"):
        vec.bootstrap_from(Runner())
    with pytest.raises(gpu_envs.InvalidArgumentError, match="Runner"):
        vec.bootstrap_from(object())
    runner, agent = agent_on(vec, tmp_path)
    runner.algo_name = "sac"
    with pytest.raises(gpu_envs.InvalidArgumentError, match="'sac'"):
        vec.bootstrap_from(runner)
    other = to_rl_games(gpu_envs.wrap(FakeIsaacDirectEnv(N)), name="other", clip_actions=1.0)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="vec_env is another one"):
        other.bootstrap_from(agent)


@pytest.mark.slow
@pytest.mark.parametrize("state", [False, True], ids=["shared-critic", "central-value"])
def test_stored_targets_on_time_outs_bootstrap_from_the_true_final_observation(reference, tmp_path, state):
    vec = to_rl_games(gpu_envs.wrap(FakeIsaacDirectEnv(N, compute_final_obs=True, state=state)), clip_actions=1.0)
    _, agent = agent_on(vec, tmp_path, central_value=state)
    vec.bootstrap_from(agent)
    vec.bootstrap_from(agent)  # twice: one hook
    got = play_one_rollout(agent)
    shaped = SCALE * (reference["reward"] + got["applied"])
    truncated = reference["truncated"]
    v_final = values(agent, reference["next_observation"], state)
    exact = shaped + GAMMA * np.where(truncated, v_final, 0.0)
    np.testing.assert_allclose(got["rewards"], exact, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["returns"][truncated], exact[truncated], rtol=1e-5, atol=1e-5)
    v_taken = values(agent, reference["observation"], state)
    assert np.abs(v_final - v_taken)[truncated].mean() > 1e-3  # what rl_games alone would have used


@pytest.mark.slow
def test_without_the_line_rl_games_bootstraps_from_the_value_of_the_state_acted_in(reference, tmp_path):
    vec = to_rl_games(gpu_envs.wrap(FakeIsaacDirectEnv(N, compute_final_obs=True)), clip_actions=1.0)
    _, agent = agent_on(vec, tmp_path)
    got = play_one_rollout(agent)
    shaped = SCALE * (reference["reward"] + got["applied"])
    v_taken = values(agent, reference["observation"])
    np.testing.assert_allclose(
        got["rewards"], shaped + GAMMA * np.where(reference["truncated"], v_taken, 0.0), rtol=1e-5, atol=1e-5
    )


@pytest.mark.slow
def test_rows_without_a_final_observation_keep_rl_games_approximation(reference, tmp_path):
    vec = to_rl_games(gpu_envs.wrap(FakeIsaacDirectEnv(N, compute_final_obs=False)), clip_actions=1.0)
    _, agent = agent_on(vec, tmp_path)
    vec.bootstrap_from(agent)
    got = play_one_rollout(agent)
    shaped = SCALE * (reference["reward"] + got["applied"])
    v_taken = values(agent, reference["observation"])
    assert np.isfinite(got["rewards"]).all()
    np.testing.assert_allclose(
        got["rewards"], shaped + GAMMA * np.where(reference["truncated"], v_taken, 0.0), rtol=1e-5, atol=1e-5
    )


@pytest.mark.slow
def test_a_runner_hooks_the_agent_it_builds(tmp_path):
    """Runner.run() creates the agent itself: the hook is placed when rl_games hands it to the env."""
    vec = to_rl_games(gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=0, max_episode_steps=5))
    runner, _ = agent_on(vec, tmp_path)
    runner.params["config"].update(horizon_length=8, minibatch_size=64, max_epochs=2)
    vec.bootstrap_from(runner)
    seen = []
    original = vec.set_train_info

    def spy(frames, agent, *args, **kwargs):
        original(frames, agent, *args, **kwargs)
        seen.append(agent.rewards_shaper)
        built.append(agent)

    vec.set_train_info, built = spy, []
    with contextlib.redirect_stdout(io.StringIO()):
        runner.run({"train": True, "play": False})
    built[0].writer.close()
    assert seen and all(type(s).__name__ == "_RlGamesBootstrap" and s.vec is vec for s in seen)


@pytest.mark.parametrize("device", DEVICES)
def test_step_never_syncs(device):
    env = gpu_envs.make("Pendulum-v1", num_envs=16, device=device, seed=0, max_episode_steps=20)
    vec = to_rl_games(env, clip_observations=10.0, clip_actions=2.0)
    vec._bootstrap = object()  # as after bootstrap_from: the final observations are kept every step
    vec.reset()
    vec.step(torch.zeros(16, 1, device=device))  # the first step validates (allowed to sync)
    time_outs = torch.zeros((), device=device)
    with no_sync():
        for _ in range(50):
            _, _, _, infos = vec.step(torch.rand(16, 1, device=device) * 4 - 2)
            time_outs += vec.exact_time_outs.sum() + infos["time_outs"].sum()  # exact rows + rl_games' own
    assert time_outs.item() > 0, "the guarded steps covered auto-resets"


def test_two_envs_under_one_name_are_named_at_bootstrap_from(tmp_path):
    """Two to_rl_games envs under the default name: the runner builds the later one, and ``a.bootstrap_from(runner)``
    once hooked nothing (silently); it now names the clash and the fix."""
    a = to_rl_games(gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=0, max_episode_steps=5))
    runner, _ = agent_on(a, tmp_path)
    b = to_rl_games(gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=1, max_episode_steps=5))
    assert a.env_name == b.env_name == "gpu_envs"
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"env_name='gpu_envs'.*another to_rl_games env.*name="):
        a.bootstrap_from(runner)
    b.bootstrap_from(runner)  # the env the runner trains
    c = to_rl_games(gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=2), name="gpu_envs_c")
    runner_c, _ = agent_on(c, tmp_path)
    c.bootstrap_from(runner_c)  # its own name: fine
