"""Exact time-out bootstrapping for the trainers that approximate it: which rows, from which observation.

When an episode is cut by a time limit, the value target of its last step is
``r + gamma * V(s_T)``, with ``s_T`` the observation the episode actually reached. gpu_envs
keeps ``s_T`` in ``("next", obs)`` (the true final observation), but three trainers never
look there:

* rsl_rl (rsl-rl-lib 5.x) adds ``gamma * V(s_t)`` on ``time_outs``: the value of the state
  the action was taken in;
* skrl's on-policy agents (``time_limit_bootstrap=True``) add ``gamma * V(s')`` with ``s'``
  the observation the trainer acts on next: the post-reset one; without the option the
  advantage runs on into the next episode;
* rl_games (``value_bootstrap``) adds ``gamma * V(s_t)``, as rsl_rl does.

Each adapter's ``bootstrap_from(trainer)`` makes those targets exact with the trainer's
own critic; this module holds what they share: the rows to bootstrap
(:func:`bootstrap_rows`), the observation to evaluate (:func:`final_observation`) and the
check that the installed trainer is one whose code the hook was written against
(:func:`require_version`).

Rows whose final observation the backend could not give (``("next",
"final_obs_missing")``: Isaac Lab without ``compute_final_obs``) keep the trainer's own
approximation: there is no ``s_T`` to evaluate.

Example::

    exact, fallback = bootstrap_rows(td["next"], num_envs)
    s_T = final_observation(td["next"], root, "policy")      # placeholders -> post-reset obs
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import torch
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from tensordict import TensorDictBase

from gpu_envs.contract.errors import MissingComponentError
from gpu_envs.contract.keys import FINAL_OBS_MISSING

__all__ = ["bootstrap_rows", "final_observation", "require_version"]


def require_version(package: str, supported: str, consumer: str) -> Version:
    """The installed version of ``package``, or a clear error if it is outside ``supported``.

    ``bootstrap_from`` hooks into a trainer's collection code, which was read from the
    versions in ``supported`` (a PEP 440 specifier such as ``">=5.0,<6"``); another
    version may store its targets elsewhere, so it is refused instead of silently
    doing nothing.
    """
    try:
        installed = Version(metadata.version(package))
    except metadata.PackageNotFoundError as err:
        raise MissingComponentError(
            f"{consumer} needs {package}, which is not installed: pip install {package}"
        ) from err
    if installed not in SpecifierSet(supported):
        raise MissingComponentError(
            f"{consumer} hooks into {package}'s own value targets and supports {package}{supported}, but "
            f"{package} {installed} is installed. Install a supported version (pip install '{package}{supported}') "
            "or train without bootstrap_from (the library's own time-out handling)."
        )
    return installed


def bootstrap_rows(nxt: TensorDictBase, num_envs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(exact, fallback)``, each ``[N]`` bool, for one step's ``td["next"]``.

    ``exact``: truncated rows whose true final observation is in ``nxt`` (bootstrap from
    V(s_T)); ``fallback``: truncated rows holding a placeholder instead (the trainer's own
    approximation stays). No host sync.
    """
    truncated = nxt.get("truncated").view(num_envs)
    missing = nxt.get(FINAL_OBS_MISSING, None)
    if missing is None:
        return truncated, torch.zeros_like(truncated)
    missing = missing.view(num_envs)
    return truncated & ~missing, truncated & missing


def final_observation(nxt: TensorDictBase, root: TensorDictBase, key: Any) -> torch.Tensor:
    """``nxt[key]`` (the true final observation where an episode ended), with placeholders replaced.

    Where the backend left a placeholder (NaN for floats), the post-reset observation of
    ``root`` stands in, so a critic evaluated on every row never sees a NaN; those rows
    are :func:`bootstrap_rows`' ``fallback`` and their value is not used.
    """
    value = nxt.get(key)
    missing = nxt.get(FINAL_OBS_MISSING, None)
    if missing is None:
        return value

    def swap(final: torch.Tensor, reset: torch.Tensor) -> torch.Tensor:
        return torch.where(missing.reshape(missing.shape[0], *([1] * (final.dim() - 1))), reset, final)

    if isinstance(value, TensorDictBase):  # a Dict group (Isaac Lab's non-concatenated terms)
        return value.apply(swap, root.get(key))
    return swap(value, root.get(key))
