"""Stack dumps when an in-process env hangs: the one diagnosis a hang in C code allows.

A sub-env in another process can be timed out and killed (``step_timeout=`` of the
gymnasium async backend); an env stepping in THIS process cannot be interrupted
safely (a simulator stuck in C code, a CUDA kernel that never finishes, a deadlock).
What can be done is to say where it is stuck. Two ways:

* ``gpu_envs.make(..., watchdog_s=60)`` / ``wrap(..., watchdog_s=60)``: when one
  ``reset``/``step``/``step_and_maybe_reset`` call of that env runs longer than 60 s,
  the stacks of every thread are written to stderr (once per stuck call), with a
  header naming the env and the call. Nothing is interrupted: the call may still
  finish. The cost is a wrapper around those calls; without the option, none.
* ``with gpu_envs.watchdog(60):`` around any block (a training iteration, one call):
  the same dump when the block runs longer than 60 s.

How: a daemon thread watches the calls in progress and dumps with
:func:`faulthandler.dump_traceback`. Because a hang in C code may hold the GIL (so that
no Python thread runs), the watching thread also keeps a :mod:`faulthandler` timer armed
a little further ahead each time it wakes (``faulthandler.dump_traceback_later``): if the
watcher itself is starved of the GIL, the C-level timer fires and dumps anyway. The timer
is process-wide: a program using ``faulthandler.dump_traceback_later`` itself should not
enable the watchdog at the same time.

Example::

    env = gpu_envs.make("CartPole-v1", num_envs=8, backend="gymnasium", watchdog_s=30)
    with gpu_envs.watchdog(120, file=open("hang.log", "w")):
        traj = collect(env, policy, steps=64)
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.utils.arguments import optional_seconds

__all__ = ["Watchdog", "watchdog"]


class Watchdog:
    """Dump every thread's stack when a watched call runs longer than ``seconds``.

    Args:
        seconds: how long one call may run before the dump.
        name: what the header calls the watched object (e.g. the env's repr).
        file: where to write (default ``sys.stderr``); must have a real file descriptor.

    ``watch(fn)`` returns ``fn`` wrapped so that its calls are watched (nested watched
    calls count as one); :meth:`stop` ends the watching thread.
    """

    def __init__(self, seconds: float, name: str = "env", file: IO[str] | None = None) -> None:
        self.seconds = optional_seconds(seconds, "watchdog_s")
        self.name = name
        self.file = file
        self._call: str | None = None
        self._since = 0.0
        self._depth = 0
        self._dumped_since: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.dumps = 0  # how many dumps were written (tests read it)

    def watch(self, fn: Callable, call: str | None = None) -> Callable:
        """``fn`` with its calls watched (``call`` names it in the header)."""
        label = f"{self.name}.{call or getattr(fn, '__name__', 'call')}()"

        @functools.wraps(fn)
        def watched(*args: Any, **kwargs: Any) -> Any:
            self.enter(label)
            try:
                return fn(*args, **kwargs)
            finally:
                self.exit()

        return watched

    def enter(self, call: str) -> None:
        """A watched call starts (``call`` describes it in the header)."""
        if self._depth == 0:
            self._call = call
            self._since = time.monotonic()
            if self._thread is None:
                self._start()
        self._depth += 1

    def exit(self) -> None:
        """The watched call that :meth:`enter` announced has returned or raised."""
        self._depth -= 1
        if self._depth == 0:
            self._call = None

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpu_envs-watchdog", daemon=True)
        self._thread.start()

    def _out(self) -> IO[str]:
        return self.file if self.file is not None else sys.stderr

    def _run(self) -> None:
        seconds = self.seconds
        if seconds is None:  # (Watchdog(None)): no limit to watch
            raise InvalidArgumentError("Watchdog needs seconds (a number > 0) to watch calls, got None.")
        tick = min(1.0, seconds / 4)
        while not self._stop.wait(tick):
            # backstop for a GIL that is never released: a C-level timer, pushed further each tick
            with contextlib.suppress(Exception):
                faulthandler.dump_traceback_later(seconds + 2 * tick, file=self._out(), exit=False)
            call, since = self._call, self._since
            if call is None or since == self._dumped_since:
                continue
            running = time.monotonic() - since
            if running > seconds:
                self._dumped_since = since
                self.dumps += 1
                out = self._out()
                out.write(
                    f"\ngpu_envs watchdog: {call} has been running for {running:.1f} s "
                    f"(watchdog_s={seconds:g}); it may be hung. Stacks of every thread:\n"
                )
                out.flush()
                faulthandler.dump_traceback(file=out, all_threads=True)
                out.flush()
        with contextlib.suppress(Exception):
            faulthandler.cancel_dump_traceback_later()

    def stop(self) -> None:
        """Stop watching (the env's ``close`` calls it)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


@contextlib.contextmanager
def watchdog(seconds: float, file: IO[str] | None = None) -> Iterator[Watchdog]:
    """Dump every thread's stack if the ``with`` block runs longer than ``seconds``.

    Example::

        with gpu_envs.watchdog(60):
            env.step(td)
    """
    dog = Watchdog(seconds, file=file)
    dog.enter("the `with gpu_envs.watchdog(...)` block")
    try:
        yield dog
    finally:
        dog.exit()
        dog.stop()
