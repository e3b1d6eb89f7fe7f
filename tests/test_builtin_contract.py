"""The BatchedEnv contract on the built-in torch envs (keys, shapes, done rows, seeds)."""

from __future__ import annotations

import pytest
import torch

import gpu_envs

ENV_IDS = ["CartPole-v1", "Pendulum-v1"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_keys_shapes_dtypes_devices(env_id):
    n = 5
    with gpu_envs.make(env_id, num_envs=n, device="cpu", seed=0) as env:
        assert env.device == torch.device("cpu") and env.batch_size == torch.Size([n])
        td = env.reset()
        assert set(td.keys()) == {"observation", "done", "terminated", "truncated"}
        assert td["observation"].shape == (n, *env.single_observation_spec["observation"].shape)
        assert td["observation"].dtype == torch.float32
        for key in ("done", "terminated", "truncated"):
            assert td[key].shape == (n, 1) and td[key].dtype == torch.bool and not td[key].any()
        td["action"] = env.action_spec.rand()  # a whole batch, as in torchrl
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        assert set(nxt.keys()) == {"observation", "reward", "done", "terminated", "truncated", "final_obs_missing"}
        assert nxt["reward"].shape == (n, 1) and nxt["reward"].dtype == torch.float32
        for key in ("done", "terminated", "truncated", "final_obs_missing"):
            assert nxt[key].shape == (n, 1) and nxt[key].dtype == torch.bool
        assert all(v.device == env.device for v in td.values(True, True))
        assert env.observation_spec.contains(root.select("observation"))
        assert env.reward_spec.contains(nxt["reward"])
        assert env.done_spec.contains(nxt.select("done", "terminated", "truncated"))


def test_cartpole_done_rows_carry_final_obs_and_root_the_reset_obs():
    n = 64
    env = gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=1)
    td = env.reset()
    seen_done = 0
    for _ in range(300):
        td["action"] = torch.ones(n, dtype=torch.long)  # push right: the pole falls fast
        td, root = env.step_and_maybe_reset(td)
        done = td["next", "done"].squeeze(-1)
        term = td["next", "terminated"].squeeze(-1)
        nxt = td["next", "observation"]
        # terminated rows are physically out of bounds: the true final observation
        out = (nxt[:, 0].abs() > 2.4) | (nxt[:, 2].abs() > 12 * 2 * torch.pi / 360)
        assert torch.equal(out, term)
        # the root of ended rows is a fresh initial state, of running rows the next obs
        assert (root["observation"][done].abs() <= 0.05).all()
        assert torch.equal(root["observation"][~done], nxt[~done])
        assert not td["next", "final_obs_missing"].any()
        assert not root["done"].any()
        seen_done += int(done.sum())
        td = root
    assert seen_done > 100


def test_pendulum_truncates_at_200_with_final_obs():
    env = gpu_envs.make("Pendulum-v1", num_envs=3, device="cpu", seed=2)
    traj = env.rollout(450)
    trunc = traj["next", "truncated"].squeeze(-1)
    assert trunc[:, 199].all() and trunc[:, 399].all() and trunc.sum() == 6
    assert not traj["next", "terminated"].any()
    # the final observation continues the trajectory; the next root restarts it
    final = traj["next", "observation"][:, 199]
    restart = traj["observation"][:, 200]
    assert not torch.equal(final, restart)
    cos, sin = final[:, 0], final[:, 1]
    torch.testing.assert_close(cos**2 + sin**2, torch.ones(3))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeded_rollouts_are_reproducible(env_id):
    def run(seed):
        env = gpu_envs.make(env_id, num_envs=8, device="cpu", seed=seed)
        return env.rollout(120)

    a, b, c = run(3), run(3), run(4)
    assert (a == b).all()
    assert not torch.equal(a["observation"], c["observation"])


def test_reset_seed_overrides_make_seed_and_repeats():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    first = env.reset(seed=9)["observation"]
    env.rollout(10, reset=False)
    assert torch.equal(env.reset(seed=9)["observation"], first)


def test_partial_reset_on_builtin_env():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    td = env.reset()
    for _ in range(5):
        td["action"] = torch.ones(4, dtype=torch.long)
        td, td = env.step_and_maybe_reset(td)
    before = td["observation"].clone()
    mask = torch.tensor([[True], [False], [False], [True]])
    after = env.reset(td=td.set("_reset", mask))["observation"]
    assert torch.equal(after[1:3], before[1:3])
    assert not torch.equal(after[0], before[0]) and (after[[0, 3]].abs() <= 0.05).all()


def test_rollout_shape_and_root_chain():
    env = gpu_envs.make("CartPole-v1", num_envs=3, device="cpu", seed=0)
    traj = env.rollout(40)
    assert traj.batch_size == torch.Size([3, 40])
    done = traj["next", "done"][:, :-1].squeeze(-1)
    same = (traj["observation"][:, 1:] == traj["next", "observation"][:, :-1]).all(-1)
    assert torch.equal(same | done, torch.ones_like(same))


def test_repr_and_context_manager():
    with gpu_envs.make("CartPole-v1", num_envs=2, device="cpu") as env:
        text = repr(env)
        assert "CartPoleEnv" in text and "num_envs=2" in text and "not reset" in text
    assert env.is_closed and "closed" in repr(env)
    env.close()  # twice is harmless


def test_device_none_defaults_to_cpu_without_cuda():
    env = gpu_envs.make("CartPole-v1", num_envs=2)
    assert env.device == gpu_envs.default_device()


def test_available_envs_lists_builtins():
    assert {"CartPole-v1", "Pendulum-v1"} <= set(gpu_envs.available_envs()["torch"])
