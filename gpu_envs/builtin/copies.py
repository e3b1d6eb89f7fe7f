"""How a built-in env is copied: ``copy.deepcopy`` gives an independent twin; pickles and shallow copies are refused.

A built-in env reads its state through views of its own tensors (the state's columns, the
step counts as a column), and its native CPU step holds ctypes functions and pointers into
those tensors (:mod:`gpu_envs.builtin.native`). So:

* ``copy.deepcopy(env)`` copies every attribute through one ``memo`` (torch keeps a view a
  view of the copied tensor there) except the native step's handles (the ``_native*``
  attributes), which the twin makes again from its own tensors (``_native_setup``). The
  twin steps exactly as the original would, in its own memory;
* ``pickle`` and ``copy.copy`` raise :class:`~gpu_envs.NotCopyableError`: a pickle keeps no
  view relation between tensors (the columns would come back detached from the state, and
  the copy would step wrongly without a word), and a shallow copy would share the state.
  The error names what works.

Example::

    >>> import copy
    >>> import torch
    >>> from gpu_envs.builtin import CartPoleEnv
    >>> env = CartPoleEnv(4, seed=0)
    >>> _ = env.reset()
    >>> twin = copy.deepcopy(env)
    >>> action = torch.ones(4, dtype=torch.int64)
    >>> bool(torch.equal(env.raw_step(action).obs["observation"], twin.raw_step(action).obs["observation"]))
    True
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

from gpu_envs.contract.errors import NotCopyableError

__all__ = ["DeepCopyOnly"]


class DeepCopyOnly:
    """Mixin of :class:`~gpu_envs.builtin.base.BatchedTorchEnv`: deep copies work, pickles and shallow copies are refused.

    The class it mixes into provides ``_native_setup()`` (the native step's handles, made
    from the env's own tensors; a no-op where no native step runs).
    """

    def _native_setup(self) -> None:
        """The native step's kernels and its pointers into this env's tensors (``_native*``); subclasses."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """An independent env in the same state: it steps as this one would, in its own memory (module docstring)."""
        cls = type(self)
        twin = cls.__new__(cls)
        memo[id(self)] = twin
        for key, value in self.__dict__.items():
            if not key.startswith("_native"):
                twin.__dict__[key] = copy.deepcopy(value, memo)
        twin.__dict__["_native"] = None
        twin._native_setup()
        return twin

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        """Refuse ``pickle`` and ``copy.copy`` (module docstring); ``copy.deepcopy`` works."""
        raise NotCopyableError(
            f"{type(self).__name__} cannot be pickled or shallow-copied: its state is read through views of its own "
            "tensors, which a pickle does not keep (the copy would step wrongly), and a shallow copy would share them. "
            "Use copy.deepcopy(env) in this process, or build another env with the same arguments in the other "
            "process, reset() it and restore the rows there: `other.set_state(env.get_state(rows), rows)`."
        )
