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

Two threads calling one object at once are caught the same way, at no more cost: every
call (:meth:`~CallGuard.start`) takes the next number in :attr:`~CallGuard.calls`
(one integer write) and compares it when it completes. A different number means another
call started while this one ran, i.e. a second thread: :meth:`~CallGuard.overlapped`
raises :class:`~gpu_envs.contract.errors.ConcurrentCallError` naming the fix (one env per
thread, or one lock around every call) and leaves the mark set, so every thread is refused
until a reset. A call that starts while another thread's call is in flight is refused on
entry (the mark is set) with :class:`~gpu_envs.contract.errors.ConcurrentCallError` too:
on that (error) path only, the other threads' stacks are looked at for a frame that holds
this guard (:func:`_in_flight_elsewhere`); a mark no running call holds is an interrupted
call (:class:`~gpu_envs.contract.errors.InterruptedStepError`). Host integers only: no
lock, no host sync, nothing ``torch.compile`` cannot trace.

Example::

    >>> guard = CallGuard("this env")
    >>> guard.check("step")             # nothing left half-done: fine
    >>> call = guard.start("step")      # the simulator call; an exception here leaves "step" marked
    >>> guard.finish()
    >>> call = guard.start("step")      # ... an interrupted call: never finished
    >>> guard.check("reset")
    Traceback (most recent call last):
        ...
    gpu_envs.contract.errors.InterruptedStepError: ...
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

import torch

from gpu_envs.contract.errors import ConcurrentCallError, InterruptedStepError

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

    __slots__ = ("_held", "calls", "owner", "pending")

    def __init__(self, owner: str | Callable[[], str]) -> None:
        self.owner = owner
        self.pending: str | None = None
        self._held = False
        self.calls = 0  # numbers the calls: another number at the end of a call = a concurrent call

    def start(self, call: str) -> int:
        """Mark ``call`` in progress (cleared by :meth:`finish`; left set if it raises); returns its number.

        Inside a ``torch.compile``'d chunk the numbering is left out (0 is returned): the
        count is a host integer the compiler would guard on and recompile at every call
        (``collect(TransformedEnv(...), compile=True)`` hit the recompile limit); a chunk
        runs in one thread, as the env's own step path leaves its numbering out there.
        """
        self.pending = call
        self._held = False
        if torch.compiler.is_compiling():
            return 0
        number = self.calls + 1
        self.calls = number
        return number

    def overlapped(self, call: str) -> NoReturn:
        """Raise :class:`ConcurrentCallError`: another call started while ``call`` ran (a second thread).

        Leaves ``call`` marked (and numbers the calls on, so the other call fails its own
        check too): every later call is refused until a reset.
        """
        self.pending = call
        self._held = False
        self.calls += 1
        raise ConcurrentCallError(
            f"{self._name()} was called from two threads at once: another call started while {call}() ran, so its "
            "state may be half-stepped by both. An env is not thread-safe: step each env from one thread (one env "
            "per thread), or hold one threading.Lock around every call to it. Call env.reset() to use it again."
        )

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
        if not self._held and _in_flight_elsewhere(self):
            raise ConcurrentCallError(
                f"{self._name()} was called from two threads at once: {call}() came while another thread's "
                f"{self.pending}() was running. An env is not thread-safe: step each env from one thread (one env per "
                "thread), or hold one threading.Lock around every call to it. (This call was refused before it "
                "touched anything; the other one goes on.)"
            )
        why = why or "its state may disagree with the simulator's"
        raise InterruptedStepError(
            f"interrupted mid-step: call env.reset(). The previous {self.pending}() of {self._name()} did not finish "
            f"(an exception or Ctrl-C escaped it), so {why}; {call}() is refused until a reset, which resets every "
            "row and makes it usable again. (If another thread is calling it right now, that is the cause: an env "
            "is not thread-safe; use one env per thread, or one threading.Lock around every call.)"
        )

    def _name(self) -> str:
        return self.owner if isinstance(self.owner, str) else self.owner()

    def __repr__(self) -> str:
        state = "ready" if self.pending is None else ("held: " if self._held else "interrupted in ") + self.pending
        return f"CallGuard({self._name()}, {state})"


def _holds(frame: Any, guard: CallGuard) -> bool:
    """``frame`` is a call holding ``guard``: a local named ``guard``, or a ``self`` whose ``guard`` it is."""
    local = frame.f_locals
    return local.get("guard") is guard or getattr(local.get("self"), "guard", None) is guard


def _in_flight_elsewhere(guard: CallGuard) -> bool:
    """Another thread is inside a call holding ``guard`` right now (a look at every thread's stack: error path only)."""
    if threading.active_count() < 2:
        return False
    me = threading.get_ident()
    for ident, frame in sys._current_frames().items():  # documented in sys; the one way to see other threads' stacks
        if ident == me:
            continue
        while frame is not None:
            if _holds(frame, guard):
                return True
            frame = frame.f_back
    return False
