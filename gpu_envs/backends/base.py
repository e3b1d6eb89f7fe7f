"""The backend contract: what every env family adapter hands to :class:`BatchedEnv`.

A backend is the ONLY layer that reads an env's own outputs (numpy arrays, JAX arrays, info
dicts, observation groups; the other modules using foreign types, and why, are listed in
docs/ARCHITECTURE.md). It returns plain torch tensors on the target device in a
:class:`RawStep`, and it never builds a TensorDict: that is :mod:`gpu_envs.core`'s job.

Every backend behaves like a *same-step auto-resetting* vector env: when a row ends in
``step``, the backend resets it before returning, reports the post-reset observation in
``RawStep.obs`` and, where it can, the true final observation in ``RawStep.final_obs``.
Backends over envs that reset differently (gymnasium's NEXT_STEP or DISABLED modes, a
single env) translate to this one shape, so the layers above have one path.

What a backend can do is declared once, in one frozen :class:`Capabilities` (the
``capabilities`` class attribute; an instance may narrow it to what its simulator
allows), read by the env when it binds its step path -- never found out by probing
methods, as rsl_rl's ``VecEnv`` declares its few attributes.

Example (a minimal backend over something that already speaks torch)::

    class MyBackend(Backend):
        capabilities = Capabilities(final_obs=FinalObsKind.SIMULATOR)

        def reset(self, seed=None, mask=None):
            return {"observation": self.sim.reset(seed)}

        def step(self, action):
            obs, rew, term, trunc, final = self.sim.step(action)   # [N] flat values
            reward, term, trunc, done = flag_columns(rew, term, trunc, (self.num_envs, 1))
            return RawStep(obs={"observation": obs}, reward=reward, terminated=term, truncated=trunc,
                           done=done, final_obs={"observation": final}, final_mask=done)
"""

from __future__ import annotations

import dataclasses
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import RolloutError, SnapshotError
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.protocols import OutputTargets, SelfCheckedStep
from gpu_envs.contract.raw_step import NO_INFO, RawStep
from gpu_envs.contract.specs import Composite, Spec

__all__ = ["NO_INFO", "Backend", "Capabilities", "RawStep"]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do: the one declaration :class:`~gpu_envs.core.env.BatchedEnv` reads.

    Frozen: a backend class declares it (``capabilities = Capabilities(...)``); an instance
    whose simulator allows less (or exactly one of several kinds) replaces its own copy
    with :meth:`replace` in ``__init__``, before the env reads it.

    Attributes:
        final_obs: which final observations the backend gives
            (:class:`~gpu_envs.contract.final_obs.FinalObsKind`), or a tuple of them on
            the class when it depends on the simulator or its options (an instance then
            narrows it to the one in force). ``docs/ARCHITECTURE.md``'s backend table
            lists them; every registered backend declares one.
        trusted_outputs: every tensor the backend returns is one it made itself, in the
            layout of its specs (the gymnasium and JAX backends, the built-in envs): the
            env checks the outputs' metadata on the first step only, instead of on every
            step.
        direct_step: :meth:`Backend.direct_step` may hand the env a function stepping the
            simulator straight into a :class:`RawStep` (no backend call in between).
        partial_reset: ``reset(mask=...)`` resets a subset of rows (otherwise a masked
            reset of some rows is refused, one of all rows is a full reset).
        snapshot_rows: :meth:`Backend.get_state` / :meth:`Backend.set_state` snapshot and
            restore rows exactly (the continuation after a restore is bitwise the
            original's); :meth:`Backend.snapshot_refusal` says why not, and what works.
        inference_mode: the simulator may be stepped under ``torch.inference_mode``
            (``collect``'s middle steps are): it updates in place only tensors it made
            outside. False for simulators that make state tensors during a step and
            update them in place later (VMAS's scenarios): ``collect`` then steps them
            under ``torch.no_grad`` only.
        check_action_values: every step's action values are checked before the backend
            steps (finite, in the spec's range: one host sync), as ``validate=True`` does.
            For simulators that refuse bad actions themselves with a bare assertion and
            sync with the host every step anyway (VMAS): the refusal
            is then an ``ActionError`` naming the group and the fix, and the env stays usable.

    Example::

        class MyBackend(Backend):
            capabilities = Capabilities(final_obs=FinalObsKind.SIMULATOR, partial_reset=True)

            def __init__(self, sim):
                if not sim.can_reset_rows:
                    self.capabilities = self.capabilities.replace(partial_reset=False)
    """

    final_obs: FinalObsKind | tuple[FinalObsKind, ...] | None = None
    trusted_outputs: bool = False
    direct_step: bool = False
    partial_reset: bool = False
    snapshot_rows: bool = False
    inference_mode: bool = True
    check_action_values: bool = False

    def replace(self, **changes: Any) -> Capabilities:
        """A copy with some fields changed: ``caps.replace(partial_reset=False)``."""
        return dataclasses.replace(self, **changes)


# the attributes backends declared before Capabilities, and the field each became (kept one release)
_OLD_DECLARATIONS = {
    "final_obs_kind": "final_obs",
    "trusted_outputs": "trusted_outputs",
    "direct_transition": "direct_step",
    "supports_partial_reset": "partial_reset",
    "snapshot_rows": "snapshot_rows",
}


def _old_declaration(old: str) -> property:
    """A read/write alias of ``capabilities.<field>`` under its old attribute name, warning on writes."""
    field = _OLD_DECLARATIONS[old]

    def read(self: Backend) -> Any:
        return getattr(self.capabilities, field)

    def write(self: Backend, value: Any) -> None:
        warnings.warn(
            f"Backend.{old} is now Backend.capabilities.{field}: write "
            f"`self.capabilities = self.capabilities.replace({field}=...)`; the old name goes away in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        self.capabilities = self.capabilities.replace(**{field: value})

    return property(read, write, doc=f"``capabilities.{field}`` (deprecated name).")


class Backend(ABC):
    """Adapter from one env family to torch tensors on ``device``.

    Subclasses set ``num_envs``, ``device``, ``observation_spec`` (a Composite whose
    leaves are the observation keys), ``action_spec`` and, if they emit info entries,
    ``info_spec``: ONE env's specs, without batch dims (the env exposes them as
    ``env.single_*_spec`` and adds the batch dims for ``env.*_spec``). ``reward_spec``
    stays ``None`` for a scalar reward (the env exposes it as ``[N, 1]``); a backend whose
    reward is a vector (K objectives of a multi-objective env) sets it to ONE env's float32
    ``Box`` of shape ``(K,)``, and ``("next", "reward")`` is then ``[N, K]``.
    What it can do is its :class:`Capabilities`. ``name`` is shown in ``repr``.

    A backend of several agents (:mod:`gpu_envs.contract.groups`) sets ``group_map``
    (``{group: [agent names]}``); its ``action_spec`` is then a Composite with one
    ``(group, "action")`` leaf ``[A, *act]`` per group, ``step`` takes
    ``{(group, "action"): tensor}``, its observations are ``(group, key)`` entries
    ``[N, A, *obs]``, ``RawStep.reward`` / the flags are the env's (``[N, 1]``: the team
    reward, the sum over agents; the rows whose episode ended) and ``RawStep.info`` holds
    each agent's ``(group, "reward")`` and flags ``[N, A, 1]`` (``info_spec`` declares
    them: :func:`gpu_envs.contract.groups.group_info_spec`).
    """

    name: str = "backend"
    capabilities: Capabilities = Capabilities()
    num_envs: int
    device: torch.device
    observation_spec: Composite
    action_spec: Spec
    info_spec: Composite
    reward_spec: Spec | None = None
    group_map: dict[str, list[str]] | None = None

    # the declarations before Capabilities, as aliases of its fields (deprecated)
    final_obs_kind: ClassVar[property] = _old_declaration("final_obs_kind")
    trusted_outputs: ClassVar[property] = _old_declaration("trusted_outputs")
    direct_transition: ClassVar[property] = _old_declaration("direct_transition")
    supports_partial_reset: ClassVar[property] = _old_declaration("supports_partial_reset")
    snapshot_rows: ClassVar[property] = _old_declaration("snapshot_rows")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass declaring the old class attributes (``supports_partial_reset = True``) gets them as capabilities."""
        super().__init_subclass__(**kwargs)
        old = {name: cls.__dict__[name] for name in _OLD_DECLARATIONS if name in cls.__dict__}
        old = {name: value for name, value in old.items() if not isinstance(value, property)}
        if old:
            warnings.warn(
                f"{cls.__name__} declares {sorted(old)} as class attributes; declare them in one "
                "`capabilities = Capabilities(...)` (gpu_envs.backends.base); the old names go away in the next release.",
                DeprecationWarning,
                stacklevel=2,
            )
            for name in old:
                delattr(cls, name)
            cls.capabilities = cls.capabilities.replace(**{_OLD_DECLARATIONS[k]: v for k, v in old.items()})

    @abstractmethod
    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        """Reset all rows (``mask is None``) or the rows where ``mask`` ``[N]`` is True.

        Returns the observation of ALL rows (unchanged ones included).
        """

    @abstractmethod
    def step(self, action: torch.Tensor) -> RawStep:
        """Step every row once, auto-resetting rows that end (same-step semantics)."""

    def direct_step(self) -> Callable[[torch.Tensor], RawStep] | None:
        """For a backend with ``capabilities.direct_step``: a function ``action -> RawStep``, or None.

        The env asks once after its first step and after every full reset; while the
        function is in force the env calls it INSTEAD of :meth:`step`, so it must do
        exactly what ``step`` would (the torch backend hands the built-in envs' own
        ``raw_step`` this way: a built-in step is one call of the env). ``None`` (the
        default, and whenever the backend is in a state where ``step`` does more): the
        env calls :meth:`step`.
        """
        return None

    def self_checked_step(self) -> SelfCheckedStep | None:
        """The object whose ``last_step_clean`` reports on the step :meth:`direct_step` hands out, or None.

        Only where the direct step is the simulator's own step with nothing between
        (:class:`~gpu_envs.contract.protocols.SelfCheckedStep`): the env's default health
        look then skips a step that simulator already checked and found clean. The
        default, None: every step is looked at.
        """
        return None

    def reuse_outputs(self, on: bool) -> bool:
        """Ask the backend to write each step's outputs into memory it reuses two steps later; returns whether it does.

        Only for a caller that copies every output of a step before the next one (a
        random-action ``collect``: :meth:`gpu_envs.core.step_path.StepPath.reusing_outputs`),
        and only while on: the RawStep contract ("never written again") is suspended for
        those steps. The default answers False (every step's tensors are its own); the
        torch backend forwards it to a built-in env's native step.
        """
        return False

    def output_targets(self) -> OutputTargets | None:
        """The simulator whose next step can write its outputs where its caller names (while :meth:`reuse_outputs` is on), or None.

        Only where the direct step is that simulator's own step with nothing between
        (:class:`~gpu_envs.contract.protocols.OutputTargets`: the built-in envs' native CPU
        step). The default: None.
        """
        return None

    def check_usable(self) -> None:  # noqa: B027 - optional hook
        """Raise a clear error if the simulator can no longer be used (died, closed).

        :class:`~gpu_envs.core.env.BatchedEnv` asks this first when a step was interrupted,
        so that a backend that knows why (a dead worker process) says so.
        """

    def live_state(self) -> dict[str, torch.Tensor]:
        """The simulator's per-step state as live tensors (see :mod:`gpu_envs.utils.live_state`).

        This default refuses: most simulators (numpy envs, JAX arrays, a physics engine)
        keep their state outside torch tensors, where a CUDA graph cannot replay it.
        """
        raise RolloutError(
            f"the {self.describe()} backend keeps its simulator's state outside torch tensors, so it has no "
            "live_state(); a CUDA graph can only replay envs whose per-step state lives in device tensors "
            "(torch vector envs). Use cudagraph=False for this env."
        )

    def load_live_state(self, state: dict[str, torch.Tensor]) -> None:
        """Take the values of a :meth:`live_state` (refused where that is)."""
        self.live_state()  # raises where the state is not torch tensors
        raise NotImplementedError(f"{type(self).__name__} has a live_state() but no load_live_state()")

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
