"""CUDA graphs emulated on the CPU: how the graph collector's logic is tested without a GPU.

A real capture records kernels without running them and a replay re-runs them on the
same ("static") memory. :class:`EmulatedGraphs` does the same with ATen ops: a dispatch
mode records every op of the capture (running it, to get its outputs, then undoing its
writes into memory that existed before), and :meth:`EmulatedGraph.replay` re-runs the
recorded ops on the very same tensors. A host sync inside the capture raises, as
``cudaStreamBeginCapture`` would. Used by ``tests/test_compile.py`` and by
``benchmarks/gpu_check.py --smoke``.

Example::

    collector = GraphCollector(env, policy, RolloutBuffer(env, 16), api=EmulatedGraphs())
    first = collector.collect()      # warm-up + capture
    second = collector.collect()     # one emulated replay
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from gpu_envs.rollout.cudagraph import CudaGraphs

__all__ = ["EmulatedGraph", "EmulatedGraphs", "SyncInCapture"]


class SyncInCapture(RuntimeError):
    pass


class _Recorder(TorchDispatchMode):
    """Records ops and undoes their effects on memory that existed before the capture.

    A real capture runs nothing: afterwards every pre-existing tensor and generator is as
    it was. Here ops must run (to produce their outputs), so each tensor an op writes
    into that the capture did not allocate is saved first and restored at the end.
    """

    def __init__(self, ops):
        super().__init__()
        self.ops = ops
        self.new_storages: set[int] = set()
        self.saved: list = []
        self.saved_keys: set = set()
        self.generators: dict = {}

    def _save(self, t):
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())
        if t.untyped_storage().data_ptr() not in self.new_storages and key not in self.saved_keys:
            self.saved_keys.add(key)
            self.saved.append((t, t.clone()))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            raise SyncInCapture("operation not permitted when stream is capturing")
        for i, arg in enumerate(func._schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            if arg.alias_info is not None and arg.alias_info.is_write:
                for t in tree_leaves(value):
                    if isinstance(t, torch.Tensor):
                        self._save(t)
            if isinstance(value, torch.Generator) and id(value) not in self.generators:
                self.generators[id(value)] = (value, value.get_state())
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.new_storages.add(t.untyped_storage().data_ptr())
        self.ops.append((func, args, kwargs, out))
        return out

    def undo(self):
        for t, value in reversed(self.saved):
            t.copy_(value)
        for generator, state in self.generators.values():
            generator.set_state(state)


class EmulatedGraph:
    """Replays recorded ops on the recorded tensors: static memory, like a CUDA graph."""

    def __init__(self):
        self.ops = []
        self.replays = 0

    def replay(self):
        self.replays += 1
        with torch.no_grad():
            self._replay()

    def _replay(self):
        for func, args, kwargs, out in self.ops:
            new = func(*args, **kwargs)
            for old, fresh in zip(tree_leaves(out), tree_leaves(new), strict=True):
                if isinstance(old, torch.Tensor) and old is not fresh and old.data_ptr() != fresh.data_ptr():
                    old.copy_(fresh)


class EmulatedGraphs(CudaGraphs):
    def available(self, device):
        return True

    def new_graph(self):
        return EmulatedGraph()

    def register_generator(self, graph, generator):
        pass

    @contextlib.contextmanager
    def capture(self, graph):
        recorder = _Recorder(graph.ops)
        rng = torch.get_rng_state()
        try:
            with torch.no_grad(), recorder:
                yield
        finally:
            recorder.undo()
            torch.set_rng_state(rng)

    @contextlib.contextmanager
    def side_stream(self, device):
        yield
