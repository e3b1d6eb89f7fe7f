"""Isaac Lab's multi-agent ``DirectMARLEnv`` through gpu_envs: the real cart + double pendulum task.

``Isaac-Pendulum-MARL-Direct`` (two agents: ``cart`` pushes the cart, ``pendulum``
drives the joint between the two links) runs on the CPU with the project's own USD
(``assets/Isaac/IsaacLab/Robots/Classic/CartDoublePendulum``). Its transitions are
checked against the same task built a second time with the same seed and stepped by
hand with the same actions (:func:`hand_run`), key by key: every agent's observation,
reward and flags, the state, and the final observations of the rows that ended; the
DESIGN.md checks of a real simulator follow (ending, reset, continuity). Agents that end
apart, and a task's own state, are ``test_marl_apart.py``'s.
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.backends.common import claim_simulator, release_simulator
from gpu_envs.backends.isaaclab_marl import IsaacLabMARLBackend
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.rollout import collect
from tests.env_spec_checks import assert_batched_and_single_specs_agree
from tests.isaac_fakes import outside_sync_guard
from tests.isaaclab.cartpoles import NUM_ENVS, adopt, close_live, pendulum_marl_cfg
from tests.isaaclab.marl_tasks import AGENTS, ID, SEED, STEPS, actions, clone, group_actions, pendulum_env
from tests.sync_guard import no_sync

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")  # Isaac Lab's own

MAX_CART_POS = 3.0
RESET_ANGLE = 0.25 * math.pi  # both joint angles are drawn in [-0.25 pi, 0.25 pi]; the cart starts at rest at 0


@pytest.fixture(scope="module")
def hand_run() -> dict:
    """The task built once more (same seed), stepped by hand: Isaac Lab's own outputs, cloned, step by step."""
    close_live()
    env = pendulum_env(pendulum_marl_cfg(compute_final_obs=True))
    try:
        obs, _ = env.reset(seed=SEED)
        run: dict = {"obs": [clone(obs)], "state": [env.state().clone()], "steps": []}
        for t in range(STEPS):
            obs, reward, terminated, truncated, extras = env.step(actions(t))
            final = {agent: extras[agent]["final_obs"].clone() for agent in AGENTS if "final_obs" in extras[agent]}
            run["steps"].append(
                {
                    "reward": clone(reward),
                    "terminated": clone(terminated),
                    "truncated": clone(truncated),
                    "final": final,
                    "reset": env.episode_length_buf.eq(0),  # the rows Isaac Lab reset in this step
                }
            )
            run["obs"].append(clone(obs))
            run["state"].append(env.state().clone())
        run["max_episode_length"] = env.max_episode_length
    finally:
        env.close()
    return run


CASES = {
    # the DirectMARLEnv subclass itself, with final observations
    "final_obs": lambda: gpu_envs.wrap(pendulum_env(pendulum_marl_cfg(compute_final_obs=True)), device="cpu"),
    # gpu_envs.make through Isaac Lab's gym registry (gym.make: OrderEnforcing around it), without final observations
    "no_final_obs": lambda: gpu_envs.make(
        ID, num_envs=NUM_ENVS, device="cpu", backend="isaaclab", cfg=pendulum_marl_cfg()
    ),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, hand_run):
    env = adopt(CASES[request.param])
    yield request.param, env
    close_live()


# ------------------------------------------------------------------ checks against the hand run
def check_step(td: TensorDict, root: TensorDict, run: dict, t: int, with_final: bool) -> None:
    """One transition (``td`` from step ``t``) and the next root against the hand run, key by key."""
    step, nxt = run["steps"][t], td["next"]
    terminated = torch.stack([step["terminated"][a] for a in AGENTS], 1)
    truncated = torch.stack([step["truncated"][a] for a in AGENTS], 1)
    env_done = terminated.all(1) | truncated.all(1)  # Isaac Lab's rule
    done = nxt["done"].view(-1)
    assert torch.equal(done, env_done) and torch.equal(done, step["reset"]), t
    assert torch.equal(nxt["terminated"].view(-1), terminated.all(1))
    assert torch.equal(nxt["truncated"].view(-1), truncated.all(1))
    team = torch.zeros(NUM_ENVS)
    for i, agent in enumerate(AGENTS):
        assert torch.equal(td[agent, "observation"][:, 0], run["obs"][t][agent]), (t, agent)  # the root acted on
        assert torch.equal(nxt[agent, "reward"].view(-1), step["reward"][agent]), (t, agent)
        assert torch.equal(nxt[agent, "terminated"].view(-1), terminated[:, i])
        assert torch.equal(nxt[agent, "truncated"].view(-1), truncated[:, i])
        assert torch.equal(nxt[agent, "done"].view(-1), terminated[:, i] | truncated[:, i])
        team += step["reward"][agent]
        # physics: rows that did not end are the task's own next observation
        assert torch.equal(nxt[agent, "observation"][~done, 0], run["obs"][t + 1][agent][~done]), (t, agent)
        # the next root: post-reset where done
        assert torch.equal(root[agent, "observation"][:, 0], run["obs"][t + 1][agent]), (t, agent)
    torch.testing.assert_close(nxt["reward"].view(-1), team, rtol=0, atol=1e-6)
    assert torch.equal(nxt["state"][~done], run["state"][t + 1][~done]) and torch.equal(
        root["state"], run["state"][t + 1]
    )
    missing = nxt["final_obs_missing"].view(-1)
    for agent in AGENTS:
        assert torch.equal(nxt[agent, "final_obs_missing"].view(-1), missing)
    if with_final:
        assert not missing.any()
        if done.any():
            finals = [step["final"][agent] for agent in AGENTS]
            for agent, final in zip(AGENTS, finals, strict=True):
                assert torch.equal(nxt[agent, "observation"][done, 0], final[done]), (t, agent)
            assert torch.equal(nxt["state"][done], torch.cat(finals, -1)[done])  # state() of the final observations
    else:
        assert torch.equal(missing, done)
        assert nxt["state"][done].isnan().all() and not nxt["state"][~done].isnan().any()
        for agent in AGENTS:
            assert nxt[agent, "observation"][done].isnan().all()


def check_ending_reset_continuity(td: TensorDict, root: TensorDict, lengths: torch.Tensor, run: dict) -> None:
    """DESIGN.md's checks of a real simulator on the rows that ended in ``td``'s step (``lengths``: their steps)."""
    nxt = td["next"]
    done = nxt["done"].view(-1)
    cart_final = nxt["cart", "observation"][:, 0]  # cart position, cart velocity, pole angle, pole velocity
    left = (cart_final[:, 0].abs() > MAX_CART_POS) | (cart_final[:, 2].abs() > math.pi / 2)
    terminated = nxt["terminated"].view(-1)
    truncated = nxt["truncated"].view(-1)
    assert left[terminated].all(), "every terminated row's final observation left the track or fell"
    assert lengths[truncated].eq(run["max_episode_length"] - 1).all(), "time-outs end at the time limit"
    assert not (left & ~terminated & done).any()
    # reset: the new root lies in the reset distribution
    cart, pend = root["cart", "observation"][done, 0], root["pendulum", "observation"][done, 0]
    assert cart[:, [0, 1, 3]].eq(0).all() and (cart[:, 2].abs() <= RESET_ANGLE + 1e-6).all()
    assert (pend[:, 1].abs() <= RESET_ANGLE + 1e-6).all() and pend[:, 2].eq(0).all()
    # continuity: the final observation is one control step from the previous one, the reset one is not
    prev = td["cart", "observation"][done, 0]
    assert ((cart_final[done] - prev).norm(dim=-1) < (cart - prev).norm(dim=-1)).all()


def test_groups_specs_and_keys(case):
    _, env = case
    assert isinstance(env.backend, IsaacLabMARLBackend) and "isaaclab(PendulumMARLEnv" in repr(env)
    # the agents' specs differ (4 and 3 observations): a group each
    assert env.group_map == {"cart": ["cart"], "pendulum": ["pendulum"]}
    assert env.single_observation_spec["cart", "observation"].shape == (1, 4)
    assert env.single_observation_spec["pendulum", "observation"].shape == (1, 3)
    assert env.single_observation_spec["state"].shape == (7,)  # state_space = -1: both observations
    assert env.full_action_spec["cart", "action"].shape == (NUM_ENVS, 1, 1)
    assert env.full_reward_spec["pendulum", "reward"].shape == (NUM_ENVS, 1, 1)
    assert env.backend.capabilities.partial_reset is False
    assert_batched_and_single_specs_agree(env)
    td = env.reset(seed=0)
    assert set(td.keys()) == {"cart", "pendulum", "state", "done", "terminated", "truncated"}
    td.update(env.full_action_spec.rand())
    td, _ = env.step_and_maybe_reset(td)
    assert td["next", "cart", "reward"].shape == (NUM_ENVS, 1, 1) and td["next", "reward"].shape == (NUM_ENVS, 1)
    assert env.observation_spec.contains(td["next"].select(*env.observation_spec.keys(True, True)))


def test_transitions_equal_the_task_stepped_by_hand(case, hand_run):
    name, env = case
    with_final = name == "final_obs"
    assert env.backend.capabilities.final_obs is (FinalObsKind.SIMULATOR if with_final else FinalObsKind.PLACEHOLDER)
    root = env.reset(seed=SEED)
    lengths = torch.zeros(NUM_ENVS, dtype=torch.long)
    seen = {"terminated": 0, "truncated": 0}
    for t in range(STEPS):
        root.update(group_actions(t))
        td, root = env.step_and_maybe_reset(root)
        lengths += 1
        check_step(td, root, hand_run, t, with_final)
        if with_final:
            check_ending_reset_continuity(td, root, lengths, hand_run)
        seen["terminated"] += int(td["next", "terminated"].sum())
        seen["truncated"] += int(td["next", "truncated"].sum())
        lengths[td["next", "done"].view(-1)] = 0
    assert seen["terminated"] > 0 and seen["truncated"] > 0, seen


def test_collect_equals_the_task_stepped_by_hand(case, hand_run):
    name, env = case
    env.reset(seed=SEED)
    steps = iter(range(STEPS))
    traj = collect(env, lambda td: td.update(group_actions(next(steps))), steps=STEPS)
    assert traj.batch_size == (NUM_ENVS, STEPS)
    for t in range(STEPS):
        root = traj[:, t + 1] if t + 1 < STEPS else env.root()
        check_step(traj[:, t], root, hand_run, t, name == "final_obs")


def test_masked_resets_reset_all_rows_or_none(case):
    _, env = case
    td = env.reset(seed=3)
    for t in range(3):
        td, td = env.step_and_maybe_reset(td.update(group_actions(t)))
    before = td.clone()
    none = env.reset(td=TensorDict({"_reset": torch.zeros(NUM_ENVS, 1, dtype=torch.bool)}, [NUM_ENVS]))
    assert torch.equal(none["state"], before["state"])  # nothing reset
    some = torch.zeros(NUM_ENVS, 1, dtype=torch.bool)
    some[:4] = True
    with pytest.raises(gpu_envs.ResetMaskError, match="cannot reset a subset"):
        env.reset(td=TensorDict({"_reset": some}, [NUM_ENVS]))
    every = env.reset(td=TensorDict({"_reset": torch.ones(NUM_ENVS, 1, dtype=torch.bool)}, [NUM_ENVS]))
    assert env.backend.base.episode_length_buf.eq(0).all()
    assert every["cart", "observation"][:, 0, [0, 1, 3]].eq(0).all()
    assert not torch.equal(every["state"], before["state"])


def test_check_env_passes(case):
    _, env = case
    report = gpu_envs.check_env(env, steps=60, seed=0)
    assert report.ok, report.format()


def test_options_and_bad_input(case):
    _, env = case
    isaac = env.backend.env
    with pytest.raises(gpu_envs.SpecError, match="specs differ"):  # one group for agents whose specs differ
        gpu_envs.wrap(isaac, group_map={"team": ["cart", "pendulum"]})
    with pytest.raises(gpu_envs.SpecError, match="the key of the env's state"):
        gpu_envs.wrap(isaac, group_map={"state": ["cart"], "pendulum": ["pendulum"]})
    with pytest.raises(gpu_envs.InvalidArgumentError, match="copy_obs"):
        gpu_envs.wrap(isaac, copy_obs=True)
    with pytest.raises(gpu_envs.DeviceMismatchError, match=r"cfg\.sim\.device"):
        gpu_envs.wrap(isaac, device="meta")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven by another BatchedEnv"):
        gpu_envs.wrap(isaac)
    # state=False: no state key, and the agents' final observations stay exact where Isaac Lab gives them
    release_simulator(env.backend)
    try:
        bare = IsaacLabMARLBackend(isaac, state=False)
        assert list(bare.observation_spec.keys()) == ["cart", "pendulum"]
        assert bare.capabilities.final_obs is env.backend.capabilities.final_obs
        release_simulator(bare)
    finally:
        claim_simulator(env.backend.base, env.backend)
    with pytest.raises(gpu_envs.SnapshotError, match="DirectMARLEnv has no reset_to"):
        env.get_state(torch.tensor([0]))
    td = env.reset()
    td.update(group_actions(0))
    del td["pendulum", "action"]
    with pytest.raises(gpu_envs.ActionError):
        env.step(td)


def test_no_host_sync_around_the_simulator(case, hand_run):
    """What gpu_envs adds around Isaac Lab's own step (which syncs itself) reads no value on the host."""
    name, env = case
    outside_sync_guard(env.backend.env, "step", "reset")
    outside_sync_guard(env.backend.base, "state")
    root = env.reset(seed=SEED)
    env.step_and_maybe_reset(root.update(group_actions(0)))  # the first step validates (once) outside the guard
    steps = []
    with no_sync():
        root = env.reset(seed=SEED)
        for t in range(STEPS):
            td, root = env.step_and_maybe_reset(root.update(group_actions(t)))
            steps.append((td, root))
    for t, (td, root) in enumerate(steps):  # (the checks read values: outside the guard)
        check_step(td, root, hand_run, t, name == "final_obs")


def test_episode_log_and_close(case):
    _, env = case
    env.reset(seed=0)
    steps = iter(range(STEPS))
    collect(env, lambda td: td.update(group_actions(next(steps))), steps=STEPS)
    assert "Metrics/success_rate" in env.backend.episode_log  # the pendulum task's, written on resets
    base = env.backend.base
    env.close()
    assert env.is_closed and base._is_closed
    with pytest.raises(gpu_envs.ClosedEnvError):
        env.reset()
    with pytest.raises(gpu_envs.ClosedEnvError):
        gpu_envs.wrap(base)
