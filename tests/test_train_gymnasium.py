"""examples/train_gymnasium.py: a CleanRL-style PPO written for gymnasium's vector API learns on
``to_gymnasium(make("CartPole-v1", num_envs=8))``, and the same loop runs on gymnasium's own
``make_vec`` env: the env line is the only difference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.example_files import load_example


@pytest.mark.slow
def test_cleanrl_style_ppo_learns_through_to_gymnasium(one_thread):
    example = load_example("train_gymnasium")
    envs = example.make_envs("gpu_envs", num_envs=8)
    assert type(envs.unwrapped).__module__.startswith("gpu_envs.builtin.")  # .unwrapped: the built-in env itself
    returns = example.train(envs, total_steps=40_000, seed=1)
    first, last = np.mean(returns[:20]), np.mean(returns[-20:])
    assert first < 40, "starts near a random policy's return (~22)"
    assert last > 100 and last > 4 * first, (first, last)


@pytest.mark.slow
def test_the_same_loop_runs_on_gymnasiums_own_vector_env(one_thread):
    example = load_example("train_gymnasium")
    envs = example.make_envs("gymnasium", num_envs=8)
    assert type(envs.unwrapped).__module__.startswith("gymnasium.")  # gymnasium's own CartPole vector env
    returns = example.train(envs, total_steps=2 * 128 * 8, seed=1)
    assert len(returns) > 10


@pytest.mark.parametrize("bootstrap_time_outs", [True, False], ids=["exact", "cleanrl-terminate"])
def test_time_out_targets_bootstrap_from_the_true_final_observation(bootstrap_time_outs):
    """The example's GAE on NEXT_STEP data from the counting env, against the counting env's own rules.

    With lam = 0 each real step's return is its one-step target r + gamma * V(s'), where s'
    is the TRUE next observation: (index, episode, step + 1) from (index, episode, step),
    the final one where the episode ended. It is 0 after a termination, and after a
    truncation too under CleanRL's rule. The rules of tests/fakes.py give r, s' and the
    end kind from the observation alone.
    """
    import torch

    import gpu_envs
    from gpu_envs.interop import to_gymnasium
    from tests.fakes import CountingTorchVectorEnv, ends_truncated, episode_length, reward_of

    example = load_example("train_gymnasium")
    n, steps, gamma = 5, 30, 0.9
    envs = to_gymnasium(gpu_envs.wrap(CountingTorchVectorEnv(n)))
    critic = lambda obs: 0.5 * obs[..., 0] - 0.25 * obs[..., 1] + 0.125 * obs[..., 2] + 1.0  # noqa: E731
    obs_rows, dones, terms, rewards = [], [], [], []
    next_obs, _ = envs.reset(seed=0)
    next_done = next_term = np.zeros(n)
    for _ in range(steps):  # the example's bookkeeping, with action 0
        obs_rows.append(next_obs)
        dones.append(next_done)
        terms.append(next_term)
        next_obs, reward, terminated, truncated, _ = envs.step(np.zeros(n, dtype=np.int64))
        rewards.append(reward)
        next_done, next_term = (terminated | truncated).astype(float), terminated.astype(float)
    t = lambda rows: torch.as_tensor(np.stack(rows), dtype=torch.float32)  # noqa: E731
    _, returns = example.advantages_and_returns(
        t(rewards), critic(t(obs_rows)), t(dones), t(terms), critic(torch.as_tensor(next_obs, dtype=torch.float32)),
        torch.as_tensor(next_done, dtype=torch.float32), torch.as_tensor(next_term, dtype=torch.float32),
        gamma, 0.0, bootstrap_time_outs,
    )  # fmt: skip
    kinds = {"terminated": 0, "truncated": 0}
    for row in range(steps):
        for i in range(n):
            if dones[row][i]:  # a reset-only step: left out of the loss
                continue
            index, episode, step = (int(x) for x in obs_rows[row][i])
            ended = step + 1 >= episode_length(index, episode)
            truncated = ended and ends_truncated(index, episode)
            if ended:
                kinds["truncated" if truncated else "terminated"] += 1
            cut = ended and (not truncated or not bootstrap_time_outs)
            v_next = critic(torch.tensor([index, episode, step + 1.0])).item()  # the true next/final observation
            target = reward_of(index, episode, step + 1) + gamma * v_next * (not cut)
            assert returns[row, i].item() == pytest.approx(target, rel=1e-6, abs=1e-4), (row, i, index, episode, step)
    assert kinds["terminated"] >= 5 and kinds["truncated"] >= 5, kinds
