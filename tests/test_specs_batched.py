"""Specs with batch dims (torchrl's convention): expand, unbatched, values, membership, gymnasium.

Every kind of ``tests/test_specs.py`` is expanded to a batch and checked against its
per-env self: the batched ``rand()`` is exactly the per-env ``rand(batch)`` (same draws),
``contains`` needs the batch dims, bounds are broadcast views, and ``to_gym`` is
gymnasium's own ``batch_space`` of the per-env space.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector.utils import batch_space

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.specs import Binary, Box, Composite, Discrete, MultiDiscrete, OneHot, spec_from_gym
from tests.sync_guard import no_sync
from tests.test_specs import DEVICES, LEAVES, SPECS, check_value, leaves, same

# per-env kinds of test_specs plus OneHot (whose gymnasium space is a Discrete, so it has no round trip)
KINDS = {**SPECS, "one_hot": lambda d: OneHot(4, device=d, start=1)}
BATCHES = [(5,), (2, 3)]


def expand(spec, batch):
    return spec.expand(*batch, *spec.shape)


@pytest.fixture(
    params=[(d, k, b) for d in DEVICES for k in KINDS for b in BATCHES], ids=lambda p: "-".join(map(str, p))
)
def pair(request):
    """(per-env spec, the same expanded to a batch, batch, device) for every kind, device and batch."""
    device, name, batch = request.param
    single = KINDS[name](device)
    return single, expand(single, batch), batch, device


def test_expand_adds_leading_batch_dims_and_unbatched_drops_them(pair):
    single, spec, batch, _ = pair
    assert spec.shape == torch.Size(batch) + single.shape
    assert spec.batch_shape == torch.Size(batch) and single.batch_shape == torch.Size(())
    assert spec.event_shape == single.event_shape and type(spec) is type(single)
    assert spec.device == single.device and spec.dtype == single.dtype
    assert spec.unbatched() == single and spec != single
    for key, leaf in spec.items(True, True) if isinstance(spec, Composite) else []:
        assert leaf.shape == torch.Size(batch) + single[key].shape and leaf.batch_shape == torch.Size(batch)


def test_batched_rand_and_zero_are_whole_batches_on_the_device(pair):
    single, spec, batch, device = pair
    for value in (spec.zero(), spec.rand()):
        check_value(single, value, batch, device)
        assert spec.contains(value) and single.contains(value)
    # rand(shape) PREPENDS dims to the full shape, as in torchrl
    check_value(single, spec.rand((4,)), (4, *batch), device)
    check_value(single, spec.zero(2), (2, *batch), device)
    # the same draws as the per-env spec asked for the batch
    g = [torch.Generator(device).manual_seed(7) for _ in range(2)]
    assert same(spec.rand(generator=g[0]), single.rand(batch, generator=g[1]))
    assert same(spec.zero(), single.zero(batch))


@pytest.mark.parametrize("name", KINDS)
def test_contains_needs_the_batch_dims(name):
    single = KINDS[name]("cpu")
    spec = expand(single, (5,))
    value = spec.rand()
    assert spec.contains(value) and spec.contains(spec.rand((3,)))  # extra leading dims are fine
    assert not spec.contains(value[0])  # one env's value lacks the batch dim
    assert single.contains(value[0])
    assert not spec.contains(expand(single, (4,)).rand())


def above_range(spec) -> torch.Tensor | None:
    """One env's value just above the spec's range, or None where nothing lies above it."""
    if isinstance(spec, Box):
        if not bool(spec.bounded_above.all()):
            return None
        if not spec.dtype.is_floating_point and bool((spec.high == torch.iinfo(spec.dtype).max).any()):
            return None
        return spec.high + 1
    if isinstance(spec, Discrete):
        return torch.tensor(spec.start + spec.n, dtype=spec.dtype)
    if isinstance(spec, MultiDiscrete):
        return (spec.start + spec.nvec).to(spec.dtype)
    if isinstance(spec, Binary) and spec.dtype != torch.bool:
        return torch.full(spec.shape, 2, dtype=spec.dtype)
    return None


# kinds with a value above their range (not bool flags, unbounded or full-range boxes), and OneHot
BOUNDED = [k for k in LEAVES if above_range(SPECS[k]("cpu")) is not None] + ["one_hot"]


@pytest.mark.parametrize("name", BOUNDED)
def test_contains_checks_every_row_of_a_batch(name):
    single = KINDS[name]("cpu")
    spec = expand(single, (6,))
    bad = above_range(single) if name != "one_hot" else torch.ones(4, dtype=torch.bool)  # two flags set
    value = spec.rand()
    assert spec.contains(value)
    value[3] = bad
    assert not spec.contains(value) and not single.contains(value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", KINDS)
def test_to_keeps_the_batch_dims(name, device):
    spec = expand(KINDS[name]("cpu"), (3,))
    moved = spec.to(device)
    assert moved.batch_shape == (3,) and moved.shape == spec.shape and moved.device.type == device
    assert all(leaf.batch_shape == (3,) for leaf in leaves(moved))
    assert moved.to("cpu") == spec


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("batch", BATCHES)
def test_to_gym_of_a_batched_spec_is_gymnasiums_batch_space(name, batch):
    single = KINDS[name]("cpu")
    expected = single.to_gym()
    for n in reversed(batch):
        expected = batch_space(expected, n)
    assert expand(single, batch).to_gym() == expected


@pytest.mark.parametrize("name", [k for k in SPECS if k in LEAVES])
def test_samples_of_the_batched_gym_space_are_in_the_batched_spec(name):
    spec = expand(SPECS[name]("cpu"), (4,))
    space = spec.to_gym()
    space.seed(0)
    for _ in range(5):
        sample = torch.as_tensor(np.asarray(space.sample()))
        assert spec.contains(sample.to(spec.dtype)), (spec, sample)


@pytest.mark.parametrize("name", SPECS)
def test_single_space_round_trip_then_expand_rebuilds_the_batched_spec(name):
    spec = expand(SPECS[name]("cpu"), (6,))
    assert expand(spec_from_gym(spec.unbatched().to_gym()), (6,)) == spec


def test_bounds_are_broadcast_views_of_the_per_env_bounds():
    single = Box(torch.tensor([-1.0, 0.0, -math.inf]), torch.tensor([1.0, 5.0, math.inf]))
    spec = single.expand(4, 3)
    assert spec.low.shape == spec.high.shape == spec.bounded_below.shape == (4, 3)
    assert all(torch.equal(row, single.low) for row in spec.low)
    assert spec.low.stride(0) == 0  # shared, not copied per env
    assert spec.bounded_above[:, 2].tolist() == [False] * 4
    md = MultiDiscrete([3, 2], start=[1, 0]).expand(5, 2)
    assert md.nvec.shape == md.start.shape == (5, 2) and md.nvec[4].tolist() == [3, 2]
    assert Discrete(3, start=1).expand(5).rand().unique().min() >= 1


def test_expand_takes_the_full_shape_like_torchrl():
    box = Box(-1.0, 1.0, (3,))
    assert box.expand(4, 3) == box.expand((4, 3)) == box.expand(torch.Size([4, 3]))
    twice = box.expand(4, 3).expand(2, 4, 3)
    assert twice.batch_shape == (2, 4) and twice.unbatched() == box
    with pytest.raises(SpecError, match=r"full shape.*spec.expand\(8, 3\)"):
        box.expand(4)  # a batch size alone is not torchrl's expand
    with pytest.raises(SpecError, match="full shape"):
        box.expand(4, 2)
    assert Discrete(2).expand(7).shape == (7,)  # per-env shape () : the full shape is the batch
    comp = Composite(obs=box).expand(4)  # a Composite's shape IS its batch shape
    assert comp.shape == (4,) and comp["obs"].shape == (4, 3)
    assert comp.expand(2, 4).shape == (2, 4) and comp.expand(2, 4)["obs"].shape == (2, 4, 3)
    with pytest.raises(SpecError, match="full shape"):
        comp.expand(5)


def test_composite_entries_share_its_batch_shape():
    box = Box(-1.0, 1.0, (3,))
    comp = Composite(obs=box.expand(4, 3), flag=Binary(1).expand(4, 1), shape=(4,))
    assert comp == Composite(obs=box, flag=Binary(1)).expand(4)
    with pytest.raises(SpecError, match="batch shape"):
        Composite(obs=box, shape=(4,))  # a per-env entry in a batched Composite
    with pytest.raises(SpecError, match="batch shape"):
        Composite(obs=box.expand(5, 3), shape=(4,))
    with pytest.raises(SpecError, match="batch shape"):
        comp["other"] = box
    comp["nested", "x"] = Discrete(2).expand(4)
    assert comp["nested"].shape == (4,) and comp.rand()["nested", "x"].shape == (4,)
    assert comp.unbatched()["nested", "x"] == Discrete(2)
    td = comp.rand((2,))
    assert td.batch_size == (2, 4) and td["obs"].shape == (2, 4, 3)


def test_reprs_show_the_batch_dims():
    assert repr(Box(-1.0, 1.0, (3,)).expand(8, 3)) == (
        "Box(low=-1.0, high=1.0, shape=(8, 3), batch_shape=(8,), dtype=float32, device=cpu)"
    )
    assert "batch_shape=(8,)" in repr(Discrete(2).expand(8))
    assert "batch_shape=(8,)" in repr(Composite(a=Discrete(2)).expand(8))
    assert "batch_shape" not in repr(Discrete(2))


@pytest.mark.parametrize("name", KINDS)
def test_batched_rand_with_a_generator_never_syncs(name):
    spec = expand(KINDS[name]("cpu"), (16,))
    generator = torch.Generator("cpu").manual_seed(0)
    with no_sync():
        for _ in range(3):
            spec.rand(generator=generator)
            spec.zero()


def test_a_batched_space_has_no_batch_marker():
    # gymnasium cannot tell a batched space from a per-env one: spec_from_gym reads it as one env
    spec = spec_from_gym(batch_space(gym.spaces.Box(-1.0, 1.0, (3,)), 4))
    assert spec.batch_shape == () and spec.shape == (4, 3)
