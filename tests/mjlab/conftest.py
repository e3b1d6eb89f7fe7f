"""The real mjlab tier: mjlab 1.6.0 (MuJoCo Warp on the CPU) tasks through gpu_envs.

Run it with the cached venv that ``scripts/simulator_venv.sh mjlab`` builds (once) and
prints; ``scripts/test.sh`` does, after the main suite::

    VENV=$(scripts/simulator_venv.sh mjlab | tail -n 1)
    GPU_ENVS_REQUIRE_MJLAB=1 PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -m "slow or not slow" tests/mjlab

In the main suite (no mjlab) its modules are not collected, as the Brax and ManiSkill
tiers' are not; the backend's logic is still tested there through a fake
(``tests/test_mjlab_fake.py``). Under ``GPU_ENVS_REQUIRE_MJLAB=1`` a missing mjlab is an
import error, never a silent skip. The first mjlab env of a machine compiles MuJoCo
Warp's CPU kernels (about 35 s on an idle core, cached in ``~/.cache/warp``).
"""

import importlib.util
import os

collect_ignore_glob = (
    []
    if os.environ.get("GPU_ENVS_REQUIRE_MJLAB") == "1" or importlib.util.find_spec("mjlab") is not None
    else ["test_*.py"]
)
