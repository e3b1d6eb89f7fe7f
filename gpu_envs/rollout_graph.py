"""``collect(..., cudagraph=True)``: a whole ``T``-step collection replayed as one CUDA graph.

Launching ~50 small kernels per step from Python costs more than the kernels themselves
for all but huge batches. A CUDA graph records the work of one collection -- policy,
env step, final-observation swap, buffer writes, for all ``T`` steps -- and replays it
with one call, reading and writing the same ("static") memory every time.

What makes that correct for a stateful env, and what it requires:

* **Warm-up and capture.** The first call runs an ordinary eager collection on a side
  stream (its transitions are returned; it also triggers ``torch.compile`` and the env's
  first-step validation), then captures the next collection without running it.
* **State pinning.** Envs replace their state tensors every step (``self.state = new``).
  Before capture the env object is scanned (attributes, dicts, lists; the BatchedEnv,
  its backend, the torch env, transforms) for device tensors. Every tensor attribute
  that the capture re-binds gets, at the end of the graph, a copy of its final value
  into the tensor it held before capture, and is bound back to that tensor: each replay
  starts where the last one ended. Before each replay, state that was replaced from
  outside (``env.reset()``, eager steps in between) is copied into the pinned tensors.
* **Random numbers.** Every CUDA ``torch.Generator`` found on the env (``env.generator``,
  the built-in envs' generators) is registered with the graph, as is torch's default
  one: replays draw fresh numbers, in the same sequence as eager collections.
* **Requirements.** All per-step state must live in device tensors held as attributes
  (or in dicts/lists of them); Python-side state that changes per step (counters, flags)
  cannot be replayed and is refused with :class:`RolloutError`, as are host syncs
  (``.item()``, ``validate=True``) and CPU tensors updated per step. The policy's
  parameters may be updated in place between collections (optimizer steps do that);
  replacing the policy object captures a new graph. The env must not be rebuilt.

Example::

    traj = collect(env, policy, steps=64, cudagraph=True)   # warm-up + capture
    traj = collect(env, policy, steps=64, cudagraph=True)   # one graph replay
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDictBase

from gpu_envs.devices import normalize_device
from gpu_envs.errors import InvalidArgumentError, RolloutError
from gpu_envs.rollout_cache import CACHE_ATTR, collect_cache, compiled_step
from gpu_envs.rollout_loop import Policy, RolloutBuffer, make_step, run_loop

__all__ = ["CUDA_GRAPHS", "CudaGraphs", "GraphCollector", "graph_collector", "scan_state"]

_SCALARS = (bool, int, float, str, bytes, type(None))
_SKIP_TYPES = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    torch.device,
    torch.dtype,
)
Path = tuple  # of ("a", attribute name) / ("i", item key) steps from the env


def _children(obj: Any) -> list:
    if isinstance(obj, dict):
        return [(("i", k), v) for k, v in obj.items() if isinstance(k, (str, int, tuple))]
    if isinstance(obj, (list, tuple)):
        return [(("i", i), v) for i, v in enumerate(obj)]
    if isinstance(obj, _SKIP_TYPES) or type(obj).__module__.split(".")[0] in ("numpy", "functools"):
        return []
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict):
        return []
    # collect()'s own cache (buffers, compiled steps, graphs) is not env state
    return [(("a", k), v) for k, v in attrs.items() if k != CACHE_ATTR]


def scan_state(root: Any, max_depth: int = 8, max_objects: int = 50_000) -> dict[Path, Any]:
    """Path -> tensor / generator / Python scalar, for everything reachable from ``root``."""
    found: dict[Path, Any] = {}
    seen: set[int] = set()
    stack: list = [((), root, 0)]
    while stack:
        path, obj, depth = stack.pop()
        if isinstance(obj, (torch.Tensor, torch.Generator, *_SCALARS)):
            if path:
                found[path] = obj
            continue
        if depth >= max_depth or id(obj) in seen or len(seen) >= max_objects:
            continue
        seen.add(id(obj))
        stack.extend((path + (step,), child, depth + 1) for step, child in _children(obj))
    return found


def _resolve(root: Any, path: Path) -> Any:
    obj = root
    for kind, name in path:
        obj = getattr(obj, name) if kind == "a" else obj[name]
    return obj


def _assign(root: Any, path: Path, value: Any) -> None:
    parent = _resolve(root, path[:-1])
    kind, name = path[-1]
    if kind == "a":
        setattr(parent, name, value)
    elif isinstance(parent, tuple):
        raise RolloutError(
            f"env state at {_name(path)} sits in a tuple, which cannot be re-bound; keep it in a list or attribute."
        )
    else:
        parent[name] = value


def _name(path: Path) -> str:
    return "env" + "".join(f".{n}" if k == "a" else f"[{n!r}]" for k, n in path)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    return type(a) is type(b) and (a == b or (a != a and b != b))  # NaN == NaN here


class CudaGraphs:
    """The CUDA calls a :class:`GraphCollector` makes, in one place.

    Tests swap in an emulation that records and replays ATen ops on the CPU, which is
    how the pinning logic above is checked on machines without a GPU.
    """

    device_type = "cuda"

    def available(self, device: torch.device) -> bool:
        return device.type == "cuda" and torch.cuda.is_available()

    def new_graph(self) -> Any:
        return torch.cuda.CUDAGraph()

    def register_generator(self, graph: Any, generator: torch.Generator) -> None:
        if generator.device.type == "cuda":
            graph.register_generator_state(generator)

    def capture(self, graph: Any) -> Any:
        return torch.cuda.graph(graph)

    @contextlib.contextmanager
    def side_stream(self, device: torch.device) -> Iterator[None]:
        """Run the warm-up on a side stream, as PyTorch recommends before a capture."""
        current = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            yield
        current.wait_stream(side)
        torch.cuda.synchronize(device)


CUDA_GRAPHS = CudaGraphs()


class GraphCollector:
    """Collects by replaying one captured CUDA graph (see the module docstring)."""

    def __init__(
        self,
        env: Any,
        policy: Policy | None,
        buffer: RolloutBuffer,
        compile: bool = False,
        api: CudaGraphs = CUDA_GRAPHS,
    ) -> None:
        device = normalize_device(env.device)
        if not api.available(device):
            raise InvalidArgumentError(
                f"cudagraph=True needs an env on a CUDA device; this one runs on {device}. "
                "Use compile=True (or neither) on the CPU, or build the env with device='cuda'."
            )
        if getattr(env, "validate", False):
            raise InvalidArgumentError(
                "cudagraph=True cannot capture an env built with validate=True (its value checks sync with the host "
                "every step); build it without validate, or use cudagraph=False."
            )
        self.env, self.policy, self.buffer, self.compile, self.api = env, policy, buffer, compile, api
        self.device = device
        self.graph: Any = None
        self._pinned: dict[Path, torch.Tensor] = {}

    # -------------------------------------------------------------- public
    def collect(self) -> TensorDictBase:
        if self.graph is None:
            return self._warm_up_and_capture()
        self._repin()
        self.graph.replay()
        return self.buffer.data

    # ------------------------------------------------------------- capture
    def _step(self) -> Callable:
        if self.compile:
            return compiled_step(self.env, self.policy)[0]
        return make_step(self.env, self.policy)

    def _warm_up_and_capture(self) -> TensorDictBase:
        env, buffer = self.env, self.buffer
        before = scan_state(env)
        with self.api.side_stream(self.device):
            # an ordinary collection: warms up the allocator, cuBLAS, torch.compile and the
            # env's first-step validation, and tells which state the steps re-bind.
            step = self._step()
            first = make_step(env, self.policy) if self.compile and not compiled_step(env, self.policy)[1][0] else None
            run_loop(env, step, buffer, first_step=first, inference=False)
            if self.compile:
                compiled_step(env, self.policy)[1][0] = True
        self._capture(before, step)
        # the warm-up transitions are real: return them (the graph runs from the next call)
        return buffer.data

    def _capture(self, before_warmup: dict, step: Callable) -> None:
        env, buffer = self.env, self.buffer
        after = scan_state(env)
        owners: dict[int, list] = {}
        for path, value in after.items():
            if isinstance(value, torch.Tensor):
                owners.setdefault(id(value), []).append(path)
        # state the steps re-bind must not share its tensor with other paths: give it its own
        for path, value in after.items():
            if (
                isinstance(value, torch.Tensor)
                and path in before_warmup
                and before_warmup[path] is not value
                and len(owners[id(value)]) > 1
            ):
                _assign(env, path, value.clone())
        snapshot = scan_state(env)
        counts: dict[int, int] = {}
        for value in snapshot.values():
            if isinstance(value, torch.Tensor):
                counts[id(value)] = counts.get(id(value), 0) + 1
        graph = self.api.new_graph()
        for value in snapshot.values():
            if isinstance(value, torch.Generator):
                self.api.register_generator(graph, value)
        try:
            with self.api.capture(graph):
                run_loop(env, step, buffer, inference=False)
                rebound = self._write_back(snapshot, counts)
        except RolloutError:
            self._restore(snapshot)
            raise
        except Exception as err:  # a sync, a CPU op, an unsupported op inside the capture
            self._restore(snapshot)
            raise RolloutError(
                f"could not capture the collection in a CUDA graph: {type(err).__name__}: {err}. The env and policy must "
                "run without host syncs (.item(), bool(tensor), nonzero, validate=True) and keep their per-step state "
                "in device tensors; find a sync with tests/sync_guard.py's no_sync(), or use cudagraph=False."
            ) from err
        for path in rebound:
            _assign(env, path, snapshot[path])
        changed = [
            p
            for p, v in snapshot.items()
            if not isinstance(v, (torch.Tensor, torch.Generator)) and not _same(_safe_resolve(env, p), v)
        ]
        if changed:
            self._restore(snapshot)
            raise RolloutError(
                "the env keeps Python-side state that changes every step ("
                + ", ".join(_name(p) for p in changed[:5])
                + "); a CUDA graph replays device work only, so that state would freeze. Keep per-step state in device "
                "tensors, or use cudagraph=False."
            )
        self._pinned = {
            p: v
            for p, v in snapshot.items()
            if isinstance(v, torch.Tensor) and counts[id(v)] == 1 and v.device == self.device
        }
        self.graph = graph

    def _write_back(self, snapshot: dict, counts: dict) -> list:
        """Inside the capture: copy re-bound state into the tensors the graph reads first."""
        rebound = []
        for path, old in snapshot.items():
            if not isinstance(old, torch.Tensor):
                continue
            new = _safe_resolve(self.env, path)
            if new is old:
                continue
            if not isinstance(new, torch.Tensor) or new.shape != old.shape or new.dtype != old.dtype:
                raise RolloutError(
                    f"{_name(path)} changed from a {tuple(old.shape)} {old.dtype} tensor to {_describe(new)} during a step; a CUDA graph needs fixed state."
                )
            if old.device != self.device:
                raise RolloutError(
                    f"{_name(path)} is a {old.device} tensor updated every step; a CUDA graph on {self.device} cannot replay that. Keep the env's state on its device."
                )
            if counts[id(old)] > 1:
                raise RolloutError(
                    f"{_name(path)} is re-bound every step but shares its tensor with other env attributes; a CUDA graph cannot pin it."
                )
            old.copy_(new)
            rebound.append(path)
        return rebound

    def _restore(self, snapshot: dict) -> None:
        """Undo what a failed capture did to the env's Python objects."""
        for path, value in snapshot.items():
            try:
                if not _same(_resolve(self.env, path), value):
                    _assign(self.env, path, value)
            except (AttributeError, KeyError, IndexError, TypeError, RolloutError):
                pass

    def _repin(self) -> None:
        """Bring state replaced since the last replay back into the graph's tensors."""
        env = self.env
        for path, pinned in self._pinned.items():
            current = _safe_resolve(env, path)
            if current is pinned:
                continue
            if not isinstance(current, torch.Tensor) or current.shape != pinned.shape or current.dtype != pinned.dtype:
                raise RolloutError(
                    f"{_name(path)} is now {_describe(current)} but the captured graph was built for a "
                    f"{tuple(pinned.shape)} {pinned.dtype} tensor; collect with a new RolloutBuffer to capture again."
                )
            pinned.copy_(current)
            _assign(env, path, pinned)


def _safe_resolve(root: Any, path: Path) -> Any:
    try:
        return _resolve(root, path)
    except (AttributeError, KeyError, IndexError, TypeError):
        return _Missing


class _Missing:
    """Marker: the path no longer exists."""


def _describe(value: Any) -> str:
    if value is _Missing:
        return "gone"
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} {value.dtype} tensor on {value.device}"
    return f"a {type(value).__name__}"


def graph_collector(env: Any, policy: Policy | None, buffer: RolloutBuffer, compile: bool) -> GraphCollector:
    """The cached :class:`GraphCollector` for (env, buffer, policy, compile); one graph per buffer."""
    graphs = collect_cache(env).graphs
    key = id(buffer)
    entry = graphs.get(key)
    if entry is None or entry.policy is not policy or entry.compile != compile or entry.buffer is not buffer:
        entry = graphs[key] = GraphCollector(env, policy, buffer, compile)
    return entry
