"""Process helpers for tests that run worker processes (Ray, torchrun, the CLI): alive? gone? whose children?

Everything is read from /proc (Linux), so a zombie counts as gone; only :func:`run_tree`
signals (the process tree it started, on a timeout). Every wait here has a deadline:
:class:`Lines` reads a subprocess's output on a thread so that waiting for a line cannot
block forever on a child that prints nothing, and :data:`PYTHON_WITH_SIGINT` starts a
Python child that raises ``KeyboardInterrupt`` on SIGINT even when this process runs
with SIGINT ignored.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import IO

# ``[*PYTHON_WITH_SIGINT, "-m", module, ...]`` or ``[*PYTHON_WITH_SIGINT, "-c", code, ...]``:
# python with Python's Ctrl-C handler installed (tests/with_sigint.py); run it with the
# repository root as cwd or on PYTHONPATH.
PYTHON_WITH_SIGINT = [sys.executable, "-m", "tests.with_sigint"]


class Lines:
    """A subprocess's text stream, read line by line on a daemon thread, so every wait on it has a deadline.

    Example::

        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        out = Lines(proc.stdout)
        out.wait_for("READY", within=60)   # fails the test instead of blocking forever
        ...
        proc.wait(timeout=60); text = out.text(within=10)
    """

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        try:
            for line in iter(stream.readline, ""):
                self._queue.put(line)
        finally:
            self._queue.put(None)

    def next_line(self, within: float) -> str | None:
        """The next line (read within ``within`` seconds, else ``TimeoutError``), or None at the end of the stream."""
        try:
            line = self._queue.get(timeout=max(within, 0.0))
        except queue.Empty:
            raise TimeoutError(f"no line within {within:.0f} s; so far: {''.join(self.seen)!r}") from None
        if line is None:
            self._queue.put(None)  # stays at the end
        else:
            self.seen.append(line)
        return line

    def wait_for(self, text: str, within: float) -> str:
        """The first line containing ``text``; ``AssertionError`` if the stream ends or ``within`` seconds pass first."""
        deadline = time.monotonic() + within
        while True:
            try:
                line = self.next_line(deadline - time.monotonic())
            except TimeoutError:
                line = None
            if line is None:
                raise AssertionError(f"never saw {text!r} within {within:.0f} s; saw: {''.join(self.seen)!r}")
            if text in line:
                return line

    def text(self, within: float) -> str:
        """Everything the stream held, once it ended (``TimeoutError`` if it did not end within ``within`` s)."""
        self._thread.join(within)
        if self._thread.is_alive():
            raise TimeoutError(f"the stream did not end within {within:.0f} s")
        while self.next_line(0.0) is not None:
            pass
        return "".join(self.seen)


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
