"""The Newton tier: examples/newton_pendulum.py (a SimulatorEnv on Newton 1.8.0, Warp on the CPU).

Run it with the cached venv that ``scripts/simulator_venv.sh newton`` builds (once) and
prints; ``scripts/test.sh`` does, after the main suite::

    VENV=$(scripts/simulator_venv.sh newton | tail -n 1)
    GPU_ENVS_REQUIRE_NEWTON=1 PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -m "slow or not slow" tests/newton

Elsewhere (the main suite, no newton) its modules are not collected; under
``GPU_ENVS_REQUIRE_NEWTON=1`` a missing newton is an import error, never a silent skip. The
first run on a machine compiles Newton's Warp kernels into ``~/.cache/warp``.
"""

import importlib.util
import os

collect_ignore_glob = (
    []
    if os.environ.get("GPU_ENVS_REQUIRE_NEWTON") == "1" or importlib.util.find_spec("newton") is not None
    else ["test_*.py"]
)
