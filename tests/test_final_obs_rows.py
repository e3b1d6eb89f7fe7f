"""The row-view fast path of FinalObsCache gives bit-identical results.

For large batches, short rows (2/4/8/16 bytes) are selected as single elements; the
result must equal a plain broadcast ``torch.where`` for every dtype, shape and mask,
and non-contiguous inputs must fall back to the plain path.
"""

from __future__ import annotations

import pytest
import torch

from gpu_envs.contract.final_obs import ROW_VIEW_MIN_ENVS, FinalObsCache
from gpu_envs.contract.specs import Box, Composite

CASES = [
    ((4,), torch.float32),
    ((2,), torch.float32),
    ((1,), torch.int64),
    ((2, 2), torch.float32),
    ((3,), torch.float32),
    ((8,), torch.int16),
]


def _spec(shape, dtype):
    return Composite({"observation": Box(-100, 100, shape, dtype)})


def _rand(n, shape, dtype, gen):
    if dtype.is_floating_point:
        x = torch.randn(n, *shape, generator=gen, dtype=dtype)
        x[0] = -0.0  # sign of zero must survive
        return x
    return torch.randint(-50, 50, (n, *shape), generator=gen, dtype=dtype)


def _assert_bit_equal(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    if a.is_floating_point():
        assert torch.equal(a.signbit(), b.signbit())


@pytest.mark.parametrize("n", [5, ROW_VIEW_MIN_ENVS + 7])
@pytest.mark.parametrize(("shape", "dtype"), CASES)
@pytest.mark.parametrize("mode", ["none", "ended", "every", "masked"])
def test_matches_plain_where(n, shape, dtype, mode):
    gen = torch.Generator().manual_seed(n)
    fo = FinalObsCache(_spec(shape, dtype), n)
    obs, final = _rand(n, shape, dtype, gen), _rand(n, shape, dtype, gen)
    done = torch.rand(n, 1, generator=gen) < 0.4
    fmask = torch.rand(n, generator=gen) < 0.5
    placeholder = torch.tensor(float("nan") if dtype.is_floating_point else 0, dtype=dtype)
    rows = done.view((n,) + (1,) * len(shape))
    if mode == "none":
        got, missing = fo({"observation": obs}, done, None, None)
        want, want_missing = torch.where(rows, placeholder, obs), done
    elif mode == "ended":  # valid on the ended rows: RawStep's final_mask=done
        got, missing = fo({"observation": obs}, done, {"observation": final}, done)
        want, want_missing = torch.where(rows, final, obs), torch.zeros_like(done)
    elif mode == "every":  # valid on every row (final_mask None): it is the next observation
        got, missing = fo({"observation": obs}, done, {"observation": final}, None)
        want, want_missing = final, torch.zeros_like(done)
    else:
        got, missing = fo({"observation": obs}, done, {"observation": final}, fmask)
        valid = (done.squeeze(-1) & fmask).view(rows.shape)
        want = torch.where(valid, final, torch.where(rows & ~valid, placeholder, obs))
        want_missing = done & ~fmask.view(n, 1)
    _assert_bit_equal(got["observation"], want)
    assert torch.equal(missing, want_missing)
    assert got["observation"].shape == obs.shape and got["observation"].dtype == dtype
    assert fo.root_obs["observation"] is obs


def test_non_contiguous_input_falls_back():
    n = ROW_VIEW_MIN_ENVS + 1
    fo = FinalObsCache(_spec((4,), torch.float32), n)
    wide = torch.randn(n, 8)
    obs = wide[:, ::2]  # [N, 4], not contiguous: cannot be viewed as rows
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[3] = True
    got, _ = fo({"observation": obs}, done, None, None)
    assert got["observation"][3].isnan().all()
    assert torch.equal(got["observation"][4:], obs[4:])
