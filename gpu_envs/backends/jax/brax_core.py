"""The pure, batched step of a Brax / MuJoCo Playground env, with gpu_envs' own same-step auto-reset.

Brax ``Env`` s and Playground ``MjxEnv`` s are unbatched and functional: ``reset(rng) ->
State`` and ``step(State, action) -> State``, with ``State.obs``, ``.reward``, ``.done``
(a float), ``.metrics`` and ``.info``. Their training wrappers batch them (``VmapWrapper``),
count a time limit (``EpisodeWrapper``) and auto-reset (``AutoResetWrapper``,
``BraxAutoResetWrapper``) -- and the auto-reset overwrites the observation of an ended
row with the reset one (by default the row's FIRST reset state, cached, not a new draw),
so the true final observation is gone. :class:`BraxCore` does those three jobs itself,
as the other cores of :mod:`gpu_envs.backends.jax.cores` do:

* ``jax.vmap`` of the env's own ``reset`` and ``step`` (``action_repeat`` steps per call,
  summed rewards, never stepping past an episode end);
* the time limit: ``steps >= episode_length`` truncates, as ``EpisodeWrapper`` counts it
  (``truncated`` only where the env did not end the episode itself: ``terminated`` wins);
* same-step reset: on rows that ended, a FRESH ``reset`` from the row's key chain (what
  Playground's ``full_reset=True`` does); the step's own observation is kept as the final
  one. The reset is one branch of a ``lax.switch`` on the number of ended rows
  (:func:`~gpu_envs.backends.jax.cores.reset_ended`, shared with the JaxMARL core): none --
  one env step and nothing more; at most ``reset_batch`` (default ``N / 8``, at least 4;
  every row up to N = 8)
  -- those rows are gathered (``jnp.nonzero(done, size=reset_batch)``), reset and
  scattered back, so a large batch in which a few episodes end per step pays for a few
  resets, not N; more -- every row is reset and the ended ones selected with
  ``jnp.where``. All three give each row the same values (the oracle tests run both).

Keys: row ``i`` starts from ``fold_in(PRNGKey(seed), i)``; every reset does ``key, sub =
split(key)`` and ``env.reset(sub)``. Brax and Playground steps take no key (Playground
keeps its own in ``State.info``), so row ``i`` equals a single env reset and stepped by
hand with that chain -- the oracle of the tests.

The state pytree is cast to the reset state's dtypes after every call (Brax returns
weak-typed Python floats from some steps), so both branches of the ``cond`` and every
call of the jitted step see one signature: no recompilation, no silent promotion.

Domain randomization (``randomization``: a wrapper's ``v_env_fn``, its batched models and their
``in_axes``): row ``i`` resets and steps inside ``v_env_fn(model_i)`` -- the wrapper's own swap
of the env's model, vmapped with the models as Brax's ``DomainRandomizationVmapWrapper``
does -- and a gathered reset takes the gathered rows' models.

Example::

    core = BraxCore(brax.envs.get_environment("inverted_pendulum"), num_envs=8, episode_length=1000)
    carry, obs = jax.jit(core.init)(row_keys(0, 8))
    carry, out = jax.jit(core.step)(carry, jnp.zeros((8, 1)))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from gpu_envs.backends.jax.cores import Out, default_reset_batch, reset_ended, select, split_rows
from gpu_envs.contract.errors import ObservationError

__all__ = ["BraxCore", "default_reset_batch", "split_rows"]


def _take(models: Any, axes: Any, rows: jax.Array) -> Any:
    """The ``rows`` of batched ``models`` along each leaf's batch axis (``in_axes``; None: shared, kept whole)."""
    return jax.tree.map(
        lambda axis, leaf: leaf if axis is None else jnp.take(leaf, rows, axis=axis),
        axes,
        models,
        is_leaf=lambda x: x is None,
    )


def _strong(tree: Any) -> Any:
    """Abstract values of ``tree`` with weak types made strong (what the carry is cast to)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def _space(leaf: Any) -> gymnasium.spaces.Box:
    return gymnasium.spaces.Box(-np.inf, np.inf, tuple(leaf.shape), np.dtype(leaf.dtype))


def _obs_space(obs: Any) -> gymnasium.spaces.Space:
    if isinstance(obs, Mapping):
        return gymnasium.spaces.Dict({str(k): _obs_space(v) for k, v in obs.items()})
    return _space(obs)


class BraxCore:
    """``init`` / ``reset`` / ``step`` over N copies of one unbatched Brax or Playground env.

    Args:
        env: the unbatched env (``reset(rng)``, ``step(state, action)``, ``action_size``).
        num_envs: rows.
        episode_length: time limit in env steps (``None``: none).
        action_repeat: env steps per ``step`` call (rewards summed; an episode end stops
            the repeats of that row).
        reset_batch: at most this many ended rows are reset by gathering them (see the
            module docstring); ``None``: :func:`default_reset_batch`.
    """

    def __init__(
        self,
        env: Any,
        num_envs: int,
        episode_length: int | None,
        action_repeat: int = 1,
        reset_batch: int | None = None,
        randomization: tuple[Any, Any, Any] | None = None,
    ) -> None:
        self.env = env
        self.num_envs = int(num_envs)
        self.episode_length = episode_length
        self.action_repeat = int(action_repeat)
        self.reset_batch = (
            default_reset_batch(self.num_envs) if reset_batch is None else min(int(reset_batch), self.num_envs)
        )
        state = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
        self._like = _strong(state)
        action_size = int(env.action_size)
        self.single_observation_space = _obs_space(state.obs)
        self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (action_size,), np.float32)
        stepped = jax.eval_shape(env.step, state, jax.ShapeDtypeStruct((action_size,), jnp.float32))
        if jax.tree.structure(stepped) != jax.tree.structure(state):
            raise ObservationError(
                f"{type(env).__name__}.step returns a State whose structure differs from reset's "
                f"({jax.tree.structure(stepped)} vs {jax.tree.structure(state)}); gpu_envs selects reset states into "
                "stepped ones leaf by leaf, so the env must keep one State layout (the same info and metrics keys)."
            )
        self._randomization = randomization
        if randomization is None:
            self._reset_rows = jax.vmap(env.reset)
            self._step = jax.vmap(self._repeat_step)
        else:
            swap, models, axes = randomization

            def reset_row(model: Any, key: jax.Array) -> Any:
                with swap(model) as row_env:
                    return row_env.reset(key)

            def step_row(model: Any, state: Any, action: jax.Array) -> Any:
                with swap(model) as row_env:
                    return self._repeat_step(state, action, row_env.step)

            reset_v = jax.vmap(reset_row, in_axes=(axes, 0))
            step_v = jax.vmap(step_row, in_axes=(axes, 0, 0))
            self._reset_models = lambda keys, rows: reset_v(models if rows is None else _take(models, axes, rows), keys)
            self._step = lambda state, action: step_v(models, state, action)

    # --------------------------------------------------------------- one row
    def _conform(self, state: Any) -> Any:
        return jax.tree.map(lambda x, like: jnp.asarray(x, like.dtype), state, self._like)

    def _repeat_step(self, state: Any, action: jax.Array, env_step: Any = None) -> Any:
        """``action_repeat`` env steps of one row (summed reward), stopping at an episode end."""
        env_step = self.env.step if env_step is None else env_step
        state = self._conform(env_step(state, action))
        if self.action_repeat == 1:
            return state
        total = state.reward

        def one(carry: tuple, _: Any) -> tuple:
            state, total = carry
            ended = state.done != 0
            nxt = self._conform(env_step(state, action))
            state = jax.tree.map(lambda old, new: jnp.where(ended, old, new), state, nxt)
            return (state, total + jnp.where(ended, 0, nxt.reward)), None

        (state, total), _ = jax.lax.scan(one, (state, total), None, length=self.action_repeat - 1)
        return state.replace(reward=total)

    # ------------------------------------------------------------- the batch
    def _fresh(self, keys: jax.Array, rows: jax.Array | None = None) -> tuple[jax.Array, Any]:
        """New keys and reset states of every row, or of the gathered ``rows`` (their models, when randomized)."""
        keys, sub = split_rows(keys)
        if self._randomization is None:
            return keys, self._conform(self._reset_rows(sub))
        return keys, self._conform(self._reset_models(sub, rows))

    def init(self, keys: jax.Array) -> tuple[tuple, Any]:
        keys, state = self._fresh(keys)
        steps = jnp.zeros(self.num_envs, jnp.int32)
        return (keys, state, steps), state.obs

    def reset(self, carry: tuple, keys: jax.Array, mask: jax.Array) -> tuple[tuple, Any]:
        new_keys, new_state = self._fresh(keys)
        old_keys, old_state, steps = carry
        state = select(mask, new_state, old_state)
        return (select(mask, new_keys, old_keys), state, jnp.where(mask, 0, steps)), state.obs

    def step(self, carry: tuple, action: Any) -> tuple[tuple, Out]:
        keys, state, steps = carry
        stepped = self._step(state, jnp.asarray(action, jnp.float32))
        terminated = stepped.done != 0
        steps = steps + self.action_repeat
        if self.episode_length is None:
            truncated = jnp.zeros_like(terminated)
        else:
            truncated = (steps >= self.episode_length) & ~terminated
        done = terminated | truncated

        keys, state = reset_ended(
            done,
            (keys, stepped),
            lambda rows: self._fresh(keys if rows is None else keys[rows], rows),
            self.reset_batch,
        )
        out = Out(state.obs, stepped.reward, terminated, truncated, stepped.obs, dict(stepped.metrics))
        return (keys, state, jnp.where(done, 0, steps)), out
