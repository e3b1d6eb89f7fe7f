"""Health checks of a hand-written loop (the default ``health_checks="collect"``), without a host sync per step.

The README's first example is a manual ``step_and_maybe_reset`` loop. On the CPU the
built-in envs' native step checks its own values and the monitor only reads its verdict
(``SelfCheckedStep``: a step it did not clear gets the look); other CPU steps are looked
at in place by a C call per tensor (:mod:`gpu_envs.core.health_look`; the faulty step's
rows recorded at once); elsewhere, or without a C compiler, the steps are kept
(references to the env's own outputs) and scanned in batches
(:meth:`gpu_envs.core.health.HealthMonitor.defer` / ``flush``). Every test runs all three
ways (the ``way`` fixture), so a NaN action, a NaN observation or an out-of-range discrete
action at ANY step is raised by
``env.check_health()``, the next full ``env.reset()`` and the end of the next ``collect``,
naming the row and the exact step -- and ``collect`` itself does not count its own
steps twice.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.backends.torch_envs import TorchVectorBackend
from gpu_envs.builtin import CartPoleEnv
from gpu_envs.core import health
from gpu_envs.rollout import collect
from gpu_envs.utils.native_library import compiler
from tests.sync_guard import no_sync


@pytest.fixture(autouse=True, params=["self_checked", "look", "batched"])
def way(request, monkeypatch):
    """Each test three ways: the native step's own verdict, the CPU's per-step look (both where a C compiler
    is) and the batched scan CUDA uses."""
    if request.param == "batched":
        monkeypatch.setattr(health, "look_for", lambda *args: None)
    elif compiler() is None:
        pytest.skip("no C compiler here: the per-step look is off and the batched scan runs (its own variant)")
    if request.param == "look":  # the built-in envs' step does not vouch for itself: every step is looked at
        monkeypatch.setattr(TorchVectorBackend, "self_checked_step", lambda self: None)
    return request.param


def _loop(env, steps, action_at):
    """``steps`` steps of the README's manual loop; ``action_at(t, td)`` sets the action."""
    td = env.reset(seed=0)
    for t in range(steps):
        action_at(t, td)
        td, root = env.step_and_maybe_reset(td)
        td = root
    return td


def _pendulum_nan_at(row: int, step: int):
    def act(t, td):
        a = torch.zeros(4, 1)
        if t == step:
            a[row] = float("nan")
        td["action"] = a

    return act


def test_a_nan_action_in_a_manual_loop_is_raised_by_check_health_naming_row_and_step():
    env = gpu_envs.make("Pendulum-v1", num_envs=4, seed=0)
    _loop(env, 30, _pendulum_nan_at(row=2, step=17))
    with pytest.raises(gpu_envs.HealthCheckError, match=r"row 2: action nan not finite at step 17") as info:
        env.check_health()
    assert info.value.rows == [2] and info.value.steps == [17]
    env.check_health()  # cleared: the env is usable and nothing is pending


def test_a_full_reset_raises_what_the_manual_loop_met():
    env = gpu_envs.make("Pendulum-v1", num_envs=4, seed=0)
    _loop(env, 5, _pendulum_nan_at(row=0, step=3))
    with pytest.raises(gpu_envs.HealthCheckError, match="row 0"):
        env.reset()
    env.reset()  # cleared


def test_an_out_of_range_discrete_action_after_the_first_step_is_flagged():
    env = gpu_envs.make("CartPole-v1", num_envs=3, seed=0)

    def act(t, td):
        a = torch.zeros(3, dtype=torch.int64)
        if t == 4:
            a[1] = 7  # the first step's value check is over: only the health checks see it
        td["action"] = a

    _loop(env, 8, act)
    with pytest.raises(gpu_envs.HealthCheckError, match=r"row 1: action 7 outside .* at step 4"):
        env.check_health()


def test_faults_before_a_collection_are_raised_at_its_end_with_their_own_step():
    env = gpu_envs.make("Pendulum-v1", num_envs=4, seed=0)
    _loop(env, 6, _pendulum_nan_at(row=3, step=2))
    with pytest.raises(gpu_envs.HealthCheckError, match=r"row 3: action nan not finite at step 2"):
        collect(env, steps=8)


def test_many_steps_are_scanned_in_batches_and_every_step_counts(way):
    env = gpu_envs.make("CartPole-v1", num_envs=2, seed=0)
    monitor = env.health_monitor
    steps = 3 * 128 + 5  # more than one batch of kept steps at this size
    _loop(env, steps, lambda t, td: td.set("action", torch.full((2,), 9 if t == steps - 1 else 0)))
    if way == "batched":
        assert 0 < len(monitor._pending) < monitor.defer_steps
    else:  # looked at where they lay, or vouched for by the native step: nothing kept
        assert monitor.host_look is not None and monitor._pending == []
    with pytest.raises(gpu_envs.HealthCheckError, match=rf"action 9 .* at step {steps - 1}"):
        env.check_health()


def test_a_collection_does_not_keep_its_own_steps():
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    policy = lambda td: td.set("action", torch.zeros(4, dtype=torch.int64))  # noqa: E731
    collect(env, policy, steps=10)
    assert env.health_monitor._pending == []
    collect(env, policy, steps=10, compile=False)
    env.check_health()


def test_healthy_manual_loops_raise_nothing_and_keep_no_sync():
    env = gpu_envs.make("Pendulum-v1", num_envs=8, seed=0)
    td = env.reset(seed=0)
    with no_sync():
        for _ in range(300):  # more than a batch: the scans run inside the guard too
            td["action"] = env.action_spec.rand(generator=env.generator)
            _, td = env.step_and_maybe_reset(td)
    env.check_health()


def test_health_checks_off_and_step_keep_nothing():
    for mode in (False, "step"):
        env = gpu_envs.make("Pendulum-v1", num_envs=2, seed=0, health_checks=mode)
        _loop(env, 4, lambda t, td: td.set("action", torch.zeros(2, 1)))
        assert env.health_monitor is None or env.health_monitor._pending == []


def _nan_torque_on_row_1(td):
    a = torch.zeros(4, 1)
    a[1] = float("nan")
    return td.set("action", a)


def test_quarantine_and_the_default_health_checks_agree_in_collect_and_in_a_manual_loop():
    from gpu_envs.wrappers import Quarantine

    env = Quarantine(gpu_envs.make("Pendulum-v1", num_envs=4, seed=0))
    traj = collect(env, _nan_torque_on_row_1, steps=12)  # a NaN torque ends there; the run goes on
    assert bool(traj["next", "quarantined"][1].all()) and not bool(traj["next", "quarantined"][0].any())
    td = env.reset(seed=1)
    for _ in range(200):  # a hand-written loop, more than one batch of kept steps
        td, td = env.step_and_maybe_reset(_nan_torque_on_row_1(td))
    env.check_health()  # quarantined rows are not health failures
    env.reset()
    assert int(env.quarantined) > 0


def test_a_fault_quarantine_does_not_handle_is_still_raised():
    from gpu_envs.wrappers import Quarantine

    env = Quarantine(gpu_envs.make("CartPole-v1", num_envs=3, seed=0))
    td = env.reset(seed=0)
    for t in range(6):
        td["action"] = torch.tensor([0, 5 if t == 3 else 1, 0])  # finite, but outside Discrete(2)
        _, td = env.step_and_maybe_reset(td)
    with pytest.raises(gpu_envs.HealthCheckError, match=r"row 1: action 5 outside .* at step 3"):
        env.check_health()


def test_placeholders_of_withheld_final_observations_are_no_fault():
    """Rows that end with no final observation get NaN placeholders: neither way reports them."""
    env = gpu_envs.wrap(CartPoleEnv(num_envs=6, seed=0, expose_final_obs=False))
    td = env.reset(seed=0)
    ended = 0
    for _ in range(120):
        td["action"] = torch.ones(6, dtype=torch.int64)  # always push right: episodes end every ~10 steps
        td, root = env.step_and_maybe_reset(td)
        ended += int(td["next", "final_obs_missing"].sum())
        td = root
    assert ended > 20
    env.check_health()


def test_a_nan_observation_is_raised_with_its_row_and_step():
    """A simulator NaN (not the policy's): the observation key, the row and the exact step are named."""
    env = gpu_envs.wrap(CartPoleEnv(num_envs=4, seed=0))
    td = env.reset(seed=0)
    for t in range(9):
        td["action"] = torch.zeros(4, dtype=torch.int64)
        if t == 6:
            env.backend.env.live_state()["state"][2, 1] = float(
                "nan"
            )  # the cart velocity of row 2 goes bad mid-episode
        td, root = env.step_and_maybe_reset(td)
        td = root
    with pytest.raises(
        gpu_envs.HealthCheckError, match=r"row 2: observation 'observation' holds nan, not finite at step 6"
    ):
        env.check_health()


def test_switching_to_step_checks_mid_loop_keeps_counting_the_steps_before():
    """The hand-written steps the default mode held are scanned and counted when the mode changes."""
    env = gpu_envs.make("Pendulum-v1", num_envs=2, seed=0)
    td = env.reset(seed=0)
    for t in range(8):
        if t == 5:
            env.health_checks = "step"
        action = torch.zeros(2, 1)
        if t == 6:
            action[1] = float("nan")
        td["action"] = action
        _, td = env.step_and_maybe_reset(td)
    with pytest.raises(gpu_envs.HealthCheckError, match=r"row 1: action nan not finite at step 6") as info:
        env.check_health()
    assert info.value.steps == [6]


def test_a_self_checked_step_is_looked_at_only_where_the_simulator_found_something(way, monkeypatch):
    """The native step's verdict stands in for the look on clean steps; a step it flags gets the look and the record.

    (The look of each later step where the native step does not vouch; none where steps are kept and scanned.)
    """
    env = gpu_envs.make("CartPole-v1", num_envs=3, seed=0)
    monitor = env.health_monitor
    looked: list[int] = []
    look = monitor.look
    monkeypatch.setattr(
        monitor, "look", lambda *args: looked.append(monitor._host_steps + monitor.vouched_steps) or look(*args)
    )
    _loop(env, 12, lambda t, td: td.set("action", torch.tensor([0, 5 if t == 7 else 1, 1])))
    # the clean steps are only counted
    assert looked == {"self_checked": [7], "look": list(range(12)), "batched": []}[way]
    with pytest.raises(gpu_envs.HealthCheckError, match=r"row 1: action 5 outside .* at step 7"):
        env.check_health()
    # a NaN state stays bad until its row resets: every step after the NaN action is looked at
    env = gpu_envs.make("Pendulum-v1", num_envs=4, seed=0, max_episode_steps=10)
    monitor, looked[:] = env.health_monitor, []
    look = monitor.look
    monkeypatch.setattr(
        monitor, "look", lambda *args: looked.append(monitor._host_steps + monitor.vouched_steps) or look(*args)
    )
    _loop(env, 14, _pendulum_nan_at(row=1, step=6))
    # (row 1 resets at its step limit, after step 9)
    assert looked == {"self_checked": [6, 7, 8, 9], "look": list(range(14)), "batched": []}[way]
    with pytest.raises(gpu_envs.HealthCheckError, match=r"row 1: action nan not finite at step 6"):
        env.check_health()


def test_steps_counted_around_a_collection_number_a_later_fault_exactly():
    """Hand-written steps (vouched for, looked at or kept), a collection, then a fault: its step counts them all."""
    env = gpu_envs.make("CartPole-v1", num_envs=3, seed=0)
    _loop(env, 5, lambda t, td: td.set("action", torch.ones(3, dtype=torch.int64)))
    collect(env, steps=8)
    td = env.root()
    for t in range(3):
        td["action"] = torch.tensor([0, 1, 4 if t == 2 else 0])
        td = env.step_and_maybe_reset(td)[1]
    with pytest.raises(gpu_envs.HealthCheckError, match=r"row 2: action 4 outside .* at step 15"):
        env.check_health()


def test_a_collection_the_native_step_vouched_for_is_not_scanned_and_a_fault_still_is(way, monkeypatch):
    """Every step vouched clean: the buffer scan is skipped (the steps still count); a flagged step brings it back."""
    scans: list[int] = []
    scan = health.healthy_on_host
    monkeypatch.setattr(health, "healthy_on_host", lambda *args: scans.append(1) or scan(*args))
    env = gpu_envs.make("CartPole-v1", num_envs=3, seed=0)
    collect(env, steps=6)  # the first step of all is validated, not vouched for: scanned
    scans.clear()
    collect(env, steps=6)
    collect(env, lambda td: td.set("action", torch.ones(3, dtype=torch.int64)), steps=6)
    # scanned where the native step does not vouch (the look or the batched scan stands in for it)
    assert len(scans) == {"self_checked": 0, "look": 2, "batched": 2}[way]
    env.check_health()

    def bad_at_its_step_3(td, calls=[0]):  # noqa: B006 - a call counter
        calls[0] += 1
        return td.set("action", torch.tensor([0, 5 if calls[0] == 4 else 1, 0]))

    with pytest.raises(gpu_envs.HealthCheckError, match=r"row 1: action 5 outside .* at step 21\b"):
        collect(env, bad_at_its_step_3, steps=6)  # (3 collections of 6 steps before it)
    # a TransformedEnv's buffer holds what its transforms wrote: always scanned
    from gpu_envs.transforms import Transform, TransformedEnv

    class NanReward(Transform):
        def step(self, td):
            return td.set(("next", "reward"), td.get(("next", "reward")) * float("nan"))

    collect_env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=3, seed=0), NanReward())
    for _ in range(2):  # (the first collection's first step is validated, not vouched for; the second's is)
        with pytest.raises(gpu_envs.HealthCheckError, match="reward nan not finite"):
            collect(collect_env, steps=6)
