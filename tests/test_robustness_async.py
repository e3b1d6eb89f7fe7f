"""gymnasium async workers: timeouts, interrupted calls, Ctrl-C, and no orphans (issue 10).

Every test here starts worker processes, so all are marked slow. Nothing asserts on
timing: waits that could hang are bounded (``step_timeout``, subprocess timeouts) so a
regression fails instead of freezing the suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import gpu_envs
from gpu_envs.backends.gymnasium_envs import guarded_worker
from gpu_envs.backends.gymnasium_envs.workers import AsyncState
from tests.fakes import CountingEnv
from tests.gym_fakes import MODES, SlowEnv
from tests.processes import PYTHON_WITH_SIGINT, Lines, ending_new_children

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


class HangingEnv(SlowEnv):
    """CountingEnv whose step number ``hang_at`` sleeps for ten minutes while the file ``marker`` exists."""

    def __init__(self, index: int, hang_at: int = 0, marker: str = "") -> None:
        super().__init__(index, delay=0.0)
        self.hang_at, self.marker, self.calls = hang_at, marker, 0

    def step(self, action):
        self.calls += 1
        self.delay = 600.0 if self.calls == self.hang_at and os.path.exists(self.marker) else 0.0
        return super().step(action)


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        except OSError:
            pass
    return alive


@pytest.fixture(autouse=True)
def _no_worker_outlives_its_test():
    with ending_new_children():  # closed on success by each test; on a failure, killed here
        yield


def _wait_gone(pids, limit=30.0):
    deadline = time.monotonic() + limit
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids)


def _action(n):
    return torch.zeros(n, dtype=torch.long)


def test_a_hung_sub_env_times_out_naming_it_and_reset_restarts_the_workers(tmp_path):
    marker = tmp_path / "hang"
    marker.touch()
    venv = gym.vector.AsyncVectorEnv(
        [lambda i=i: HangingEnv(i, hang_at=2 if i == 1 else 0, marker=str(marker)) for i in range(3)],
        autoreset_mode=MODES["same_step"],
        worker=guarded_worker(),
    )
    env = gpu_envs.wrap(venv, device="cpu", step_timeout=1.0)
    td = env.reset(seed=0)
    td["action"] = _action(3)
    td, root = env.step_and_maybe_reset(td)
    old = [p.pid for p in venv.processes]
    root["action"] = _action(3)
    with pytest.raises(gpu_envs.StepTimeoutError) as err:
        env.step(root)
    text = str(err.value)
    assert "sub-env(s) 1 (pid" in text and "0 (pid" not in text and "step_timeout=1 s" in text and "env.reset()" in text
    assert not _wait_gone(old), "workers were not stopped after the timeout"
    with pytest.raises(gpu_envs.InterruptedStepError, match="interrupted mid-step"):
        env.step(root)
    marker.unlink()
    td = env.reset(seed=0)  # new workers
    assert [p.pid for p in venv.processes] != old
    for _ in range(4):
        td["action"] = _action(3)
        td, td = env.step_and_maybe_reset(td)
    env.close()
    assert not _wait_gone([p.pid for p in venv.processes])


def test_a_sigstopped_worker_times_out_as_stopped_and_is_killed():
    gym.register(
        "GpuEnvsTest/Robust-Counting-v0", entry_point=CountingEnv
    ) if "GpuEnvsTest/Robust-Counting-v0" not in gym.registry else None
    env = gpu_envs.make(
        "GpuEnvsTest/Robust-Counting-v0", num_envs=2, device="cpu", vectorization="async", step_timeout=1.0
    )
    venv = env.backend.env.unwrapped
    td = env.reset(seed=0)
    pids = [p.pid for p in venv.processes]
    os.kill(pids[1], signal.SIGSTOP)
    td["action"] = _action(2)
    with pytest.raises(gpu_envs.StepTimeoutError, match=r"sub-env\(s\) 1 \(pid \d+, stopped"):
        env.step(td)
    assert not _wait_gone(pids), "a stopped worker survived"
    td = env.reset()
    td["action"] = _action(2)
    env.step(td)
    env.close()


def test_close_never_blocks_on_a_stopped_worker():
    venv = gym.vector.AsyncVectorEnv([lambda i=i: CountingEnv(i) for i in range(2)], autoreset_mode=MODES["same_step"])
    env = gpu_envs.wrap(venv, device="cpu")
    env.reset()
    pids = [p.pid for p in venv.processes]
    os.kill(pids[0], signal.SIGSTOP)
    closer = threading.Thread(target=env.close, daemon=True)
    closer.start()
    closer.join(60)
    assert not closer.is_alive(), "close() hung on a stopped worker"
    assert not _wait_gone(pids)


@pytest.mark.sigint
def test_ctrl_c_while_waiting_is_recovered_by_reset_without_restarting_the_workers(python_sigint):
    venv = gym.vector.AsyncVectorEnv(
        [lambda i=i: SlowEnv(i, delay=1.0) for i in range(2)],
        autoreset_mode=MODES["same_step"],
        worker=guarded_worker(),
    )
    env = gpu_envs.wrap(venv, device="cpu")
    td = env.reset(seed=0)
    pids = [p.pid for p in venv.processes]
    main = threading.main_thread().ident
    timer = threading.Timer(0.3, signal.pthread_kill, args=(main, signal.SIGINT))
    timer.start()
    td["action"] = _action(2)
    with pytest.raises(KeyboardInterrupt):
        env.step(td)  # each worker sleeps 1 s: the SIGINT comes while the parent waits
    timer.join(60)
    assert env.backend._calls.phase == "wait"
    with pytest.raises(gpu_envs.InterruptedStepError, match=r"interrupted mid-step: call env\.reset\(\)"):
        env.step(td)  # never gymnasium's AlreadyPendingCallError
    td = env.reset(seed=0)  # drains the step in flight
    assert [p.pid for p in venv.processes] == pids and all(p.is_alive() for p in venv.processes)
    assert venv._state == AsyncState.DEFAULT
    td["action"] = _action(2)
    td, root = env.step_and_maybe_reset(td)
    assert root["observation"][:, 2].tolist() == [1.0, 1.0]  # one step since the reset: nothing lost or extra
    env.close()


@pytest.mark.parametrize("phase", ["send", "read"])
def test_a_call_interrupted_while_a_message_may_be_half_sent_or_read_restarts_the_workers(phase):
    venv = gym.vector.AsyncVectorEnv([lambda i=i: CountingEnv(i) for i in range(2)], autoreset_mode=MODES["same_step"])
    env = gpu_envs.wrap(venv, device="cpu")
    env.reset()
    pids = [p.pid for p in venv.processes]
    calls = env.backend._calls
    # what an interruption leaves behind: a command sent to worker 0 only (gymnasium's state still
    # DEFAULT), or every command sent and worker 0's answer read but not worker 1's
    if phase == "send":
        venv.parent_pipes[0].send(("step", 0))
    else:
        venv.step_async(venv.action_space.sample())
        venv.parent_pipes[0].recv()
    calls.guard.start("step")  # the call marked in flight, as an interruption leaves it
    calls.phase = phase
    td = env.reset(seed=0)
    assert [p.pid for p in venv.processes] != pids, "the workers should have been restarted"
    assert not _wait_gone(pids)
    assert td["observation"][:, 2].tolist() == [0.0, 0.0]
    env.close()


def _counting_unless(flag: Path, i: int):
    def build():
        if i == 1 and flag.exists():
            raise RuntimeError("env 1 cannot be built now")
        return CountingEnv(i)

    return build


def test_a_restart_that_fails_half_way_stops_the_workers_it_started(tmp_path):
    flag = tmp_path / "fail"
    fns = [_counting_unless(flag, i) for i in range(3)]
    venv = gym.vector.AsyncVectorEnv(fns, autoreset_mode=MODES["same_step"], worker=guarded_worker())
    env = gpu_envs.wrap(venv, device="cpu")
    env.reset()
    flag.touch()  # from now on env 1's builder raises: the restart gets half-way
    venv.parent_pipes[0].send(("step", 0))  # an interrupted call that only a restart can undo
    env.backend._calls.guard.start("step")  # marked in flight, as an interruption leaves it
    env.backend._calls.phase = "send"
    with pytest.raises(gpu_envs.BackendError, match="restarting its worker processes failed"):
        env.reset()
    restarted = [p.pid for p in venv.processes]
    assert restarted, "the restart started workers before it failed"
    assert not _wait_gone(restarted), "workers of the failed restart outlived it"
    env.close()


# ----------------------------------------------------------------------- subprocesses

_ORPHAN_SCRIPT = """
import sys, threading, time
import gymnasium as gym
import torch
import gpu_envs
from tests.gym_fakes import SlowEnv

gym.register("GpuEnvsTest/Slow-v0", entry_point=SlowEnv)
holder = {}

def build():
    holder["env"] = gpu_envs.make("GpuEnvsTest/Slow-v0", num_envs=2, device="cpu", vectorization="async",
                                  step_timeout=None, delay=600.0)

if sys.argv[1] == "thread":  # built from another thread: the parent-watching thread must do the job
    t = threading.Thread(target=build); t.start(); t.join()
else:
    build()
env = holder["env"]
td = env.reset()
print(" ".join(str(p.pid) for p in env.backend.env.unwrapped.processes), flush=True)
td["action"] = torch.zeros(2, dtype=torch.long)
env.step(td)  # every worker is stuck in step for ten minutes
"""


@pytest.mark.parametrize("built_in", ["main", "thread"])
def test_workers_stuck_in_step_die_when_their_parent_is_sigkilled(built_in):
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT, built_in],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        line = out.next_line(within=120) or ""
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, (line, err.seen)
        time.sleep(1.0)  # the step is in flight
        assert len(_alive(pids)) == 2
        proc.kill()
        proc.wait(30)
        left = _wait_gone(pids, limit=30.0)
        assert not left, f"orphan workers {left} outlived their SIGKILLed parent"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _alive(locals().get("pids", [])):
            os.kill(pid, signal.SIGKILL)


_CTRL_C_SCRIPT = """
import gymnasium as gym
import torch
import gpu_envs
from tests.gym_fakes import SlowEnv

gym.register("GpuEnvsTest/Slow-v0", entry_point=SlowEnv)
env = gpu_envs.make("GpuEnvsTest/Slow-v0", num_envs=2, device="cpu", vectorization="async", delay=0.5)
td = env.reset(seed=0)
pids = [p.pid for p in env.backend.env.unwrapped.processes]
print("READY", flush=True)
try:
    for _ in range(100):
        td["action"] = torch.zeros(2, dtype=torch.long)
        td, td = env.step_and_maybe_reset(td)
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
td = env.reset(seed=0)
for _ in range(3):
    td["action"] = torch.zeros(2, dtype=torch.long)
    td, td = env.step_and_maybe_reset(td)
same = [p.pid for p in env.backend.env.unwrapped.processes] == pids
print("RECOVERED", "same-workers" if same else "restarted", flush=True)
env.close()
"""


@pytest.mark.sigint
def test_ctrl_c_in_a_terminal_reaches_only_the_parent_and_reset_recovers():
    # a terminal's Ctrl-C sends SIGINT to the whole foreground process group, workers included;
    # the script gets Python's Ctrl-C handler as from a terminal, even if this suite ignores SIGINT
    proc = subprocess.Popen(
        [*PYTHON_WITH_SIGINT, "-c", _CTRL_C_SCRIPT],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    stdout, stderr = Lines(proc.stdout), Lines(proc.stderr)
    try:
        stdout.wait_for("READY", within=120)
        time.sleep(1.2)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
        out, err = stdout.text(within=30), stderr.text(within=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 0, err
    assert "INTERRUPTED" in out and "RECOVERED same-workers" in out, (out, err)
    assert "AlreadyPendingCallError" not in err


def test_an_async_env_built_without_the_guarded_worker_is_warned_about():
    """Its workers would outlive a SIGKILLed parent: wrap says so and names the fix."""
    fns = [lambda i=i: CountingEnv(i) for i in range(2)]
    plain = gym.vector.AsyncVectorEnv(fns, autoreset_mode=MODES["same_step"])
    # (on Linux a reaper process keeps its workers from outliving a SIGKILLed parent; the warning names Ctrl-C)
    with pytest.warns(
        UserWarning, match=r"Ctrl-C in the terminal.*worker=gpu_envs\.backends\.gymnasium_envs\.guarded_worker\(\)"
    ):
        env = gpu_envs.wrap(plain, device="cpu")
    env.close()
    guarded = gym.vector.AsyncVectorEnv(fns, autoreset_mode=MODES["same_step"], worker=guarded_worker())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gpu_envs.wrap(guarded, device="cpu")
        made = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", backend="gymnasium", vectorization="async")
    env.close()
    made.close()


_PLAIN_ORPHAN_SCRIPT = """
import warnings
import gymnasium as gym
import torch
import gpu_envs
from tests.gym_fakes import SlowEnv

venv = gym.vector.AsyncVectorEnv(  # gymnasium's plain worker: it does not die with its parent by itself
    [lambda: SlowEnv(0, delay=600.0), lambda: SlowEnv(1, delay=600.0)],
    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    env = gpu_envs.wrap(venv, device="cpu", step_timeout=None)
td = env.reset()
print(" ".join(str(p.pid) for p in venv.processes), env.backend._calls.reaper.pid, flush=True)
td["action"] = torch.zeros(2, dtype=torch.long)
env.step(td)  # every worker is stuck in step for ten minutes
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper reads /proc")
def test_plain_workers_of_a_user_built_env_die_when_their_parent_is_sigkilled():
    proc = subprocess.Popen(
        [sys.executable, "-c", _PLAIN_ORPHAN_SCRIPT],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    pids = []
    try:
        line = out.next_line(within=120) or ""
        pids = [int(p) for p in line.split()]
        assert len(pids) == 3, (line, err.seen)  # two workers and the reaper
        time.sleep(1.0)  # the step is in flight
        assert len(_alive(pids)) == 3
        proc.kill()
        proc.wait(30)
        left = _wait_gone(pids, limit=30.0)
        assert not left, f"workers or reaper {left} outlived their SIGKILLed parent"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _alive(pids):
            os.kill(pid, signal.SIGKILL)


def test_the_reaper_of_a_closed_env_exits_without_killing():
    fns = [lambda i=i: CountingEnv(i) for i in range(2)]
    venv = gym.vector.AsyncVectorEnv(fns, autoreset_mode=MODES["same_step"])
    with pytest.warns(UserWarning, match="Ctrl-C in the terminal reaches the workers"):
        env = gpu_envs.wrap(venv, device="cpu")
    reaper = env.backend._calls.reaper
    assert reaper is not None and reaper.process.poll() is None
    process = reaper.process
    env.reset(seed=0)
    env.close()
    assert process.poll() == 0  # released: it exited by itself, with status 0
    assert env.backend._calls.reaper is None
