"""collect / rollout / RolloutBuffer / gae / transforms: bad inputs are refused, never dropped or guessed (issue 10)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.rollout import RolloutBuffer, add_gae, collect, gae
from gpu_envs.transforms import (
    ActionRescale,
    ClipReward,
    EpisodeStats,
    ObservationNorm,
    RewardScale,
    TransformedEnv,
)


@pytest.fixture
def env():
    env = gpu_envs.make("CartPole-v1", num_envs=3, device="cpu", seed=0)
    yield env
    env.close()


# ----------------------------------------------------------------- collect / rollout


@pytest.mark.parametrize("target", [42, None, "CartPole-v1", torch.zeros(3)])
def test_collect_and_buffers_want_an_env(target):
    for call in (lambda: collect(target, steps=4), lambda: RolloutBuffer(target, 4)):
        with pytest.raises(gpu_envs.InvalidArgumentError, match=r"needs an env .*gpu_envs.make/wrap"):
            call()


@pytest.mark.parametrize("steps", [0, -2, 2.0, True, "4"])
def test_steps_must_be_a_positive_int(env, steps):
    for call in (lambda: collect(env, steps=steps), lambda: env.rollout(steps), lambda: RolloutBuffer(env, steps)):
        with pytest.raises(gpu_envs.InvalidArgumentError, match="steps"):
            call()
    assert env.needs_reset  # nothing was touched


def test_numpy_steps_are_accepted(env):
    assert collect(env, steps=np.int64(4)).batch_size == (3, 4)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [({"policy": "random"}, "policy"), ({"compile": 1}, "compile"), ({"cudagraph": "no"}, "cudagraph")],
)
def test_collect_options_are_checked(env, kwargs, word):
    with pytest.raises(gpu_envs.InvalidArgumentError, match=word):
        collect(env, steps=2, **kwargs)


def test_a_rollout_that_cannot_fit_is_refused_before_the_env_is_touched(env):
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"steps=1000000000000.*available.*fewer steps"):
        env.rollout(10**12)
    assert env.needs_reset
    with pytest.raises(gpu_envs.InvalidArgumentError, match="available"):
        collect(env, steps=10**12)


def test_an_entry_the_policy_writes_only_from_step_two_on_is_an_error_not_dropped(env):
    calls = []

    def late(td):
        calls.append(1)
        td["action"] = env.action_spec.rand()
        if len(calls) >= 2:
            td["log_prob"] = torch.zeros(3, 1)
        return td

    with pytest.raises(gpu_envs.RolloutError, match=r"\('log_prob',\).*only from some step on"):
        collect(env, late, steps=5)
    calls.clear()
    with pytest.raises(gpu_envs.RolloutError, match="log_prob"):
        env.rollout(5, late)


def test_a_non_tensor_entry_is_an_error_not_dropped(env):
    def named(td):
        td["action"] = env.action_spec.rand()
        td.set_non_tensor("policy_name", "ppo")
        return td

    with pytest.raises(gpu_envs.RolloutError, match=r"'policy_name' holds a str.*tensors only"):
        collect(env, named, steps=3)


def test_collect_follows_a_new_policys_keys_with_its_cached_buffer(env):
    def with_value(td):
        td["action"] = env.action_spec.rand()
        td["value"] = torch.zeros(3, 1)
        return td

    assert "value" in collect(env, with_value, steps=3)
    assert "value" not in collect(env, None, steps=3)  # not "use a new RolloutBuffer" when none was given


# ------------------------------------------------------------------------------- gae


def _case(n=2, t=4, flag_dtype=torch.bool):
    g = torch.Generator().manual_seed(0)
    flags = [(torch.rand(n, t, generator=g) < 0.3).to(flag_dtype) for _ in range(2)]
    return torch.rand(n, t, generator=g), torch.rand(n, t, generator=g), torch.rand(n, t, generator=g), *flags


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_gae_refuses_non_bool_flags_instead_of_reading_0_3_as_true(dtype):
    r, v, nv, term, trunc = _case(flag_dtype=dtype)
    if dtype == torch.float32:
        term = term * 0.3  # 0.3: an episode end or not? gae does not guess
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"terminated must be a bool tensor.*\.bool\(\)"):
        gae(r, v, nv, term, trunc.bool(), gamma=0.9, lam=0.9)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="final_obs_missing must be a bool"):
        gae(r, v, nv, term.bool(), trunc.bool(), torch.zeros(2, 4), gamma=0.9, lam=0.9)


@pytest.mark.parametrize("shape", [(2, 0), (0, 4), (2, 0, 1)])
def test_gae_of_an_empty_rollout_is_a_clear_error(shape):
    z = torch.zeros(shape)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="empty"):
        gae(z, z, z, z.bool(), z.bool(), gamma=0.9, lam=0.9)


@pytest.mark.parametrize(
    ("gamma", "ok"),
    [
        (np.float32(0.99), True),
        (np.float64(0.9), True),
        (1, True),
        (float("nan"), False),
        (True, False),
        ("0.9", False),
        (1.5, False),
    ],
)
def test_gae_numbers(gamma, ok):
    case = _case()
    if ok:
        adv, _ = gae(*case, gamma=gamma, lam=0.95)
        assert adv.shape == (2, 4)
    else:
        with pytest.raises(gpu_envs.InvalidArgumentError, match="gamma"):
            gae(*case, gamma=gamma, lam=0.95)


def test_gae_inputs_on_two_devices_are_named():
    r, v, nv, term, trunc = _case()
    with pytest.raises(gpu_envs.InvalidArgumentError, match="value is on meta"):
        gae(r, v.to("meta"), nv, term, trunc, gamma=0.9, lam=0.9)


def test_add_gae_wants_a_rollout(env):
    with pytest.raises(gpu_envs.InvalidArgumentError, match="rollout TensorDict"):
        add_gae({"state_value": 1}, gamma=0.9, lam=0.9)
    traj = TensorDict({"state_value": torch.zeros(3, 2, 1)}, batch_size=[3, 2])
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"\('next', 'reward'\)"):
        add_gae(traj, gamma=0.9, lam=0.9)


# ------------------------------------------------------------------------ transforms


@pytest.mark.parametrize(
    ("build", "word"),
    [
        (lambda: RewardScale(True), "scale"),
        (lambda: RewardScale("0.1"), "scale"),
        (lambda: RewardScale(float("nan")), "scale"),
        (lambda: ClipReward(float("nan"), 1.0), "low"),
        (lambda: ClipReward(2.0, 1.0), "low <= high"),
        (lambda: ObservationNorm(eps=0), "eps"),
        (lambda: ObservationNorm(eps=True), "eps"),
        (lambda: ObservationNorm(clip=-1), "clip"),
        (lambda: ObservationNorm(frozen=1), "frozen"),
        (lambda: ObservationNorm(keys=3), "keys"),
        (lambda: ObservationNorm(keys=[]), "keys"),
    ],
)
def test_transform_arguments_are_checked(build, word):
    with pytest.raises(gpu_envs.InvalidArgumentError, match=word):
        build()


def test_transform_numbers_accept_numpy_scalars():
    assert RewardScale(np.float32(0.5), loc=np.int64(1)).scale == 0.5
    assert ClipReward(np.float64(-1), np.float32(1)).high == 1.0
    assert ObservationNorm(eps=np.float32(1e-6), clip=np.int32(5)).clip == 5.0


@pytest.mark.parametrize("td", [None, {"action": torch.zeros(3)}, (1, 2), torch.zeros(3)])
def test_transformed_env_step_wants_a_tensordict_and_stays_usable(td):
    env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=3, device="cpu"), EpisodeStats(), ActionRescale())
    root = env.reset(seed=0)
    for call in (env.step, env.step_and_maybe_reset):
        with pytest.raises(gpu_envs.InvalidArgumentError, match="takes the TensorDict"):
            call(td)
    with pytest.raises(gpu_envs.ActionError, match='no "action" entry'):
        env.step(root)
    root["action"] = env.action_spec.rand()
    env.step_and_maybe_reset(root)  # nothing was marked broken by the refused calls


def test_episode_stats_read_before_its_env_exists_is_a_clear_error():
    stats = EpisodeStats()
    for read in (stats.summary, lambda: stats.episodes, lambda: stats.running_return, stats.clear):
        with pytest.raises(gpu_envs.InvalidArgumentError, match="build the TransformedEnv"):
            read()
