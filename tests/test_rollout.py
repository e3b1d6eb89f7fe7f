"""collect() and RolloutBuffer: oracle-exact transitions, episodes carried across calls, in place."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError, RolloutError
from gpu_envs.rollout import DEFAULT_STEPS, RolloutBuffer, collect
from tests.fakes import CountingTorchVectorEnv, assert_trajectory_matches, reference_rollout
from tests.sync_guard import no_sync

N = 5


class ScriptedPolicy:
    """Plays a fixed [N, T] action table, one column per call."""

    def __init__(self, actions: np.ndarray) -> None:
        self.actions = torch.as_tensor(actions)
        self.t = 0

    def __call__(self, td):
        td["action"] = self.actions[:, self.t]
        self.t += 1
        return td


@pytest.mark.parametrize("final_obs", ["info", "masked", "none"])
def test_collections_continue_episodes_and_match_the_oracle(final_obs):
    steps, calls = 9, 4
    actions = np.random.default_rng(1).integers(0, 2, size=(N, steps * calls))
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs=final_obs))
    policy = ScriptedPolicy(actions)
    parts = [collect(env, policy, steps=steps).clone() for _ in range(calls)]
    traj = torch.cat(parts, dim=1)
    assert_trajectory_matches(traj, reference_rollout(N, actions, final_obs=final_obs))
    assert not traj["done"].any()
    # episodes crossed the collection boundaries (an episode ran over from one call to the next)
    step_in_episode = traj["observation"][:, :, 2]
    assert (step_in_episode[:, steps::steps] > 0).any()


def test_buffer_is_written_in_place_and_cached_per_steps():
    env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
    first = collect(env, steps=6)
    ptrs = {k: first[k].data_ptr() for k in first.keys(True, True)}
    snapshot = first.clone()
    second = collect(env, steps=6)
    assert second is first  # the same TensorDict, overwritten
    assert {k: second[k].data_ptr() for k in second.keys(True, True)} == ptrs
    assert not torch.equal(snapshot["observation"], second["observation"])
    # episodes continue: the second collection starts where the first one ended
    ended = snapshot["next", "done"][:, -1, 0]
    assert torch.equal(second["observation"][:, 0][~ended], snapshot["next", "observation"][:, -1][~ended])
    assert collect(env, steps=4) is not first and collect(env, steps=4).batch_size == (8, 4)
    assert collect(env).batch_size == (8, DEFAULT_STEPS)


def test_explicit_buffer_and_its_layout():
    env = gpu_envs.make("Pendulum-v1", num_envs=3, device="cpu", seed=0)
    buf = RolloutBuffer(env, 7)
    assert not buf.bound
    # preallocated from the specs, before any step
    assert buf.data["observation"].shape == (3, 7, 3) and buf.data["next", "reward"].shape == (3, 7, 1)
    assert buf.data["action"].shape == (3, 7, 1) and buf.data["next", "final_obs_missing"].dtype == torch.bool
    traj = collect(env, buffer=buf)
    assert traj is buf.data and buf.bound
    assert set(traj.keys(True, True)) == set(env.rollout(2).keys(True, True))
    with pytest.raises(InvalidArgumentError, match="steps=5 but the buffer holds 7"):
        collect(env, steps=5, buffer=buf)
    other = gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu")
    with pytest.raises(InvalidArgumentError, match=r"the env has batch size \(4,\)"):
        collect(other, buffer=buf)


def test_env_that_was_never_reset_is_reset_and_a_reset_env_is_not():
    env = gpu_envs.wrap(CountingTorchVectorEnv(3))
    traj = collect(env, steps=2)  # never reset: collect resets it
    assert traj["observation"][:, 0, 2].tolist() == [0, 0, 0]
    td = env.reset()
    td["action"] = torch.zeros(3, dtype=torch.long)
    _, root = env.step_and_maybe_reset(td)
    traj = collect(env, steps=2)  # reset and stepped by hand: collect continues from the root
    assert torch.equal(traj["observation"][:, 0], root["observation"])
    assert traj["observation"][:, 0, 2].tolist() == [1, 1, 1]


def test_tensordict_module_policy_and_extra_keys():
    torch.manual_seed(0)
    env = gpu_envs.make("CartPole-v1", num_envs=16, device="cpu", seed=1)
    net = torch.nn.Linear(4, 2)
    policy = TensorDictSequential(
        TensorDictModule(net, in_keys=["observation"], out_keys=["logits"]),
        TensorDictModule(lambda logits: logits.argmax(-1), in_keys=["logits"], out_keys=["action"]),
    )
    with torch.no_grad():
        traj = collect(env, policy, steps=12)
        assert traj["logits"].shape == (16, 12, 2)
        torch.testing.assert_close(traj["logits"], net(traj["observation"]))
        assert torch.equal(traj["action"], traj["logits"].argmax(-1))


def test_policy_none_is_reproducible_with_the_env_seed():
    def run(seed):
        env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=seed)
        return torch.cat([collect(env, steps=20).clone() for _ in range(2)], dim=1)

    a, b, c = run(2), run(2), run(3)
    assert (a == b).all()
    assert not torch.equal(a["action"], c["action"])


def test_rollout_returns_fresh_tensordicts():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    a = env.rollout(5)
    kept = a.clone()
    b = env.rollout(5, reset=False)
    assert (a == kept).all() and a is not b
    assert torch.equal(
        b["observation"][:, 0][~a["next", "done"][:, -1, 0]],
        a["next", "observation"][:, -1][~a["next", "done"][:, -1, 0]],
    )


def test_collect_never_syncs_after_the_first_step():
    env = gpu_envs.make("CartPole-v1", num_envs=16, device="cpu", seed=0)
    collect(env, steps=4)  # the env's first step validates (allowed to sync) and binds the buffer
    with no_sync():
        for _ in range(3):
            traj = collect(env, steps=40)
    assert traj["next", "done"].any()


def test_bad_policies_and_changing_layouts_are_clear_errors():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    with pytest.raises(RolloutError, match="the policy returned a Tensor"):
        collect(env, lambda td: torch.zeros(4, dtype=torch.long), steps=3)

    state = {"extra": False}

    def policy(td):
        td["action"] = torch.zeros(4, dtype=torch.long)
        if state["extra"]:
            td["logits"] = torch.zeros(4, 2)
        return td

    buf = RolloutBuffer(env, 3)
    collect(env, policy, buffer=buf)
    state["extra"] = True
    with pytest.raises(RolloutError, match=r"keys \[\('logits',\)\] that this RolloutBuffer was not laid out for"):
        collect(env, policy, buffer=buf)

    def wrong_shape(td):
        td["action"] = torch.zeros(4, dtype=torch.long)
        td["score"] = torch.zeros(4, 2 if wrong_shape.calls else 1)
        wrong_shape.calls += 1
        return td

    wrong_shape.calls = 0
    with pytest.raises(
        RolloutError, match=r"'score' is \(4, 2\) torch.float32, but this RolloutBuffer was laid out for \(4, 1\)"
    ):
        collect(env, wrong_shape, buffer=RolloutBuffer(env, 3))

    def wrong_dtype(td):  # from the third step on: a dtype the buffer would silently cast to
        td["action"] = torch.zeros(4, dtype=torch.long)
        td["score"] = torch.zeros(4, 1, dtype=torch.float64 if wrong_dtype.calls >= 2 else torch.float32)
        wrong_dtype.calls += 1
        return td

    wrong_dtype.calls = 0
    with pytest.raises(RolloutError, match=r"'score' is \(4, 1\) torch.float64, but this RolloutBuffer was laid out"):
        collect(env, wrong_dtype, buffer=RolloutBuffer(env, 6))
    with pytest.raises(InvalidArgumentError, match="steps must be an int >= 1"):
        collect(env, steps=0)
    with pytest.raises(InvalidArgumentError, match="buffer must be a RolloutBuffer"):
        collect(env, buffer=TensorDict({}, batch_size=[4, 3]))


def test_memory_does_not_grow_over_many_collections():
    env = gpu_envs.make("CartPole-v1", num_envs=32, device="cpu", seed=0)
    traj = collect(env, steps=4)
    storages = {k: traj[k].untyped_storage().data_ptr() for k in traj.keys(True, True)}
    for _ in range(200):
        traj = collect(env, steps=4)
    assert {k: traj[k].untyped_storage().data_ptr() for k in traj.keys(True, True)} == storages
    assert len(env.caches["collect"].buffers) == 1


def test_collect_through_a_transformed_env():
    from gpu_envs.transforms import EpisodeStats, TransformedEnv

    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=16, device="cpu", seed=0), EpisodeStats())
    traj = torch.cat([collect(env, steps=30).clone() for _ in range(3)], dim=1)
    done = traj["next", "done"].squeeze(-1)
    assert done.any()
    # the transform's outputs are recorded too; CartPole pays 1 per step, so return == length
    ret, length = traj["next", "episode_return"].squeeze(-1), traj["next", "episode_length"].squeeze(-1)
    assert torch.equal(ret[done].float(), length[done].float()) and (length[done] > 0).all()
