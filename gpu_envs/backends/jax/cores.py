"""Pure, batched JAX step/reset functions with same-step auto-reset, one per env family.

A *core* turns one family of functional JAX envs into three pure functions over a
``carry`` pytree (per-row PRNG keys, env state, ...) that the JAX backend jit-compiles
once and calls once per ``step`` / ``reset``:

* ``init(keys) -> (carry, obs)``: reset every row from the per-row keys ``[N, 2]``;
* ``reset(carry, keys, mask) -> (carry, obs)``: reset rows where ``mask`` ``[N]``,
  restarting their key chain from ``keys``; other rows keep state and observation;
* ``step(carry, action) -> (carry, Out)``: step every row; rows that end are reset in
  the same call (``Out.obs`` post-reset there, ``Out.final_obs`` the true final one).

A core declares its specs either as gymnasium spaces (``single_observation_space``,
``single_action_space``) or, a core of agent groups, with ``specs(device) ->``
:class:`CoreSpecs`. :func:`reset_ended` is the same-step reset the Brax and JaxMARL cores
share: only the ended rows are reset, and only as many as need it.

Every row owns a key chain that evolves exactly as the family's single-env wrapper
evolves its one key, so row ``i`` of a batch equals a single env stepped and reset by
hand with the same keys -- the sequential oracle of the tests -- and does not depend on
``N``. Everything is ``jnp.where``: no data-dependent shapes, nothing leaves the device.

This module imports JAX at import time; the rest of :mod:`gpu_envs.backends.jax` imports
it lazily.

Example::

    core = FuncEnvCore(gym.make_vec("phys2d/CartPole-v1", num_envs=8))
    carry, obs = jax.jit(core.init)(row_keys(0, 8))
    carry, out = jax.jit(core.step)(carry, jnp.zeros(8, jnp.int32))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.specs import Composite

_INFO_RESERVED = ("final_observation", "terminated", "truncated")


class CoreSpecs(NamedTuple):
    """One env's specs, declared by a core itself instead of gymnasium spaces (a core of agent groups).

    ``observation``: the observation Composite (``(group, "observation")`` entries ``[A, *obs]``);
    ``action``: one ``(group, "action")`` leaf per group; ``info``: the entries every step
    hands in ``Out.info`` (each agent's ``(group, "reward")`` and flags); ``group_map``:
    ``{group: [agent names]}``. All on the backend's device, without batch dims.
    """

    observation: Composite
    action: Composite
    info: Composite
    group_map: dict[str, list[str]]


class Out(NamedTuple):
    """What one batched step returns (all leaves ``[N, ...]``)."""

    obs: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: Any
    info: dict


def row_keys(seed: Any, num_envs: int, seed_high: Any = 0) -> jax.Array:
    """Per-row keys ``[N, 2]``: ``fold_in(PRNGKey(seed), i)`` for row ``i`` (independent of ``N``).

    ``seed`` is the low 32 bits of the seed; ``seed_high`` (the high 32 bits of a seed
    >= 2**32) is folded into the base key when non-zero, so every seed in [0, 2**63)
    gives its own keys and seeds below 2**32 keep theirs.
    """
    base = jax.random.PRNGKey(seed)
    base = jnp.where(jnp.asarray(seed_high) != 0, jax.random.fold_in(base, seed_high), base)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_envs, dtype=jnp.uint32))


def select(mask: jax.Array, a: Any, b: Any) -> Any:
    """``where(mask, a, b)`` leaf by leaf, ``mask`` ``[N]`` broadcast over trailing dims."""

    def pick(x, y):
        return jnp.where(mask.reshape(mask.shape + (1,) * (jnp.ndim(x) - 1)), x, y)

    return jax.tree.map(pick, a, b)


def split_rows(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Split every row's key once: ``(first, second)`` halves, each ``[N, 2]``."""
    pairs = jax.vmap(jax.random.split)(keys)
    return pairs[:, 0], pairs[:, 1]


def default_reset_batch(num_envs: int) -> int:
    """How many ended rows :func:`reset_ended` resets by gathering them (more: every row is reset and selected).

    An eighth of the batch, at least 4: long episodes at large N end a handful of rows per
    step, which then cost a reset of ``N / 8`` rows instead of ``N``. When that would be
    half the batch or more (``N <= 8``), every row: a reset of a few rows costs what a
    reset of all costs there, and the gather and scatter around it come on top (Brax's
    inverted pendulum at N=8 on the CPU: 4-9% of a step, four interleaved runs).
    """
    gathered = max(4, num_envs // 8)
    return num_envs if 2 * gathered >= num_envs else gathered


def reset_ended(done: jax.Array, stepped: Any, fresh: Callable[[jax.Array | None], Any], reset_batch: int) -> Any:
    """``stepped`` (a pytree of ``[N, ...]`` leaves) with the rows where ``done`` replaced by fresh ones.

    ``fresh(rows)`` gives the reset values (the same pytree) of the gathered ``rows``
    (``[k]`` indices) or, with ``None``, of every row. One branch of a ``lax.switch`` on the
    number of ended rows runs: none -- ``stepped`` as it is, no reset computed; at most
    ``reset_batch`` -- those rows gathered (``jnp.nonzero(done, size=reset_batch)``), reset
    and scattered back; more -- every row reset and the ended ones selected with
    ``jnp.where``. All three give each row the same values; with ``reset_batch == N`` only
    the first and the last exist (a ``lax.cond``).

    Example::

        keys, state = reset_ended(done, (keys, state), lambda rows: fresh_rows(keys, rows), reset_batch=4)
    """
    n = done.shape[0]

    def keep(_: Any) -> Any:
        return stepped

    def reset_few(_: Any) -> Any:
        # padding indices equal N and are dropped by the scatter
        rows = jnp.nonzero(done, size=reset_batch, fill_value=n)[0]
        part = fresh(jnp.minimum(rows, n - 1))
        return jax.tree.map(lambda whole, new: whole.at[rows].set(new, mode="drop"), stepped, part)

    def reset_all(_: Any) -> Any:
        return select(done, fresh(None), stepped)

    ended = jnp.sum(done)
    if reset_batch < n:
        branch = jnp.where(ended == 0, 0, jnp.where(ended <= reset_batch, 1, 2))
        return jax.lax.switch(branch, (keep, reset_few, reset_all), None)
    return jax.lax.cond(ended > 0, reset_all, keep, None)


class FuncEnvCore:
    """gymnasium's functional JAX envs (``FunctionalJaxVectorEnv``: ``phys2d/CartPole-v1``...).

    gymnasium's vector env resets in NEXT_STEP style: the step after an episode ends
    returns the reset observation with a reward computed from stepping the terminal
    state (not zeroed) and ``terminated = truncated = False``, i.e. a fake transition,
    and it finds the rows to reset with ``jnp.any`` / ``jnp.where(...)[0]`` (a host
    round-trip and a shape that changes every step). This core does not wrap that
    ``step``: it drives the env's functional pieces (``initial``, ``transition``,
    ``reward``, ``terminal``, ``observation``, already vmapped by the vector env) itself,
    with the single ``FunctionalJaxEnv``'s key discipline per row -- ``rng, key =
    split(key)`` once per reset and once per step, that ``rng`` feeding every function
    of the call -- and a time limit counted like the vector env's (``steps >= limit``
    truncates, reset to 0 on reset). So no step is lost, none is fake, and the reward is
    the true one of the step that ended the episode.
    """

    final_obs_kind = FinalObsKind.WRAPPER_RESET  # the env's own auto-reset is not used: ended rows reset here

    def __init__(self, vector_env: Any) -> None:
        self.env = vector_env
        self.func = vector_env.func_env  # methods already vmapped by FunctionalJaxVectorEnv.__init__
        self.num_envs = int(vector_env.num_envs)
        self.time_limit = int(getattr(vector_env, "time_limit", 0) or 0)
        self.single_observation_space = vector_env.single_observation_space
        self.single_action_space = vector_env.single_action_space

    def _fresh(self, keys: jax.Array) -> tuple[jax.Array, Any, Any]:
        rng, keys = split_rows(keys)
        state = self.func.initial(rng)
        return keys, state, self.func.observation(state, rng)

    def init(self, keys: jax.Array) -> tuple[tuple, Any]:
        keys, state, obs = self._fresh(keys)
        steps = jnp.zeros(self.num_envs, jnp.int32)
        return (keys, state, steps, obs), obs

    def reset(self, carry: tuple, keys: jax.Array, mask: jax.Array) -> tuple[tuple, Any]:
        new_keys, new_state, new_obs = self._fresh(keys)
        old_keys, old_state, steps, old_obs = carry
        obs = select(mask, new_obs, old_obs)
        carry = (
            select(mask, new_keys, old_keys),
            select(mask, new_state, old_state),
            jnp.where(mask, 0, steps),
            obs,
        )
        return carry, obs

    def step(self, carry: tuple, action: Any) -> tuple[tuple, Out]:
        keys, state, steps, _ = carry
        rng, keys = split_rows(keys)
        f = self.func
        next_state = f.transition(state, action, rng)
        reward = f.reward(state, action, next_state, rng)
        terminated = jnp.broadcast_to(jnp.asarray(f.terminal(next_state, rng), bool), (self.num_envs,))
        final_obs = f.observation(next_state, rng)
        steps = steps + 1
        limit = self.time_limit if self.time_limit > 0 else jnp.iinfo(jnp.int32).max  # 0: no time limit
        truncated = steps >= limit
        done = terminated | truncated
        reset_keys, reset_state, reset_obs = self._fresh(keys)
        obs = select(done, reset_obs, final_obs)
        carry = (
            select(done, reset_keys, keys),
            select(done, reset_state, next_state),
            jnp.where(done, 0, steps),
            obs,
        )
        return carry, Out(obs, reward, terminated, truncated, final_obs, {})


class GymnaxCore:
    """gymnax >= 1.0 environments (and gymnax's pure-RL wrappers: LogWrapper, ...).

    gymnax's own ``step(key, state, action, params)`` is already same-step: it splits
    ``key`` into a step key and a reset key, selects the reset state and observation on
    rows that are ``terminated | truncated`` and returns the pre-reset observation in
    ``info["final_observation"]`` (also ``info["terminated"]`` / ``["truncated"]``). So
    the core vmaps that ``step`` (params broadcast) and reads the final observation from
    the info; the remaining numeric info entries (``"discount"``, LogWrapper's episode
    returns...) are passed on. Keys follow ``GymnaxToGymWrapper``: ``key, sub =
    split(key)`` once per reset and per step.
    """

    final_obs_kind = FinalObsKind.SIMULATOR  # gymnax's own same-step reset keeps info["final_observation"]

    def __init__(self, env: Any, params: Any, num_envs: int) -> None:
        from gymnax.environments.spaces import gymnax_space_to_gym_space

        self.env = env
        self.params = env.default_params if params is None else params
        self.num_envs = int(num_envs)
        self.single_observation_space = gymnax_space_to_gym_space(env.observation_space(self.params))
        self.single_action_space = gymnax_space_to_gym_space(env.action_space(self.params))
        self._reset = jax.vmap(env.reset, in_axes=(0, None))
        self._step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def _fresh(self, keys: jax.Array) -> tuple[jax.Array, Any, Any]:
        keys, sub = split_rows(keys)
        obs, state = self._reset(sub, self.params)
        return keys, state, obs

    def init(self, keys: jax.Array) -> tuple[tuple, Any]:
        keys, state, obs = self._fresh(keys)
        return (keys, state, obs), obs

    def reset(self, carry: tuple, keys: jax.Array, mask: jax.Array) -> tuple[tuple, Any]:
        new_keys, new_state, new_obs = self._fresh(keys)
        old_keys, old_state, old_obs = carry
        obs = select(mask, new_obs, old_obs)
        return (select(mask, new_keys, old_keys), select(mask, new_state, old_state), obs), obs

    def step(self, carry: tuple, action: Any) -> tuple[tuple, Out]:
        keys, state, _ = carry
        keys, sub = split_rows(keys)
        obs, state, reward, terminated, truncated, info = self._step(sub, state, action, self.params)
        info = dict(info)
        final_obs = info.pop("final_observation")
        extra = {k: v for k, v in info.items() if k not in _INFO_RESERVED}
        out = Out(obs, reward, jnp.asarray(terminated, bool), jnp.asarray(truncated, bool), final_obs, extra)
        return (keys, state, obs), out
