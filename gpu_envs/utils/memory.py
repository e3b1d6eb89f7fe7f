"""How much memory a device has left, and a clear refusal before an allocation cannot fit.

``make(num_envs=10**12)`` or ``rollout(10**12)`` would otherwise fail deep inside the
allocator with a byte count (or, on Linux, grow until the OOM killer steps in: a
gymnasium backend builds Python envs one by one). Entry points estimate a LOWER BOUND
of what they need and call :func:`ensure_fits` first, so a request that cannot fit is
refused before anything is built, and nothing reasonable is refused (the bound is low).

* :func:`available_bytes` -- CPU: ``MemAvailable`` from ``/proc/meminfo`` (capped by
  a cgroup v2 memory limit), else ``sysconf``; CUDA: free device memory plus what
  torch's caching allocator holds unused; other devices: ``None`` (unknown, no check).
* :func:`ensure_fits` -- :class:`~gpu_envs.contract.errors.InvalidArgumentError` naming the
  request, the estimate, what is available and the fix.
* :func:`is_out_of_memory` -- whether an exception is an allocator failure (torch's
  CPU "can't allocate memory", CUDA OOM, numpy/Python ``MemoryError``), to translate.

Example::

    ensure_fits(num_envs * 64, device, f"make({env_id!r}, num_envs={num_envs})", "Use fewer envs.")
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from gpu_envs.contract.errors import InvalidArgumentError

__all__ = ["available_bytes", "ensure_fits", "format_bytes", "is_out_of_memory"]


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"  # pragma: no cover - unreachable


def _cgroup_free() -> int | None:
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        return max(int(limit) - used, 0)
    except (OSError, ValueError):
        return None


def _host_available() -> int | None:
    found = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        found = None
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            return None
    cgroup = _cgroup_free()
    return found if cgroup is None else min(found, cgroup)


def available_bytes(device: torch.device) -> int | None:
    """Bytes that can still be allocated on ``device``, or ``None`` when unknown."""
    device = torch.device(device)
    if device.type == "cpu":
        return _host_available()
    if device.type == "cuda" and torch.cuda.is_available():
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    return None


def ensure_fits(nbytes: int, device: torch.device, what: str, fix: str) -> None:
    """Refuse ``what`` when its (lower-bound) need ``nbytes`` exceeds what ``device`` has left."""
    available = available_bytes(device)
    if available is not None and nbytes > available:
        raise InvalidArgumentError(
            f"{what} needs at least {format_bytes(nbytes)} on {device}, but only {format_bytes(available)} is "
            f"available. {fix}"
        )


def is_out_of_memory(err: BaseException) -> bool:
    """True for allocator failures: ``MemoryError``, CUDA OOM, torch's CPU allocation failure."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower())
