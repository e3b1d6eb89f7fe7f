"""The Isaac Lab backend against a fake that mirrors Isaac Lab 3.0's contract exactly.

The fakes (``tests/isaac_fakes.py``) run the counting dynamics, so every transition is
checked against the sequential oracle (``tests.fakes.reference_rollout``), for the
direct and the manager-based env kind, with and without ``compute_final_obs``, bare
and behind gymnasium wrappers. The real Isaac Lab tier lives in ``tests/isaaclab/``.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.backends.isaaclab import IsaacLabBackend, is_isaaclab_env
from tests.fakes import CountingEnv, CountingTorchVectorEnv, reference_rollout
from tests.isaac_fakes import FakeIsaacDirectEnv, FakeIsaacManagerEnv, outside_sync_guard
from tests.sync_guard import no_sync

N, T = 6, 100
KINDS = {"direct": FakeIsaacDirectEnv, "manager": FakeIsaacManagerEnv}
FAKE_ID = "GpuEnvsTest/FakeIsaacDirect-v0"

if FAKE_ID not in gym.registry:
    # like Isaac Lab's own task registrations: gym.make wraps in OrderEnforcing only
    gym.register(FAKE_ID, entry_point=FakeIsaacDirectEnv, disable_env_checker=True)


def build(kind: str, final: bool, wrapped: bool = False, n: int = N, **kwargs):
    fake = KINDS[kind](n, compute_final_obs=final, **kwargs)
    return fake, (gym.wrappers.OrderEnforcing(fake) if wrapped else fake)


def actions_for(n: int, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, size=(n, steps)).astype(np.float32)


def run_steps(env, actions: np.ndarray):
    """Step with ``actions`` [N, T]; collect what the oracle knows, per key, as [N, T]."""
    got = {
        k: []
        for k in ("observation", "next_observation", "reward", "terminated", "truncated", "final_obs_missing", "root")
    }
    critic = []
    td = env.reset()
    for t in range(actions.shape[1]):
        td["action"] = torch.as_tensor(actions[:, t]).unsqueeze(-1)
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        got["observation"].append(td["policy"])
        got["next_observation"].append(nxt["policy"])
        got["reward"].append(nxt["reward"].squeeze(-1))
        got["terminated"].append(nxt["terminated"].squeeze(-1))
        got["truncated"].append(nxt["truncated"].squeeze(-1))
        got["final_obs_missing"].append(nxt["final_obs_missing"].squeeze(-1))
        got["root"].append(root["policy"])
        if ("critic", "counts") in nxt.keys(True, True):
            critic.append((nxt["critic", "counts"], nxt["policy"], nxt["critic", "progress"]))
        td = root
    return {k: torch.stack(v, dim=1).numpy() for k, v in got.items()}, critic


def assert_matches_oracle(got: dict, actions: np.ndarray, final: bool) -> None:
    expected = reference_rollout(actions.shape[0], actions, final_obs="info" if final else "none")
    for key, want in expected.items():
        if key == "action":
            continue
        np.testing.assert_array_equal(got[key], want.astype(got[key].dtype), err_msg=key)
    ended = expected["terminated"] | expected["truncated"]
    assert expected["terminated"].any() and expected["truncated"].any()
    assert (~ended).all(axis=0).any(), "a step where no env ends (extras['final_obs'] is stale there)"


# ----------------------------------------------------------------- detection
def test_detects_isaac_contract_without_importing_isaaclab():
    fake = FakeIsaacDirectEnv(2)
    assert is_isaaclab_env(fake)
    assert is_isaaclab_env(gym.wrappers.OrderEnforcing(fake))
    assert is_isaaclab_env(gym.make(FAKE_ID))
    assert not is_isaaclab_env(CountingTorchVectorEnv(2))
    assert not is_isaaclab_env(CountingEnv(0))
    assert not is_isaaclab_env(object())
    assert "isaaclab" not in sys.modules


def test_detects_classes_from_isaaclab_modules_through_wrappers():
    """Real Isaac Lab tasks subclass isaaclab.envs classes: the MRO's module names say so."""
    base = type(
        "DirectRLEnv", (FakeIsaacDirectEnv,), {"__module__": "isaaclab.envs.direct_rl_env", "gpu_envs_backend": None}
    )
    task = type("CartpoleEnv", (base,), {"__module__": "isaaclab_tasks.core.cartpole.cartpole_direct_env"})
    lookalike = type(
        "CartpoleEnv", (FakeIsaacDirectEnv,), {"__module__": "isaaclab_lookalike.envs", "gpu_envs_backend": None}
    )
    assert is_isaaclab_env(task(2))
    assert is_isaaclab_env(gym.wrappers.OrderEnforcing(task(2)))
    assert not is_isaaclab_env(lookalike(2))


def test_wrap_picks_the_isaaclab_backend_for_both_kinds_and_gym_make():
    for obj in (FakeIsaacDirectEnv(2), FakeIsaacManagerEnv(2), gym.make(FAKE_ID)):
        env = gpu_envs.wrap(obj)
        assert isinstance(env.backend, IsaacLabBackend)
        assert "isaaclab(" in repr(env)


def test_refuses_multi_agent_and_foreign_vecenv_wrappers():
    marl = type("DirectMARLEnv", (FakeIsaacDirectEnv,), {})
    with pytest.raises(gpu_envs.NotAnEnvError, match="multi_agent_to_single_agent"):
        gpu_envs.wrap(marl(2))

    class RslRlVecEnvWrapper:  # an RL library's wrapper: another step contract
        def __init__(self, env):
            self.env = env

        @property
        def unwrapped(self):
            return self.env

    with pytest.raises(gpu_envs.NotAnEnvError, match=r"wrapper\.unwrapped"):
        gpu_envs.wrap(RslRlVecEnvWrapper(FakeIsaacDirectEnv(2)))


# ------------------------------------------------------------------- specs
def test_specs_come_from_single_spaces_for_both_kinds():
    direct = gpu_envs.wrap(FakeIsaacDirectEnv(3, state=True))
    assert isinstance(direct.backend.base.observation_space, gym.spaces.Box)  # the quirk is real
    assert sorted(direct.observation_spec.keys()) == ["critic", "policy"]
    assert direct.single_observation_spec["policy"].shape == (3,)
    manager = gpu_envs.wrap(FakeIsaacManagerEnv(3))
    assert manager.observation_spec.keys(include_nested=True, leaves_only=True) == [
        "policy",
        ("critic", "counts"),
        ("critic", "progress"),
    ]
    for env in (direct, manager):
        assert env.single_action_spec.shape == (1,) and env.action_spec.dtype == torch.float32
        assert env.action_spec.shape == (3, 1) and env.action_spec.rand().shape == (3, 1)
        td = env.reset()
        assert td["policy"].shape == (3, 3) and td["policy"].dtype == torch.float32


def test_direct_env_state_group_becomes_a_key():
    env = gpu_envs.wrap(FakeIsaacDirectEnv(N, state=True, compute_final_obs=True))
    traj = env.rollout(12, policy=lambda td: td.set("action", torch.ones(N, 1)))
    torch.testing.assert_close(traj["next", "critic"], 2 * traj["next", "policy"])
    torch.testing.assert_close(traj["critic"], 2 * traj["policy"])


# ------------------------------------------------------------------ oracle
@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "gym-wrapped"])
@pytest.mark.parametrize("final", [True, False], ids=["compute_final_obs", "no_final_obs"])
@pytest.mark.parametrize("kind", ["direct", "manager"])
def test_transitions_match_sequential_reference(kind, final, wrapped):
    _, obj = build(kind, final, wrapped)
    env = gpu_envs.wrap(obj)
    actions = actions_for(N, T)
    got, critic = run_steps(env, actions)
    assert_matches_oracle(got, actions, final)
    for counts, policy, progress in critic:  # the manager's dict group travels the same way
        torch.testing.assert_close(counts, policy, equal_nan=True)
        torch.testing.assert_close(progress, policy[:, 2:] / 7, equal_nan=True)


@pytest.mark.parametrize("kind", ["direct", "manager"])
def test_rollout_matches_reference(kind):
    env = gpu_envs.wrap(build(kind, True)[1])
    traj = env.rollout(40, policy=lambda td: td.set("action", torch.ones(N, 1)))
    expected = reference_rollout(N, np.ones((N, 40), dtype=np.float32))
    assert traj.batch_size == torch.Size([N, 40])
    np.testing.assert_array_equal(traj["next", "policy"].numpy(), expected["next_observation"])
    np.testing.assert_array_equal(traj["policy"].numpy(), expected["observation"])
    np.testing.assert_array_equal(traj["next", "reward"].squeeze(-1).numpy(), expected["reward"].astype(np.float32))


def test_stale_final_obs_never_leaks_into_rows_that_did_not_end():
    fake = FakeIsaacDirectEnv(4, compute_final_obs=True)
    env = gpu_envs.wrap(fake)
    td = env.reset()
    stale_steps = 0
    previous = None
    for _ in range(40):
        td["action"] = torch.zeros(4, 1)
        td, root = env.step_and_maybe_reset(td)
        done = td["next", "done"].squeeze(-1)
        extras_final = fake.extras.get("final_obs", {}).get("policy")
        for row in range(4):
            if done[row]:  # written in this very step: the true final observation
                assert torch.equal(td["next", "policy"][row], extras_final[row])
                assert not torch.equal(root["policy"][row], extras_final[row])
            else:  # the env's observation, whatever extras still hold
                assert torch.equal(td["next", "policy"][row], fake.obs_buf["policy"][row])
        if extras_final is not None and extras_final is previous:  # not rewritten: stale
            stale_steps += 1
            assert not torch.equal(extras_final, fake.obs_buf["policy"])
        previous = extras_final
        td = root
    assert stale_steps > 0


# --------------------------------------------------- buffers rewritten in place
def test_fake_really_rewrites_its_buffers_in_place():
    fake = FakeIsaacManagerEnv(4, obs_in_place=True)
    fake.reset()
    obs, reward, terminated, _, _ = fake.step(torch.zeros(4, 1))
    kept = (obs["policy"].clone(), reward.clone(), terminated.clone())
    obs2, reward2, terminated2, _, _ = fake.step(torch.zeros(4, 1))
    assert obs2["policy"] is obs["policy"] and reward2 is reward and terminated2 is terminated
    assert not torch.equal(reward, kept[1]) and not torch.equal(obs["policy"], kept[0])


@pytest.mark.parametrize("kind", ["direct", "manager"])
def test_a_kept_transition_does_not_change_on_the_next_step(kind):
    env = gpu_envs.wrap(build(kind, True, obs_in_place=True)[1])
    td = env.reset()
    kept = []
    for t in range(12):
        td["action"] = torch.full((N, 1), float(t % 2))
        td, root = env.step_and_maybe_reset(td)
        kept.append((td, td.clone()))  # the transition as handed out, and a snapshot of it
        td = root
    for handed_out, snapshot in kept:
        assert (handed_out == snapshot).all(), "a transition changed after it was handed out"


@pytest.mark.parametrize(
    ("in_place", "copy_obs", "copies"), [(False, None, False), (True, None, True), (False, True, True)]
)
def test_observations_are_copied_when_the_task_rewrites_them(in_place, copy_obs, copies):
    """copy_obs=None: copies while the first calls decide, then only for a task that reuses its buffers."""
    fake = FakeIsaacDirectEnv(N, compute_final_obs=True, obs_in_place=in_place)
    env = gpu_envs.wrap(fake, copy_obs=copy_obs)
    td = env.reset()
    handed_out = []
    for _ in range(6):
        td["action"] = torch.zeros(N, 1)
        td, td = env.step_and_maybe_reset(td)
        handed_out.append(td["policy"] is fake.obs_buf["policy"])
    assert handed_out[:2] == [False, False]  # the deciding steps always hand out copies
    assert handed_out[2:] == [not copies] * 4


def test_copy_obs_false_hands_out_the_env_buffers():
    """The negative control: without copies, an in-place env corrupts kept observations."""
    env = gpu_envs.wrap(FakeIsaacDirectEnv(N, obs_in_place=True), copy_obs=False)
    td = env.reset()
    first = td["policy"].clone()
    td["action"] = torch.zeros(N, 1)
    env.step_and_maybe_reset(td)
    assert not torch.equal(td["policy"], first)


# ------------------------------------------------------------------- extras
def test_episode_log_is_reachable():
    fake = FakeIsaacManagerEnv(N)
    env = gpu_envs.wrap(fake)
    env.reset()
    env.rollout(3, reset=False)
    assert env.backend.episode_log is fake.extras["log"]
    assert env.backend.episode_log == {"Episode_Termination/time_out": 2}  # rows 0 and 3 truncate first
    direct = gpu_envs.wrap(FakeIsaacDirectEnv(N))
    direct.rollout(3)
    assert set(direct.backend.episode_log) == {"Metrics/success_rate"}
    assert direct.backend.extras is direct.backend.base.extras


# ------------------------------------------------------------- resets, seeds
def test_partial_reset_on_manager_env_resets_only_masked_rows():
    fake = FakeIsaacManagerEnv(4)
    env = gpu_envs.wrap(gym.wrappers.OrderEnforcing(fake))
    assert env.backend.capabilities.partial_reset
    td = env.reset()
    td["action"] = torch.zeros(4, 1)
    td, root = env.step_and_maybe_reset(td)
    mask = torch.tensor([True, False, True, False]).unsqueeze(-1)
    out = env.reset(td=root.set("_reset", mask))
    assert out["policy"][:, 1].tolist() == [1, 0, 1, 0]
    assert out["policy"][:, 2].tolist() == [0, 1, 0, 1]
    assert out["critic", "counts"][:, 2].tolist() == [0, 1, 0, 1]
    assert fake.episode_length_buf.tolist() == [0, 1, 0, 1]
    # a mask naming no row resets nothing and serves the current observations
    before = out["policy"].clone()
    out = env.reset(td=out.set("_reset", torch.zeros(4, 1, dtype=torch.bool)))
    assert torch.equal(out["policy"], before)
    assert fake.episode_length_buf.tolist() == [0, 1, 0, 1]


def test_partial_reset_on_direct_env_is_a_clear_error():
    env = gpu_envs.wrap(FakeIsaacDirectEnv(4))
    assert not env.backend.capabilities.partial_reset
    root = env.reset()
    with pytest.raises(gpu_envs.ResetMaskError, match="subset"):
        env.reset(td=root.set("_reset", torch.tensor([[True], [False], [False], [False]])))
    with pytest.raises(gpu_envs.ResetMaskError, match="env_ids"):
        env.backend.reset(mask=torch.tensor([True, False, False, False]))
    out = env.reset(td=TensorDict({"_reset": torch.ones(4, 1, dtype=torch.bool)}, batch_size=[4]))
    assert out["policy"][:, 1].tolist() == [1, 1, 1, 1]  # all rows: a full reset is fine


@pytest.mark.parametrize("kind", ["direct", "manager"])
def test_seed_reaches_the_env(kind):
    fake, obj = build(kind, False, wrapped=True)
    env = gpu_envs.wrap(obj)
    env.reset(seed=11)
    assert fake.last_seed == 11


# -------------------------------------------------------------- bad input
def test_env_on_another_device_is_a_clear_error():
    with pytest.raises(gpu_envs.DeviceMismatchError, match=r"cfg\.sim\.device"):
        gpu_envs.wrap(FakeIsaacDirectEnv(2), device="meta")  # a device this torch has, not the env's
    assert gpu_envs.wrap(FakeIsaacDirectEnv(2), device="cpu").device == torch.device("cpu")


@pytest.mark.parametrize("shape", [(N,), (N, 1, 1), (N, 2)])
def test_actions_with_wrong_dims_are_refused(shape):
    fake = FakeIsaacManagerEnv(N)
    env = gpu_envs.wrap(fake)
    td = env.reset()
    td["action"] = torch.zeros(shape)
    with pytest.raises(gpu_envs.ActionError, match="shape"):
        env.step(td)
    assert fake.steps == 0  # refused before reaching the simulator


@pytest.mark.parametrize("where", ["step", "final_obs"])
def test_observation_group_missing_at_step_time(where, monkeypatch):
    fake = FakeIsaacManagerEnv(4, compute_final_obs=True)
    env = gpu_envs.wrap(fake)
    td = env.reset()
    full = fake._get_observations
    if where == "step":
        monkeypatch.setattr(fake, "_get_observations", lambda: {"policy": full()["policy"]})
        match = r"observation without 'critic/counts'"
    else:  # the final observation (computed before the reset) lacks a group
        compute = fake._compute_observations  # called without arguments only for extras["final_obs"]
        monkeypatch.setattr(
            fake, "_compute_observations", lambda *a: compute(*a) if a else {"policy": full()["policy"]}
        )
        match = r"extras\['final_obs'\] without 'critic/counts'"
    with pytest.raises(gpu_envs.ObservationError, match=match):
        for _ in range(3):  # the final observation appears at step 3
            td["action"] = torch.zeros(4, 1)
            td, td = env.step_and_maybe_reset(td)


@pytest.mark.parametrize("output", ["reward", "flags"])
def test_a_step_output_of_the_wrong_size_is_a_clear_error(output, monkeypatch):
    """Rewards and flags go into the [N, 1] layout in the backend; a wrong size still gets BackendError."""
    fake = FakeIsaacDirectEnv(4)
    env = gpu_envs.wrap(fake)
    td = env.reset()
    step = fake.step

    def short_step(action):
        obs, reward, terminated, truncated, extras = step(action)
        if output == "reward":
            return obs, reward[:3], terminated, truncated, extras
        return obs, reward, terminated[:3], truncated[:3], extras

    monkeypatch.setattr(fake, "step", short_step)
    td["action"] = torch.zeros(4, 1)
    name = "reward" if output == "reward" else "terminated"
    with pytest.raises(gpu_envs.BackendError, match=rf"returned {name} .*expected 4 values"):
        env.step(td)


# --------------------------------------------------------------- no syncs
@pytest.mark.parametrize("final", [True, False], ids=["compute_final_obs", "no_final_obs"])
@pytest.mark.parametrize("kind", ["direct", "manager"])
def test_no_host_sync_in_step_loop_and_rollout(kind, final):
    fake, obj = build(kind, final, wrapped=True)
    outside_sync_guard(fake)
    env = gpu_envs.wrap(obj)
    td = env.reset()
    action = torch.ones(N, 1)
    td["action"] = action
    env.step_and_maybe_reset(td)  # the first step validates (once) outside the guard
    with no_sync():
        td = env.root()
        for _ in range(100):
            td["action"] = action
            td, td = env.step_and_maybe_reset(td)
        traj = env.rollout(20, policy=lambda td: td.set("action", action), reset=False)
    expected = reference_rollout(N, np.ones((N, 121), dtype=np.float32), final_obs="info" if final else "none")
    np.testing.assert_array_equal(traj["next", "policy"].numpy(), expected["next_observation"][:, 101:])


def test_close_closes_the_isaac_env():
    fake = FakeIsaacDirectEnv(2)
    with gpu_envs.wrap(gym.wrappers.OrderEnforcing(fake)) as env:
        env.rollout(2)
    assert fake._is_closed and env.is_closed
    with pytest.raises(gpu_envs.ClosedEnvError, match="was closed"):
        gpu_envs.wrap(fake)


def test_the_registry_keeps_isaac_lab_task_ids_from_the_gymnasium_backend():
    import gymnasium as gym

    from gpu_envs.registry import get_plugin, may_make, owner_of

    gym.register("GpuEnvsTest/IsaacLike-v0", entry_point="isaaclab_tasks.fake:Env")
    try:
        assert owner_of("GpuEnvsTest/IsaacLike-v0") == "isaaclab"
        assert not may_make(get_plugin("gymnasium"), "GpuEnvsTest/IsaacLike-v0")
        assert not may_make(get_plugin("ray"), "GpuEnvsTest/IsaacLike-v0")
        assert may_make(get_plugin("gymnasium"), "CartPole-v1") and owner_of("CartPole-v1") is None
        with pytest.raises(gpu_envs.UnknownEnvError, match="made by the isaaclab backend only"):
            gpu_envs.make("GpuEnvsTest/IsaacLike-v0", backend="gymnasium")
    finally:
        del gym.registry["GpuEnvsTest/IsaacLike-v0"]
