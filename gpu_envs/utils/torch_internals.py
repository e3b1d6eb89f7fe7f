"""The private parts of torch gpu_envs relies on, each behind one function (and nowhere else).

* :func:`foreach_copy` -- ``torch._foreach_copy_``: one dispatch copying a list of
  tensors into another (a rollout buffer's column write);
* :func:`version_counter` -- ``tensor._version``: bumped by every in-place write, which
  tells a cache on the host that someone else wrote a tensor, without reading it;
* :func:`dispatch_mode_active` -- whether a ``TorchDispatchMode`` is on (the sync guard
  of the tests): ``torch.compile`` cannot trace under one, so the caller runs eagerly.

Each is a documented, stable behaviour of the torch versions gpu_envs supports
(``torch>=2.4``); a torch without one raises here, by name, not somewhere downstream.

Example::

    >>> import torch
    >>> t = torch.zeros(3)
    >>> before = version_counter(t)
    >>> _ = t.add_(1)
    >>> version_counter(t) != before
    True
"""

from __future__ import annotations

import torch
from torch.utils import _python_dispatch

__all__ = ["TensorList", "dispatch_mode_active", "foreach_copy", "version_counter"]

# (private in torch's stubs: this module is the one place that reads torch's internals, test_layers' FOREIGN_PRIVATE)
_foreach_copy = torch._foreach_copy_  # pyright: ignore[reportPrivateImportUsage]
_current_dispatch_mode = _python_dispatch._get_current_dispatch_mode


TensorList = list[torch.Tensor] | tuple[torch.Tensor, ...]  # what torch's foreach ops take


def foreach_copy(targets: TensorList, sources: TensorList) -> None:
    """``targets[i].copy_(sources[i])`` for every ``i``, in one dispatch (``torch._foreach_copy_``)."""
    _foreach_copy(targets, sources)


def version_counter(tensor: torch.Tensor) -> int:
    """The tensor's version counter (``tensor._version``): it changes with every in-place write."""
    return tensor._version


def dispatch_mode_active() -> bool:
    """True while a ``TorchDispatchMode`` is active (``torch.utils._python_dispatch``)."""
    return _current_dispatch_mode() is not None
