"""The CPU's per-step health look (:mod:`gpu_envs.core.health_look`) against a plain torch oracle.

The look must never clear a step that holds a fault (a NaN or an infinity in any checked
float, in any dtype, outside the skipped placeholder rows; an integer action outside its
range, per column) and should clear every clean one. Each case is compared with the
oracle ``torch.isfinite`` / a range comparison on the same tensors.
"""

from __future__ import annotations

import pytest
import torch

from gpu_envs.core.health_look import host_look
from gpu_envs.utils.native_library import compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler: the look is off (the batched scan runs)")

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _oracle(action, obs, reward, missing, low=None, high=None):
    keep = ~missing.reshape(-1)
    ok = bool(torch.isfinite(reward).all())
    for x in obs:
        ok &= bool(torch.isfinite(x[keep]).all())
    if low is not None:
        flat = action.reshape(action.shape[0], -1)
        ok &= bool(((flat >= low) & (flat <= high)).all())
    elif action.is_floating_point():
        ok &= bool(torch.isfinite(action).all())
    return ok


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bad", [None, float("nan"), float("inf"), -float("inf")])
def test_float_observations_in_every_dtype(dtype, bad):
    look = host_look(None, None, torch.float32, [dtype, torch.float32])
    assert look is not None
    n = 37
    gen = torch.Generator().manual_seed(0)
    obs = [torch.randn(n, 5, generator=gen).to(dtype) * 1e3, torch.randn(n, 2, 3, generator=gen)]
    action, reward, missing = (
        torch.randn(n, 2, generator=gen),
        torch.randn(n, 1, generator=gen),
        torch.zeros(n, 1, dtype=torch.bool),
    )
    if bad is not None:
        obs[0][11, 4] = bad
    assert look(action, obs, reward, missing) is _oracle(action, obs, reward, missing) is (bad is None)


def test_the_largest_finite_values_are_clean():
    """The bits test has no arithmetic: the float maxima do not overflow into a false fault."""
    look = host_look(None, None, None, FLOATS)
    assert look is not None
    obs = [torch.full((4, 3), torch.finfo(dtype).max, dtype=dtype) for dtype in FLOATS]
    obs[1][0, 0] = -torch.finfo(torch.float64).max
    assert look(torch.zeros(4), obs, torch.full((4, 1), 3e38), torch.zeros(4, 1, dtype=torch.bool))


def test_placeholder_rows_are_skipped_and_only_those():
    look = host_look(None, None, None, [torch.float32])
    assert look is not None
    obs = torch.randn(8, 4)
    missing = torch.zeros(8, 1, dtype=torch.bool)
    obs[[2, 5]] = float("nan")
    missing[[2, 5]] = True
    reward = torch.ones(8, 1)
    assert look(torch.zeros(8), [obs], reward, missing)
    obs[6, 0] = float("nan")  # a real NaN on a row with an observation
    assert not look(torch.zeros(8), [obs], reward, missing)
    assert not look(
        torch.zeros(8), [torch.randn(8, 4)], torch.full((8, 1), float("nan")), missing
    )  # rewards are never skipped


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_discrete_actions_against_their_range(dtype):
    look = host_look(dtype, (0, 2), None, [])
    assert look is not None
    reward, missing = torch.zeros(6, 1), torch.zeros(6, 1, dtype=torch.bool)
    action = torch.tensor([0, 1, 2, 2, 1, 0], dtype=dtype)
    assert look(action, [], reward, missing)
    action[3] = 3
    assert not look(action, [], reward, missing)
    if dtype != torch.uint8:
        action[3] = -1
        assert not look(action, [], reward, missing)


def test_multi_discrete_ranges_per_column():
    low, high = torch.tensor([0, 1, -2]), torch.tensor([3, 1, 2])
    look = host_look(torch.int64, (low, high), None, [])
    assert look is not None
    reward, missing = torch.zeros(5, 1), torch.zeros(5, 1, dtype=torch.bool)
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        action = torch.randint(-3, 5, (5, 3), generator=gen)
        assert look(action, [], reward, missing) == _oracle(action, [], reward, missing, low, high)
    assert look(torch.tensor([[3, 1, -2]] * 5), [], reward, missing)


def test_non_contiguous_tensors_are_read_as_laid_out_logically():
    look = host_look(None, None, torch.float32, [torch.float32])
    assert look is not None
    base = torch.randn(6, 8)
    base[:, 1::2] = float("nan")  # NaN only in the columns the view leaves out
    view = base[:, ::2]
    assert not view.is_contiguous()
    missing = torch.zeros(6, 1, dtype=torch.bool)
    assert look(torch.zeros(6, 1), [view], torch.zeros(6, 1), missing)
    assert not look(base.t()[1::2].t(), [view], torch.zeros(6, 1), missing)  # a NaN action view


def test_unsupported_dtypes_turn_the_look_off():
    assert host_look(None, None, None, [torch.complex64]) is None
    assert host_look(torch.uint16, (0, 3), None, []) is None


def _buffer(n, t, fault):
    """A time-major ``[N, T]`` buffer (every entry a transposed view of a ``[T, N, ...]`` block) with one fault."""
    from tensordict import TensorDict

    gen = torch.Generator().manual_seed(3)
    obs = torch.randn(t, n, 4, generator=gen)
    reward = torch.randn(t, n, 1, generator=gen)
    action = torch.randint(0, 3, (t, n, 2), generator=gen)
    missing = torch.zeros(t, n, 1, dtype=torch.bool)
    if fault == "obs":
        obs[t - 1, n // 2, 3] = float("inf")
    elif fault == "reward":
        reward[1, 0, 0] = float("nan")
    elif fault == "action":
        action[2, n - 1, 1] = 5
    elif fault == "placeholder":
        obs[0, 1] = float("nan")
        missing[0, 1] = True
    swap = lambda x: x.transpose(0, 1)  # noqa: E731
    nxt = {"observation": swap(obs), "reward": swap(reward), "final_obs_missing": swap(missing)}
    return TensorDict({"action": swap(action), "next": nxt}, batch_size=(n, t))


class _Range:
    active, finite, width = True, False, 2
    low_np, high_np = torch.zeros(2, dtype=torch.int64).numpy(), torch.full((2,), 2).numpy()

    def bounds(self):
        return torch.zeros(2, dtype=torch.int64), torch.full((2,), 2)


@pytest.mark.parametrize("fault", [None, "obs", "reward", "action", "placeholder"])
def test_the_collection_look_in_c_agrees_with_numpy_on_time_major_buffers(fault, monkeypatch):
    """A healthy buffer is cleared both ways, any fault (or a placeholder: the closer look's) is not."""
    from gpu_envs.core.health_look import healthy_on_host

    data = _buffer(9, 5, fault)
    assert not data["next", "observation"].is_contiguous()  # the C loops read it without a copy
    in_c = healthy_on_host(data, data["next"], _Range(), ["observation"])
    monkeypatch.setenv("GPU_ENVS_NATIVE", "0")
    in_numpy = healthy_on_host(data, data["next"], _Range(), ["observation"])
    assert in_c is in_numpy is (fault is None)
