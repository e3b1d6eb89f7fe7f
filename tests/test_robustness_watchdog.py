"""The watchdog: an in-process env call that hangs gets every thread's stack dumped (issue 10).

A hang inside this process cannot be interrupted safely; ``watchdog_s=`` on make/wrap
and the ``gpu_envs.utils.watchdog`` context manager say where it is stuck instead.
"""

from __future__ import annotations

import time

import torch

import gpu_envs
from tests.fakes import CountingTorchVectorEnv


class SleepyStepEnv(CountingTorchVectorEnv):
    def __init__(self, delay):
        super().__init__(2)
        self.delay = delay

    def step(self, action):
        time.sleep(self.delay)
        return super().step(action)


def test_a_slow_step_dumps_every_thread_once_and_names_the_call(capfd):
    env = gpu_envs.wrap(SleepyStepEnv(3.0), watchdog_s=0.25)  # 2.75 s for the watchdog's thread, even under load
    td = env.reset()
    td["action"] = torch.zeros(2, dtype=torch.long)
    env.step_and_maybe_reset(td)  # slow, but it finishes: nothing is interrupted
    err = capfd.readouterr().err
    assert "gpu_envs watchdog: BatchedEnv(torch(SleepyStepEnv)).step_and_maybe_reset() has been running for" in err
    assert "watchdog_s=0.25" in err and "SleepyStepEnv" in err and "in step" in err  # the stuck frame is shown
    assert err.count("gpu_envs watchdog:") == 1  # once per stuck call, not once per nested call or tick
    env.close()
    assert env._watchdog._thread is None


def test_fast_calls_never_dump(capfd):
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", watchdog_s=120)  # no call is that slow, even loaded
    env.rollout(50)
    env.close()
    assert "gpu_envs watchdog" not in capfd.readouterr().err


def test_without_the_option_nothing_is_wrapped():
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu")
    assert "step" not in vars(env) and env._watchdog is None


def test_the_context_manager_dumps_a_block_that_runs_too_long(tmp_path):
    path = tmp_path / "hang.log"
    with path.open("w") as log, gpu_envs.watchdog(0.2, file=log) as dog:
        time.sleep(2.5)  # well past 0.2 s, even if the watchdog's thread waits for a busy core
    text = path.read_text()
    assert dog.dumps == 1 and "the `with gpu_envs.watchdog(...)` block has been running" in text
    assert "test_the_context_manager_dumps_a_block_that_runs_too_long" in text
