"""The backend contract: what every env family adapter hands to :class:`BatchedEnv`.

A backend is the ONLY layer that reads foreign types (numpy arrays, JAX arrays, info
dicts, observation groups). It returns plain torch tensors on the target device in a
:class:`RawStep`, and it never builds a TensorDict: that is :mod:`gpu_envs.core`'s job.

Every backend behaves like a *same-step auto-resetting* vector env: when a row ends in
``step``, the backend resets it before returning, reports the post-reset observation in
``RawStep.obs`` and, where it can, the true final observation in ``RawStep.final_obs``.
Backends over envs that reset differently (gymnasium's NEXT_STEP or DISABLED modes, a
single env) translate to this one shape, so the layers above have one path.

What a backend can do is declared in class attributes, read once by the env (never
found out by probing methods): ``trusted_outputs`` (its tensors are its own, in its
specs' layout: checked on the first step only), ``final_obs_kind`` (which final
observations it gives: :class:`~gpu_envs.contract.final_obs.FinalObsKind`) and
``direct_transition`` (it can hand the env a function that steps straight into a
:class:`RawStep`'s fields, see :meth:`Backend.transition`) and ``snapshot_rows`` (its
:meth:`Backend.get_state` / :meth:`Backend.set_state` snapshot and restore rows exactly,
see :mod:`gpu_envs.core.snapshot`).

Example (a minimal backend over something that already speaks torch)::

    class MyBackend(Backend):
        final_obs_kind = FinalObsKind.SIMULATOR

        def reset(self, seed=None, mask=None):
            return {"observation": self.sim.reset(seed)}

        def step(self, action):
            obs, rew, term, trunc, final = self.sim.step(action)   # [N] flat values
            reward, term, trunc, done = flag_columns(rew, term, trunc, (self.num_envs, 1))
            return RawStep(obs={"observation": obs}, reward=reward, terminated=term, truncated=trunc,
                           done=done, final_obs={"observation": final}, final_mask=done)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import NamedTuple

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import RolloutError, SnapshotError
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Composite, Spec

__all__ = ["NO_INFO", "Backend", "RawStep"]

NO_INFO: ObsDict = {}  # the info entries of a step that has none (one constant, never written)


class RawStep(NamedTuple):
    """One vector step, as torch tensors on the target device: ONE shape for every backend.

    Build it with keywords (``RawStep(obs=..., reward=..., ...)``). It is a tuple, so a
    backend's direct transition (:meth:`Backend.transition`) can hand the same fields,
    in this order, as a plain tuple.

    Every tensor is the backend's to give away: it is never written again after
    ``step`` returns (a transition handed out stays as it was; copy what the simulator
    rewrites in place).

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


class Backend(ABC):
    """Adapter from one env family to torch tensors on ``device``.

    Subclasses set ``num_envs``, ``device``, ``observation_spec`` (a Composite whose
    leaves are the observation keys), ``action_spec`` and, if they emit info entries,
    ``info_spec``: ONE env's specs, without batch dims (the env exposes them as
    ``env.single_*_spec`` and adds the batch dims for ``env.*_spec``). ``reward_spec``
    stays ``None`` for a scalar reward (the env exposes it as ``[N, 1]``); a backend whose
    reward is a vector (K objectives of a multi-objective env) sets it to ONE env's float32
    ``Box`` of shape ``(K,)``, and ``("next", "reward")`` is then ``[N, K]``.
    ``supports_partial_reset`` says whether ``reset(mask=...)`` can reset
    a subset of rows. ``name`` is shown in ``repr``.
    """

    name: str = "backend"
    # True when every tensor the backend returns is one it made itself, in the layout of its
    # specs (the gymnasium and JAX backends, the built-in envs): BatchedEnv then checks the
    # outputs' metadata on the first step only, instead of on every step.
    trusted_outputs: bool = False
    # Which final observations the backend gives: a FinalObsKind, or a tuple of them when it
    # depends on the simulator's options (an instance may then narrow it to the one in force).
    # docs/ARCHITECTURE.md's backend table lists them; every registered backend declares one.
    final_obs_kind: FinalObsKind | tuple[FinalObsKind, ...] | None = None
    # True when transition() may hand the env a function stepping the simulator straight
    # into a RawStep's fields (no RawStep object, no backend call in between); see transition().
    direct_transition: bool = False
    num_envs: int
    device: torch.device
    observation_spec: Composite
    action_spec: Spec
    info_spec: Composite
    reward_spec: Spec | None = None
    supports_partial_reset: bool = False
    # True when get_state/set_state snapshot and restore rows exactly (the continuation after a
    # restore is bitwise the original's); an instance may narrow it (a torch env without the
    # snapshot protocol). snapshot_refusal() says why not, and what works instead.
    snapshot_rows: bool = False

    @abstractmethod
    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        """Reset all rows (``mask is None``) or the rows where ``mask`` ``[N]`` is True.

        Returns the observation of ALL rows (unchanged ones included).
        """

    @abstractmethod
    def step(self, action: torch.Tensor) -> RawStep:
        """Step every row once, auto-resetting rows that end (same-step semantics)."""

    def transition(self) -> Callable[[torch.Tensor], tuple] | None:
        """For a backend with ``direct_transition``: ``action -> RawStep's fields`` (a plain tuple), or None.

        The env asks once after its first step and after every full reset; while the
        function is in force the env calls it INSTEAD of :meth:`step`, so it must do
        exactly what ``step`` would, handing the same eight fields in :class:`RawStep`'s
        order without building the object (the torch backend hands the built-in envs'
        ``step_transition`` this way). ``None`` (the default, and whenever the backend is
        in a state where ``step`` does more): the env calls :meth:`step`.
        """
        return None

    def check_usable(self) -> None:  # noqa: B027 - optional hook
        """Raise a clear error if the simulator can no longer be used (died, closed).

        :class:`~gpu_envs.core.env.BatchedEnv` asks this first when a step was interrupted,
        so that a backend that knows why (a dead worker process) says so.
        """

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The simulator's per-step state as live tensors (see :mod:`gpu_envs.utils.state_dicts`).

        This default refuses: most simulators (numpy envs, JAX arrays, a physics engine)
        keep their state outside torch tensors, where a CUDA graph cannot replay it.
        """
        raise RolloutError(
            f"the {self.describe()} backend keeps its simulator's state outside torch tensors, so it has no "
            "state_dict(); a CUDA graph can only replay envs whose per-step state lives in device tensors "
            "(torch vector envs). Use cudagraph=False for this env."
        )

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Take the values of a :meth:`state_dict` (refused where that is)."""
        self.state_dict()  # raises where the state is not torch tensors
        raise NotImplementedError(f"{type(self).__name__} has a state_dict() but no load_state_dict()")

    # ------------------------------------------------------------ row snapshots
    def get_state(self, rows: torch.Tensor) -> TensorDictBase:
        """The simulator state of ``rows``, a TensorDict ``[len(rows)]`` (backends with ``snapshot_rows``).

        ``rows``: int64 ``[k]`` on the env's device, each in ``[0, N)`` (repeats allowed).
        Everything the rows' continuation depends on (physics state, step counters, random
        streams), as copies: :meth:`set_state` of it makes the same continuation again,
        bitwise, into the same rows or others. :mod:`gpu_envs.core.snapshot` checks the
        arguments and adds what the env itself holds (the cached root observations).
        """
        raise SnapshotError(self.snapshot_refusal())

    def set_state(self, state: TensorDictBase, rows: torch.Tensor) -> None:
        """Restore ``state`` (a :meth:`get_state` result, checked against its layout) into ``rows`` (distinct)."""
        raise SnapshotError(self.snapshot_refusal())

    def snapshot_refusal(self) -> str:
        """Why this backend cannot snapshot rows, and what can (the text of the SnapshotError)."""
        return (
            f"the {self.describe()} backend cannot snapshot and restore rows exactly (get_state/set_state): its "
            "simulator keeps state gpu_envs cannot read and write back. Snapshots work for the built-in envs, torch "
            "vector envs with get_state(rows)/set_state(state, rows) (gpu_envs.contract.protocols.RowStateEnv), JAX "
            "envs and gymnasium SyncVectorEnv envs whose sub-envs can be deep-copied."
        )

    def close(self) -> None:  # noqa: B027 - optional hook, most backends own nothing
        """Release the simulator's resources. Called once by ``BatchedEnv.close``."""

    def recover(self) -> None:  # noqa: B027 - optional hook, most backends need nothing
        """Make the simulator callable again after a ``reset``/``step`` that did not finish.

        Called by ``BatchedEnv.reset`` after an interrupted call (an exception or Ctrl-C
        escaped it), right before the full reset that follows. In-process simulators need
        nothing (the reset restores them); backends that talk to other processes drain
        or restart them here.
        """

    def describe(self) -> str:
        """A short text for ``repr``: the wrapped object's type."""
        return self.name
