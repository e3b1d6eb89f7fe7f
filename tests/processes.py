"""Process helpers for tests that run worker processes (Ray, torchrun): alive? gone? whose children?

Everything is read from /proc (Linux), so a zombie counts as gone; only :func:`run_tree`
signals (the process tree it started, on a timeout).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def alive(pid: int) -> bool:
    """True while process ``pid`` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def assert_gone(pids: list[int], within: float = 10.0) -> None:
    """Fail unless every process of ``pids`` has exited within ``within`` seconds."""
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in pids if alive(p)]
    assert not left, f"processes {left} are still running"


def descendants(root: int) -> set[int]:
    """Every live process below ``root``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if alive(child):
                found.add(child)
                todo.append(child)
    return found


def worker_pids(env) -> list[int]:
    """The process ids of a Ray env's workers."""
    return [w.pid for w in env.backend.workers]


def run_tree(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=...)`` that ends the whole tree on a timeout.

    ``subprocess.run`` kills only ``cmd`` itself; torchrun starts its ranks in sessions of
    their own, so they would outlive it (a rank blocked in a collective for 30 minutes).
    Here the launcher gets SIGTERM (torchrun stops its ranks on it), then whatever of the
    tree is left gets SIGKILL, and the ``TimeoutExpired`` is raised as ``run`` would.
    """
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        tree = descendants(proc.pid)
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=10)
        for pid in [*tree, proc.pid]:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@contextlib.contextmanager
def ending_new_children():
    """Inside, processes this one starts may be left behind (a failing test); on exit they are SIGKILLed.

    For tests that start worker processes and close them only on their success path: a
    failed assertion must not leave workers (stopped ones included) running on.
    """
    before = descendants(os.getpid())
    try:
        yield
    finally:
        for pid in descendants(os.getpid()) - before:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
