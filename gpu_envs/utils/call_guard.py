"""A call did not finish: refuse every later call until a reset -- in one place.

An env, a transformed env, a pool of worker processes and a Ray fleet all keep state
that one call (a step, a reset) changes in several places: the simulator, a cached
root, the transforms' statistics, answers in flight. If an exception or Ctrl-C escapes
such a call half-way, those places disagree, and the only safe way on is a full reset.
:class:`CallGuard` is that rule, shared by :class:`~gpu_envs.core.env.BatchedEnv`,
:class:`~gpu_envs.transforms.TransformedEnv`, the gymnasium backend (and its async
workers) and the Ray backend:

* :meth:`~CallGuard.start` marks a call in progress (one attribute write) and
  :meth:`~CallGuard.finish` clears the mark once the call completed (another one). An
  exception escaping in between leaves the mark: that is the whole mechanism, with no
  ``try`` in the hot path.
* :meth:`~CallGuard.check` refuses a call while a mark is left, with
  :class:`~gpu_envs.contract.errors.InterruptedStepError` ("interrupted mid-step: call
  env.reset()") naming the call that did not finish;
* the owner's full reset clears the mark (:meth:`~CallGuard.finish`) after making the
  state consistent again (recovering workers, resetting every row).

Besides the call in flight, the owner may *hold* the guard for a reason of its own (never
reset, closed): :attr:`pending` is then that reason and :attr:`interrupted` is False, so
the hot path still tests one attribute (``guard.pending is None``) for "may I run".

Example::

    guard = CallGuard("this env")
    guard.check("step")          # raises InterruptedStepError if a call was left half-done
    guard.start("step")
    ...                          # the simulator call; an exception here leaves "step" marked
    guard.finish()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from gpu_envs.contract.errors import InterruptedStepError

__all__ = ["CallGuard"]


class CallGuard:
    """The "did a call not finish?" mark of one object (see the module docstring).

    Args:
        owner: how messages name the guarded object (``"this TransformedEnv"``), or a
            function returning it (asked only when a message is written).

    Attributes:
        pending: ``None`` when calls may run; else the name of the call in progress (or
            the one that did not finish), or the reason the owner holds the guard.
    """

    __slots__ = ("_held", "owner", "pending")

    def __init__(self, owner: str | Callable[[], str]) -> None:
        self.owner = owner
        self.pending: str | None = None
        self._held = False

    def start(self, call: str) -> None:
        """Mark ``call`` in progress (cleared by :meth:`finish`; left set if it raises)."""
        self.pending = call
        self._held = False

    def finish(self) -> None:
        """The call completed (or a reset made everything consistent again): calls may run."""
        self.pending = None
        self._held = False

    def hold(self, reason: str) -> None:
        """Refuse calls for a reason of the owner's (never reset, closed), not an interruption."""
        self.pending = reason
        self._held = True

    @property
    def held(self) -> bool:
        """True while the owner holds the guard (:meth:`hold`): :attr:`pending` is its reason."""
        return self._held

    @property
    def interrupted(self) -> bool:
        """True while a call that did not finish is marked (not while held)."""
        return self.pending is not None and not self._held

    def check(self, call: str) -> None:
        """Refuse ``call`` while a call that did not finish is marked; a no-op otherwise."""
        if self.pending is not None and not self._held:
            self.refuse(call)

    def refuse(self, call: str, why: str = "") -> NoReturn:
        """Raise the one "interrupted mid-step" error for ``call``.

        ``why`` replaces the default explanation (what the unfinished call may have left
        inconsistent, for this owner).
        """
        why = why or "its state may disagree with the simulator's"
        raise InterruptedStepError(
            f"interrupted mid-step: call env.reset(). The previous {self.pending}() of {self._name()} did not finish "
            f"(an exception or Ctrl-C escaped it), so {why}; {call}() is refused until a reset, which resets every "
            "row and makes it usable again."
        )

    def _name(self) -> str:
        return self.owner if isinstance(self.owner, str) else self.owner()

    def __repr__(self) -> str:
        state = "ready" if self.pending is None else ("held: " if self._held else "interrupted in ") + self.pending
        return f"CallGuard({self._name()}, {state})"
