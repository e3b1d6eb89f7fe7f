"""Bad input and failures through the gymnasium backend: clear errors, no hang, no orphan.

Async tests are few and small (process start-up is slow on small machines). Waits on a
step that could hang run in a thread with a generous join, so a regression fails the
test instead of freezing the suite; nothing asserts on timing.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import gymnasium as gym
import pytest
import torch

import gpu_envs
from gpu_envs.backends.gymnasium_envs import PLUGIN, GymnasiumBackend
from tests.fakes import CountingEnv
from tests.gym_fakes import MODES, RaisingEnv, SlowEnv, counting_vector_env, register_test_envs
from tests.processes import ending_new_children

register_test_envs()


def _step_in_thread(env, td, limit: float = 60.0):
    """Run ``env.step(td)``; return the exception it raised (fails if it hangs)."""
    result: dict = {}

    def target():
        try:
            env.step(td)
        except BaseException as err:
            result["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), "step() hung"
    return result.get("error")


def _zeros(n):
    return torch.zeros(n, dtype=torch.long)


@pytest.fixture(autouse=True)
def _no_worker_outlives_its_test():
    with ending_new_children():  # closed on success by each test; on a failure, killed here
        yield


# ---------------------------------------------------------------- env raising


@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_sync_env_raising_in_step_surfaces_its_message(mode):
    venv = gym.vector.SyncVectorEnv(
        [lambda i=i: RaisingEnv(i, fail_at=2 + i) for i in range(3)], autoreset_mode=MODES[mode]
    )
    env = gpu_envs.wrap(venv, device="cpu")
    td = env.reset()
    td["action"] = _zeros(3)
    td, td = env.step_and_maybe_reset(td)
    td["action"] = _zeros(3)
    with pytest.raises(gpu_envs.BackendError, match=r"simulator exploded \(env 0, call 2\)") as info:
        env.step(td)
    assert isinstance(info.value.__cause__, RuntimeError)
    # the vector env is half-stepped: stepping on is refused until a full reset
    with pytest.raises(gpu_envs.InterruptedStepError, match=r"interrupted mid-step: call env\.reset\(\)"):
        env.step(td)
    td = env.reset()
    td["action"] = _zeros(3)
    assert env.step(td)["next", "observation"].shape == (3, 3)
    env.close()


def test_single_env_raising_surfaces_its_message():
    env = gpu_envs.wrap(RaisingEnv(0, fail_at=1, message="bad physics"), device="cpu")
    td = env.reset()
    td["action"] = _zeros(1)
    with pytest.raises(gpu_envs.BackendError, match="bad physics"):
        env.step(td)
    env.close()


def test_async_env_raising_surfaces_its_message_and_stops_every_worker():
    venv = gym.vector.AsyncVectorEnv(
        [lambda i=i: RaisingEnv(i, fail_at=2 if i == 1 else 10**6) for i in range(2)], autoreset_mode=MODES["same_step"]
    )
    env = gpu_envs.wrap(venv, device="cpu")
    td = env.reset()
    td["action"] = _zeros(2)
    td, td = env.step_and_maybe_reset(td)
    td["action"] = _zeros(2)
    error = _step_in_thread(env, td)
    assert isinstance(error, gpu_envs.BackendError) and "simulator exploded (env 1, call 2)" in str(error)
    assert not any(p.is_alive() for p in venv.processes), "orphan worker left behind"
    with pytest.raises(gpu_envs.BackendError, match=r"(?i)build a new env"):
        env.step(td)
    env.close()
    env.close()


# ---------------------------------------------------------------- dead worker


def test_killed_async_worker_between_steps_errors_without_hang_or_orphan():
    venv = counting_vector_env(3, "same_step", "async")
    env = gpu_envs.wrap(venv, device="cpu")
    td = env.reset()
    td["action"] = _zeros(3)
    td, td = env.step_and_maybe_reset(td)
    victim = venv.processes[1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)
    td["action"] = _zeros(3)
    error = _step_in_thread(env, td)
    assert isinstance(error, gpu_envs.BackendError), error
    assert "worker 1" in str(error) and "died" in str(error) and "-9" in str(error)
    assert not any(p.is_alive() for p in venv.processes), "orphan worker left behind"
    env.close()
    env.close()


@pytest.mark.slow
def test_killed_async_worker_during_a_step_errors_without_hang_or_orphan():
    venv = gym.vector.AsyncVectorEnv(
        [lambda i=i: SlowEnv(i, delay=2.0 if i == 1 else 0.0) for i in range(2)],
        autoreset_mode=MODES["same_step"],
    )
    env = gpu_envs.wrap(venv, device="cpu")
    td = env.reset()
    td["action"] = _zeros(2)
    victim = venv.processes[1]
    killer = threading.Timer(0.5, os.kill, args=(victim.pid, signal.SIGKILL))
    killer.start()
    error = _step_in_thread(env, td)
    killer.join()
    assert isinstance(error, gpu_envs.BackendError) and "died" in str(error), error
    assert not any(p.is_alive() for p in venv.processes), "orphan worker left behind"
    env.close()


# ------------------------------------------------------------------ lifecycle


def test_close_twice_and_use_after_close():
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", backend="gymnasium")
    env.reset()
    env.close()
    env.close()
    env.backend.close()
    with pytest.raises(gpu_envs.ClosedEnvError):
        env.reset()
    with pytest.raises(gpu_envs.ClosedEnvError):
        env.backend.reset()


def test_async_close_twice_leaves_no_process():
    with gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", backend="gymnasium", num_workers=2) as env:
        venv = env.backend.env.unwrapped
        assert isinstance(venv, gym.vector.AsyncVectorEnv) and venv.max_concurrency == 2
        env.rollout(3)
    env.close()
    deadline = time.monotonic() + 30
    while any(p.is_alive() for p in venv.processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(p.is_alive() for p in venv.processes)


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("obj", [object(), 42, "CartPole-v1", gym.spaces.Discrete(2)])
def test_wrapping_something_that_is_not_an_env(obj):
    with pytest.raises(gpu_envs.NotAnEnvError):
        gpu_envs.wrap(obj)
    with pytest.raises(gpu_envs.NotAnEnvError):
        gpu_envs.wrap(obj, backend="gymnasium")
    with pytest.raises(gpu_envs.NotAnEnvError, match="gymnasium"):
        PLUGIN.wrap(obj, None)
    with pytest.raises(gpu_envs.NotAnEnvError):
        GymnasiumBackend(obj)


def test_wrong_actions_are_refused_with_the_fix():
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", backend="gymnasium", seed=0)
    td = env.reset()
    for bad, pattern in [
        (torch.zeros(2, dtype=torch.float32), "dtype"),
        (torch.zeros(2, 1, dtype=torch.long), "squeeze"),
        (torch.tensor([0, 5]), "outside"),
    ]:
        td["action"] = bad
        with pytest.raises(gpu_envs.ActionError, match=pattern):
            env.step(td)
    td["action"] = _zeros(2)
    td, td = env.step_and_maybe_reset(td)
    # values are checked on the first step only (validate=False): the env's own check surfaces
    td["action"] = torch.tensor([0, 7])
    with pytest.raises(gpu_envs.BackendError, match="invalid"):
        env.step(td)
    env.close()


def test_next_step_envs_that_cannot_be_made_exact_are_refused_at_wrap():
    class HandRolled(gym.vector.VectorEnv):  # declares no autoreset_mode: gymnasium assumes NEXT_STEP
        def __init__(self):
            self.num_envs = 2
            self.single_observation_space = gym.spaces.Box(-1, 1, (1,))
            self.single_action_space = gym.spaces.Discrete(2)
            self.metadata = {}

    with pytest.raises(gpu_envs.AutoresetModeError, match="SAME_STEP") as info:
        gpu_envs.wrap(HandRolled(), device="cpu")
    assert "vectorization_mode='sync'" in str(info.value) and "reset_mask" in str(info.value)
    # gymnasium's CartPoleVectorEnv behind a gymnasium wrapper: its resets by hand would bypass the wrapper
    wrapped = gym.wrappers.vector.RecordEpisodeStatistics(gym.make_vec("CartPole-v1", 2))
    with pytest.raises(gpu_envs.AutoresetModeError, match="wraps gymnasium's CartPoleVectorEnv") as info:
        gpu_envs.wrap(wrapped, device="cpu")
    fix = "gym.make_vec('CartPole-v1', 2, vectorization_mode='sync')"
    assert fix in str(info.value)
    fixed = gym.wrappers.vector.RecordEpisodeStatistics(eval(fix, {"gym": gym}))  # the fix it names works
    with gpu_envs.wrap(fixed, device="cpu") as env:
        assert env.rollout(200)["next", "done"].any()
    venv = counting_vector_env(1, "next_step", "async", shared_memory=False)
    try:
        with pytest.raises(gpu_envs.AutoresetModeError, match="shared_memory=False"):
            gpu_envs.wrap(venv, device="cpu")
    finally:
        venv.close()


def test_per_env_options_are_refused_on_an_existing_vector_env():
    venv = counting_vector_env(2, "same_step")
    for kwargs in ({"from_pixels": True}, {"frame_skip": 2}):
        with pytest.raises(gpu_envs.InvalidArgumentError, match="make_vec"):
            gpu_envs.wrap(venv, device="cpu", **kwargs)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="unknown keyword"):
        gpu_envs.wrap(venv, device="cpu", colour="red")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="render_mode='rgb_array'"):
        gpu_envs.wrap(CountingEnv(0), device="cpu", from_pixels=True)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="frame_skip"):
        gpu_envs.wrap(CountingEnv(0), device="cpu", frame_skip=0)
    venv.close()


def test_bad_make_arguments():
    with pytest.raises(gpu_envs.InvalidArgumentError, match="vectorization"):
        gpu_envs.make("CartPole-v1", num_envs=2, backend="gymnasium", vectorization="threads")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="num_workers"):
        gpu_envs.make("CartPole-v1", num_envs=2, backend="gymnasium", num_workers=-1)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="colour"):
        gpu_envs.make("CartPole-v1", num_envs=2, backend="gymnasium", colour="red")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="frame_skip"):
        gpu_envs.make("CartPole-v1", num_envs=2, backend="gymnasium", frame_skip=1.5)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="info_spec"):
        gpu_envs.wrap(counting_vector_env(1, "same_step"), device="cpu", info_spec={"a": 1})


def test_make_auto_picks_gymnasium_for_ids_without_a_builtin():
    with gpu_envs.make("MountainCar-v0", num_envs=2, device="cpu") as env:
        assert env.backend.name == "gymnasium" and env.backend.mode == gym.vector.AutoresetMode.SAME_STEP
    assert PLUGIN.can_make("MountainCar-v0") and not PLUGIN.can_make("NoSuchEnv-v9")
    assert "CartPole-v1" in PLUGIN.env_ids()


def test_default_device_is_used_when_none_is_given():
    with gpu_envs.wrap(counting_vector_env(1, "same_step")) as env:
        assert env.device == gpu_envs.default_device() or env.device.type == gpu_envs.default_device().type
