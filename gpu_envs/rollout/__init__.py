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
* ``compile=True`` runs chunks of ``K`` steps -- ``policy`` + ``env.step_and_maybe_reset``
  (TensorDict glue, the torch env's own ``step``, the final-observation swap) and the
  buffer writes -- as one ``torch.compile``'d function (see :mod:`gpu_envs.rollout.compiled`);
  ``cudagraph=True`` (CUDA only) captures the whole ``T``-step loop,
  buffer writes included, in one CUDA graph and replays it (see
  :mod:`gpu_envs.rollout.cudagraph`).

The returned TensorDict IS the buffer: the next collection with the same buffer
overwrites it (``.clone()`` it to keep it). With ``buffer=None`` one buffer per
``(env, steps)`` is allocated on the first call and cached on the env object
(in the env's ``caches`` dict), together with compiled loops and
captured graphs, so that a training loop allocates nothing after its first iteration.
``env.rollout(...)`` uses the same loop with a fresh buffer each call.
:func:`advance` steps an env without keeping any transition (O(N) memory: for a
summary of what the env's transforms count, as ``gpu-envs rollout`` prints).

The package: :mod:`~gpu_envs.rollout.buffer` (the ``[N, T]`` buffer),
:mod:`~gpu_envs.rollout.loop` (the plain loop, which ``env.rollout()`` also runs),
:mod:`~gpu_envs.rollout.cache` (what is kept per env), :mod:`~gpu_envs.rollout.compiled`
(the compiled path), :mod:`~gpu_envs.rollout.cudagraph` (the CUDA-graph path) and
:mod:`~gpu_envs.rollout.gae` (advantages).

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

from typing import Any

from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.protocols import require_env_api
from gpu_envs.rollout.buffer import RolloutBuffer, check_steps
from gpu_envs.rollout.cache import collect_cache
from gpu_envs.rollout.compiled import compiled_loop
from gpu_envs.rollout.gae import add_gae, gae
from gpu_envs.rollout.loop import Policy, advance, check_health_after, check_policy, collecting, make_step, run_loop
from gpu_envs.utils.arguments import as_bool

__all__ = ["DEFAULT_STEPS", "Policy", "RolloutBuffer", "add_gae", "advance", "collect", "gae"]

DEFAULT_STEPS = 64


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
        compile: run the collection as ``T / K`` calls of one ``torch.compile``'d
            function of ``K`` steps (policy, ``env.step_and_maybe_reset``, buffer
            writes; see :mod:`gpu_envs.rollout.compiled`). The first ``K`` steps ever run
            eagerly (first-step validation); compiled functions are cached per (env,
            policy object, buffer), so pass the same policy object each time. Random
            actions (``policy=None``) are drawn with ``env.generator`` outside the
            compiled code, so they are exactly an eager collection's; the built-in envs'
            resets trace without a graph break. Faster than eager on the CPU too
            (``benchmarks/bench_rollout.py``).
        cudagraph: CUDA only: capture the whole collection (policy, env steps, buffer
            writes) in one CUDA graph and replay it on later calls; the first call runs
            eagerly (warm-up) and captures. See :mod:`gpu_envs.rollout.cudagraph` for what an
            env must satisfy. Combine with ``compile=True`` to capture compiled kernels.

    Health checks: the transitions are checked on the device (out-of-range discrete
    actions, non-finite actions, observations, rewards; no host sync) and what was
    flagged is raised as :class:`~gpu_envs.HealthCheckError` here, at the end of the
    collection (on CUDA: at the end of the next one, or at ``env.check_health()``);
    the buffer holds the collection. See :mod:`gpu_envs.core.health`.

    Returns:
        ``buffer.data``: TensorDict ``[*env.batch_size, T]`` on ``env.device`` with the
        transitions (root keys, ``"action"``, policy outputs and ``"next"``). It is
        overwritten by the next collection into the same buffer.

    Example::

        >>> import gpu_envs
        >>> env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
        >>> def actor(td):
        ...     return td.set("action", (td["observation"][:, 2] > 0).long())   # push toward the pole's lean
        >>> traj = collect(env, steps=32)                          # random actions
        >>> traj = collect(env, actor, steps=32)                   # continues the episodes
        >>> traj.batch_size
        torch.Size([8, 32])

        ``compile=True`` runs the same collection as chunks of one ``torch.compile``'d function.
    """
    require_env_api(env, "collect")
    check_policy(policy)
    compile = as_bool(compile, "compile")
    cudagraph = as_bool(cudagraph, "cudagraph")
    if buffer is None:
        steps = DEFAULT_STEPS if steps is None else check_steps(steps)
        cache = collect_cache(env)
        buffer = cache.buffers.get(steps)
        if buffer is None:
            buffer = cache.buffers[steps] = RolloutBuffer(env, steps)
        # a collection into this cache's own buffer follows a new policy's keys (eagerly, or in
        # a compiled loop's eager first chunk, which it re-runs when the layout has moved since)
        buffer.relayout = not cudagraph
    else:
        if not isinstance(buffer, RolloutBuffer):
            raise InvalidArgumentError(f"buffer must be a RolloutBuffer (or None), got {type(buffer).__name__}.")
        if steps is not None and check_steps(steps) != buffer.steps:
            raise InvalidArgumentError(
                f"steps={steps} but the buffer holds {buffer.steps} steps; pass one or the other."
            )
        buffer.check_compatible(env)
    with collecting(env):  # the buffer is scanned once at the end, not each step on its way
        if cudagraph:
            from gpu_envs.rollout.cudagraph import graph_collector

            data = graph_collector(env, policy, buffer, compile).collect()
        elif not compile:
            data = run_loop(env, make_step(env, policy), buffer, random_actions=policy is None)
        else:
            data = compiled_loop(env, policy, buffer).run()
    check_health_after(env, data, "collect()", eager=not (compile or cudagraph))
    return data
