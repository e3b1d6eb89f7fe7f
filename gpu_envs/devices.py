"""Which device: the default one, a canonical spelling, and "is it the same memory?".

Small helpers every layer needs, so they sit at the bottom of the package (next to
:mod:`gpu_envs.errors`) and import nothing of gpu_envs:

* :func:`default_device` -- CUDA when available, else CPU (what ``make`` uses);
* :func:`normalize_device` -- ``"cuda"`` becomes ``cuda:<current>``, so comparing two
  devices with ``==`` is exact;
* :func:`same_device` -- the lenient comparison (``cuda`` matches ``cuda:<any>``) used
  where an index may not be spelled out yet.

Example::

    device = normalize_device(default_device())     # cuda:0 on a GPU machine, else cpu
    assert same_device(torch.device("cuda"), torch.device("cuda", 1))
"""

from __future__ import annotations

import torch

__all__ = ["default_device", "normalize_device", "same_device"]


def default_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def normalize_device(device: torch.device | str) -> torch.device:
    """``"cuda"`` -> ``cuda:<current>`` so that device comparisons are exact."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def same_device(a: torch.device, b: torch.device) -> bool:
    """True if ``a`` and ``b`` name the same device (``cuda`` matches ``cuda:<any>``)."""
    if a.type != b.type:
        return False
    return a.index is None or b.index is None or a.index == b.index
