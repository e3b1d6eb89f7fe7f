"""The PPO example learns: a short run ends far above a random policy (~22 on CartPole)."""

from __future__ import annotations

import pytest

from tests.example_files import load_example


@pytest.mark.slow
def test_short_ppo_run_learns_cartpole():
    ppo = load_example("ppo_cartpole")
    result = ppo.main(["--quick", "--quiet", "--seed", "1", "--eval-episodes", "32"])
    history = [ret for _, ret in result["history"]]
    assert result["env_steps"] >= 90_000
    assert history[0] < 40, "starts near a random policy's return"
    assert result["final_train_return"] > 150, history
    assert result["eval_return_greedy"] > 150
    assert max(history[-5:]) > 5 * history[0]
