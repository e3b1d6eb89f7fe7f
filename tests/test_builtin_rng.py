"""The built-in envs' randomness: per-row streams, shards, partial resets, re-seeding, state.

Row ``i``'s initial states depend only on the seed, its global index and how many times
it was reset, so ``gpu_envs.make(..., env_index_offset=o)`` over ``N`` rows reproduces
rows ``[o, o + N)`` of the ``2N``-row run bit for bit (how torchrun shards a run).
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.builtin import CartPoleEnv, PendulumEnv
from gpu_envs.contract.errors import InvalidArgumentError

ENVS = {"CartPole-v1": {}, "Pendulum-v1": {"max_episode_steps": 13}}


def row_policy(env_id):
    """Erratic actions from each row's own observation (no shared RNG): rows stay independent."""
    if env_id == "CartPole-v1":
        return lambda obs: (obs * 1e4).floor().long().sum(-1) % 2
    return lambda obs: (-2.0 * obs[:, 1:2] - 0.5 * obs[:, 2:3]).clamp(-2, 2)


def run(env_id, num_envs, offset, steps=120):
    env = gpu_envs.make(env_id, num_envs=num_envs, device="cpu", seed=42, env_index_offset=offset, **ENVS[env_id])
    policy = row_policy(env_id)
    td = env.reset()
    out = []
    for _ in range(steps):
        td["action"] = policy(td["observation"])
        td, root = env.step_and_maybe_reset(td)
        out.append(td.clone())
        td = root
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("env_id", list(ENVS))
def test_two_shards_equal_one_run_of_twice_the_rows(env_id):
    # Shard and whole batch are multiples of the CPU kernels' vector width, so every row goes
    # through the same code in both runs: with a size that leaves a scalar tail, atan2 in
    # Pendulum's reward may differ in its last bit there (the physics and draws do not).
    n = 64
    whole = run(env_id, 2 * n, 0)
    shards = torch.cat([run(env_id, n, 0), run(env_id, n, n)], dim=0)
    assert int(whole["next", "done"].sum()) > n, "many episodes ended and reset inside the window"
    for key in whole.keys(True, True):
        assert torch.equal(whole[key], shards[key]), key


@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_partial_reset_advances_only_masked_rows(cls):
    env = cls(num_envs=8, seed=3)
    env.reset()
    counter = env.live_state()["rng_counter"]
    assert counter.tolist() == [1] * 8
    mask = torch.tensor([True, False] * 4)
    before = env.state.clone()
    env.reset(options={"reset_mask": mask})
    assert counter.tolist() == [2, 1] * 4
    assert torch.equal(env.state[~mask], before[~mask])
    # the masked rows drew what their second draw is in any env with this seed
    twice = cls(num_envs=8, seed=3)
    twice.reset()
    twice.reset()
    assert torch.equal(env.state[mask], twice.state[mask])


@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_partial_resets_from_the_draw_pool_equal_direct_draws(cls):
    """Masked resets take pooled draws: over refills, reseeds and steps they equal the generator's own."""
    env = cls(num_envs=8, seed=11)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    action = torch.zeros(8, dtype=torch.long) if cls is CartPoleEnv else torch.zeros(8, 1)
    for i in range(3 * env._step_draws.events):  # several pool refills
        if i == 70:
            env.reset(seed=12)  # a new key: the pool must notice
        mask = torch.rand(8, generator=gen) < 0.4
        expected = env._rng.uniform(env._reset_bounds)  # the direct draw at these counters
        before = env.state.clone()
        env.reset(options={"reset_mask": mask})
        assert torch.equal(env.state[mask], expected[mask]), i  # the state is the draw itself
        assert torch.equal(env.state[~mask], before[~mask]), i
        env.step(action)


@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_auto_resets_draw_each_rows_next_value(cls):
    """A row ended by step() takes the same fresh state a reset of that row alone would."""
    env = cls(num_envs=6, seed=9)
    env.reset()
    state = env.live_state()
    state["elapsed_steps"].fill_(env.max_episode_steps - 1)  # every row truncates at the next step
    state["elapsed_steps"][::2] = 0
    action = torch.zeros(6, dtype=torch.long) if cls is CartPoleEnv else torch.zeros(6, 1)
    _, _, _, truncated, _ = env.step(action)
    assert truncated.tolist() == [False, True] * 3
    reference = cls(num_envs=6, seed=9)
    reference.reset()
    reference.reset(options={"reset_mask": truncated})
    assert torch.equal(env.state[truncated], reference.state[truncated])
    assert env.live_state()["rng_counter"].tolist() == [1, 2] * 3


def test_reset_seed_rekeys_and_env_index_offset_is_checked():
    env = CartPoleEnv(num_envs=4, seed=0)
    first, _ = env.reset(seed=5)
    env.step(torch.ones(4, dtype=torch.long))
    again, _ = env.reset(seed=5)
    assert torch.equal(first, again)
    assert torch.equal(CartPoleEnv(num_envs=4, seed=5).reset()[0], first)
    assert not torch.equal(env.reset(seed=6)[0], first)
    shard, _ = CartPoleEnv(num_envs=2, seed=5, env_index_offset=2).reset()
    assert torch.equal(shard, first[2:])
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidArgumentError, match="env_index_offset"):
            CartPoleEnv(num_envs=2, env_index_offset=bad)
    assert "env_index_offset=2" in repr(CartPoleEnv(num_envs=2, env_index_offset=2))


@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_state_dict_is_live_in_place_state_and_restores_the_future(cls):
    env = cls(num_envs=16, seed=1, max_episode_steps=9)
    env.reset()
    state = env.live_state()
    assert set(state) == {"state", "elapsed_steps", "rng_key", "rng_counter", "params"}
    actions = [torch.randint(0, 2, (16,)) if cls is CartPoleEnv else torch.rand(16, 1) * 4 - 2 for _ in range(30)]
    snapshot = {name: value.clone() for name, value in state.items()}
    first = [env.step(a) for a in actions]
    for name, value in env.live_state().items():
        assert value is state[name], f"{name} was re-bound"
    assert not torch.equal(state["rng_counter"], snapshot["rng_counter"]), "resets happened"
    env.load_live_state(snapshot)
    second = [env.step(a) for a in actions]
    for a, b in zip(first, second, strict=True):
        for x, y in zip(a[:4], b[:4], strict=True):
            assert torch.equal(x, y)
    with pytest.raises(InvalidArgumentError, match="load_live_state expects the names"):
        env.load_live_state({"state": snapshot["state"]})
    with pytest.raises(InvalidArgumentError, match="rng_counter"):
        env.load_live_state({**snapshot, "rng_counter": snapshot["rng_counter"].float()})


def test_reset_options_keep_draws_in_low_high():
    env = CartPoleEnv(num_envs=4096, seed=0)
    obs, _ = env.reset(options={"low": 0.5, "high": 0.5000001})
    assert bool((obs >= 0.5).all()) and bool((obs < torch.tensor(0.5000001)).all())
    obs, _ = env.reset(options={"low": -1.0, "high": 1.0})
    assert bool((obs >= -1.0).all()) and bool((obs < 1.0).all()) and float(obs.abs().max()) > 0.999
