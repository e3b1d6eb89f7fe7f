"""The ``[N, T]`` rollout buffer and the plain loop that fills it, for any env.

:class:`RolloutBuffer` is a TensorDict ``[*env.batch_size, T]`` on the env's device,
laid out once from the env's specs and the first transition, then written in place (one
``torch._foreach_copy_`` per step). :func:`run_loop` steps an env from its current root
(:func:`start`) and writes every transition into the buffer; :func:`make_step` is the
step function it runs (policy, then ``env.step_and_maybe_reset``).

Nothing here imports an env class: the env is duck-typed (``reset``,
``step_and_maybe_reset``, ``root``, the specs, ``batch_size``, ``device``,
``generator``, ``needs_reset``), so this module sits BELOW :mod:`gpu_envs.env` and
:mod:`gpu_envs.transforms`, whose ``rollout()`` is :func:`rollout` here.
:func:`gpu_envs.rollout.collect` adds the per-env cache, ``torch.compile`` and CUDA
graphs on top of the same loop, and re-exports :class:`RolloutBuffer`.

Example::

    buf = RolloutBuffer(env, steps=64)
    traj = run_loop(env, make_step(env, policy), buf)     # traj is buf.data, [N, 64]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.arguments import as_bool, as_int
from gpu_envs.devices import normalize_device
from gpu_envs.errors import InvalidArgumentError, ResetNeededError, RolloutError
from gpu_envs.memory import ensure_fits
from gpu_envs.tensordicts import entries, set_entry

__all__ = [
    "DONE_KEYS",
    "ENV_API",
    "Policy",
    "RolloutBuffer",
    "check_env",
    "check_policy",
    "check_steps",
    "fused_writer",
    "keep_grad_mode",
    "make_step",
    "rollout",
    "run_loop",
    "start",
]

Policy = Callable[[TensorDictBase], "TensorDictBase | None"]
DONE_KEYS = ("done", "terminated", "truncated")


# What the loop uses of an env (BatchedEnv, TransformedEnv, or anything with their API).
ENV_API = ("reset", "step_and_maybe_reset", "root", "batch_size", "device")


def check_steps(steps: Any) -> int:
    """``steps`` as an int >= 1 (numpy ints accepted), else a clear :class:`InvalidArgumentError`."""
    return as_int(steps, "steps", minimum=1)


def check_env(
    env: Any, who: str, api: tuple[str, ...] = ENV_API, error: type[Exception] = InvalidArgumentError, fix: str = ""
) -> None:
    """Refuse something that is not an env (``collect(42, steps=4)``) with what is expected.

    ``api`` is what ``who`` uses of the env; ``error`` the class raised (interop adapters
    raise ``NotAnEnvError``); ``fix`` a last sentence naming the way out.
    """
    missing = [name for name in api if not hasattr(env, name)]
    if missing:
        raise error(
            f"{who} needs an env (a gpu_envs.BatchedEnv or TransformedEnv, from gpu_envs.make/wrap) as its first "
            f"argument, got {type(env).__module__}.{type(env).__name__} (it lacks {', '.join(missing)}).{fix}"
        )


def check_policy(policy: Any) -> None:
    """``None`` or a callable TensorDict -> TensorDict."""
    if policy is not None and not callable(policy):
        raise InvalidArgumentError(
            f"policy must be a callable TensorDict -> TensorDict that sets 'action' (or None for random actions), "
            f"got {type(policy).__name__}."
        )


def _key(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _node(td: TensorDictBase, path: tuple) -> Any:
    """The entries (``.get(name, None)``) of the sub-TensorDict at ``path``, or None if there is none."""
    node: Any = td
    for part in path:
        node = entries(node).get(part, None)
        if not isinstance(node, TensorDictBase):
            return None
    return entries(node)


def _is_leaf(cls: type) -> bool:
    """TensorDict leaves, non-tensor data included (so that it is refused, not silently skipped)."""
    return not issubclass(cls, TensorDictBase) or getattr(cls, "_is_non_tensor", False)


def leaf_keys(td: TensorDictBase) -> set[tuple]:
    """Every leaf key of ``td`` as a tuple, non-tensor entries included."""
    return {_key(k) for k in td.keys(include_nested=True, leaves_only=True, is_leaf=_is_leaf)}


def _spec_layout(env: Any) -> dict:
    """Key -> (per-env shape, dtype) of a transition, as far as the env's per-env specs tell.

    Reads the ``single_*_spec`` (no batch dims); the buffer adds ``[*B, T]`` in front.
    """
    layout: dict = {}

    def leaves(spec: Any) -> list:
        items = getattr(spec, "items", None)
        return list(items(True, True)) if callable(items) else []

    try:
        obs = [(_key(k), s.shape, s.dtype) for k, s in leaves(env.single_observation_spec)]
        for key, shape, dtype in obs:
            layout[key] = (shape, dtype)
        for name in DONE_KEYS:
            layout[(name,)] = (torch.Size([1]), torch.bool)
        action = env.single_action_spec
        if getattr(action, "dtype", None) is not None:
            layout[("action",)] = (action.shape, action.dtype)
        for key, shape, dtype in obs:
            layout[("next", *key)] = (shape, dtype)
        reward = env.single_reward_spec
        layout[("next", "reward")] = (reward.shape, reward.dtype)
        for name in (*DONE_KEYS, "final_obs_missing"):
            layout[("next", name)] = (torch.Size([1]), torch.bool)
        for k, s in leaves(getattr(env, "single_info_spec", None)):
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
        check_env(env, "RolloutBuffer")
        self.steps = check_steps(steps)
        self.batch_size = torch.Size(env.batch_size)
        self.device = normalize_device(env.device)
        self._nb = len(self.batch_size)
        layout = _spec_layout(env)
        per_step = sum(max(shape.numel(), 1) * dtype.itemsize for shape, dtype in layout.values()) * self.batch_size.numel()
        ensure_fits(
            per_step * self.steps,
            self.device,
            f"a rollout of steps={self.steps} for {self.batch_size.numel()} envs",
            "Collect fewer steps per call (or fewer envs); call collect() repeatedly to go on.",
        )
        self.data = TensorDict({}, batch_size=(*self.batch_size, self.steps), device=self.device)
        for key, (shape, dtype) in layout.items():
            self.data.set(key, self._alloc(shape, dtype))
        self._layout: list[tuple[Any, torch.Size, torch.dtype]] | None = None
        self._parents: list[tuple] = []
        self._where: list[tuple[int, str]] = []
        self._metadata: list[tuple[torch.Size, torch.dtype]] = []
        self._columns: list[list[torch.Tensor]] = []
        # collect()'s own cached buffers re-lay themselves out when a new policy writes other keys
        self.relayout = False

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
        the first and the last step of each collection, so that an entry written from
        step k on is refused rather than dropped; the other steps check only the bound
        keys, which costs nothing extra).
        """
        if self._layout is None:
            self._bind(td)
        elif check_keys:
            self.check_keys(td, t)
        nodes = [_node(td, path) for path in self._parents]
        try:  # the usual step: every entry there with the bound shape and dtype, in one comparison
            sources = [nodes[parent].get(name, None) for parent, name in self._where]
            usual = not check_keys and [(value.shape, value.dtype) for value in sources] == self._metadata
        except AttributeError:  # a sub-TensorDict or an entry missing (None)
            usual = False
        if not usual:
            sources = self._checked_sources(nodes, check_devices=check_keys)
        torch._foreach_copy_(self._columns[t], sources)

    def _checked_sources(self, nodes: list, check_devices: bool) -> list[torch.Tensor]:
        """The entries to copy, each checked against the layout (the error names the first that differs)."""
        sources = []
        for (key, shape, dtype), (parent, name) in zip(self._layout, self._where, strict=True):  # type: ignore[arg-type]
            node = nodes[parent]
            value = None if node is None else node.get(name, None)
            if not isinstance(value, torch.Tensor) or value.shape != shape or value.dtype != dtype:
                raise self._mismatch(key, value, shape, dtype)
            if check_devices and value.device != self.device:
                raise RolloutError(
                    f"transition entry {key!r} is on {value.device}; the buffer (and env) are on {self.device}."
                )
            sources.append(value)
        return sources

    def check_keys(self, td: TensorDictBase, t: int = 0) -> None:
        """Refuse a transition (of step ``t``) with keys the bound layout lacks: they would be dropped.

        Non-tensor entries count as keys (so they are refused, not skipped). With
        :attr:`relayout` (collect's own cached buffer, eager), the first step of a
        collection whose keys differ re-lays the buffer out for them instead.
        """
        keys = leaf_keys(td)
        bound = {_key(k) for k in self.keys}
        if keys == bound:
            return
        if t == 0 and self.relayout:
            self._bind(td)  # a policy with other keys than the last one
            return
        extra = keys - bound
        if extra and t == 0:
            raise RolloutError(
                f"the transition has keys {sorted(extra)} that this RolloutBuffer was not laid out for (its layout "
                "comes from the first transition it received). Use a new RolloutBuffer (or buffer=None) for this policy/env."
            )
        if extra:
            raise RolloutError(
                f"the transition of step {t} has keys {sorted(extra)} that the first step of this collection did not "
                "have: the policy (or a transform) wrote them only from some step on. Every step must write the same "
                "keys; write them on every step (e.g. zeros where there is nothing to say)."
            )

    @property
    def keys(self) -> list:
        """The transition keys stored, in layout order (empty until :attr:`bound`)."""
        return [key for key, _, _ in self._layout or ()]

    def storage(self) -> list[torch.Tensor]:
        """The ``[*B, T, ...]`` tensor of every key of :attr:`keys`, in that order."""
        return [self.data.get(key) for key in self.keys]

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
        for key in td.keys(include_nested=True, leaves_only=True, is_leaf=_is_leaf):
            value = td.get(key)
            if not isinstance(value, torch.Tensor) or getattr(type(value), "_is_non_tensor", False):
                kind = type(getattr(value, "data", value)).__name__ if getattr(type(value), "_is_non_tensor", False) else type(value).__name__
                raise RolloutError(
                    f"transition entry {key!r} holds a {kind}; a RolloutBuffer stores tensors only. "
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
        self._metadata = [(shape, dtype) for _, shape, dtype in layout]
        # each key as (index of its parent TensorDict, leaf name): one walk per parent per write
        self._parents = sorted({_key(key)[:-1] for key, _, _ in layout}, key=len)
        self._where = [(self._parents.index(_key(key)[:-1]), _key(key)[-1]) for key, _, _ in layout]
        self._columns = [[x.select(nb, t) for x in self.storage()] for t in range(self.steps)]

    def __repr__(self) -> str:
        state = f"{len(self._layout)} keys" if self._layout is not None else "not yet written"
        return f"RolloutBuffer(batch={tuple(self.batch_size)}, steps={self.steps}, device={self.device}, {state})"


def make_step(env: Any, policy: Policy | None) -> Callable[[TensorDictBase], tuple[TensorDictBase, TensorDictBase]]:
    """``td -> (transition, next_root)``: act with ``policy``, then ``env.step_and_maybe_reset``."""
    if policy is None:
        # the batched spec draws a whole batch; its generator is checked once here, and the
        # draw (on the env's device, of its batch size) goes into the root without re-checks
        sample = env.action_spec.sampler(generator=env.generator)

        def step(td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
            set_entry(td, "action", sample())
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


def fused_writer(env: Any, buffer: RolloutBuffer) -> Callable[[int], None] | None:
    """``t -> None``: one random-action step written straight into column ``t``, or None.

    An env on its fast path (a ``BatchedEnv`` over a built-in env, see
    :mod:`gpu_envs.fast_steps`) offers ``_transition_stepper(keys)``: a function stepping
    it as ``step_and_maybe_reset`` does and returning the transition's tensors for the
    buffer's keys, with no TensorDict built. With random actions nothing else reads or
    writes a transition, so a step is then one draw, that call and one
    ``torch._foreach_copy_`` -- the same draws from ``env.generator`` and the same values
    as :func:`make_step`'s step. The buffer must be bound (its layout checked against this
    env's transitions, which the collection's first step does); an env without the hook
    (a ``TransformedEnv``: the name is private, so not forwarded) gets None.
    """
    stepper_for = getattr(env, "_transition_stepper", None)
    if stepper_for is None or not buffer.bound:
        return None
    stepper = stepper_for(buffer.keys)
    if stepper is None:
        return None
    sample = env.action_spec.sampler(generator=env.generator)
    columns = buffer._columns

    def write(t: int) -> None:
        torch._foreach_copy_(columns[t], stepper(sample()))

    return write


def start(env: Any) -> TensorDictBase:
    """The root to act on: ``env.root()`` if the env was reset, else ``env.reset()``.

    ``BatchedEnv`` and ``TransformedEnv`` say so with their ``needs_reset`` flag; for
    other envs a root without observations (or a ResetNeededError) means "never reset".
    """
    flag = getattr(env, "needs_reset", None)
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
    *,
    inference: bool = True,
    random_actions: bool = False,
) -> TensorDictBase:
    """Fill ``buffer`` with ``buffer.steps`` transitions from the env's current root.

    The steps (policy and env) run without autograd: a policy whose parameters require
    grad records nothing. What they produce is copied into the buffer, which was
    allocated outside any of this, so the returned data are ordinary tensors a learner
    can backpropagate through (a network fed from them).

    With ``inference`` the steps in between run under ``torch.inference_mode()`` (the
    cheapest: no version counters or view tracking). Its outputs are inference tensors,
    which must not outlive the collection: an env keeps what its last step produced
    (its next root, its physics state) and may later update it in place, or hand it to
    a network that saves it for backward. So the first step (first-step validation and
    any lazy allocation) and the last one run under ``torch.no_grad()`` instead, and
    what the env holds after the loop is ordinary tensors. Without ``inference`` (the
    CUDA-graph capture, which records the ops once) every step runs under
    ``torch.no_grad()``. A reset the env still needs runs before, outside both.

    With ``random_actions`` (``step`` is :func:`make_step`'s for ``policy=None``), the
    steps in between go through :func:`fused_writer` where the env offers it: the same
    transitions, without the TensorDicts of each step.

    The caller's grad mode is restored on the way out whatever happens
    (:func:`keep_grad_mode`): a learner that trains after a Ctrl-C still records.
    """
    td = start(env)
    steps = buffer.steps
    with keep_grad_mode():
        with torch.no_grad():
            td = _write_step(first_step or step, td, buffer, 0)
        if inference and steps > 2:
            fused = fused_writer(env, buffer) if random_actions else None
            with torch.inference_mode():
                if fused is None:
                    for t in range(1, steps - 1):
                        td = _write_step(step, td, buffer, t)
                else:
                    for t in range(1, steps - 1):
                        fused(t)
                    td = env.root()
        with torch.no_grad():
            for t in range(1 if not inference or steps <= 2 else steps - 1, steps):
                td = _write_step(step, td, buffer, t)
    return buffer.data


@contextlib.contextmanager
def keep_grad_mode() -> Iterator[None]:
    """Restore the caller's grad mode on the way out, whatever happens inside.

    ``torch.no_grad`` restores it in ``__exit__``, but a Ctrl-C landing inside its
    ``__enter__`` (after autograd was switched off, before the ``with`` body began) skips
    that, and autograd would stay off for the rest of the process. (Inference mode is
    an RAII guard: it is restored when its object is collected.)
    """
    grad = torch.is_grad_enabled()
    try:
        yield
    finally:
        torch.set_grad_enabled(grad)


def _write_step(step: Callable, td: TensorDictBase, buffer: RolloutBuffer, t: int) -> TensorDictBase:
    """One step from root ``td``, its transition written into column ``t``; returns the next root.

    The keys are compared on the first and the last step (an entry written from step k
    on is an error, not dropped); the steps in between check only the bound keys.
    """
    td, root = step(td)
    buffer.write(t, td, check_keys=t == 0 or t == buffer.steps - 1)
    return root


def rollout(env: Any, steps: int, policy: Policy | None = None, *, reset: bool = True) -> TensorDictBase:
    """``env.rollout(steps, policy, reset=...)``: ``steps`` transitions into a fresh ``[N, T]`` buffer.

    Resets the env first when ``reset`` is True or it never was; otherwise the episodes
    continue from the current root. The returned TensorDict is the caller's to keep
    (a new buffer per call, unlike :func:`gpu_envs.rollout.collect`).
    """
    check_env(env, "rollout")
    steps = check_steps(steps)
    check_policy(policy)
    reset = as_bool(reset, "reset")
    buffer = RolloutBuffer(env, steps)  # checked (memory) before the env is touched
    if reset or env.needs_reset:
        env.reset()
    return run_loop(env, make_step(env, policy), buffer, random_actions=policy is None)
