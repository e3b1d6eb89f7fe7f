"""Deprecated module name: ``check_env`` lives in :mod:`gpu_envs.env_checker` (``gpu_envs.check_env``).

Kept for one release so that ``from gpu_envs.check import check_env`` keeps working.

Example::

    from gpu_envs import check_env            # or: from gpu_envs.env_checker import check_env
"""

from __future__ import annotations

import warnings

from gpu_envs.env_checker import check_env

__all__ = ["check_env"]

warnings.warn(
    "gpu_envs.check was renamed gpu_envs.env_checker (check_env is also gpu_envs.check_env); "
    "the old module name goes away in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
