"""``EvalRows``: K rows of the training batch act deterministically, with their own statistics.

The oracle: the built-in envs give row i a random stream that depends only on the seed
and its global index, so a separate K-row env with ``env_index_offset`` equal to the
first evaluation row, run with the deterministic policy alone, must produce exactly the
evaluation rows' trajectories (and the same episode statistics); the training rows keep
the sampled actions and their own statistics.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.rollout import collect
from gpu_envs.transforms import EpisodeStats, EvalRows, TransformedEnv, completed_episodes
from tests.sync_guard import no_sync

N, K, T, SEED = 10, 3, 150, 7
EVAL = list(range(N - K, N))
WEIGHTS = torch.tensor([[0.0, 0.0], [0.0, 0.0], [-1.0, 1.0], [0.0, 0.0]])  # push where the pole leans: falls in time


def policy_with_generator(seed: int):
    g = torch.Generator().manual_seed(seed)

    def policy(td):
        logits = td["observation"] @ WEIGHTS
        td["action"] = torch.multinomial(logits.softmax(-1), 1, generator=g).squeeze(-1)
        td["action_mode"] = logits.argmax(-1)
        return td

    return policy


def greedy(td):
    td["action"] = (td["observation"] @ WEIGHTS).argmax(-1)
    return td


@pytest.mark.slow
def test_eval_rows_are_exactly_a_separate_env_run_with_the_deterministic_policy():
    eval_rows = EvalRows(EVAL)
    train_stats = EpisodeStats(rows=eval_rows.train_rows(N))
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", seed=SEED), train_stats, eval_rows)
    env.reset()
    traj = collect(env, policy_with_generator(0), steps=T)

    alone_stats = EpisodeStats()
    alone = TransformedEnv(
        gpu_envs.make("CartPole-v1", num_envs=K, device="cpu", seed=SEED, env_index_offset=N - K), alone_stats
    )
    alone.reset()
    ref = collect(alone, greedy, steps=T)

    ours = traj[eval_rows.eval_index]
    for key in ("observation", ("next", "observation"), ("next", "reward"), ("next", "done"), ("next", "terminated")):
        torch.testing.assert_close(ours[key], ref[key], rtol=0, atol=0, msg=str(key))
    torch.testing.assert_close(ours["action_mode"], ref["action"])  # the env took the deterministic action
    assert (ours["action"] != ours["action_mode"]).any()  # while the TensorDict keeps the sampled one
    assert eval_rows.summary() == alone_stats.summary() and eval_rows.summary().episodes > 5
    # the training rows' statistics are theirs alone
    count, mean_ret, mean_len = completed_episodes(traj[eval_rows.train_index])
    summary = train_stats.summary()
    assert summary.episodes == int(count) and summary.mean_return == pytest.approx(float(mean_ret))
    assert summary.mean_length == pytest.approx(float(mean_len))
    expected = torch.zeros(N, T, 1, dtype=torch.bool)
    expected[EVAL] = True
    torch.testing.assert_close(traj["next", "eval_row"], expected)


def test_a_policy_without_the_deterministic_action_is_told_what_to_write():
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu"), EvalRows([0]))
    td = env.reset()
    td["action"] = torch.zeros(4, dtype=torch.long)
    with pytest.raises(gpu_envs.ActionError, match=r"td\['action_mode'\].*deterministic action"):
        env.step(td)
    td["action_mode"] = torch.zeros(4, 1, dtype=torch.long)
    with pytest.raises(gpu_envs.ActionError, match="shape and dtype"):
        env.step(td)
    td["action_mode"] = torch.ones(4, dtype=torch.long)
    env.step(td)  # nothing was touched by the refused calls


def test_continuous_actions_and_a_custom_key():
    env = TransformedEnv(
        gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0), EvalRows([1, 2], deterministic_key="mean")
    )
    twin = gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0)
    td, ref = env.reset(), twin.reset()
    for _ in range(5):
        td["action"], td["mean"] = torch.full((4, 1), 2.0), torch.full((4, 1), -2.0)
        ref["action"] = torch.tensor([[2.0], [-2.0], [-2.0], [2.0]])
        td, td = env.step_and_maybe_reset(td)
        ref, ref = twin.step_and_maybe_reset(ref)
    torch.testing.assert_close(td["observation"], ref["observation"], rtol=0, atol=0)


@pytest.mark.parametrize("rows", [[0, 0], [12], "x", list(range(4))])
def test_bad_rows_are_refused(rows):
    with pytest.raises(gpu_envs.InvalidArgumentError, match="rows"):
        TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu"), EvalRows(rows))


@pytest.mark.slow
def test_eval_rows_never_sync():
    eval_rows = EvalRows([1, 3])
    env = TransformedEnv(
        gpu_envs.make("CartPole-v1", num_envs=6, device="cpu", seed=0),
        EpisodeStats(rows=eval_rows.train_rows(6)),
        eval_rows,
    )
    policy = policy_with_generator(1)
    td = env.reset()
    td, td = env.step_and_maybe_reset(policy(td))  # the first step validates (allowed to sync)
    with no_sync():
        for _ in range(30):
            td, td = env.step_and_maybe_reset(policy(td))
        batch = collect(env, policy, steps=8)[eval_rows.train_index]
    assert batch.batch_size == (4, 8)


@pytest.mark.slow
def test_the_example_trains_on_the_other_rows_and_reports_the_greedy_ones(one_thread):
    from tests.example_files import load_example

    result = load_example("eval_rows").main(["--total-steps", "49152", "--report-every", "2", "--quiet"])
    history = result["history"]
    assert len(history) == 3 and all(episodes > 0 for *_, episodes in history)
    (_, first_train, first_eval, _), (_, last_train, last_eval, _) = history[0], history[-1]
    assert last_train > first_train and last_eval > first_eval  # learning, seen by both kinds of rows
