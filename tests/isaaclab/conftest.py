"""The real Isaac Lab tier: Isaac Lab 3.0.0 cartpoles on the CPU, through gpu_envs.

Run it with the Python 3.12 venv that ``scripts/isaaclab_venv.sh`` builds (once) and
prints::

    VENV=$(scripts/isaaclab_venv.sh) && "$VENV/bin/python" -m pytest tests/isaaclab -q

The main suite (``tests/conftest.py``) does not collect this folder where isaaclab is
missing; here a missing isaaclab is an error, never a skip. Importing
``tests.isaaclab.cartpoles`` first points Isaac Lab at the project's own assets.
"""

from tests.isaaclab import cartpoles  # noqa: F401  (sets ISAACSIM_ASSET_ROOT, imports isaaclab)
