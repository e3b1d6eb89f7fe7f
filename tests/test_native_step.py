"""The native CPU step of the built-in envs equals their pure-torch step bit for bit.

Both paths are built side by side (``GPU_ENVS_NATIVE=0`` forces the torch one) and stepped
with the same actions through ``step`` and ``raw_step``, with episode ends, partial and
full resets and reseeds in between; every output and every live-state tensor is compared
bit for bit. Also: the fallback when no compiler exists, and a build from an empty cache.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch

from gpu_envs.builtin import CartPoleEnv, PendulumEnv, native

needs_cc = pytest.mark.skipif(not native.available(), reason="needs a C compiler (the fallback is tested below)")


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.bool else x.view(torch.uint8)


def _same(a, b, where: str) -> None:
    assert (a is None) == (b is None), where
    if a is None:
        return
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
        return
    if isinstance(a, Mapping):
        assert a.keys() == b.keys(), where
        for key in a:
            _same(a[key], b[key], f"{where}[{key}]")
        return
    assert a.shape == b.shape and a.dtype == b.dtype, (where, a.shape, b.shape, a.dtype, b.dtype)
    assert torch.equal(_bits(a), _bits(b)), where


def _pair(monkeypatch, cls, n, **kwargs):
    fast = cls(n, **kwargs)
    monkeypatch.setenv("GPU_ENVS_NATIVE", "0")
    slow = cls(n, **kwargs)
    monkeypatch.delenv("GPU_ENVS_NATIVE")
    assert fast.native_step and not slow.native_step
    return fast, slow


def _action(cls, n: int, g: torch.Generator) -> torch.Tensor:
    if cls is CartPoleEnv:
        return torch.randint(0, 2, (n,), generator=g)
    return torch.rand(n, 1, generator=g) * 6 - 3  # clipped to [-2, 2] by both


@needs_cc
@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
@pytest.mark.parametrize("n", [1, 7, 16, 33, 600])
@pytest.mark.parametrize("expose_final_obs", [True, False])
def test_native_step_equals_the_torch_step(monkeypatch, cls, n, expose_final_obs):
    fast, slow = _pair(monkeypatch, cls, n, seed=5, max_episode_steps=23, expose_final_obs=expose_final_obs)
    for env in (fast, slow):
        env.reset()
    g = torch.Generator().manual_seed(n)
    for t in range(400):
        action = _action(cls, n, g)
        if t % 7 == 3:  # partial resets between steps (native on one side, pooled draws on the other)
            mask = torch.rand(n, generator=g) < 0.5
            _same(fast.reset(options={"reset_mask": mask})[0], slow.reset(options={"reset_mask": mask})[0], "masked")
        if t == 300:  # a reseed
            _same(fast.reset(seed=9)[0], slow.reset(seed=9)[0], "reseed")
        if t % 13 == 6:  # a user's in-place write into the state (Pendulum keeps the state's trigonometry)
            for env in (fast, slow):
                env.state[t % n, 0] += 0.75
        if t == 150:  # rows of a snapshot written back elsewhere
            rows, into = torch.arange(n // 2), torch.arange(n - n // 2, n)
            for env in (fast, slow):
                env.set_state(env.get_state(rows), into)
        if t % 2:
            _same(tuple(fast.raw_step(action)), tuple(slow.raw_step(action)), f"raw_step {t}")
        else:
            _same(fast.step(action), slow.step(action), f"step {t}")
        if t % 50 == 0:
            _same(fast.live_state(), slow.live_state(), f"live state {t}")
    _same(fast.live_state(), slow.live_state(), "live state")


@needs_cc
@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_actions_the_kernel_does_not_take_run_the_torch_step(monkeypatch, cls):
    """int32 / bool CartPole actions, float64 or strided Pendulum torques: the torch step, the same values."""
    fast, slow = _pair(monkeypatch, cls, 12, seed=1)
    for env in (fast, slow):
        env.reset()
    if cls is CartPoleEnv:
        actions = [torch.ones(12, dtype=torch.int32), torch.arange(12) % 2 == 0, torch.arange(24)[::2] % 2]
    else:
        actions = [torch.ones(12, 1, dtype=torch.float64), torch.linspace(-3, 3, 24)[::2].view(12, 1)]
    for action in actions * 30:
        _same(fast.step(action), slow.step(action), str(action.dtype))


def test_no_compiler_falls_back_to_the_torch_step(monkeypatch):
    """Without a C compiler the envs build and step with the torch step, with no error."""
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert native.kernels() is None
    env = CartPoleEnv(4, seed=0)
    assert not env.native_step
    env.reset()
    env.step(torch.ones(4, dtype=torch.int64))


@needs_cc
def test_a_build_from_an_empty_cache(monkeypatch, tmp_path):
    """A fresh cache directory gets the library built into it (by name: source hash), then loaded."""
    monkeypatch.setenv("GPU_ENVS_NATIVE_CACHE", str(tmp_path))
    lib = native.build_into(tmp_path)
    assert lib is not None
    assert [p.suffix for p in tmp_path.iterdir()] == [".so"]


@needs_cc
@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_the_native_step_reports_whether_its_values_passed_the_health_checks(monkeypatch, cls):
    """``last_step_clean`` (SelfCheckedStep): True after a clean native step, False after a bad value or a torch step."""
    n = 6
    fast, slow = _pair(monkeypatch, cls, n, seed=0)
    fast.reset(seed=0)
    slow.reset(seed=0)
    g = torch.Generator().manual_seed(0)
    for _ in range(40):  # through episode ends: the reset rows' draws are checked too
        action = _action(cls, n, g)
        fast.raw_step(action)
        slow.raw_step(action)
        assert fast.last_step_clean and not slow.last_step_clean
    if cls is CartPoleEnv:
        bad_actions = [torch.tensor([0, 1, 2, 0, 1, 0]), torch.tensor([0, 1, -1, 0, 1, 0])]
    else:
        bad_actions = [torch.full((n, 1), v) for v in (float("nan"), float("inf"), -float("inf"))]
        bad_actions[0][1:] = 0.0  # one NaN row among clean ones
    for action in bad_actions:
        fast.raw_step(action)
        assert not fast.last_step_clean, action
        fast.reset(seed=0)  # (a NaN state would stay bad)
        fast.raw_step(_action(cls, n, g))
        assert fast.last_step_clean
    # an action the kernel does not take runs the torch step, which checks nothing
    fast.raw_step(_action(cls, n, g).to(torch.int32 if cls is CartPoleEnv else torch.float64))
    assert not fast.last_step_clean
