"""``to_skrl(env).bootstrap_from(agent)``: skrl's stored targets use the TRUE final observation.

On the counting env (tests/fakes.py through the Isaac Lab direct fake) every observation is
known from the sequential reference, whatever the actions. After one real rollout of
skrl's SequentialTrainer, the agent's memory is compared with targets computed here from
copies of its value model and observation preprocessor taken before the rollout (the
ones skrl collected with; the update that follows changes them).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

pytest.importorskip("skrl")

from skrl.agents.torch.ppo import PPO, PPO_CFG, PPO_RNN
from skrl.agents.torch.sac import SAC, SAC_CFG
from skrl.memories.torch import RandomMemory
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.trainers.torch import SequentialTrainer, SequentialTrainerCfg

import gpu_envs
from gpu_envs.interop import to_skrl
from tests.fakes import reference_rollout
from tests.isaac_fakes import FakeIsaacDirectEnv

N, T, GAMMA = 6, 24, 0.9


class Policy(GaussianMixin, Model):
    def __init__(self, env):
        Model.__init__(self, observation_space=env.observation_space, action_space=env.action_space, device=env.device)
        GaussianMixin.__init__(self)
        self.net = torch.nn.Linear(self.num_observations, self.num_actions)
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role):
        return self.net(inputs["observations"]), {"log_std": self.log_std}


class Critic(DeterministicMixin, Model):
    """V(observation, or state when the env has one) or, with ``q=True``, Q(observation, action)."""

    def __init__(self, env, q: bool = False):
        Model.__init__(self, observation_space=env.observation_space, action_space=env.action_space, device=env.device)
        DeterministicMixin.__init__(self)
        self.q, self.uses_state = q, env.state_space is not None and not q
        n_in = self.num_observations + (self.num_actions if q else 0)
        self.net = torch.nn.Sequential(torch.nn.Linear(n_in, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def compute(self, inputs, role):
        x = inputs["states"] if self.uses_state else inputs["observations"]
        if self.q:
            x = torch.cat([x, inputs["taken_actions"]], dim=-1)
        return self.net(x), {}


def quiet(cfg):
    cfg.experiment.write_interval = cfg.experiment.checkpoint_interval = 0
    return cfg


def train_steps(env, agent, steps: int = T) -> None:
    cfg = SequentialTrainerCfg(
        timesteps=steps, headless=True, disable_progressbar=True, close_environment_at_exit=False
    )
    SequentialTrainer(cfg=cfg, env=env, agents=agent).train()


def ppo(env, **cfg) -> PPO:
    cfg = quiet(
        PPO_CFG(
            rollouts=T,
            learning_epochs=1,
            mini_batches=2,
            discount_factor=GAMMA,
            observation_preprocessor=RunningStandardScaler,
            observation_preprocessor_kwargs={"size": env.observation_space},
            **cfg,
        )
    )
    return PPO(
        models={"policy": Policy(env), "value": Critic(env)},
        memory=RandomMemory(memory_size=T, num_envs=env.num_envs),
        observation_space=env.observation_space,
        state_space=env.state_space,
        action_space=env.action_space,
        device=env.device,
        cfg=cfg,
    )


def run_ppo(*, exact: bool, compute_final_obs: bool = True, state: bool = False, **cfg) -> dict:
    torch.manual_seed(0)
    env = to_skrl(gpu_envs.wrap(FakeIsaacDirectEnv(N, compute_final_obs=compute_final_obs, state=state)))
    agent = ppo(env, **cfg)
    if exact:
        env.bootstrap_from(agent)
    # skrl's preprocessor starts training in the update: a pre-trained one makes V depend on it
    agent._observation_preprocessor(torch.randn(64, 3) * 3 + 2, train=True)
    value, preprocess = copy.deepcopy(agent.value), copy.deepcopy(agent._observation_preprocessor)
    train_steps(env, agent)
    memory = agent.memory
    return {
        "rewards": memory.get_tensor_by_name("rewards")[..., 0].T.numpy(),  # [N, T]
        "returns": memory.get_tensor_by_name("returns")[..., 0].T.numpy(),
        "actions": memory.get_tensor_by_name("actions")[..., 0].T.numpy(),
        "value": lambda obs: value_of(value, preprocess, obs, state),
        "agent": agent,
    }


def value_of(value, preprocess, observations: np.ndarray, state: bool) -> np.ndarray:
    obs = torch.as_tensor(observations, dtype=torch.float32).reshape(-1, 3)
    with torch.no_grad():
        v, _ = value.act({"observations": preprocess(obs), "states": 2 * obs if state else None}, role="value")
    return v.reshape(observations.shape[:2]).numpy()


@pytest.fixture(scope="module")
def reference():
    expected = reference_rollout(N, np.zeros((N, T), dtype=np.int64))
    assert expected["truncated"].sum() >= 5 and expected["terminated"].sum() >= 5
    return expected


@pytest.mark.slow
@pytest.mark.parametrize("state", [False, True], ids=["observation-critic", "state-critic"])
def test_ppo_stores_r_plus_gamma_v_of_the_true_final_observation(reference, state):
    got = run_ppo(exact=True, state=state)
    assert got["agent"].cfg.time_limit_bootstrap  # switched on by bootstrap_from
    reward = reference["reward"] + got["actions"]
    truncated = reference["truncated"]
    v_final = got["value"](reference["next_observation"])
    exact = reward + GAMMA * np.where(truncated, v_final, 0.0)
    np.testing.assert_allclose(got["rewards"], exact, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got["returns"][truncated], exact[truncated], rtol=1e-5, atol=1e-4)
    v_reset = got["value"](reference["root"])  # what skrl alone bootstraps from: the next episode's start
    assert np.abs(v_final - v_reset)[truncated].min() > 1e-3


@pytest.mark.slow
def test_without_the_line_skrl_bootstraps_from_the_next_episodes_first_observation(reference):
    """The library's defaults, documented in the module."""
    plain = run_ppo(exact=False)  # time_limit_bootstrap=False: rewards stored as they are
    np.testing.assert_allclose(plain["rewards"], reference["reward"] + plain["actions"], rtol=1e-6)
    option = run_ppo(exact=False, time_limit_bootstrap=True)  # V of the post-reset observation
    reward = reference["reward"] + option["actions"]
    v_reset = option["value"](reference["root"])
    np.testing.assert_allclose(
        option["rewards"], reward + GAMMA * np.where(reference["truncated"], v_reset, 0.0), rtol=1e-5, atol=1e-4
    )


@pytest.mark.slow
def test_rows_without_a_final_observation_keep_the_post_reset_one(reference):
    got = run_ppo(exact=True, compute_final_obs=False)
    reward = reference["reward"] + got["actions"]
    v_reset = got["value"](reference["root"])
    assert np.isfinite(got["rewards"]).all()
    np.testing.assert_allclose(
        got["rewards"], reward + GAMMA * np.where(reference["truncated"], v_reset, 0.0), rtol=1e-5, atol=1e-4
    )


def sac(env) -> SAC:
    models = {"policy": Policy(env)}
    for name in ("critic_1", "critic_2", "target_critic_1", "target_critic_2"):
        models[name] = Critic(env, q=True)
    return SAC(
        models=models,
        memory=RandomMemory(memory_size=T, num_envs=env.num_envs),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=env.device,
        cfg=quiet(SAC_CFG(learning_starts=10 * T, discount_factor=GAMMA)),
    )


@pytest.mark.slow
@pytest.mark.parametrize("exact", [True, False], ids=["bootstrap_from", "skrl-default"])
def test_sac_stores_the_true_final_observation_as_the_next_one(reference, exact):
    torch.manual_seed(0)
    env = to_skrl(gpu_envs.wrap(FakeIsaacDirectEnv(N, compute_final_obs=True)))
    agent = sac(env)
    if exact:
        env.bootstrap_from(agent)
    train_steps(env, agent)
    stored = agent.memory.get_tensor_by_name("next_observations").transpose(0, 1).numpy()  # [N, T, 3]
    np.testing.assert_array_equal(stored, reference["next_observation" if exact else "root"])
    ended = reference["truncated"] | reference["terminated"]
    assert not np.array_equal(reference["next_observation"][ended], reference["root"][ended])


def test_bootstrap_from_refuses_unsupported_agents():
    env = to_skrl(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0))
    with pytest.raises(gpu_envs.InvalidArgumentError, match="PPO, A2C, RPO, TRPO, AMP, SAC, TD3, DDPG, DQN, DDQN"):
        env.bootstrap_from(object())
    rnn = PPO_RNN.__new__(PPO_RNN)  # the class is enough: recurrent agents are refused by type
    with pytest.raises(gpu_envs.InvalidArgumentError, match="PPO_RNN"):
        env.bootstrap_from(rnn)
    agent = ppo(env)
    env.bootstrap_from(agent)
    hook = agent.record_transition
    env.bootstrap_from(agent)
    assert agent.record_transition is hook
    other = to_skrl(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0))
    with pytest.raises(gpu_envs.InvalidArgumentError, match="another env adapter"):
        other.bootstrap_from(agent)


def test_dict_groups_get_their_final_observations_flattened_as_skrl_reads_them():
    """Isaac Lab's manager env: the "critic" group is a Dict of terms; its final values reach record_transition."""
    from tests.isaac_fakes import FakeIsaacManagerEnv

    env = to_skrl(gpu_envs.wrap(FakeIsaacManagerEnv(N, compute_final_obs=True)))
    env._bootstrap = True  # what bootstrap_from switches on (the agent's side is tested above)
    env.reset()
    for _ in range(3):  # every first episode ends at step 3
        obs, _, terminated, truncated, _ = env.step(torch.zeros(N, 1))
    assert (terminated | truncated).all()
    assert env.final_observations[:, 2].tolist() == [3.0] * N and obs[:, 2].tolist() == [0.0] * N  # s_T, then reset
    assert env.final_states.shape == env.state().shape == (N, 4)
    assert torch.equal(env.final_states[:, :3], env.final_observations)  # the Dict's terms, sorted: counts, progress


def test_training_through_another_adapter_than_the_bootstrapped_one_is_refused():
    """``a.bootstrap_from(agent)`` and a trainer on ``b = to_skrl(same env)``: the agent once stored the reset
    observation as the next one where an episode ended; it now names the mix-up."""
    base = gpu_envs.wrap(FakeIsaacDirectEnv(N, compute_final_obs=True))
    a, b = to_skrl(base), to_skrl(base)
    agent = ppo(a)
    a.bootstrap_from(agent)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="trained through another to_skrl adapter"):
        train_steps(b, agent, steps=3)
