"""GAE(lambda) against a plain-Python reference, with truncation, termination and placeholders."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.rollout import add_gae, collect, gae
from tests.fakes import CountingTorchVectorEnv
from tests.sync_guard import no_sync


def reference_gae(reward, value, next_value, terminated, truncated, missing, gamma, lam):
    """One env at a time, one step at a time, in Python floats."""
    n, t_max = len(reward), len(reward[0])
    adv = [[0.0] * t_max for _ in range(n)]
    for i in range(n):
        running = 0.0
        for t in reversed(range(t_max)):
            if terminated[i][t]:
                boot = 0.0
            elif missing[i][t]:
                boot = value[i][t]
            else:
                boot = next_value[i][t]
            delta = reward[i][t] + gamma * boot - value[i][t]
            done = terminated[i][t] or truncated[i][t]
            running = delta + (0.0 if done else gamma * lam * running)
            adv[i][t] = running
    target = [[adv[i][t] + value[i][t] for t in range(t_max)] for i in range(n)]
    return adv, target


def random_case(seed, n, t, p_end):
    g = torch.Generator().manual_seed(seed)
    reward = torch.randn(n, t, generator=g, dtype=torch.float64)
    value = torch.randn(n, t, generator=g, dtype=torch.float64)
    next_value = torch.randn(n, t, generator=g, dtype=torch.float64)
    ended = torch.rand(n, t, generator=g) < p_end
    truncated = ended & (torch.rand(n, t, generator=g) < 0.5)
    terminated = ended & ~truncated
    missing = ended & (torch.rand(n, t, generator=g) < 0.4)
    # placeholders are NaN, and nothing is promised about next_value after a termination
    next_value = torch.where(missing | terminated, torch.nan, next_value)
    return reward, value, next_value, terminated, truncated, missing


@pytest.mark.parametrize("seed", range(6))
def test_matches_python_reference_on_random_patterns(seed):
    rng = np.random.default_rng(seed)
    n, t = int(rng.integers(1, 9)), int(rng.integers(1, 40))
    gamma, lam = float(rng.uniform(0.8, 1.0)), float(rng.uniform(0.0, 1.0))
    case = random_case(seed, n, t, p_end=float(rng.uniform(0.05, 0.6)))
    adv, target = gae(*case, gamma=gamma, lam=lam)
    want_adv, want_target = reference_gae(*(x.tolist() for x in case), gamma, lam)
    assert adv.dtype == torch.float64 and adv.shape == (n, t)
    assert torch.isfinite(adv).all() and torch.isfinite(target).all()
    np.testing.assert_allclose(adv.numpy(), np.array(want_adv), rtol=0, atol=1e-6)
    np.testing.assert_allclose(target.numpy(), np.array(want_target), rtol=0, atol=1e-6)


def test_every_step_ends_and_no_step_ends():
    case = random_case(7, 3, 10, p_end=1.0)
    adv, _ = gae(*case, gamma=0.99, lam=0.95)
    reward, value, next_value, terminated, _, missing = case
    boot = torch.where(terminated, 0.0, torch.where(missing, value, next_value))
    torch.testing.assert_close(adv, reward + 0.99 * boot - value)  # one-step TD errors
    reward, value, next_value, *flags = random_case(8, 3, 10, p_end=0.0)
    next_value = torch.cat([value[:, 1:], next_value[:, -1:]], dim=1)  # consistent: V(s_t+1)
    adv, _ = gae(reward, value, next_value, *flags, gamma=1.0, lam=1.0)
    # gamma = lam = 1 without ends: rewards to go + the last bootstrap - V(s_t)
    want = reward.flip(1).cumsum(1).flip(1) + next_value[:, -1:] - value
    torch.testing.assert_close(adv, want)


def test_truncation_bootstraps_from_final_observation_value():
    # one env, 3 steps; the episode is truncated at step 1 (next_value 10 = V(true final obs))
    reward = torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)
    value = torch.tensor([[0.5, 0.25, 2.0]], dtype=torch.float64)
    next_value = torch.tensor([[0.25, 10.0, 3.0]], dtype=torch.float64)
    no = torch.zeros(1, 3, dtype=torch.bool)
    trunc = torch.tensor([[False, True, False]])
    adv, _ = gae(reward, value, next_value, no, trunc, gamma=0.5, lam=1.0)
    a1 = 1.0 + 0.5 * 10.0 - 0.25  # bootstraps from the final observation, not from V(reset obs)=2.0
    a0 = 1.0 + 0.5 * 0.25 - 0.5 + 0.5 * a1
    a2 = 1.0 + 0.5 * 3.0 - 2.0
    torch.testing.assert_close(adv, torch.tensor([[a0, a1, a2]], dtype=torch.float64))
    # the same step terminated: no bootstrap at all
    adv, _ = gae(reward, value, next_value, trunc, no, gamma=0.5, lam=1.0)
    assert adv[0, 1].item() == pytest.approx(1.0 - 0.25)
    # truncated with the final observation missing: V(current obs) stands in
    adv, _ = gae(reward, value, next_value, no, trunc, trunc, gamma=0.5, lam=1.0)
    assert adv[0, 1].item() == pytest.approx(1.0 + 0.5 * 0.25 - 0.25)


def test_nan_and_inf_in_unused_next_values_never_leak():
    case = list(random_case(3, 5, 30, p_end=0.3))
    next_value, terminated, missing = case[2], case[3], case[5]
    assert (missing | terminated).any()
    for poison in (math.nan, math.inf, -math.inf):
        case[2] = torch.where(missing | terminated, poison, next_value)
        adv, target = gae(*case, gamma=0.99, lam=0.95)
        assert torch.isfinite(adv).all() and torch.isfinite(target).all()


def test_trailing_unit_dim_and_float32():
    case = random_case(4, 4, 12, p_end=0.3)
    flat_adv, _ = gae(*case, gamma=0.9, lam=0.8)
    shaped = [x.unsqueeze(-1) for x in case]
    adv, target = gae(*shaped, gamma=0.9, lam=0.8)
    assert adv.shape == (4, 12, 1) and target.shape == (4, 12, 1)
    torch.testing.assert_close(adv.squeeze(-1), flat_adv)
    # mixed: reward [N, T, 1], value [N, T] -> value's shape; float32 in, float32 out
    f32 = [x.float() if x.is_floating_point() else x for x in case]
    adv32, _ = gae(f32[0].unsqueeze(-1), *f32[1:], gamma=0.9, lam=0.8)
    assert adv32.shape == (4, 12) and adv32.dtype == torch.float32
    torch.testing.assert_close(adv32.double(), flat_adv, atol=1e-4, rtol=1e-4)


def critic(obs):
    """A made-up value function of the counting env's observation (index, episode, step)."""
    return (0.1 * obs[..., 2:3] - 0.01 * obs[..., 1:2] + 0.5).double()


def test_add_gae_on_a_real_rollout_with_placeholders():
    env = gpu_envs.wrap(CountingTorchVectorEnv(6, final_obs="masked"))
    traj = collect(env, steps=40).clone()
    assert traj["next", "final_obs_missing"].any() and traj["next", "truncated"].any()
    assert torch.isnan(traj["next", "observation"]).any()  # placeholders are NaN
    traj["state_value"] = critic(traj["observation"])
    traj["next", "state_value"] = critic(traj["next", "observation"])
    add_gae(traj, gamma=0.97, lam=0.9)
    assert torch.isfinite(traj["advantage"]).all() and traj["advantage"].shape == (6, 40, 1)
    flat = [
        traj["next", "reward"].double(), traj["state_value"], traj["next", "state_value"],
        traj["next", "terminated"], traj["next", "truncated"], traj["next", "final_obs_missing"],
    ]  # fmt: skip
    want_adv, want_target = reference_gae(*(x.squeeze(-1).tolist() for x in flat), 0.97, 0.9)
    np.testing.assert_allclose(traj["advantage"].squeeze(-1).numpy(), np.array(want_adv), atol=1e-6, rtol=0)
    np.testing.assert_allclose(traj["value_target"].squeeze(-1).numpy(), np.array(want_target), atol=1e-6, rtol=0)


def test_gae_never_syncs():
    case = random_case(5, 8, 16, p_end=0.3)
    with no_sync():
        adv, _ = gae(*case, gamma=0.99, lam=0.95)
    assert adv.shape == (8, 16)


def test_bad_inputs_are_clear_errors():
    case = random_case(1, 3, 5, p_end=0.3)
    with pytest.raises(InvalidArgumentError, match=r"value has shape \(3, 4\)"):
        gae(case[0], case[1][:, :4], *case[2:], gamma=0.9, lam=0.9)
    with pytest.raises(InvalidArgumentError, match="gamma must be a number in"):
        gae(*case, gamma=1.5, lam=0.9)
    with pytest.raises(InvalidArgumentError, match="time on dim 1"):
        gae(case[0].reshape(-1), *case[1:], gamma=0.9, lam=0.9)
    env = gpu_envs.wrap(CountingTorchVectorEnv(2))
    with pytest.raises(InvalidArgumentError, match=r"no 'state_value' entry"):
        add_gae(collect(env, steps=3), gamma=0.9, lam=0.9)
