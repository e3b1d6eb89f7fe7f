"""The eager pool of draws gives exactly the direct draws, refills on schedule and when
anything else writes the generator, and stays out of traces and captures.

A pooled draw must equal ``CounterRNG.uniform`` bit for bit at every step, whatever the
sizes, lanes and reset patterns, or the built-in envs' streams would depend on whether a
step ran eagerly, compiled or in a CUDA graph.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpu_envs.builtin import CartPoleEnv, PendulumEnv
from gpu_envs.builtin.counter_rng import CounterRNG
from gpu_envs.builtin.draw_pool import MAX_EVENTS, DrawPool, pool_events
from gpu_envs.utils.capture import capturing

# on CUDA the int32 kernels' wrapping multiplies are checked as well (benchmarks/gpu_check.py runs this file)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def random_masks(n, steps, p, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(n, generator=generator) < p for _ in range(steps)]


@pytest.mark.parametrize(
    ("n", "lanes", "events"),
    [
        (1, 4, None),
        (7, 4, 5),
        (64, 4, None),
        (513, 4, 3),
        (9, 2, None),
        (33, 2, 1),
        (5, 1, 4),
        (12, 3, None),
        (8, 5, 2),
    ],
)
@pytest.mark.parametrize("device", DEVICES)
def test_pooled_draws_equal_direct_draws(n, lanes, events, device):
    rng = CounterRNG(n, lanes, device, seed=n + lanes)
    bounds = rng.bounds([-0.05 * (i + 1) for i in range(lanes)], [0.05 * (i + 2) for i in range(lanes)])
    pool = DrawPool(rng, bounds, events)
    for step, mask in enumerate(random_masks(n, 3 * MAX_EVENTS + 7, p=0.6)):
        assert torch.equal(pool.uniform(), rng.uniform(bounds)), step
        rng.advance(None if step % 11 == 0 else mask.to(device))  # every row, or the rows that "ended"


def assert_pooled_equal_direct(rng, bounds, pool, steps):
    """``steps`` draws of ``pool`` equal the direct ones, every row advancing after each."""
    draws = []
    for _ in range(steps):
        draws.append(pool.uniform())
        assert torch.equal(draws[-1], rng.uniform(bounds))
        rng.advance()
    return draws


def test_every_row_ending_every_step_exhausts_each_window_exactly():
    """The worst case the schedule is built for: each advance moves every counter."""
    rng = CounterRNG(16, 4, "cpu", seed=3)
    bounds = rng.bounds([0.0] * 4, [1.0] * 4)
    seen = assert_pooled_equal_direct(rng, bounds, DrawPool(rng, bounds, events=4), 13)
    assert len({tuple(d[0].tolist()) for d in seen}) == 13  # 13 different events, not a stale slot


def test_narrow_bounds_are_clamped_below_high_as_direct_draws_are():
    rng = CounterRNG(4096, 2, "cpu", seed=0)
    bounds = rng.bounds([1.0, 100.0], [1.0000001, 101.0])
    assert bounds.needs_clamp
    assert_pooled_equal_direct(rng, bounds, DrawPool(rng, bounds, events=3), 4)


def test_huge_counters_wrap_like_direct_draws():
    rng = CounterRNG(8, 4, "cpu", seed=1)
    bounds = rng.bounds([-1.0] * 4, [1.0] * 4)
    pool = DrawPool(rng, bounds, events=8)
    rng.counter.fill_(2**62 + 3)
    assert_pooled_equal_direct(rng, bounds, pool, 10)


def test_writes_from_outside_are_noticed():
    rng = CounterRNG(32, 4, "cpu", seed=2)
    bounds = rng.bounds([-0.05] * 4, [0.05] * 4)
    pool = DrawPool(rng, bounds, events=16)
    pool.uniform()  # filled at these counters
    rng.counter[::3] += 5  # a user's in-place write
    assert torch.equal(pool.uniform(), rng.uniform(bounds))
    rng.advance()
    rng.counter.zero_()  # a write right before an advance: the advance notices it
    rng.advance()
    assert torch.equal(pool.uniform(), rng.uniform(bounds))
    rng.reseed(99)  # new key and counters
    assert torch.equal(pool.uniform(), rng.uniform(bounds))
    rng.key[:, 0] ^= 12345  # the key alone
    assert torch.equal(pool.uniform(), rng.uniform(bounds))
    # two pools on one generator: a refill of one tells the other
    other = DrawPool(rng, bounds, events=5)
    other.uniform()
    rng.counter.add_(1)
    assert torch.equal(other.uniform(), rng.uniform(bounds))
    assert torch.equal(pool.uniform(), rng.uniform(bounds))


def test_a_write_without_a_version_bump_needs_invalidate():
    """A CUDA graph replay writes the counters without bumping their version counters:
    ``load_live_state`` (which the graph collector calls after each replay) invalidates."""
    env = CartPoleEnv(8, seed=0)
    env.reset()
    state = env.live_state()
    for _ in range(3):
        env.step(torch.ones(8, dtype=torch.long))
    state["rng_counter"].data.add_(7)  # .data: the same memory, no version bump
    env.load_live_state(state)  # the same tensors: nothing is copied, the pool is told
    assert torch.equal(env._step_draws.uniform(), env._rng.uniform(env._reset_bounds))


class _OpNames(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_direct_draws_record_ops_on_the_counters_only():
    rng = CounterRNG(16, 4, "cpu", seed=0)
    bounds = rng.bounds([-0.05] * 4, [0.05] * 4)
    pool = DrawPool(rng, bounds)
    pool.uniform()
    with capturing(), _OpNames() as ops:
        direct = pool.uniform()
    assert not any(name.startswith("gather") for name in ops.names)
    assert torch.equal(direct, rng.uniform(bounds))
    with _OpNames() as ops:
        pool.uniform()
    assert [name for name in ops.names if name.startswith(("gather", "bitwise", "mul"))] == ["gather.default"]


def test_envs_made_under_inference_mode_draw_directly():
    with torch.inference_mode():
        env = PendulumEnv(8, seed=4, max_episode_steps=3)
        reference = PendulumEnv(8, seed=4, max_episode_steps=3)
        env.reset()
        reference.reset()
        assert not env._step_draws.enabled  # inference tensors have no version counters
        for _ in range(7):
            with capturing():
                expected = reference.step(torch.zeros(8, 1))
            got = env.step(torch.zeros(8, 1))
            assert torch.equal(got[0], expected[0])


def test_pool_size_follows_the_fill_budget():
    cpu = torch.device("cpu")
    assert pool_events(8, 4, cpu) == MAX_EVENTS
    assert pool_events(4096, 4, cpu) == 8
    assert pool_events(1 << 16, 4, cpu) == 1
    assert pool_events(4096, 4, torch.device("cuda")) == MAX_EVENTS
    with pytest.raises(ValueError, match="events"):
        DrawPool(CounterRNG(2, 1, "cpu", seed=0), CounterRNG(2, 1, "cpu", seed=0).bounds([0.0], [1.0]), events=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_env_steps_with_pooled_draws_equal_direct_ones(cls, device):
    """Same env, same actions: every output and the state equal with and without the pool."""
    pooled, direct = (cls(32, device=device, seed=6, max_episode_steps=7) for _ in range(2))
    pooled.reset()
    direct.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(150):
        if cls is CartPoleEnv:
            action = torch.randint(0, 2, (32,), generator=generator).to(device)
        else:
            action = (torch.rand(32, 1, generator=generator) * 4 - 2).to(device)
        got = pooled.step(action)
        with capturing():
            expected = direct.step(action)
        for a, b in zip(got[:4], expected[:4], strict=True):
            assert torch.equal(a, b)
        assert torch.equal(got[4]["final_obs"], expected[4]["final_obs"])
    for name, value in pooled.live_state().items():
        assert torch.equal(value, direct.live_state()[name]), name


@pytest.mark.slow
def test_compiled_steps_between_eager_ones_keep_the_stream():
    """A compiled step writes the counters (a version bump): the next eager step refills."""
    env, reference = CartPoleEnv(16, seed=1, max_episode_steps=3), CartPoleEnv(16, seed=1, max_episode_steps=3)
    env.reset()
    reference.reset()
    compiled = torch.compile(env.step)
    action = torch.ones(16, dtype=torch.long)
    for i in range(12):
        got = compiled(action) if i % 4 == 1 else env.step(action)
        with capturing():
            expected = reference.step(action)
        # compiled code rounds floats differently (physics and the draws' float mapping, to
        # the last bit); the integer streams are the same, and eager draws are exact
        done = expected[2] | expected[3]
        assert torch.equal(got[2] | got[3], done), i
        assert torch.equal(env.live_state()["rng_counter"], reference.live_state()["rng_counter"])
        if i % 4 != 1:
            assert torch.equal(got[0][done], expected[0][done]), i
        torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-6)
    assert int(reference.live_state()["rng_counter"].min()) == 5  # every row reset after each 3 steps


def _interrupt_the_hash_once(monkeypatch, module):
    """Make the next int32 hash of a fill raise KeyboardInterrupt half-way (as Ctrl-C would)."""
    real = module.mix32_int32_
    calls = {"n": 0}

    def interrupted(x, scratch):
        calls["n"] += 1
        if calls["n"] == 1:
            x.fill_(-1)  # the pool's memory half-written: NaN bit patterns as float32
            raise KeyboardInterrupt
        return real(x, scratch)

    monkeypatch.setattr(module, "mix32_int32_", interrupted)


def test_a_fill_interrupted_half_way_is_not_trusted(monkeypatch):
    from gpu_envs.builtin import draw_pool

    rng = CounterRNG(8, 4, "cpu", seed=5)
    bounds = rng.bounds([-0.05] * 4, [0.05] * 4)
    pool = DrawPool(rng, bounds, events=4)
    assert_pooled_equal_direct(rng, bounds, pool, 8)  # two windows used: the next draw fills the third
    _interrupt_the_hash_once(monkeypatch, draw_pool)
    with pytest.raises(KeyboardInterrupt):
        pool.uniform()
    draws = assert_pooled_equal_direct(rng, bounds, pool, 9)  # refilled, not the half-written memory
    assert all(torch.isfinite(d).all() for d in draws)


def test_a_full_reset_after_an_interrupted_step_draws_the_right_stream(monkeypatch):
    """Ctrl-C inside a built-in env's step, then reset(): the run continues as a fresh env's from that state."""
    from gpu_envs.builtin import draw_pool

    monkeypatch.setenv("GPU_ENVS_NATIVE", "0")  # the pure-torch step, whose draws come from the pool
    action = torch.ones(6, dtype=torch.int64)
    env = CartPoleEnv(6, seed=1)
    env.reset()
    for _ in range(70):  # past the pool's first window, episodes ending
        env.step(action)
    _interrupt_the_hash_once(monkeypatch, draw_pool)
    with pytest.raises(KeyboardInterrupt):
        for _ in range(200):
            env.step(action)
    env.reset()  # no seed: the key stays, so nothing but the reset itself can refresh the pool
    fresh = CartPoleEnv(6, seed=2)
    fresh.reset()
    fresh.load_live_state({k: v.clone() for k, v in env.live_state().items()})  # its pool: filled afresh
    for _ in range(150):
        torch.testing.assert_close(env.step(action)[0], fresh.step(action)[0], rtol=0, atol=0)
