"""Envs with a backend's shape but an auto-reset no backend handles are refused with the fix, never wrapped wrong.

PufferLib's vector envs reset an ended sub-env on the NEXT step (ignoring that step's
action, reward 0) without declaring it; the torch backend used to claim them by their
shape, and every episode would have gained a fake reward-0 transition. Pre-0.26 gym
vector envs let a raw AttributeError out of wrap(). Both now get a gpu_envs error naming
the fix, from the real packages (pufferlib-core, gym 0.26 classes).
"""

from __future__ import annotations

import importlib.util

import gymnasium
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.backends.foreign import is_known_foreign, refusal
from gpu_envs.contract.errors import AutoresetModeError, NotAnEnvError

puffer = pytest.mark.skipif(
    importlib.util.find_spec("pufferlib") is None, reason="pufferlib-core not installed (CI installs it)"
)
legacy_gym = pytest.mark.skipif(importlib.util.find_spec("gym") is None, reason="gym not installed (extra 'gym')")


def cartpole_creator(buf=None, seed=0):
    import pufferlib.emulation

    return pufferlib.emulation.GymnasiumPufferEnv(env=gymnasium.make("CartPole-v1"), buf=buf, seed=seed)


@puffer
def test_pufferlib_serial_vector_env_is_refused_not_claimed_by_the_torch_backend():
    import pufferlib.vector

    venv = pufferlib.vector.make(cartpole_creator, backend=pufferlib.vector.Serial, num_envs=4)
    try:
        with pytest.raises(AutoresetModeError, match="fake reward-0 transition") as err:
            gpu_envs.wrap(venv, device="cpu")
        assert "backend='gymnasium'" in str(err.value)
        assert is_known_foreign(venv)
    finally:
        venv.close()


@puffer
@pytest.mark.slow
def test_pufferlib_multiprocessing_vector_env_is_refused():
    import pufferlib.vector

    venv = pufferlib.vector.make(cartpole_creator, backend=pufferlib.vector.Multiprocessing, num_envs=2, num_workers=2)
    try:
        with pytest.raises(AutoresetModeError, match="PufferLib vector env"):
            gpu_envs.wrap(venv)
    finally:
        venv.close()


@puffer
def test_native_and_emulated_puffer_envs_are_refused_with_the_fix():
    import pufferlib

    class Native(pufferlib.PufferEnv):
        def __init__(self):
            self.single_observation_space = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
            self.single_action_space = gymnasium.spaces.Discrete(2)
            self.num_agents = 4
            super().__init__()

    with pytest.raises(NotAnEnvError, match="native PufferLib env"):
        gpu_envs.wrap(Native())
    emulated = cartpole_creator()
    with pytest.raises(NotAnEnvError, match=r"gpu_envs.wrap\(puffer_env.env\)"):
        gpu_envs.wrap(emulated)
    # the fix works: the gymnasium env inside, as a batch of one, with real steps only
    env = gpu_envs.wrap(emulated.env, device="cpu", seed=0)
    td = env.rollout(300)
    assert td["next", "done"].sum() >= 5 and (td["next", "reward"] == 1).all()  # a fake step would pay 0


@legacy_gym
def test_pre_026_gym_vector_env_gets_a_gpu_envs_error_not_an_attribute_error():
    import gym

    class OldVectorEnv(gym.vector.VectorEnv):
        """gym < 0.26 style: batched spaces only, reset -> obs, step -> 4-tuple (like Brax's VectorGymWrapper)."""

        def __init__(self):  # no super().__init__: no single_* spaces
            self.num_envs = 2
            self.observation_space = gym.spaces.Box(-1, 1, (2, 3), np.float32)
            self.action_space = gym.spaces.MultiDiscrete([2, 2])

        def reset(self):
            return np.zeros((2, 3), np.float32)

        def step(self, action):
            return np.zeros((2, 3), np.float32), np.zeros(2), np.zeros(2, bool), {}

    with pytest.raises(NotAnEnvError, match=r"pre-0\.26 gym vector API") as err:
        gpu_envs.wrap(OldVectorEnv())
    assert "single_observation_space" in str(err.value)


def test_ordinary_envs_are_not_foreign():
    vector = gymnasium.make_vec("CartPole-v1", 2)
    assert refusal(vector) is None and refusal(gymnasium.make("CartPole-v1")) is None
    with pytest.raises(NotAnEnvError, match="does not know how to wrap"):
        gpu_envs.wrap(vector, backend="foreign")
    vector.close()
    assert refusal(torch.zeros(1)) is None
