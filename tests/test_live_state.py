"""The state protocol (gpu_envs.utils.live_state): every layer's live_state() is live, and
load_live_state() of a snapshot brings back exactly that state, so the same actions give
the same transitions again. It is what the CUDA-graph collector pins (tests/test_compile.py)."""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError, RolloutError
from gpu_envs.rollout import RolloutBuffer
from gpu_envs.rollout.cudagraph import GraphCollector
from gpu_envs.transforms import EpisodeStats, ObservationNorm, TransformedEnv
from tests.fakes import CountingTorchVectorEnv
from tests.graph_emulation import EmulatedGraphs


def snapshot(env):
    return {name: value.clone() for name, value in env.live_state().items()}


def replay(env, actions):
    out = []
    for t in range(actions.shape[1]):
        td = env.root()
        td["action"] = actions[:, t]
        out.append(env.step_and_maybe_reset(td)[0].clone())
    return torch.stack(out, dim=1)


def assert_same(a, b):
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key


def test_batched_env_state_dict_round_trip():
    env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
    env.reset()
    saved = snapshot(env)
    assert {"root.observation", "backend.env.state", "backend.env.rng_counter"} <= set(saved)
    actions = torch.randint(0, 2, (8, 40))
    first = replay(env, actions)
    assert first["next", "done"].any(), "episodes ended and reset in between"
    env.load_live_state(saved)
    assert_same(first, replay(env, actions))
    # the restored root is a copy: the snapshot (or a root handed out before) is never written
    assert env.live_state()["root.observation"] is not saved["root.observation"]
    with pytest.raises(InvalidArgumentError, match=r"'root\.observation' is missing"):
        env.load_live_state({k: v for k, v in saved.items() if k != "root.observation"})


def test_transformed_env_state_includes_its_transforms_and_round_trips():
    stats, norm = EpisodeStats(), ObservationNorm()
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=1), stats, norm)
    env.reset()
    state = env.live_state()
    assert state["transforms.0.running_return"] is stats.running_return
    assert {"transforms.1.observation.mean", "transforms.1.observation.scale", "env.backend.env.state"} <= set(state)
    saved = snapshot(env)
    actions = torch.randint(0, 2, (8, 40))
    first = replay(env, actions)
    summary = stats.summary()
    assert summary.episodes > 0
    env.load_live_state(saved)
    assert stats.summary().episodes == 0 and norm.count().item() == saved["transforms.1.observation.count"].item()
    assert_same(first, replay(env, actions))
    assert stats.summary() == summary


def test_declared_state_attributes_are_read_live_and_loaded_as_copies():
    raw = CountingTorchVectorEnv(4)
    env = gpu_envs.wrap(raw)
    env.reset()
    state = env.live_state()
    assert state["backend.env.t"] is raw.t and state["backend.env.episode"] is raw.episode
    saved = snapshot(env)
    actions = torch.zeros(4, 9, dtype=torch.long)
    first = replay(env, actions)
    env.load_live_state(saved)
    assert raw.t is not saved["backend.env.t"]  # re-bound to a copy: the env may replace it
    assert_same(first, replay(env, actions))


def test_envs_whose_state_is_outside_torch_say_so():
    env = gpu_envs.make("CartPole-v1", num_envs=2, backend="gymnasium", device="cpu")
    with pytest.raises(RolloutError, match="keeps its simulator's state outside torch tensors"):
        env.live_state()
    with pytest.raises(RolloutError, match="outside torch tensors"):
        GraphCollector(env, None, RolloutBuffer(env, 2), api=EmulatedGraphs())
    env.close()


def test_a_refused_state_names_the_cause_and_leaves_the_env_as_it_was():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    env.reset()
    before = snapshot(env)
    actions = torch.randint(0, 2, (4, 5), generator=torch.Generator().manual_seed(1))
    with pytest.raises(InvalidArgumentError, match="takes the dict of tensors a live_state"):
        env.load_live_state(42)
    for bad in (torch.zeros(7, 7), before["root.observation"].double()):  # a root of another env, or recast
        with pytest.raises(InvalidArgumentError, match=r"'root.observation' must be a \(4, 4\) torch.float32"):
            env.load_live_state({**before, "root.observation": bad})
    backend = [name for name in before if name.startswith("backend.")]
    broken = {**before, **{name: before[name] + 1 for name in backend[:1]}, backend[-1]: torch.zeros(1)}
    with pytest.raises(InvalidArgumentError, match=repr(backend[-1].removeprefix("backend.env."))):
        env.load_live_state(broken)  # the first backend entry is fine, the last is not: nothing is copied
    assert_same_state(snapshot(env), before)
    expected = replay(env, actions)
    env.load_live_state(before)
    assert_same(replay(env, actions), expected)


def test_a_refused_transformed_state_loads_nothing():
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0), ObservationNorm())
    env.reset()
    before = snapshot(env)
    with pytest.raises(InvalidArgumentError, match=r"TransformedEnv\.load_live_state takes the dict"):
        env.load_live_state([1, 2])
    changed = {name: value + 1 if value.is_floating_point() else value for name, value in before.items()}
    bad_stats = next(name for name in before if name.startswith("transforms.0."))
    changed[bad_stats] = torch.zeros(3, 3)
    with pytest.raises(InvalidArgumentError, match="ObservationNorm state"):
        env.load_live_state(changed)
    assert_same_state(snapshot(env), before)  # the env's own state was not loaded before the refusal


def assert_same_state(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
