"""Importing the library an adapter needs, or saying which pip extra installs it.

Every adapter module imports its training library through :func:`require` at the top,
so ``from gpu_envs.interop import to_sb3`` without Stable-Baselines3 fails with one
clear :class:`~gpu_envs.contract.errors.MissingComponentError` naming the install command,
instead of a bare ``ModuleNotFoundError`` from deep inside an import.

Example::

    vec_env = require("stable_baselines3.common.vec_env", package="stable-baselines3", extra="sb3", consumer="to_sb3")
    class SB3VecEnv(vec_env.VecEnv): ...
"""

from __future__ import annotations

import importlib
from types import ModuleType

from gpu_envs.contract.errors import MissingComponentError


def require(module: str, *, package: str, extra: str, consumer: str, note: str = "") -> ModuleType:
    """Import ``module`` (of the pip package ``package``), or explain how to install it.

    Args:
        module: what to import, e.g. ``"stable_baselines3.common.vec_env"``.
        package: the pip name of the library, e.g. ``"stable-baselines3"``.
        extra: the gpu-envs extra that installs it, e.g. ``"sb3"``.
        consumer: the gpu_envs function that needs it, e.g. ``"to_sb3"``.
        note: a sentence added to the advice (how to install a package whose metadata needs care).
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingComponentError(
            f"gpu_envs.interop.{consumer} needs {package}, which could not be imported ({err}). "
            f'Install it with: pip install ".[{extra}]" in the gpu_envs clone (or pip install {package}).{note}'
        ) from err
