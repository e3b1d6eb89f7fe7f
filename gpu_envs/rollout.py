"""On-device rollouts: a preallocated ``[N, T]`` buffer and the loop that fills it.

A learner on the GPU wants every iteration's transitions in one TensorDict ``[N, T]``
on the env's device, written in place (no per-iteration allocation, no host copy),
with episodes that carry on across iterations. :func:`collect` does that:

* the env's current root (``env.root()``) is where the collection starts, so the
  episodes of one call continue in the next (the env is reset only if it never was);
* each step's transition is copied into column ``t`` of a :class:`RolloutBuffer`
  (one ``torch._foreach_copy_`` per step; nothing is allocated after the first call);
* ``policy`` is any callable TensorDict -> TensorDict that sets ``"action"`` (a
  ``tensordict.nn`` module, an ``nn.Module`` wrapper, a lambda); ``None`` samples the
  action spec with ``env.generator``;
* ``compile=True`` runs the step function -- ``policy`` + ``env.step_and_maybe_reset``,
  TensorDict glue, the torch env's own ``step`` and the final-observation swap -- under
  ``torch.compile``; ``cudagraph=True`` (CUDA only) captures the whole ``T``-step loop,
  buffer writes included, in one CUDA graph and replays it (see
  :mod:`gpu_envs.rollout_graph`).

The returned TensorDict IS the buffer: the next collection with the same buffer
overwrites it (``.clone()`` it to keep it). With ``buffer=None`` one buffer per
``(env, steps)`` is allocated on the first call and cached on the env object
(attribute ``_gpu_envs_collect_cache``), together with compiled step functions and
captured graphs, so that a training loop allocates nothing after its first iteration.
``env.rollout(...)`` uses the same loop with a fresh buffer each call.

``env`` is a :class:`gpu_envs.BatchedEnv` or anything with its API (``reset``,
``step_and_maybe_reset``, ``root``, the specs, ``batch_size``, ``device``,
``generator``), e.g. a transformed env.

Example::

    import gpu_envs
    from gpu_envs.rollout import collect, gae

    env = gpu_envs.make("CartPole-v1", num_envs=4096, device="cuda", seed=0)
    for iteration in range(100):
        traj = collect(env, policy, steps=64)        # TensorDict [4096, 64], same memory each time
        ...                                          # values, gae(...), PPO update
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.devices import normalize_device
from gpu_envs.errors import InvalidArgumentError, ResetNeededError, RolloutError
from gpu_envs.gae import add_gae, gae

__all__ = ["DEFAULT_STEPS", "Policy", "RolloutBuffer", "add_gae", "collect", "gae"]

Policy = Callable[[TensorDictBase], "TensorDictBase | None"]
DEFAULT_STEPS = 64
_DONE_KEYS = ("done", "terminated", "truncated")
_CACHE_ATTR = "_gpu_envs_collect_cache"
_MAX_CACHED_POLICIES = 8


def _check_steps(steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InvalidArgumentError(f"steps must be an int >= 1, got {steps!r}.")
    return steps


def _key(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _spec_layout(env: Any) -> dict:
    """Key -> (per-env shape, dtype) of a transition, as far as the env's specs tell."""
    layout: dict = {}

    def leaves(spec: Any) -> list:
        items = getattr(spec, "items", None)
        return list(items(True, True)) if callable(items) else []

    try:
        obs = [(_key(k), s.shape, s.dtype) for k, s in leaves(env.observation_spec)]
        for key, shape, dtype in obs:
            layout[key] = (shape, dtype)
        for name in _DONE_KEYS:
            layout[(name,)] = (torch.Size([1]), torch.bool)
        action = env.action_spec
        if getattr(action, "dtype", None) is not None:
            layout[("action",)] = (action.shape, action.dtype)
        for key, shape, dtype in obs:
            layout[("next", *key)] = (shape, dtype)
        layout[("next", "reward")] = (env.reward_spec.shape, env.reward_spec.dtype)
        for name in (*_DONE_KEYS, "final_obs_missing"):
            layout[("next", name)] = (torch.Size([1]), torch.bool)
        for k, s in leaves(getattr(env, "info_spec", None)):
            layout[("next", *_key(k))] = (s.shape, s.dtype)
    except (AttributeError, TypeError):
        pass  # an env with partial specs: the first transition fills in the rest
    return layout


class RolloutBuffer:
    """A TensorDict ``[*env.batch_size, steps]`` on ``env.device``, written in place.

    It is allocated up front from the env's specs (observations, action, reward, done
    flags, ``final_obs_missing``, info entries, under torchrl's keys) and checked
    against the first transition written: keys the policy (or a transform) adds, such
    as ``"sample_log_prob"``, get their storage then, once; spec keys the transitions do
    not have are dropped. From then on every step is one in-place copy per key, and a
    transition whose keys, shapes or dtypes differ raises :class:`RolloutError`.

    Attributes:
        data: the TensorDict ``[*B, T]`` (``B = env.batch_size``); ``collect`` returns it.
        steps: ``T``.

    Example::

        buf = RolloutBuffer(env, steps=128)
        traj = collect(env, policy, buffer=buf)      # traj is buf.data
    """

    def __init__(self, env: Any, steps: int) -> None:
        self.steps = _check_steps(steps)
        self.batch_size = torch.Size(env.batch_size)
        self.device = normalize_device(env.device)
        self._nb = len(self.batch_size)
        self.data = TensorDict({}, batch_size=(*self.batch_size, self.steps), device=self.device)
        for key, (shape, dtype) in _spec_layout(env).items():
            self.data.set(key, self._alloc(shape, dtype))
        self._layout: list[tuple[Any, torch.Size, torch.dtype]] | None = None
        self._columns: list[list[torch.Tensor]] = []

    def _alloc(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros((*self.batch_size, self.steps, *shape), dtype=dtype, device=self.device)

    @property
    def bound(self) -> bool:
        """True once the layout is fixed by a first transition."""
        return self._layout is not None

    def check_env(self, env: Any) -> None:
        """Refuse an env whose batch size or device differ from this buffer's."""
        if torch.Size(env.batch_size) != self.batch_size or normalize_device(env.device) != self.device:
            raise InvalidArgumentError(
                f"this RolloutBuffer holds [{', '.join(map(str, self.batch_size))}, {self.steps}] on {self.device}, "
                f"but the env has batch size {tuple(env.batch_size)} on {env.device}; build it with RolloutBuffer(env, steps)."
            )

    def write(self, t: int, td: TensorDictBase, *, check_keys: bool = False) -> None:
        """Copy transition ``td`` (batch ``[*B]``) into column ``t``; no allocation.

        ``check_keys`` also verifies that ``td`` has no key the buffer lacks (done on
        the first step of each collection; the other steps check only the bound keys).
        """
        if self._layout is None:
            self._bind(td)
        elif check_keys:
            extra = {_key(k) for k in td.keys(include_nested=True, leaves_only=True)} - {
                _key(k) for k, _, _ in self._layout
            }
            if extra:
                raise RolloutError(
                    f"the transition has keys {sorted(extra)} that this RolloutBuffer was not laid out for (its layout "
                    "comes from the first transition it received). Use a new RolloutBuffer (or buffer=None) for this policy/env."
                )
        sources = []
        for key, shape, dtype in self._layout:  # type: ignore[union-attr]
            value = td.get(key, None)
            if not isinstance(value, torch.Tensor) or value.shape != shape or value.dtype != dtype:
                raise self._mismatch(key, value, shape, dtype)
            if check_keys and value.device != self.device:
                raise RolloutError(
                    f"transition entry {key!r} is on {value.device}; the buffer (and env) are on {self.device}."
                )
            sources.append(value)
        torch._foreach_copy_(self._columns[t], sources)

    def _mismatch(self, key: Any, value: Any, shape: torch.Size, dtype: torch.dtype) -> RolloutError:
        got = (
            "nothing"
            if value is None
            else (f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__)
        )
        return RolloutError(
            f"transition entry {key!r} is {got}, but this RolloutBuffer was laid out for {tuple(shape)} {dtype} by the first "
            "transition it received. Every step must produce the same keys, shapes and dtypes; use a new RolloutBuffer "
            "(or buffer=None) if the policy changed."
        )

    def _bind(self, td: TensorDictBase) -> None:
        nb, layout = self._nb, []
        for key in td.keys(include_nested=True, leaves_only=True):
            value = td.get(key)
            if not isinstance(value, torch.Tensor):
                raise RolloutError(
                    f"transition entry {key!r} holds a {type(value).__name__}; a RolloutBuffer stores tensors only. "
                    "Keep non-tensor data out of the TensorDict the policy returns."
                )
            if value.shape[:nb] != self.batch_size or value.device != self.device:
                raise RolloutError(
                    f"transition entry {key!r} has shape {tuple(value.shape)} on {value.device}; expected leading dims "
                    f"{tuple(self.batch_size)} on {self.device} (the env's batch size and device)."
                )
            have = self.data.get(key, None)
            want = (*self.batch_size, self.steps, *value.shape[nb:])
            if not isinstance(have, torch.Tensor) or have.shape != want or have.dtype != value.dtype:
                self.data.set(key, self._alloc(value.shape[nb:], value.dtype))
            layout.append((key, value.shape, value.dtype))
        wanted = {_key(k) for k, _, _ in layout}
        for key in list(self.data.keys(include_nested=True, leaves_only=True)):
            if _key(key) not in wanted:
                self.data.del_(key)
        self._layout = layout
        storage = [self.data.get(key) for key, _, _ in layout]
        self._columns = [[x.select(nb, t) for x in storage] for t in range(self.steps)]

    def __repr__(self) -> str:
        state = f"{len(self._layout)} keys" if self._layout is not None else "not yet written"
        return f"RolloutBuffer(batch={tuple(self.batch_size)}, steps={self.steps}, device={self.device}, {state})"


# ---------------------------------------------------------------------------
# the step function and the loop
# ---------------------------------------------------------------------------


def make_step(env: Any, policy: Policy | None) -> Callable[[TensorDictBase], tuple[TensorDictBase, TensorDictBase]]:
    """``td -> (transition, next_root)``: act with ``policy``, then ``env.step_and_maybe_reset``."""
    if policy is None:
        spec, batch = env.action_spec, env.batch_size

        def step(td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
            td.set("action", spec.rand(batch, generator=env.generator))
            return env.step_and_maybe_reset(td)

        return step

    def step_with_policy(td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        out = policy(td)
        if out is not None:
            if not isinstance(out, TensorDictBase):
                raise RolloutError(
                    f"the policy returned a {type(out).__name__}; it must return a TensorDict holding 'action' "
                    "(or None after setting td['action'] in place)."
                )
            td = out
        return env.step_and_maybe_reset(td)

    return step_with_policy


def start(env: Any) -> TensorDictBase:
    """The root to act on: ``env.root()`` if the env was reset, else ``env.reset()``.

    ``BatchedEnv`` and ``TransformedEnv`` say so with their ``_needs_reset`` flag; for
    other envs a root without observations (or a ResetNeededError) means "never reset".
    """
    flag = getattr(env, "_needs_reset", None)
    if isinstance(flag, bool):
        return env.reset() if flag else env.root()
    try:
        root = env.root()
    except ResetNeededError:
        return env.reset()
    for key in env.observation_spec.keys(True, True):
        if root.get(key, None) is None:  # never reset: the root has no observations yet
            return env.reset()
    return root


def run_loop(
    env: Any,
    step: Callable,
    buffer: RolloutBuffer,
    first_step: Callable | None = None,
) -> TensorDictBase:
    """Fill ``buffer`` with ``buffer.steps`` transitions from the env's current root."""
    td = start(env)
    for t in range(buffer.steps):
        fn = first_step if (t == 0 and first_step is not None) else step
        td, root = fn(td)
        buffer.write(t, td, check_keys=t == 0)
        td = root
    return buffer.data


class _Cache:
    """Per-env state of :func:`collect`: buffers per ``steps``, compiled steps, graphs."""

    def __init__(self) -> None:
        self.buffers: dict[int, RolloutBuffer] = {}
        self.compiled: dict[int, tuple[Any, Callable, list]] = {}
        self.graphs: dict[tuple, Any] = {}


def _cache(env: Any) -> _Cache:
    cache = getattr(env, _CACHE_ATTR, None)
    if cache is None:
        cache = _Cache()
        try:
            setattr(env, _CACHE_ATTR, cache)
        except AttributeError as err:
            raise InvalidArgumentError(
                f"collect(buffer=None) caches its buffer on the env, but {type(env).__name__} refuses new attributes; "
                "pass buffer=RolloutBuffer(env, steps) and keep it yourself."
            ) from err
    return cache


def _compiled_step(env: Any, policy: Policy | None) -> tuple[Callable, list]:
    """``torch.compile`` of :func:`make_step`, cached per (env, policy); ``[warmed]`` flag."""
    entries = _cache(env).compiled
    entry = entries.get(id(policy))
    if entry is None or entry[0] is not policy:
        if len(entries) >= _MAX_CACHED_POLICIES:
            entries.pop(next(iter(entries)))
        entry = (policy, torch.compile(make_step(env, policy), dynamic=False), [False])
        entries[id(policy)] = entry
    return entry[1], entry[2]


def collect(
    env: Any,
    policy: Policy | None = None,
    steps: int | None = None,
    buffer: RolloutBuffer | None = None,
    *,
    compile: bool = False,
    cudagraph: bool = False,
) -> TensorDictBase:
    """Collect ``steps`` transitions from every env into a ``[N, T]`` TensorDict, in place.

    Args:
        env: a :class:`gpu_envs.BatchedEnv` (or an env with the same API).
        policy: callable TensorDict -> TensorDict that sets ``"action"`` (extra keys it
            writes, e.g. ``"sample_log_prob"``, are recorded too); ``None`` samples
            ``env.action_spec`` with ``env.generator``.
        steps: ``T``; default 64, or the given buffer's length.
        buffer: a :class:`RolloutBuffer` to write into; ``None`` uses the one cached on
            the env for this ``steps`` (allocated on the first call).
        compile: run the step function (policy + ``env.step_and_maybe_reset``) under
            ``torch.compile(dynamic=False)``. The first step of the first compiled
            collection runs eagerly (first-step validation); compiled functions are
            cached per (env, policy object), so pass the same policy object each time.
            Random draws that take a ``torch.Generator`` (action sampling, the built-in
            envs' resets) stay eager ops between compiled regions, so they draw exactly
            the same numbers as an eager collection. Meant for GPUs: on the CPU the
            built-in envs run slower compiled than eager (benchmarks/bench_rollout.py
            says why).
        cudagraph: CUDA only: capture the whole collection (policy, env steps, buffer
            writes) in one CUDA graph and replay it on later calls; the first call runs
            eagerly (warm-up) and captures. See :mod:`gpu_envs.rollout_graph` for what an
            env must satisfy. Combine with ``compile=True`` to capture compiled kernels.

    Returns:
        ``buffer.data``: TensorDict ``[*env.batch_size, T]`` on ``env.device`` with the
        transitions (root keys, ``"action"``, policy outputs and ``"next"``). It is
        overwritten by the next collection into the same buffer.

    Example::

        traj = collect(env, steps=32)                          # random actions
        traj = collect(env, actor, steps=32, compile=True)     # continues the episodes
    """
    if buffer is None:
        steps = DEFAULT_STEPS if steps is None else _check_steps(steps)
        cache = _cache(env)
        buffer = cache.buffers.get(steps)
        if buffer is None:
            buffer = cache.buffers[steps] = RolloutBuffer(env, steps)
    else:
        if not isinstance(buffer, RolloutBuffer):
            raise InvalidArgumentError(f"buffer must be a RolloutBuffer (or None), got {type(buffer).__name__}.")
        if steps is not None and _check_steps(steps) != buffer.steps:
            raise InvalidArgumentError(
                f"steps={steps} but the buffer holds {buffer.steps} steps; pass one or the other."
            )
        buffer.check_env(env)
    if cudagraph:
        from gpu_envs.rollout_graph import graph_collector

        return graph_collector(env, policy, buffer, compile).collect()
    if not compile:
        return run_loop(env, make_step(env, policy), buffer)
    step, warmed = _compiled_step(env, policy)
    first = None if warmed[0] else make_step(env, policy)
    out = run_loop(env, step, buffer, first_step=first)
    warmed[0] = True
    return out
