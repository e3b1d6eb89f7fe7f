"""Copies of envs: a deep copy of a built-in env steps as the original would, in its own memory;
everything that cannot be copied faithfully is refused with a NotCopyableError naming what works.

Before, ``copy.deepcopy`` of a built-in env failed inside ctypes ("ctypes objects containing
pointers cannot be pickled") wherever the native CPU step runs, and a pickled one (the torch
step) came back with its state's column views detached from its state: it stepped wrongly
without a word.
"""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import pytest
import torch

import gpu_envs
from gpu_envs.builtin import CartPoleEnv, PendulumEnv


def _action(cls: type, n: int, generator: torch.Generator) -> torch.Tensor:
    if cls is CartPoleEnv:
        return torch.randint(0, 2, (n,), generator=generator)
    return torch.rand(n, 1, generator=generator) * 4 - 2


@pytest.mark.parametrize("native", [True, False], ids=["native", "torch-step"])
@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_a_deep_copy_steps_as_the_original_in_its_own_memory(monkeypatch, cls, native):
    if not native:
        monkeypatch.setenv("GPU_ENVS_NATIVE", "0")
    n = 6
    env = cls(n, seed=3, max_episode_steps=9)  # short episodes: resets and their draws happen
    env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        env.raw_step(_action(cls, n, g))
    twin = copy.deepcopy(env)
    assert twin.native_step == env.native_step
    assert twin.state.data_ptr() != env.state.data_ptr()
    for _ in range(40):
        action = _action(cls, n, g)
        ours, theirs = env.raw_step(action), twin.raw_step(action)
        for a, b in zip(ours[:5], theirs[:5], strict=True):
            if isinstance(a, dict):
                assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
            else:
                assert torch.equal(a, b)
    # independent: stepping the copy alone leaves the original where it was
    before = env.state.clone()
    twin.raw_step(_action(cls, n, g))
    assert torch.equal(env.state, before)


@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_pickling_or_shallow_copying_a_builtin_env_is_refused_naming_what_works(cls):
    env = cls(4, seed=0)
    env.reset()
    for operation in (pickle.dumps, copy.copy):
        with pytest.raises(gpu_envs.NotCopyableError, match=r"copy\.deepcopy\(env\).*set_state"):
            operation(env)
    env.raw_step(_action(cls, 4, torch.Generator().manual_seed(0)))  # still usable


def test_the_gymnasium_vector_env_of_a_builtin_env_refuses_copies_too():
    envs = gym.make_vec("gpu_envs/CartPole-v1", 4, seed=0)  # a gpu_envs env behind gymnasium's API
    envs.reset(seed=0)
    with pytest.raises(gpu_envs.NotCopyableError, match="get_state"):
        copy.deepcopy(envs)
    envs.step(envs.action_space.sample())  # still usable


def test_a_gpu_envs_env_refuses_copies_and_says_how_to_copy_rows():
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    env.reset()
    for operation in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(gpu_envs.NotCopyableError, match=r"set_state\(env\.get_state\(\)\)"):
            operation(env)
    # the way the message names: another env, restored from a snapshot, continues the same
    env.rollout(5)
    other = gpu_envs.make("CartPole-v1", num_envs=4, seed=1)
    other.reset()
    other.set_state(env.get_state())

    def policy(td):  # the same actions for the same observations (the two envs' generators differ)
        td.set("action", (td["observation"][:, 2] > 0).long())
        return td

    ours, theirs = env.rollout(30, policy, reset=False), other.rollout(30, policy, reset=False)
    assert torch.equal(ours["next", "observation"], theirs["next", "observation"])
    assert torch.equal(ours["next", "done"], theirs["next", "done"])
