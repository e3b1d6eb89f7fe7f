"""gpu_envs.SimulatorEnv: a task written in five methods, against a plain sequential reference.

The task is a damped point mass pushed by the action, terminated beyond |x| > 1.5, reset to
a uniform position. The reference steps each row alone in plain Python floats, with the
same equations, resets it by hand when its episode ends (the task's condition or the time
limit) from that row's own stream (a ``CounterRNG`` of one row at its global index), and
keeps the true final observation -- what the base's batched, same-step auto-reset must give,
row by row, through ``gpu_envs.wrap``.
"""

from __future__ import annotations

import gymnasium
import pytest
import torch

import gpu_envs
from gpu_envs.builtin.counter_rng import CounterRNG
from gpu_envs.contract.errors import InvalidArgumentError, ResetNeededError
from gpu_envs.rollout import collect

N, LIMIT = 6, 9


class PointMass(gpu_envs.SimulatorEnv):
    reset_noise = 1
    default_max_episode_steps = LIMIT

    def setup(self):
        self.single_observation_space = gymnasium.spaces.Box(-10.0, 10.0, (2,))
        self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,))
        self.pos = torch.zeros(self.num_envs, device=self.device)
        self.vel = torch.zeros(self.num_envs, device=self.device)

    def physics_step(self, action):
        self.vel.add_(0.5 * action.view(-1)).mul_(0.9)
        self.pos.add_(0.5 * self.vel)

    def observe(self):
        return torch.stack((self.pos, self.vel), 1)

    def reward(self):
        return -self.pos.abs()

    def terminated(self):
        return self.pos.abs() > 1.5

    def reset_rows(self, rows, noise):
        self.pos.copy_(torch.where(rows, noise[:, 0] - 0.5, self.pos))
        self.vel.masked_fill_(rows, 0.0)

    def state(self):
        return {"pos": self.pos, "vel": self.vel}


def f32(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float32))


class RowReference:
    """One row, stepped alone in Python floats, reset by hand from its own stream."""

    def __init__(self, row: int, seed: int) -> None:
        self.rng = CounterRNG(1, 1, torch.device("cpu"), seed, index_offset=row)
        self.unit = self.rng.bounds([0.0], [1.0])
        self.reset()

    def reset(self) -> None:
        self.pos = f32(float(self.rng.uniform(self.unit)[0, 0]) - 0.5)
        self.rng.advance()
        self.vel, self.t = 0.0, 0

    def obs(self) -> list[float]:
        return [self.pos, self.vel]

    def step(self, action: float) -> tuple[list[float], float, bool, bool]:
        self.vel = f32(f32(self.vel + f32(0.5 * action)) * f32(0.9))
        self.pos = f32(self.pos + f32(0.5 * self.vel))
        self.t += 1
        final, reward = self.obs(), -abs(self.pos)
        terminated = abs(self.pos) > 1.5
        truncated = self.t >= LIMIT and not terminated
        if terminated or truncated:
            self.reset()
        return final, reward, terminated, truncated


def test_transitions_match_single_rows_stepped_and_reset_by_hand():
    env = gpu_envs.wrap(PointMass(num_envs=N), seed=3)
    refs = [RowReference(i, 3) for i in range(N)]
    root = env.reset()
    gen = torch.Generator().manual_seed(0)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(60):
        assert torch.allclose(root["observation"], torch.tensor([r.obs() for r in refs]), atol=1e-6)
        action = torch.rand(N, 1, generator=gen) * 2 - 1
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        want = [r.step(float(a)) for r, a in zip(refs, action.view(-1), strict=True)]
        torch.testing.assert_close(td["next", "observation"], torch.tensor([w[0] for w in want]), atol=1e-6, rtol=0)
        torch.testing.assert_close(td["next", "reward"].view(-1), torch.tensor([w[1] for w in want]), atol=1e-6, rtol=0)
        assert td["next", "terminated"].view(-1).tolist() == [w[2] for w in want]
        assert td["next", "truncated"].view(-1).tolist() == [w[3] for w in want]
        assert not td["next", "final_obs_missing"].any()
        ends["terminated"] += sum(w[2] for w in want)
        ends["truncated"] += sum(w[3] for w in want)
    assert ends["terminated"] > 5 and ends["truncated"] > 5, ends


def test_a_masked_reset_touches_only_its_rows_and_a_shard_draws_its_rows_draws():
    env = gpu_envs.wrap(PointMass(num_envs=4), seed=1)
    root = env.reset()
    root["action"] = torch.ones(4, 1)
    _, root = env.step_and_maybe_reset(root)
    before = root["observation"].clone()
    mask = torch.tensor([[True], [False], [True], [False]])
    after = env.reset(td=root.set("_reset", mask))["observation"]
    assert torch.equal(after[[1, 3]], before[[1, 3]]) and not torch.equal(after[[0, 2]], before[[0, 2]])
    assert (after[[0, 2], 1] == 0).all()
    # rows 2, 3 of a 4-row run are a 2-row env at offset 2
    whole = gpu_envs.wrap(PointMass(num_envs=4), seed=5).reset()["observation"]
    shard = gpu_envs.wrap(PointMass(num_envs=2, env_index_offset=2), seed=5).reset()["observation"]
    assert torch.equal(whole[2:], shard)


def test_a_snapshot_of_rows_replays_their_episodes():
    env = gpu_envs.wrap(PointMass(num_envs=N), seed=2)
    env.reset()

    def policy(td):
        return td.set("action", -td["observation"][:, :1])

    collect(env, policy, steps=5)
    saved = env.get_state()
    a = collect(env, policy, steps=20).clone()
    env.set_state(saved)
    b = collect(env, policy, steps=20).clone()
    torch.testing.assert_close(a.to_dict(), b.to_dict(), rtol=0, atol=0)
    assert gpu_envs.check_env(env, steps=50).ok


def test_what_a_task_forgot_is_named():
    class NoSpaces(PointMass):
        def setup(self):
            self.pos = torch.zeros(self.num_envs)

    with pytest.raises(InvalidArgumentError, match="single_observation_space"):
        NoSpaces(num_envs=2)

    class NoState(PointMass):
        def state(self):
            return super(PointMass, self).state()

    env = gpu_envs.wrap(NoState(num_envs=2))
    env.reset()
    with pytest.raises(Exception, match="state"):
        env.get_state()
    raw = PointMass(num_envs=2)
    with pytest.raises(ResetNeededError):
        raw.step(torch.zeros(2, 1))
    with pytest.raises(InvalidArgumentError, match="max_episode_steps"):
        PointMass(num_envs=2, max_episode_steps=0)


@pytest.mark.slow
def test_a_compiled_collection_matches_the_eager_one():
    def build():
        env = gpu_envs.wrap(PointMass(num_envs=N), seed=4)
        env.reset()
        return env

    def policy(td):
        return td.set("action", torch.linspace(-1, 1, N).unsqueeze(1))

    eager, compiled = build(), build()
    for _ in range(2):
        want = collect(eager, policy, steps=24).clone()
        got = collect(compiled, policy, steps=24, compile=True).clone()
        torch.testing.assert_close(got["next", "observation"], want["next", "observation"], rtol=1e-5, atol=1e-5)
        assert torch.equal(got["next", "done"], want["next", "done"])


def test_the_example_task_passes_check_env_and_a_controller_beats_random_actions():
    from tests.example_files import load_example

    result = load_example("simulator_env").main(num_envs=64)
    assert result["check_env"]
    assert result["controller"] > result["random"] + 0.1, result
