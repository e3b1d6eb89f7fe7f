"""Agent groups: the multi-agent layout of the contract, torchrl's.

A multi-agent env has named agents; agents with the same specs are stacked in a
**group**, and every per-agent entry of the TensorDict lives under its group with the
agent dim after the batch dim (torchrl's multi-agent layout, so transitions drop into its
MARL losses):

=================================================  ==================  ==========================
key                                                shape               meaning
=================================================  ==================  ==========================
``(group, obs_key)``, ``("next", group, obs_key)``  ``[N, A, *obs]``    each agent's observation;
                                                                       on rows that ended the
                                                                       TRUE final one
``(group, "action")``                              ``[N, A, *act]``    written by the policy
``("next", group, "reward")``                      ``[N, A, 1]``       each agent's reward
``("next", group, "done" / "terminated" /          ``[N, A, 1]``       each agent's flags
"truncated")``
``("next", group, "final_obs_missing")``           ``[N, A, 1]``       the row's placeholder mask
``("next", "reward")``                             ``[N, 1]``          the team reward: the sum
                                                                       over every agent
``("next", "done" / "terminated" / "truncated")``  ``[N, 1]``          the env's: they decide the
                                                                       auto-reset
=================================================  ==================  ==========================

``env.group_map`` is ``{group: [agent names]}`` (``{}`` for a single-agent env). The
default grouping (:func:`default_group_map`) follows torchrl's for VMAS and PettingZoo:
agents named ``<name>_<int>`` share the group ``<name>`` (a lone ``"agent"`` group is
called ``"agents"``); names without that pattern go to one group ``"agents"``; and a
would-be group whose agents' specs differ is split into one group per agent (named
after it), since a group is one stacked tensor.

Example::

    >>> default_group_map(["agent_0", "agent_1"])
    {'agents': ['agent_0', 'agent_1']}
    >>> default_group_map(["adversary_0", "agent_0", "agent_1"])
    {'adversary': ['adversary_0'], 'agent': ['agent_0', 'agent_1']}
    >>> from gpu_envs.contract.specs import Discrete
    >>> stack_spec(Discrete(5), 3)            # three agents' Discrete(5) actions: one [3] entry
    MultiDiscrete(nvec=5, shape=(3,), dtype=int64, device=cpu)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.keys import ACTION, DONE_KEYS, FINAL_OBS_MISSING, REWARD
from gpu_envs.contract.specs import Binary, Box, Composite, Discrete, MultiDiscrete, Spec

__all__ = [
    "AGENT_FLAG_KEYS",
    "GroupMap",
    "agent_spec",
    "check_group_map",
    "default_group_map",
    "group_entry_keys",
    "group_info_spec",
    "groups_in",
    "missing_spec",
    "stack_spec",
]

GroupMap = dict[str, list[str]]

# the per-agent entries under ("next", group) besides the observations
AGENT_FLAG_KEYS = (*DONE_KEYS, FINAL_OBS_MISSING)


def _prefix(name: str) -> str | None:
    """``"agent"`` for ``"agent_3"``; None for a name not of the form ``<name>_<int>``."""
    head, sep, tail = name.rpartition("_")
    return head if sep and head and tail.isdigit() else None


def default_group_map(agents: Sequence[str], same_specs: Callable[[str, str], bool] | None = None) -> GroupMap:
    """torchrl's default grouping of ``agents`` (module docstring), split where specs differ.

    ``same_specs(a, b)`` says whether agents ``a`` and ``b`` have equal observation and
    action specs (None: all do).
    """
    names = list(agents)
    prefixes = [_prefix(name) for name in names]
    groups: GroupMap = {}
    if all(p is not None for p in prefixes):
        for name, prefix in zip(names, prefixes, strict=True):
            groups.setdefault(str(prefix), []).append(name)
        if list(groups) == ["agent"]:
            groups = {"agents": groups["agent"]}
    else:
        groups = {"agents": names}
    if same_specs is None:
        return groups
    out: GroupMap = {}
    for group, members in groups.items():
        if all(same_specs(members[0], other) for other in members[1:]):
            out[group] = members
        else:  # a group is one stacked tensor: agents whose specs differ get one group each
            for member in members:
                out[member] = [member]
    return out


def check_group_map(group_map: Any, agents: Sequence[str], same_specs: Callable[[str, str], bool]) -> GroupMap:
    """A user's ``group_map``, checked: every agent in exactly one group, groups of agents with equal specs."""
    if not isinstance(group_map, Mapping) or not group_map:
        raise SpecError(
            f"group_map must be a non-empty dict {{group name: [agent names]}}, got {group_map!r}; the agents are "
            f"{list(agents)}. Leave it out for the default grouping."
        )
    out: GroupMap = {}
    seen: dict[str, str] = {}
    for group, members in group_map.items():
        if not isinstance(group, str) or not group or group in ("next", ACTION, REWARD, *DONE_KEYS):
            raise SpecError(
                f"group name {group!r} is not usable: a group is a key of the TensorDict, so it must be a non-empty "
                "str other than 'next', 'action', 'reward' and the done keys."
            )
        if isinstance(members, str) or not isinstance(members, Sequence) or not members:
            raise SpecError(f"group_map[{group!r}] must be a non-empty list of agent names, got {members!r}.")
        for member in members:
            if member not in agents:
                raise SpecError(
                    f"group_map[{group!r}] names {member!r}, which is not an agent of this env: {list(agents)}."
                )
            if member in seen:
                raise SpecError(f"agent {member!r} is in two groups ({seen[member]!r} and {group!r}); put it in one.")
            seen[member] = group
        different = [m for m in members[1:] if not same_specs(members[0], m)]
        if different:
            raise SpecError(
                f"group {group!r} mixes agents whose specs differ ({members[0]!r} and {different[0]!r}): a group "
                "is one stacked tensor per key. Put them in separate groups."
            )
        out[group] = list(members)
    left = [a for a in agents if a not in seen]
    if left:
        raise SpecError(f"group_map leaves out the agents {left}; every agent must be in one group.")
    return out


def stack_spec(spec: Spec, agents: int) -> Spec:
    """One agent's spec stacked for ``agents`` agents: its event shape gains a leading ``[A]``.

    A ``Discrete(n)`` becomes ``MultiDiscrete([n] * A)`` (torchrl's ``Categorical`` of shape
    ``[A]``); a Composite is stacked entry by entry.
    """
    if isinstance(spec, Composite):
        return Composite({str(key): stack_spec(value, agents) for key, value in spec.items()}, device=spec.device)
    device = cast(torch.device, spec.device)  # a leaf spec always has one
    if isinstance(spec, Box):
        shape = (agents, *spec.shape)
        return Box(spec.low.expand(shape), spec.high.expand(shape), shape, spec.dtype, spec.device)
    if isinstance(spec, Discrete):
        return MultiDiscrete([spec.n] * agents, dtype=spec.dtype, device=device, start=spec.start)
    if isinstance(spec, MultiDiscrete):
        nvec = spec.nvec.expand(agents, *spec.shape)
        start = spec.start.expand(agents, *spec.shape)
        return MultiDiscrete(nvec, dtype=spec.dtype, device=device, start=start)
    if type(spec) is Binary:
        return Binary((agents, *spec.shape), dtype=spec.dtype, device=device)
    raise SpecError(f"cannot stack {spec!r} over agents; supported: Box, Discrete, MultiDiscrete, Binary, Composite.")


def agent_spec(stacked: Spec, index: int) -> Spec:
    """Agent ``index``'s own spec from its group's stacked one: :func:`stack_spec` undone.

    A ``MultiDiscrete`` of one choice count per agent gives back that agent's ``Discrete``.

    Example: ``agent_spec(stack_spec(Discrete(5), 3), 1)`` is ``Discrete(5)``.
    """
    if isinstance(stacked, Composite):
        return Composite({str(k): agent_spec(v, index) for k, v in stacked.items()}, device=stacked.device)
    device = cast(torch.device, stacked.device)
    if isinstance(stacked, Box):
        return Box(stacked.low[index], stacked.high[index], stacked.shape[1:], stacked.dtype, device)
    if isinstance(stacked, MultiDiscrete):
        nvec, start = stacked.nvec[index], stacked.start[index]
        if nvec.dim() == 0:
            return Discrete(int(nvec), dtype=stacked.dtype, device=device, start=int(start))
        return MultiDiscrete(nvec, dtype=stacked.dtype, device=device, start=start)
    if type(stacked) is Binary:
        return Binary(tuple(stacked.shape[1:]), dtype=stacked.dtype, device=device)
    raise SpecError(f"cannot take one agent's spec from {stacked!r}; supported: Box, MultiDiscrete, Binary, Composite.")


def group_entry_keys(group_map: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """Every per-agent reward and flag key under ``"next"``: ``(group, "reward")``, ``(group, "done")``, ..."""
    return [(group, key) for group in group_map for key in (REWARD, *AGENT_FLAG_KEYS)]


def group_info_spec(group_map: Mapping[str, Sequence[str]], device: torch.device | str) -> Composite:
    """One env's spec of the per-agent rewards and done flags a group backend puts in ``RawStep.info``.

    ``(group, "reward")`` float32 ``[A, 1]`` and ``(group, "done" / "terminated" /
    "truncated")`` bool ``[A, 1]`` for every group; the env adds ``(group,
    "final_obs_missing")`` itself (:func:`missing_spec`).
    """
    spec = Composite(device=device)
    for group, agents in group_map.items():
        a = len(agents)
        spec[group, REWARD] = Box(-math.inf, math.inf, (a, 1), torch.float32, device)
        for key in DONE_KEYS:
            spec[group, key] = Binary((a, 1), device=device)
    return spec


def groups_in(info_spec: Any) -> list[str]:
    """The agent groups whose per-agent ``(group, "reward")`` rides in ``info_spec`` (:func:`group_info_spec`'s layout).

    ``[]`` for a single-agent env (or ``info_spec`` None). Transforms and wrappers that
    rewrite rewards or flags find the groups here, from the specs they are set up with.
    """
    keys = info_spec.keys(True, True) if info_spec is not None else []
    return [key[0] for key in keys if isinstance(key, tuple) and len(key) == 2 and key[1] == REWARD]


def missing_spec(group_map: Mapping[str, Sequence[str]], device: torch.device | str) -> Composite:
    """One env's spec of every group's ``(group, "final_obs_missing")`` bool ``[A, 1]`` (the row's mask per agent)."""
    spec = Composite(device=device)
    for group, agents in group_map.items():
        spec[group, FINAL_OBS_MISSING] = Binary((len(agents), 1), device=device)
    return spec
