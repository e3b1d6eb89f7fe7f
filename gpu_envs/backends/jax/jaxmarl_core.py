"""The pure, batched step of a JaxMARL env, in agent groups, with gpu_envs' own same-step auto-reset.

A JaxMARL ``MultiAgentEnv`` is unbatched and functional: ``reset(key) -> (obs, state)`` and
``step_env(key, state, actions) -> (obs, state, rewards, dones, infos)``, each a dict by
agent name (``dones`` with ``"__all__"``, the env's). Its ``step`` adds the auto-reset --
``key, key_reset = split(key)``, ``step_env(key, ...)``, ``reset(key_reset)`` selected where
``dones["__all__"]`` -- and so returns the reset observation of a row that ended, never
its final one. :class:`JaxMarlCore` does that step itself, as the other cores of
:mod:`gpu_envs.backends.jax.cores` do:

* ``jax.vmap`` of the env's ``step_env`` and ``reset``; the agents' outputs stacked into
  their groups inside the jitted step (``(group, "observation")`` ``[N, A, *obs]``, each
  agent's reward and flags ``[N, A, 1]``), the groups' actions split back into one
  ``[N, *act]`` array per agent;
* same-step reset: the rows whose ``dones["__all__"]`` is set are reset with the reset key
  JaxMARL's ``step`` would use (:func:`~gpu_envs.backends.jax.cores.reset_ended`: only
  those rows, and no reset at all on a step where none ended); the step's own
  observations are the final ones;
* the flags split as the backend was told (``ending``: ``"truncated"`` or
  ``"terminated"``; see :mod:`gpu_envs.backends.jax.jaxmarl` for what can be told).

The state is cast to the reset state's dtypes after every call (MPE's step counter is a
weakly typed int), so every branch and every call of the jitted step see one signature.

Example (JaxMARL 0.2 prints a line about its optional submodules when first imported, then sets
``sys.stdout`` to the terminal's: ``redirect_stdout`` hides the line and puts the stream back):

>>> import contextlib, io
>>> with contextlib.redirect_stdout(io.StringIO()):
...     import jaxmarl
>>> from gpu_envs.backends.jax.cores import row_keys
>>> from gpu_envs.backends.jax.jaxmarl import make_jaxmarl_core
>>> core = make_jaxmarl_core(jaxmarl.make("MPE_simple_spread_v3"), num_envs=8)
>>> carry, obs = jax.jit(core.init)(row_keys(0, 8))
>>> obs["agents"]["observation"].shape
(8, 3, 18)
>>> carry, out = jax.jit(core.step)(carry, {("agents", "action"): jnp.zeros((8, 3), jnp.int32)})
>>> out.info["agents"]["reward"].shape, out.reward.shape, out.final_obs["agents"]["observation"].shape
((8, 3, 1), (8,), (8, 3, 18))
"""

from __future__ import annotations

import math
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import torch

from gpu_envs.backends.agent_groups import GroupLayout
from gpu_envs.backends.jax.cores import CoreSpecs, Out, default_reset_batch, reset_ended, select, split_rows
from gpu_envs.contract.errors import ObservationError
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ACTION, DONE_KEYS, OBSERVATION, REWARD
from gpu_envs.contract.specs import Box, Composite, torch_dtype

__all__ = ["JaxMarlCore"]

_INFO = "info"  # JaxMARL's own numeric infos go under ("next", "info", key)


class JaxMarlCore:
    """``init`` / ``reset`` / ``step`` over N copies of one JaxMARL env, in agent groups (module docstring).

    Args:
        env: the JaxMARL ``MultiAgentEnv`` (not one of its wrappers).
        num_envs: rows.
        layout: the agents' groups and specs (on the CPU; :meth:`specs` moves them).
        ending: what an episode end (``dones["__all__"]``) is: ``"truncated"`` or ``"terminated"``.
        reset_batch: at most this many ended rows are reset by gathering them; ``None``:
            :func:`~gpu_envs.backends.jax.cores.default_reset_batch`.
    """

    final_obs_kind = FinalObsKind.WRAPPER_RESET  # JaxMARL's auto-reset is not used: ended rows reset here

    def __init__(
        self, env: Any, num_envs: int, layout: GroupLayout, ending: str = "terminated", reset_batch: int | None = None
    ) -> None:
        self.env = env
        self.num_envs = int(num_envs)
        self.layout = layout
        self.agents = list(layout.agents)
        self.ending = ending
        self.reset_batch = (
            default_reset_batch(self.num_envs) if reset_batch is None else min(int(reset_batch), self.num_envs)
        )
        self._reset_rows = jax.vmap(env.reset)
        self._step_rows = jax.vmap(env.step_env)
        obs, state = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
        self._like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
        missing = [a for a in self.agents if a not in obs]
        if missing:
            raise ObservationError(
                f"{type(env).__name__}.reset returns no observation for the agents {missing} (it returns "
                f"{sorted(obs)}); gpu_envs keeps every agent of env.agents in its group from the first step."
            )
        # observations that belong to no agent (SMAX's "world_state"): env-level keys
        self.extra_obs = {str(k): v for k, v in obs.items() if k not in self.agents}
        clash = sorted(set(self.extra_obs) & {*layout.group_map, _INFO})
        if clash:
            raise ObservationError(
                f"{type(env).__name__}'s observation entries {clash} have the names of agent groups (or 'info'); "
                "pass group_map= with other group names."
            )

    # ------------------------------------------------------------------- specs
    def specs(self, device: torch.device) -> CoreSpecs:
        """One env's specs on ``device``: the groups' (and env-level observations), the agents' info entries."""
        observation = cast(Composite, self.layout.observation_spec.to(device))
        for key, leaf in self.extra_obs.items():
            shape = tuple(leaf.shape)
            observation[key] = Box(-math.inf, math.inf, shape, torch_dtype(np.dtype(leaf.dtype)), device)
        action = cast(Composite, self.layout.action_spec.to(device))
        info = cast(Composite, self.layout.info_spec.to(device))
        return CoreSpecs(observation, action, info, self.layout.group_map)

    # ---------------------------------------------------------- agents <-> groups
    def _conform(self, state: Any) -> Any:
        return jax.tree.map(lambda x, like: jnp.asarray(x, like.dtype), state, self._like)

    def _grouped(self, per_agent: dict) -> dict:
        """Per-agent values ``{agent: [N, ...]}`` (and env-level ones) as ``{group: {"observation": [N, A, ...]}}``."""
        out: dict = {}
        for group, members in self.layout.members.items():
            parts = [per_agent[self.agents[i]] for i in members]
            out[group] = {OBSERVATION: jax.tree.map(lambda *xs: jnp.stack(xs, 1), *parts)}
        out.update({key: per_agent[key] for key in self.extra_obs})
        return out

    def _agent_actions(self, action: dict) -> dict:
        """The groups' actions ``{(group, "action"): [N, A, ...]}`` as ``{agent: [N, ...]}``."""
        out: dict = {}
        for group, members in self.layout.members.items():
            stacked = action[(group, ACTION)]
            for j, i in enumerate(members):
                out[self.agents[i]] = stacked[:, j]
        return out

    def _agent_entries(self, rewards: dict, dones: dict, done: jax.Array, truncated: jax.Array) -> dict:
        """Each group's ``reward`` and flags ``[N, A, 1]`` (module docstring of :mod:`.jaxmarl`: how they split)."""
        out: dict = {}
        for group, members in self.layout.members.items():
            names = [self.agents[i] for i in members]
            reward = jnp.stack([jnp.asarray(rewards[a], jnp.float32).reshape(-1) for a in names], 1)[..., None]
            agent_done = jnp.stack([jnp.asarray(dones[a], bool).reshape(-1) for a in names], 1) | done[:, None]
            agent_truncated = agent_done & truncated[:, None]  # a row that ended at a time limit: every agent's
            flags = (agent_done, agent_done & ~agent_truncated, agent_truncated)
            out[group] = {REWARD: reward, **{key: f[..., None] for key, f in zip(DONE_KEYS, flags, strict=True)}}
        return out

    # ------------------------------------------------------------------- the batch
    def _fresh(self, keys: jax.Array) -> tuple[Any, dict]:
        """Reset states and grouped observations of the rows whose reset keys are ``keys``."""
        obs, state = self._reset_rows(keys)
        return self._conform(state), self._grouped(obs)

    def init(self, keys: jax.Array) -> tuple[tuple, dict]:
        keys, sub = split_rows(keys)
        state, obs = self._fresh(sub)
        return (keys, state, obs), obs

    def reset(self, carry: tuple, keys: jax.Array, mask: jax.Array) -> tuple[tuple, dict]:
        new_keys, sub = split_rows(keys)
        new_state, new_obs = self._fresh(sub)
        old_keys, old_state, old_obs = carry
        obs = select(mask, new_obs, old_obs)
        return (select(mask, new_keys, old_keys), select(mask, new_state, old_state), obs), obs

    def step(self, carry: tuple, action: dict) -> tuple[tuple, Out]:
        keys, state, _ = carry
        keys, sub = split_rows(keys)
        step_keys, reset_keys = split_rows(sub)  # as JaxMARL's MultiAgentEnv.step splits its key
        obs, stepped, rewards, dones, infos = self._step_rows(step_keys, state, self._agent_actions(action))
        done = jnp.asarray(dones["__all__"], bool).reshape(-1)
        final = self._grouped(obs)
        state, next_obs = reset_ended(
            done,
            (self._conform(stepped), final),
            lambda rows: self._fresh(reset_keys if rows is None else reset_keys[rows]),
            self.reset_batch,
        )
        never = jnp.zeros_like(done)
        terminated, truncated = (never, done) if self.ending == "truncated" else (done, never)
        info = self._agent_entries(rewards, dones, done, truncated)
        team = jnp.zeros(done.shape, jnp.float32)
        for entries in info.values():
            team = team + entries[REWARD].sum(1)[:, 0]
        info[_INFO] = dict(infos)
        out = Out(next_obs, team, terminated, truncated, final, info)
        return (keys, state, next_obs), out
