"""The Ray side of the Ray backend: join or start a cluster, place the workers, stop them.

* :func:`connect` uses the Ray this process already initialised (``ray.init`` was
  called by the user: left as it is), or calls ``ray.init`` itself: joining the cluster
  at ``address`` (``"auto"``, ``"host:port"``, ``"ray://..."``) or named by
  ``RAY_ADDRESS``, else starting a local one (Ray's default: one CPU slot per core).
  What ``connect`` initialised belongs to the Ray envs of this process: ``ray.shutdown``
  runs when the last of them closes (stopping a local cluster, disconnecting from a
  joined one), so no Ray process started for them outlives ``env.close()``.
* :func:`start_workers` creates one actor per share and waits (``start_timeout``) until
  each has built its envs; a cluster without room for them gives a clear error instead
  of waiting forever.
* :func:`stop_workers` closes the actors' envs (briefly) and kills the actors.

Example::

    owned = connect(None, {"num_cpus": 2})
    workers = start_workers(builders, cpus_per_worker=1, start_timeout=60)
    ...
    stop_workers(workers)
    release(owned)
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_envs.backends.ray.worker import EnvWorker, WorkerFailure
from gpu_envs.contract.errors import BackendError, MissingComponentError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_lock = threading.Lock()
_owned_users = 0  # live Ray envs of this process on the Ray connection connect() initialised


def import_ray() -> Any:
    """``ray``, or a clear error saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise MissingComponentError(
            f"the ray backend needs Ray ({err}): pip install '.[ray]' in the gpu_envs clone (or pip install ray)."
        ) from err
    return ray


def connect(address: str | None, init_kwargs: dict[str, Any] | None) -> bool:
    """Make sure this process is connected to Ray; True if the connection is the Ray envs' own."""
    global _owned_users
    ray = import_ray()
    with _lock:
        if ray.is_initialized():
            owned = _owned_users > 0  # ours: the first Ray env's address/ray_init_kwargs set it up
            if not owned and (address is not None or init_kwargs):
                raise BackendError(
                    "Ray is already initialised in this process, so address= and ray_init_kwargs= cannot apply; "
                    "drop them (the envs join the running cluster) or call ray.shutdown() first."
                )
        else:
            kwargs = {"logging_level": "warning", **(init_kwargs or {})}
            if address is not None:
                kwargs["address"] = address
            elif not os.environ.get("RAY_ADDRESS"):
                # a new local cluster for these envs only: never the (maybe stale) one of a past `ray start`,
                # which plain ray.init() would try to join; address="auto" joins that one on purpose
                kwargs["address"] = "local"
                kwargs.setdefault("include_dashboard", False)
            ray.init(**kwargs)
            owned = True
            _owned_users = 0  # Ray was down: envs counted on an earlier connection (shut down since) are gone
        if owned:
            _owned_users += 1
        return owned


def release(owned: bool) -> None:
    """One Ray env of this process is done; after the last, ``ray.shutdown`` what :func:`connect` initialised."""
    global _owned_users
    if not owned:
        return
    ray = import_ray()
    with _lock:
        _owned_users = max(_owned_users - 1, 0)
        if _owned_users == 0 and ray.is_initialized():
            ray.shutdown()


@dataclass
class Worker:
    """One actor: its handle, the rows ``[start, stop)`` of the batch it steps, and where it runs."""

    index: int
    actor: Any
    start: int
    stop: int
    pid: int = -1
    host: str = "?"
    alive: bool = True

    def label(self) -> str:
        return f"worker {self.index} (envs {self.start}..{self.stop - 1}, pid {self.pid} on {self.host})"


# gymnasium's unknown-id errors, as the last line of a worker's traceback
_UNKNOWN_ID = re.compile(r"gymnasium\.error\.(?:NameNotFound|NamespaceNotFound|VersionNotFound)[^\n]*")


def explain(err: BaseException) -> str:
    """The text of a failed Ray call: the env's own traceback when the env raised."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, WorkerFailure):
        return str(cause)
    return _ANSI.sub("", str(err)).strip()


def start_workers(
    builders: Sequence[Callable[[], Any]],
    sizes: Sequence[int],
    *,
    cpus_per_worker: float,
    start_timeout: float,
) -> tuple[list[Worker], list[dict[str, Any]]]:
    """One actor per builder; returns the workers and each one's ``facts()`` once all are ready."""
    ray = import_ray()
    remote_cls = ray.remote(num_cpus=cpus_per_worker, max_restarts=0, max_task_retries=0)(EnvWorker)
    workers: list[Worker] = []
    start = 0
    try:  # every actor started so far is stopped if a later one cannot be (an unpicklable builder...)
        for i, (build, size) in enumerate(zip(builders, sizes, strict=True)):
            workers.append(Worker(i, remote_cls.remote(build), start, start + size))
            start += size
        refs = [w.actor.facts.remote() for w in workers]
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=start_timeout)
        if pending:
            late = [w for w, ref in zip(workers, refs, strict=True) if ref in pending]
            free = ray.available_resources().get("CPU", 0.0)
            raise BackendError(
                f"{len(late)} of {len(workers)} Ray workers were not ready after {start_timeout:g} s "
                f"(start_timeout): {', '.join(f'worker {w.index}' for w in late)}. Each asks for {cpus_per_worker:g} CPU "
                f"and the cluster has {free:g} free; lower num_workers or cpus_per_worker, add nodes, or raise "
                "start_timeout if building the envs is slow."
            )
        facts = []
        for w, ref in zip(workers, refs, strict=True):
            try:
                facts.append(ray.get(ref))
            except Exception as err:
                text = explain(err)
                unknown = _UNKNOWN_ID.search(text)
                if unknown is not None:  # the traceback says nothing the user can act on: say what helps
                    raise BackendError(
                        f"Ray worker {w.index} could not build its envs: {unknown.group(0)} A gymnasium id the worker "
                        "cannot see (registered under `if __name__ == '__main__':` of your script with an entry point "
                        "from elsewhere, or in a module the worker does not import) is unknown inside Ray workers: "
                        "pass a function that builds the env itself, gpu_envs.wrap_ray(env_fn=lambda: MyEnv(...), "
                        "num_envs=N), or register the id in a module the workers import."
                    ) from None
                raise BackendError(f"Ray worker {w.index} could not build its envs:\n{text}") from None
            w.pid, w.host = facts[-1]["pid"], facts[-1]["host"]
    except BaseException:
        stop_workers(workers, graceful=False)
        raise
    return workers, facts


def stop_workers(workers: Sequence[Worker], graceful: bool = True, timeout: float = 5.0) -> None:
    """Close the workers' envs (``graceful``, at most ``timeout`` seconds) and kill every actor."""
    ray = import_ray()
    live = [w for w in workers if w.alive]
    if graceful and live:
        refs = [w.actor.close.remote() for w in live]
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
    for w in live:
        with contextlib.suppress(Exception):  # already gone
            ray.kill(w.actor, no_restart=True)
        w.alive = False
    _wait_gone([w.pid for w in live if w.host == socket.gethostname() and w.pid > 0], timeout)


def _wait_gone(pids: Sequence[int], timeout: float) -> None:
    """Wait (at most ``timeout`` s) until the local worker processes have exited."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline and _running(pid):
            time.sleep(0.01)


def _running(pid: int) -> bool:
    if os.path.isdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
