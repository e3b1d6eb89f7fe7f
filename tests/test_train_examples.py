"""The training examples of torchrl, rsl_rl, skrl and rl_games learn through their gpu_envs adapter (MAPPO too).

Each example is that library's own training loop (torchrl's Collector + GAE +
ClipPPOLoss, rsl_rl's OnPolicyRunner, skrl's PPO + SequentialTrainer, rl_games' Runner)
on a built-in env, with ``to_<library>(env)`` (and, for rsl_rl, skrl and rl_games,
``bootstrap_from``: exact time-out targets) as the only gpu_envs lines; a short run must
end clearly above a random policy.
"""

from __future__ import annotations

import statistics

import pytest

from tests.example_files import load_example


@pytest.mark.slow
def test_torchrl_ppo_learns_cartpole(one_thread):
    pytest.importorskip("torchrl")
    lengths = load_example("train_torchrl").main(["--batches", "15"])["lengths"]
    # a random policy keeps the pole up ~22 steps
    assert lengths[0] < 40
    assert statistics.mean(lengths[-5:]) > 3 * lengths[0], lengths


@pytest.mark.slow
def test_mappo_learns_vmas_navigation_through_agent_groups(one_thread):
    pytest.importorskip("torchrl")
    pytest.importorskip("vmas")
    returns = load_example("mappo_vmas").main(["--num-envs", "30", "--iterations", "6"])["returns"]
    # random agents wander and collide (about -1.4 per agent and episode); trained ones close in on their goals
    assert returns[0] < -0.5, returns
    assert statistics.mean(returns[-2:]) > returns[0] + 1.0, returns


@pytest.mark.slow
def test_skrl_mappo_learns_vmas_navigation_through_to_skrl(one_thread):
    pytest.importorskip("skrl")
    pytest.importorskip("vmas")
    result = load_example("mappo_skrl").main(["--timesteps", "800"])
    # random agents: about -0.7 per agent and episode; trained ones close in on their goals
    assert result["before"] < 0.0, result
    assert result["after"] > result["before"] + 1.0, result


@pytest.mark.slow
def test_rsl_rl_on_policy_runner_learns_pendulum(one_thread):
    pytest.importorskip("rsl_rl")
    result = load_example("train_rsl_rl").main(["--quiet"])
    # about -6 per step at random; a swung-up pendulum is near 0
    assert result["before"] < -4.0
    assert result["after"] > result["before"] + 2.5, result


@pytest.mark.slow
def test_skrl_ppo_learns_cartpole(one_thread):
    pytest.importorskip("skrl")
    result = load_example("train_skrl").main([])
    assert result["before"] < 35
    assert result["after"] > 2.5 * result["before"], result


@pytest.mark.slow
def test_rl_games_ppo_learns_pendulum(one_thread):
    pytest.importorskip("rl_games")
    result = load_example("train_rl_games").train(num_envs=128, epochs=40)
    # a random policy's 200-step return is about -1200; a swung-up pendulum's about -150
    assert result["returns"][0] < -900, result["returns"]
    assert result["final"] > -400 and result["final"] > result["returns"][0] + 600, result


@pytest.mark.slow
def test_td3_with_the_replay_buffer_solves_pendulum(one_thread):
    """64 envs, 3-step targets from gpu_envs.replay.ReplayBuffer; ~100k env steps (about 45 s of one CPU thread)."""
    result = load_example("td3_pendulum").train(iterations=1600, log_every=0)
    # a random policy's 200-step return is about -1200; a swung-up, balanced pendulum's about -150
    assert result["final"] > -300, result


@pytest.mark.slow
def test_td3_solves_pendulum_through_history_a_random_action_delay_and_randomized_physics(one_thread):
    """The sim-to-real transforms in training: each env applies actions 0..2 steps late (drawn per episode, Delay),
    has its own mass and length (+-20%, drawn per episode, Randomize) and the policy sees its last 3 observations
    (History); evaluation runs through the same transforms."""
    td3 = load_example("td3_pendulum")
    result = td3.train(iterations=1600, log_every=400, history=3, action_delay=(0, 2), randomize=True)
    first = result["curve"][0][1]  # after 25.6k env steps, mostly of the random warm-up and early learning
    assert first < -700, result
    assert result["final"] > -400 and result["final"] > first + 500, result


@pytest.mark.parametrize("n_step", [1, 3])
def test_td3_target_is_one_column_per_sample_for_every_n_step(n_step):
    """``--n-step 1`` once trained on a ``[B, B]`` target (a ``[B]`` reward broadcast against ``[B, 1]``)."""
    import torch

    import gpu_envs
    from gpu_envs.replay import ReplayBuffer
    from gpu_envs.rollout import collect

    td3 = load_example("td3_pendulum")
    rb = ReplayBuffer(1000)
    rb.extend(collect(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0), None, steps=8))
    batch = rb.sample(16, n_step=n_step, gamma=0.99, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        target = td3.critic_target(batch["next"], td3.Actor(), td3.Critics())
    assert target.shape == (16, 1)


def test_torchrl_example_reports_real_episode_lengths():
    """``frames / episodes`` once printed "mean episode length 2048.0" for CartPole (capped at 500) when no episode
    ended in a batch; lengths are now counted per env across batches."""
    import torch

    mean_episode_length = load_example("train_torchrl").mean_episode_length
    running = torch.zeros(2, dtype=torch.long)
    done = torch.zeros(2, 64, dtype=torch.bool)
    done[0, 9], done[0, 29] = True, True  # env 0: episodes of 10 and 20 steps; env 1 runs on
    assert mean_episode_length(done, running) == 15.0 and running.tolist() == [34, 64]
    assert mean_episode_length(torch.zeros(2, 64, dtype=torch.bool), running) == (98 + 128) / 2  # none ended
    done = torch.zeros(2, 64, dtype=torch.bool)
    done[1, 0] = True
    assert mean_episode_length(done, running) == 129.0


@pytest.mark.slow
def test_rl_games_example_says_when_no_episode_finished(one_thread, capsys):
    """``--epochs 2`` once ended in an IndexError: rl_games keeps finished episodes only, Pendulum's last 200 steps."""
    pytest.importorskip("rl_games")
    result = load_example("train_rl_games").main(["--epochs", "2"])
    assert result["returns"] == [] and "no episode finished within 2 epochs" in capsys.readouterr().out
