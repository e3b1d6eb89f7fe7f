"""No orphans from worker processes gpu_envs did not start: a small process kills them when their parent dies.

gpu_envs' own async workers (:func:`~gpu_envs.backends.gymnasium_envs.workers.guarded_worker`)
die with their parent by themselves. An ``AsyncVectorEnv`` built by the user with
gymnasium's plain worker has workers that, stuck in ``step``, outlive a parent killed
with SIGKILL, and it is too late to change them: ``PR_SET_PDEATHSIG`` can only be set
by a process on itself. So when gpu_envs wraps such an env, :func:`start_reaper` starts
one small Python process that

* holds the read end of a pipe whose only write end is in the parent: when the parent
  dies, however it dies, the kernel closes that end and the reaper's read returns;
* then kills (SIGKILL) every worker it was given that is still the same process (its
  start time in ``/proc/<pid>/stat`` is compared, so a reused pid is never hit);
* exits without killing anything when the parent says goodbye (:meth:`Reaper.release`,
  called once the workers were stopped normally: a close, a restart).

It ignores SIGINT and runs in its own session (a Ctrl-C in the terminal is the parent's
to handle). Linux only (``/proc``); elsewhere :func:`start_reaper` returns ``None`` and
the caller warns. Cost: one process start per wrapped env, nothing per step. A child
forked from the parent later keeps the pipe's write end open, so the reaper fires only
once that child is gone too (gpu_envs' own restarted workers die with the parent).

Example::

    reaper = start_reaper([p.pid for p in venv.processes])   # None where not possible
    ...
    reaper.release()                                         # the workers were stopped
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Sequence
from typing import IO, cast

__all__ = ["Reaper", "start_reaper"]

_SCRIPT = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
wanted = [arg.split(":") for arg in sys.argv[1:]]
said = sys.stdin.buffer.read()  # returns when the parent closes the pipe: a goodbye, or its death
if said.endswith(b"release"):
    sys.exit(0)
for pid, start in wanted:
    try:
        with open("/proc/%s/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[19] == start:
                os.kill(int(pid), signal.SIGKILL)
    except (OSError, IndexError, ValueError):
        pass
"""


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (``/proc/<pid>/stat`` field 22), or None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class Reaper:
    """The parent's handle on a reaper process (module docstring)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    def release(self) -> None:
        """The workers were stopped normally: the reaper exits without killing anything."""
        process, self.process = self.process, None
        if process is None:
            return
        # start_reaper opens the process with stdin=PIPE: its stdin is that pipe, never None
        stdin = cast(IO[bytes], process.stdin)
        with contextlib.suppress(OSError, ValueError):
            stdin.write(b"release")
            stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid


def start_reaper(pids: Sequence[int | None]) -> Reaper | None:
    """A :class:`Reaper` killing ``pids`` when this process dies, or None where it cannot (not Linux, no ``/proc``,
    a process not started: a None pid)."""
    if not sys.platform.startswith("linux"):
        return None
    known = [pid for pid in pids if pid is not None]
    if len(known) != len(pids):  # a process without a pid has no /proc entry to watch
        return None
    wanted = [(pid, start_time(pid)) for pid in known]
    if not wanted or any(start is None for _, start in wanted):
        return None
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, *(f"{pid}:{start}" for pid, start in wanted)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None
    return Reaper(process)
