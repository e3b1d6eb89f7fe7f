"""VMAS behind the backend contract: agent groups, and the same-step auto-reset VMAS leaves to its user.

VMAS (the vectorised multi-agent simulator, torch on any device) steps every env of a
batch at once, but has no auto-reset: an env whose episode ended stays ended until
``reset_at(i)`` resets that one index. ``gpu_envs.wrap(vmas.make_env(...))`` and
``gpu_envs.make("vmas/<scenario>", num_envs=N)`` make it an env of agent groups
(:mod:`gpu_envs.contract.groups`) with exact transitions:

* **Groups.** Agents are grouped as torchrl's ``VmasEnv`` groups them (``agent_0``,
  ``agent_1``, ... share the group ``"agents"``; ``group_map=`` chooses otherwise); a
  group's observations are ``(group, "observation")`` ``[N, A, *obs]`` (a scenario's dict
  observations: ``(group, "observation", key)``), its actions ``(group, "action")``
  (continuous ``[N, A, k]``; discrete actions ``[N, A]`` int64, a ``MultiDiscrete``
  of each agent's ``Discrete``), each agent's reward ``("next", group, "reward")``
  ``[N, A, 1]`` and ``("next", "reward")`` the team reward (their sum). VMAS ends an env
  for all its agents at once: each agent's flags are the env's.
* **Same-step handling in gpu_envs.** After VMAS's ``step`` the ended rows hold the
  observation their episode ended in: it goes into the transition as the TRUE final
  observation; the backend then resets exactly those rows (``reset_at``, one index at a
  time: VMAS's only way, ~2 ms each on a CPU; when every row ended, as episodes that
  started together do at a common horizon, one reset of all rows, as torchrl's
  ``VmasEnv`` does), reads the observations once, and hands on the post-reset ones for
  the ended rows (the others keep the observation ``step`` made). Finding the ended rows
  is one host sync per step (VMAS's own ``step`` syncs several times anyway).
* **terminated / truncated.** The backend switches VMAS to ``terminated_truncated=True``
  (an attribute VMAS reads on every step), so a ``max_steps`` horizon is
  ``truncated`` and the scenario's own ending ``terminated``.
* ``reset(seed=s)`` is VMAS's: it seeds VMAS's random state (one per process, shared
  by every VMAS env of the process, which VMAS swaps in around each call) and resets
  every row; ``"_reset"`` masks reset those rows with ``reset_at``.
* Videos: the backend offers VMAS's own renderer as simulator frames
  (:class:`~gpu_envs.contract.protocols.SimulatorFrames`): ``RecordEpisodes.for_env(env, ...)``
  films chosen rows, each ended row drawn inside ``step`` before its reset, so a video's
  last frame is the episode's true final state (VMAS draws one env at a time on the host,
  for the filmed rows only).
* Actions: VMAS refuses a NaN or out-of-range action with a bare ``AssertionError``;
  gpu_envs checks each step's action values first (one host sync, counted in
  ``benchmarks/bench_multiagent.py``'s "own" column) and raises an ``ActionError``
  naming the group and the fix, the env still usable.
* Per-agent info entries of the scenario (``info(agent)``: metrics such as
  ``"pos_rew"``) are ``("next", group, "info", key)`` ``[N, A, ...]``.

Example:

>>> import vmas
>>> import gpu_envs
>>> env = gpu_envs.wrap(vmas.make_env("navigation", num_envs=64, max_steps=100, seed=0))
>>> env.group_map
{'agents': ['agent_0', 'agent_1', 'agent_2', 'agent_3']}
>>> td = env.reset()
>>> td.update(env.full_action_spec.rand())["agents", "action"].shape
torch.Size([64, 4, 2])
>>> td, root = env.step_and_maybe_reset(td)
>>> td["next", "agents", "reward"].shape, td["next", "reward"].shape   # each agent's; the team's
(torch.Size([64, 4, 1]), torch.Size([64, 1]))
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpu_envs.backends.agent_groups import GroupLayout
from gpu_envs.backends.base import Backend, Capabilities, RawStep
from gpu_envs.backends.legacy_gym import gymnasium_space
from gpu_envs.contract.errors import InvalidArgumentError, UnknownEnvError
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Box, Spec, spec_from_gym
from gpu_envs.utils.arguments import as_bool, as_int
from gpu_envs.utils.devices import normalize_device, same_device

__all__ = ["PLUGIN", "VmasBackend", "VmasPlugin", "is_vmas_env"]

PREFIX = "vmas/"


def is_vmas_env(obj: Any) -> bool:
    """True for a VMAS ``Environment`` (by its class's module: VMAS is not imported to find out)."""
    return any(cls.__module__.startswith("vmas.") and cls.__name__ == "Environment" for cls in type(obj).__mro__)


class VmasBackend(Backend):
    """A VMAS ``Environment`` as an env of agent groups with same-step auto-reset (module docstring).

    Args:
        env: the VMAS ``Environment`` (not one of VMAS's gym/rllib wrappers).
        device: must be the env's device (VMAS builds its world on one), or None.
        group_map: ``{group: [agent names]}``; None groups them as torchrl does.
    """

    name = "vmas"
    # VMAS's scenarios make state tensors during a step and update them in place later: no inference mode
    # VMAS asserts on a NaN or out-of-range action (a bare AssertionError): gpu_envs checks first, naming it
    capabilities = Capabilities(
        final_obs=FinalObsKind.WRAPPER_RESET, partial_reset=True, inference_mode=False, check_action_values=True
    )

    def __init__(
        self, env: Any, device: torch.device | None = None, group_map: Any = None, scenario: str | None = None
    ) -> None:
        if not is_vmas_env(env):
            raise InvalidArgumentError(
                f"VmasBackend wraps a vmas Environment (vmas.make_env(...) without wrapper=), got {type(env).__name__}."
            )
        own = normalize_device(env.device)
        if device is not None and not same_device(normalize_device(device), own):
            raise InvalidArgumentError(
                f"this VMAS env runs on {own}; device={device} would move every tensor each step. Build it on that "
                f"device instead (vmas.make_env(..., device='{device}')), or leave device out."
            )
        self.env = env
        self.scenario = scenario  # its name, where known (make); describe() finds it otherwise
        self.device = own
        self.num_envs = int(env.num_envs)
        env.terminated_truncated = True  # read by VMAS on every step: (terminated, truncated) instead of one done
        agents = [agent.name for agent in env.agents]
        obs_space, act_space = env.observation_space, env.action_space
        obs_specs = {name: self._spec(obs_space, i, name) for i, name in enumerate(agents)}
        act_specs = {name: self._spec(act_space, i, name) for i, name in enumerate(agents)}
        self.layout = GroupLayout(agents, obs_specs, act_specs, group_map, own)
        self.group_map = self.layout.group_map
        self.observation_spec = self.layout.observation_spec
        self.action_spec = self.layout.action_spec
        self._info_keys = self._info_layout()
        self.info_spec = self.layout.info_spec
        for (group, key), spec in self._info_keys.items():
            self.info_spec[group, "info", key] = spec
        self.final_frames: dict[int, torch.Tensor] = {}
        self._filmed: frozenset[int] = frozenset()

    def _spec(self, space: Any, index: int, name: str) -> Spec:
        """One agent's spec from VMAS's Tuple (or Dict) space of all agents' gym spaces."""
        spaces = getattr(space, "spaces", None)
        one = spaces[name] if isinstance(spaces, dict) else spaces[index]  # pyright: ignore[reportOptionalSubscript]
        return spec_from_gym(gymnasium_space(one), self.device)

    def _info_layout(self) -> dict[tuple[str, str], Spec]:
        """Each group's info entries (the scenario's ``info(agent)``), with one agent's shape; VMAS is asked once."""
        infos = self.env.get_from_scenario(
            get_observations=False, get_rewards=False, get_infos=True, get_dones=False, dict_agent_names=False
        )[0]
        out: dict[tuple[str, str], Spec] = {}
        for group, members in self.layout.members.items():
            first = infos[members[0]]
            for key, value in first.items():
                if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
                    shape = (len(members), *value.shape[1:])
                    out[(group, key)] = Box(-float("inf"), float("inf"), shape, torch.float32, self.device)
        return out

    # ------------------------------------------------------------------ reset / step
    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        if mask is None:
            return self.layout.observations(self._in_order(self.env.reset(seed=seed)))
        rows = mask.nonzero().view(-1).tolist()  # VMAS resets one index at a time (one host sync)
        if seed is not None:
            self.env.seed(seed)
        return self.layout.observations(self._reset_rows(rows))

    def _reset_rows(self, rows: list[int]) -> list:
        """Reset ``rows`` and return every row's observations (per agent).

        VMAS resets one index at a time (``reset_at``: ~2 ms each on a CPU, whatever N);
        when every row ended -- episodes that started together and hit the same horizon --
        one reset of all rows does it at the cost of one (torchrl's ``VmasEnv`` does the same).
        """
        if len(rows) == self.num_envs:
            return self._in_order(self.env.reset())
        for row in rows:
            self.env.reset_at(row, return_observations=False)
        return self._observe()

    # ------------------------------------------------------------------ frames (SimulatorFrames)
    def render_rows(self, rows: list[int]) -> torch.Tensor:
        """uint8 ``[len(rows), H, W, 3]``: VMAS's drawing of each row's world now."""
        frames = [self.env.render(mode="rgb_array", env_index=row) for row in rows]
        return torch.from_numpy(np.stack(frames)) if frames else torch.empty(0, 0, 0, 3, dtype=torch.uint8)

    def keep_final_frames(self, rows: list[int]) -> None:
        """From the next step on, draw each of ``rows`` that ends before its reset (into ``final_frames``)."""
        self._filmed = frozenset(int(row) for row in rows)

    def _observe(self) -> list:
        return self._in_order(
            self.env.get_from_scenario(
                get_observations=True, get_rewards=False, get_infos=False, get_dones=False, dict_agent_names=False
            )[0]
        )

    def _in_order(self, per_agent: Any) -> list:
        """VMAS's per-agent outputs as a list in agent order (a ``dict_spaces=True`` env gives dicts by name)."""
        if isinstance(per_agent, dict):
            return [per_agent[name] for name in self.layout.agents]
        return list(per_agent)

    def step(self, action: Any) -> RawStep:
        actions = self.layout.agent_actions(action)
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        obs, rewards, infos = self._in_order(obs), self._in_order(rewards), self._in_order(infos)
        terminated = terminated.view(-1, 1).to(torch.bool)
        truncated = truncated.view(-1, 1).to(torch.bool)
        done = terminated | truncated
        final = self.layout.observations(obs)
        team, info = self.layout.rewards(rewards)
        info.update(self.layout.flags(terminated, truncated, done))
        for (group, key), spec in self._info_keys.items():
            members = self.layout.members[group]
            parts = [infos[i][key] for i in members]
            want = (self.num_envs, *spec.shape[1:])
            if parts[0].shape != want:  # e.g. [N, 1] where one value per env is [N]
                parts = [part.reshape(want) for part in parts]
            info[group, "info", key] = torch.stack(parts, 1)
        rows = done.view(-1).nonzero().view(-1).tolist()  # the ended rows, on the host: reset_at takes an index
        if self._filmed or self.final_frames:
            filmed = [row for row in rows if row in self._filmed]  # drawn now: the reset below loses that state
            self.final_frames = dict(zip(filmed, self.render_rows(filmed), strict=True))
        if not rows:  # no row ended: the step's observations are the next ones and the roots (final_mask None: no op)
            return RawStep(final, team, terminated, truncated, done, final, None, info)
        fresh = self.layout.observations(self._reset_rows(rows))
        rows_mask = done.view(-1)
        post = {key: torch.where(_rows(rows_mask, value), fresh[key], value) for key, value in final.items()}
        return RawStep(post, team, terminated, truncated, done, final, None, info)

    def describe(self) -> str:
        """``vmas navigation``: the scenario's file for VMAS's own (all named ``Scenario``), else its class."""
        if self.scenario is not None:
            return f"vmas {self.scenario}"
        scenario = type(self.env.scenario)
        if scenario.__name__ != "Scenario":
            return f"vmas {scenario.__name__}"
        try:
            return f"vmas {Path(inspect.getfile(scenario)).stem}"
        except (TypeError, OSError):
            return "vmas Scenario"


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.view(mask.shape[0], *([1] * (like.dim() - 1)))


class VmasPlugin:
    """Registry entry: ``make("vmas/<scenario>")`` and ``wrap`` of a VMAS ``Environment``."""

    name = "vmas"

    def available(self) -> bool:
        return importlib.util.find_spec("vmas") is not None

    def env_ids(self) -> list[str]:
        if not self.available():
            return []
        import vmas  # pyright: ignore[reportMissingImports]  # optional

        return [PREFIX + name for name in (*vmas.scenarios, *vmas.mpe_scenarios)]

    def can_make(self, env_id: str) -> bool:
        return env_id.startswith(PREFIX) and self.available()

    def make_kwargs(self, env_id: str) -> list[str] | None:
        return None  # scenario keyword arguments (n_agents=..., ...) are the scenario's own: VMAS checks them

    def make(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device,
        *,
        max_steps: int | None = None,
        max_episode_steps: int | None = None,
        continuous_actions: bool = True,
        group_map: Any = None,
        **scenario_kwargs: Any,
    ) -> Backend:
        """``vmas.make_env(scenario, num_envs, device, ...)``: ``max_episode_steps`` (or VMAS's ``max_steps``) is the horizon."""
        import vmas  # pyright: ignore[reportMissingImports]  # optional

        scenario = env_id[len(PREFIX) :]
        if scenario not in (*vmas.scenarios, *vmas.mpe_scenarios):
            raise UnknownEnvError(
                f"{env_id!r} is not a VMAS scenario; VMAS {getattr(vmas, '__version__', '')} has "
                f"{', '.join(PREFIX + s for s in (*vmas.scenarios, *vmas.mpe_scenarios))}."
            )
        if max_steps is not None and max_episode_steps is not None:
            raise InvalidArgumentError("pass max_episode_steps= or VMAS's max_steps=, not both (they are the same).")
        horizon = max_episode_steps if max_episode_steps is not None else max_steps
        if horizon is not None:
            horizon = as_int(horizon, "max_episode_steps", minimum=1)
        env = vmas.make_env(
            scenario,
            num_envs=num_envs,
            device=str(device),
            continuous_actions=as_bool(continuous_actions, "continuous_actions"),
            max_steps=horizon,
            terminated_truncated=True,
            **scenario_kwargs,
        )
        return VmasBackend(env, device, group_map=group_map, scenario=scenario)

    def detect(self, obj: Any) -> bool:
        return is_vmas_env(obj)

    def wrap_kwargs(self, obj: Any) -> list[str]:
        return ["group_map"]

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Backend:
        return VmasBackend(obj, device, **kwargs)


PLUGIN = VmasPlugin()
