"""examples/train_gymnasium.py: a CleanRL-style PPO written for gymnasium's vector API learns on
``to_gymnasium(make("CartPole-v1", num_envs=8))``, and the same loop runs on gymnasium's own
``make_vec`` env: the env line is the only difference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.example_files import load_example


@pytest.mark.slow
def test_cleanrl_style_ppo_learns_through_to_gymnasium(one_thread):
    example = load_example("train_gymnasium")
    envs = example.make_envs("gpu_envs", num_envs=8)
    assert type(envs.unwrapped).__name__ == "GymnasiumVectorEnv"
    returns = example.train(envs, total_steps=40_000, seed=1)
    first, last = np.mean(returns[:20]), np.mean(returns[-20:])
    assert first < 40, "starts near a random policy's return (~22)"
    assert last > 100 and last > 4 * first, (first, last)


@pytest.mark.slow
def test_the_same_loop_runs_on_gymnasiums_own_vector_env(one_thread):
    example = load_example("train_gymnasium")
    envs = example.make_envs("gymnasium", num_envs=8)
    assert type(envs.unwrapped).__module__.startswith("gymnasium.")  # gymnasium's own CartPole vector env
    returns = example.train(envs, total_steps=2 * 128 * 8, seed=1)
    assert len(returns) > 10
