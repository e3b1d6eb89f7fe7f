"""Collection rules for the whole suite, and its shared fixtures.

``tests/isaaclab/`` is the real Isaac Lab tier: it needs Python 3.12 and the Isaac Lab
venv, and runs on its own with that venv's python::

    VENV=$(scripts/isaaclab_venv.sh) && "$VENV/bin/python" -m pytest tests/isaaclab -q

Where isaaclab is not installed (the main suite) that folder is not collected at all,
instead of showing up as a wall of skips; the Isaac Lab contract is still tested there
through the fakes (tests/test_isaaclab_fake.py). ``one_thread`` runs a test on one torch
CPU thread (training runs: on a shared 2-core machine more threads only thrash).

``python_sigint`` serves tests that send SIGINT (Ctrl-C) to this process: a process
started with SIGINT ignored (a background job of a script, some CI runners) never raises
``KeyboardInterrupt``, so such a test would wait for it forever. The fixture installs
Python's own handler for the test and puts back what was there; subprocesses that must
receive SIGINT are started through ``tests/with_sigint.py`` for the same reason. Every
such test is marked ``sigint``: tests/test_suite_signals.py reruns them with SIGINT
ignored.
"""

import importlib.util
import signal
import threading

import pytest
import torch

collect_ignore = [] if importlib.util.find_spec("isaaclab") is not None else ["isaaclab"]


@pytest.fixture
def one_thread():
    """One torch CPU thread for a training run: on the shared 2-core machine more only thrash."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def python_sigint():
    """Python's Ctrl-C handler (``KeyboardInterrupt``) for this test, even if SIGINT was ignored at start-up."""
    assert threading.current_thread() is threading.main_thread(), "signal handlers are set from the main thread"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
