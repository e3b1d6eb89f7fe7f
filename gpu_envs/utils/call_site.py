"""How the caller uses a result: the one gymnasium habit that fails silently on a TensorDict.

``obs, reward, terminated, truncated, info = env.step(td)`` is gymnasium's step. gpu_envs'
``step`` returns one TensorDict (torchrl's API), and a TensorDict of batch ``[5]`` unpacks
into its five ROWS without an error; ``td, root = env.step(td)`` (``step_and_maybe_reset``'s
form) does the same at ``N = 2``. At other sizes Python's own unpacking error says
something is off; at those sizes nothing does. :func:`unpacked_into` reads the caller's
next bytecode instruction (``UNPACK_SEQUENCE k``), so ``step`` can refuse before anything
moves. It is asked only where a batch size makes the silent case possible, and each call
site is disassembled once (a dict lookup afterwards).

Example (a function asking how its own result is used):

>>> from gpu_envs.utils.call_site import unpacked_into
>>> def result():
...     return unpacked_into(1), None
>>> names, _ = result()          # unpacked into two names
>>> names
2
>>> whole = result()             # kept whole
>>> whole[0] is None
True
"""

from __future__ import annotations

import dis
import sys
from types import CodeType

from gpu_envs.contract.errors import InvalidArgumentError

__all__ = ["SILENT_UNPACK_SIZES", "refuse_unpacking", "unpacked_into"]

SILENT_UNPACK_SIZES = (2, 5)  # (td, root) and gymnasium's 5-tuple: the sizes whose rows unpack silently

_SITES: dict[tuple[CodeType, int], int | None] = {}


def unpacked_into(depth: int) -> int | None:
    """``k`` where the caller ``depth`` frames up unpacks this call's result into ``k`` names, else None."""
    frame = sys._getframe(depth + 1)
    key = (frame.f_code, frame.f_lasti)
    try:
        return _SITES[key]
    except KeyError:
        pass
    found = None
    for instruction in dis.get_instructions(frame.f_code):  # caches skipped: the next real instruction
        if instruction.offset > frame.f_lasti:
            if instruction.opname == "UNPACK_SEQUENCE":
                found = int(instruction.arg or 0)
            break
    if len(_SITES) < 4096:  # call sites are few; a generated-code flood does not grow this without bound
        _SITES[key] = found
    return found


def refuse_unpacking(num_envs: int, names: int | None) -> None:
    """Raise where ``env.step(td)``'s result of ``num_envs`` rows is unpacked into ``num_envs`` names."""
    if names != num_envs:
        return
    if names == 5:
        habit = "gymnasium's `obs, reward, terminated, truncated, info = env.step(action)`"
    else:
        habit = "`td, root = env.step(td)` (step_and_maybe_reset's form)"
    raise InvalidArgumentError(
        f"{habit} would unpack the {num_envs} ROWS of the one TensorDict env.step(td) returns (torchrl's API). "
        'Read the step from it: td = env.step(td); td["next", "observation"], td["next", "reward"], '
        'td["next", "terminated"], td["next", "truncated"]; or use td, root = env.step_and_maybe_reset(td) for '
        "the next step's input, or gpu_envs.to_gymnasium(env) for gymnasium's API. Nothing was stepped."
    )
