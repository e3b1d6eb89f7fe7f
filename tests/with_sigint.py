"""Run Python code with Python's own Ctrl-C handler, even where SIGINT was ignored at start-up.

``python -m tests.with_sigint -m MODULE ARGS...`` runs ``MODULE`` as ``python -m`` would;
``python -m tests.with_sigint -c CODE ARGS...`` runs ``CODE`` as ``python -c`` would.

A process whose parent ignored SIGINT (``nohup``-style launchers, a background job of a
script) inherits the ignored disposition, and Python then installs no handler: a test
that sends it SIGINT would wait for a ``KeyboardInterrupt`` that never comes. Tests that
send SIGINT to a subprocess start it through this module (``tests.processes.PYTHON_WITH_SIGINT``)
so the child behaves as one started from a terminal. Its own children (multiprocessing
workers) inherit the handler as they would from a terminal-started process.
"""

from __future__ import annotations

import runpy
import signal
import sys


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if len(argv) < 2 or argv[0] not in ("-m", "-c"):
        raise SystemExit("usage: python -m tests.with_sigint (-m MODULE | -c CODE) [ARGS...]")
    kind, target, rest = argv[0], argv[1], argv[2:]
    if kind == "-m":
        sys.argv = [target, *rest]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *rest]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})


if __name__ == "__main__":
    main(sys.argv[1:])
