"""Whole rows as single elements (gpu_envs.utils.row_views): the same values bit for bit as the plain where,
and History / Delay at a batch that uses them equal to the same transforms without them."""

from __future__ import annotations

import pytest
import torch

import gpu_envs
import gpu_envs.utils.row_views as row_views
from gpu_envs.transforms import Delay, History, TransformedEnv
from gpu_envs.utils.row_views import ROW_VIEW_MIN_ENVS, row_dtype, rows_of, where_rows


@pytest.mark.parametrize(
    ("row", "dtype", "expected"),
    [
        ((4,), torch.float32, torch.complex128),
        ((2,), torch.float32, torch.int64),
        ((2, 2), torch.uint8, torch.int32),
        ((1,), torch.int16, torch.int16),
        ((3,), torch.float32, None),  # 12 bytes: no such dtype
        ((), torch.float32, None),  # a scalar row broadcasts nothing
    ],
)
def test_row_dtype(row, dtype, expected):
    assert row_dtype(torch.Size(row), dtype, ROW_VIEW_MIN_ENVS) is expected
    assert row_dtype(torch.Size(row), dtype, ROW_VIEW_MIN_ENVS - 1) is None  # too few rows to pay


@pytest.mark.parametrize("row", [(4,), (2, 2), (8,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.int16])
def test_where_rows_equals_where_bit_for_bit(row, dtype):
    g = torch.Generator().manual_seed(0)
    n, k = 300, 3
    window = torch.randint(0, 100, (k, n, *row), generator=g).to(dtype)
    fresh = torch.randint(0, 100, (1, n, *row), generator=g).to(dtype)
    if dtype.is_floating_point:
        window[0, 0].fill_(float("nan"))  # NaNs and -0.0 are moved as bits
        fresh[0, 1].fill_(-0.0)
    mask = (torch.rand(n, generator=g) < 0.3).view(1, n, *(1,) * len(row))
    rows = row_dtype(torch.Size(row), dtype, n)
    out = where_rows(mask, fresh, window, 2, rows)
    plain = torch.where(mask, fresh, window)
    assert out.shape == plain.shape and out.dtype == plain.dtype
    assert torch.equal(out.view(torch.uint8), plain.view(torch.uint8))


def test_rows_of_refuses_what_it_cannot_view():
    x = torch.zeros(3, 300, 4)
    assert rows_of(x.transpose(0, 1), 2, torch.complex128) is None  # not contiguous
    assert rows_of(x.view(-1)[1:1201].view(3, 100, 4), 2, torch.complex128) is None  # offset inside a row
    assert rows_of(x, 2, torch.complex128).shape == (3, 300, 1)


def _run(env, steps: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    out = []
    td = env.reset()
    for t in range(steps):
        td["action"] = env.action_spec.rand(generator=g)
        step, td = env.step_and_maybe_reset(td)
        out.append(step.clone())
        if t == steps // 2:  # a masked reset in the middle
            mask = torch.rand(env.num_envs, 1, generator=g) < 0.25
            td = env.reset(td=td.clone().set("_reset", mask))
            out.append(td.clone())
    return out


@pytest.mark.parametrize(
    "make_transform",
    [
        lambda: History(length=3),
        lambda: Delay(action_steps=(0, 2), observation_steps=(0, 3)),
    ],
    ids=["History", "Delay"],
)
def test_history_and_delay_with_row_views_equal_them_without(monkeypatch, make_transform):
    n = ROW_VIEW_MIN_ENVS + 44
    monkeypatch.setenv("GPU_ENVS_NATIVE", "0")  # the row views serve the torch ops (the C kernel needs none)

    def build():
        return TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=n, seed=7, max_episode_steps=15), make_transform())

    fast = build()  # rows as single elements (CartPole's rows are 16 bytes)
    with monkeypatch.context() as m:
        m.setattr(row_views, "ROW_VIEW_MIN_ENVS", 10**9)
        plain = build()
    ours, theirs = _run(fast, 40, seed=1), _run(plain, 40, seed=1)
    for a, b in zip(ours, theirs, strict=True):
        assert (a == b).all(), "row views changed a value"
