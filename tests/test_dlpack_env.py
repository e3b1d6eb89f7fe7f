"""Envs that speak another array framework go through wrap() by DLPack, without copies.

CuPy needs CUDA (tests/test_cupy.py runs there); numpy arrays implement the same
``__dlpack__`` protocol on the CPU, so a numpy version of the counting env stands in
for a CuPy one here: same code path in the torch backend, checked against the oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.backends.reuse import DECIDING_CALLS
from gpu_envs.utils.arrays import is_zero_copy
from tests.fakes import CountingTorchVectorEnv, reference_rollout
from tests.sync_guard import no_sync

N, T = 5, 300


class NumpyCountingEnv(CountingTorchVectorEnv):
    """The counting env, speaking numpy arrays in and out (a stand-in for a CuPy env)."""

    def __init__(self, num_envs, final_obs="info"):
        super().__init__(num_envs, "cpu", final_obs=final_obs)
        self.last_obs = None
        self.actions_seen = []

    def reset(self, *, seed=None, options=None):
        if options is not None:
            assert isinstance(options["reset_mask"], np.ndarray)  # the mask arrives as numpy too
            options = {"reset_mask": torch.from_numpy(options["reset_mask"])}
        obs, info = super().reset(seed=seed, options=options)
        self.last_obs = obs.numpy()
        return self.last_obs, info

    def step(self, action):
        assert isinstance(action, np.ndarray), type(action)
        self.actions_seen.append(action)
        obs, reward, terminated, truncated, info = super().step(torch.from_numpy(action))
        info = {k: v.numpy() for k, v in info.items()}
        self.last_obs = obs.numpy()
        return self.last_obs, reward.numpy(), terminated.numpy(), truncated.numpy(), info


@pytest.mark.parametrize("final_obs", ["info", "masked", "none"])
def test_numpy_speaking_env_matches_the_oracle(final_obs):
    actions = np.random.default_rng(1).integers(0, 2, size=(N, T))
    expected = reference_rollout(N, actions, final_obs=final_obs)
    env = gpu_envs.wrap(NumpyCountingEnv(N, final_obs))
    td = env.reset()
    assert env.backend.framework == "numpy"
    nexts, roots = [], []
    for t in range(T):
        td["action"] = torch.as_tensor(actions[:, t])
        td, root = env.step_and_maybe_reset(td)
        nexts.append(td["next", "observation"])
        roots.append(root["observation"])
        td = root
    np.testing.assert_array_equal(torch.stack(nexts, 1).numpy(), expected["next_observation"])
    np.testing.assert_array_equal(torch.stack(roots, 1).numpy(), expected["root"])


def test_arrays_cross_without_copies():
    inner = NumpyCountingEnv(N)
    env = gpu_envs.wrap(inner)
    env.rollout(DECIDING_CALLS)  # the first calls hand out copies while in-place rewrites are looked for
    assert env.backend.copy_buffers is False
    td = env.reset()
    assert is_zero_copy(inner.last_obs, td["observation"])
    td["action"] = torch.ones(N, dtype=torch.long)
    td, root = env.step_and_maybe_reset(td)
    assert is_zero_copy(inner.last_obs, root["observation"])
    assert is_zero_copy(inner.actions_seen[-1], td["action"])


def test_partial_reset_mask_is_handed_over_in_the_envs_framework():
    env = gpu_envs.wrap(NumpyCountingEnv(4))
    env.reset()
    out = env.reset(td=TensorDict({"_reset": torch.tensor([True, False, False, True])}, batch_size=[4]))
    assert out["observation"][:, 1].tolist() == [1, 0, 0, 1]


def test_foreign_step_loop_never_syncs():
    env = gpu_envs.wrap(NumpyCountingEnv(N, "masked"))
    td = env.reset()
    td["action"] = torch.zeros(N, dtype=torch.long)
    td, td = env.step_and_maybe_reset(td)
    with no_sync():
        for _ in range(50):
            td["action"] = torch.zeros(N, dtype=torch.long)
            td, td = env.step_and_maybe_reset(td)


def test_an_env_returning_lists_is_a_clear_error():
    class Lists(CountingTorchVectorEnv):
        def reset(self, *, seed=None, options=None):
            obs, info = super().reset(seed=seed, options=options)
            return obs.tolist(), info

    with pytest.raises(gpu_envs.InvalidArgumentError, match="__dlpack__"):
        gpu_envs.wrap(Lists(2)).reset()
