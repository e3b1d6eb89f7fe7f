"""Collection rules for the whole suite, and its shared fixtures.

``tests/isaaclab/`` is the real Isaac Lab tier: it needs Python 3.12 and the Isaac Lab
venv, and runs on its own with that venv's python::

    VENV=$(scripts/isaaclab_venv.sh) && "$VENV/bin/python" -m pytest tests/isaaclab -q

Where isaaclab is not installed (the main suite) that folder is not collected at all,
instead of showing up as a wall of skips; the Isaac Lab contract is still tested there
through the fakes (tests/test_isaaclab_fake.py). ``one_thread`` runs a test on one torch
CPU thread (training runs: on a shared 2-core machine more threads only thrash).
"""

import importlib.util

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
