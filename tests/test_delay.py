"""Delay against sequential references with known delays.

The env is tests/fakes.py's counting env: its observation is ``(row, episode, t)`` and its
reward ``100 * row + 10 * episode + t + action``, so every transition tells exactly which
action the simulator applied (the reward minus the rest, read off the true next
observation) and which step an observation comes from. The reference keeps, per row, the
policy's actions of the current episode in a list and applies the one ``d`` steps back (the
default during the first ``d`` steps); a delayed observation must be the same episode's,
``d`` steps back, clipped at its reset observation.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.rollout import collect
from gpu_envs.transforms import Delay, EpisodeStats, History, TransformedEnv
from tests.fakes import CountingTorchVectorEnv

pytestmark = pytest.mark.usefixtures("row_kernel_paths")  # each test on the C kernel and the torch ops

N = 5


def build(delay: Delay, seed: int = 0):
    env = TransformedEnv(gpu_envs.wrap(CountingTorchVectorEnv(N)), delay)
    return env, env.reset(seed=seed)


def applied_actions(td) -> torch.Tensor:
    """The action the simulator applied in each row of a transition (the counting env's reward minus the rest).

    Read off the true next observation ``(row, episode, t)``: only without an observation delay.
    """
    row, episode, t = td["next", "observation"].unbind(-1)
    return (td["next", "reward"].view(-1) - (100 * row + 10 * episode + t)).round().long()


def test_fixed_action_delay_applies_the_action_d_steps_back_and_zeros_before():
    d = 2
    delay = Delay(action_steps=d)
    env, root = build(delay)
    gen = torch.Generator().manual_seed(1)
    episode_actions: list[list[int]] = [[] for _ in range(N)]
    ended = 0
    for _ in range(40):
        action = torch.randint(0, 2, (N,), generator=gen)
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        got = applied_actions(td)
        for i in range(N):
            episode_actions[i].append(int(action[i]))
            k = len(episode_actions[i]) - 1  # this step's index in the episode
            want = episode_actions[i][k - d] if k >= d else 0
            assert int(got[i]) == want, (i, k)
            if bool(td["next", "done"][i]):
                episode_actions[i] = []
                ended += 1
        assert torch.equal(td["action"], action)  # the policy's own action is what the TensorDict keeps
    assert ended >= N
    assert delay.action_delay.tolist() == [d] * N


@pytest.mark.parametrize("initial", ["zeros", "first"])
def test_per_episode_delays_are_drawn_in_range_and_followed(initial):
    delay = Delay(action_steps=(0, 3), initial_action=initial)
    env, root = build(delay, seed=7)
    gen = torch.Generator().manual_seed(2)
    episode_actions: list[list[int]] = [[] for _ in range(N)]
    current = delay.action_delay.clone()
    seen = set(current.tolist())
    for _ in range(80):
        action = torch.randint(0, 2, (N,), generator=gen)
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        got = applied_actions(td)
        for i in range(N):
            episode_actions[i].append(int(action[i]))
            k, d = len(episode_actions[i]) - 1, int(current[i])
            default = 0 if initial == "zeros" else episode_actions[i][0]
            assert int(got[i]) == (episode_actions[i][k - d] if k >= d else default), (i, k, d)
            if bool(td["next", "done"][i]):
                episode_actions[i] = []
        done = td["next", "done"].view(-1)
        # rows that ended drew new delays for their next episode; the others kept theirs
        assert torch.equal(delay.action_delay[~done], current[~done])
        current = delay.action_delay.clone()
        seen |= set(current.tolist())
    assert seen == {0, 1, 2, 3}
    assert ((current >= 0) & (current <= 3)).all()


def test_the_draws_follow_the_seed_and_leave_the_env_generator_alone():
    def run(seed):
        delay = Delay(action_steps=(0, 5), observation_steps=(1, 4))
        env, root = build(delay, seed=seed)
        before = env.generator.get_state()
        draws = []
        for _ in range(30):
            root["action"] = torch.zeros(N, dtype=torch.long)
            _, root = env.step_and_maybe_reset(root)
            draws.append(torch.stack([delay.action_delay, delay.observation_delay]).clone())
        assert torch.equal(env.generator.get_state(), before)
        return torch.stack(draws)

    assert torch.equal(run(3), run(3))
    assert not torch.equal(run(3), run(4))


def test_observation_delay_shows_the_same_episode_d_steps_back():
    delay = Delay(observation_steps=(0, 2))
    env, root = build(delay, seed=0)
    rows = torch.arange(N, dtype=torch.float32)
    episode = torch.zeros(N)  # kept by hand: the counting env's episode and step count per row
    steps = torch.zeros(N)
    # a fresh episode shows its reset observation
    assert torch.equal(root["observation"], torch.stack([rows, episode, steps], -1))
    seen_delays = set()
    for _ in range(60):
        root["action"] = torch.zeros(N, dtype=torch.long)
        d = delay.observation_delay.clone().float()
        seen_delays |= set(d.tolist())
        td, root = env.step_and_maybe_reset(root)
        steps += 1
        # the ended episode's own observation d steps back (clipped at its reset observation)
        want = torch.stack([rows, episode, torch.clamp(steps - d, min=0)], -1)
        assert torch.equal(td["next", "observation"], want)
        done = td["next", "done"].view(-1)
        episode = torch.where(done, episode + 1, episode)
        steps = torch.where(done, 0, steps)
        # the next root: the same view where the episode goes on, the new episode's reset observation where it ended
        assert torch.equal(root["observation"][~done], want[~done])
        assert torch.equal(root["observation"][done], torch.stack([rows, episode, steps], -1)[done])
        new = delay.observation_delay
        assert ((new >= 0) & (new <= 2)).all()
    assert seen_delays == {0.0, 1.0, 2.0}
    assert episode.min() >= 3  # many auto-resets went by


def test_hold_probability_repeats_the_last_applied_action_never_at_an_episode_start():
    delay = Delay(hold_probability=0.5)
    env, root = build(delay, seed=0)
    gen = torch.Generator().manual_seed(3)
    previous = torch.zeros(N, dtype=torch.long)
    first = torch.ones(N, dtype=torch.bool)
    holds = changes = 0
    for _ in range(200):
        action = torch.randint(0, 2, (N,), generator=gen)
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        got = applied_actions(td)
        # each applied action is the policy's, or (held) the row's previous applied one
        assert bool(((got == action) | ((got == previous) & ~first)).all())
        assert torch.equal(got[first], action[first])
        held = (got == previous) & (got != action) & ~first
        holds += int(held.sum())
        changes += int(((previous != action) & ~first).sum())
        previous = got
        first = td["next", "done"].view(-1).clone()
    assert 0.35 < holds / changes < 0.65  # ~p of the steps where holding shows


def test_collect_and_a_snapshot_replay_the_same_delays_and_queues():
    def policy(td):
        td["action"] = (td["observation"][:, -1, 2] > 0).long()
        return td

    delay = Delay(action_steps=(0, 3), observation_steps=(0, 2), hold_probability=0.3)
    cartpole = gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", max_episode_steps=12)
    env = TransformedEnv(cartpole, delay, EpisodeStats(), History(length=2))
    env.reset(seed=1)
    collect(env, policy, steps=7)
    saved = env.get_state()
    a = collect(env, policy, steps=15).clone()
    env.set_state(saved)
    b = collect(env, policy, steps=15).clone()
    torch.testing.assert_close(a.to_dict(), b.to_dict(), rtol=0, atol=0)


def test_bad_arguments_are_named():
    with pytest.raises(InvalidArgumentError, match="does nothing"):
        Delay()
    with pytest.raises(InvalidArgumentError, match="lo > hi"):
        Delay(action_steps=(3, 1))
    with pytest.raises(InvalidArgumentError, match="hold_probability"):
        Delay(hold_probability=1.0)
    with pytest.raises(InvalidArgumentError, match="initial_action"):
        Delay(action_steps=1, initial_action="last")
    with pytest.raises(InvalidArgumentError, match="action_steps"):
        Delay(action_steps=-1)


@pytest.mark.slow
def test_a_compiled_collection_matches_the_eager_one():
    def build_env():
        delay = Delay(action_steps=(0, 3), observation_steps=(0, 2), hold_probability=0.2)
        env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=N, device="cpu", seed=4), delay)
        env.reset(seed=4)
        return env

    def policy(td):
        td["action"] = -td["observation"][:, 2:3].clamp(-2, 2)
        return td

    eager, compiled = build_env(), build_env()
    for _ in range(2):
        want = collect(eager, policy, steps=32).clone()
        got = collect(compiled, policy, steps=32, compile=True).clone()
        for key in ("observation", ("next", "observation"), ("next", "reward")):
            torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-4)
