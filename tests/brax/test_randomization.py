"""Brax's domain randomization (``training.wrap(env, randomization_fn=fn)``) through gpu_envs' JAX backend.

Each of the ``N`` rows gets its own actuator gear (a quarter to four times the model's), so
the same action pushes each row's pole differently. The oracle is tasks.py's: each row's
own model (the wrapper's batched models, row ``i``) stepped by hand with the key chain
gpu_envs gives row ``i``, reset at the end of each episode -- with the per-row gears the
rows must match it row by row, through gathered and full resets, and differ from each other.
"""

from __future__ import annotations

import brax.envs
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from brax.envs.wrappers import training

import gpu_envs
from gpu_envs.backends.jax.brax import make_brax_core
from tests.brax.tasks import assert_matches, batched, reference, smooth_actions

pytestmark = pytest.mark.slow  # JIT compiles of Brax's pipeline: tens of seconds each
N, T, EPISODE, SEED = 4, 60, 12, 5
GEARS = [0.25, 1.0, 2.0, 4.0]
LEVELS = [0.3, 0.3, 0.3, 0.3]  # the same push everywhere: only the gears differ


def randomization_fn(sys):
    """Brax's recipe: the randomized fields batched (here the gear, [N, actuators]), every other field shared."""
    gear = sys.actuator.gear[None] * jnp.asarray(GEARS)[:, None]
    axes = jax.tree.map(lambda _: None, sys).tree_replace({"actuator.gear": 0})
    return sys.tree_replace({"actuator.gear": gear}), axes


class RowModels:
    """The unbatched env with one row's model swapped in (what the oracle steps), jitted once for every row."""

    def __init__(self, wrapper, models, axes):
        def reset(model, key):
            with wrapper.v_env_fn(model) as env:
                return env.reset(key)

        def step(model, state, action):
            with wrapper.v_env_fn(model) as env:
                return env.step(state, action)

        self._reset, self._step = jax.jit(reset), jax.jit(step)
        self.models, self.axes = models, axes

    def row(self, i):
        model = jax.tree.map(lambda a, m: m if a is None else m[i], self.axes, self.models, is_leaf=lambda x: x is None)
        return RowModel(self, model)


class RowModel:
    def __init__(self, models: RowModels, model):
        self.models, self.model = models, model

    def reset(self, key):
        return self.models._reset(self.model, key)

    def step(self, state, action):
        return self.models._step(self.model, state, action)


@pytest.fixture(scope="module")
def wrapped():
    raw = brax.envs.get_environment("inverted_pendulum")
    return training.wrap(raw, episode_length=EPISODE, randomization_fn=randomization_fn)


def test_each_row_steps_with_its_own_model(wrapped):
    env = gpu_envs.wrap(wrapped, reset_batch=2, device="cpu")
    assert env.num_envs == N  # the models' batch size
    actions = smooth_actions(LEVELS, T, 1)
    got = batched(env, actions, SEED)
    dr = wrapped.env  # AutoResetWrapper -> EpisodeWrapper -> DomainRandomizationVmapWrapper
    while type(dr).__name__ != "DomainRandomizationVmapWrapper":
        dr = dr.env
    from gpu_envs.backends.jax.brax import randomized_models

    row_models = RowModels(dr, *randomized_models(dr))
    for i in range(N):  # each row against its own model, stepped by hand with row i's key chain
        want = reference(row_models.row(i), actions, SEED, EPISODE, rows=[i], jit=False)
        assert_matches({k: v[i : i + 1] for k, v in got.items()}, want)
    # the gears matter: the same pushes move the rows' carts apart
    first_steps = got["next_observation"][:, 0]
    assert np.abs(first_steps[3] - first_steps[0]).max() > 1e-4
    assert (got["terminated"] | got["truncated"]).sum() >= N, "episodes ended and rows were reset"
    env.close()


def test_the_core_takes_its_rows_from_the_models_and_refuses_another_count(wrapped):
    with pytest.raises(Exception, match="num_envs=3 does not match"):
        make_brax_core(wrapped, num_envs=3)
    core = make_brax_core(wrapped)
    assert core.num_envs == N and type(core.env).__name__ == "InvertedPendulum"
