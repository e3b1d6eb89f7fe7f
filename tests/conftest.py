"""Collection rules for the whole suite, and its shared fixtures.

``tests/isaaclab/`` is the real Isaac Lab tier: it needs Python 3.12 and the Isaac Lab
venv, and runs on its own with that venv's python::

    VENV=$(scripts/isaaclab_venv.sh) && "$VENV/bin/python" -m pytest tests/isaaclab -q

Where isaaclab is not installed (the main suite) that folder is not collected at all,
instead of showing up as a wall of skips; the Isaac Lab contract is still tested there
through the fakes (tests/test_isaaclab_fake.py). ``tests/jaxmarl/`` (the JaxMARL tier, in
the venv of ``scripts/simulator_venv.sh jaxmarl``) is left out the same way where JaxMARL
is missing, and ``tests/genesis/`` (the Genesis tier, ``scripts/simulator_venv.sh genesis``)
where Genesis is missing. ``one_thread`` runs a test on one torch CPU thread (training runs: on
a shared 2-core machine more threads only thrash).

``python_sigint`` serves tests that send SIGINT (Ctrl-C) to this process: a process
started with SIGINT ignored (a background job of a script, some CI runners) never raises
``KeyboardInterrupt``, so such a test would wait for it forever. The fixture installs
Python's own handler for the test and puts back what was there; subprocesses that must
receive SIGINT are started through ``tests/with_sigint.py`` for the same reason. Every
such test is marked ``sigint``: tests/test_suite_signals.py reruns them with SIGINT
ignored.

``row_kernel_paths`` runs a test twice: with History's and Delay's C kernel
(``gpu_envs.transforms.native_rows``) and with their torch ops (``GPU_ENVS_NATIVE=0``), so
every reference test of those transforms checks both.
"""

import importlib.util
import os
import signal
import threading

import pytest
import torch

collect_ignore = [] if importlib.util.find_spec("isaaclab") is not None else ["isaaclab"]
# tests/jaxmarl/ is the JaxMARL tier (its own venv: scripts/simulator_venv.sh jaxmarl); where JaxMARL is
# missing it is left out, unless GPU_ENVS_REQUIRE_JAXMARL=1 (scripts/test.sh's tier) makes that an error
if importlib.util.find_spec("jaxmarl") is None and os.environ.get("GPU_ENVS_REQUIRE_JAXMARL") != "1":
    collect_ignore.append("jaxmarl")
# tests/genesis/ is the Genesis tier (scripts/simulator_venv.sh genesis), left out the same way where Genesis is
# missing, unless GPU_ENVS_REQUIRE_GENESIS=1 makes that an error
if importlib.util.find_spec("genesis") is None and os.environ.get("GPU_ENVS_REQUIRE_GENESIS") != "1":
    collect_ignore.append("genesis")


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


@pytest.fixture(params=["native", "torch"])
def row_kernel_paths(request, monkeypatch):
    """History's and Delay's C kernel (``"native"``), then their torch ops (``"torch"``): see the module docstring."""
    from gpu_envs.transforms import native_rows

    if request.param == "torch":
        monkeypatch.setenv("GPU_ENVS_NATIVE", "0")
    elif native_rows.kernels(torch.device("cpu")) is None:
        pytest.skip("no C compiler here: History and Delay run only their torch ops (the 'torch' case)")
    return request.param
