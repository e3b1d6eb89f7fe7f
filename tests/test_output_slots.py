"""A random-action collection has the built-in envs' native step write its outputs into the buffer's slots.

``gpu_envs.rollout.loop.output_slots`` names, before each fused step ``t``, column ``t``'s
reward, flags and final observation and column ``t + 1``'s root observation as where the
step writes; the buffer's copy then finds each value in place. These tests prove that the
collected data are the same as the TensorDict path's bit for bit (episodes, resets and
placeholders included), that the slots are really written by the step, that nothing the
env keeps after a collection shares the buffer's memory, and that bad targets are refused.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.builtin import CartPoleEnv, PendulumEnv, native
from gpu_envs.builtin.output_ring import OutputRing
from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.rollout import collect, loop
from gpu_envs.rollout.cache import collect_cache
from gpu_envs.transforms import RewardScale, TransformedEnv

needs_cc = pytest.mark.skipif(not native.available(), reason="the native CPU step needs a C compiler")


def _same(a, b) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        x, y = a[key], b[key]
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert torch.equal(x.nan_to_num(7.0), y.nan_to_num(7.0)), key


@pytest.fixture
def every_size(monkeypatch):
    """Name the slots whatever a step's size (the default threshold leaves small envs out)."""
    monkeypatch.setattr(loop, "STEP_INTO_BUFFER_MIN_BYTES", 0)


@pytest.fixture
def taken(monkeypatch):
    """Counts the native steps that found targets named for them."""
    count = {"steps": 0}
    take = OutputRing.take

    def counting(self, key, make):
        if self.into is not None:
            count["steps"] += 1
        return take(self, key, make)

    monkeypatch.setattr(OutputRing, "take", counting)
    return count


@needs_cc
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("expose_final_obs", [True, False])
def test_collections_written_in_place_equal_the_tensordict_path(every_size, taken, env_id, expose_final_obs):
    fast = gpu_envs.make(env_id, num_envs=37, seed=4, expose_final_obs=expose_final_obs, max_episode_steps=9)
    plain = gpu_envs.make(env_id, num_envs=37, seed=4, expose_final_obs=expose_final_obs, max_episode_steps=9)
    plain.transition_values = lambda keys: None  # the TensorDict path, every step
    for steps in (30, 3, 30, 1, 17):  # episodes carry across calls; T <= 2 has no middle steps
        _same(collect(fast, steps=steps).clone(), collect(plain, steps=steps).clone())
        _same(fast.root(), plain.root())
    # every step of a collection is fused but the first into a new (unbound) buffer: 29 + 2 + 30 (the cached
    # buffer of T = 30, bound: from step 0) + 16; T = 1 is one TensorDict step
    assert taken["steps"] == 29 + 2 + 30 + 16
    for name, value in fast.live_state().items():
        assert torch.equal(value, plain.live_state()[name]), name


@needs_cc
def test_the_step_writes_into_the_named_slots(every_size):
    """The slots hold the step's values before the buffer's copy: the copy found them in place."""
    env = gpu_envs.make("CartPole-v1", num_envs=8, seed=0)
    collect(env, steps=6)
    buffer = collect_cache(env).buffers[6]
    with env.reusing_outputs():
        name_slots = loop.output_slots(env, buffer)
        assert name_slots is not None
        name_slots(2)
        reward = buffer.slots_of(("next", "reward"))[2]
        reward.zero_()
        td = env.root()
        td["action"] = torch.zeros(8, dtype=torch.int64)
        td, root = env.step_and_maybe_reset(td)
        assert torch.equal(reward, torch.ones(8, 1))  # the step wrote it there
        assert td["next", "reward"].data_ptr() == reward.data_ptr()
        assert root["observation"].data_ptr() == buffer.slots_of("observation")[3].data_ptr()
    # on the way out the env's root is copied: nothing it keeps shares the buffer's memory
    assert env.root()["observation"].data_ptr() != buffer.slots_of("observation")[3].data_ptr()


@needs_cc
def test_what_the_env_keeps_is_not_rewritten_by_the_next_collection(every_size):
    env = gpu_envs.make("Pendulum-v1", num_envs=5, seed=1)
    collect(env, steps=12)
    root = env.root()
    kept = root.clone()
    for _ in range(2):
        collect(env, steps=12)
    _same(root, kept)


def test_only_the_built_in_native_step_takes_targets():
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    assert env.output_targets() is None  # outside reusing_outputs()
    with env.reusing_outputs() as on:
        assert (env.output_targets() is env.backend.env) is on
    transformed = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=4, seed=0), RewardScale(0.5))
    collect(transformed, steps=4)
    assert loop.output_slots(transformed, collect_cache(transformed).buffers[4]) is None


def test_small_steps_are_copied_as_before():
    """Below STEP_INTO_BUFFER_MIN_BYTES naming the slots costs more than the copies it saves."""
    env = gpu_envs.make("CartPole-v1", num_envs=64, seed=0)
    collect(env, steps=4)
    with env.reusing_outputs():
        assert loop.output_slots(env, collect_cache(env).buffers[4]) is None


@needs_cc
def test_large_steps_name_the_slots_by_default(taken):
    """At N = 4096 a CartPole step writes ~184 KB: over the threshold, with the same values."""
    fast = gpu_envs.make("CartPole-v1", num_envs=4096, seed=6)
    plain = gpu_envs.make("CartPole-v1", num_envs=4096, seed=6)
    plain.transition_values = lambda keys: None  # the TensorDict path, every step
    _same(collect(fast, steps=6), collect(plain, steps=6))
    assert taken["steps"] == 5  # steps 1..5: the first binds the new buffer the TensorDict way
    _same(collect(fast, steps=6), collect(plain, steps=6))
    assert taken["steps"] == 5 + 6  # the cached buffer is bound: every step from 0 on


@needs_cc
@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_bad_targets_are_refused_with_the_layout(cls):
    env = cls(4, seed=0)
    env.reset()
    reward = torch.empty(4, 1)
    with pytest.raises(InvalidArgumentError, match="reuse_outputs"):
        env.write_next_step_into({"reward": reward})
    assert env.reuse_outputs(True)
    with pytest.raises(InvalidArgumentError, match="unknown outputs"):
        env.write_next_step_into({"rewards": reward})
    with pytest.raises(InvalidArgumentError, match=r"'reward' must be a contiguous CPU tensor \(4, 1\)"):
        env.write_next_step_into({"reward": torch.empty(4)})
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        env.write_next_step_into({"reward": torch.empty(4, 2)[:, :1]})
    env.write_next_step_into({"reward": reward})
    action = torch.zeros(4, dtype=torch.int64) if cls is CartPoleEnv else torch.zeros(4, 1)
    out = env.raw_step(action)
    assert out.reward is reward
    assert env.raw_step(action).reward is not reward  # one step only
    assert not env.reuse_outputs(False)
    assert env.raw_step(action).reward is not reward


def test_random_discrete_actions_are_drawn_into_the_buffers_action_slots(monkeypatch):
    """Once the buffer is bound, each step's action is drawn in its own slot (same draws) and stepped from there."""
    env = gpu_envs.make("CartPole-v1", num_envs=8, seed=0, max_episode_steps=4)
    ref = gpu_envs.make("CartPole-v1", num_envs=8, seed=0, max_episode_steps=4)
    ref.transition_values = lambda keys: None  # the TensorDict path: sampler() and a copy
    _same(collect(env, steps=5).clone(), collect(ref, steps=5).clone())  # binds the buffer
    buffer = collect_cache(env).buffers[5]
    slots = loop.action_slots(env, buffer)
    assert slots is not None
    assert [slot.data_ptr() for slot in slots] == [buffer.data["action"][:, t].data_ptr() for t in range(5)]
    stepped = []
    values_for = env.transition_values

    def spying(keys):
        values = values_for(keys)

        def spy(action):
            stepped.append(action.data_ptr())
            return values(action)

        return spy

    monkeypatch.setattr(env, "transition_values", spying)
    for _ in range(3):  # episodes end and rows reset in between
        _same(collect(env, steps=5).clone(), collect(ref, steps=5).clone())
    assert stepped == [slot.data_ptr() for slot in slots] * 3
    _same(env.root(), ref.root())


def test_actions_without_a_draw_into_memory_are_sampled_and_copied():
    """A Box action spec has no draw into given memory: the step samples and the buffer copies, as before."""
    env = gpu_envs.make("Pendulum-v1", num_envs=8, seed=0)
    collect(env, steps=5)
    assert env.action_spec.sampler_into(generator=env.generator) is None
    assert loop.action_slots(env, collect_cache(env).buffers[5]) is None
