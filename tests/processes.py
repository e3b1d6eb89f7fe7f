"""Process helpers for tests of backends that run worker processes (Ray): alive? gone? whose children?

Everything is read from /proc (Linux), so a zombie counts as gone and nothing is signalled.
"""

from __future__ import annotations

import os
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
