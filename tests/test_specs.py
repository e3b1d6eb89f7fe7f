"""Tests for gpu_envs.contract.specs: values, sampling, membership, devices and gymnasium round trips."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from gpu_envs.contract.errors import SpecError, UnsupportedSpaceError
from gpu_envs.contract.specs import (
    Binary,
    Box,
    Composite,
    Discrete,
    MultiDiscrete,
    Spec,
    numpy_dtype,
    spec_from_gym,
    spec_to_gym,
    torch_dtype,
)

INF = math.inf
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# name -> factory(device); covers every kind and the Box bound/dtype variants
SPECS = {
    "box_f32": lambda d: Box(-1.0, 2.0, (3,), device=d),
    "box_f64_unbounded": lambda d: Box(-INF, INF, (2,), torch.float64, d),
    "box_half_low": lambda d: Box(0.5, INF, (4,), device=d),
    "box_half_high": lambda d: Box(-INF, -5.0, (4,), device=d),
    "box_mixed": lambda d: Box(torch.tensor([-INF, 0.0, -1.0, -INF]), torch.tensor([INF, INF, 1.0, 3.0]), device=d),
    "box_scalar": lambda d: Box(1.0, 2.0, device=d),
    "box_f16": lambda d: Box(-1.0, 1.0, (2,), torch.float16, d),
    "box_int32": lambda d: Box(-3, 4, (5,), torch.int32, d),
    "box_int32_half": lambda d: Box(2, INF, (3,), torch.int32, d),
    "box_int64_full": lambda d: Box(-(2**63), 2**63 - 1, (3,), torch.int64, d),
    "box_uint8_image": lambda d: Box(0, 255, (4, 4, 3), torch.uint8, d),
    "discrete": lambda d: Discrete(5, device=d, start=-2),
    "discrete_int8": lambda d: Discrete(3, torch.int8, d),
    "multidiscrete": lambda d: MultiDiscrete([[3, 2], [4, 1]], device=d),
    "multidiscrete_start": lambda d: MultiDiscrete([3, 5], torch.int32, d, start=[1, -2]),
    "binary": lambda d: Binary(4, device=d),
    "binary_int8": lambda d: Binary(3, torch.int8, d),
    "binary_2d": lambda d: Binary((2, 3), torch.int8, d),
    "composite": lambda d: Composite(
        obs={"pos": Box(-1.0, 1.0, (2,)), "img": Box(0, 255, (2, 2), torch.uint8)},
        action=Discrete(3, start=1),
        device=d,
    ),
    "tuple_like": lambda d: Composite({"0": Discrete(2), "1": Binary(2)}, device=d, tuple_like=True),
}
LEAVES = [k for k in SPECS if not k.startswith(("composite", "tuple"))]


def leaves(spec: Spec) -> list[Spec]:
    return spec.values(include_nested=True, leaves_only=True) if isinstance(spec, Composite) else [spec]


def same(a, b) -> bool:
    """Exact equality of two tensors or TensorDicts."""
    if isinstance(a, TensorDict):
        return bool((a == b).all())
    return torch.equal(a, b)


def check_value(spec: Spec, value, batch: tuple[int, ...], device: str) -> None:
    if isinstance(spec, Composite):
        assert isinstance(value, TensorDict)
        assert value.batch_size == torch.Size(batch)
        assert set(value.keys(True, True)) == set(spec.keys(True, True))
        for key, leaf in spec.items(include_nested=True, leaves_only=True):
            check_value(leaf, value[key], batch, device)
    else:
        assert value.shape == torch.Size((*batch, *spec.shape))
        assert value.dtype == spec.dtype
        assert value.device.type == device


# ---------------------------------------------------------------- every kind


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("batch", [(), (7,), (2, 3)])
def test_zero_and_rand_shape_dtype_device_and_contained(name, device, batch):
    spec = SPECS[name](device)
    for value in (spec.zero(batch), spec.rand(batch)):
        check_value(spec, value, batch, device)
        assert spec.contains(value)


def leaf_bounds(leaf: Spec) -> tuple[torch.Tensor, torch.Tensor]:
    """Elementwise inclusive bounds of a leaf spec."""
    if isinstance(leaf, Box):
        return leaf.low, leaf.high
    if isinstance(leaf, Discrete):
        return torch.tensor(leaf.start), torch.tensor(leaf.start + leaf.n - 1)
    if isinstance(leaf, MultiDiscrete):
        return leaf.start, leaf.start + leaf.nvec - 1
    return torch.tensor(0), torch.tensor(1)


@pytest.mark.parametrize("name", SPECS)
def test_zero_is_zero_clamped_into_range(name):
    spec = SPECS[name]("cpu")
    zero = spec.zero((3,))
    for key, leaf in spec.items(True, True) if isinstance(spec, Composite) else [(None, spec)]:
        value = zero if key is None else zero[key]
        low, high = leaf_bounds(leaf)
        expected = torch.zeros(leaf.shape, dtype=torch.float64).clamp(low.double(), high.double())
        assert torch.equal(value.double(), expected.expand(3, *leaf.shape)), (leaf, value)


def test_zero_clamps_into_range():
    assert torch.equal(Box(1.0, 2.0, (2,)).zero(), torch.ones(2))
    assert torch.equal(Box(-5, -2, (2,), torch.int32).zero((1,)), torch.full((1, 2), -2, dtype=torch.int32))
    assert torch.equal(Box(torch.tensor([-1.0, 3.0]), 4.0).zero(), torch.tensor([0.0, 3.0]))
    assert Discrete(3, start=2).zero().item() == 2
    assert MultiDiscrete([2, 2], start=[1, -5]).zero().tolist() == [1, -4]
    zero = Box(1.0, 2.0, (2,)).zero((3,))
    zero += 1  # fresh memory, not a view of the spec's cache
    assert torch.equal(Box(1.0, 2.0, (2,)).zero((3,)), torch.ones(3, 2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", SPECS)
def test_seeded_rand_is_reproducible(name, device):
    spec = SPECS[name](device)
    draw = [spec.rand((64,), generator=torch.Generator(device).manual_seed(s)) for s in (0, 0, 1)]
    assert same(draw[0], draw[1])
    assert not same(draw[0], draw[2])


@pytest.mark.parametrize("name", SPECS)
def test_a_sampler_draws_what_rand_draws(name):
    spec = SPECS[name]("cpu")
    sample = spec.sampler((5,), generator=torch.Generator().manual_seed(4))
    reference = torch.Generator().manual_seed(4)
    for _ in range(3):  # each call a new draw, the same sequence as rand's
        assert same(sample(), spec.rand((5,), generator=reference))


@pytest.mark.parametrize("name", SPECS)
def test_global_rng_is_used_without_generator(name):
    spec = SPECS[name]("cpu")
    torch.manual_seed(3)
    a = spec.rand((32,))
    torch.manual_seed(3)
    assert same(a, spec.rand((32,)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", SPECS)
def test_to_device_keeps_equality(name, device):
    spec = SPECS[name]("cpu")
    moved = spec.to(device)
    assert moved == spec.to(device) and moved is not spec
    assert moved.device.type == device
    assert all(leaf.device.type == device for leaf in leaves(moved))
    assert moved.to("cpu") == spec
    if device == "cpu":
        assert moved == spec


@pytest.mark.parametrize("name", SPECS)
def test_spec_gym_spec_round_trip(name):
    spec = SPECS[name]("cpu")
    assert spec_from_gym(spec.to_gym()) == spec
    assert spec_from_gym(spec_to_gym(spec), device="cpu") == spec


def test_inequality_between_different_specs():
    specs = [SPECS[name]("cpu") for name in SPECS]
    for i, a in enumerate(specs):
        for j, b in enumerate(specs):
            assert (a == b) == (i == j), (a, b)
    assert Box(-1.0, 1.0, (3,)) != Box(-1.0, 1.0, (3,), torch.float64)
    assert Discrete(3) != Discrete(3, start=1)
    assert Binary(3) != Binary(3, torch.int8)


# ---------------------------------------------------------------- contains


@pytest.mark.parametrize("name", LEAVES)
def test_contains_rejects_wrong_dtype(name):
    spec = SPECS[name]("cpu")
    other = torch.float32 if spec.dtype != torch.float32 else torch.float64
    assert not spec.contains(spec.zero((2,)).to(other))
    assert not spec.contains(spec.zero((2,)).numpy())  # tensors only


@pytest.mark.parametrize("name", [k for k in LEAVES if SPECS[k]("cpu").shape != ()])
def test_contains_rejects_wrong_trailing_shape(name):
    spec = SPECS[name]("cpu")
    good = spec.zero((2,))
    assert spec.contains(good) and spec.contains(good[0]) and spec.contains(good.unsqueeze(0))
    assert not spec.contains(good[..., :-1] if spec.shape[-1] > 1 else good[..., :0])
    assert not spec.contains(good.unsqueeze(-1))


@pytest.mark.parametrize(
    ("spec", "bad"),
    [
        (Box(-1.0, 2.0, (2,)), torch.tensor([0.0, 2.5])),
        (Box(-1.0, 2.0, (2,)), torch.tensor([-1.5, 0.0])),
        (Box(-1.0, 2.0, (2,)), torch.tensor([float("nan"), 0.0])),
        (Box(0.0, INF, (1,)), torch.tensor([-0.1])),
        (Box(-INF, 0.0, (1,)), torch.tensor([0.1])),
        (Box(-3, 4, (2,), torch.int32), torch.tensor([[0, 5]], dtype=torch.int32)),
        (Box(10, 20, (2, 2), torch.uint8), torch.full((2, 2), 9, dtype=torch.uint8)),
        (Discrete(3, start=1), torch.tensor([1, 2, 4])),
        (Discrete(3, start=1), torch.tensor(0)),
        (MultiDiscrete([3, 2]), torch.tensor([0, 2])),
        (MultiDiscrete([3, 2], start=[1, 1]), torch.tensor([0, 1])),
        (Binary(2, torch.int8), torch.tensor([0, 2], dtype=torch.int8)),
    ],
)
def test_contains_rejects_out_of_range(spec, bad):
    assert not spec.contains(bad)
    assert spec.contains(spec.zero(bad.shape[: bad.dim() - len(spec.shape)]))


def test_contains_accepts_bounds_exactly():
    box = Box(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 5.0]))
    assert box.contains(torch.stack([box.low, box.high]))
    assert Discrete(3, start=1).contains(torch.tensor([1, 3]))
    assert Binary(2).contains(torch.tensor([[True, False]]))


# ---------------------------------------------------------------- sampling distributions

N = 20_000


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_bounded_box_samples_inside_bounds_and_spread(dtype):
    box = Box(torch.tensor([-2.0, 10.0]), torch.tensor([-1.0, 30.0]), dtype=dtype)
    x = box.rand((N,)).double()
    assert (x >= box.low.double()).all() and (x <= box.high.double()).all()
    assert x.mean(0).allclose(torch.tensor([-1.5, 20.0], dtype=torch.float64), atol=0.3)
    assert (x[:, 1] < 12).any() and (x[:, 1] > 28).any()


def test_box_near_float_limits_samples_finite_values():
    big = torch.finfo(torch.float32).max
    box = Box(-big, big, (N,))
    x = box.rand()
    assert torch.isfinite(x).all() and box.contains(x) and x.min() < -1e37 and x.max() > 1e37
    half = Box(-INF, 60000.0, (N,), torch.float16).rand()
    assert torch.isfinite(half).all() and half.max() <= 60000


def test_half_bounded_box_respects_bound_like_gymnasium():
    lo = Box(2.0, INF, (N,)).rand()
    assert lo.min() >= 2.0 and lo.max() > 5.0  # low + Exp(1)
    assert abs(lo.mean().item() - 3.0) < 0.1
    hi = Box(-INF, -1.0, (N,)).rand()
    assert hi.max() <= -1.0 and hi.min() < -4.0
    assert abs(hi.mean().item() + 2.0) < 0.1
    free = Box(-INF, INF, (N,), torch.float64).rand()
    assert abs(free.mean().item()) < 0.1 and abs(free.std().item() - 1.0) < 0.1
    mixed = SPECS["box_mixed"]("cpu").rand((N,))
    assert (mixed[:, 1] >= 0).all() and (mixed[:, 3] <= 3).all() and (mixed[:, 0] < 0).any()
    assert ((mixed[:, 2] >= -1) & (mixed[:, 2] <= 1)).all()


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_int_box_hits_every_value_inclusive(dtype):
    low, high = (3, 9) if dtype == torch.uint8 else (-3, 4)
    x = Box(low, high, (4,), dtype).rand((2_000,))
    assert set(x.unique().tolist()) == set(range(low, high + 1))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64])
def test_int_box_infinite_bounds_clip_to_dtype_range(dtype):
    info = torch.iinfo(dtype)
    box = Box(-INF, INF, (N,), dtype)
    assert box.low.unique().item() == info.min and box.high.unique().item() == info.max
    x = box.rand()
    assert box.contains(x) and x.float().abs().mean() < 5  # normal, not uniform over the range
    half = Box(7, INF, (N,), dtype).rand()
    assert half.min() >= 7 and half.float().mean() < 12
    full = SPECS["box_int64_full"]("cpu")
    assert full.contains(full.rand((N,)))


def test_uint8_box_clips_infinite_bounds_to_range():
    box = Box(-INF, INF, (3,), torch.uint8)
    assert box.low.tolist() == [0] * 3 and box.high.tolist() == [255] * 3
    assert box.rand((N,)).float().mean() > 100  # uniform over 0..255


def test_discrete_and_multidiscrete_cover_all_values():
    assert set(Discrete(4, start=3).rand((1_000,)).tolist()) == {3, 4, 5, 6}
    assert set(Discrete(4, torch.uint8, start=250).rand((1_000,)).tolist()) == {250, 251, 252, 253}
    x = MultiDiscrete([3, 5], start=[-1, 10]).rand((2_000,))
    assert set(x[:, 0].tolist()) == {-1, 0, 1}
    assert set(x[:, 1].tolist()) == set(range(10, 15))
    assert set(Binary(2, torch.int8).rand((100,)).flatten().tolist()) == {0, 1}
    assert 0.4 < Binary(N).rand().float().mean() < 0.6


# ---------------------------------------------------------------- gymnasium round trips

GYM_SPACES = {
    "box_f32_bounded": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    "box_f32_per_dim": gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 5.0], np.float32)),
    "box_f64_unbounded": gym.spaces.Box(-np.inf, np.inf, (2, 2), np.float64),
    "box_f16": gym.spaces.Box(-2.0, 2.0, (2,), np.float16),
    "box_uint8_image": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
    "box_int32_half": gym.spaces.Box(0, np.inf, (4,), np.int32),
    "box_int64_half": gym.spaces.Box(-np.inf, 3, (2,), np.int64),
    "box_int8": gym.spaces.Box(-5, 5, (1,), np.int8),
    "box_bool": gym.spaces.Box(0, 1, (3,), np.bool_),
    "discrete": gym.spaces.Discrete(4),
    "discrete_start": gym.spaces.Discrete(5, start=-2),
    "discrete_int32": gym.spaces.Discrete(3, start=1, dtype=np.int32),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 2, 4]),
    "multidiscrete_2d_start": gym.spaces.MultiDiscrete(
        np.array([[3, 2], [1, 4]]), dtype=np.int32, start=[[1, 1], [0, -3]]
    ),
    "multibinary": gym.spaces.MultiBinary(5),
    "multibinary_2d": gym.spaces.MultiBinary([2, 3]),
    "dict_nested": gym.spaces.Dict(
        {
            "obs": gym.spaces.Dict(
                {"pos": gym.spaces.Box(-1, 1, (2,)), "img": gym.spaces.Box(0, 255, (4, 4), np.uint8)}
            ),
            "flag": gym.spaces.MultiBinary(2),
            "mode": gym.spaces.Discrete(3),
        }
    ),
    "tuple": gym.spaces.Tuple(
        [gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2,)), gym.spaces.Tuple([gym.spaces.Discrete(3)])]
    ),
}


@pytest.mark.parametrize("name", GYM_SPACES)
def test_gym_space_round_trip(name):
    space = GYM_SPACES[name]
    spec = spec_from_gym(space)
    back = spec.to_gym()
    assert back == space
    assert type(back) is type(space)
    if hasattr(space, "dtype") and space.dtype is not None:
        assert back.dtype == space.dtype
        assert numpy_dtype(spec.dtype) == space.dtype
    if isinstance(space, gym.spaces.Box) and space.dtype != np.bool_:
        assert (back.bounded_below == space.bounded_below).all()
        assert (back.bounded_above == space.bounded_above).all()
    assert spec_from_gym(back) == spec
    if not isinstance(spec, Composite):  # samples of the spec are valid gymnasium values
        assert space.contains(spec.rand().numpy())


def test_gym_conversion_kinds():
    assert isinstance(spec_from_gym(GYM_SPACES["box_int32_half"]), Box)
    assert spec_from_gym(GYM_SPACES["discrete_start"]) == Discrete(5, start=-2)
    assert spec_from_gym(GYM_SPACES["multibinary"]) == Binary(5, torch.int8)
    assert spec_from_gym(GYM_SPACES["box_bool"]) == Binary(3)
    half = spec_from_gym(GYM_SPACES["box_int32_half"])
    assert half.bounded_below.all() and not half.bounded_above.any()
    assert half.rand((N,)).float().mean() < 5  # exponential, not uniform up to 2**31
    nested = spec_from_gym(GYM_SPACES["dict_nested"], device="cpu")
    assert isinstance(nested["obs"], Composite) and nested["obs", "img"].dtype == torch.uint8
    tup = spec_from_gym(GYM_SPACES["tuple"])
    assert tup.tuple_like and tup.keys() == ["0", "1", "2"] and tup["2", "0"] == Discrete(3)
    assert isinstance(spec_to_gym(tup), gym.spaces.Tuple)
    assert Composite(tup._specs) != tup  # tuple_like is part of the identity


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Sequence(gym.spaces.Discrete(2)),
        gym.spaces.Text(5),
        gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(2)),
        gym.spaces.OneOf([gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2,))]),
        gym.spaces.Dict({"ok": gym.spaces.Discrete(2), "bad": gym.spaces.Text(3)}),
    ],
    ids=["sequence", "text", "graph", "oneof", "dict_with_text"],
)
def test_unsupported_spaces_raise(space):
    with pytest.raises(UnsupportedSpaceError, match=r"(?s)(Sequence|Text|Graph|OneOf).*wrapper.*custom") as info:
        spec_from_gym(space)
    assert isinstance(info.value, TypeError)


def test_bfloat16_has_no_gym_space():
    spec = Box(-1.0, 1.0, (2,), torch.bfloat16)
    assert spec.contains(spec.rand((3,)))
    with pytest.raises(SpecError, match="bfloat16"):
        spec.to_gym()


@pytest.mark.parametrize(
    ("np_dt", "th_dt"),
    [
        (np.bool_, torch.bool),
        (np.int8, torch.int8),
        (np.uint8, torch.uint8),
        (np.int32, torch.int32),
        (np.int64, torch.int64),
        (np.float16, torch.float16),
        (np.float32, torch.float32),
        (np.float64, torch.float64),
    ],
)
def test_dtype_helpers(np_dt, th_dt):
    assert torch_dtype(np_dt) is th_dt
    assert torch_dtype(np.dtype(np_dt)) is th_dt
    assert torch_dtype(th_dt) is th_dt
    assert numpy_dtype(th_dt) == np.dtype(np_dt)
    assert torch_dtype(numpy_dtype(th_dt)) is th_dt


def test_dtype_helpers_reject_unknown():
    with pytest.raises(SpecError):
        torch_dtype(np.complex64)
    with pytest.raises(SpecError):
        torch_dtype("not-a-dtype")
    with pytest.raises(SpecError):
        numpy_dtype(torch.bfloat16)


# ---------------------------------------------------------------- constructor validation


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Box(1.0, 0.0), "low > high"),
        (lambda: Box(torch.tensor([0.0, 2.0]), torch.tensor([1.0, 1.0])), "low > high"),
        (lambda: Box(np.zeros(3), 1.0, (4,)), "does not broadcast to shape"),
        (lambda: Box(np.zeros(3), np.ones(4)), "do not broadcast"),
        (lambda: Box(float("nan"), 1.0), "NaN"),
        (lambda: Box(0.5, 3, (1,), torch.int32), "whole numbers"),
        (lambda: Box(0, 300, (1,), torch.uint8), "range"),
        (lambda: Box(-1e6, 1.0, (1,), torch.float16), "range"),
        (lambda: Box(0, 1, (1,), torch.bool), "dtype"),
        (lambda: Box(0, 1, (1,), torch.uint16), "dtype"),
        (lambda: Box("a", 1.0), "low"),
        (lambda: Discrete(0), "n must be"),
        (lambda: Discrete(-2), "n must be"),
        (lambda: Discrete(2.5), "n must be"),
        (lambda: Discrete(3, torch.float32), "dtype"),
        (lambda: Discrete(300, torch.uint8), "fit"),
        (lambda: MultiDiscrete([2, 0]), ">= 1"),
        (lambda: MultiDiscrete([2.5, 1]), "whole numbers"),
        (lambda: MultiDiscrete([2, 3], start=[0, 0, 0]), "start"),
        (lambda: Binary(0), "n must be"),
        (lambda: Binary((2, 0)), "n must be"),
        (lambda: Binary(2, torch.float32), "dtype"),
        (lambda: Composite(a=1), "must be a Spec"),
        (lambda: Composite({"a": Discrete(2)}, a=Discrete(2)), "both"),
        (lambda: Composite({1: Discrete(2)}), "keys must be str"),
        (lambda: Box(0.0, 1.0).rand(-1), "shape must be"),
        (lambda: spec_to_gym(gym.spaces.Discrete(2)), "expects a Spec"),
        (lambda: Composite({"0": Discrete(2), "x": Discrete(2)}, tuple_like=True).to_gym(), "tuple_like"),
    ],
)
def test_bad_arguments_raise_spec_error(make, match):
    with pytest.raises(SpecError, match=match) as info:
        make()
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------- Composite


def make_composite() -> Composite:
    return SPECS["composite"]("cpu")


def test_composite_keys_items_and_lookup():
    spec = make_composite()
    assert spec.shape == torch.Size([]) and spec.dtype is None and spec.device == torch.device("cpu")
    assert spec.keys() == ["obs", "action"] and list(spec) == ["obs", "action"] and len(spec) == 2
    assert spec.keys(include_nested=True) == ["obs", ("obs", "pos"), ("obs", "img"), "action"]
    assert spec.keys(include_nested=True, leaves_only=True) == [("obs", "pos"), ("obs", "img"), "action"]
    assert spec.keys(leaves_only=True) == ["action"]
    assert dict(spec.items())["action"] == Discrete(3, start=1)
    assert spec["obs", "img"] == Box(0, 255, (2, 2), torch.uint8)
    assert spec[("obs",)] is spec["obs"]
    assert ("obs", "pos") in spec and "obs" in spec and ("obs", "nope") not in spec and 3 not in spec
    with pytest.raises(KeyError, match="nope"):
        spec["obs", "nope"]
    with pytest.raises(KeyError):
        spec["action", "x"]  # action is a leaf


def test_composite_setitem_and_delitem():
    spec = make_composite()
    spec["extra", "deep", "v"] = Box(0.0, 1.0, (5,))
    assert isinstance(spec["extra", "deep"], Composite) and spec["extra", "deep", "v"].shape == (5,)
    spec["plain"] = {"a": Discrete(2)}  # mappings become Composites
    assert spec["plain", "a"] == Discrete(2)
    with pytest.raises(SpecError, match="leaf"):
        spec["action", "sub"] = Discrete(2)
    with pytest.raises(SpecError):
        spec["bad"] = "not a spec"
    del spec["extra", "deep"]
    assert "extra" in spec and ("extra", "deep") not in spec
    assert spec.zero((2,))["plain", "a"].shape == (2,)


@pytest.mark.parametrize("batch", [(), (4,), (2, 5)])
def test_composite_zero_and_rand_give_tensordicts(batch):
    spec = make_composite()
    for td in (spec.zero(batch), spec.rand(batch)):
        assert isinstance(td, TensorDict) and td.batch_size == torch.Size(batch) and td.device == spec.device
        assert isinstance(td["obs"], TensorDict) and td["obs"].batch_size == torch.Size(batch)
        assert td["obs", "pos"].shape == (*batch, 2) and td["obs", "img"].dtype == torch.uint8
        assert td["action"].shape == batch
        assert spec.contains(td)
    assert (spec.zero(batch)["action"] == 1).all()


def test_composite_contains():
    spec = make_composite()
    td = spec.rand((3,))
    assert spec.contains(td)
    td["extra"] = torch.zeros(3)  # extra keys are fine
    assert spec.contains(td)
    bad = td.clone()
    bad["obs", "pos"][0, 0] = 5.0
    assert not spec.contains(bad)
    missing = td.exclude(("obs", "img"))
    assert not spec.contains(missing)
    assert not spec.contains(td["obs", "pos"])  # not a TensorDict
    assert spec.contains(
        {"obs": {"pos": torch.zeros(2), "img": torch.zeros(2, 2, dtype=torch.uint8)}, "action": torch.tensor(1)}
    )


def test_composite_device_inference():
    assert Composite().device is None
    assert Composite(device="cpu").device == torch.device("cpu")
    assert Composite(a=Discrete(2)).device == torch.device("cpu")
    assert Composite().zero((2,)).batch_size == (2,)
    assert Composite(a=Discrete(2)) == Composite({"a": Discrete(2)}, device="cpu")


def test_composite_to_gym_dict_and_tuple():
    spec = make_composite()
    space = spec.to_gym()
    assert isinstance(space, gym.spaces.Dict) and isinstance(space["obs"], gym.spaces.Dict)
    assert space["action"] == gym.spaces.Discrete(3, start=1)
    tup = SPECS["tuple_like"]("cpu").to_gym()
    assert tup == gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2,), np.bool_)])


def test_generator_on_other_device_is_refused():
    if not torch.cuda.is_available():
        pytest.skip("needs a second device type")
    with pytest.raises(SpecError, match="generator"):
        Box(0.0, 1.0, (2,), device="cuda").rand((2,), generator=torch.Generator("cpu"))


def test_reprs_are_short_and_informative():
    assert repr(Box(-1.0, 1.0, (3,))) == "Box(low=-1.0, high=1.0, shape=(3,), dtype=float32, device=cpu)"
    assert "start=2" in repr(Discrete(3, start=2)) and "n=3" in repr(Discrete(3, start=2))
    assert "nvec=[3, 2]" in repr(MultiDiscrete([3, 2]))
    assert repr(Binary(4)) == "Binary(n=4, dtype=bool, device=cpu)"
    text = repr(make_composite())
    assert text.startswith("Composite(") and "pos=Box(" in text and len(text) < 400
    assert len(repr(Box(torch.linspace(0, 1, 1000), 2.0))) < 200
