"""Interruption safety (issue 10): after ANY exception escaping reset/step/step_and_maybe_reset/collect,
the env is either exactly as before the call or marked, so that the next call raises
"interrupted mid-step: call env.reset()" and ``reset()`` recovers it.

* Argument errors are raised before anything is touched: the env goes on exactly as an
  identical env that never saw the bad call.
* Faults injected at chosen points (inside the simulator's step before and after it
  changed its state, in the final-observation swap after the backend stepped, in the
  rollout buffer after the step) leave the env marked; ``reset()`` makes it consistent
  with the simulator again.
* SIGINT at random times during rollouts (slow tests) on the built-in env and the
  gymnasium sync and async backends: afterwards the env either refuses with the clear
  error or agrees with the simulator, and after ``reset()`` it always agrees. These
  install Python's Ctrl-C handler themselves (the ``python_sigint`` fixture), so they
  pass when the suite runs with SIGINT ignored, and fail rather than hang if no
  ``KeyboardInterrupt`` comes.
"""

from __future__ import annotations

import gc
import random
import signal
import threading
import time

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.contract.final_obs import FinalObsRule
from gpu_envs.rollout import collect
from gpu_envs.rollout.loop import RolloutBuffer
from gpu_envs.transforms import EpisodeStats, TransformedEnv
from tests.fakes import CountingTorchVectorEnv

N = 4


def _twins():
    """Two identical envs: one gets the bad calls, the other is the reference."""
    return [gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", seed=0) for _ in range(2)]


def _actions(env, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [env.action_spec.rand(generator=g) for _ in range(steps)]


def _run(env, td, actions):
    out = []
    for action in actions:
        td["action"] = action
        td, td = env.step_and_maybe_reset(td)
        out.append(td["observation"])
    return torch.stack(out)


# ------------------------------------------------------------- argument errors: untouched


@pytest.mark.parametrize(
    ("bad_call", "error"),
    [
        (lambda env, td: env.reset(seed=1.7), gpu_envs.InvalidArgumentError),
        (lambda env, td: env.reset(seed=-1), gpu_envs.InvalidArgumentError),
        (lambda env, td: env.reset(seed="3"), gpu_envs.InvalidArgumentError),
        (lambda env, td: env.reset(td={"_reset": torch.ones(N, dtype=torch.bool)}), gpu_envs.InvalidArgumentError),
        (
            lambda env, td: env.reset(td=TensorDict({"_reset": torch.ones(3, dtype=torch.bool)}, [])),
            gpu_envs.ResetMaskError,
        ),
        (lambda env, td: env.step({"action": td["action"]}), gpu_envs.InvalidArgumentError),
        (lambda env, td: env.step(None), gpu_envs.InvalidArgumentError),
        (lambda env, td: env.step_and_maybe_reset(None), gpu_envs.InvalidArgumentError),
        (lambda env, td: env.step_and_maybe_reset((td, td)), gpu_envs.InvalidArgumentError),
        (lambda env, td: env.step(td.exclude("action")), gpu_envs.ActionError),
        (lambda env, td: env.step(td.set("action", td["action"].float())), gpu_envs.ActionError),
        (lambda env, td: env.rollout(0), gpu_envs.InvalidArgumentError),
        (lambda env, td: collect(env, steps=-1), gpu_envs.InvalidArgumentError),
    ],
)
def test_an_argument_error_leaves_the_env_exactly_as_before(bad_call, error):
    env, twin = _twins()
    env.reset()
    twin.reset()
    warm = _actions(env, 2)
    _run(env, env.root(), warm)
    _run(twin, twin.root(), warm)
    td = env.root()
    td["action"] = env.action_spec.zero()
    with pytest.raises(error):
        bad_call(env, td.clone())
    later = _actions(env, 6, seed=2)
    torch.testing.assert_close(_run(env, env.root(), later), _run(twin, twin.root(), later), rtol=0, atol=0)


def test_reset_takes_numpy_seeds_like_python_ints():
    env, twin = _twins()
    a = env.reset(seed=np.int64(3))["observation"]
    b = twin.reset(seed=3)["observation"]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert env.generator.initial_seed() == twin.generator.initial_seed() == 3


# ----------------------------------------------------------------- injected faults: marked


class FaultyEnv(CountingTorchVectorEnv):
    """The counting env, raising from inside ``step`` at call ``fail_at``: before or after changing its state."""

    def __init__(self, fail_at, where, error=RuntimeError):
        super().__init__(N)
        self.fail_at, self.where, self.error, self.calls = fail_at, where, error, 0

    def step(self, action):
        self.calls += 1
        if self.calls == self.fail_at and self.where == "before":
            raise self.error("injected before the step")
        out = super().step(action)
        if self.calls == self.fail_at and self.where == "after":
            raise self.error("injected after the state changed")
        return out


def _consistent(env, sim):
    """The env's root is the simulator's current observation."""
    torch.testing.assert_close(env.root()["observation"], sim._obs(), rtol=0, atol=0)


def _expect_marked(env):
    for call in (
        lambda: env.step(env_td(env)),
        env.root,
        lambda: collect(env, steps=2),
        lambda: env.rollout(2, reset=False),
    ):
        with pytest.raises(gpu_envs.InterruptedStepError, match=r"interrupted mid-step: call env\.reset\(\)"):
            call()


def env_td(env):
    return TensorDict({"action": torch.zeros(N, dtype=torch.long)}, batch_size=[N])


def _recovers(env, sim, steps=9):
    env.reset()
    _consistent(env, sim)
    td = env.root()
    for _ in range(steps):
        td["action"] = torch.zeros(N, dtype=torch.long)
        td, td = env.step_and_maybe_reset(td)
        _consistent(env, sim)


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
@pytest.mark.parametrize("call", ["step", "step_and_maybe_reset", "collect"])
def test_a_fault_inside_the_simulators_step_marks_the_env(where, error, call):
    sim = FaultyEnv(fail_at=3, where=where, error=error)
    env = gpu_envs.wrap(sim)
    td = env.reset()
    with pytest.raises((error, gpu_envs.BackendError)):
        for _ in range(5):
            td["action"] = torch.zeros(N, dtype=torch.long)
            if call == "step":
                env.step(td)
                td = env.root()
            elif call == "step_and_maybe_reset":
                td, td = env.step_and_maybe_reset(td)
            else:
                collect(env, steps=5)
    _expect_marked(env)
    _recovers(env, sim)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_fault_after_the_backend_stepped_marks_the_env(monkeypatch, error):
    sim = CountingTorchVectorEnv(N)
    env = gpu_envs.wrap(sim)
    td = env.reset()
    td["action"] = torch.zeros(N, dtype=torch.long)
    original = FinalObsRule.__call__

    def broken(self, *args, **kwargs):
        raise error("injected in the final-observation rule")

    monkeypatch.setattr(FinalObsRule, "__call__", broken)
    with pytest.raises(error):
        env.step_and_maybe_reset(td)
    monkeypatch.setattr(FinalObsRule, "__call__", original)
    _expect_marked(env)
    _recovers(env, sim)


def test_an_interrupt_while_the_buffer_is_written_leaves_the_env_consistent(monkeypatch):
    sim = CountingTorchVectorEnv(N)
    env = gpu_envs.wrap(sim)
    env.reset()
    calls = []
    original = RolloutBuffer.write

    def interrupted(self, t, td, **kwargs):
        calls.append(t)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(self, t, td, **kwargs)

    monkeypatch.setattr(RolloutBuffer, "write", interrupted)
    policy = lambda td: td.set("action", torch.zeros(N, dtype=torch.long))  # noqa: E731 (TensorDicts: every step writes)
    with pytest.raises(KeyboardInterrupt):
        collect(env, policy, steps=5)
    monkeypatch.setattr(RolloutBuffer, "write", original)
    _consistent(env, sim)  # the step itself had completed: nothing is marked
    traj = collect(env, steps=5)  # episodes carry on
    assert traj.batch_size == (N, 5)
    _consistent(env, sim)


def test_a_transformed_env_is_marked_too_and_its_stats_recover():
    sim = FaultyEnv(fail_at=2, where="after", error=KeyboardInterrupt)
    stats = EpisodeStats()
    env = TransformedEnv(gpu_envs.wrap(sim), stats)
    td = env.reset()
    with pytest.raises(KeyboardInterrupt):
        for _ in range(3):
            td["action"] = torch.zeros(N, dtype=torch.long)
            td, td = env.step_and_maybe_reset(td)
    for call in (env.root, lambda: env.step(env_td(env)), lambda: collect(env, steps=2)):
        with pytest.raises(gpu_envs.InterruptedStepError):
            call()
    env.reset()
    assert stats.running_length.sum().item() == 0
    collect(env, steps=4)


def test_partial_reset_after_an_interruption_resets_every_row():
    sim = FaultyEnv(fail_at=1, where="after", error=KeyboardInterrupt)
    env = gpu_envs.wrap(sim)
    td = env.reset()
    td["action"] = torch.zeros(N, dtype=torch.long)
    with pytest.raises(KeyboardInterrupt):
        env.step(td)
    mask = torch.tensor([True, False, False, False])
    env.reset(td=TensorDict({"_reset": mask}, batch_size=[N]))
    _consistent(env, sim)
    assert (sim.t == 0).all()


# -------------------------------------------------------------- SIGINT at random times


def _sim_obs(kind, env):
    if kind == "builtin":
        return env.backend.env.state.clone()
    venv = env.backend.env.unwrapped
    states = [e.unwrapped.state for e in venv.envs] if kind == "sync" else list(venv.get_attr("state"))
    return torch.as_tensor(np.stack(states), dtype=torch.float32)


def _build(kind):
    if kind == "builtin":
        return gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
    vectorization = "sync" if kind == "sync" else "async"
    return gpu_envs.make(
        "CartPole-v1", num_envs=4, device="cpu", backend="gymnasium", vectorization=vectorization, seed=0
    )


def _send_sigint(thread_id, sent):
    signal.pthread_kill(thread_id, signal.SIGINT)
    sent.set()


def _collect_until_interrupted(env, rng, limit=120.0):
    """Collect until a SIGINT sent at a random time interrupts the main thread.

    Python may swallow a ``KeyboardInterrupt`` that lands in a finalizer run by the
    garbage collector ("Exception ignored in: <Finalize ...>"): if none arrives within a
    few seconds of the signal, another is sent at a new random time. Fails (never hangs)
    if no interrupt arrives within ``limit`` s.
    """
    main = threading.main_thread().ident
    deadline = time.monotonic() + limit
    gc.collect()  # finalizers due now run here, not under the signal
    timer = None
    try:
        while time.monotonic() < deadline:
            sent = threading.Event()
            timer = threading.Timer(rng.uniform(0.0, 0.03), _send_sigint, args=(main, sent))
            timer.start()  # inside the try: a zero delay may interrupt start() itself
            give_up = deadline
            while time.monotonic() < give_up:
                collect(env, steps=8)
                if sent.is_set() and give_up == deadline:
                    give_up = min(deadline, time.monotonic() + 5.0)  # none within 5 s: it was swallowed
            timer.join(limit)
    except KeyboardInterrupt:
        return
    finally:
        if timer is not None:
            timer.cancel()
            timer.join(limit)
    pytest.fail(f"no KeyboardInterrupt within {limit:.0f} s of repeated SIGINTs")


@pytest.mark.slow
@pytest.mark.sigint
@pytest.mark.parametrize(("kind", "trials"), [("builtin", 40), ("sync", 30), ("async", 15)])
def test_sigint_at_random_times_leaves_the_env_marked_or_consistent(kind, trials, python_sigint):
    rng = random.Random(kind)
    env = _build(kind)
    outcomes = {"marked": 0, "consistent": 0}
    try:
        for _ in range(trials):
            env.reset()
            _collect_until_interrupted(env, rng)
            try:
                root = env.root()
            except gpu_envs.InterruptedStepError:
                outcomes["marked"] += 1
            else:
                torch.testing.assert_close(root["observation"], _sim_obs(kind, env))
                outcomes["consistent"] += 1
            env.reset()
            torch.testing.assert_close(env.root()["observation"], _sim_obs(kind, env))
            collect(env, steps=3)
            torch.testing.assert_close(env.root()["observation"], _sim_obs(kind, env))
            assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()  # nothing leaked out
    finally:
        env.close()
    assert outcomes["marked"] + outcomes["consistent"] == trials


def test_to_gymnasium_recovers_an_interrupted_env_with_any_reset():
    from gpu_envs.interop import to_gymnasium

    sim = FaultyEnv(fail_at=2, where="after", error=KeyboardInterrupt)
    envs = to_gymnasium(gpu_envs.wrap(sim), autoreset_mode="same_step")  # obs = the simulator's, every step
    envs.reset(seed=0)
    actions = np.zeros(N, dtype=np.int64)
    envs.step(actions)
    with pytest.raises(KeyboardInterrupt):
        envs.step(actions)
    with pytest.raises(gpu_envs.InterruptedStepError):
        envs.step(actions)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="seed"):
        envs.reset(seed=-1)  # ours, not gymnasium's seeding error, and nothing moved
    obs, _ = envs.reset(options={"reset_mask": np.array([True, False, False, False])})  # every row, after all
    np.testing.assert_array_equal(obs, sim._obs().numpy())
    assert (sim.t == 0).all()
    obs, *_ = envs.step(actions)
    np.testing.assert_array_equal(obs, sim._obs().numpy())


def test_to_torchrl_checks_seeds_when_set_and_its_reset_recovers_an_interrupted_env():
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import step_mdp

    from gpu_envs.interop import to_torchrl

    sim = FaultyEnv(fail_at=2, where="after", error=KeyboardInterrupt)
    env = to_torchrl(gpu_envs.wrap(sim))
    with pytest.raises(gpu_envs.InvalidArgumentError, match="seed"):
        env.set_seed(-1)
    td = env.reset()
    td["action"] = torch.zeros(N, dtype=torch.long)
    td = step_mdp(env.step(td))  # torchrl's step: the adapter remembers which rows ended (none yet)
    td["action"] = torch.zeros(N, dtype=torch.long)
    with pytest.raises(KeyboardInterrupt):
        env.step(td)
    # torchrl's maybe_reset naming no new row would serve the cached root: not after an interruption
    env.reset(TensorDict({"_reset": torch.zeros(N, 1, dtype=torch.bool)}, batch_size=[N]))
    assert (sim.t == 0).all()  # the gpu_envs env below reset every row
    _consistent(env.env, sim)
