"""Small device-aware specs (moved from ``gpu_envs/specs.py``; split next)."""

from gpu_envs.specs.box import *  # noqa: F403
from gpu_envs.specs.box import __all__  # noqa: F401
