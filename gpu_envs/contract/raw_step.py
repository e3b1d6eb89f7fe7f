"""``RawStep``: one vector step's fields, the shape every simulator hands to the core.

Every backend -- and a built-in env's own ``raw_step`` -- returns one step as a
:class:`RawStep` of torch tensors on the target device; :mod:`gpu_envs.core` turns it
into the transition's TensorDicts (the final-observation rule of
:mod:`gpu_envs.contract.final_obs` makes ``("next", obs keys)`` from ``obs``,
``final_obs`` and ``final_mask``). It lives in the contract, below the built-in envs and
the backends, because both produce it.

Example::

    >>> import torch
    >>> from gpu_envs.contract.raw_step import RawStep
    >>> flags = torch.zeros(4, 1, dtype=torch.bool)
    >>> raw = RawStep(obs={"observation": torch.zeros(4, 3)}, reward=torch.zeros(4, 1), terminated=flags,
    ...               truncated=flags, done=flags, final_obs={"observation": torch.ones(4, 3)})
    >>> raw.final_mask is None    # final_obs valid on every row
    True
    >>> raw._fields[:3]
    ('obs', 'reward', 'terminated')
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gpu_envs.contract.keys import ObsDict

__all__ = ["NO_INFO", "RawStep"]

NO_INFO: ObsDict = {}  # the info entries of a step that has none (one constant, never written)


class RawStep(NamedTuple):
    """One vector step, as torch tensors on the target device: ONE shape for every backend.

    Build it with keywords (``RawStep(obs=..., reward=..., ...)``); a hot path may pass
    the fields positionally, in this order. The step path reads it by field name, and its
    steady step unpacks it (the order is part of the type).

    Every tensor is the backend's to give away: it is never written again after
    ``step`` returns (a transition handed out stays as it was; copy what the simulator
    rewrites in place). The one exception is asked for by the caller: while
    ``Backend.reuse_outputs(True)`` is in force (a random-action ``collect`` copying each
    step at once), a backend that agreed may rewrite a step's tensors two steps later.

    Attributes:
        obs: observation per key, ``[N, *shape]``; post-reset on rows that ended (what
            the next step acts on). Keys: ``"observation"`` for a lone observation, group
            names otherwise; tuple keys for nested dicts.
        reward: ``[N, 1]`` float32 (``[N, K]`` for a backend that declares a K-objective
            ``reward_spec``).
        terminated, truncated, done: ``[N, 1]`` bool, ``done == terminated | truncated``
            (:func:`gpu_envs.backends.common.flag_columns` makes them from flat ``[N]`` values).
        final_obs: the pre-reset observations, a dict like ``obs``, or ``None`` when the
            simulator cannot give them (ended rows then get placeholders and
            ``("next", "final_obs_missing")``).
        final_mask: ``None``: ``final_obs`` is valid on EVERY row (each row's pre-reset
            observation: the final one where an episode ended, the plain next one
            elsewhere). A ``[N]`` or ``[N, 1]`` bool tensor: valid only on those rows
            (pass ``done`` itself for "on the rows that ended"). The rule that turns
            these into the transition is :mod:`gpu_envs.contract.final_obs`'s.
        info: extra numeric entries ``[N, ...]`` placed under ``("next", key)``;
            :data:`NO_INFO` when none.
    """

    obs: ObsDict
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    done: torch.Tensor
    final_obs: ObsDict | None = None
    final_mask: torch.Tensor | None = None
    info: ObsDict = NO_INFO
