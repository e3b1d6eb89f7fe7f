"""Real Isaac Lab 3.0.0 cartpoles (direct and manager-based, with and without
``compute_final_obs``) through ``gpu_envs``: specs, keys, exact final observations,
placeholders, seeding, rollouts, partial resets, bad input, ``close``.

One env per case (module-scoped; Isaac Lab runs one simulation per process), 16 envs,
a few hundred steps per case. Even rows are pushed hard (+20 x 100 N) so that they leave
the track (terminate); the others wait for the 0.5 s time-out (truncate).
"""

from __future__ import annotations

import math
import time

import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.backends.isaaclab import IsaacLabBackend
from tests.env_spec_checks import assert_batched_and_single_specs_agree, assert_torchrl_action_idiom_steps
from tests.isaaclab.cartpoles import CASES, NUM_ENVS, build, close_live

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")  # Isaac Lab's own

MAX_CART_POS = 3.0  # both cartpoles terminate when |cart position| > 3 m
RESET_CART_RANGE = 1.0  # and reset it uniformly in [-1, 1] m


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    env = build(request.param)
    yield request.param, env
    close_live()


def push(n: int = NUM_ENVS) -> torch.Tensor:
    action = torch.zeros(n, 1)
    action[::2] = 20.0
    return action


def test_specs_and_keys(case):
    name, env = case
    assert isinstance(env.backend, IsaacLabBackend)
    assert env.device == torch.device("cpu") and env.num_envs == NUM_ENVS
    assert env.observation_spec.keys(include_nested=True, leaves_only=True) == ["policy"]
    assert env.single_observation_spec["policy"].shape == (4,) and env.observation_spec["policy"].dtype == torch.float32
    assert env.single_action_spec.shape == (1,) and env.action_spec.dtype == torch.float32
    td = env.reset(seed=0)
    assert set(td.keys()) == {"policy", "done", "terminated", "truncated"}
    assert td["policy"].shape == (NUM_ENVS, 4) and td["done"].shape == (NUM_ENVS, 1)
    assert env.backend.capabilities.partial_reset == name.startswith("manager")
    # torchrl's convention: the env's specs carry the batch dims, env.single_* do not
    assert env.action_spec.shape == (NUM_ENVS, 1) and env.observation_spec["policy"].shape == (NUM_ENVS, 4)
    assert_batched_and_single_specs_agree(env)
    assert_torchrl_action_idiom_steps(env)


def test_step_and_maybe_reset_gives_final_or_placeholder_obs(case):
    name, env = case
    with_final = name.endswith("-final_obs")
    backend = env.backend
    td = env.reset(seed=1)
    seen = {"terminated": 0, "truncated": 0, "quiet": 0}
    for _ in range(70):
        td["action"] = push()
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        done = nxt["done"].squeeze(-1)
        terminated = nxt["terminated"].squeeze(-1)
        seen["terminated"] += int(terminated.sum())
        seen["truncated"] += int(nxt["truncated"].sum())
        seen["quiet"] += int(not done.any())
        isaac_obs = backend.base.obs_buf["policy"]  # what Isaac Lab returned: post-reset on done rows
        assert torch.equal(root["policy"], isaac_obs)
        assert torch.equal(nxt["policy"][~done], isaac_obs[~done])
        assert (root["policy"][done, 0].abs() <= RESET_CART_RANGE).all()
        assert not root["done"].any()
        if with_final:
            assert not nxt["final_obs_missing"].any()
            if done.any():
                final = backend.extras["final_obs"]["policy"]
                assert torch.equal(nxt["policy"][done], final[done])
                assert (nxt["policy"][terminated, 0].abs() > MAX_CART_POS).all(), "terminated rows left the track"
        else:
            assert torch.equal(nxt["final_obs_missing"].squeeze(-1), done)
            assert nxt["policy"][done].isnan().all()
            assert not nxt["policy"][~done].isnan().any()
        td = root
    assert seen["terminated"] > 0 and seen["truncated"] > 0 and seen["quiet"] > 0, seen


def test_in_place_buffers_are_copied(case):
    """Isaac Lab rewrites reward/terminated/truncated in place: kept transitions must not change."""
    _, env = case
    td = env.reset(seed=2)
    kept = []
    for _ in range(40):
        td["action"] = push()
        td, root = env.step_and_maybe_reset(td)
        kept.append((td, td.clone()))
        td = root
    assert any(handed_out["next", "done"].any() for handed_out, _ in kept)
    # the reward and flags are copied on every step; the observations only if the task
    # rewrote them during the first calls: both cartpoles return fresh ones
    assert env.backend.copy_obs is False and env.backend._reuse is None
    for handed_out, snapshot in kept:  # exactly equal, placeholders (NaN) included
        for key in snapshot.keys(include_nested=True, leaves_only=True):
            torch.testing.assert_close(handed_out[key], snapshot[key], rtol=0, atol=0, equal_nan=True, msg=str(key))


def test_seeding_makes_resets_and_steps_reproducible(case):
    _, env = case
    runs = []
    for seed in (5, 5, 6):
        td = env.reset(seed=seed)
        start = td["policy"].clone()
        for _ in range(3):
            td["action"] = push()
            td, td = env.step_and_maybe_reset(td)
        runs.append((start, td["policy"].clone()))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert not torch.equal(runs[0][0], runs[2][0])


def test_rollout(case):
    _, env = case
    traj = env.rollout(30, policy=lambda td: td.set("action", push()))
    assert traj.batch_size == torch.Size([NUM_ENVS, 30])
    assert traj["next", "reward"].shape == (NUM_ENVS, 30, 1) and traj["next", "reward"].isfinite().all()
    assert torch.equal(traj["next", "done"], traj["next", "terminated"] | traj["next", "truncated"])
    assert traj["next", "done"].any()
    # the root of step t+1 is the observation of step t+1 where nothing ended
    ended = traj["next", "done"][:, :-1].squeeze(-1)
    assert torch.equal(traj["policy"][:, 1:][~ended], traj["next", "policy"][:, :-1][~ended])
    more = env.rollout(5, policy=lambda td: td.set("action", push()), reset=False)
    assert more.batch_size == torch.Size([NUM_ENVS, 5])


def test_episode_log_is_reachable(case):
    name, env = case
    env.rollout(35, policy=lambda td: td.set("action", push()))  # past the first time-out
    log = env.backend.episode_log
    assert log is env.backend.base.extras["log"]
    if name.startswith("direct"):
        assert "Metrics/success_rate" in log
    else:
        assert any(key.startswith("Episode_Reward/") for key in log)


def test_partial_reset(case):
    name, env = case
    td = env.reset(seed=3)
    for _ in range(4):
        td["action"] = torch.zeros(NUM_ENVS, 1)
        td, td = env.step_and_maybe_reset(td)
    mask = torch.zeros(NUM_ENVS, 1, dtype=torch.bool)
    mask[:4] = True
    if name.startswith("direct"):
        with pytest.raises(gpu_envs.ResetMaskError):
            env.reset(td=TensorDict({"_reset": mask}, batch_size=[NUM_ENVS]))
        return
    before = td["policy"].clone()
    lengths = env.backend.base.episode_length_buf.clone()
    out = env.reset(td=TensorDict({"_reset": mask}, batch_size=[NUM_ENVS]))
    assert env.backend.base.episode_length_buf[:4].eq(0).all()
    assert torch.equal(env.backend.base.episode_length_buf[4:], lengths[4:])
    assert torch.equal(out["policy"][4:], before[4:])
    assert not torch.equal(out["policy"][:4], before[:4])


def test_bad_input(case):
    _, env = case
    with pytest.raises(gpu_envs.DeviceMismatchError, match=r"cfg\.sim\.device"):
        gpu_envs.wrap(env.backend.env, device="meta")  # a device this torch has, not the simulation's
    with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven by another BatchedEnv"):
        gpu_envs.wrap(env.backend.env)  # the same live simulation behind a second BatchedEnv
    td = env.reset()
    for shape in ((NUM_ENVS,), (NUM_ENVS, 1, 1)):
        td["action"] = torch.zeros(shape)
        with pytest.raises(gpu_envs.ActionError, match="shape"):
            env.step(td)


def test_throughput_through_the_wrapper(case, capsys):
    """Isaac Lab's own cartpole, a few hundred steps through gpu_envs: env-steps/s (recorded, not asserted)."""
    name, env = case
    action = torch.zeros(NUM_ENVS, 1)
    td = env.reset(seed=0)
    start = time.perf_counter()
    steps = 150
    for _ in range(steps):
        td["action"] = action
        td, td = env.step_and_maybe_reset(td)
    rate = steps * NUM_ENVS / (time.perf_counter() - start)
    assert math.isfinite(rate) and td["policy"].isfinite().all()
    with capsys.disabled():
        print(f"\n[isaaclab] cartpole {name} via gpu_envs, {NUM_ENVS} envs on cpu: {rate:,.0f} env-steps/s")


def test_close(case):
    _, env = case
    base = env.backend.base
    env.close()
    assert env.is_closed and base._is_closed
    with pytest.raises(gpu_envs.ClosedEnvError):
        env.reset()
