"""Health checks without a host sync (gpu_envs.core.health): bad values flagged on the
device, raised as HealthCheckError where the host looks anyway, naming rows, step, value.

Every test runs twice (the ``first_look`` fixture): with the C library of
``gpu_envs.core.health_look`` (what a CPU with a compiler runs) and with
``GPU_ENVS_NATIVE=0`` (the numpy first look of a collection's buffer, and no per-step look).
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs import HealthCheckError
from gpu_envs.rollout import collect
from gpu_envs.transforms import EpisodeStats, TransformedEnv
from tests.fakes import CountingTorchVectorEnv
from tests.sync_guard import no_sync

N = 6


@pytest.fixture(autouse=True, params=["c", "numpy"])
def first_look(request, monkeypatch):
    if request.param == "numpy":
        monkeypatch.setenv("GPU_ENVS_NATIVE", "0")
    return request.param


NAN_OBS_ROW, NAN_OBS_STEP = 2, 5  # the observation of row 2 goes NaN at its 6th step (index 5)
NAN_REWARD_ROW, NAN_REWARD_STEP = 4, 3


class NaNTorchEnv(CountingTorchVectorEnv):
    """A user's torch vector env: a NaN observation on one row, an inf reward on another, from chosen steps on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        row = torch.arange(self.num_envs, device=self.device)
        if self.steps >= NAN_OBS_STEP:
            bad = (row == NAN_OBS_ROW)[:, None]
            ended = (terminated | truncated)[:, None]
            obs = torch.where(bad & ~ended, math.nan, obs)  # a row that ended starts afresh
            if "final_obs" in info:
                info["final_obs"] = torch.where(bad, math.nan, info["final_obs"])
        if self.steps >= NAN_REWARD_STEP:
            reward = torch.where(row == NAN_REWARD_ROW, math.inf, reward)
        self.steps += 1
        return obs, reward, terminated, truncated, info


def _nan_torque(rows):
    def policy(td):
        action = torch.zeros(td.batch_size[0], 1)
        action[rows] = math.nan
        td["action"] = action
        return td

    return policy


def test_nan_torque_on_pendulum_is_raised_at_the_end_of_collect_naming_rows_step_value():
    env = gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=0)
    with pytest.raises(HealthCheckError) as err:
        collect(env, _nan_torque([1, 3]), steps=8)
    assert err.value.rows == [1, 3]
    assert err.value.steps == [0, 0]
    assert all(math.isnan(v) for v in err.value.values)
    message = str(err.value)
    assert "row 1: action nan not finite at step 0" in message and "row 3" in message
    assert "end of collect()" in message and "policy" in message  # where, and the fix
    assert isinstance(err.value, ValueError) and isinstance(err.value, gpu_envs.GpuEnvsError)
    # usable after: the flags were cleared; a reset gives the NaN rows a finite state again
    env.reset()
    traj = collect(env, steps=8)
    assert torch.isfinite(traj["next", "observation"]).all()


def test_a_row_that_keeps_a_nan_state_is_raised_again_until_it_is_reset():
    env = gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=0)
    with pytest.raises(HealthCheckError):
        collect(env, _nan_torque([5]), steps=4)
    with pytest.raises(HealthCheckError) as err:  # the row's physics state is NaN now
        collect(env, steps=4)
    assert err.value.rows == [5]
    assert err.value.steps == [4]  # counted from the last full reset, over both collections
    assert "reward nan not finite" in str(err.value) and "Quarantine" in str(err.value)


def test_user_env_nan_observation_and_inf_reward_on_chosen_rows():
    env = gpu_envs.wrap(NaNTorchEnv(N))
    with pytest.raises(HealthCheckError) as err:
        collect(env, steps=10)
    assert err.value.rows == [NAN_OBS_ROW, NAN_REWARD_ROW]
    assert err.value.steps == [NAN_OBS_STEP, NAN_REWARD_STEP]
    assert math.isnan(err.value.values[0]) and err.value.values[1] == math.inf
    message = str(err.value)
    assert f"row {NAN_OBS_ROW}: observation 'observation' holds nan, not finite at step {NAN_OBS_STEP}" in message
    assert f"row {NAN_REWARD_ROW}: reward inf not finite at step {NAN_REWARD_STEP}" in message


@pytest.mark.parametrize("final_obs", ["info", "none"])
def test_healthy_user_env_with_or_without_final_observations_raises_nothing(final_obs):
    """NaN placeholders of missing final observations are not faults."""
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs=final_obs))
    traj = collect(env, steps=30)
    if final_obs == "none":
        assert traj["next", "final_obs_missing"].any()
    env.check_health()


def test_out_of_range_discrete_after_the_first_step_is_flagged_on_cartpole():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0, health_checks="step")
    td = env.reset()
    td["action"] = torch.tensor([0, 1, 0, 1])
    td, td = env.step_and_maybe_reset(td)
    td["action"] = torch.tensor([0, 5, 0, -1])  # the first step's host check is past: flagged on the device
    td, td = env.step_and_maybe_reset(td)
    with pytest.raises(HealthCheckError) as err:
        env.check_health()
    assert err.value.rows == [1, 3] and err.value.steps == [1, 1] and err.value.values == [5.0, -1.0]
    assert "action 5 outside Discrete(n=2" in str(err.value) and "valid: 0..1" in str(err.value)
    assert "env.check_health()" in str(err.value)
    env.check_health()  # cleared
    td["action"] = torch.tensor([0, 1, 0, 1])
    env.step_and_maybe_reset(td)
    env.check_health()  # usable: good steps raise nothing


def test_out_of_range_discrete_from_a_policy_is_raised_at_the_end_of_collect():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    calls = []

    def policy(td):
        calls.append(1)
        td["action"] = torch.tensor([0, 1, 2, 1]) if len(calls) == 7 else torch.tensor([0, 1, 0, 1])
        return td

    with pytest.raises(HealthCheckError) as err:
        collect(env, policy, steps=10)
    assert err.value.rows == [2] and err.value.steps == [6] and err.value.values == [2.0]


def test_multidiscrete_ranges_are_checked_per_element():
    from gpu_envs.contract.specs import MultiDiscrete
    from gpu_envs.core.health import HealthMonitor

    spec = MultiDiscrete([3, 2])
    monitor = HealthMonitor(3, torch.device("cpu"), spec, {"observation": torch.float32}, "step")
    action = torch.tensor([[2, 1], [0, 2], [3, 0]])
    ok = torch.zeros(3, 1, dtype=torch.bool)
    monitor.watch(action, {"observation": torch.zeros(3, 2)}, torch.zeros(3, 1), ok)
    with pytest.raises(HealthCheckError) as err:
        monitor.check()
    assert err.value.rows == [1, 2] and err.value.values == [2.0, 3.0]


def test_raised_at_a_full_reset_and_the_env_is_usable_after():
    env = gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=0, health_checks="step")
    td = env.reset()
    td["action"] = torch.zeros(N, 1)
    td["action"][4] = math.inf
    env.step_and_maybe_reset(td)
    with pytest.raises(HealthCheckError) as err:
        env.reset()  # refused before anything moved
    assert err.value.rows == [4] and err.value.values == [math.inf] and "env.reset()" in str(err.value)
    root = env.reset()  # the flags were cleared: this one goes ahead
    assert torch.isfinite(root["observation"]).all()
    env.check_health()


def test_raised_when_episode_statistics_are_read_and_by_a_transformed_env():
    stats = EpisodeStats()
    env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=0, health_checks="step"), stats)
    td = env.reset()
    td["action"] = torch.zeros(N, 1)
    td["action"][0] = math.nan
    _, td = env.step_and_maybe_reset(td)
    with pytest.raises(HealthCheckError) as err:
        stats.summary()
    assert err.value.rows == [0] and "row 0" in str(err.value)
    td["action"] = torch.zeros(N, 1)
    env.step_and_maybe_reset(td)  # row 0's state is NaN now: flagged again
    with pytest.raises(HealthCheckError):
        env.check_health()  # TransformedEnv forwards it


def test_transformed_env_collect_is_scanned_with_its_own_specs():
    env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=0), EpisodeStats())
    with pytest.raises(HealthCheckError) as err:
        collect(env, _nan_torque([2]), steps=6)
    assert err.value.rows == [2]


def test_env_rollout_is_checked_too():
    env = gpu_envs.wrap(NaNTorchEnv(N))
    with pytest.raises(HealthCheckError) as err:
        env.rollout(12)
    assert "env.rollout()" in str(err.value)


def test_health_checks_off_checks_nothing_and_bad_values_are_refused():
    env = gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=0, health_checks=False)
    assert env.health_checks == "off" and env.health_monitor is None
    collect(env, _nan_torque([1]), steps=4)
    env.check_health()
    env.reset()
    with pytest.raises(gpu_envs.InvalidArgumentError, match="health_checks"):
        gpu_envs.make("Pendulum-v1", num_envs=2, device="cpu", health_checks="always")
    env.health_checks = "step"
    assert env.health_checks == "step"


def test_step_mode_never_syncs():
    """Every step of every path, in 'step' mode, flags without a host sync (tests/sync_guard.py)."""
    env = gpu_envs.make("CartPole-v1", num_envs=16, device="cpu", seed=0, health_checks="step")
    td = env.reset()
    td["action"] = env.action_spec.rand(generator=env.generator)
    td, td = env.step_and_maybe_reset(td)
    collect(env, steps=12)
    td = env.root()  # collect moved the env on: continue from its root
    with no_sync():
        for _ in range(20):
            td["action"] = env.action_spec.rand(generator=env.generator)
            td, td = env.step_and_maybe_reset(td)
        collect(env, steps=12)
        env.rollout(5, reset=False)
    env.check_health()


def test_step_mode_flags_in_the_random_action_buffer_path():
    """collect(policy=None) writes straight into the buffer through StepPath.values: watched there too."""
    env = gpu_envs.wrap(NaNTorchEnv(N), health_checks="step")
    with pytest.raises(HealthCheckError) as err:
        collect(env, steps=10)
    assert err.value.rows == [NAN_OBS_ROW, NAN_REWARD_ROW]
    assert err.value.steps == [NAN_OBS_STEP, NAN_REWARD_STEP]


@pytest.mark.slow
def test_step_mode_in_a_compiled_collection():
    """Chunks of K=2 steps: the first eager, the later ones compiled; the compiled ones write the record too."""
    env = gpu_envs.wrap(NaNTorchEnv(N), health_checks="step")
    collect(env, steps=2, compile=True)  # steps 0-1, eager
    with pytest.raises(HealthCheckError) as err:
        collect(env, steps=2, compile=True)  # steps 2-3, compiled: the inf reward from step 3 on
    assert err.value.rows == [NAN_REWARD_ROW] and err.value.steps == [NAN_REWARD_STEP]
    with pytest.raises(HealthCheckError) as err:
        collect(env, steps=2, compile=True)  # steps 4-5: the NaN observation at step 5
    assert err.value.rows == [NAN_OBS_ROW, NAN_REWARD_ROW] and err.value.steps == [NAN_OBS_STEP, 4]


# ------------------------------------------------------------ gymnasium.make_vec


def _make_vec(env_id, n=4):
    envs = gymnasium.make_vec(f"gpu_envs/{env_id}", num_envs=n, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    return envs


def test_make_vec_refuses_float_actions_for_discrete():
    envs = _make_vec("CartPole-v1")
    state = envs.unwrapped.state.clone()
    with pytest.raises(gpu_envs.ActionError, match="integer indices") as err:
        envs.step(np.array([0.0, 1.0, 1.0, 0.0]))
    assert "make_vec('gpu_envs/CartPole-v1')" in str(err.value) and "Nothing was stepped" in str(err.value)
    with pytest.raises(gpu_envs.ActionError, match="integer indices"):
        envs.step(torch.tensor([0.0, 1.0, 1.0, 0.0]))
    assert torch.equal(envs.unwrapped.state, state)
    obs, *_ = envs.step(np.array([0, 1, 1, 0]))
    assert obs.dtype == np.float32  # numpy arrays by default, as gymnasium's own vector envs give them


def test_make_vec_refuses_a_wrong_action_count_with_a_gpu_envs_error():
    envs = _make_vec("CartPole-v1")
    with pytest.raises(gpu_envs.ActionError, match=r"shape \(3,\) \(3 values\); this env takes \(4,\)"):
        envs.step(np.array([0, 1, 0]))
    with pytest.raises(gpu_envs.ActionError, match="shape"):
        envs.step(torch.tensor([0, 1, 0, 1, 1]))


def test_make_vec_refuses_out_of_range_and_non_finite_values():
    envs = _make_vec("CartPole-v1")
    with pytest.raises(gpu_envs.ActionError, match=r"row\(s\) \[2\]: row 2: 2 \(valid: 0\.\.1\)"):
        envs.step(np.array([0, 1, 2, 0]))
    with pytest.raises(gpu_envs.ActionError, match="row 3: -1"):
        envs.step([0, 1, 1, -1])
    pendulum = _make_vec("Pendulum-v1", 2)
    with pytest.raises(gpu_envs.ActionError, match=r"non-finite.*row 1: \[nan\]"):
        pendulum.step(np.array([[0.0], [np.nan]]))
    pendulum.step(np.array([[0.5], [-0.5]]))


class _FakeEvent:
    """A CUDA event whose completion the test decides."""

    done = False

    def record(self):
        pass

    def query(self):
        return _FakeEvent.done


def test_the_cuda_poll_never_waits_and_raises_once_the_copy_has_arrived(monkeypatch):
    """The CUDA branch of the poll, emulated on the CPU: a copy in flight is not waited for."""
    from gpu_envs.core.health import HealthMonitor

    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monitor = HealthMonitor(
        3,
        torch.device("cpu"),
        gpu_envs.make("Pendulum-v1", 1, device="cpu").single_action_spec,
        {"observation": torch.float32},
        "step",
    )
    monitor._cuda = True
    ok = torch.zeros(3, 1, dtype=torch.bool)
    monitor.watch(torch.tensor([[0.0], [math.nan], [0.0]]), {"observation": torch.zeros(3, 3)}, torch.zeros(3, 1), ok)
    _FakeEvent.done = False
    monitor.poll("a poll")  # starts the copy of the record
    monitor.poll("a poll")  # the copy has not arrived: nothing is read, nothing raised
    _FakeEvent.done = True
    with pytest.raises(HealthCheckError) as err:
        monitor.poll("a poll")  # it has: raised
    assert err.value.rows == [1]
    monitor.poll("a poll")
    monitor.poll("a poll")  # cleared


def test_quarantine_ends_nan_rows_before_the_default_checks_see_them():
    from gpu_envs.wrappers import Quarantine

    env = Quarantine(gpu_envs.wrap(NaNTorchEnv(N)))
    traj = collect(env, steps=10)
    assert traj["next", "quarantined"].any()
    env.check_health()


def test_a_record_raised_after_its_buffer_was_refilled_names_the_collection_steps(monkeypatch):
    """On CUDA a poll raises one collection late: by then the buffer holds the next collection."""
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    _FakeEvent.done = True
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    env.health_monitor._cuda = True  # the CUDA poll, emulated (copies arrive at once here)
    calls = []

    def policy(td):
        calls.append(1)
        td["action"] = torch.tensor([0, 7, 0, 1]) if len(calls) == 3 else torch.tensor([0, 1, 0, 1])
        return td

    collect(env, policy, steps=10)  # flagged on the device; this poll only starts the copy
    with pytest.raises(HealthCheckError) as err:
        collect(env, policy, steps=10)  # the copy has arrived: raised, from a refilled buffer
    assert err.value.rows == [1] and err.value.steps == [0] and err.value.values == [7.0]
    assert "in steps 0..9" in str(err.value) and "overwritten" in str(err.value)
    collect(env, policy, steps=10)
    collect(env, policy, steps=10)  # cleared


def test_placeholder_rows_are_checked_on_the_observations_they_acted_on():
    class NoFinalObsNaN(NaNTorchEnv):
        pass

    env = gpu_envs.wrap(NoFinalObsNaN(N, final_obs="none"))
    with pytest.raises(HealthCheckError) as err:
        collect(env, steps=12)
    assert NAN_OBS_ROW in err.value.rows
    assert err.value.steps[err.value.rows.index(NAN_OBS_ROW)] == NAN_OBS_STEP


def test_step_mode_records_inside_graph_replays():
    """CUDA-graph collections (emulated on the CPU): the watch's in-place writes are replayed too."""
    from gpu_envs.rollout import RolloutBuffer
    from gpu_envs.rollout.cudagraph import GraphCollector
    from tests.graph_emulation import EmulatedGraphs

    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0, health_checks="step")
    good, bad = torch.tensor([0, 1, 1, 0]), torch.tensor([0, 3, 1, 0])
    calls = []

    def policy(td):  # the first step (checked on the host) good, the later ones (and the graph's) bad
        calls.append(1)
        td["action"] = good if len(calls) == 1 else bad
        return td

    collector = GraphCollector(env, policy, RolloutBuffer(env, 5), api=EmulatedGraphs())
    collector.collect()  # the warm-up (eager), then the capture
    with pytest.raises(HealthCheckError) as err:
        env.check_health()
    assert err.value.rows == [1]
    for _ in range(2):
        collector.collect()  # a replay
        assert collector.graph.replays > 0
        with pytest.raises(HealthCheckError) as err:
            env.check_health()
        assert err.value.rows == [1] and err.value.values == [3.0]
