"""Built-in torch CartPole-v1 / Pendulum-v1 against gymnasium, and their env contract.

The fidelity tests teacher-force: every step the gymnasium envs' states (rounded to
float32) are copied into the torch env, both take the same actions, and the one-step
results must agree, so float32 round-off never accumulates into a false failure.
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpu_envs.builtin import BUILTIN_ENVS, CartPoleEnv, PendulumEnv
from gpu_envs.contract.errors import ClosedEnvError, ResetMaskError, ResetNeededError

ENV_CLASSES = [CartPoleEnv, PendulumEnv]
GYM_ID = {CartPoleEnv: "CartPole-v1", PendulumEnv: "Pendulum-v1"}
OBS_DIM = {CartPoleEnv: 4, PendulumEnv: 3}
STATE_DIM = {CartPoleEnv: 4, PendulumEnv: 2}
THETA_LIMIT = 12 * 2 * math.pi / 360

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def fixed_actions(cls: type, steps: int, n: int) -> list[torch.Tensor]:
    """A deterministic action sequence (valid for ``cls``) independent of any env RNG."""
    rng = np.random.default_rng(12345)
    if cls is CartPoleEnv:
        return [torch.from_numpy(rng.integers(0, 2, size=n)) for _ in range(steps)]
    return [torch.from_numpy(rng.uniform(-2.5, 2.5, size=(n, 1)).astype(np.float32)) for _ in range(steps)]


def pendulum_obs(state: torch.Tensor) -> torch.Tensor:
    return torch.stack((state[:, 0].cos(), state[:, 0].sin(), state[:, 1]), 1)


# --------------------------------------------------------------------------- fidelity
def teacher_force(cls: type, steps: int, choose_actions) -> tuple[int, int]:
    """Step N gymnasium envs and one torch env from identical states; return (#term, #trunc)."""
    n = 64
    gym_envs = [gymnasium.make(GYM_ID[cls], disable_env_checker=True) for _ in range(n)]
    gym_obs = np.stack([e.reset(seed=1000 + i)[0] for i, e in enumerate(gym_envs)])
    env = cls(num_envs=n, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    n_term = n_trunc = 0
    for _ in range(steps):
        # identical starting point: gymnasium's float64 state rounded to float32, both sides
        states = np.stack([e.unwrapped.state for e in gym_envs]).astype(np.float32)
        for e, s in zip(gym_envs, states, strict=True):
            e.unwrapped.state = s.astype(np.float64)
        env.state.copy_(torch.from_numpy(states))
        env.elapsed_steps.copy_(torch.tensor([e._elapsed_steps for e in gym_envs]))

        actions = choose_actions(rng, states)
        results = [e.step(a) for e, a in zip(gym_envs, actions, strict=True)]
        obs, reward, terminated, truncated, info = env.step(torch.from_numpy(np.stack(actions)))

        gym_obs = np.stack([r[0] for r in results])
        gym_term = np.array([r[2] for r in results])
        gym_trunc = np.array([r[3] for r in results])
        done = gym_term | gym_trunc
        final = info["final_obs"]  # pre-reset next obs, full batch
        np.testing.assert_allclose(final.numpy(), gym_obs, rtol=0, atol=1e-5)
        np.testing.assert_allclose(reward.numpy(), [r[1] for r in results], rtol=0, atol=1e-5)
        np.testing.assert_array_equal(terminated.numpy(), gym_term)
        np.testing.assert_array_equal(truncated.numpy(), gym_trunc)
        np.testing.assert_array_equal(info["_final_obs"].numpy(), done)
        # rows that did not end keep going: obs is the next obs there
        keep = torch.from_numpy(~done)
        assert torch.equal(obs[keep], final[keep])
        n_term += int(gym_term.sum())
        n_trunc += int(gym_trunc.sum())
        for e, d in zip(gym_envs, done, strict=True):
            if d:
                e.reset()
    return n_term, n_trunc


@pytest.mark.slow
def test_cartpole_matches_gymnasium_step_by_step():
    gains = np.array([0.1, 0.5, 10.0, 2.0], dtype=np.float32)  # balances for 500 steps

    def actions(rng: np.random.Generator, states: np.ndarray) -> list[np.ndarray]:
        random = rng.integers(0, 2, size=len(states))
        balance = (states @ gains > 0).astype(np.int64)
        chosen = np.where(np.arange(len(states)) < 16, balance, random)  # 16 balanced rows
        return list(chosen)

    n_term, n_trunc = teacher_force(CartPoleEnv, 1200, actions)
    assert n_term > 500, n_term  # random rows fall over every ~20 steps
    assert n_trunc >= 16, n_trunc  # balanced rows reach the 500-step limit


@pytest.mark.slow
def test_pendulum_matches_gymnasium_step_by_step():
    def actions(rng: np.random.Generator, states: np.ndarray) -> list[np.ndarray]:
        # beyond [-2, 2] on purpose: the torque clip is part of the dynamics and reward
        return list(rng.uniform(-3.0, 3.0, size=(len(states), 1)).astype(np.float32))

    n_term, n_trunc = teacher_force(PendulumEnv, 1200, actions)
    assert n_term == 0
    assert n_trunc == 64 * (1200 // 200)


# --------------------------------------------------------------------------- reset
def test_cartpole_initial_state_distribution():
    env = CartPoleEnv(num_envs=4096, seed=0)
    obs, info = env.reset()
    assert info == {}
    assert torch.equal(obs, env.state)
    assert bool((obs >= -0.05).all()) and bool((obs <= 0.05).all())
    assert bool((obs.min(0).values < -0.049).all()) and bool((obs.max(0).values > 0.049).all())
    assert float(obs.mean().abs()) < 0.005
    assert torch.equal(env.elapsed_steps, torch.zeros(4096, dtype=torch.int64))


def test_pendulum_initial_state_distribution():
    env = PendulumEnv(num_envs=4096, seed=0)
    obs, _ = env.reset()
    th, thdot = env.state[:, 0], env.state[:, 1]
    assert bool((th.abs() <= math.pi).all()) and bool((thdot.abs() <= 1.0).all())
    assert float(th.min()) < -3.1 and float(th.max()) > 3.1
    assert float(thdot.min()) < -0.99 and float(thdot.max()) > 0.99
    torch.testing.assert_close(obs, pendulum_obs(env.state))


def test_reset_options_change_bounds_like_gymnasium():
    cart = CartPoleEnv(num_envs=2048, seed=0)
    obs, _ = cart.reset(options={"low": -0.2, "high": 0.2})
    assert float(obs.abs().max()) <= 0.2 and float(obs.abs().max()) > 0.19
    pend = PendulumEnv(num_envs=2048, seed=0)
    pend.reset(options={"x_init": 0.5, "y_init": 0.1})
    assert float(pend.state[:, 0].abs().max()) <= 0.5 and float(pend.state[:, 1].abs().max()) <= 0.1


# --------------------------------------------------------------------------- seeding
def rollout(env, seed: int | None, actions: list[torch.Tensor]) -> list[torch.Tensor]:
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        out += [obs, reward, terminated, truncated, info["final_obs"]]
    return out


@pytest.mark.parametrize("cls", ENV_CLASSES)
def test_seeded_reset_and_rollout_are_reproducible(cls):
    n = 16
    actions = fixed_actions(cls, 300, n)
    env = cls(num_envs=n)
    first = rollout(env, 3, actions)
    again = rollout(env, 3, actions)
    other_instance = rollout(cls(num_envs=n), 3, actions)
    for a, b, c in zip(first, again, other_instance, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    dones = [first[i] | first[i + 1] for i in range(3, len(first), 5)]
    assert bool(torch.stack(dones).any())  # auto-resets happened inside the compared rollout

    different = rollout(env, 4, actions)
    assert not torch.equal(first[0], different[0])
    assert not torch.equal(first[-5], different[-5])

    # seed at construction == seed at first reset
    assert torch.equal(cls(num_envs=n, seed=3).reset()[0], first[0])


# --------------------------------------------------------------------------- partial reset
@pytest.mark.parametrize("cls", ENV_CLASSES)
def test_partial_reset_changes_only_masked_rows(cls):
    n = 12
    env = cls(num_envs=n, seed=0)
    env.reset()
    for action in fixed_actions(cls, 5, n):
        env.step(action)
    before = env.state.clone()
    assert bool((env.elapsed_steps == 5).all())

    mask = torch.arange(n) % 3 == 0
    obs, info = env.reset(options={"reset_mask": mask})
    assert info == {}
    assert obs.shape == (n, OBS_DIM[cls])
    assert torch.equal(env.state[~mask], before[~mask])
    assert bool((env.state[mask] != before[mask]).all())
    assert torch.equal(env.elapsed_steps, torch.where(mask, 0, 5))
    expected_obs = env.state if cls is CartPoleEnv else pendulum_obs(env.state)
    torch.testing.assert_close(obs, expected_obs)
    if cls is CartPoleEnv:
        assert bool((env.state[mask].abs() <= 0.05).all())


@pytest.mark.parametrize("cls", ENV_CLASSES)
def test_partial_reset_rejects_bad_masks(cls):
    env = cls(num_envs=4, seed=0)
    with pytest.raises(ResetNeededError):  # nothing to keep before the first full reset
        env.reset(options={"reset_mask": torch.ones(4, dtype=torch.bool)})
    env.reset()
    with pytest.raises(ResetMaskError):
        env.reset(options={"reset_mask": torch.ones(4, dtype=torch.int64)})
    with pytest.raises(ValueError):
        env.reset(options={"reset_mask": torch.ones(5, dtype=torch.bool)})


# --------------------------------------------------------------------------- auto-reset
def test_cartpole_auto_reset_same_step():
    env = CartPoleEnv(num_envs=6, seed=0)
    env.reset()
    state = torch.zeros(6, 4)
    state[0, 0], state[0, 1] = 2.39, 1.0  # x -> 2.41: out of bounds
    state[1, 2], state[1, 3] = 0.2, 1.0  # theta -> 0.22 > 12 degrees
    state[3, 2], state[3, 3] = -0.2, -1.0  # out of bounds AND at the time limit
    env.state.copy_(state)
    env.elapsed_steps.copy_(torch.tensor([3, 3, 499, 499, 3, 0]))
    obs, reward, terminated, truncated, info = env.step(torch.tensor([1, 1, 0, 0, 1, 0]))

    assert terminated.tolist() == [True, True, False, True, False, False]
    assert truncated.tolist() == [False, False, True, True, False, False]
    done = terminated | truncated
    assert torch.equal(info["_final_obs"], done)
    assert torch.equal(reward, torch.ones(6))
    final = info["final_obs"]
    assert float(final[0, 0]) > 2.4 and float(final[1, 2]) > THETA_LIMIT and float(final[3, 2]) < -THETA_LIMIT
    assert bool((obs[done].abs() <= 0.05).all())  # fresh initial states on ended rows
    assert bool((obs[done] != final[done]).all())
    assert torch.equal(obs[~done], final[~done])
    assert torch.equal(env.state, obs)
    assert env.elapsed_steps.tolist() == [0, 0, 0, 0, 4, 1]

    quiet = CartPoleEnv(num_envs=6, seed=0, expose_final_obs=False)
    quiet.reset()
    quiet.state.copy_(state)
    out = quiet.step(torch.tensor([1, 1, 0, 0, 1, 0]))
    assert out[4] == {}
    assert torch.equal(out[2], terminated) and torch.equal(out[0][~done], final[~done])


def test_pendulum_auto_reset_at_time_limit():
    env = PendulumEnv(num_envs=4, seed=0)
    env.reset()
    env.state.copy_(torch.tensor([[3.0, 7.9], [3.0, 7.9], [0.1, -0.5], [0.1, -0.5]]))
    env.elapsed_steps.copy_(torch.tensor([199, 10, 199, 0]))
    obs, reward, terminated, truncated, info = env.step(torch.full((4, 1), 2.0))
    assert truncated.tolist() == [True, False, True, False]
    assert not bool(terminated.any())
    final = info["final_obs"]
    assert torch.equal(final[0], final[1]) and torch.equal(final[2], final[3])  # same physics
    assert float(final[0, 2]) == 8.0  # speed clipped
    assert torch.equal(obs[~truncated], final[~truncated])
    assert bool((obs[truncated] != final[truncated]).any(1).all())
    torch.testing.assert_close(obs, pendulum_obs(env.state))
    assert bool((env.state[truncated, 1].abs() <= 1).all())
    assert env.elapsed_steps.tolist() == [0, 11, 0, 1]
    assert torch.equal(reward[0], reward[1])

    quiet = PendulumEnv(num_envs=4, seed=0, expose_final_obs=False)
    quiet.reset()
    assert quiet.step(torch.zeros(4, 1))[4] == {}


# --------------------------------------------------------------------------- contract
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", ENV_CLASSES)
def test_devices_dtypes_shapes_and_spaces(cls, device):
    n = 5
    env = cls(num_envs=n, device=device, seed=0)
    dev = torch.device(device)
    assert env.num_envs == n and env.device == dev
    assert env.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP

    reference = gymnasium.make(GYM_ID[cls])
    assert env.single_observation_space == reference.observation_space
    assert env.single_action_space == reference.action_space
    assert env.observation_space.shape == (n, OBS_DIM[cls])
    assert env.observation_space.dtype == np.float32
    assert env.action_space == gymnasium.vector.utils.batch_space(reference.action_space, n)
    assert BUILTIN_ENVS[GYM_ID[cls]] is cls

    obs, info = env.reset(seed=1)
    assert info == {}
    assert obs.shape == (n, OBS_DIM[cls]) and obs.dtype == torch.float32 and obs.device.type == dev.type
    assert env.state.shape == (n, STATE_DIM[cls]) and env.state.dtype == torch.float32
    assert env.elapsed_steps.shape == (n,) and env.elapsed_steps.dtype == torch.int64

    action = torch.ones(n, dtype=torch.int64) if cls is CartPoleEnv else torch.ones(n, 1)
    obs, reward, terminated, truncated, info = env.step(action.to(dev))
    assert obs.shape == (n, OBS_DIM[cls]) and obs.dtype == torch.float32
    assert reward.shape == (n,) and reward.dtype == torch.float32
    assert terminated.shape == (n,) and terminated.dtype == torch.bool
    assert truncated.shape == (n,) and truncated.dtype == torch.bool
    assert info["final_obs"].shape == (n, OBS_DIM[cls]) and info["final_obs"].dtype == torch.float32
    assert info["_final_obs"].shape == (n,) and info["_final_obs"].dtype == torch.bool
    tensors = [obs, reward, terminated, truncated, *info.values(), env.state, env.elapsed_steps]
    assert all(t.device.type == dev.type for t in tensors)
    assert obs.data_ptr() != env.state.data_ptr()  # writing into obs cannot corrupt the env
    env.close()


@pytest.mark.parametrize("cls", ENV_CLASSES)
def test_step_before_reset_and_after_close_raise(cls):
    env = cls(num_envs=2)
    action = torch.zeros(2, dtype=torch.int64) if cls is CartPoleEnv else torch.zeros(2, 1)
    with pytest.raises(ResetNeededError, match=r"reset\(\)"):
        env.step(action)
    with pytest.raises(RuntimeError):
        env.step(action)
    env.reset()
    env.step(action)
    env.close()
    with pytest.raises(ClosedEnvError):
        env.step(action)


class _RecordOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


# Ops that read tensor data on the host or size outputs from data.
HOST_SYNC_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "index", "masked_scatter", "item"}


@pytest.mark.parametrize("cls", ENV_CLASSES)
def test_step_has_no_host_sync_or_data_dependent_ops(cls):
    env = cls(num_envs=8, seed=0)
    env.reset()
    actions = fixed_actions(cls, 3, 8)
    with _RecordOps() as rec:
        for action in actions:
            env.step(action)
    assert rec.ops, "dispatch mode recorded nothing"
    assert not HOST_SYNC_OPS.intersection(rec.ops), sorted(HOST_SYNC_OPS.intersection(rec.ops))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cls", ENV_CLASSES)
def test_cuda_step_never_synchronises(cls):
    env = cls(num_envs=256, device="cuda", seed=0)
    env.reset()
    actions = [a.cuda() for a in fixed_actions(cls, 250, 256)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for action in actions:
            env.step(action)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_cartpole_large_batch_path_is_bit_identical(monkeypatch):
    """Large batches select rows through dtype views (see CartPoleEnv.__init__); same results."""
    n = 600
    actions = fixed_actions(CartPoleEnv, 60, n)
    monkeypatch.setattr(CartPoleEnv, "_ROW_VIEWS_MIN_ENVS", 1)
    fast_env = CartPoleEnv(num_envs=n)
    fast = rollout(fast_env, 7, actions)
    monkeypatch.setattr(CartPoleEnv, "_ROW_VIEWS_MIN_ENVS", 10**9)
    plain_env = CartPoleEnv(num_envs=n)
    plain = rollout(plain_env, 7, actions)
    assert fast_env._row_views and not plain_env._row_views
    assert bool(torch.stack([fast[i] for i in range(3, len(fast), 5)]).any())  # terminations
    for a, b in zip(fast, plain, strict=True):
        assert torch.equal(a, b)
