"""The ManiSkill3 tier runs in its own venv; elsewhere its modules are not collected.

``scripts/test.sh`` runs it as ``GPU_ENVS_REQUIRE_MANISKILL=1 "$VENV/bin/python" -m pytest
tests/maniskill`` with ``VENV=$(scripts/simulator_venv.sh maniskill | tail -n 1)``; there a
missing ManiSkill is an import error, never a silent skip.

SAPIEN builds every scene's visual materials on a Vulkan device, even with
``render_backend="none"``. The venv carries lavapipe (Mesa's CPU Vulkan driver, unpacked
by ``scripts/simulator_venv.sh maniskill``); this points the Vulkan loader at it before
SAPIEN is imported, unless ``VK_ICD_FILENAMES`` is set already.
"""

import importlib.util
import os
import sys

_ICD = os.path.join(sys.prefix, "lavapipe", "lvp_icd.json")
if "VK_ICD_FILENAMES" not in os.environ and os.path.exists(_ICD):
    os.environ["VK_ICD_FILENAMES"] = _ICD

collect_ignore_glob = (
    []
    if os.environ.get("GPU_ENVS_REQUIRE_MANISKILL") == "1" or importlib.util.find_spec("mani_skill") is not None
    else ["test_*.py"]
)
