"""A small C library built from source at first use, cached per machine, loaded through ``ctypes``.

Why: on a CPU, a hot path of many tiny tensor ops is dispatch-bound (~1-3 us per aten op),
while one C loop over the same memory costs a fraction of that. The built-in envs' step
(:mod:`gpu_envs.builtin.native`) and the default health look of a hand-written loop
(:mod:`gpu_envs.core.health_look`) each keep their C source beside the Python that calls it,
and this module turns a source into a loaded library:

* **Built at first use, cached.** The source is compiled by the system C compiler (``cc``,
  or ``$CC``) into ``~/.cache/gpu_envs/native/<name>-<hash of source, flags and
  compiler>.so`` (``$GPU_ENVS_NATIVE_CACHE`` moves it) in ~0.1-0.5 s, once per machine;
  later processes load the cached file. The build goes to a temporary name and is renamed
  into place, so concurrent processes never load a half-written file.
* **Optional.** With no compiler, on Windows, or with ``GPU_ENVS_NATIVE=0``,
  :meth:`NativeLibrary.load` returns None and the caller runs its pure-torch path (same
  results, slower). A failed build is reported once per process as a ``RuntimeWarning``
  and not retried; nothing is raised on a hot path.

Example::

    >>> from gpu_envs.utils.native_library import NativeLibrary
    >>> def declare(lib):
    ...     lib.twice.argtypes, lib.twice.restype = [ctypes.c_int], ctypes.c_int
    >>> import ctypes
    >>> demo = NativeLibrary("demo", "int twice(int x) { return 2 * x; }", declare, "the demo")
    >>> lib = demo.load()
    >>> lib is None or lib.twice(21) == 42
    True
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from gpu_envs.utils.capture import is_capturing
from gpu_envs.utils.torch_internals import dispatch_mode_active

__all__ = ["DEFAULT_FLAGS", "NativeLibrary", "cache_dir", "compiler", "native_allowed"]

# IEEE arithmetic exactly as written: no contraction into fused multiply-adds, no fast math
DEFAULT_FLAGS = ("-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math")


def native_allowed() -> bool:
    """Whether a hot path may call its native kernel now: eager, not captured, and seen by no dispatch mode.

    A traced step needs torch ops to trace; inside :func:`gpu_envs.utils.capture.capturing`
    (a CUDA graph capture, or its CPU emulation) the ops are what is recorded; and a
    ``TorchDispatchMode`` (an op recorder, a sync guard, a FLOP counter) would not see a C call.
    """
    return not (torch.compiler.is_compiling() or is_capturing() or dispatch_mode_active())


def cache_dir() -> Path:
    """Where built libraries are kept: ``$GPU_ENVS_NATIVE_CACHE`` or ``~/.cache/gpu_envs/native``."""
    return Path(os.environ.get("GPU_ENVS_NATIVE_CACHE") or Path.home() / ".cache" / "gpu_envs" / "native")


def compiler() -> str | None:
    """The C compiler's path (``$CC``, or ``cc``), or None where there is none."""
    return shutil.which(os.environ.get("CC", "cc"))


class NativeLibrary:
    """One C source, built into a cached shared library and loaded once per process.

    Args:
        name: the file name's stem (``<name>-<digest>.so``).
        source: the C source.
        declare: sets ``argtypes``/``restype`` of the library's functions on the loaded
            ``ctypes.CDLL`` (an ``AttributeError`` there counts as a failed load).
        what: what the library is for, as the warning of a failed build names it, with
            what runs instead (e.g. "the built-in envs use their pure-torch step").
        flags: the compiler flags (:data:`DEFAULT_FLAGS`).
    """

    def __init__(
        self,
        name: str,
        source: str,
        declare: Callable[[ctypes.CDLL], None],
        what: str,
        flags: Sequence[str] = DEFAULT_FLAGS,
    ) -> None:
        self.name = name
        self.source = source
        self.declare = declare
        self.what = what
        self.flags = tuple(flags)
        self._lock = threading.Lock()
        self._loaded: dict[str, ctypes.CDLL | None] = {}
        self._by_environment: dict[tuple, ctypes.CDLL | None] = {}  # load()'s answer per relevant environment

    def digest(self, cc: str) -> str:
        return hashlib.sha256((self.source + " ".join(self.flags) + cc).encode()).hexdigest()[:16]

    def build_into(self, directory: Path) -> ctypes.CDLL:
        """Build the library into ``directory`` (unless it is there already) and load it; raises on failure."""
        cc = compiler()
        if cc is None:
            raise OSError(f"no C compiler: {os.environ.get('CC', 'cc')!r} is not on PATH")
        target = Path(directory) / f"{self.name}-{self.digest(cc)}.so"
        if not target.exists():
            self._build(cc, target)
        lib = ctypes.CDLL(str(target))
        self.declare(lib)
        return lib

    def load(self) -> ctypes.CDLL | None:
        """The loaded library (built first if needed), or None where it cannot be had (module docstring)."""
        environ = os.environ
        where = (
            environ.get("GPU_ENVS_NATIVE"),
            environ.get("CC"),
            environ.get("PATH"),
            environ.get("GPU_ENVS_NATIVE_CACHE"),
        )
        if where in self._by_environment:  # (finding the compiler walks PATH: a hot caller must not pay it each time)
            return self._by_environment[where]
        lib = self._find()
        self._by_environment[where] = lib
        return lib

    def _find(self) -> ctypes.CDLL | None:
        if os.environ.get("GPU_ENVS_NATIVE", "1") == "0":
            return None
        cc = compiler()
        if cc is None or sys.platform == "win32":
            return None
        digest = self.digest(cc)
        with self._lock:
            if digest in self._loaded:
                return self._loaded[digest]
            lib = None
            try:
                lib = self.build_into(cache_dir())
            except (OSError, subprocess.SubprocessError, AttributeError) as error:
                detail = getattr(error, "stderr", b"") or b""
                warnings.warn(
                    f"gpu_envs: the native library {self.name!r} could not be built or loaded ({error} "
                    f"{detail.decode(errors='replace')[:500]}); {self.what} (same results, slower). Set "
                    "GPU_ENVS_NATIVE=0 to skip the attempt.",
                    RuntimeWarning,
                    stacklevel=3,
                )
            self._loaded[digest] = lib
            return lib

    def _build(self, cc: str, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            src = Path(tmp) / f"{self.name}.c"
            src.write_text(self.source)
            out = Path(tmp) / target.name
            subprocess.run(
                [cc, *self.flags, str(src), "-o", str(out), "-lm"], check=True, capture_output=True, timeout=60
            )
            os.replace(out, target)  # atomic: a concurrent process sees the old file or the whole new one
