"""gymnasium's AsyncVectorEnv workers: timeouts, interrupted calls, and no orphans.

gymnasium's ``AsyncVectorEnv`` waits on its worker processes with no timeout, leaves a
pending call behind when the parent is interrupted (the next call then fails with
``AlreadyPendingCallError``, or reads the previous call's answer), and its workers
outlive a SIGKILLed parent when they are stuck in ``step``. This module fixes the three,
without touching gymnasium:

* :class:`AsyncCalls` takes over ``reset``/``step`` of ONE AsyncVectorEnv instance (an
  instance attribute shadows the method, so vector wrappers above it go through it
  too). Each call is ``*_async`` + a wait of at most ``step_timeout`` seconds on every
  worker + ``*_wait`` (which then never blocks). On expiry: :class:`StepTimeoutError`
  naming the sub-envs that did not answer (and whether their process is stopped, e.g.
  by SIGSTOP), and every worker is stopped. It also records the PHASE of the call in
  flight (sending, waiting, reading), so that after an interruption :meth:`AsyncCalls.recover`
  knows what is safe: interrupted while waiting (where the parent spends nearly all its
  time), every command was sent and no answer read, so the answers are drained; while
  sending or reading (a message may be half-written or half-read) or after a timeout,
  the workers are restarted from the env's own ``env_fns``.
* :func:`guarded_worker` wraps gymnasium's worker loop: the worker ignores SIGINT (a
  Ctrl-C in a terminal reaches the whole process group; the parent alone decides what
  it means), dies with its parent (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` when the
  env was built from the main thread, plus a thread watching the parent pid, for every
  start method and OS), even when stuck in ``step``. ``make(..., vectorization="async")``
  builds its workers with it; an AsyncVectorEnv you build yourself gets it by passing
  ``worker=gpu_envs.backends.gymnasium_envs.guarded_worker()`` (and always after a restart).
  Workers already started with gymnasium's plain worker cannot be changed: on Linux a
  :mod:`~gpu_envs.backends.gymnasium_envs.reaper` process kills them when their parent dies
  (a warning says that a terminal's Ctrl-C still reaches them).

Example::

    calls = AsyncCalls(venv.unwrapped, step_timeout=60.0)   # venv.step(...) is now timed
    ...
    calls.recover()   # after an interrupted call: drain or restart
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import select
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium.vector import async_vector_env
from gymnasium.vector.async_vector_env import AsyncState

from gpu_envs.backends.gymnasium_envs.internals import private
from gpu_envs.backends.gymnasium_envs.reaper import Reaper, start_reaper
from gpu_envs.contract.errors import BackendError, InterruptedStepError, StepTimeoutError
from gpu_envs.utils.call_guard import CallGuard

__all__ = ["DEFAULT_STEP_TIMEOUT", "AsyncCalls", "AsyncState", "guarded_worker", "is_guarded", "shutdown_async"]

DEFAULT_STEP_TIMEOUT = 60.0  # seconds a reset/step may take before its workers count as hung
PARENT_POLL_S = 1.0  # how often a worker checks that its parent is alive
_PR_SET_PDEATHSIG = 1
_DRAIN_TIMEOUT = 10.0  # seconds to wait for answers in flight when recovering or closing


# ----------------------------------------------------------------------- workers
def _die_with_parent(parent_pid: int, pdeathsig: bool) -> None:
    """In a worker: SIGKILL when the parent dies (kernel), and a thread checking its pid."""
    if pdeathsig and sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the guard was in place
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="gpu_envs-parent-watch", daemon=True).start()


def _guarded(
    index: int,
    env_fn: Callable,
    pipe: Any,
    parent_pipe: Any,
    shared_memory: Any,
    error_queue: Any,
    autoreset_mode: Any,
    semaphore: Any,
    *,
    parent_pid: int,
    pdeathsig: bool,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid, pdeathsig)
    worker = private(async_vector_env, "_async_worker")  # gymnasium's own worker loop
    worker(index, env_fn, pipe, parent_pipe, shared_memory, error_queue, autoreset_mode, semaphore)


def guarded_worker() -> Callable:
    """A ``worker=`` for ``AsyncVectorEnv``: gymnasium's loop, ignoring SIGINT, dying with this process.

    Build it in the thread that builds the env: ``PR_SET_PDEATHSIG`` fires when the
    thread that started the worker exits, so it is only used from the main thread (the
    parent-watching thread covers the rest).
    """
    return functools.partial(
        _guarded, parent_pid=os.getpid(), pdeathsig=threading.current_thread() is threading.main_thread()
    )


def is_guarded(worker: Any) -> bool:
    """True if ``worker`` (an ``AsyncVectorEnv``'s ``worker=``) came from :func:`guarded_worker`."""
    return isinstance(worker, functools.partial) and worker.func is _guarded


def _process_state(pid: int | None) -> str:
    """``"stopped"`` / ``"running"`` / ``"a zombie"`` from /proc, or ``""`` when unknown."""
    if pid is None:
        return ""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""
    return {"T": "stopped (SIGSTOP?)", "t": "stopped by a tracer", "Z": "a zombie", "D": "in uninterruptible I/O"}.get(
        state, "running"
    )


def shutdown_async(env: gym.vector.AsyncVectorEnv) -> None:
    """Stop every worker of an AsyncVectorEnv without talking to it (no hang, no orphan).

    Stopped (SIGSTOP) workers are continued so that they can take the SIGTERM; those
    that still live are killed.
    """
    for process in env.processes:
        if process.is_alive():
            process.terminate()
            pid = process.pid  # None only for a process never started (nothing to continue)
            if pid is not None:
                with contextlib.suppress(OSError, TypeError):
                    os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 5
    for process in env.processes:
        process.join(timeout=max(deadline - time.monotonic(), 0.1))
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
    for pipe in env.parent_pipes:
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    env.closed = True


def _state(env: gym.vector.AsyncVectorEnv) -> AsyncState:
    """Which call gymnasium has in flight (its private ``AsyncVectorEnv._state``, read through :func:`private`)."""
    return private(env, "_state")


# ------------------------------------------------------------------------ calls
class AsyncCalls:
    """Timed, interruption-aware ``reset``/``step`` for one ``AsyncVectorEnv`` (module docstring).

    Args:
        env: the AsyncVectorEnv itself (``venv.unwrapped``).
        step_timeout: seconds each ``reset``/``step`` may take; ``None`` waits forever.
        describe: a callable naming the env in messages.
    """

    def __init__(self, env: gym.vector.AsyncVectorEnv, step_timeout: float | None, describe: Callable[[], str]) -> None:
        self.env = env
        self.step_timeout = step_timeout
        self.describe = describe
        self.phase: str | None = None  # "send" / "wait" / "read" while a call is in flight
        # the call in flight, still marked after one that was interrupted (drained or restarted by recover)
        self.guard = CallGuard(describe)
        self.stopped: str | None = None  # why the workers were stopped (a restart brings them back)
        self._poll: Any = None  # select.poll over the pipes below, reused by every call
        self._polled: list | None = None
        self._fds: list[int] = []
        # gymnasium's plain workers do not die with this process by themselves: a reaper process kills them
        self.reaper: Reaper | None = None
        if not is_guarded(getattr(env, "worker", None)):
            self.reaper = start_reaper([p.pid for p in env.processes])
            orphans = (
                "" if self.reaper is not None else "a worker stuck in step outlives this process if it is killed, and "
            )
            warnings.warn(
                f"{describe()}: this AsyncVectorEnv's workers run gymnasium's plain worker, so {orphans}a Ctrl-C in "
                "the terminal reaches the workers too. Build it with worker=gpu_envs.backends.gymnasium_envs.guarded_worker() "
                "(gpu_envs.make(..., vectorization='async') does); a restart after a timeout or an interruption uses "
                "it anyway.",
                stacklevel=4,
            )
        # shadow the methods on the instance: wrappers above it call env.step / env.reset
        env.step = self.step  # type: ignore[method-assign]
        env.reset = self.reset  # type: ignore[method-assign]
        env.close_extras = self.close_extras  # type: ignore[method-assign]

    # ------------------------------------------------------------------ calls
    def step(self, actions: Any) -> Any:
        if self.guard.pending is not None or self.stopped is not None:
            self._refuse("step")
        return self._run("step", self.env.step_async, (actions,), self.env.step_wait)

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        if self.pending:
            if options is not None and "reset_mask" in options:
                self._refuse("a partial reset")
            self.recover()
        return self._run("reset", self.env.reset_async, (seed, options), self.env.reset_wait)

    def _run(self, call: str, send: Callable, args: tuple, read: Callable) -> Any:
        """``send(*args)``, wait for every answer (``step_timeout``), ``read()``; the phase recorded all along."""
        self.guard.start(call)
        self.phase = "send"
        send(*args)
        self.phase = "wait"
        self._await_answers()
        self.phase = "read"
        out = read()
        self.phase = None
        self.guard.finish()
        return out

    def _refuse(self, what: str) -> None:
        why = self.stopped or f"its last {self.guard.pending}() was interrupted before every worker had answered"
        raise InterruptedStepError(
            f"interrupted mid-step: call env.reset() (every env). {self.describe()} cannot run {what}: {why}; a "
            "reset drains the answers in flight or restarts the workers."
        )

    @property
    def pending(self) -> bool:
        """True if a call did not finish (interrupted), or the workers were stopped."""
        return self.guard.pending is not None or self.stopped is not None or _state(self.env) != AsyncState.DEFAULT

    def _await_answers(self) -> None:
        """Wait until every worker has answered, at most ``step_timeout`` seconds in all.

        One ``poll`` object over the pipes, kept across calls (``Connection.poll`` builds a
        selector per call: several microseconds per pipe and step); each wake-up takes the
        pipes that became readable out until none is left.
        """
        if self.step_timeout is None:
            return
        poller, fds = self._poller()
        if poller is None:  # no select.poll (not Linux/macOS): one Connection.poll per pipe
            deadline = time.monotonic() + self.step_timeout
            for pipe in self.env.parent_pipes:
                if pipe is not None and not pipe.poll(max(deadline - time.monotonic(), 0.0)):
                    self._time_out()
            return
        deadline = time.monotonic() + self.step_timeout
        waiting = len(fds)
        answered = []
        try:
            while waiting:
                remaining = deadline - time.monotonic()
                ready = poller.poll(max(remaining, 0.0) * 1000.0) if remaining > 0 else []
                if not ready:
                    self._time_out()
                for fd, _event in ready:  # readable, or closed (a dead worker): the read says which
                    poller.unregister(fd)
                    answered.append(fd)
                    waiting -= 1
        finally:
            for fd in answered:
                poller.register(fd, select.POLLIN)

    def _poller(self) -> tuple[Any, list[int]]:
        """A ``select.poll`` over the current pipes (rebuilt when the workers were restarted)."""
        pipes = self.env.parent_pipes
        if self._polled is not pipes or any(p is None or p.closed for p in pipes):
            self._poll, self._polled, self._fds = None, pipes, []
            if hasattr(select, "poll") and all(p is not None and not p.closed for p in pipes):
                self._poll = select.poll()
                self._fds = [p.fileno() for p in pipes]
                for fd in self._fds:
                    self._poll.register(fd, select.POLLIN)
        return self._poll, self._fds

    def _time_out(self) -> None:
        env, call = self.env, self.guard.pending
        silent = []
        for index, (pipe, process) in enumerate(zip(env.parent_pipes, env.processes, strict=True)):
            if pipe is not None and not pipe.poll(0):
                state = _process_state(process.pid) if process.is_alive() else f"dead, exit code {process.exitcode}"
                silent.append(f"{index} (pid {process.pid}{', ' + state if state else ''})")
        self.stop(f"sub-env(s) {', '.join(silent)} did not answer {call}() within step_timeout={self.step_timeout:g} s")
        raise StepTimeoutError(
            f"{self.describe()}: sub-env(s) {', '.join(silent)} did not answer {call}() within "
            f"step_timeout={self.step_timeout:g} s: hung, stopped or too slow. Every worker was stopped; env.reset() "
            "starts new ones. If the env is just slow, pass a larger step_timeout (seconds; None waits forever) to "
            "gpu_envs.make()/wrap()."
        )

    # ---------------------------------------------------------------- recovery
    def stop(self, why: str) -> None:
        """Stop every worker now; :meth:`recover` restarts them."""
        shutdown_async(self.env)
        self.phase = None
        self.guard.finish()
        self.stopped = why

    def recover(self) -> None:
        """After an interrupted call or a timeout: drain the answers in flight, or restart the workers."""
        state = _state(self.env)
        waiting = state in (AsyncState.WAITING_STEP, AsyncState.WAITING_RESET)
        if self.stopped is None:
            if self.phase is None and state == AsyncState.DEFAULT:
                self.guard.finish()
                return
            # gymnasium marks the call pending only once every command was sent, and clears it only
            # after every answer was read: in between, nothing was read and the answers can be drained
            if waiting and self.phase in (None, "send", "wait") and self._drain():
                self.phase = None
                self.guard.finish()
                return
            if self.phase == "read" and state == AsyncState.DEFAULT:  # every answer was read
                self.phase = None
                self.guard.finish()
                return
        self.restart()

    def _drain(self) -> bool:
        """Read the answers of the call in flight (every command was sent, none read)."""
        env = self.env
        wait = env.step_wait if _state(env) == AsyncState.WAITING_STEP else env.reset_wait
        try:
            wait(timeout=_DRAIN_TIMEOUT)
        except Exception:  # a sub-env failed or did not answer: start afresh
            return False
        return True

    def restart(self) -> None:
        """Stop every worker and start new ones from the env's ``env_fns`` (a full reset must follow)."""
        env = self.env
        if not env.closed:
            shutdown_async(env)
        self.release_reaper()  # the old workers are gone
        worker = env.worker
        if worker is None or is_guarded(worker):
            worker = guarded_worker()
        env.closed = False
        try:
            type(env).__init__(
                env,
                env.env_fns,
                shared_memory=env.shared_memory,
                copy=env.copy,
                context=env.context,
                daemon=env.daemon,
                worker=worker,
                observation_mode=env.observation_mode,
                autoreset_mode=env.autoreset_mode,
                max_concurrency=env.max_concurrency,
            )
        except Exception as err:
            with contextlib.suppress(Exception):
                shutdown_async(env)  # workers started before the failure: nothing else would stop them
            env.closed = True
            raise BackendError(
                f"{self.describe()}: restarting its worker processes failed ({type(err).__name__}: {err}). Build a new env."
            ) from err
        if not is_guarded(worker):  # a worker function of the user's own: watched like the first ones
            self.reaper = start_reaper([p.pid for p in env.processes])
        self.phase = None
        self.guard.finish()
        self.stopped = None

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """gymnasium's ``close_extras``, without ever blocking on a hung or stopped worker."""
        try:
            self._close(timeout, terminate)
        finally:
            self.release_reaper()

    def release_reaper(self) -> None:
        """The plain workers were stopped (a close, a restart): the reaper exits without killing anything."""
        reaper, self.reaper = self.reaper, None
        if reaper is not None:
            reaper.release()

    def _close(self, timeout: float | None, terminate: bool) -> None:
        env = self.env
        if env.closed:
            return
        if terminate:
            shutdown_async(env)
            return
        if self.pending:
            waiting = _state(env) in (AsyncState.WAITING_STEP, AsyncState.WAITING_RESET)
            if self.stopped is not None or not (waiting and self.phase in (None, "send", "wait") and self._drain()):
                shutdown_async(env)
                return
        deadline = time.monotonic() + (_DRAIN_TIMEOUT if timeout is None else timeout)
        pipes = [p for p in env.parent_pipes if p is not None and not p.closed]
        try:
            for pipe in pipes:
                pipe.send(("close", None))
            for pipe in pipes:
                if not pipe.poll(max(deadline - time.monotonic(), 0.0)):
                    raise TimeoutError
                pipe.recv()
        except (OSError, EOFError, TimeoutError):
            shutdown_async(env)
            return
        for pipe in pipes:
            pipe.close()
        for process in env.processes:
            process.join(timeout=max(deadline - time.monotonic(), 0.1))
        if any(p.is_alive() for p in env.processes):
            shutdown_async(env)
