"""The Genesis tier: examples/genesis_cartpole.py (a SimulatorEnv on Genesis 1.4.5, its CPU backend).

Run it with the cached venv that ``scripts/simulator_venv.sh genesis`` builds (once) and
prints; ``scripts/test.sh`` does, after the main suite::

    VENV=$(scripts/simulator_venv.sh genesis | tail -n 1)
    GPU_ENVS_REQUIRE_GENESIS=1 PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -m "slow or not slow" tests/genesis

Elsewhere (the main suite, no genesis) its modules are not collected (``tests/conftest.py``
leaves the folder out); under ``GPU_ENVS_REQUIRE_GENESIS=1`` a missing genesis is an import
error, never a silent skip. The first run on a machine compiles Genesis' kernels (about 30 s
on 2 cores) into Quadrants' offline cache, ``~/.cache/quadrants``, which later runs reuse.
"""

import importlib.util
import os

collect_ignore_glob = (
    []
    if os.environ.get("GPU_ENVS_REQUIRE_GENESIS") == "1" or importlib.util.find_spec("genesis") is not None
    else ["test_*.py"]
)
