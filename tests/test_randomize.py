"""Per-row physical constants of the built-in envs (set_params) and the Randomize transform.

The physics oracle teacher-forces as tests/test_physics.py does: every row has its own
constants, gymnasium env ``i`` is built with row ``i``'s constants (its attributes set as
gymnasium's own ``__init__`` derives them), every step both start from the same float32
state, take the same action, and must agree on the next state, reward and flags.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.builtin import CartPoleEnv, PendulumEnv
from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.rollout import collect
from gpu_envs.transforms import Randomize, TransformedEnv

N = 16
CARTPOLE_RANGES = {"gravity": (8.0, 12.0), "masscart": (0.5, 2.0), "masspole": (0.05, 0.5), "length": (0.3, 1.0),
                   "force_mag": (5.0, 15.0)}  # fmt: skip
PENDULUM_RANGES = {"m": (0.5, 2.0), "l": (0.5, 1.5), "g": (8.0, 12.0), "max_torque": (1.0, 3.0)}


def row_constants(ranges: dict, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(lo, hi, size=n).astype(np.float32) for k, (lo, hi) in ranges.items()}


def gymnasium_env(env_id: str, constants: dict[str, float]):
    env = gymnasium.make(env_id, disable_env_checker=True)
    u = env.unwrapped
    for name, value in constants.items():
        setattr(u, name, float(value))
    if env_id == "CartPole-v1":  # what CartPoleEnv.__init__ derives from them
        u.total_mass = u.masspole + u.masscart
        u.polemass_length = u.masspole * u.length
    return env


@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_rows_with_their_own_constants_follow_gymnasium_built_with_them(cls):
    env_id, ranges = ("CartPole-v1", CARTPOLE_RANGES) if cls is CartPoleEnv else ("Pendulum-v1", PENDULUM_RANGES)
    constants = row_constants(ranges, N)
    env = cls(num_envs=N, seed=0)
    env.reset()
    env.set_params(**{k: torch.from_numpy(v) for k, v in constants.items()})  # [N] values for every row
    gym_envs = [gymnasium_env(env_id, {k: v[i] for k, v in constants.items()}) for i in range(N)]
    for i, e in enumerate(gym_envs):
        e.reset(seed=i)
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(300):
        states = np.stack([e.unwrapped.state for e in gym_envs]).astype(np.float32)
        for e, s in zip(gym_envs, states, strict=True):
            e.unwrapped.state = s.astype(np.float64)
        env.state.copy_(torch.from_numpy(states))
        env.elapsed_steps.copy_(torch.tensor([e._elapsed_steps for e in gym_envs]))
        if cls is CartPoleEnv:
            actions = list(rng.integers(0, 2, size=N))
        else:  # beyond every row's max torque on purpose: the per-row clip is part of the dynamics
            actions = list(rng.uniform(-3.5, 3.5, size=(N, 1)).astype(np.float32))
        results = [e.step(a) for e, a in zip(gym_envs, actions, strict=True)]
        _, reward, terminated, truncated, info = env.step(torch.from_numpy(np.stack(actions)))
        np.testing.assert_allclose(info["final_obs"].numpy(), np.stack([r[0] for r in results]), rtol=0, atol=2e-5)
        np.testing.assert_allclose(reward.numpy(), [r[1] for r in results], rtol=0, atol=2e-5)
        np.testing.assert_array_equal(terminated.numpy(), [r[2] for r in results])
        np.testing.assert_array_equal(truncated.numpy(), [r[3] for r in results])
        for e, r in zip(gym_envs, results, strict=True):
            if r[2] or r[3]:
                e.reset()
                ended += 1
    assert ended > 0
    # the constants matter: the same states and actions with the defaults differ
    default = cls(num_envs=N, seed=0)
    default.reset()
    default.state.copy_(env.state)
    action = torch.ones(N, dtype=torch.long) if cls is CartPoleEnv else torch.full((N, 1), 1.5)
    a = env.step(action)[4]["final_obs"]
    b = default.step(action)[4]["final_obs"]
    assert not torch.allclose(a, b, atol=1e-4)


def test_set_params_writes_only_the_chosen_rows_and_names_bad_values():
    env = gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0)
    sim = env.backend.env
    assert not sim.randomized
    assert sim.params["m"].tolist() == [1.0] * 4
    sim.set_params(rows=[1, 3], m=2.0)
    sim.set_params(rows=torch.tensor([True, False, False, False]), l=torch.full((4,), 0.5))
    assert sim.params["m"].tolist() == [1.0, 2.0, 1.0, 2.0]
    assert sim.params["l"].tolist() == [0.5, 1.0, 1.0, 1.0]
    assert sim.randomized
    with pytest.raises(InvalidArgumentError, match="unknown parameter"):
        sim.set_params(mass=2.0)
    with pytest.raises(InvalidArgumentError, match="finite positive"):
        sim.set_params(m=-1.0)
    with pytest.raises(InvalidArgumentError, match="4 entries"):
        sim.set_params(rows=torch.tensor([True, False]), m=2.0)
    with pytest.raises(InvalidArgumentError, match=r"\[0, 4\)"):
        sim.set_params(rows=[7], m=2.0)


def test_a_snapshot_carries_a_rows_constants_into_other_rows():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    env.reset()
    sim = env.backend.env
    sim.set_params(rows=[0], masspole=0.4, length=0.9)
    saved = env.get_state(rows=[0])
    env.set_state(saved, rows=[2])
    assert sim.params["masspole"].tolist() == pytest.approx([0.4, 0.1, 0.4, 0.1])
    # a fresh env taking that snapshot steps with the snapshot's constants
    other = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    other.reset()
    other.set_state(env.get_state())
    assert other.backend.env.randomized
    root_a, root_b = env.root(), other.root()
    root_a["action"] = torch.ones(4, dtype=torch.long)
    root_b["action"] = torch.ones(4, dtype=torch.long)
    assert torch.equal(env.step(root_a)["next", "observation"], other.step(root_b)["next", "observation"])


def randomized(env_id: str, ranges: dict, n: int = N, seed: int = 0):
    randomize = Randomize(ranges)
    env = TransformedEnv(gpu_envs.make(env_id, num_envs=n, device="cpu", seed=seed, max_episode_steps=20), randomize)
    return env, randomize


def test_randomize_draws_each_rows_constants_at_each_of_its_episodes_within_the_ranges():
    env, _ = randomized("Pendulum-v1", PENDULUM_RANGES)
    sim = env.backend.env
    env.reset()
    first = sim.params
    for name, (lo, hi) in PENDULUM_RANGES.items():
        assert ((first[name] >= lo) & (first[name] < hi)).all(), name
        assert first[name].unique().numel() == N, name  # every row its own
    root = env.root()
    seen = []
    for t in range(45):  # episodes of 20 steps: two auto-resets
        root["action"] = torch.zeros(N, 1)
        _, root = env.step_and_maybe_reset(root)
        now = sim.params
        if t in (19, 39):
            assert not torch.equal(now["m"], seen[-1]["m"])  # the new episodes drew new constants
        elif seen:
            assert torch.equal(now["m"], seen[-1]["m"])  # constant within an episode
        seen.append(now)
    # a masked reset of rows 0 and 2 redraws only theirs
    before = sim.params["l"]
    mask = torch.tensor([True, False, True] + [False] * (N - 3)).view(N, 1)
    env.reset(td=root.set("_reset", mask))
    after = sim.params["l"]
    assert not torch.equal(after[[0, 2]], before[[0, 2]])
    assert torch.equal(after[3:], before[3:]) and after[1] == before[1]


def test_randomize_follows_the_seed_and_its_snapshot_replays():
    def draws(seed):
        env, _ = randomized("CartPole-v1", CARTPOLE_RANGES, seed=seed)
        env.reset(seed=seed)
        collect(env, None, steps=50)
        return env, env.backend.env.params["masspole"]

    (env_a, a), (_, b), (_, c) = draws(1), draws(1), draws(2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    saved = env_a.get_state()
    x = collect(env_a, None, steps=30).clone()
    env_a.set_state(saved)
    y = collect(env_a, None, steps=30).clone()
    torch.testing.assert_close(x.to_dict(), y.to_dict(), rtol=0, atol=0)


def test_randomize_refuses_what_it_cannot_do():
    with pytest.raises(InvalidArgumentError, match="lo <= hi"):
        Randomize({"m": (2.0, 1.0)})
    with pytest.raises(InvalidArgumentError, match="positive"):
        Randomize({"m": (-1.0, 1.0)})
    with pytest.raises(InvalidArgumentError, match="no parameter"):
        Randomize({})
    with pytest.raises(InvalidArgumentError, match="unknown parameter"):
        randomized("Pendulum-v1", {"mass": (0.5, 2.0)})
    from tests.fakes import CountingTorchVectorEnv

    with pytest.raises(InvalidArgumentError, match="set_params"):
        TransformedEnv(gpu_envs.wrap(CountingTorchVectorEnv(4)), Randomize({"m": (0.5, 2.0)}))


@pytest.mark.slow
def test_a_compiled_collection_with_randomize_matches_the_eager_one():
    def build():
        env, _ = randomized("Pendulum-v1", PENDULUM_RANGES, n=8, seed=3)
        env.reset(seed=3)
        return env

    def policy(td):
        action = torch.linspace(-1.5, 1.5, td.batch_size[0]).unsqueeze(1)
        return td.set("action", action)

    eager, compiled = build(), build()
    for _ in range(2):
        want = collect(eager, policy, steps=32).clone()
        got = collect(compiled, policy, steps=32, compile=True).clone()
        torch.testing.assert_close(got["next", "observation"], want["next", "observation"], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got["next", "reward"], want["next", "reward"], rtol=1e-4, atol=1e-4)
    assert torch.equal(eager.backend.env.params["m"], compiled.backend.env.params["m"])
