"""Isaac Lab's ``DirectMARLEnv`` as an env of agent groups: per-agent dicts in, groups out.

Isaac Lab's multi-agent direct workflow (``isaaclab/envs/direct_marl_env.py``, 3.0) steps
a batch of N envs with a dict of actions, one ``[N, *act]`` tensor per agent, and
returns dicts per agent: observations, rewards ``[N]``, terminated and time-out flags
``[N]``; it resets ended envs inside ``step``. ``gpu_envs.wrap(env)`` (the env, or the
``gym.make("Isaac-...-MARL-...")`` result) and ``gpu_envs.make("Isaac-Pendulum-MARL-Direct",
num_envs=N, backend="isaaclab")`` make it an env of agent groups
(:mod:`gpu_envs.contract.groups`), as VMAS and PettingZoo are:

* **Groups.** The agents are ``possible_agents`` (fixed: every one must be in every
  observation dict), grouped as torchrl groups them (``agent_0``, ``agent_1`` share
  ``"agents"``; agents whose specs differ, such as the pendulum task's ``cart`` and
  ``pendulum``, get a group each; ``group_map=`` chooses otherwise). A group's
  observations are ``(group, "observation")`` ``[N, A, *obs]``, its actions ``(group,
  "action")``, each agent's reward ``("next", group, "reward")`` ``[N, A, 1]`` and flags
  ``("next", group, "terminated" / "truncated" / "done")``: the agent's own, as Isaac
  Lab reports them. ``("next", "reward")`` is the team reward, the sum over agents.
* **The env's flags** are the rule by which Isaac Lab resets an env: ``reset_buf =
  prod(terminated.values()) | prod(time_outs.values())``, i.e. when EVERY agent
  terminated or EVERY agent timed out. ``terminated`` is "all agents terminated",
  ``truncated`` "all agents timed out", ``done`` their or. An env whose agents end in
  different ways (one terminated, another timed out) is not reset by Isaac Lab, and its
  ``done`` stays False: gpu_envs reports the env as Isaac Lab runs it.
* **The centralised state.** Where the config has a state space (``cfg.state_space``
  not 0), ``env.state()`` is the top-level observation key ``"state"`` (read after every
  reset and step, so post-reset on ended rows); ``state=False`` leaves it out.
* **Final observations.** With ``cfg.compute_final_obs = True`` Isaac Lab puts each
  agent's pre-reset observation in ``extras[agent]["final_obs"]`` (all rows, written
  only on steps where some env resets, never cleared): it is handed on as
  ``RawStep.final_obs`` and read ONLY on rows that ended in this step. The final state
  is exact where the state is Isaac Lab's concatenation of the agents' observations
  (``state_space = -1``, the pendulum task's): it is made from the final observations
  the same way. A task's own ``_get_states()`` is not kept by Isaac Lab before a reset,
  so such an env (and any env without ``compute_final_obs``) gets placeholders and
  ``("next", "final_obs_missing")`` on ended rows; ``state=False`` keeps the agents'
  exact final observations there.
* Resets: ``DirectMARLEnv.reset`` takes no ``env_ids``, so ``"_reset"`` masks reset all
  rows or none (a subset is refused by the env, naming the cause). ``reset(seed=s)`` is
  Isaac Lab's (``configure_seed``).
* Outputs are copies: stacking the agents copies the observations, rewards and flags
  that Isaac Lab rewrites in place; a task's own state is cloned.
* ``extras`` (Isaac Lab's dict, keyed by agent, plus ``"log"`` where a task puts its
  episode metrics) is ``env.backend.extras``; ``env.backend.episode_log`` its ``"log"``.

Example (how ``wrap`` tells a DirectMARLEnv, by class name, without importing isaaclab):

>>> class DirectMARLEnv: ...
>>> class PendulumMARLEnv(DirectMARLEnv): ...
>>> is_marl_env(PendulumMARLEnv()), is_marl_env(object())
(True, False)

With Isaac Lab installed (``tests/isaaclab/test_marl.py`` runs it on the CPU)::

    cfg = PendulumMARLEnvCfg(); cfg.sim.device = "cuda:0"; cfg.compute_final_obs = True
    env = gpu_envs.wrap(gym.make("Isaac-Pendulum-MARL-Direct", cfg=cfg))
    env.group_map                          # {'cart': ['cart'], 'pendulum': ['pendulum']}
    td = env.reset(seed=0)                 # td["cart", "observation"]: [N, 1, 4]; td["state"]: [N, 7]
    td.update(env.full_action_spec.rand())
    td, root = env.step_and_maybe_reset(td)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from gpu_envs.backends.agent_groups import GroupLayout
from gpu_envs.backends.base import Backend, Capabilities, RawStep
from gpu_envs.backends.common import check_same_step, claim_simulator, env_device
from gpu_envs.contract.errors import (
    BackendError,
    ClosedEnvError,
    InvalidArgumentError,
    NotAnEnvError,
    ObservationError,
    ResetMaskError,
    SpecError,
)
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import DONE_KEYS, ObsDict
from gpu_envs.contract.specs import spec_from_gym
from gpu_envs.utils.arguments import as_bool, as_int

__all__ = ["STATE", "IsaacLabMARLBackend", "is_marl_env"]

STATE = "state"  # the top-level observation key of the centralised state


def is_marl_env(base: Any) -> bool:
    """True for an Isaac Lab ``DirectMARLEnv`` (or a task built on it), by class name: isaaclab is not imported.

    Example: ``is_marl_env(gym.make("Isaac-Pendulum-MARL-Direct", cfg=cfg).unwrapped)`` is True.
    """
    return any(cls.__name__ == "DirectMARLEnv" for cls in type(base).__mro__)


def _follows_contract(base: Any) -> bool:
    agents = getattr(base, "possible_agents", None)
    spaces = (getattr(base, "observation_spaces", None), getattr(base, "action_spaces", None))
    return isinstance(agents, (list, tuple)) and bool(agents) and all(isinstance(s, Mapping) for s in spaces)


class IsaacLabMARLBackend(Backend):
    """An Isaac Lab ``DirectMARLEnv`` as an env of agent groups (module docstring).

    Args:
        env: the ``DirectMARLEnv``, or gymnasium wrappers around it (``gym.make`` output).
        device: the env's device (``cfg.sim.device``), or None.
        group_map: ``{group: [agent names]}``; None groups them as torchrl does.
        state: expose ``env.state()`` as ``"state"``: None (default) where the config has
            a state space, False never, True always (refused without a state space).
    """

    name = "isaaclab"
    # extras[agent]["final_obs"] with cfg.compute_final_obs (and an exact state), placeholders otherwise
    capabilities = Capabilities(final_obs=(FinalObsKind.SIMULATOR, FinalObsKind.PLACEHOLDER))

    def __init__(
        self, env: Any, device: torch.device | str | None = None, *, group_map: Any = None, state: bool | None = None
    ) -> None:
        base = env.unwrapped
        if getattr(base, "observation_spaces", ...) is None:  # DirectMARLEnv.close() drops its spaces
            raise ClosedEnvError(f"this {type(base).__name__} was closed; build a new Isaac Lab env to wrap.")
        if not _follows_contract(base):
            raise NotAnEnvError(
                f"{type(base).__name__} is named a DirectMARLEnv but lacks Isaac Lab's multi-agent contract "
                "(possible_agents, and observation_spaces / action_spaces dicts per agent). Build it on "
                "isaaclab.envs.DirectMARLEnv, or convert it with isaaclab.envs.multi_agent_to_single_agent(env) "
                "and wrap that."
            )
        check_same_step(base)
        self.env = env
        self.base = base
        self.num_envs = as_int(base.num_envs, f"{type(base).__name__}.num_envs", minimum=1)
        self.device = env_device(base, device)
        self.agents: list[str] = [str(agent) for agent in base.possible_agents]
        obs_specs = {a: spec_from_gym(base.observation_spaces[a], self.device) for a in self.agents}
        act_specs = {a: spec_from_gym(base.action_spaces[a], self.device) for a in self.agents}
        self.layout = GroupLayout(self.agents, obs_specs, act_specs, group_map, self.device)
        self.group_map = self.layout.group_map
        self.observation_spec = self.layout.observation_spec
        self.action_spec = self.layout.action_spec
        self.info_spec = self.layout.info_spec
        # per group: its agents' columns of the [N, agents] flags, as index tensors made once (no upload per step)
        self._columns = {
            group: torch.tensor(members, device=self.device) for group, members in self.layout.members.items()
        }
        self.has_state = self._wants_state(state)
        cfg = getattr(base, "cfg", None)
        state_space = getattr(cfg, "state_space", None)
        # Isaac Lab's own state for state_space < 0: the agents' observations, concatenated in possible_agents order
        self.state_from_obs = isinstance(state_space, int) and state_space < 0
        if self.has_state:
            if STATE in self.group_map:
                raise SpecError(
                    f"a group is named {STATE!r}, the key of the env's state; name the groups otherwise (group_map=) "
                    "or leave the state out (state=False)."
                )
            self.observation_spec[STATE] = spec_from_gym(base.state_space, self.device)
        exact = getattr(cfg, "compute_final_obs", False) is True and (not self.has_state or self.state_from_obs)
        kind = FinalObsKind.SIMULATOR if exact else FinalObsKind.PLACEHOLDER
        self.capabilities = self.capabilities.replace(final_obs=kind)
        self.extras: dict = {}
        claim_simulator(base, self)

    def _wants_state(self, state: bool | None) -> bool:
        has = getattr(self.base, "state_space", None) is not None
        if state is None:
            return has
        if as_bool(state, "state") and not has:
            raise InvalidArgumentError(
                f"state=True, but {type(self.base).__name__} has no state space (cfg.state_space is 0). Set "
                "cfg.state_space (-1: the agents' observations concatenated), or leave state out."
            )
        return bool(state)

    def describe(self) -> str:
        wrapped = "" if self.env is self.base else ", gym-wrapped"
        return f"isaaclab({type(self.base).__name__}{wrapped})"

    def snapshot_refusal(self) -> str:
        """Why rows are not snapshot: a ``DirectMARLEnv`` has no way to write a row's state back."""
        return (
            f"{self.describe()} cannot snapshot and restore rows: Isaac Lab's DirectMARLEnv has no reset_to(state, "
            "env_ids), and its physics solver's caches are not part of any state it exposes. Exact snapshots work "
            "for the built-in envs, torch envs with get_state/set_state, JAX envs and gymnasium SyncVectorEnv envs."
        )

    @property
    def episode_log(self) -> dict:
        """Isaac Lab's ``extras["log"]`` (a task's episode metrics of the latest resets), ``{}`` where none.

        Example: ``env.backend.episode_log["Metrics/success_rate"]`` (the pendulum task).
        """
        log = self.extras.get("log") if isinstance(self.extras, Mapping) else None
        return log if isinstance(log, dict) else {}

    # -------------------------------------------------------------- hot path
    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        if mask is not None:  # (partial_reset is False: the env resets all rows or none itself)
            raise ResetMaskError(
                f"{type(self.base).__name__} (an Isaac Lab DirectMARLEnv) can only reset all of its envs at once: "
                "its reset() takes no env_ids. Reset everything with env.reset()."
            )
        obs, extras = self.env.reset(seed=seed)
        self.extras = extras
        return self._observations(obs, "reset")

    def step(self, action: Any) -> RawStep:
        actions = dict(zip(self.agents, self.layout.agent_actions(action), strict=True))
        obs, rewards, terminated, truncated, extras = self.env.step(actions)
        self.extras = extras
        post = self._observations(obs, "step")
        team, info = self.layout.rewards(self._per_agent(rewards, "rewards"))
        flags = [self._flags(terminated, "terminated"), self._flags(truncated, "truncated")]
        flags.insert(0, flags[0] | flags[1])  # each agent's done, in DONE_KEYS order
        for group, columns in self._columns.items():
            for key, flag in zip(DONE_KEYS, flags, strict=True):
                info[group, key] = flag.index_select(1, columns).unsqueeze(-1)
        # Isaac Lab's reset rule: every agent terminated, or every agent timed out
        env_terminated = flags[1].all(1, keepdim=True)
        env_truncated = flags[2].all(1, keepdim=True)
        done = env_terminated | env_truncated
        final = self._final_obs(extras)
        # Fresh on the rows that ended in this step, possibly stale elsewhere: final_mask=done
        return RawStep(post, team, env_terminated, env_truncated, done, final, None if final is None else done, info)

    # ------------------------------------------------------------------ helpers
    def _per_agent(self, values: Any, what: str) -> list:
        try:
            return [values[agent] for agent in self.agents]
        except (KeyError, TypeError):
            got = list(values) if isinstance(values, Mapping) else type(values).__name__
            raise BackendError(
                f"{self.describe()} returned {what} {got}, not one entry per agent of {self.agents}. gpu_envs keeps "
                "a fixed agent set (possible_agents): every agent's value must be returned on every step."
            ) from None

    def _flags(self, values: Any, what: str) -> torch.Tensor:
        """Every agent's flag, ``[N, agents]`` bool in ``possible_agents`` order."""
        per_agent = self._per_agent(values, what)
        return torch.stack([v.reshape(self.num_envs) for v in per_agent], 1).to(torch.bool)

    def _observations(self, obs: Any, call: str) -> ObsDict:
        if not isinstance(obs, Mapping) or any(agent not in obs for agent in self.agents):
            got = list(obs) if isinstance(obs, Mapping) else type(obs).__name__
            raise ObservationError(
                f"{self.describe()}.{call}() returned observations for {got}, not for every agent of {self.agents}. "
                "gpu_envs keeps a fixed agent set: _get_observations() must return every agent's observation."
            )
        out = self.layout.observations([obs[agent] for agent in self.agents])
        if self.has_state:
            state = self.base.state()
            out[STATE] = state if self.state_from_obs else state.clone()  # a task's own buffer may be rewritten
        return out

    def _final_obs(self, extras: Any) -> ObsDict | None:
        """The pre-reset observations in ``extras[agent]["final_obs"]`` (exact kind only), else None."""
        if self.capabilities.final_obs is not FinalObsKind.SIMULATOR:
            return None
        per_agent: list[Any] = [(extras.get(agent) or {}).get("final_obs") for agent in self.agents]
        if any(value is None for value in per_agent):
            return None  # no env has reset yet: no row ended, nothing to read
        out = self.layout.observations(per_agent)
        if self.has_state:  # Isaac Lab's state() of the final observations (state_from_obs: the exact kind)
            out[STATE] = torch.cat([value.reshape(self.num_envs, -1) for value in per_agent], -1)
        return out

    def close(self) -> None:
        self.env.close()
