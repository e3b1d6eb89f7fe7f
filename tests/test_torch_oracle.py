"""The torch vector env path against the sequential oracle (tests/fakes.py).

Every transition key of ``step_and_maybe_reset`` must equal the reference loop of
single envs stepped and reset by hand, for each way a torch env can (not) report its
final observations.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from tests.fakes import CountingTorchVectorEnv, reference_rollout

N, T = 6, 400


@pytest.mark.parametrize("final_obs", ["info", "masked", "none"])
def test_transitions_match_sequential_reference(final_obs):
    actions = np.random.default_rng(0).integers(0, 2, size=(N, T))
    expected = reference_rollout(N, actions, final_obs=final_obs)
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs=final_obs))
    td = env.reset()
    got = {k: [] for k in expected}
    for t in range(T):
        td["action"] = torch.as_tensor(actions[:, t])
        td, root = env.step_and_maybe_reset(td)
        got["observation"].append(td["observation"])
        got["action"].append(td["action"])
        got["next_observation"].append(td["next", "observation"])
        got["reward"].append(td["next", "reward"].squeeze(-1))
        got["terminated"].append(td["next", "terminated"].squeeze(-1))
        got["truncated"].append(td["next", "truncated"].squeeze(-1))
        got["final_obs_missing"].append(td["next", "final_obs_missing"].squeeze(-1))
        got["root"].append(root["observation"])
        assert not root["done"].any() and not root["terminated"].any() and not root["truncated"].any()
        assert torch.equal(td["next", "done"], td["next", "terminated"] | td["next", "truncated"])
        td = root
    for key, want in expected.items():
        have = torch.stack(got[key], dim=1).numpy()
        np.testing.assert_array_equal(have, want.astype(have.dtype), err_msg=key)
    # the run exercised every case the oracle is about
    ended = expected["terminated"] | expected["truncated"]
    assert expected["terminated"].any() and expected["truncated"].any()
    assert ended.all(axis=0).any(), "a step where every env ends at once"
    assert (~ended).all(axis=0).any(), "a step where no env ends"
    assert expected["final_obs_missing"].any() == (final_obs != "info")


def test_rollout_matches_manual_loop():
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs="info"))
    traj = env.rollout(50, policy=lambda td: td.set("action", torch.ones(N, dtype=torch.long)))
    assert traj.batch_size == torch.Size([N, 50])
    actions = np.ones((N, 50), dtype=np.int64)
    expected = reference_rollout(N, actions)
    np.testing.assert_array_equal(traj["next", "observation"].numpy(), expected["next_observation"])
    np.testing.assert_array_equal(traj["observation"].numpy(), expected["observation"])
    # the root of step t+1 is the observation of step t+1
    assert torch.equal(traj["observation"][:, 1:], torch.as_tensor(expected["root"][:, :-1]))


def test_rollout_continues_without_reset():
    env = gpu_envs.wrap(CountingTorchVectorEnv(N))
    first = env.rollout(5)
    second = env.rollout(5, reset=False)
    actions = np.concatenate([first["action"].numpy(), second["action"].numpy()], axis=1)
    expected = reference_rollout(N, actions)
    np.testing.assert_array_equal(second["next", "observation"].numpy(), expected["next_observation"][:, 5:])


def test_integer_observations_get_zero_placeholder():
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs="none", obs_dtype=torch.int64))
    traj = env.rollout(20)
    done = traj["next", "done"].squeeze(-1)
    assert done.any()
    assert traj["next", "observation"].dtype == torch.int64
    assert (traj["next", "observation"][done] == 0).all()
    assert torch.equal(traj["next", "final_obs_missing"].squeeze(-1), done)


def test_custom_placeholder_value():
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs="none"), missing_obs_value=-7.0)
    traj = env.rollout(20)
    done = traj["next", "done"].squeeze(-1)
    assert (traj["next", "observation"][done] == -7.0).all()
    assert not (traj["next", "observation"][~done] == -7.0).any()


def test_partial_reset_resets_only_masked_rows():
    env = gpu_envs.wrap(CountingTorchVectorEnv(4))
    td = env.reset()
    td["action"] = torch.zeros(4, dtype=torch.long)
    td, root = env.step_and_maybe_reset(td)  # step 1: nobody ends (first episodes last 3)
    mask = torch.tensor([True, False, True, False])
    out = env.reset(td=root.set("_reset", mask.unsqueeze(-1)))
    episode, step = out["observation"][:, 1], out["observation"][:, 2]
    assert episode.tolist() == [1, 0, 1, 0]
    assert step.tolist() == [0, 1, 0, 1]


def test_reset_mask_does_not_reset_rows_the_env_already_reset():
    """torchrl's pattern: step(), then reset(td with "_reset" = done) serves the cache."""
    env = gpu_envs.wrap(CountingTorchVectorEnv(4))
    td = env.reset()
    for _ in range(2):
        td["action"] = torch.zeros(4, dtype=torch.long)
        td, td = env.step_and_maybe_reset(td)
    td["action"] = torch.zeros(4, dtype=torch.long)
    td = env.step(td)  # step 3: every first episode ends, the backend resets every row
    assert td["next", "done"].all()
    out = env.reset(td=TensorDict({"_reset": td["next", "done"]}, batch_size=[4]))
    # served from the cache: episode 1 step 0 (a second reset would give episode 2)
    assert out["observation"][:, 1].tolist() == [1, 1, 1, 1]
    assert out["observation"][:, 2].tolist() == [0, 0, 0, 0]


def test_full_reset_with_seed_restarts_everything():
    env = gpu_envs.wrap(CountingTorchVectorEnv(3))
    env.rollout(10)
    td = env.reset(seed=1)
    assert td["observation"][:, 2].tolist() == [0, 0, 0]
