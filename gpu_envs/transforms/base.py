"""The ``Transform`` interface: small TensorDict -> TensorDict pieces between env and learner.

A transform is a tiny, composable module (in the spirit of Brax's wrappers) that sees
every TensorDict crossing one layer of a :class:`~gpu_envs.transforms.TransformedEnv`:

* ``setup(specs)`` once, when the env is built: allocate per-env state on the device
  and return the specs as seen *above* the transform (e.g. ``ActionRescale`` exposes a
  ``Box(-1, 1)`` action spec). These are per-env specs (``env.single_*_spec``); the
  TransformedEnv adds the batch dims for its ``env.*_spec``;
* ``inv(td)`` on the way down: rewrite ``"action"`` before the env steps;
* ``step(td)`` on the way up: rewrite or add ``("next", ...)`` entries after a step;
* ``root(td)`` on every root TensorDict (the input of the next step); calling it again must
  give the same result (it may finish, once, what ``step`` began: ``History`` restarts the
  windows of the rows that ended from their reset observations there, since only the root
  holds them);
* ``reset(td, mask)`` after a reset of the rows where ``mask`` ``[N, 1]`` is True;
* ``reseed(seed)`` when the env's generator was seeded again (``env.reset(seed=...)``):
  transforms that draw random numbers (``Delay``) restart their streams from it.

Rules every transform follows (they keep the hot path fast and correct):

* no host synchronisation in ``inv``/``step``/``root``/``reset``: ``torch.where`` and
  arithmetic masks only, never ``.item()``, ``bool(t)`` or boolean-mask indexing;
* never write into a tensor it did not allocate (set new tensors in the TensorDict;
  the env may still hold the old ones); its own state is updated in place;
* ``setup`` returns NEW spec objects rather than mutating the ones it is given.

Example (a transform that adds a constant to the reward)::

    class AddOne(Transform):
        def step(self, td):
            td.set(("next", "reward"), td.get(("next", "reward")) + 1)
            return td

    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=8), AddOne())
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.specs import Composite, Spec

__all__ = ["EnvSpecs", "Transform"]


@dataclass(frozen=True)
class EnvSpecs:
    """What a transform learns about the env below it, and hands on (changed) to the one above.

    Attributes: ``num_envs``, ``device`` and ONE env's specs (no batch dims, the env's
    ``single_*_spec``): ``observation_spec`` (a Composite of the observation keys),
    ``action_spec``, ``reward_spec``, ``done_spec`` and ``info_spec`` (extra
    ``("next", key)`` entries); ``seed``: the env's seed when it is built (the
    ``initial_seed()`` of its generator; ``None`` for an env without one), from which a
    transform that draws random numbers keys its own stream (see :meth:`Transform.reseed`).
    """

    num_envs: int
    device: torch.device
    observation_spec: Composite
    action_spec: Spec
    reward_spec: Spec
    done_spec: Composite
    info_spec: Composite
    seed: int | None = None

    def replace(self, **changes: Any) -> EnvSpecs:
        """A copy with some fields replaced: ``specs.replace(action_spec=Box(-1, 1, (2,)))``."""
        return dataclasses.replace(self, **changes)


class Transform:
    """Base class: every hook is the identity, so a subclass overrides only what it changes.

    A transform instance holds the state of ONE env (per-env running values); build a
    new instance per :class:`TransformedEnv` (share statistics with ``statistics``).
    """

    num_envs: int
    device: torch.device
    # set by TransformedEnv: raises the env's pending health-check flags (one sync); statistics
    # transforms call it before they hand numbers to the host (gpu_envs.core.health)
    check_health: Callable[[], None] | None = None
    # Per-row snapshots (TransformedEnv.get_state/set_state): the names, among live_state(),
    # of the tensors with one row per env ([N, ...]), restored row by row; the others are shared
    # by all rows (statistics), restored only by a full set_state. None: this transform keeps
    # state outside live_state(), so a snapshot cannot hold it (get_state is refused).
    row_state: tuple[str, ...] | None = ()

    def __init__(self) -> None:
        self._bound = False

    # ------------------------------------------------------------------ setup
    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        """Bind to an env: allocate state on ``specs.device``, return the specs seen above.

        Subclasses call ``super().setup(specs)`` first.
        """
        if getattr(self, "_bound", False):
            raise InvalidArgumentError(
                f"{type(self).__name__} is already part of another TransformedEnv; a transform holds "
                "one env's state. Create a new instance (copy statistics with statistics/load_statistics)."
            )
        self._bound = True
        self.num_envs = specs.num_envs
        self.device = specs.device
        return specs

    # ------------------------------------------------------------ data hooks
    def inv(self, td: TensorDictBase) -> TensorDictBase:
        """Rewrite the input of a step (``"action"``) on its way down to the env."""
        return td

    def step(self, td: TensorDictBase) -> TensorDictBase:
        """Rewrite the output of a step (``("next", ...)`` entries) on its way up."""
        return td

    def root(self, td: TensorDictBase) -> TensorDictBase:
        """Rewrite a root TensorDict (observations the policy acts on).

        Idempotent: a second call gives the same. After ``step_and_maybe_reset`` it is called
        with the root whose ended rows were just reset (the only place their reset
        observations appear), so a transform with per-row queues restarts those rows here,
        marked in ``step``, and clears the mark.
        """
        return td

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        """Called after the rows where ``mask`` (bool ``[N, 1]``) were reset; returns the root.

        The default applies :meth:`root`; stateful transforms also clear those rows.
        """
        return self.root(td)

    def attach(self, env: Any) -> None:
        """Meet the env below (before :meth:`setup`); nothing by default.

        For the few transforms that drive the simulator itself (``Randomize`` calls its
        ``set_params``): they look up what they need here, and refuse an env without it.
        """

    def reseed(self, seed: int) -> None:
        """The env was seeded with ``seed`` (its generator's ``initial_seed()``); nothing to do by default.

        Called by :meth:`TransformedEnv.reset` before the transforms see the reset, whenever the
        env's seed differs from the one last handed down (``EnvSpecs.seed`` at setup), so a
        transform's random draws are a function of the env's seed, as the env's own are.
        """

    # ------------------------------------------------------ shared statistics
    def pending_stats(self) -> torch.Tensor | None:
        """Statistics this process gathered since the last merge, as ONE flat float64 tensor.

        ``None`` (the default) for transforms without statistics. Used by
        :func:`gpu_envs.distributed.sync_stats`, which gathers it from every process.
        """
        return None

    def merge_stats(self, gathered: torch.Tensor) -> None:
        """Fold in every process's :meth:`pending_stats` (rows of ``gathered``, in rank order).

        Afterwards the statistics are those of all processes' data; each process
        computes the same result from the same rows, so all of them agree.
        """

    # ----------------------------------------------------------------- state
    def live_state(self) -> dict[str, torch.Tensor]:
        """Every tensor this transform updates per step, live (not copies); none by default.

        Unlike :meth:`statistics` (copies of the statistics worth saving or sharing), this
        is its whole per-step state, updated in place: ``TransformedEnv.live_state()``
        includes it, which is how a CUDA-graph collection knows it (see
        :mod:`gpu_envs.utils.live_state`).
        """
        return {}

    def statistics(self) -> dict[str, torch.Tensor]:
        """Copies of the statistics worth saving or sharing (``torch.save`` them); empty for stateless transforms."""
        return {}

    def load_statistics(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what :meth:`statistics` returned."""
        if state:
            raise InvalidArgumentError(f"{type(self).__name__} has no statistics; got keys {sorted(state)}.")

    # the names before statistics / load_statistics / live_state, kept one release
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Deprecated name of :meth:`statistics` (goes away in the next release)."""
        _renamed(type(self).__name__, "state_dict", "statistics")
        return self.statistics()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Deprecated name of :meth:`load_statistics` (goes away in the next release)."""
        _renamed(type(self).__name__, "load_state_dict", "load_statistics")
        self.load_statistics(state)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Deprecated name of :meth:`live_state` (goes away in the next release)."""
        _renamed(type(self).__name__, "state_tensors", "live_state")
        return self.live_state()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A user transform written with the old method names keeps working: they stand for the new ones."""
        super().__init_subclass__(**kwargs)
        for old, new in _OLD_NAMES.items():
            if old in cls.__dict__ and new not in cls.__dict__:
                _renamed(cls.__name__, old, new, stacklevel=3)
                setattr(cls, new, cls.__dict__[old])

    def check_bound(self, what: str) -> None:
        """Refuse reading state before ``setup`` (the transform is part of no TransformedEnv yet)."""
        if not getattr(self, "_bound", False):
            raise InvalidArgumentError(
                f"{type(self).__name__}.{what} needs the transform to be set up: build the TransformedEnv with it first."
            )

    def _check_state(self, state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
        """Refuse a state dict whose keys or shapes differ from ``expected`` (this instance's)."""
        if not getattr(self, "_bound", False):
            raise InvalidArgumentError(
                f"{type(self).__name__}.load_statistics needs the transform to be set up: build the "
                "TransformedEnv first, then load the state into its transform."
            )
        if set(state) != set(expected):
            raise InvalidArgumentError(
                f"{type(self).__name__} state keys {sorted(state)} do not match {sorted(expected)}; "
                "load a statistics saved from the same transform over the same observation keys."
            )
        for key, value in expected.items():
            got = state[key]
            if not isinstance(got, torch.Tensor) or got.shape != value.shape:
                raise InvalidArgumentError(
                    f"{type(self).__name__} state {key!r} must be a tensor of shape {tuple(value.shape)}, "
                    f"got {getattr(got, 'shape', type(got).__name__)}."
                )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


_OLD_NAMES = {"state_dict": "statistics", "load_state_dict": "load_statistics", "state_tensors": "live_state"}


def _renamed(owner: str, old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(
        f"{owner}.{old} is the old name of Transform.{new}; the old name goes away in the next release.",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
