"""Run a command under the conditions a test suite must survive: busy cores, SIGINT ignored, a deadline.

Examples::

    # the main suite with two cores kept busy and SIGINT ignored (as under nohup-style launchers
    # or as a background job of a script), ended after an hour at most
    python scripts/stress_run.py --busy 2 --ignore-sigint --timeout 3600 -- \\
        .venv/bin/python -m pytest -m "slow or not slow"

``--busy N`` starts N processes spinning in a Python loop for the whole run (a ``stress``
stand-in that needs nothing installed); they are ended, by their own process ids, when the
command ends or this script is stopped. ``--ignore-sigint`` starts the command with SIGINT
ignored, which its children inherit. ``--timeout`` ends the command's process group
(SIGTERM, then SIGKILL) and exits 124, as coreutils ``timeout`` does. The exit status is
the command's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys

SPIN = "while True: pass"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--busy", type=int, default=0, metavar="N", help="processes spinning on a core each (default 0)"
    )
    parser.add_argument("--ignore-sigint", action="store_true", help="start the command with SIGINT ignored")
    parser.add_argument("--timeout", type=float, default=None, metavar="S", help="end the command after S seconds")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if args.busy < 0:
        parser.error("--busy must be >= 0")
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL) for _ in range(args.busy)]
    try:
        # the command gets its own process group, so a timeout can end all of it
        def child_setup() -> None:
            if args.ignore_sigint:
                signal.signal(signal.SIGINT, signal.SIG_IGN)

        proc = subprocess.Popen(command, start_new_session=True, preexec_fn=child_setup)
        try:
            return proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(
                f"stress_run: {command[0]} ran past --timeout {args.timeout:g} s; ending it",
                file=sys.stderr,
                flush=True,
            )
            for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=grace)
                    break
            return 124
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
