"""Every bad input gets a gpu_envs error that names the cause and the fix."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from tests.fakes import CountingTorchVectorEnv


@pytest.fixture
def cartpole():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    yield env
    env.close()


def _td(env, action):
    td = env.reset()
    td["action"] = action
    return td


@pytest.mark.parametrize(
    ("action", "words"),
    [
        (torch.zeros(4, 1, dtype=torch.long), ["shape (4, 1)", "squeeze(-1)"]),
        (torch.zeros(3, dtype=torch.long), ["shape (3,)", "(4,)"]),
        (torch.zeros(4, dtype=torch.float32), ["dtype torch.float32", "torch.int64"]),
        (torch.zeros(4, dtype=torch.long, device="meta"), ["meta", "action.to('cpu')"]),
    ],
)
def test_action_metadata_errors(cartpole, action, words):
    cartpole.reset()
    td = TensorDict({"action": action}, batch_size=[])  # no device: nothing is cast for us
    with pytest.raises(gpu_envs.ActionError) as err:
        cartpole.step(td)
    assert isinstance(err.value, ValueError)
    for word in words:
        assert word in str(err.value)


def test_missing_action_key(cartpole):
    with pytest.raises(gpu_envs.ActionError, match='no "action" entry'):
        cartpole.step(cartpole.reset())


def test_non_tensor_action(cartpole):
    td = cartpole.reset()
    td.set_non_tensor("action", [0, 1, 0, 1])
    with pytest.raises(gpu_envs.ActionError, match=r"torch\.Tensor"):
        cartpole.step(td)


def test_discrete_action_out_of_range_on_first_step(cartpole):
    with pytest.raises(gpu_envs.ActionError, match="outside"):
        cartpole.step(_td(cartpole, torch.tensor([0, 1, 2, 0])))


def test_discrete_action_out_of_range_every_step_with_validate():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", validate_actions=True)
    td = _td(env, torch.zeros(4, dtype=torch.long))
    td, root = env.step_and_maybe_reset(td)
    root["action"] = torch.tensor([0, -1, 0, 0])
    with pytest.raises(gpu_envs.ActionError, match="outside"):
        env.step(root)


def test_step_before_reset():
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu")
    td = TensorDict({"action": torch.zeros(2, dtype=torch.long)}, batch_size=[2])
    with pytest.raises(gpu_envs.ResetNeededError, match="reset"):
        env.step(td)
    assert isinstance(gpu_envs.ResetNeededError("x"), RuntimeError)


def test_step_and_reset_after_close(cartpole):
    td = _td(cartpole, torch.zeros(4, dtype=torch.long))
    cartpole.close()
    with pytest.raises(gpu_envs.ClosedEnvError, match="closed"):
        cartpole.step(td)
    with pytest.raises(gpu_envs.ClosedEnvError):
        cartpole.reset()
    cartpole.close()


def test_unknown_env_id_lists_available():
    with pytest.raises(gpu_envs.UnknownEnvError) as err:
        gpu_envs.make("CartPol-v1", backend="torch")
    assert "CartPole-v1" in str(err.value) and "Pendulum-v1" in str(err.value)


def test_unknown_backend_lists_available():
    with pytest.raises(gpu_envs.UnknownBackendError) as err:
        gpu_envs.make("CartPole-v1", backend="mujoco")
    assert "torch" in str(err.value)


@pytest.mark.parametrize("num_envs", [0, -3, 2.5, True])
def test_bad_num_envs(num_envs):
    with pytest.raises(gpu_envs.InvalidArgumentError, match="num_envs"):
        gpu_envs.make("CartPole-v1", num_envs=num_envs)


@pytest.mark.parametrize(
    "mask",
    [torch.ones(3, dtype=torch.bool), torch.ones(4, 2, dtype=torch.bool), torch.ones(4, 1, dtype=torch.long)],
)
def test_bad_reset_mask(cartpole, mask):
    cartpole.reset()
    with pytest.raises(gpu_envs.ResetMaskError, match="_reset"):
        cartpole.reset(td=TensorDict({"_reset": mask}, batch_size=[]))


def test_partial_reset_unsupported_backend():
    class NoMask(CountingTorchVectorEnv):
        supports_reset_mask = False

    env = gpu_envs.wrap(NoMask(4))
    env.reset()
    with pytest.raises(gpu_envs.ResetMaskError, match="cannot reset a subset"):
        env.reset(td=TensorDict({"_reset": torch.tensor([True, False, False, False])}, batch_size=[4]))
    # an all-True mask is just a full reset
    out = env.reset(td=TensorDict({"_reset": torch.ones(4, dtype=torch.bool)}, batch_size=[4]))
    assert out["observation"][:, 1].tolist() == [1, 1, 1, 1]


def test_wrap_non_env():
    with pytest.raises(gpu_envs.NotAnEnvError, match="does not know how to wrap"):
        gpu_envs.wrap(object())


def test_wrap_env_on_other_device():
    with pytest.raises(gpu_envs.DeviceMismatchError, match="Build the env on"):
        gpu_envs.wrap(CountingTorchVectorEnv(2, device="cpu"), device="meta")


def test_env_missing_observation_group():
    class Groups(CountingTorchVectorEnv):
        def __init__(self):
            super().__init__(2)
            import gymnasium as gym

            self.single_observation_space = gym.spaces.Dict(
                policy=self.single_observation_space, critic=self.single_observation_space
            )
            self.drop = False

        def reset(self, **kw):
            obs, info = super().reset(**kw)
            return {"policy": obs, "critic": obs}, info

        def step(self, action):
            obs, *rest = super().step(action)
            return ({"policy": obs} if self.drop else {"policy": obs, "critic": obs}), *rest

    inner = Groups()
    env = gpu_envs.wrap(inner)
    td = env.reset()
    assert set(td.keys()) >= {"policy", "critic"}
    td["action"] = torch.zeros(2, dtype=torch.long)
    inner.drop = True
    with pytest.raises(gpu_envs.ObservationError, match="'critic'"):
        env.step(td)


def test_backend_breaking_its_contract_is_reported():
    class BadFlags(CountingTorchVectorEnv):
        def step(self, action):
            obs, rew, term, trunc, info = super().step(action)
            return obs, rew, term.long(), trunc, info

    env = gpu_envs.wrap(BadFlags(2))
    td = _td(env, torch.zeros(2, dtype=torch.long))
    with pytest.raises(gpu_envs.BackendError, match=r"terminated of dtype torch\.int64"):
        env.step(td)


def test_rollout_bad_steps(cartpole):
    with pytest.raises(ValueError, match="steps"):
        cartpole.rollout(0)


def test_torch_env_with_next_step_autoreset_is_refused():
    import gymnasium as gym

    class NextStep(CountingTorchVectorEnv):
        metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    with pytest.raises(gpu_envs.AutoresetModeError, match="SAME_STEP"):
        gpu_envs.wrap(NextStep(2))
