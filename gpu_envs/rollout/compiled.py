"""``collect(..., compile=True)``: a collection as a few calls of one compiled ``K``-step function.

A compiled step still pays Python per call: dynamo's guards, the runtime wrappers, the
TensorDicts it hands back, then the buffer write. At small batches that is most of the
step. So the unit compiled here is a CHUNK of ``K`` steps: policy, ``env.step_and_maybe_reset``
(the env's own step, the final-observation swap, the TensorDict glue) and the writes into
the ``[N, T]`` buffer (on a GPU; on a CPU they follow the call, below), unrolled ``K``
times in one graph, called ``T / K`` times per collection. Only the root TensorDict and the
last transition come back to Python (on a CPU, each step's values too).

* ``K`` is the largest divisor of ``T`` up to a cap that shrinks as ``N`` grows (per-call
  overhead matters at small ``N``; at large ``N`` the kernels dominate and a longer
  unrolled graph only costs compile time): one compiled function per (env, policy, ``T``).
* Random actions (``policy=None``) are drawn with ``env.generator`` eagerly, one draw per
  step exactly as an eager collection does (an op taking a ``torch.Generator`` cannot be
  traced), and passed in; the built-in envs draw their resets with traceable counter-based
  generators, so nothing else leaves the graph (``tests/test_graph_breaks.py`` asserts 0
  graph breaks).
* On a CPU the buffer writes leave the graph: the chunk returns each step's values
  (:meth:`CompiledLoop.chunk_values`) and one ``torch._foreach_copy_`` per step puts them
  in the buffer (:meth:`RolloutBuffer.write_values`). Inductor's CPU code for the in-graph
  copies into the buffer's views cost more than the step itself: CartPole at N = 16384,
  ~960 us a step for the eleven columns against ~80 us eagerly (1375 -> 470 us a step),
  N = 4096 377 -> 216 us, N = 256 79 -> 61 us. On other devices they stay in the graph.
* Under a ``TorchDispatchMode`` (a sync guard, a FLOP counter) the chunk runs eagerly:
  ``torch.compile`` cannot trace there, and a frame it skipped once it would never compile
  again in the process.
* The first chunk of the first collection runs eagerly: it validates the first step (which
  may read values on the host) and fixes the buffer's layout; the chunk is compiled on the
  next call (so a collection of a single chunk compiles on its second call). Every
  collection then checks its first chunk's last transition against the layout, so a key
  the buffer lacks is refused, not dropped.

Example::

    loop = compiled_loop(env, policy, buffer)
    traj = loop.run()            # buffer.data, [N, T]
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from gpu_envs.rollout.cache import cached, collect_cache
from gpu_envs.rollout.loop import Policy, RolloutBuffer, keep_grad_mode, make_step, start
from gpu_envs.utils.torch_internals import dispatch_mode_active

__all__ = ["CompiledLoop", "chunk_length", "compiled_loop", "own_code"]

# Steps unrolled per compiled call, by batch size. The Python around a call (guards over
# every tensor of the TensorDicts, the runtime wrappers) costs about 100 us on a CPU: at
# N <= 1024 more than the kernels; with the eager built-in step at ~200 us (N = 4096) it
# still made K = 1 no faster than eager, while K = 2 ran 1.4x and K = 4 1.6x (N = 4096 and
# 16384, CartPole). Longer graphs only add compile time (K = 8 compiles in ~3x the time of
# K = 1), and beyond 16384 rows the kernels dominate: K = 2 there.
_MAX_CHUNK = ((1024, 8), (16384, 4))
_LARGE_CHUNK = 2


def chunk_length(steps: int, num_envs: int) -> int:
    """``K``: the largest divisor of ``steps`` not above the cap for ``num_envs``."""
    cap = next((k for limit, k in _MAX_CHUNK if num_envs <= limit), _LARGE_CHUNK)
    return max(k for k in range(1, min(cap, steps) + 1) if steps % k == 0)


class CompiledLoop:
    """``T / K`` calls of one ``torch.compile``'d ``K``-step chunk (see the module docstring)."""

    def __init__(self, env: Any, policy: Policy | None, buffer: RolloutBuffer) -> None:
        self.env, self.policy, self.buffer = env, policy, buffer
        self.k = chunk_length(buffer.steps, int(torch.Size(env.batch_size).numel()))
        self.warmed = False
        self._nb = len(buffer.batch_size)
        self._step: Callable = env.step_and_maybe_reset if policy is None else make_step(env, policy)
        self._keys: list = []
        self._calls = 0
        # on a CPU the buffer writes leave the graph (module docstring): the chunk returns its steps' values
        self.writes_outside = torch.device(buffer.device).type == "cpu"
        self._eager: Callable[..., Any] = self.chunk_values if self.writes_outside else self.chunk
        self._compiled = torch.compile(own_code(self._eager), dynamic=False)

    def chunk(self, td: TensorDictBase, actions: list | None, columns: list) -> tuple[TensorDictBase, TensorDictBase]:
        """``K`` steps from root ``td``, transition ``i`` written into ``columns[j][..., i, ...]``.

        ``actions``: ``K`` actions to set (``policy=None``), or None (the policy acts).
        Returns ``(last transition, next root)``. This is the function ``torch.compile`` traces.
        """
        nb, transition = self._nb, td
        for i in range(self.k):
            if actions is not None:
                td.set("action", actions[i])
            transition, td = self._step(td)
            for column, key in zip(columns, self._keys, strict=True):
                column.select(nb, i).copy_(transition.get(key))
        return transition, td

    def chunk_values(self, td: TensorDictBase, actions: list | None) -> tuple[list, TensorDictBase, TensorDictBase]:
        """:meth:`chunk` without the buffer writes: ``(each step's values in the buffer's key order, last transition, next root)``.

        The CPU form: the caller copies the values into the buffer after the call
        (:meth:`RolloutBuffer.write_values`).
        """
        values, transition = [], td
        for i in range(self.k):
            if actions is not None:
                td.set("action", actions[i])
            transition, td = self._step(td)
            values.append([transition.get(key) for key in self._keys])
        return values, transition, td

    @property
    def compiled(self) -> bool:
        """True once a collection ran through the compiled chunk."""
        return self._calls > 0

    def run(self) -> TensorDictBase:
        """One collection into the buffer; returns ``buffer.data``.

        Runs without autograd, as every collection does (a policy's trainable parameters
        record nothing; the buffer holds ordinary tensors a learner can backpropagate
        through a network fed from).
        """
        with keep_grad_mode(), torch.no_grad():  # autograd back on even after a Ctrl-C in no_grad's __enter__
            return self._run()

    def _run(self) -> TensorDictBase:
        env, buffer, k, nb = self.env, self.buffer, self.k, self._nb
        if self.warmed and self._keys != buffer.keys:  # another policy's collection re-laid the shared buffer out
            self.warmed = False  # the first chunk runs eagerly again and lays it out for this policy
        td = start(env)
        storage = buffer.storage()
        # the batched action spec's sampler: whole batches, the generator checked once (as make_step does)
        sample = env.action_spec.sampler(generator=env.generator) if self.policy is None else None
        for t in range(0, buffer.steps, k):
            if not self.warmed:  # the very first chunk: eager, validating, binding the layout
                td = self._eager_chunk(td)
                storage = buffer.storage()
                continue
            actions = None if sample is None else [sample() for _ in range(k)]
            chunk = self._eager if dispatch_mode_active() else self._compiled
            if self.writes_outside:
                values, transition, td = chunk(td, actions)
                for i, step in enumerate(values):
                    buffer.write_values(t + i, step)
            else:
                transition, td = chunk(td, actions, [x.narrow(nb, t, k) for x in storage])
            self._calls += chunk is self._compiled
            if t == 0:
                buffer.check_keys(transition)
        return buffer.data

    def _eager_chunk(self, td: TensorDictBase) -> TensorDictBase:
        step = make_step(self.env, self.policy)
        for t in range(self.k):
            transition, td = step(td)
            self.buffer.write(t, transition, check_keys=t == 0)
        self._keys = self.buffer.keys
        self.warmed = True
        return td


def own_code(method: Callable) -> Callable:
    """``method`` bound to the same object, through a copy of its code object that no other loop shares.

    dynamo keeps its compiled graphs, and counts recompiles against
    ``torch._dynamo.config.recompile_limit`` (8), per code object. Every loop's ``chunk``
    shares ``CompiledLoop.chunk``'s code, and each new loop (another env, policy or ``T``)
    fails the last one's guards: the ninth loop of a process hit the limit and ran eagerly,
    with only a logged warning. With a code object of its own, each loop compiles once and
    its guards are checked against its own graph only.
    """
    func = method.__func__  # type: ignore[attr-defined]  # a bound method
    copy = types.FunctionType(
        func.__code__.replace(), func.__globals__, func.__name__, func.__defaults__, func.__closure__
    )
    copy.__qualname__ = func.__qualname__
    return types.MethodType(copy, method.__self__)  # type: ignore[attr-defined]


def compiled_loop(env: Any, policy: Policy | None, buffer: RolloutBuffer) -> CompiledLoop:
    """The :class:`CompiledLoop` cached on the env for (policy, buffer)."""
    return cached(
        collect_cache(env).compiled,
        (id(policy), id(buffer)),
        lambda loop: loop.policy is policy and loop.buffer is buffer,
        lambda: CompiledLoop(env, policy, buffer),
    )
