"""The built-in envs keep gymnasium's conventions (issue 9, deliverable 2).

* ``gymnasium.make_vec("gpu_envs/CartPole-v1", ...)`` builds them once gpu_envs is
  imported (and the ``"gpu_envs:..."`` form imports it), behind the gymnasium-facing
  boundary: ``envs.step(envs.action_space.sample())`` works, numpy actions (and lists,
  and tensors on another device) are converted there, tensors on the device pass through;
* the env's own ``step`` takes tensors on its device only, and says where numpy goes;
* torchrl's ``GymWrapper`` takes them the way their docstrings say.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.builtin import CartPoleEnv, PendulumEnv
from gpu_envs.builtin.gymnasium_ids import GymnasiumActions, register_gymnasium_ids

ENVS = {"CartPole-v1": CartPoleEnv, "Pendulum-v1": PendulumEnv}


def _steps(env, actions):
    env.reset(seed=3)
    return [env.step(a) for a in actions]


@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_numpy_actions_from_the_action_space_step_like_tensors(env_id):
    env = gymnasium.make_vec(f"gpu_envs/{env_id}", num_envs=6, seed=0)
    env.action_space.seed(1)
    numpy_actions = [env.action_space.sample() for _ in range(30)]
    assert isinstance(numpy_actions[0], np.ndarray)
    with_numpy = _steps(env, numpy_actions)
    as_lists = _steps(env, [a.tolist() for a in numpy_actions])
    as_tensors = _steps(env, [torch.as_tensor(a) for a in numpy_actions])
    for got_numpy, got_list, want in zip(with_numpy, as_lists, as_tensors, strict=True):
        for a, b, c in zip(got_numpy[:4], got_list[:4], want[:4], strict=True):
            assert torch.equal(a, c) and torch.equal(b, c)
        assert torch.equal(got_numpy[4]["final_obs"], want[4]["final_obs"])


def test_float64_torques_are_accepted_and_cast():
    env = gymnasium.make_vec("gpu_envs/Pendulum-v1", num_envs=4, seed=0)
    env.reset(seed=0)
    obs64 = env.step(np.full((4, 1), 0.5))[0]
    env.reset(seed=0)
    obs32 = env.step(torch.full((4, 1), 0.5))[0]
    assert torch.equal(obs64, obs32)


def test_action_tensor_on_the_env_device_is_used_without_a_copy():
    env = CartPoleEnv(num_envs=4)
    action = torch.ones(4, dtype=torch.long)
    assert env._as_action(action) is action
    boundary = GymnasiumActions(env)
    assert boundary.actions(action) is action
    from_numpy = boundary.actions(np.ones(4, dtype=np.int64))
    assert isinstance(from_numpy, torch.Tensor) and from_numpy.device == env.device


@pytest.mark.parametrize("action", [np.ones(4, dtype=np.int64), [1, 1, 1, 1]], ids=["numpy", "list"])
def test_the_env_itself_refuses_numpy_actions_naming_the_boundary(action):
    env = CartPoleEnv(num_envs=4, seed=0)
    env.reset(seed=0)
    with pytest.raises(gpu_envs.ActionError, match=r"torch\.Tensor on cpu.*gymnasium\.make_vec\('gpu_envs/<id>'"):
        env.step(action)
    env.step(torch.ones(4, dtype=torch.long))  # nothing moved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device (CUDA)")
def test_actions_on_another_device_are_moved_to_the_env():
    env = gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=4, device="cuda")
    env.reset(seed=0)
    obs = env.step(torch.ones(4, dtype=torch.long))[0]  # a CPU tensor for a CUDA env
    assert obs.device.type == "cuda"
    obs = env.step(np.ones(4, dtype=np.int64))[0]
    assert obs.device.type == "cuda"


@pytest.mark.parametrize(
    ("env_id", "cls", "limit"), [("CartPole-v1", CartPoleEnv, 500), ("Pendulum-v1", PendulumEnv, 200)]
)
def test_gymnasium_make_vec_builds_the_builtin_env(env_id, cls, limit):
    envs = gymnasium.make_vec(f"gpu_envs/{env_id}", num_envs=8, vectorization_mode="vector_entry_point", seed=5)
    assert type(envs.unwrapped) is cls and isinstance(envs, GymnasiumActions)
    assert envs.num_envs == 8 and envs.device == torch.device("cpu")
    assert envs.spec.id == f"gpu_envs/{env_id}" and envs.max_episode_steps == limit
    assert envs.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    obs, _ = envs.reset(seed=0)
    obs, reward, terminated, _, _ = envs.step(envs.action_space.sample())
    assert obs.shape == (8, *envs.single_observation_space.shape) and reward.shape == terminated.shape == (8,)
    # the default vectorization mode is the vector entry point too (the ids have no single-env entry point)
    assert type(gymnasium.make_vec(f"gpu_envs/{env_id}", num_envs=2).unwrapped) is cls
    assert register_gymnasium_ids() == ["gpu_envs/CartPole-v1", "gpu_envs/Pendulum-v1"]  # idempotent


@pytest.mark.slow
def test_module_prefixed_id_imports_gpu_envs_itself():
    code = (
        "import sys, gymnasium\n"
        "assert 'gpu_envs' not in sys.modules\n"
        "envs = gymnasium.make_vec('gpu_envs:gpu_envs/CartPole-v1', num_envs=3)\n"
        "print(type(envs.unwrapped).__name__, envs.num_envs)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["CartPoleEnv", "3"]


@pytest.mark.parametrize(
    ("kwargs", "action_shape", "integer_actions"),
    [
        ({}, (8, 2), False),  # torchrl's default for Discrete: one-hot
        ({"categorical_action_encoding": True}, (8,), True),
        ({"categorical_action_encoding": True, "convert_actions_to_numpy": False}, (8,), True),
    ],
)
def test_torchrl_gym_wrapper_takes_cartpole_as_documented(kwargs, action_shape, integer_actions):
    from torchrl.envs import GymWrapper
    from torchrl.envs.utils import check_env_specs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # torchrl hands numpy actions unless convert_actions_to_numpy=False: the gymnasium-facing env takes them
        numpy_actions = kwargs.get("convert_actions_to_numpy", True)
        cartpoles = (
            gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=8, seed=0) if numpy_actions else CartPoleEnv(8, seed=0)
        )
        env = GymWrapper(cartpoles, **kwargs)
        check_env_specs(env)
        traj = env.rollout(250, break_when_any_done=False)
    assert env.batch_size == torch.Size([8])
    assert traj["action"].shape == (8, 250, *action_shape[1:])
    assert integer_actions == (traj["action"].dim() == 2)
    terminated = traj["next", "terminated"].squeeze(-1)
    assert terminated.sum() > 20
    final = traj["next", "observation"][terminated]
    # the TRUE final observations: the cart or the pole is out of bounds
    assert (
        (final[:, 0].abs() > CartPoleEnv.x_threshold) | (final[:, 2].abs() > CartPoleEnv.theta_threshold_radians)
    ).all()
    # and the next step starts from a reset state
    assert (traj["observation"][:, 1:][terminated[:, :-1]].abs() <= CartPoleEnv.reset_high).all()


def test_torchrl_gym_wrapper_takes_pendulum_as_documented():
    from torchrl.envs import GymWrapper
    from torchrl.envs.utils import check_env_specs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = GymWrapper(PendulumEnv(4, seed=0), convert_actions_to_numpy=False)
        check_env_specs(env)
        traj = env.rollout(201, break_when_any_done=False)
    assert traj["action"].shape == (4, 201, 1)
    assert traj["next", "truncated"][:, 199].all() and not traj["next", "truncated"][:, 200].any()
