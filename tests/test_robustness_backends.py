"""Backends that cannot trust the simulator: in-place output buffers, one simulator behind two envs.

* A torch env that rewrites its output tensors in place (Isaac Gym style) is detected
  from its first calls and copied (``copy_buffers=None``, the default), or refused
  (``copy_buffers=False``); with ``copy_buffers=True`` it is copied from the start. A
  transition kept from step t never changes at step t + 1.
* One simulator (the same object, or two wrappers around it) behind two live
  BatchedEnvs is refused; closing the first frees it.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import gpu_envs
from gpu_envs.backends.reuse import DECIDING_CALLS
from tests.fakes import CountingTorchVectorEnv, reference_rollout


class InPlaceEnv(CountingTorchVectorEnv):
    """The counting env, returning the SAME output tensors every call, rewritten in place."""

    def __init__(self, num_envs=4, ring=1):
        super().__init__(num_envs, final_obs="info")
        self.ring = [
            {
                "obs": torch.zeros(num_envs, 3),
                "reward": torch.zeros(num_envs),
                "terminated": torch.zeros(num_envs, dtype=torch.bool),
                "truncated": torch.zeros(num_envs, dtype=torch.bool),
                "final": torch.zeros(num_envs, 3),
            }
            for _ in range(ring)
        ]
        self.calls = 0

    def _buffers(self):
        self.calls += 1
        return self.ring[self.calls % len(self.ring)]

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        buf = self._buffers()
        buf["obs"].copy_(obs)
        return buf["obs"], info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        buf = self._buffers()
        buf["obs"].copy_(obs)
        buf["reward"].copy_(reward)
        buf["terminated"].copy_(terminated)
        buf["truncated"].copy_(truncated)
        buf["final"].copy_(info["final_obs"])
        return buf["obs"], buf["reward"], buf["terminated"], buf["truncated"], {"final_obs": buf["final"]}


def _kept_transitions(env, steps):
    """Step by hand, keeping every td and root (as a user or a replay buffer would)."""
    actions = torch.randint(0, 2, (env.num_envs, steps), generator=torch.Generator().manual_seed(0))
    td = env.reset()
    kept = []
    for t in range(steps):
        td["action"] = actions[:, t]
        td, root = env.step_and_maybe_reset(td)
        kept.append(td)
        td = root
    return actions, kept


@pytest.mark.parametrize("ring", [1, 2])
def test_in_place_outputs_are_detected_and_copied(ring):
    n, steps = 4, 12
    env = gpu_envs.wrap(InPlaceEnv(n, ring))
    actions, kept = _kept_transitions(env, steps)
    assert env.backend.copy_buffers is True
    expected = reference_rollout(n, actions.numpy())
    for name, key in (
        ("observation", "observation"),
        ("next_observation", ("next", "observation")),
        ("reward", ("next", "reward")),
    ):
        got = torch.stack([td[key].reshape(n, -1) for td in kept], dim=1)
        want = torch.as_tensor(expected[name]).reshape(n, steps, -1).to(got.dtype)
        torch.testing.assert_close(got, want, msg=f"{name} changed after it was returned")


def test_in_place_outputs_refused_with_copy_buffers_false():
    env = gpu_envs.wrap(InPlaceEnv(4), copy_buffers=False)
    with pytest.raises(gpu_envs.BackendError, match=r"rewrites its output buffers in place.*copy_buffers=True"):
        _kept_transitions(env, 3)


def test_copy_buffers_true_copies_from_the_first_call():
    env = gpu_envs.wrap(InPlaceEnv(4), copy_buffers=True)
    actions, kept = _kept_transitions(env, 5)
    expected = reference_rollout(4, actions.numpy())
    torch.testing.assert_close(
        torch.stack([td["observation"] for td in kept], 1), torch.as_tensor(expected["observation"])
    )


def test_fresh_outputs_are_not_copied_once_decided():
    inner = CountingTorchVectorEnv(4)
    env = gpu_envs.wrap(inner)
    env.rollout(DECIDING_CALLS + 2)
    assert env.backend.copy_buffers is False and env.backend._reuse is None
    td = env.reset()
    captured = {}
    original = inner.reset

    def spy(**kwargs):
        obs, info = original(**kwargs)
        captured["obs"] = obs
        return obs, info

    inner.reset = spy
    td = env.reset()
    assert td["observation"].data_ptr() == captured["obs"].data_ptr()  # zero copy once decided


@pytest.mark.parametrize("copy_buffers", [1, "yes"])
def test_copy_buffers_must_be_a_bool_or_none(copy_buffers):
    with pytest.raises(gpu_envs.InvalidArgumentError, match="copy_buffers"):
        gpu_envs.wrap(CountingTorchVectorEnv(2), copy_buffers=copy_buffers)


# ------------------------------------------------------------------ one simulator, one env


def test_one_torch_simulator_behind_two_envs_is_refused_until_the_first_is_closed():
    inner = CountingTorchVectorEnv(2)
    first = gpu_envs.wrap(inner)
    with pytest.raises(
        gpu_envs.InvalidArgumentError, match=r"already driven by another BatchedEnv.*Close the other env"
    ):
        gpu_envs.wrap(inner)
    first.close()
    second = gpu_envs.wrap(inner)
    assert second.reset()["observation"].shape == (2, 3)


def test_two_wrappers_around_one_gymnasium_env_are_refused():
    base = gym.make_vec(
        "CartPole-v1",
        2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    first = gpu_envs.wrap(base, device="cpu")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven"):
        gpu_envs.wrap(gym.wrappers.vector.RecordEpisodeStatistics(base), device="cpu")
    single = gym.make("CartPole-v1")
    kept = gpu_envs.wrap(single, device="cpu")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven"):
        gpu_envs.wrap(single, device="cpu")
    first.close()
    kept.close()


def test_a_dropped_env_frees_its_simulator():
    inner = CountingTorchVectorEnv(2)
    gpu_envs.wrap(inner).reset()
    gpu_envs.wrap(inner).reset()  # the first BatchedEnv is gone: its claim went with it


def test_one_isaac_lab_simulator_behind_two_envs_is_refused():
    from tests.isaac_fakes import FakeIsaacDirectEnv

    fake = FakeIsaacDirectEnv(2)
    first = gpu_envs.wrap(fake)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven"):
        gpu_envs.wrap(fake)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="copy_obs"):
        gpu_envs.wrap(FakeIsaacDirectEnv(2), copy_obs="yes")
    first.close()


def test_one_sb3_or_gym_env_behind_two_envs_is_refused_through_the_shims():
    sb3 = pytest.importorskip("stable_baselines3")
    venv = sb3.common.vec_env.DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2)
    first = gpu_envs.wrap(venv, device="cpu")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven"):
        gpu_envs.wrap(sb3.common.vec_env.VecMonitor(venv), device="cpu")  # another SB3 wrapper, same envs
    first.close()
    old_gym = pytest.importorskip("gym")
    single = old_gym.make("CartPole-v1")
    kept = gpu_envs.wrap(single, device="cpu")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven"):
        gpu_envs.wrap(single, device="cpu")
    kept.close()
