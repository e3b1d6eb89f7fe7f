"""The plain collection loop: act, step, write the transition into a :class:`RolloutBuffer` column.

:func:`run_loop` steps an env from its current root (:func:`start`) and writes every
transition into the buffer (:mod:`gpu_envs.rollout.buffer`); :func:`make_step` is the
step function it runs (policy, then ``env.step_and_maybe_reset``), :func:`fused_writer`
the random-action shortcut that copies a step's tensors straight into the buffer.
``env.rollout()`` is :func:`rollout` here (called at call time, so the env layer does
not depend on this package when it is imported). :func:`gpu_envs.rollout.collect` adds
the per-env cache, ``torch.compile`` and CUDA graphs on top of the same loop.

The env is duck-typed (:class:`~gpu_envs.contract.protocols.EnvAPI`): a
``BatchedEnv``, a ``TransformedEnv`` or anything with their API.

Example::

    buf = RolloutBuffer(env, steps=64)
    traj = run_loop(env, make_step(env, policy), buf)     # traj is buf.data, [N, 64]
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, ResetNeededError, RolloutError
from gpu_envs.contract.keys import OBSERVATION
from gpu_envs.contract.protocols import OutputTargets, require_env_api
from gpu_envs.rollout.buffer import RolloutBuffer, check_steps
from gpu_envs.utils.arguments import as_bool
from gpu_envs.utils.devices import normalize_device
from gpu_envs.utils.tensordicts import set_entry

__all__ = [
    "Policy",
    "action_slots",
    "advance",
    "check_health_after",
    "check_policy",
    "collecting",
    "fused_writer",
    "keep_grad_mode",
    "make_step",
    "output_slots",
    "rollout",
    "run_fused",
    "run_loop",
    "start",
]

Policy = Callable[[TensorDictBase], "TensorDictBase | None"]


def check_policy(policy: Any) -> None:
    """``None`` or a callable TensorDict -> TensorDict."""
    if policy is not None and not callable(policy):
        raise InvalidArgumentError(
            f"policy must be a callable TensorDict -> TensorDict that sets 'action' (or None for random actions), "
            f"got {type(policy).__name__}."
        )


def make_step(env: Any, policy: Policy | None) -> Callable[[TensorDictBase], tuple[TensorDictBase, TensorDictBase]]:
    """``td -> (transition, next_root)``: act with ``policy``, then ``env.step_and_maybe_reset``."""
    if policy is None:
        # the batched spec draws a whole batch; its generator is checked once here, and the
        # draw (on the env's device, of its batch size) goes into the root without re-checks
        sample = env.action_spec.sampler(generator=env.generator)
        if getattr(env.action_spec, "dtype", None) is None:  # agent groups: a TensorDict of (group, "action") entries

            def step_groups(td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
                td.update(sample())
                return env.step_and_maybe_reset(td)

            return step_groups

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

    An env with :class:`~gpu_envs.contract.protocols.FusedCollectEnv`'s
    ``transition_values(keys)`` (a ``BatchedEnv``: its step path's
    :meth:`~gpu_envs.core.step_path.StepPath.values`, the step ``step_and_maybe_reset``
    makes -- same guard, action check, backend advance and final-observation rule --
    returning the transition's tensors for the buffer's keys instead of TensorDicts).
    With random actions nothing else reads or writes a transition, so a step is then
    one draw, that call and one :meth:`RolloutBuffer.write_values` -- the same draws
    from ``env.generator`` and the same values as :func:`make_step`'s step. The buffer
    must be bound (its layout checked against this env's transitions, which the
    collection's first step does); an env without the method, one answering None (a
    ``TransformedEnv``, whose transforms rewrite transitions) or one whose transitions
    hold more than the path makes (info entries) gets None.
    """
    values_for = getattr(env, "transition_values", None)
    if not callable(values_for) or not buffer.bound:
        return None
    values: Any = values_for(buffer.keys)
    if values is None:
        return None
    write_values = buffer.write_values
    slots = action_slots(env, buffer)
    if slots is not None:  # each step's action drawn into its own slot: the buffer's copy finds it in place
        draw_into = cast("Callable[[torch.Tensor], None]", env.action_spec.sampler_into(generator=env.generator))

        def write_drawn(t: int) -> None:
            action = slots[t]
            draw_into(action)
            write_values(t, values(action))

        return write_drawn
    sample = env.action_spec.sampler(generator=env.generator)

    def write(t: int) -> None:
        write_values(t, values(sample()))

    return write


def action_slots(env: Any, buffer: RolloutBuffer) -> list[torch.Tensor] | None:
    """The buffer's ``"action"`` slot of every step, where the action spec can draw into it; else None.

    Where ``env.action_spec.sampler_into`` has a draw (:class:`~gpu_envs.contract.specs.Discrete`)
    and each slot is a contiguous tensor of the spec's shape and dtype on its device (the
    time-major buffer's column ``t``), a random-action step draws its action there: the
    same numbers from ``env.generator`` as :meth:`~gpu_envs.contract.specs.Spec.sampler`,
    with no tensor made and the copy into the buffer skipped (a copy onto its own memory).
    """
    spec = env.action_spec
    sampler_into = getattr(spec, "sampler_into", None)
    if not callable(sampler_into) or sampler_into(generator=env.generator) is None:
        return None
    slots = buffer.slots_of("action")
    if slots is None:
        return None
    slot = slots[0]  # every slot of a key has the same shape, dtype and strides (RolloutBuffer.slots_of)
    if (
        tuple(slot.shape) != tuple(spec.shape)
        or slot.dtype != spec.dtype
        or normalize_device(slot.device) != normalize_device(spec.device)
        or not slot.is_contiguous()
    ):
        return None
    return slots


STEP_INTO_BUFFER_MIN_BYTES = 1 << 17
"""From this many bytes of a step's outputs on, a fused collection has the step write them into the buffer.

Naming the slots costs a few microseconds a step (a dict, the env's checks of each
target); the copies it saves cost about a nanosecond per 16 bytes on a CPU (a built-in
CartPole step's outputs are ~45 bytes a row), so below ~128 KB (N ~ 3000) it does not pay.
"""

# a step's outputs (gpu_envs.contract.protocols.OutputTargets) -> the buffer key each is written to, and the
# step it lands in: the post-reset observation is the NEXT step's root observation
_OUTPUT_KEYS = {
    "observation": ((OBSERVATION,), 1),
    "final_observation": (("next", OBSERVATION), 0),
    "reward": (("next", "reward"), 0),
    "terminated": (("next", "terminated"), 0),
    "truncated": (("next", "truncated"), 0),
    "done": (("next", "done"), 0),
}


def output_slots(env: Any, buffer: RolloutBuffer) -> Callable[[int], None] | None:
    """``t -> None``: before fused step ``t``, name the buffer's slots as where the step's outputs go; or None.

    Inside ``env.reusing_outputs()``, an env whose simulator takes output targets
    (:class:`~gpu_envs.contract.protocols.OutputTargets`: ``env.output_targets()``, the
    built-in envs' native CPU step) writes step ``t``'s reward, flags and final
    observation into column ``t`` and its post-reset observation into column ``t + 1``'s
    root observation, so :meth:`RolloutBuffer.write_values` finds them in place (a copy
    onto the same memory is skipped) and each value is written once. The same values as
    without: the copies still run, and any value the step path replaces (a placeholder)
    is copied over its slot. None where the env cannot, or where a step's outputs are
    below :data:`STEP_INTO_BUFFER_MIN_BYTES`.
    """
    targets_of = getattr(env, "output_targets", None)
    sim = targets_of() if callable(targets_of) else None
    if not isinstance(sim, OutputTargets):
        return None
    layout = sim.output_layout()
    named = {name: _OUTPUT_KEYS[name] for name in layout if name in _OUTPUT_KEYS}
    step_bytes = sum(math.prod(shape) * dtype.itemsize for shape, dtype in layout.values())
    if step_bytes < STEP_INTO_BUFFER_MIN_BYTES or not named:
        return None
    slots_of = {}  # each named output's slots, where the buffer holds its key in the step's shape and dtype
    for name, (key, ahead) in named.items():
        slots = buffer.slots_of(key)
        if slots is not None and tuple(slots[0].shape) == layout[name][0] and slots[0].dtype == layout[name][1]:
            slots_of[name] = (slots, ahead)
    steps = buffer.steps
    plans = [
        {name: slots[t + ahead] for name, (slots, ahead) in slots_of.items() if t + ahead < steps} for t in range(steps)
    ]
    write_into = sim.write_next_step_into

    def name_slots(t: int) -> None:
        write_into(plans[t])

    return name_slots


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
    steps go through :func:`fused_writer` where the env offers it: the same transitions,
    without the TensorDicts of each step (:func:`run_fused`). That takes a bound buffer,
    so the first collection into a buffer makes its first step the TensorDict way (which
    binds it); later ones, with ``collect``'s cached buffer, are fused from step 0.

    The caller's grad mode is restored on the way out whatever happens
    (:func:`keep_grad_mode`): a learner that trains after a Ctrl-C still records.
    """
    td = start(env)
    steps = buffer.steps
    inference = inference and getattr(env, "inference_mode_safe", True)  # (a simulator may refuse inference mode)
    fusable = random_actions and inference and steps > 2
    with keep_grad_mode(), collecting(env):
        fused = fused_writer(env, buffer) if fusable and first_step is None else None
        if fused is not None:
            run_fused(env, buffer, fused, 0)
            return buffer.data
        with torch.no_grad():
            td = _write_step(first_step or step, td, buffer, 0)
        fused = fused_writer(env, buffer) if fusable else None
        if fused is not None:
            run_fused(env, buffer, fused, 1)
            return buffer.data
        if inference and steps > 2:
            with torch.inference_mode():
                for t in range(1, steps - 1):
                    td = _write_step(step, td, buffer, t)
        with torch.no_grad():
            for t in range(1 if not inference or steps <= 2 else steps - 1, steps):
                td = _write_step(step, td, buffer, t)
    return buffer.data


def run_fused(env: Any, buffer: RolloutBuffer, fused: Callable[[int], None], first: int) -> None:
    """Fused steps ``first .. buffer.steps - 1`` (:func:`fused_writer`), with the env reusing its outputs.

    As in :func:`run_loop`, the first step of the collection and its last one run under
    ``torch.no_grad()`` and those between under ``torch.inference_mode()``, so what the
    env holds afterwards (its next root, copied on the way out of ``reusing_outputs``)
    is ordinary tensors. Where the env takes output targets, each step writes into the
    buffer's slots itself (:func:`output_slots`).
    """
    steps = buffer.steps
    with torch.no_grad(), reusing_outputs(env):  # every step's tensors are copied into the buffer at once
        into = output_slots(env, buffer)

        def one(t: int) -> None:
            if into is not None:
                into(t)
            fused(t)

        if first == 0:
            one(0)
        with torch.inference_mode():
            for t in range(1, steps - 1):
                one(t)
        one(steps - 1)


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


def reusing_outputs(env: Any) -> contextlib.AbstractContextManager[Any]:
    """Around a fused loop: the env's backend may write each step into memory it reuses (``env.reusing_outputs``).

    Envs without it (wrappers, other env types) get a context that does nothing.
    """
    reusing = getattr(env, "reusing_outputs", None)
    if not callable(reusing):
        return contextlib.nullcontext()
    return cast("contextlib.AbstractContextManager[Any]", reusing())


def collecting(env: Any) -> contextlib.AbstractContextManager[None]:
    """Around a collection: the env's health monitor keeps no hand-written steps (it scans the buffer instead).

    The monitor's steps kept before (a hand-written loop) are scanned first, so steps
    keep their order. Envs without a monitor get a context that does nothing.
    """
    collecting_of = getattr(getattr(env, "health_monitor", None), "collecting", None)
    if not callable(collecting_of):
        return contextlib.nullcontext()
    return cast("contextlib.AbstractContextManager[None]", collecting_of())  # HealthMonitor.collecting


def check_health_after(env: Any, data: TensorDictBase, call: str, eager: bool = True) -> None:
    """After a collection: scan its transitions into the env's health record, then poll it (no wait).

    The env's :class:`~gpu_envs.core.health.HealthMonitor` (``env.health_monitor``;
    a ``TransformedEnv`` forwards its env's) checks ``data`` with the collecting env's
    own action spec and observation keys -- once per collection, in a few ops over the
    ``[N, T]`` buffer -- unless it already watched every step; then a poll raises
    :class:`~gpu_envs.contract.errors.HealthCheckError` for what it holds (on CUDA, what
    the previous poll copied). Envs without a monitor are left alone. An ``eager``
    collection of an env that says its buffer holds only what its simulator wrote and
    vouched for on every step (``env.collection_vouched``: a ``BatchedEnv`` of a built-in
    env's native step; never a ``TransformedEnv``) is counted without the scan.
    """
    monitor = getattr(env, "health_monitor", None)
    if monitor is None or not hasattr(monitor, "poll"):
        return
    if not monitor.every_step:
        obs_keys = list(env.observation_spec.keys(True, True))
        vouched = eager and getattr(env, "collection_vouched", False) is True
        monitor.scan(data, env.single_action_spec, obs_keys, vouched)
    monitor.poll(f"the end of {call}")


def rollout(env: Any, steps: int, policy: Policy | None = None, *, reset: bool = True) -> TensorDictBase:
    """``env.rollout(steps, policy, reset=...)``: ``steps`` transitions into a fresh ``[N, T]`` buffer.

    Resets the env first when ``reset`` is True or it never was; otherwise the episodes
    continue from the current root. The returned TensorDict is the caller's to keep
    (a new buffer per call, unlike :func:`gpu_envs.rollout.collect`).
    """
    require_env_api(env, "rollout")
    steps = check_steps(steps)
    check_policy(policy)
    reset = as_bool(reset, "reset")
    buffer = RolloutBuffer(env, steps)  # checked (memory) before the env is touched
    if reset or env.needs_reset:
        env.reset()
    data = run_loop(env, make_step(env, policy), buffer, random_actions=policy is None)
    check_health_after(env, data, "env.rollout()")
    return data


def advance(env: Any, steps: int, policy: Policy | None = None) -> TensorDictBase:
    """Step the env ``steps`` times from its current root and keep no transitions; returns the last root.

    For runs that want only what the env's transforms count (``EpisodeStats``), the
    videos a ``RecordEpisodes`` writes, or an env moved forward: memory stays O(N)
    whatever ``steps`` is, where ``collect`` / ``env.rollout()`` keep an ``[N, T]``
    buffer (``gpu-envs rollout`` runs this). The episodes continue from the current root
    (the env is reset first only if it never was), the steps run without autograd, and
    the health checks are a hand-written loop's (kept steps scanned in batches; what
    was flagged is raised at the end, as at the end of ``collect``).

    Example:

    >>> import gpu_envs
    >>> from gpu_envs.rollout import advance
    >>> from gpu_envs.transforms import EpisodeStats, TransformedEnv
    >>> stats = EpisodeStats()
    >>> env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0), stats)
    >>> root = advance(env, 200)
    >>> root.batch_size, stats.summary().episodes > 0
    (torch.Size([8]), True)
    """
    require_env_api(env, "advance")
    steps = check_steps(steps)
    check_policy(policy)
    step = make_step(env, policy)
    td = start(env)
    with keep_grad_mode(), torch.no_grad():
        for _ in range(steps):
            _, td = step(td)
    monitor = getattr(env, "health_monitor", None)
    if monitor is not None and hasattr(monitor, "poll"):
        monitor.poll("the end of advance()")
    return td
