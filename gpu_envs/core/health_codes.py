"""What a row of the health record says went wrong, and what the error tells the user to do about it.

The record (:class:`gpu_envs.core.health.HealthMonitor`) keeps one code per row: the kind
of its first fault. These are the codes, the sentence that describes a fault and the fix
the :class:`~gpu_envs.contract.errors.HealthCheckError` names.

Example:

>>> from gpu_envs.core.health_codes import ACTION_NAN, fault_fix, span_note
>>> fault_fix(ACTION_NAN).startswith("Fix the policy's outputs")
True
>>> span_note(5, 1), span_note(5, 3)[:32]
('', ' (somewhere in steps 5..7: that ')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ACTION_NAN", "ACTION_RANGE", "NO_FAULT", "OBS", "REWARD_NAN", "describe_fault", "fault_fix", "span_note"]

# what a row's record says went wrong (0: nothing); observation key i is OBS + i
NO_FAULT, ACTION_RANGE, ACTION_NAN, REWARD_NAN, OBS = 0, 1, 2, 3, 4


def describe_fault(action: Any, obs_keys: Sequence[Any], code: int, value: float) -> str:
    """One fault in words: ``action`` is the monitor's action check (its spec and valid range)."""
    if code == ACTION_RANGE:
        return f"action {value:g} outside {action.spec!r} (valid: {action.valid})"
    if code == ACTION_NAN:
        return f"action {value} not finite"
    if code == REWARD_NAN:
        return f"reward {value} not finite"
    return f"observation {obs_keys[code - OBS]!r} holds {value}, not finite"


def fault_fix(code: int) -> str:
    """What to do about a fault of kind ``code``."""
    if code == ACTION_RANGE:
        return (
            "Fix the policy: sample actions from env.action_spec, or map its output into the range (an argmax "
            "over logits)."
        )
    if code == ACTION_NAN:
        return "Fix the policy's outputs (a NaN loss, a diverged network), or clamp them (ClipAction)."
    return (
        "The simulator produced it: check the actions it was given and its physics; Quarantine(env) ends and "
        "resets such rows and goes on."
    )


def span_note(first: int, span: int) -> str:
    """Where a fault lies when its collection's buffer was overwritten since (``span`` steps from ``first``)."""
    if span == 1:
        return ""
    return f" (somewhere in steps {first}..{first + span - 1}: that collection's buffer was overwritten since)"
