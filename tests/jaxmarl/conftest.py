"""The JaxMARL tier runs in its own venv; elsewhere its modules are not collected.

``scripts/test.sh`` runs it as ``GPU_ENVS_REQUIRE_JAXMARL=1 "$VENV/bin/python" -m pytest
tests/jaxmarl`` with ``VENV=$(scripts/simulator_venv.sh jaxmarl | tail -n 1)``; there a missing
JaxMARL is an import error, never a silent skip. (``tests/conftest.py`` leaves the whole
folder out of a suite run where JaxMARL is missing; this rule covers a run started here.)
"""

import importlib.util
import os

collect_ignore_glob = (
    []
    if os.environ.get("GPU_ENVS_REQUIRE_JAXMARL") == "1" or importlib.util.find_spec("jaxmarl") is not None
    else ["test_*.py"]
)
