"""GAE(lambda) over ``[N, T]`` rollouts, with exact truncation bootstrapping, on the device.

Generalised advantage estimation needs, for every transition ``t``, the value of the
state the env moved to. Auto-resetting envs make that subtle:

* **terminated** (the MDP ended): the next state is worth nothing -- no bootstrap;
* **truncated** (a time limit cut the episode): the next state is the TRUE final
  observation ``("next", "observation")``, whose value must be bootstrapped (using the
  post-reset observation instead is the classic bug this library exists to avoid);
* **final observation missing** (Isaac Lab without ``compute_final_obs``): the env
  gave a placeholder (NaN by default), so the value of the current observation stands
  in for it -- and the NaN of the placeholder must never reach the result.

Both entry points select with ``torch.where`` (never ``0 * value``, which keeps NaN),
run a fixed reverse scan over ``T`` with no host synchronisation, and treat their
inputs as constants (no autograd graph is recorded).

Example::

    >>> import torch
    >>> import gpu_envs
    >>> from gpu_envs.rollout import collect, gae
    >>> env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
    >>> critic = torch.nn.Linear(4, 1)
    >>> traj = collect(env, steps=128)                         # TensorDict [N, T], random actions
    >>> with torch.no_grad():
    ...     value = critic(traj["observation"])                # [N, T, 1]
    ...     next_value = critic(traj["next", "observation"])   # NaN rows are fine
    >>> adv, target = gae(traj["next", "reward"], value, next_value,
    ...                   traj["next", "terminated"], traj["next", "truncated"],
    ...                   traj["next", "final_obs_missing"], gamma=0.99, lam=0.95)
    >>> adv.shape, bool(torch.allclose(target, adv + value))
    (torch.Size([8, 128, 1]), True)

or, with the values stored in the rollout, :func:`add_gae` reads and writes the keys.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.specs.env_specs import require_scalar_reward
from gpu_envs.utils.arguments import as_number

__all__ = ["add_gae", "gae"]

_FLAGS = ("terminated", "truncated", "final_obs_missing")


def _as_nt(
    name: str, x: torch.Tensor, shape: torch.Size, dtype: torch.dtype | None, device: torch.device
) -> torch.Tensor:
    """View ``x`` as ``[N, T]`` (accepting ``[N, T]`` or ``[N, T, 1]``), checking metadata only."""
    if not isinstance(x, torch.Tensor):
        raise InvalidArgumentError(
            f"gae: {name} must be a torch.Tensor of shape {tuple(shape)} or {(*shape, 1)}, got {type(x).__name__}."
        )
    env_level = len(shape) == 3 and name in _FLAGS and x.shape in (shape[:2], shape[:2] + (1,))
    if x.shape != shape and x.shape != shape + (1,) and not env_level:
        if len(shape) == 3:
            raise InvalidArgumentError(
                f"gae: {name} has shape {tuple(x.shape)} but the per-agent reward gives [N, T, A] = {tuple(shape)}; "
                "pass values as [N, T, A, 1] and flags as [N, T, A, 1] (each agent's) or [N, T, 1] (the env's)."
            )
        raise InvalidArgumentError(
            f"gae: {name} has shape {tuple(x.shape)} but reward gives [N, T] = {tuple(shape)}; pass every input as "
            f"[N, T] or [N, T, 1] (e.g. traj['next', 'reward'] and critic outputs of shape [N, T, 1])."
        )
    if x.device != device:
        raise InvalidArgumentError(
            f"gae: {name} is on {x.device} but reward is on {device}; put every input on one device."
        )
    if name in _FLAGS and x.dtype != torch.bool:
        # a float flag has no exact meaning here (is 0.3 an episode end?): refuse rather than guess
        raise InvalidArgumentError(
            f"gae: {name} must be a bool tensor, got {x.dtype}. Pass traj['next', {name!r}] as gpu_envs gives it, "
            f"or convert flags stored as numbers yourself (e.g. {name}.bool() for exact 0/1 values)."
        )
    if name not in _FLAGS and (x.dtype.is_complex or x.dtype == torch.bool):
        raise InvalidArgumentError(f"gae: {name} must hold real numbers, got {x.dtype}.")
    x = x.reshape(shape[:2]).unsqueeze(-1).expand(shape) if env_level else x.reshape(shape)
    return x if dtype is None else x.to(dtype)


@torch.no_grad()
def gae(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    final_obs_missing: torch.Tensor | None = None,
    *,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets ``(A, A + V)`` of a rollout ``[N, T]`` (time is dim 1).

    Args:
        reward: ``[N, T]`` or ``[N, T, 1]``, the reward of each transition; or, for an
            env of agent groups, one group's ``("next", group, "reward")`` ``[N, T, A, 1]``
            (each agent's advantage, torchrl's MAPPO layout).
        value: ``V(observation)`` at each step, same shapes accepted.
        next_value: ``V(("next", "observation"))``: the value of the true final
            observation where an episode ended, of the next observation elsewhere.
            May hold NaN (or anything) on rows where it is not used.
        terminated, truncated: bool ``[N, T(, 1)]`` flags of each transition; with
            per-agent rewards also ``[N, T, A, 1]`` (each agent's flags) -- the env's
            ``[N, T, 1]`` flags then apply to every agent.
        final_obs_missing: bool ``[N, T(, 1)]`` or None: rows whose final observation
            is a placeholder; there ``value`` replaces ``next_value``.
        gamma: discount; lam: the GAE lambda.

    The bootstrap value of step ``t`` is ``0`` if terminated, else ``value[t]`` if the
    final observation is missing, else ``next_value[t]``; the recursion
    ``A[t] = delta[t] + gamma * lam * (1 - done[t]) * A[t + 1]`` stops at every episode
    end and at the rollout's end (``A[T] = 0``, so the last step bootstraps from
    ``next_value[T - 1]``). The outputs have ``value``'s shape and the common floating
    dtype of ``reward``, ``value`` and ``next_value``.
    """
    if isinstance(reward, torch.Tensor) and reward.dim() == 3:
        require_scalar_reward(reward.shape[2:], "gae")
    per_agent = isinstance(reward, torch.Tensor) and reward.dim() == 4 and reward.shape[3] == 1
    if not isinstance(reward, torch.Tensor) or (reward.dim() not in (2, 3) and not per_agent):
        got = tuple(reward.shape) if isinstance(reward, torch.Tensor) else type(reward).__name__
        raise InvalidArgumentError(
            f"gae: reward must be [N, T] or [N, T, 1] (time on dim 1), or [N, T, A, 1] per agent, got {got}."
        )
    shape = reward.shape[:3] if per_agent else reward.shape[:2]
    if 0 in shape:
        raise InvalidArgumentError(
            f"gae: the rollout is empty (reward has shape {tuple(reward.shape)}: N = {shape[0]}, T = {shape[1]}); "
            "collect at least one step of at least one env."
        )
    gamma = as_number(gamma, "gae: gamma", minimum=0.0, maximum=1.0)
    lam = as_number(lam, "gae: lam", minimum=0.0, maximum=1.0)
    if not isinstance(value, torch.Tensor) or not isinstance(next_value, torch.Tensor):
        raise InvalidArgumentError("gae: value and next_value must be torch tensors of shape [N, T] or [N, T, 1].")
    dtype = torch.promote_types(torch.promote_types(reward.dtype, value.dtype), next_value.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    device = reward.device
    r = _as_nt("reward", reward, shape, dtype, device)
    v = _as_nt("value", value, shape, dtype, device)
    nv = _as_nt("next_value", next_value, shape, dtype, device)
    term = _as_nt("terminated", terminated, shape, None, device)
    done = term | _as_nt("truncated", truncated, shape, None, device)
    if final_obs_missing is not None:
        # placeholder final observation: the current state's value stands in for it
        nv = torch.where(_as_nt("final_obs_missing", final_obs_missing, shape, None, device), v, nv)
    bootstrap = torch.where(term, 0.0, nv)
    # time-major copies: each step of the scan reads and writes one contiguous row
    delta = (r + gamma * bootstrap - v).movedim(1, 0).contiguous()
    decay = ((~done).to(dtype) * (gamma * lam)).movedim(1, 0).contiguous()
    adv = torch.empty_like(delta)
    steps = shape[1]
    adv[steps - 1] = delta[steps - 1]
    for t in range(steps - 2, -1, -1):
        torch.addcmul(delta[t], decay[t], adv[t + 1], out=adv[t])
    adv = adv.movedim(0, 1).contiguous()
    target = adv + v
    return adv.reshape(value.shape), target.reshape(value.shape)


def add_gae(
    traj: TensorDictBase,
    *,
    gamma: float,
    lam: float,
    value_key: str = "state_value",
    advantage_key: str = "advantage",
    target_key: str = "value_target",
) -> TensorDictBase:
    """Run :func:`gae` on a rollout TensorDict and store the results in it.

    Reads ``value_key`` and ``("next", value_key)`` (the caller fills both, e.g.
    ``traj["next", "state_value"] = critic(traj["next", "observation"])``),
    ``("next", "reward")``, ``("next", "terminated")``, ``("next", "truncated")`` and,
    when present, ``("next", "final_obs_missing")``; writes ``advantage_key`` and
    ``target_key`` (torchrl's key names by default). Returns ``traj``.

    Example::

        >>> import torch
        >>> import gpu_envs
        >>> from gpu_envs.rollout import collect
        >>> critic = torch.nn.Linear(4, 1)
        >>> traj = collect(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0), steps=32)
        >>> with torch.no_grad():
        ...     traj["state_value"] = critic(traj["observation"])
        ...     traj["next", "state_value"] = critic(traj["next", "observation"])
        >>> traj = add_gae(traj, gamma=0.99, lam=0.95)
        >>> traj["advantage"].shape, traj["value_target"].shape
        (torch.Size([8, 32, 1]), torch.Size([8, 32, 1]))
    """
    if not isinstance(traj, TensorDictBase):
        raise InvalidArgumentError(
            f"add_gae: traj must be the rollout TensorDict (from collect or env.rollout), got {type(traj).__name__}."
        )
    keys = set(traj.keys(include_nested=True))
    needed = [("next", "reward"), ("next", "terminated"), ("next", "truncated")]
    absent = [k for k in needed if k not in keys]
    if absent:
        raise InvalidArgumentError(
            f"add_gae: the rollout has no {absent[0]!r} entry; pass the TensorDict collect() or env.rollout() returned."
        )
    missing = [k for k in (value_key, ("next", value_key)) if k not in keys]
    if missing:
        raise InvalidArgumentError(
            f"add_gae: the rollout has no {missing[0]!r} entry; compute the values first, e.g. "
            f"traj[{value_key!r}] = critic(traj['observation']) and "
            f"traj['next', {value_key!r}] = critic(traj['next', 'observation'])."
        )
    adv, target = gae(
        traj.get(("next", "reward")),
        traj.get(value_key),
        traj.get(("next", value_key)),
        traj.get(("next", "terminated")),
        traj.get(("next", "truncated")),
        traj.get(("next", "final_obs_missing"), None),
        gamma=gamma,
        lam=lam,
    )
    traj.set(advantage_key, adv)
    traj.set(target_key, target)
    return traj
