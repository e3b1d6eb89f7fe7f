"""Collection rules for the whole suite.

``tests/isaaclab/`` is the real Isaac Lab tier: it needs Python 3.12 and the Isaac Lab
venv, and runs on its own with that venv's python::

    VENV=$(scripts/isaaclab_venv.sh) && "$VENV/bin/python" -m pytest tests/isaaclab -q

Where isaaclab is not installed (the main suite) that folder is not collected at all,
instead of showing up as a wall of skips; the Isaac Lab contract is still tested there
through the fakes (tests/test_isaaclab_fake.py).
"""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("isaaclab") is not None else ["isaaclab"]
