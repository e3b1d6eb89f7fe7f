"""``to_rl_games(env)``: any gpu_envs env as an rl_games vec env (rl-games 1.6), for its ``Runner`` and PPO agents.

rl_games builds its env from two registries: ``vecenv`` (how to build a vec env type)
and ``env_configurations`` (an env name -> that type and a creator). :func:`to_rl_games`
registers the adapter under one name (``"gpu_envs"`` unless told otherwise), so the agent
config only says ``env_name: gpu_envs`` and ``num_actors: <num_envs>``. What rl_games reads,
following Isaac Lab's own rl_games wrapper:

* ``get_env_info()``: one env's gymnasium spaces (``observation_space``, ``action_space``,
  ``state_space`` for an asymmetric critic), ``agents = 1``, ``value_size = 1``;
* observations as ``{"obs": tensor}``, plus ``"states"`` for the critic: a lone
  ``"observation"`` key is ``obs``; Isaac Lab's groups map ``"policy"`` to ``obs`` and
  ``"critic"`` (if any) to ``states``; ``obs_groups={"obs": [...], "states": [...]}``
  chooses others (several groups, or a Dict group's terms, are flattened and concatenated
  in order, as float32). They are
  post-reset where an episode ended: what the next step acts on;
* ``step(actions)`` -> ``(observations, rewards (N,), dones (N,) bool, infos)`` with
  ``infos["time_outs"]`` (the truncations, which rl_games' ``value_bootstrap`` uses) and
  ``infos["episode"]`` when the backend reports episode metrics (Isaac Lab's ``log``);
* actions: ``[N, A]`` floats for a ``Box`` (``a2c_continuous``), ``[N]`` integers for a
  ``Discrete`` (``a2c_discrete``). rl_games rescales ``[-1, 1]`` to the action space's
  bounds, so an unbounded ``Box`` (Isaac Lab's) needs ``clip_actions=c``: the space
  becomes ``[-c, c]`` and actions are clamped to it, as Isaac Lab's wrapper does.
  ``clip_observations=c`` clamps observations to ``[-c, c]`` likewise.

Time-outs. rl_games' ``value_bootstrap`` (on by default) adds ``gamma * V(s_t)`` on time-outs,
the value of the state the action was taken in. One extra line makes it exact::

    vec_env.bootstrap_from(runner)       # or an agent built by hand

After it, each truncated row's stored reward is ``shaped(r) + gamma * V(s_T)``, with
``s_T`` the true final observation evaluated by the agent's own ``get_values`` (its input
normalisation, its central value net for an asymmetric critic) at collection time, and
those rows are left out of ``infos["time_outs"]``. The hook wraps the agent's
``rewards_shaper``: a ``Runner`` creates its agent inside ``run()``, so the hook is placed
when rl_games hands the agent to the env (``set_train_info``, before the first rollout).
Rows whose final observation the backend could not give keep rl_games' approximation.
Supported: rl-games 1.6 with ``a2c_continuous`` / ``a2c_discrete``.

Example::

    from rl_games.torch_runner import Runner
    from gpu_envs.interop import to_rl_games

    vec_env = to_rl_games(gpu_envs.make("Pendulum-v1", num_envs=256))
    config["params"]["config"].update(env_name=vec_env.env_name, num_actors=vec_env.num_envs)
    runner = Runner()
    runner.load(config)
    vec_env.bootstrap_from(runner)                 # optional: exact time-out targets
    runner.run({"train": True})
"""

from __future__ import annotations

import math
from typing import Any, cast

import gymnasium
import numpy as np
import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, ResetNeededError
from gpu_envs.contract.specs import Box, Composite, Discrete
from gpu_envs.contract.specs.env_specs import require_scalar_reward
from gpu_envs.interop.conversions import require_env, reshaped_action_tensor, simulator_of
from gpu_envs.interop.libraries import require
from gpu_envs.interop.time_outs import bootstrap_rows, final_observation, require_version

# rl-games' metadata caps psutil < 6, which it never imports: the extra brings its other imports
NOTE = (
    " The extra does not install rl-games itself (its metadata caps psutil < 6, which it never imports): "
    "add pip install --no-deps 'rl-games>=1.6.5,<1.7'."
)
rl_games_vecenv = require(
    "rl_games.common.vecenv", package="rl-games", extra="rl-games", consumer="to_rl_games", note=NOTE
)
rl_games_configurations = require(
    "rl_games.common.env_configurations", package="rl-games", extra="rl-games", consumer="to_rl_games", note=NOTE
)

__all__ = ["RlGamesVecEnv", "to_rl_games"]

# a2c_common.play_steps / play_steps_rnn (read from rl-games 1.6.5) is what bootstrap_from feeds
SUPPORTED_RL_GAMES = ">=1.6,<1.7"
SUPPORTED_ALGOS = ("a2c_continuous", "a2c_discrete")


class RlGamesVecEnv(rl_games_vecenv.IVecEnv):
    """A gpu_envs env as an rl_games ``IVecEnv``: build it with :func:`to_rl_games` (module doc for the contract)."""

    def __init__(
        self,
        env: Any,
        name: str,
        obs_groups: dict[str, list[str]] | None,
        clip_observations: float | None,
        clip_actions: float | None,
    ) -> None:
        require_scalar_reward(env.single_reward_spec.shape, "to_rl_games")
        self.env = env
        self.env_name = name
        self.num_envs = int(env.num_envs)
        self.device = env.device
        spec = env.single_observation_spec
        groups = _resolve_groups(spec, obs_groups)
        # each slot's observation leaves: a Dict group (Isaac Lab's non-concatenated terms) counts its terms
        self._groups = {slot: [leaf for key in keys for leaf in _leaves(spec, key)] for slot, keys in groups.items()}
        self._clip_obs = _check_clip("clip_observations", clip_observations)
        self._clip_actions = _check_clip("clip_actions", clip_actions)
        self.observation_space = self._space(spec, self._groups["obs"])
        self.state_space = self._space(spec, self._groups["states"]) if self._groups["states"] else None
        self.action_space = self._action_space(env.single_action_spec)
        self._root: TensorDictBase | None = None
        self._pending: Any = None  # a Runner whose agent is not built yet (bootstrap_from)
        self._bootstrap: _RlGamesBootstrap | None = None
        self.final_observations: dict[str, torch.Tensor] | None = None  # s_T of the last step, while bootstrapping
        self.exact_time_outs: torch.Tensor | None = None  # [N] bool: rows bootstrapped from s_T

    # ------------------------------------------------------------------ rl_games API
    def get_env_info(self) -> dict[str, Any]:
        """One env's spaces, as rl_games builds its networks and buffers from them."""
        info = {
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "agents": 1,
            "value_size": 1,
        }
        if self.state_space is not None:
            info["state_space"] = self.state_space
        return info

    def get_number_of_agents(self) -> int:
        return 1

    def has_action_masks(self) -> bool:
        return False

    def seed(self, seed: int) -> int:
        """Reseed the env: the next :meth:`reset` starts from ``seed``."""
        self._seed = int(seed)
        return self._seed

    def reset(self) -> dict[str, torch.Tensor]:
        """Reset every env (with the seed given to :meth:`seed`, if any); returns the observations."""
        seed = getattr(self, "_seed", None)
        self._seed = None
        self._root = self.env.reset() if seed is None else self.env.reset(seed=seed)
        return self._observations(self._root)

    def step(self, actions: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, dict]:
        """One step of every env: ``(observations, rewards (N,), dones (N,), infos)``."""
        if self._root is None:
            self.reset()
        current = self._root
        if current is None:  # reset() above sets it
            raise ResetNeededError("step() needs the observations of a reset: call vec_env.reset() first.")
        if self._clip_actions is not None:
            actions = actions.clamp(-self._clip_actions, self._clip_actions)
        td = current.set("action", reshaped_action_tensor(actions, self.env.action_spec, self.device))
        td, root = self.env.step_and_maybe_reset(td)
        self._root = root
        nxt = td.get("next")
        n = self.num_envs
        if self._bootstrap is None:
            time_outs = nxt.get("truncated").view(n)
        else:  # exact rows get shaped(r) + gamma V(s_T) from the hook; rl_games' V(s_t) only where s_T is missing
            self.exact_time_outs, time_outs = bootstrap_rows(nxt, n)
            self.final_observations = self._observations(root, nxt)
        infos: dict[str, Any] = {"time_outs": time_outs}
        log = getattr(getattr(self.env, "backend", None), "episode_log", None)
        if log:
            infos["episode"] = log
        return self._observations(root), nxt.get("reward").view(n), nxt.get("done").view(n), infos

    def set_train_info(self, env_frames: Any, *args: Any, **kwargs: Any) -> None:
        """rl_games hands its agent over here at every epoch: a pending ``bootstrap_from(runner)`` hooks it."""
        if self._pending is not None and args:
            agent = args[0]
            if getattr(agent, "vec_env", None) is self:
                self._pending = None
                self._install(agent)

    @property
    def unwrapped(self) -> Any:
        """The simulator behind the gpu_envs env (the built-in env, the Isaac Lab or mjlab env, ...), what
        trainers' runners read (mjlab's ``MjlabOnPolicyRunner.save``: ``env.unwrapped.common_step_counter``)."""
        return simulator_of(self.env)

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------ exact time-outs
    def bootstrap_from(self, trainer: Any) -> None:
        """Bootstrap truncated steps from V(true final observation) with the agent's own critic (module doc).

        ``trainer`` is an rl_games ``Runner`` after ``runner.load(config)`` (its agent is
        hooked when rl_games creates it and hands it to this env) or an agent
        (``a2c_continuous`` / ``a2c_discrete``) already built on this env. Calling it again
        changes nothing.

        Example::

            runner = Runner(); runner.load(config)
            vec_env.bootstrap_from(runner)
            runner.run({"train": True})
        """
        require_version("rl-games", SUPPORTED_RL_GAMES, "to_rl_games(...).bootstrap_from")
        from rl_games.common.a2c_common import A2CBase

        if isinstance(trainer, A2CBase):
            if trainer.vec_env is not self:
                raise InvalidArgumentError(
                    "bootstrap_from takes an rl_games agent built on this env (its vec_env is another one)."
                )
            self._install(trainer)
            return
        algo = getattr(trainer, "algo_name", None)
        if not hasattr(trainer, "algo_factory"):
            raise InvalidArgumentError(
                f"bootstrap_from takes an rl_games Runner (after runner.load(config)) or A2C agent, got "
                f"{type(trainer).__name__}."
            )
        if algo is None:
            raise InvalidArgumentError("load the config first: runner.load(config); vec_env.bootstrap_from(runner).")
        if algo not in SUPPORTED_ALGOS:
            raise InvalidArgumentError(
                f"bootstrap_from supports rl_games' {' and '.join(SUPPORTED_ALGOS)} agents (PPO); this runner "
                f"trains {algo!r}. Train it without bootstrap_from (rl_games' own time-out handling)."
            )
        self._check_runner_env(trainer)
        self._pending = trainer

    def _check_runner_env(self, runner: Any) -> None:
        """The runner's ``env_name`` must create THIS env: another adapter registered under the same name replaced it."""
        name = ((getattr(runner, "params", None) or {}).get("config") or {}).get("env_name")
        entry = rl_games_configurations.configurations.get(name) if isinstance(name, str) else None
        if entry is None or entry.get("vecenv_type") != name:
            return  # not an env of to_rl_games: rl_games builds it, and this adapter is not involved
        created = entry["env_creator"]()
        if created is not self:
            raise InvalidArgumentError(
                f"the runner's config says env_name={name!r}, which now creates another to_rl_games env (a later "
                f"to_rl_games(..., name={name!r}) replaced this one's registration): the runner would train that env "
                "and this bootstrap_from would hook nothing. Give each env its own name: "
                "to_rl_games(env, name='...'), and put that name in the config's env_name."
            )

    def _install(self, agent: Any) -> None:
        shaper = agent.rewards_shaper
        if isinstance(shaper, _RlGamesBootstrap):
            if shaper.vec is not self:
                raise InvalidArgumentError("this agent already bootstraps from another env adapter.")
            self._bootstrap = shaper
            return
        self._bootstrap = _RlGamesBootstrap(self, agent)
        agent.rewards_shaper = self._bootstrap

    # ------------------------------------------------------------------ helpers
    def _observations(self, root: TensorDictBase, nxt: TensorDictBase | None = None) -> dict[str, torch.Tensor]:
        """``{"obs": ..., ("states": ...)}`` from ``root`` (or ``nxt``'s final observations, placeholders replaced)."""
        out = {}
        for slot, keys in self._groups.items():
            if not keys:
                continue
            parts = [root.get(k) if nxt is None else final_observation(nxt, root, k) for k in keys]
            value = (
                parts[0] if len(parts) == 1 else torch.cat([p.reshape(self.num_envs, -1).float() for p in parts], -1)
            )
            if self._clip_obs is not None:
                value = value.clamp(-self._clip_obs, self._clip_obs)
            out[slot] = value
        return out

    def _space(self, spec: Composite, keys: list[str]) -> gymnasium.spaces.Box:
        specs = [spec[k] for k in keys]
        for key, leaf in zip(keys, specs, strict=True):
            if not isinstance(leaf, Box):
                raise InvalidArgumentError(
                    f"rl_games reads Box observations; this env's {key!r} is {leaf!r}. Choose Box groups with "
                    "to_rl_games(env, obs_groups={'obs': [...], 'states': [...]})."
                )
        if len(specs) == 1:
            space = cast(gymnasium.spaces.Box, specs[0].to_gym())  # a Box spec (checked above): a gymnasium Box
        else:
            size = sum(int(np.prod(s.shape)) for s in specs)
            space = gymnasium.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        if self._clip_obs is not None:
            c = self._clip_obs
            space = gymnasium.spaces.Box(-c, c, space.shape, space.dtype)
        return space

    def _action_space(self, spec: Any) -> gymnasium.Space:
        if isinstance(spec, Discrete):
            return spec.to_gym()
        # (a Box spec always has a dtype)
        if not isinstance(spec, Box) or not cast(torch.dtype, spec.dtype).is_floating_point or len(spec.shape) != 1:
            raise InvalidArgumentError(
                f"rl_games trains a Box (float, one axis) or Discrete action; this env's is {spec!r}. "
                "Use another library for it (gpu_envs.interop.to_torchrl, to_skrl)."
            )
        space = cast(gymnasium.spaces.Box, spec.to_gym())  # a Box spec: a gymnasium Box
        if self._clip_actions is not None:
            c = self._clip_actions
            return gymnasium.spaces.Box(-c, c, space.shape, space.dtype)
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise InvalidArgumentError(
                f"this env's action space {space} is unbounded, but rl_games rescales actions from [-1, 1] to the "
                "space's bounds: pass clip_actions=... (Isaac Lab's rl_games configs use 1.0), e.g. "
                "to_rl_games(env, clip_actions=1.0)."
            )
        return space


class _RlGamesBootstrap:
    """Stands in for the agent's ``rewards_shaper``: shaped rewards plus ``gamma * V(s_T)`` on exact time-out rows.

    rl_games calls it right after each step (``play_steps``), before it adds its own
    ``gamma * V(s_t) * time_outs`` (which the env now reports only for rows without
    ``s_T``); ``agent.get_values`` evaluates the critic in eval mode without touching
    the agent's recurrent state (a recurrent central value net's is saved and restored).
    """

    def __init__(self, vec: RlGamesVecEnv, agent: Any) -> None:
        self.vec = vec
        self.agent = agent
        self.original = agent.rewards_shaper

    def __call__(self, rewards: torch.Tensor) -> torch.Tensor:
        shaped = self.original(rewards)
        vec, agent = self.vec, self.agent
        if vec.final_observations is None:  # no step of this env since the last call
            return shaped
        final = {k: v.to(agent.ppo_device) for k, v in vec.final_observations.items()}
        central = getattr(agent, "central_value_net", None) if agent.has_central_value else None
        kept = None if central is None else central.rnn_states  # get_value steps a recurrent central value
        values = agent.get_values(final).reshape(shaped.shape)
        if central is not None:
            central.rnn_states = kept
        exact_time_outs = vec.exact_time_outs
        if exact_time_outs is None:  # set by the step that set final_observations
            raise InvalidArgumentError("the bootstrap found final observations without their time-out rows.")
        exact = exact_time_outs.to(shaped.device).reshape(-1, *([1] * (shaped.dim() - 1)))
        vec.final_observations = None
        return shaped + torch.where(exact, agent.gamma * values, torch.zeros_like(values))


def _resolve_groups(spec: Composite, obs_groups: dict[str, list[str]] | None) -> dict[str, list[str]]:
    keys = list(spec.keys())
    if obs_groups is None:
        if keys == ["observation"]:
            return {"obs": ["observation"], "states": []}
        if "policy" in keys:
            return {"obs": ["policy"], "states": ["critic"] if "critic" in keys else []}
        raise InvalidArgumentError(
            f"this env's observation keys are {keys}; say which feed the policy and the critic: "
            "to_rl_games(env, obs_groups={'obs': [...], 'states': [...]}) (states may be empty)."
        )
    unknown = set(obs_groups) - {"obs", "states"}
    if unknown or not obs_groups.get("obs"):
        raise InvalidArgumentError(
            f"obs_groups maps 'obs' (required) and 'states' (optional) to observation keys; got {obs_groups!r}."
        )
    groups = {"obs": list(obs_groups["obs"]), "states": list(obs_groups.get("states", []))}
    missing = [k for k in groups["obs"] + groups["states"] if k not in keys]
    if missing:
        raise InvalidArgumentError(f"obs_groups names {missing}, which this env does not have (it has {keys}).")
    return groups


def _leaves(spec: Composite, key: str) -> list[Any]:
    """The TensorDict keys of ``key``'s leaves: itself, or the terms of a Dict group, in the spec's order."""
    node = spec[key]
    if not isinstance(node, Composite):
        return [key]
    return [(key, *((k,) if isinstance(k, str) else k)) for k in node.keys(include_nested=True, leaves_only=True)]


def _check_clip(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isnan(value):
        raise InvalidArgumentError(f"{name} must be a positive number (or None for no clipping), got {value!r}.")
    return None if math.isinf(value) else float(value)


def to_rl_games(
    env: Any,
    *,
    name: str = "gpu_envs",
    obs_groups: dict[str, list[str]] | None = None,
    clip_observations: float | None = None,
    clip_actions: float | None = None,
) -> RlGamesVecEnv:
    """``env`` (any :class:`~gpu_envs.BatchedEnv`) as an rl_games vec env, registered as ``name``.

    rl_games' config then says ``env_name: <name>`` and ``num_actors: env.num_envs``; a
    second call with the same ``name`` replaces the first registration.

    Example::

        vec_env = to_rl_games(gpu_envs.wrap(isaac_env), clip_observations=5.0, clip_actions=1.0)
        params["config"].update(env_name=vec_env.env_name, num_actors=vec_env.num_envs)
    """
    require_env(env, "to_rl_games")
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"name must be a non-empty string (rl_games' env_name), got {name!r}.")
    vec = RlGamesVecEnv(env, name, obs_groups, clip_observations, clip_actions)

    def create(config_name: str, num_actors: int, **kwargs: Any) -> RlGamesVecEnv:
        if num_actors != vec.num_envs:
            raise InvalidArgumentError(
                f"the rl_games config asks for num_actors={num_actors}, but the env {name!r} has {vec.num_envs} "
                f"envs: set config['num_actors'] = {vec.num_envs}."
            )
        return vec

    rl_games_vecenv.register(name, create)
    rl_games_configurations.register(name, {"vecenv_type": name, "env_creator": lambda **kwargs: vec})
    return vec
