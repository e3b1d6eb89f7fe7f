"""Which device: the default one, a canonical spelling, and "is it the same memory?".

Small helpers every layer needs, so they sit at the bottom of the package (next to
:mod:`gpu_envs.contract.errors`) and import nothing of gpu_envs:

* :func:`default_device` -- CUDA when available, else CPU (what ``make`` uses);
* :func:`normalize_device` -- ``"cuda"`` becomes ``cuda:<current>``, so comparing two
  devices with ``==`` is exact;
* :func:`same_device` -- the lenient comparison (``cuda`` matches ``cuda:<any>``) used
  where an index may not be spelled out yet;
* :func:`resolve_device` -- a user's ``device=`` argument checked against what THIS
  torch can do (``"cuda"`` on a CPU-only build, ``"cuda:3"`` on a 1-GPU machine and
  ``"banana"`` are clear errors, not torch's assertion or its list of device types).

Example::

    device = normalize_device(default_device())     # cuda:0 on a GPU machine, else cpu
    assert same_device(torch.device("cuda"), torch.device("cuda", 1))
    resolve_device("cuda")   # InvalidArgumentError on a CPU-only torch, naming the fix
"""

from __future__ import annotations

from typing import Any

import torch

from gpu_envs.contract.errors import InvalidArgumentError

__all__ = ["default_device", "normalize_device", "resolve_device", "same_device"]

_ACCELERATORS = {"mps": "torch.backends.mps", "xpu": "torch.xpu"}


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


def resolve_device(device: Any, name: str = "device") -> torch.device:
    """A ``device=`` argument as a :class:`torch.device` this process can use.

    ``None`` means :func:`default_device`. Strings, ``torch.device`` objects and CUDA
    indices (ints, as torch accepts) are parsed; a device type torch does not know, a
    CUDA device on a build without CUDA or on a machine without that GPU, and an
    unavailable MPS/XPU device raise :class:`InvalidArgumentError` saying what is there.
    """
    if device is None:
        return default_device()
    if isinstance(device, bool) or (not isinstance(device, (str, torch.device)) and not hasattr(device, "__index__")):
        raise InvalidArgumentError(
            f"{name} must be a torch.device, a string such as 'cpu' or 'cuda:0', or None; got {type(device).__name__}."
        )
    try:
        # an int is a CUDA index, as torch reads it
        parsed = torch.device(device) if isinstance(device, (str, torch.device)) else torch.device("cuda", int(device))
    except (RuntimeError, TypeError, ValueError):
        raise InvalidArgumentError(
            f"{name}={device!r} is not a device torch knows. Use 'cpu', 'cuda', 'cuda:<index>' (or None: "
            f"{default_device()} here)."
        ) from None
    if parsed.type == "cuda":
        _check_cuda(parsed, device, name)
    elif parsed.type in _ACCELERATORS:
        module = torch.backends.mps if parsed.type == "mps" else getattr(torch, "xpu", None)
        if module is None or not module.is_available():
            raise InvalidArgumentError(
                f"{name}={device!r}, but this torch cannot use {parsed.type.upper()} here "
                f"({_ACCELERATORS[parsed.type]}.is_available() is False). Use device='cpu' (or None)."
            )
    return parsed


def _check_cuda(parsed: torch.device, device: Any, name: str) -> None:
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            why = f"this torch ({torch.__version__}) was built without CUDA support (a CPU-only build)"
            fix = (
                "Use device='cpu' (or None, which picks CUDA only when it is there), or install a CUDA build of torch."
            )
        else:
            why = f"no CUDA GPU is visible to this torch (CUDA {torch.version.cuda} build)"
            fix = "Check the driver and CUDA_VISIBLE_DEVICES, or use device='cpu' (or None)."
        raise InvalidArgumentError(f"{name}={device!r}, but {why}. {fix}")
    count = torch.cuda.device_count()
    if parsed.index is not None and parsed.index >= count:
        raise InvalidArgumentError(
            f"{name}={device!r}, but only {count} CUDA device(s) are visible (cuda:0 to cuda:{count - 1})."
        )
