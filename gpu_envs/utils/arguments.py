"""Argument checks shared by every public entry point, before anything is touched.

Each checker returns the value in its canonical Python type or raises
:class:`~gpu_envs.contract.errors.InvalidArgumentError` naming the argument, what it got and
what it accepts. The rules are the same everywhere:

* integers: Python ints and numpy integers (``np.int64(3)``) are accepted; bools are
  refused (``True`` is not a count), and so are floats, even whole ones (``2.0``);
* numbers: ints, floats and numpy scalars; bools are refused, NaN is refused unless
  allowed;
* flags: ``True``/``False`` (numpy bools too), never ``0``/``1`` or strings;
* seeds: ``None`` or an int in ``[0, 2**63)`` -- negative seeds are refused by every
  backend alike (torch would wrap them modulo 2**64, gymnasium refuses them).

Example::

    >>> import numpy as np
    >>> as_int(np.int64(8), "num_envs", minimum=1)
    8
    >>> as_seed(-1)
    Traceback (most recent call last):
        ...
    gpu_envs.contract.errors.InvalidArgumentError: ...
"""

from __future__ import annotations

import inspect
import math
import numbers
import operator
from collections.abc import Callable
from typing import Any

from tensordict import TensorDict, TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError

__all__ = [
    "MAX_SEED",
    "STEP_CALLS",
    "as_bool",
    "as_int",
    "as_number",
    "as_seed",
    "check_td",
    "describe",
    "keywords_of",
    "optional_seconds",
]

MAX_SEED = 2**63 - 1


def describe(value: Any) -> str:
    """``repr`` of a value with its type when the repr hides it (``2.0 (float)``), shortened."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = type(value).__name__
    return (
        text
        if kind in ("int", "str", "NoneType")
        else f"{text} ({type(value).__module__}.{kind})".replace("builtins.", "")
    )


def _is_bool(value: Any) -> bool:
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # numpy.bool_ without importing numpy
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and str(dtype) in ("bool", "torch.bool")


def as_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None, hint: str = "") -> int:
    """``value`` as a Python int within ``[minimum, maximum]``; numpy integers accepted, bools refused."""
    rule = "an int" + (f" >= {minimum}" if minimum is not None and maximum is None else "")
    if minimum is not None and maximum is not None:
        rule = f"an int in [{minimum}, {maximum}]"
    if _is_bool(value):
        raise InvalidArgumentError(f"{name} must be {rule}, got the bool {value!r}.{' ' + hint if hint else ''}")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{name} must be {rule}, got {describe(value)}.{' ' + hint if hint else ''}"
        ) from None
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise InvalidArgumentError(f"{name} must be {rule}, got {number}.{' ' + hint if hint else ''}")
    return number


def as_size(value: Any, owner: str, *, minimum: int = 1) -> tuple[int, int]:
    """An image size ``(height, width)`` (an int ``s`` is ``(s, s)``), each side an int >= ``minimum``.

    >>> as_size(84, "Resize"), as_size((64, 48), "Resize")
    ((84, 84), (64, 48))
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise InvalidArgumentError(f"{owner} size must be an int or (height, width), got {value!r}.")
    return (
        as_int(value[0], f"{owner} height", minimum=minimum),
        as_int(value[1], f"{owner} width", minimum=minimum),
    )


def as_seed(value: Any, name: str = "seed") -> int | None:
    """``None`` or an int seed in ``[0, 2**63)``; the same rule for every backend."""
    if value is None:
        return None
    rule = "Seeds are ints in [0, 2**63 - 1], the same on every backend (a negative seed would wrap around on some and be refused by others)."
    if _is_bool(value) or not hasattr(value, "__index__"):
        raise InvalidArgumentError(f"{name} must be an int or None, got {describe(value)}. {rule}")
    number = operator.index(value)
    if not 0 <= number <= MAX_SEED:
        raise InvalidArgumentError(f"{name}={number} is out of range. {rule}")
    return number


def as_number(
    value: Any,
    name: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    allow_nan: bool = False,
    allow_inf: bool = True,
    strict_minimum: bool = False,
) -> float:
    """``value`` as a float (ints, floats, numpy scalars); bools refused; NaN/inf as allowed."""
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} must be a number, got {describe(value)}.")
    number = float(value)
    if math.isnan(number):
        if allow_nan:
            return number
        raise InvalidArgumentError(f"{name} must be a {'non-NaN' if allow_inf else 'finite'} number, got nan.")
    if math.isinf(number) and not allow_inf:
        raise InvalidArgumentError(f"{name} must be finite, got {number}.")
    low = minimum is not None and (number < minimum or (strict_minimum and number == minimum))
    high = maximum is not None and number > maximum
    if (low or high) and minimum is not None and maximum is not None:
        bracket = "(" if strict_minimum else "["
        raise InvalidArgumentError(f"{name} must be a number in {bracket}{minimum:g}, {maximum:g}], got {number:g}.")
    if low:
        raise InvalidArgumentError(f"{name} must be {'>' if strict_minimum else '>='} {minimum:g}, got {number:g}.")
    if high:
        raise InvalidArgumentError(f"{name} must be <= {maximum:g}, got {number:g}.")
    return number


def as_bool(value: Any, name: str) -> bool:
    """``True`` or ``False`` (numpy bools too); ``0``, ``1``, ``"yes"`` are refused."""
    if isinstance(value, bool):
        return value
    if type(value).__name__ == "bool_":
        return bool(value)
    raise InvalidArgumentError(f"{name} must be True or False, got {describe(value)}.")


def optional_seconds(value: Any, name: str) -> float | None:
    """``None`` (no limit) or a duration in seconds > 0."""
    if value is None:
        return None
    return as_number(value, name, minimum=0.0, strict_minimum=True, allow_inf=False)


def keywords_of(fn: Callable, skip: tuple[str, ...] = ()) -> list[str] | None:
    """The keyword parameters of ``fn`` minus ``skip``, sorted; ``None`` when it takes ``**kwargs``.

    Backends use it to list the options they accept, for the "unknown keyword argument"
    error of ``make``/``wrap``.
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return sorted(
        p.name
        for p in params
        if p.name not in skip and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY)
    )


# how check_td names the calls that share one step path (one check serves both)
STEP_CALLS = "step() or step_and_maybe_reset"


def check_td(td: Any, call: str) -> None:
    """Refuse a step input that is not a TensorDict (a dict, ``None``, a tensor) before anything moves."""
    if type(td) is TensorDict or isinstance(td, TensorDictBase):
        return
    hint = " Wrap it: TensorDict(d, batch_size=env.batch_size)." if isinstance(td, dict) else ""
    if isinstance(td, tuple):
        hint = " step_and_maybe_reset returns (td, td_root): pass td_root to the next step."
    raise InvalidArgumentError(
        f"{call}() takes the TensorDict holding 'action' (e.g. the root from env.reset() with td['action'] set), "
        f"got {type(td).__name__}.{hint}"
    )
