"""gpu_envs.interop.time_outs: which rows each bootstrap hook treats exactly, and from which observation."""

from __future__ import annotations

import torch

import gpu_envs
from gpu_envs.interop.time_outs import bootstrap_rows, final_observation
from tests.fakes import CountingTorchVectorEnv


def test_rows_and_observations_follow_final_obs_missing():
    """With some final observations withheld: exact rows have s_T, fallback rows get the post-reset one (no NaN)."""
    n = 8
    env = gpu_envs.wrap(CountingTorchVectorEnv(n, final_obs="masked"))
    td = env.reset(seed=0)
    seen = {"exact": 0, "fallback": 0}
    for _ in range(40):
        td.set("action", torch.zeros(n, dtype=torch.int64))
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        exact, fallback = bootstrap_rows(nxt, n)
        truncated, missing = nxt["truncated"].view(n), nxt["final_obs_missing"].view(n)
        assert torch.equal(exact, truncated & ~missing) and torch.equal(fallback, truncated & missing)
        s_t = final_observation(nxt, root, "observation")
        assert not s_t.isnan().any()
        assert torch.equal(s_t[~missing], nxt["observation"][~missing])  # the true final (or next) observation
        assert torch.equal(s_t[missing], root["observation"][missing])  # a stand-in, never used for the target
        seen["exact"] += int(exact.sum())
        seen["fallback"] += int(fallback.sum())
        td = root
    assert seen["exact"] > 3 and seen["fallback"] > 0, seen
