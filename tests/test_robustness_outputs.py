"""What an env returns, and what is stepped into it, is checked where it can be (issue 10).

* ``validate_actions=True`` checks action values on every step: Discrete ranges, Box bounds and
  non-finite values (a Pendulum torque of 100 or NaN raises ActionError); without it a
  Box action goes to the env as it is (documented), and nothing is touched by a refusal.
* The first reset (and every reset) and the first step validate the backend's outputs
  for every backend: type, shape, dtype, device of every observation key and flag.
* After the first step, a backend handing on tensors it did not make (a user torch env,
  Isaac Lab) has the metadata of its outputs checked on every step (no host sync): a
  shape or dtype that changes, or a final observation of the wrong shape, is a clear
  error instead of a broadcast or a promotion.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from tests.fakes import CountingTorchVectorEnv

N = 4


def _pendulum(**kwargs):
    env = gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=0, **kwargs)
    return env, env.reset()


# ------------------------------------------------------------------------------ actions


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (100.0, ["outside", "ClipAction"]),
        (float("nan"), ["non-finite", "NaN"]),
        (float("inf"), ["non-finite"]),
        (-2.5, ["outside"]),
    ],
)
def test_validate_checks_box_bounds_and_non_finite_values_on_every_step(value, words):
    env, td = _pendulum(validate_actions=True)
    for _ in range(3):  # valid steps first: the check runs on every step, not only the first
        td["action"] = env.action_spec.rand()
        td, td = env.step_and_maybe_reset(td)
    before = td["observation"].clone()
    td["action"] = torch.full((N, 1), value)
    with pytest.raises(gpu_envs.ActionError) as err:
        env.step_and_maybe_reset(td)
    for word in words:
        assert word in str(err.value)
    assert torch.equal(env.root()["observation"], before)  # refused before anything moved
    td["action"] = torch.zeros(N, 1)
    env.step_and_maybe_reset(td)


def test_without_validate_a_box_action_goes_to_the_env_as_documented():
    env, td = _pendulum()
    td["action"] = torch.full((N, 1), 100.0)  # the built-in Pendulum clips it, as gymnasium's does
    td, root = env.step_and_maybe_reset(td)
    twin, ref = _pendulum()
    ref["action"] = torch.full((N, 1), 2.0)
    torch.testing.assert_close(root["observation"], twin.step_and_maybe_reset(ref)[1]["observation"])


def test_validate_can_be_switched_on_later_and_must_be_a_bool():
    env, td = _pendulum()
    env.validate_actions = True
    td["action"] = torch.full((N, 1), float("nan"))
    with pytest.raises(gpu_envs.ActionError, match="non-finite"):
        env.step(td)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="validate_actions"):
        env.validate_actions = "yes"


def test_discrete_values_are_checked_on_the_first_step_and_with_validate():
    env = gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", validate_actions=True)
    td = env.reset()
    td["action"] = torch.zeros(N, dtype=torch.long)
    td, td = env.step_and_maybe_reset(td)
    td["action"] = torch.tensor([0, 1, 2, 0])
    with pytest.raises(gpu_envs.ActionError, match="outside"):
        env.step(td)


# ---------------------------------------------------------------------- reset outputs


class BadReset(CountingTorchVectorEnv):
    """Returns float64 observations of the wrong width from reset (the issue's [N, 7] case)."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed, options=options)
        return torch.zeros(self.num_envs, 7, dtype=torch.float64), {}


class ListReset(CountingTorchVectorEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return {"observation": obs, "extra": obs}, info


def test_reset_outputs_are_validated_for_every_backend():
    with pytest.raises(
        gpu_envs.BackendError, match=r"reset returned the observation 'observation' with shape \(4, 7\), torch.float64"
    ):
        gpu_envs.wrap(BadReset(N)).reset()
    env = gpu_envs.wrap(BadReset(N))
    with pytest.raises(gpu_envs.BackendError):
        env.reset()
    with pytest.raises(gpu_envs.ResetNeededError, match="before reset"):  # the failed first reset left it unreset
        env.root()


# ----------------------------------------------------------------------- step outputs


class ChangingEnv(CountingTorchVectorEnv):
    """Steps correctly, then breaks its own contract from step ``at`` on, in one of several ways."""

    def __init__(self, how, at=3):
        super().__init__(N, final_obs="info")
        self.how, self.at, self.calls = how, at, 0

    def step(self, action):
        self.calls += 1
        obs, reward, terminated, truncated, info = super().step(action)
        if self.calls < self.at:
            return obs, reward, terminated, truncated, info
        if self.how == "wider":
            obs = torch.cat([obs, obs], dim=1)
        elif self.how == "float64":
            obs = obs.double()
        elif self.how == "one_row":
            obs = obs[:1]  # [1, 3] broadcasts over [N, 3] in a where: silent without the check
        elif self.how == "final_obs":
            info["final_obs"] = info["final_obs"][:, :1]  # [N, 1] broadcasts too
        elif self.how == "int_flags":
            terminated = terminated.long()
        elif self.how == "list":
            obs = obs.tolist()
        elif self.how == "numpy_reward":
            reward = reward.numpy()  # used to read "returned reward (4,) ...; expected 4 values": no word of numpy
        elif self.how == "old_api":
            return obs, reward, terminated | truncated, info  # gym < 0.26's 4-tuple
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("wider", ["'observation'", "(4, 6)", "(4, 3)"]),
        ("float64", ["torch.float64", "torch.float32"]),
        ("one_row", ["(1, 3)", "(4, 3)"]),
        ("final_obs", ["final observation", "(4, 1)"]),
        ("int_flags", ["terminated", "torch.int64"]),
        ("list", ["list", "torch.Tensor"]),
        ("old_api", ["5", "4"]),
        ("numpy_reward", ["numpy.ndarray", "torch.as_tensor"]),
    ],
)
@pytest.mark.parametrize("call", ["step", "step_and_maybe_reset"])
def test_step_outputs_that_change_after_the_first_step_are_caught(how, words, call):
    sim = ChangingEnv(how)
    env = gpu_envs.wrap(sim)
    td = env.reset()
    with pytest.raises(gpu_envs.BackendError) as err:
        for _ in range(5):
            td["action"] = torch.zeros(N, dtype=torch.long)
            if call == "step":
                env.step(td)
                td = env.root()
            else:
                td, td = env.step_and_maybe_reset(td)
    assert sim.calls == sim.at
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    with pytest.raises(gpu_envs.InterruptedStepError):
        env.step(td)


@pytest.mark.parametrize("how", ["list", "old_api", "float64"])
def test_a_broken_first_step_is_caught_too(how):
    env = gpu_envs.wrap(ChangingEnv(how, at=1))
    td = env.reset()
    td["action"] = torch.zeros(N, dtype=torch.long)
    with pytest.raises(gpu_envs.BackendError):
        env.step(td)


def test_a_numpy_reward_on_the_first_step_is_named_as_such():
    # it used to read "returned reward (4,) on ?; expected 4 values": the same shape, and no word of numpy
    env = gpu_envs.wrap(ChangingEnv("numpy_reward", at=1))
    td = env.reset()
    td["action"] = torch.zeros(N, dtype=torch.long)
    with pytest.raises(
        gpu_envs.BackendError, match=r"reward as a numpy\.ndarray, not a torch\.Tensor.*torch\.as_tensor"
    ):
        env.step(td)
