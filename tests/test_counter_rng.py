"""The built-in envs' counter-based generator: exact hash, ranges, per-row streams, quality.

Row ``i``'s draws are a pure function of (seed, global index, its counter): they must not
change with ``N``, with what other rows do, or with where the computation runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpu_envs.builtin.counter_rng import MASK32, CounterRNG, UniformBounds, mix32, mix32_int32_


def mix32_reference(x: int) -> int:
    """The C function on uint32_t, in Python's unbounded ints: [16 236f7153 12 33cd8663 15 3e06b66b 16]."""
    x ^= x >> 16
    x = (x * 0x236F7153) & MASK32
    x ^= x >> 12
    x = (x * 0x33CD8663) & MASK32
    x ^= x >> 15
    x = (x * 0x3E06B66B) & MASK32
    return x ^ (x >> 16)


def test_mix32_is_the_reference_hash_exactly():
    xs = torch.cat([torch.tensor([0, 1, 2, MASK32, MASK32 - 1, 2**31]), torch.randint(0, 2**32, (2000,))])
    assert mix32(xs).tolist() == [mix32_reference(int(x)) for x in xs]
    assert len(set(mix32(torch.arange(1 << 16)).tolist())) == 1 << 16  # a bijection: no collision


def test_mix32_int32_is_the_reference_hash_on_bit_patterns():
    """The int32 version (wrapping multiplies, masked shifts) used by the eager pool of draws;
    2003 values: the vectorised loop and its scalar tail."""
    xs = torch.cat([torch.tensor([0, 1, 2, MASK32, MASK32 - 1, 2**31, 2**31 - 1]), torch.randint(0, 2**32, (1996,))])
    bits = xs.view(torch.int32)[0::2].clone()  # the low halves: the same 32 bits as int32
    out = mix32_int32_(bits, torch.empty_like(bits))
    assert (out.to(torch.int64) & MASK32).tolist() == [mix32_reference(int(x)) for x in xs]


def test_uniform_stays_in_low_high_and_uses_24_bits():
    rng = CounterRNG(4096, 4, "cpu", seed=0)
    lows, highs = [-0.05, -math.pi, 1.0, 100.0], [0.05, math.pi, 1.0000001, 101.0]
    bounds = rng.bounds(lows, highs)
    assert bounds.needs_clamp  # the last two ranges can round up to high
    for _ in range(5):
        x = rng.uniform(bounds)
        rng.advance()
        low = torch.tensor(lows, dtype=torch.float32)
        high = torch.tensor(highs, dtype=torch.float32)
        assert bool((x >= low).all()) and bool((x < high).all())
    u = (rng.bits() >> 8).double() / 2**24
    assert u.min() >= 0.0 and u.max() < 1.0
    # the top value of a narrow range is the float just below high, never high
    top = UniformBounds([1.0], [1.0000001], torch.device("cpu"))
    m = torch.full((1, 1), 2**24 - 1, dtype=torch.float32)
    assert torch.minimum(torch.addcmul(top.low, m, top.scale), top.below_high).item() < top.below_high.item() + 1e-12
    assert UniformBounds([0.5], [0.5], torch.device("cpu")).below_high.item() == 0.5  # low == high: exactly low


@pytest.mark.slow
def test_uniform_distribution_is_flat_and_lanes_are_uncorrelated():
    rng = CounterRNG(1 << 13, 4, "cpu", seed=123)
    bounds = rng.bounds([0.0] * 4, [1.0] * 4)
    draws = []
    for _ in range(4):
        draws.append(rng.uniform(bounds))
        rng.advance()
    x = torch.cat(draws).double()  # [4 * 8192, 4]
    counts = torch.histc(x.flatten(), bins=64, min=0.0, max=1.0)
    expected = x.numel() / 64
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 120, chi2  # 63 degrees of freedom: p ~ 1e-5 at 120
    assert abs(float(x.mean()) - 0.5) < 0.005 and abs(float(x.var()) - 1 / 12) < 0.003
    corr = torch.corrcoef(x.T)
    off_diagonal = corr - torch.eye(4, dtype=corr.dtype)
    assert float(off_diagonal.abs().max()) < 0.04  # lanes of one draw event
    first, second = draws[0].double().flatten(), draws[1].double().flatten()
    assert abs(float(torch.corrcoef(torch.stack([first, second]))[0, 1])) < 0.04  # consecutive events
    # every bit of the 24 used is fair
    m = (x * 2**24).long()
    bits = torch.stack([(m >> b) & 1 for b in range(24)]).double().mean(1)
    assert float((bits - 0.5).abs().max()) < 0.015


def test_row_streams_do_not_depend_on_n_or_on_other_rows():
    big = CounterRNG(96, 4, "cpu", seed=7)
    left = CounterRNG(32, 4, "cpu", seed=7, index_offset=0)
    right = CounterRNG(64, 4, "cpu", seed=7, index_offset=32)
    assert torch.equal(torch.cat([left.key, right.key]), big.key)
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        mask = torch.rand(96, generator=generator) < 0.3
        assert torch.equal(torch.cat([left.bits(), right.bits()]), big.bits())
        big.advance(mask)
        left.advance(mask[:32])
        right.advance(mask[32:])
    # a row's draw depends on its own counter only: replay row 40 alone at its counter
    alone = CounterRNG(1, 4, "cpu", seed=7, index_offset=40)
    alone.counter.copy_(big.counter[40:41])
    assert torch.equal(alone.bits()[0], big.bits()[40])


def test_seeds_key_the_streams():
    a, b = CounterRNG(64, 2, "cpu", seed=1), CounterRNG(64, 2, "cpu", seed=1)
    assert torch.equal(a.bits(), b.bits())
    c = CounterRNG(64, 2, "cpu", seed=2)
    assert (a.bits() != c.bits()).float().mean() > 0.99
    a.advance()
    a.reseed(1)
    assert torch.equal(a.bits(), b.bits()) and int(a.counter.sum()) == 0
    # huge and negative seeds are reduced mod 2^64, distinct rows get distinct keys
    for seed in (2**70 + 5, -3, None):
        keys = CounterRNG(1000, 2, "cpu", seed=seed).key
        assert len({tuple(k) for k in keys.tolist()}) == 1000
        assert int(keys[:, 1].min()) >= 1 and int(keys[:, 1].max()) < 2**31 and bool((keys[:, 1] % 2 == 1).all())


def test_counters_far_into_a_run_stay_exact():
    """Positions wrap at 2^32 (a stream of 2^30 four-value events): no int64 overflow, ever."""
    rng = CounterRNG(8, 4, "cpu", seed=0)
    early = rng.bits()
    rng.counter.fill_(2**30)
    assert torch.equal(rng.bits(), early)  # the documented period
    rng.counter.fill_(2**62 + 3)
    late = rng.bits()
    assert int(late.min()) >= 0 and int(late.max()) <= MASK32
    reference = []
    for k, g in rng.key.tolist():
        row = []
        for lane in range(4):
            position = ((2**62 + 3) * 4 + lane) & MASK32
            row.append(mix32_reference((k + position * g) & MASK32))
        reference.append(row)
    assert late.tolist() == reference


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_same_draws_on_every_device(device):
    cpu = CounterRNG(256, 4, "cpu", seed=11)
    other = CounterRNG(256, 4, device, seed=11)
    bounds = [-0.05] * 4, [0.05] * 4
    np.testing.assert_array_equal(cpu.bits().numpy(), other.bits().cpu().numpy())
    torch.testing.assert_close(
        cpu.uniform(cpu.bounds(*bounds)), other.uniform(other.bounds(*bounds)).cpu(), rtol=0, atol=0
    )
