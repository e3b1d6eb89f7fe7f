"""Brax's inverted pendulum through gpu_envs' JAX backend, against the env itself stepped by hand.

The pendulum ends an episode when the pole leans past 0.2 rad (``done``: terminated) and
gpu_envs' time limit truncates it after ``EPISODE`` steps. Rows 0-1 push gently (they
reach the time limit), rows 2-3 hard (the pole falls within a few steps), with constant
actions so nothing but the episode boundary separates a final observation from the
observation before it.
"""

from __future__ import annotations

import brax.envs
import jax
import numpy as np
import pytest
from brax.envs.wrappers import training

import gpu_envs
from gpu_envs.backends.jax.brax import make_brax_core
from gpu_envs.contract.errors import NotAnEnvError
from tests.brax.tasks import assert_matches, batched, reference, smooth_actions

pytestmark = pytest.mark.slow  # JIT compiles of Brax's pipeline: tens of seconds each
N, T, EPISODE, SEED = 4, 70, 12, 3
LEVELS = [0.0, 0.02, -0.5, 0.8]
ANGLE_LIMIT = 0.2  # inverted_pendulum.py: done = |obs[1]| > 0.2
RESET_RANGE = 0.01  # q = init_q + U(-0.01, 0.01), qd = U(-0.01, 0.01)


@pytest.fixture(scope="module")
def env():
    # reset_batch=2: steps ending 1-2 rows reset them gathered, steps ending 3-4 reset every row and select
    env = gpu_envs.make("brax/inverted_pendulum", num_envs=N, episode_length=EPISODE, reset_batch=2, device="cpu")
    yield env
    env.close()


@pytest.fixture(scope="module")
def raw():
    return brax.envs.get_environment("inverted_pendulum")


@pytest.fixture(scope="module")
def rollout(env, raw):
    actions = smooth_actions(LEVELS, T, 1)
    return batched(env, actions, SEED), reference(raw, actions, SEED, EPISODE)


def test_transitions_match_the_env_stepped_by_hand(rollout):
    got, want = rollout
    assert_matches(got, want)
    assert want["terminated"].sum() >= 5 and want["truncated"].sum() >= 5, "both kinds of episode end are covered"
    ended_per_step = (want["terminated"] | want["truncated"]).sum(axis=0)
    assert ((ended_per_step >= 1) & (ended_per_step <= 2)).any() and (ended_per_step >= 3).any(), "both reset paths ran"


def test_final_observations_satisfy_the_ending_condition(rollout):
    got, _ = rollout
    angle = np.abs(got["next_observation"][..., 1])
    terminated, truncated = got["terminated"], got["truncated"]
    assert (angle[terminated] > ANGLE_LIMIT).all()
    assert (angle[~terminated] <= ANGLE_LIMIT).all()
    # a time-limit end comes exactly EPISODE steps after the previous end
    for row in range(N):
        ends = np.flatnonzero(terminated[row] | truncated[row])
        lengths = np.diff(np.concatenate([[-1], ends]))
        np.testing.assert_array_equal(lengths[truncated[row][ends]], EPISODE)


def test_reset_observations_lie_in_the_reset_distribution_and_finals_stay_close(rollout, raw):
    got, _ = rollout
    ended = got["terminated"] | got["truncated"]
    roots = got["root"][ended]
    init_q = np.asarray(raw.sys.init_q)
    assert (np.abs(roots[:, :2] - init_q) <= RESET_RANGE + 1e-6).all() and (
        np.abs(roots[:, 2:]) <= RESET_RANGE + 1e-6
    ).all()
    final, before = got["next_observation"][ended], got["observation"][ended]
    assert (np.linalg.norm(final - before, axis=-1) < np.linalg.norm(roots - before, axis=-1)).all()


def test_seeded_resets_repeat_and_check_env_passes(env):
    actions = smooth_actions(LEVELS, 20, 1)
    first, again = batched(env, actions, 11), batched(env, actions, 11)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key], err_msg=key)
    report = gpu_envs.check_env(env, steps=60, name="brax/inverted_pendulum")
    assert report.ok, report.format()


def test_brax_training_wrappers_are_peeled_and_replaced(raw):
    core = make_brax_core(brax.envs.create("inverted_pendulum", episode_length=20, action_repeat=2, batch_size=3))
    assert (core.num_envs, core.episode_length, core.action_repeat) == (3, 20, 2)
    assert type(core.env).__name__ == "InvertedPendulum"
    core = make_brax_core(training.wrap(raw, episode_length=9), num_envs=5)
    assert (core.num_envs, core.episode_length, type(core.env).__name__) == (5, 9, "InvertedPendulum")
    with pytest.raises(NotAnEnvError, match="sits above a VmapWrapper"):
        make_brax_core(training.EvalWrapper(brax.envs.create("inverted_pendulum", batch_size=2)))
    with pytest.raises(NotAnEnvError, match="batch sizes"):  # a randomization_fn that batched nothing
        make_brax_core(training.wrap(raw, randomization_fn=lambda sys: (sys, jax.tree.map(lambda _: None, sys))))


def test_brax_gym_wrappers_are_refused_with_the_fix(raw):
    from brax.envs.wrappers import gym as brax_gym
    from brax.envs.wrappers import torch as brax_torch

    for obj in (
        brax_gym.GymWrapper(raw),
        brax_gym.VectorGymWrapper(brax.envs.create("inverted_pendulum", batch_size=2)),
        brax_torch.TorchWrapper(brax_gym.GymWrapper(raw)),
    ):
        with pytest.raises(NotAnEnvError, match=r"gpu_envs.wrap\(brax.envs.get_environment\(name\), num_envs=N\)"):
            gpu_envs.wrap(obj)


def test_brax_and_playground_ids_are_listed():
    ids = gpu_envs.available_envs()["jax"]
    assert "brax/inverted_pendulum" in ids and "brax/ant" in ids and "playground/CartpoleBalance" in ids
