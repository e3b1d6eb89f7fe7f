"""The Brax / Playground tier runs in its own venv; elsewhere its modules are not collected.

``scripts/test.sh`` runs it as ``GPU_ENVS_REQUIRE_BRAX=1 "$VENV/bin/python" -m pytest
tests/brax`` with ``VENV=$(scripts/simulator_venv.sh brax | tail -n 1)``; there a missing
Brax is an import error, never a silent skip.
"""

import importlib.util
import os

collect_ignore_glob = (
    []
    if os.environ.get("GPU_ENVS_REQUIRE_BRAX") == "1" or importlib.util.find_spec("brax") is not None
    else ["test_*.py"]
)
