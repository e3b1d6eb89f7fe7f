"""ManiSkill3-style torch vector envs: ``info["final_observation"]`` + ``info["_final_observation"]``.

``ManiSkillVectorEnv`` resets ended rows inside ``step`` and, only on steps where some
row ended, adds a clone of the pre-reset batch as ``info["final_observation"]`` and the
done mask as ``info["_final_observation"]``. The torch backend reads them like its own
``info["final_obs"]`` / ``"_final_obs"``; the fake (``tests/isaac_fakes.py``) runs the
counting dynamics so the sequential oracle checks every transition.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.backends.torch_envs import TorchVectorBackend, final_obs_in
from tests.fakes import reference_rollout
from tests.isaac_fakes import FakeManiSkillVectorEnv, outside_sync_guard
from tests.sync_guard import no_sync

N, T = 6, 100


def collect(env, actions: np.ndarray, key="observation") -> dict:
    got = {
        k: []
        for k in ("observation", "next_observation", "reward", "terminated", "truncated", "final_obs_missing", "root")
    }
    td = env.reset()
    for t in range(actions.shape[1]):
        td["action"] = torch.as_tensor(actions[:, t]).unsqueeze(-1)
        td, root = env.step_and_maybe_reset(td)
        got["observation"].append(td[key])
        got["next_observation"].append(td["next", key])
        got["reward"].append(td["next", "reward"].squeeze(-1))
        got["terminated"].append(td["next", "terminated"].squeeze(-1))
        got["truncated"].append(td["next", "truncated"].squeeze(-1))
        got["final_obs_missing"].append(td["next", "final_obs_missing"].squeeze(-1))
        got["root"].append(root[key])
        td = root
    return {k: torch.stack(v, dim=1).numpy() for k, v in got.items()}


@pytest.mark.parametrize("withhold", [False, True], ids=["all_rows", "masked_rows"])
def test_transitions_match_sequential_reference(withhold):
    env = gpu_envs.wrap(FakeManiSkillVectorEnv(N, withhold=withhold))
    assert isinstance(env.backend, TorchVectorBackend)
    actions = np.random.default_rng(1).integers(0, 2, size=(N, T)).astype(np.float32)
    got = collect(env, actions)
    expected = reference_rollout(N, actions, final_obs="masked" if withhold else "info")
    for key, want in expected.items():
        if key != "action":
            np.testing.assert_array_equal(got[key], want.astype(got[key].dtype), err_msg=key)
    ended = expected["terminated"] | expected["truncated"]
    assert (~ended).all(axis=0).any(), "steps without any final_observation key"
    assert expected["final_obs_missing"].any() == withhold


def test_nested_state_dict_observations():
    env = gpu_envs.wrap(FakeManiSkillVectorEnv(N, obs_mode="state_dict"))
    assert env.observation_spec.keys(include_nested=True, leaves_only=True) == [
        ("agent", "counts"),
        ("extra", "progress"),
    ]
    actions = np.ones((N, 30), dtype=np.float32)
    got = collect(env, actions, key=("agent", "counts"))
    expected = reference_rollout(N, actions)
    np.testing.assert_array_equal(got["next_observation"], expected["next_observation"])
    np.testing.assert_array_equal(got["root"], expected["root"])


def test_final_obs_in_reads_both_conventions():
    final, mask = torch.zeros(2, 3), torch.tensor([True, False])
    assert final_obs_in({"final_observation": final, "_final_observation": mask}) == ("final_observation", final, mask)
    assert final_obs_in({"final_obs": final}) == ("final_obs", final, None)
    assert final_obs_in({"elapsed_steps": mask}) == ("", None, None)
    assert final_obs_in(None) == ("", None, None)


def test_missing_group_in_final_observation_is_a_clear_error():
    fake = FakeManiSkillVectorEnv(4, obs_mode="state_dict")
    step = fake.step

    def step_dropping_a_group(actions):
        out = step(actions)
        out[4].get("final_observation", {}).pop("extra", None)
        return out

    fake.step = step_dropping_a_group
    env = gpu_envs.wrap(fake)
    td = env.reset()
    with pytest.raises(gpu_envs.ObservationError, match="final_observation"):
        for _ in range(3):
            td["action"] = torch.zeros(4, 1)
            td, td = env.step_and_maybe_reset(td)


@pytest.mark.parametrize("withhold", [False, True], ids=["all_rows", "masked_rows"])
def test_no_host_sync_in_step_loop_and_rollout(withhold):
    env = gpu_envs.wrap(outside_sync_guard(FakeManiSkillVectorEnv(N, withhold=withhold)))
    action = torch.ones(N, 1)
    td = env.reset()
    td["action"] = action
    env.step_and_maybe_reset(td)  # first step: one-time validation
    with no_sync():
        td = env.root()
        for _ in range(100):
            td["action"] = action
            td, td = env.step_and_maybe_reset(td)
        traj = env.rollout(20, policy=lambda td: td.set("action", action), reset=False)
    expected = reference_rollout(N, np.ones((N, 121), dtype=np.float32), final_obs="masked" if withhold else "info")
    np.testing.assert_array_equal(traj["next", "observation"].numpy(), expected["next_observation"][:, 101:])
    np.testing.assert_array_equal(
        traj["next", "final_obs_missing"].squeeze(-1).numpy(), expected["final_obs_missing"][:, 101:]
    )
