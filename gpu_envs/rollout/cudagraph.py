"""``collect(..., cudagraph=True)``: a whole ``T``-step collection replayed as one CUDA graph.

Launching ~50 small kernels per step from Python costs more than the kernels themselves
for all but huge batches. A CUDA graph records the work of one collection -- policy,
env step, final-observation swap, buffer writes, for all ``T`` steps -- and replays it
with one call, reading and writing the same ("static") memory every time.

What makes that correct for a stateful env, and what it requires:

* **Warm-up and capture.** The first call runs an ordinary collection on a side stream
  (its transitions are returned; it also runs ``torch.compile`` and the env's first-step
  validation), then captures the next collection without running it.
* **The env's state, by protocol.** The env says which tensors hold its per-step state
  through ``env.live_state()`` (live tensors) and ``env.load_live_state(d)`` (take these
  values): see :mod:`gpu_envs.utils.live_state`. ``BatchedEnv`` gives its cached root
  observations and its backend's state; a torch vector env gives its own (the built-in
  envs update theirs in place; a user env implements the two methods or declares
  ``state_attributes = ("pos", ...)``); ``TransformedEnv`` adds its transforms' tensors.
  An env that tells nothing is refused with :class:`RolloutError` naming what to add.
* **Pinning.** The tensors ``live_state()`` returns after the warm-up are the graph's
  state ("pinned"). State updated in place needs nothing more. State a step re-binds
  (the root observations, a user env's ``self.t = self.t + 1``) is copied, at the end of
  the graph, back into the pinned tensors; after each replay the env is handed those
  values with ``load_live_state``, and before each replay whatever changed from outside
  (``env.reset()``, eager steps in between) is copied in. Each replay starts where the
  last one, or the last eager step, ended.
* **Random numbers.** ``env.generator`` (random actions) is registered with the graph, as
  torch's default generator is: replays draw fresh numbers, in the same sequence as eager
  collections. The built-in envs' counter-based generators are state tensors like any other;
  the capture runs inside :func:`~gpu_envs.utils.capture.capturing`, so their reset
  draws are recorded as ops on those tensors (not read from their eager pools), and
  ``load_live_state`` after each replay tells the pools the counters moved.
* **Requirements.** Python-side state that changes per step cannot be replayed: the
  plain attributes (numbers, flags, strings) of the env's layers (the env, ``env.env``,
  its ``backend``, ``backend.env``, transforms) are compared around the capture and a
  change is refused, as are host syncs (``.item()``, ``validate=True``) and state off the
  env's device. The policy's parameters may be updated in place between collections
  (optimizer steps do that); replacing the policy object captures a new graph.

Example::

    traj = collect(env, policy, steps=64, cudagraph=True)   # warm-up + capture
    traj = collect(env, policy, steps=64, cudagraph=True)   # one graph replay
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, RolloutError
from gpu_envs.rollout.cache import cached, collect_cache
from gpu_envs.rollout.compiled import compiled_loop
from gpu_envs.rollout.loop import Policy, RolloutBuffer, make_step, run_loop
from gpu_envs.utils.capture import capturing
from gpu_envs.utils.devices import normalize_device
from gpu_envs.utils.live_state import same_memory

__all__ = ["CUDA_GRAPHS", "CudaGraphs", "GraphCollector", "graph_collector", "python_state"]

_SCALARS = (bool, int, float, str, bytes, type(None))
_LAYER_LINKS = ("env", "backend")  # how an env reaches the object it wraps


def _layers(env: Any) -> list[Any]:
    """The env and what it wraps, through ``.env``/``.backend`` and ``.transforms``."""
    found, todo = [], [env]
    while todo:
        obj = todo.pop()
        if any(obj is seen for seen in found):
            continue
        found.append(obj)
        attrs = getattr(obj, "__dict__", {})
        todo.extend(attrs[name] for name in _LAYER_LINKS if attrs.get(name) is not None)
        todo.extend(t for t in attrs.get("transforms", ()) if hasattr(t, "__dict__"))
    return found


def python_state(env: Any) -> dict[tuple[int, str], Any]:
    """``(layer index, attribute) -> value`` of the plain Python attributes of the env's layers."""
    return {
        (i, name): value
        for i, layer in enumerate(_layers(env))
        for name, value in vars(layer).items()
        if isinstance(value, _SCALARS)
    }


def _same_value(a: Any, b: Any) -> bool:
    return type(a) is type(b) and (a == b or (a != a and b != b))  # NaN == NaN here


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} {value.dtype} tensor on {value.device}"
    return "missing" if value is None else f"a {type(value).__name__}"


class CudaGraphs:
    """The CUDA calls a :class:`GraphCollector` makes, in one place.

    Tests (and ``benchmarks/gpu_check.py --smoke``) swap in an emulation that records and
    replays ATen ops on the CPU (``tests/graph_emulation.py``), which is how the pinning
    logic above is checked on machines without a GPU.
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
        if getattr(env, "validate_actions", False):
            raise InvalidArgumentError(
                "cudagraph=True cannot capture an env built with validate_actions=True (its value checks sync with the host "
                "every step); build it without validate_actions, or use cudagraph=False."
            )
        live_state = getattr(env, "live_state", None)
        if not callable(live_state) or not callable(getattr(env, "load_live_state", None)):
            raise RolloutError(
                f"cudagraph=True needs the env's state: {type(env).__name__} has no live_state()/load_live_state(). "
                "Wrap the env with gpu_envs.wrap() (or give it those two methods; see gpu_envs.utils.live_state)."
            )
        live_state()  # refuses, naming what to add, an env that does not expose its state
        self.env, self.policy, self.buffer, self.compile, self.api = env, policy, buffer, compile, api
        self.device = device
        self.graph: Any = None
        self._pinned: dict[str, torch.Tensor] = {}

    # -------------------------------------------------------------- public
    def collect(self) -> TensorDictBase:
        if self.graph is None:
            return self._warm_up_and_capture()
        self._copy_in()
        self.graph.replay()
        self.env.load_live_state(self._pinned)
        return self.buffer.data

    # ------------------------------------------------------------- capture
    def _run(self) -> None:
        if self.compile:
            compiled_loop(self.env, self.policy, self.buffer).run()
        else:
            # no inference_mode: a capture records the ops once, its tensors live on
            run_loop(self.env, make_step(self.env, self.policy), self.buffer, inference=False)

    def _warm_up_and_capture(self) -> TensorDictBase:
        with self.api.side_stream(self.device):
            # an ordinary collection: warms up the allocator, cuBLAS, torch.compile and the
            # env's first-step validation (a compiled loop of a single chunk runs eagerly
            # the first time: one more collection compiles it before the capture)
            self._run()
            if self.compile and not compiled_loop(self.env, self.policy, self.buffer).compiled:
                self._run()
        self._capture()
        # the warm-up transitions are real: return them (the graph runs from the next call)
        return self.buffer.data

    def _capture(self) -> None:
        env = self.env
        pinned = dict(env.live_state())  # a plain dict: the graph writes these tensors, so no date applies
        for name, value in pinned.items():
            if value.device != self.device:
                raise RolloutError(
                    f"env state {name!r} is {_describe(value)}; a CUDA graph on {self.device} cannot replay it. "
                    "Keep the env's state on its device."
                )
        saved = {name: value.clone() for name, value in pinned.items()}
        python_before = python_state(env)
        graph = self.api.new_graph()
        generator = getattr(env, "generator", None)
        if isinstance(generator, torch.Generator):
            self.api.register_generator(graph, generator)
        try:
            # capturing(): the built-in envs' reset draws are recorded as the ops on their
            # counters, not as a gather from an eager pool that replays would never refill
            with self.api.capture(graph), capturing():
                self._run()
                self._write_back(pinned)
        except RolloutError:
            env.load_live_state(saved)
            raise
        except Exception as err:  # a sync, a CPU op, an unsupported op inside the capture
            env.load_live_state(saved)
            raise RolloutError(
                f"could not capture the collection in a CUDA graph: {type(err).__name__}: {err}. The env and policy must "
                "run without host syncs (.item(), bool(tensor), nonzero, validate_actions=True) and keep their per-step state "
                "in device tensors; find a sync with tests/sync_guard.py's no_sync(), or use cudagraph=False."
            ) from err
        python_after = python_state(env)
        changed = [key for key, value in python_before.items() if not _same_value(python_after.get(key), value)]
        if changed:
            layers = _layers(env)
            for i, attr in changed:
                setattr(layers[i], attr, python_before[i, attr])
            env.load_live_state(saved)
            names = ", ".join(f"{type(layers[i]).__name__}.{attr}" for i, attr in changed[:5])
            raise RolloutError(
                f"the env keeps Python-side state that changes every step ({names}); a CUDA graph replays device "
                "work only, so that state would freeze. Keep per-step state in device tensors (and list them in "
                "live_state() or state_attributes), or use cudagraph=False."
            )
        # the capture ran nothing (the emulation undoes what it ran): the pinned tensors hold
        # the warm-up's final state, and state the capture re-bound is handed them back
        env.load_live_state(pinned)
        self._pinned = pinned
        self.graph = graph

    def _write_back(self, pinned: dict[str, torch.Tensor]) -> None:
        """Inside the capture: copy state the steps re-bound into the pinned tensors."""
        self._copy_state(
            pinned,
            lambda name, old, new: (
                f"env state {name!r} changed from {_describe(old)} to {_describe(new)} during a "
                "step; a CUDA graph needs state of fixed shapes and dtypes."
            ),
        )

    def _copy_in(self) -> None:
        """Before a replay: bring state replaced since the last one into the pinned tensors."""
        self._copy_state(
            self._pinned,
            lambda name, pinned, value: (
                f"env state {name!r} is now {_describe(value)} but the captured graph was "
                f"built for {_describe(pinned)}; collect with a new RolloutBuffer to capture again."
            ),
        )

    def _copy_state(self, pinned: dict[str, torch.Tensor], mismatch: Callable[[str, Any, Any], str]) -> None:
        """Copy the env's current state into ``pinned`` where it lives elsewhere; refuse a changed shape or dtype."""
        current = self.env.live_state()
        for name, target in pinned.items():
            value = current.get(name)
            if not isinstance(value, torch.Tensor) or value.shape != target.shape or value.dtype != target.dtype:
                raise RolloutError(mismatch(name, target, value))
            if not same_memory(value, target):
                target.copy_(value)


def graph_collector(env: Any, policy: Policy | None, buffer: RolloutBuffer, compile: bool) -> GraphCollector:
    """The cached :class:`GraphCollector` for (env, buffer, policy, compile); one graph per buffer."""
    return cached(
        collect_cache(env).graphs,
        (id(buffer), id(policy), compile),
        lambda entry: entry.policy is policy and entry.buffer is buffer,
        lambda: GraphCollector(env, policy, buffer, compile),
    )
