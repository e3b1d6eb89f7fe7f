"""MuJoCo Playground's CartpoleBalance (MJX, impl="jax") through gpu_envs, against the env stepped by hand.

Balance episodes never terminate (``done`` only on NaN): they end at the time limit, so
every final observation is a time-limit one, and Playground's own auto-reset would have
replaced it by the row's cached first observation. The reset draws the cart within
+-0.1, the pole within +-0.034 rad of upright and velocities of 0.01 * N(0, 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from mujoco_playground import registry

import gpu_envs
from gpu_envs.backends.jax.brax import make_brax_core
from tests.brax.tasks import assert_matches, batched, reference, smooth_actions

pytestmark = pytest.mark.slow  # JIT compiles of MJX: tens of seconds each
N, T, EPISODE, SEED = 3, 40, 15, 5
LEVELS = [0.0, 0.3, -0.6]
OVERRIDES = {"impl": "jax"}


@pytest.fixture(scope="module")
def env():
    env = gpu_envs.make(
        "playground/CartpoleBalance", num_envs=N, episode_length=EPISODE, config_overrides=OVERRIDES, device="cpu"
    )
    yield env
    env.close()


@pytest.fixture(scope="module")
def rollout(env):
    actions = smooth_actions(LEVELS, T, 1)
    raw = registry.load("CartpoleBalance", config_overrides=OVERRIDES)
    return batched(env, actions, SEED), reference(raw, actions, SEED, EPISODE)


def test_transitions_match_the_env_stepped_by_hand(rollout):
    got, want = rollout
    assert_matches(got, want)
    assert not want["terminated"].any() and want["truncated"].sum() == N * (T // EPISODE)


def test_time_limit_finals_and_reset_distribution(rollout):
    got, _ = rollout
    truncated = got["truncated"]
    assert (np.flatnonzero(truncated[0]) + 1 == np.arange(1, T // EPISODE + 1) * EPISODE).all()
    roots = got["root"][truncated]
    cart, cos, sin, vel = roots[:, 0], roots[:, 1], roots[:, 2], roots[:, 3:]
    assert (
        (np.abs(cart) <= 0.1 + 1e-6).all()
        and (cos >= np.cos(0.034) - 1e-6).all()
        and (np.abs(sin) <= 0.034 + 1e-6).all()
    )
    assert (np.abs(vel) < 0.06).all()
    final, before = got["next_observation"][truncated], got["observation"][truncated]
    assert (np.linalg.norm(final - before, axis=-1) < np.linalg.norm(roots - before, axis=-1)).all()
    # the row pushed hard moves its cart far faster than any reset does: a reset observation would not
    assert (np.abs(got["next_observation"][2][truncated[2]][:, 3]) > 0.2).all()


def test_metrics_are_info_entries_and_check_env_passes(env):
    assert "reward/upright" in env.info_spec
    td = env.rollout(5)
    assert td["next", "reward/upright"].shape == (N, 5)
    report = gpu_envs.check_env(env, steps=40, name="playground/CartpoleBalance")
    assert report.ok, report.format()


def test_playground_torch_wrapper_is_refused_with_the_fix():
    from mujoco_playground._src.wrapper_torch import RSLRLBraxWrapper

    raw = registry.load("CartpoleBalance", config_overrides=OVERRIDES)
    wrapped = RSLRLBraxWrapper.__new__(RSLRLBraxWrapper)  # its __init__ jit-compiles; detection needs the class only
    with pytest.raises(gpu_envs.contract.errors.NotAnEnvError, match="Playground's rsl_rl torch wrapper"):
        gpu_envs.wrap(wrapped)
    assert make_brax_core(raw, num_envs=2).episode_length == 1000  # the env config's episode_length
