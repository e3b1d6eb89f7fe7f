"""PettingZoo ``ParallelEnv``s batched N ways on the CPU: agent groups, agents that leave masked, exact final observations.

PettingZoo's parallel API steps one env with a dict of actions, one per live agent, and
returns dicts of observations, rewards and flags; agents that end leave ``env.agents``
and the episode is over when none is left. :class:`PettingZooBackend` runs N such envs
(one per row, each its own object, stepped one after the other on the host) as one env
of agent groups (:mod:`gpu_envs.contract.groups`):

* **A fixed agent set per env.** The agents are ``possible_agents``, grouped as torchrl
  groups them (``agent_0``, ``agent_1`` share ``"agents"``; ``adversary_0`` goes to
  ``"adversary"``); every one of them must be live after a reset (a game whose agents
  join later is refused). An agent that ends before its env does is **masked**, never
  dropped: from its last step on its flags stay True, its reward is 0, its observation
  stays the one it ended with and its actions are not sent (PettingZoo refuses actions
  for agents that left). ``("next", group, "done")`` tells, per agent.
* **The env's flags** (which decide the auto-reset): ``done`` when no agent is left;
  ``truncated`` when some agent was truncated in that last step (a time limit ended the
  episode), ``terminated`` otherwise.
* **Same-step reset, exact final observations.** A row whose episode ended is reset in
  the same call (``env.reset()``, continuing its own random stream); its transition
  holds every agent's TRUE final observation, the root the reset one.
* ``reset(seed=s)``: row ``i`` is reset with ``seed=s + i`` (PettingZoo's vector
  wrappers' rule); masked resets reset those rows only.
* Observations are numpy arrays (gymnasium spaces) made tensors on ``device``; actions
  go back as numpy (a ``Discrete`` agent gets a Python int).

``gpu_envs.make("pettingzoo/<module>", num_envs=N, **kwargs)`` imports ``<module>`` (e.g.
``mpe2.simple_spread_v3``, ``pettingzoo.butterfly.cooperative_pong_v6``) and calls its
``parallel_env(**kwargs)`` N times; ``gpu_envs.wrap(parallel_env)`` is a batch of one, and
``gpu_envs.wrap([env_0, env_1, ...])`` of a list of ParallelEnvs of one game is a batch of
them.

Example:

>>> import gpu_envs
>>> env = gpu_envs.make("pettingzoo/mpe2.simple_spread_v3", num_envs=8, max_cycles=25, seed=0)
>>> env.group_map
{'agents': ['agent_0', 'agent_1', 'agent_2']}
>>> td = env.reset()
>>> td.update(env.full_action_spec.rand())["agents", "action"].shape   # Discrete(5) per agent
torch.Size([8, 3])
>>> td, root = env.step_and_maybe_reset(td)
>>> td["next", "agents", "observation"].shape, td["next", "agents", "done"].shape
(torch.Size([8, 3, 18]), torch.Size([8, 3, 1]))
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gpu_envs.backends.agent_groups import GroupLayout
from gpu_envs.backends.base import Backend, Capabilities, RawStep
from gpu_envs.contract.errors import BackendError, InvalidArgumentError, UnknownEnvError
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import DONE_KEYS, ObsDict
from gpu_envs.contract.specs import Discrete, spec_from_gym
from gpu_envs.utils.devices import normalize_device

__all__ = ["PLUGIN", "PettingZooBackend", "PettingZooPlugin", "is_parallel_env"]

PREFIX = "pettingzoo/"


def is_parallel_env(obj: Any) -> bool:
    """True for a PettingZoo ``ParallelEnv`` (its class or a base from ``pettingzoo.``, with ``possible_agents``)."""
    mro = type(obj).__mro__
    return any(c.__module__.startswith("pettingzoo.") and c.__name__ == "ParallelEnv" for c in mro) and hasattr(
        obj, "possible_agents"
    )


class PettingZooBackend(Backend):
    """N PettingZoo ``ParallelEnv``s of one game as an env of agent groups (module docstring).

    Args:
        envs: the N envs (each used by this backend only).
        device: where the tensors go (the envs run on the host).
        group_map: ``{group: [agent names]}``; None groups them as torchrl does.
    """

    name = "pettingzoo"
    capabilities = Capabilities(final_obs=FinalObsKind.WRAPPER_RESET, partial_reset=True, trusted_outputs=True)

    def __init__(self, envs: Sequence[Any], device: torch.device | None = None, group_map: Any = None) -> None:
        envs = list(envs)
        if not envs or not all(is_parallel_env(env) for env in envs):
            raise InvalidArgumentError(
                "PettingZooBackend takes PettingZoo ParallelEnvs (a list of them, one per row); an AEC env converts "
                "with pettingzoo.utils.conversions.aec_to_parallel(env)."
            )
        if len({id(env) for env in envs}) != len(envs):
            raise InvalidArgumentError("the same ParallelEnv object is given twice: build one env per row.")
        self.envs = envs
        self.num_envs = len(envs)
        self.device = normalize_device(device or "cpu")
        first = envs[0]
        agents = list(first.possible_agents)
        for env in envs[1:]:
            if list(env.possible_agents) != agents:
                raise InvalidArgumentError(
                    f"every env of a batch must have the same agents; {agents} and {list(env.possible_agents)} differ."
                )
        self.agents = agents
        obs_specs = {a: spec_from_gym(first.observation_space(a), self.device) for a in agents}
        act_specs = {a: spec_from_gym(first.action_space(a), self.device) for a in agents}
        self._discrete = {a: isinstance(spec, Discrete) for a, spec in act_specs.items()}
        self.layout = GroupLayout(agents, obs_specs, act_specs, group_map, self.device)
        self.group_map = self.layout.group_map
        self.observation_spec = self.layout.observation_spec
        self.action_spec = self.layout.action_spec
        self.info_spec = self.layout.info_spec
        self._obs_dtypes = {a: obs_specs[a].dtype for a in agents}
        # per row: the agents' last observations (kept for agents that left) and which agents are still live
        self._last: list[dict[str, np.ndarray]] = [{} for _ in envs]
        self._live: list[set[str]] = [set() for _ in envs]
        self._left: list[dict[str, tuple[bool, bool]]] = [
            {} for _ in envs
        ]  # (terminated, truncated) of agents that left

    # ------------------------------------------------------------------ helpers
    def _reset_row(self, i: int, seed: int | None) -> None:
        obs, _ = self.envs[i].reset(seed=seed)
        missing = [a for a in self.agents if a not in obs]
        if missing:
            raise BackendError(
                f"{self.describe()} row {i}: agents {missing} are not live after reset. gpu_envs keeps a fixed agent "
                "set per env (agents that leave are masked until the episode ends); a game whose agents join "
                "later is not supported."
            )
        self._last[i] = {a: np.asarray(obs[a]) for a in self.agents}
        self._live[i] = set(self.agents)
        self._left[i] = {}

    def _observations(self) -> ObsDict:
        per_agent = [
            torch.as_tensor(np.stack([self._last[i][a] for i in range(self.num_envs)]), device=self.device)
            for a in self.agents
        ]
        return self.layout.observations(per_agent)

    # ------------------------------------------------------------------ reset / step
    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        rows = range(self.num_envs) if mask is None else mask.nonzero().view(-1).tolist()
        for i in rows:
            self._reset_row(i, None if seed is None else seed + i)
        return self._observations()

    def step(self, action: Any) -> RawStep:
        actions = [a.cpu().numpy() for a in self.layout.agent_actions(action)]
        n, agents = self.num_envs, self.agents
        rewards = np.zeros((len(agents), n), dtype=np.float32)
        flags = {key: np.zeros((len(agents), n), dtype=bool) for key in DONE_KEYS}
        env_flags = {key: np.zeros(n, dtype=bool) for key in DONE_KEYS}
        ended: list[int] = []
        for i, env in enumerate(self.envs):
            live = self._live[i]
            sent = {
                a: (int(actions[k][i]) if self._discrete[a] else actions[k][i])
                for k, a in enumerate(agents)
                if a in live
            }
            obs, reward, terminated, truncated, _ = env.step(sent)
            last = self._last[i]
            any_truncated = False
            for k, a in enumerate(agents):
                if a not in live:  # masked: it left in an earlier step, and keeps the flags it left with
                    flags["done"][k, i] = True
                    flags["terminated"][k, i], flags["truncated"][k, i] = self._left[i][a]
                    continue
                if a in obs:
                    last[a] = np.asarray(obs[a])
                rewards[k, i] = reward.get(a, 0.0)
                term, trunc = bool(terminated.get(a, False)), bool(truncated.get(a, False))
                flags["terminated"][k, i], flags["truncated"][k, i] = term, trunc
                flags["done"][k, i] = term or trunc
                any_truncated |= trunc
                if term or trunc:
                    self._left[i][a] = (term, trunc)
            self._live[i] = {a for a in agents if a in live and a in set(env.agents)}
            if not self._live[i]:
                ended.append(i)
                env_flags["done"][i] = True
                env_flags["truncated"][i] = any_truncated
                env_flags["terminated"][i] = not any_truncated
        final = self._observations()
        for i in ended:
            self._reset_row(i, None)
        post = self._observations() if ended else final
        team, info = self.layout.rewards([torch.from_numpy(r).to(self.device) for r in rewards])
        for group, members in self.layout.members.items():
            for key in DONE_KEYS:
                info[group, key] = (
                    torch.from_numpy(np.ascontiguousarray(flags[key][members].T)).unsqueeze(-1).to(self.device)
                )
        done, terminated, truncated = (torch.from_numpy(env_flags[k]).view(n, 1).to(self.device) for k in DONE_KEYS)
        # final_obs on every row (final_mask None): the pre-reset observations, the step's own where no row ended
        return RawStep(post, team, terminated, truncated, done, final, None, info)

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def describe(self) -> str:
        return f"pettingzoo {type(self.envs[0].unwrapped if hasattr(self.envs[0], 'unwrapped') else self.envs[0]).__name__}"


def _module(env_id: str) -> Any:
    name = env_id[len(PREFIX) :]
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        raise UnknownEnvError(
            f"{env_id!r}: no module {name!r} ({err}). A PettingZoo id names the module of a game's parallel_env, "
            "e.g. 'pettingzoo/mpe2.simple_spread_v3' or 'pettingzoo/pettingzoo.butterfly.pistonball_v6'."
        ) from None
    if not callable(getattr(module, "parallel_env", None)):
        raise UnknownEnvError(f"{env_id!r}: module {name!r} has no parallel_env(); name a PettingZoo game's module.")
    return module


class PettingZooPlugin:
    """Registry entry: ``make("pettingzoo/<module>")`` and ``wrap`` of ParallelEnvs (one, or a list of them)."""

    name = "pettingzoo"

    def available(self) -> bool:
        return importlib.util.find_spec("pettingzoo") is not None

    def env_ids(self) -> list[str]:
        return []  # any module with a parallel_env(): PettingZoo has no registry of ids

    def can_make(self, env_id: str) -> bool:
        return env_id.startswith(PREFIX) and self.available()

    def make_kwargs(self, env_id: str) -> list[str] | None:
        return None  # the game's own keyword arguments (max_cycles=...): its parallel_env checks them

    def make(
        self, env_id: str, num_envs: int, device: torch.device, *, group_map: Any = None, **kwargs: Any
    ) -> Backend:
        """``<module>.parallel_env(**kwargs)`` for every row."""
        module = _module(env_id)
        return PettingZooBackend([module.parallel_env(**kwargs) for _ in range(num_envs)], device, group_map=group_map)

    def detect(self, obj: Any) -> bool:
        if isinstance(obj, (list, tuple)):
            return bool(obj) and all(is_parallel_env(env) for env in obj)
        return is_parallel_env(obj)

    def wrap_kwargs(self, obj: Any) -> list[str]:
        return ["group_map"]

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Backend:
        envs = list(obj) if isinstance(obj, (list, tuple)) else [obj]
        return PettingZooBackend(envs, device, **kwargs)


PLUGIN = PettingZooPlugin()
