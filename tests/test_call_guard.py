"""``CallGuard``: "a call did not finish: refuse until reset", one rule for every object that keeps state.

The guard itself, then the objects that use it: ``BatchedEnv`` (through its step path),
``TransformedEnv``, the gymnasium backend (and its async workers' calls) and the Ray
backend all refuse with the same ``InterruptedStepError`` after an interrupted call,
and a full reset clears it.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import gpu_envs
from gpu_envs.transforms import RewardScale, TransformedEnv
from gpu_envs.utils.call_guard import CallGuard
from tests.fakes import CountingEnv


def test_a_call_left_marked_is_refused_until_finished():
    guard = CallGuard("this thing")
    guard.check("step")  # nothing pending: a no-op
    guard.start("step")
    assert guard.interrupted and guard.pending == "step"
    with pytest.raises(
        gpu_envs.InterruptedStepError, match=r"previous step\(\) of this thing did not finish.*reset\(\) is refused"
    ):
        guard.check("reset")
    guard.finish()
    assert not guard.interrupted and guard.pending is None
    guard.check("step")


def test_a_held_guard_blocks_the_hot_path_test_without_counting_as_an_interruption():
    guard = CallGuard("this env")
    guard.hold("closed")
    assert guard.pending == "closed" and not guard.interrupted
    guard.check("step")  # a hold is the owner's reason to refuse, not an interruption
    guard.start("reset")
    assert guard.interrupted
    assert "interrupted in reset" in repr(guard)


def test_the_refusal_names_what_the_owner_says_may_be_inconsistent():
    guard = CallGuard("this pool")
    guard.start("step")
    with pytest.raises(gpu_envs.InterruptedStepError, match="its workers may be half-stepped; step"):
        guard.refuse("step", "its workers may be half-stepped")


class _Raising(gym.Wrapper):
    """Raises KeyboardInterrupt from the sub-env's step once armed."""

    armed = False

    def step(self, action):
        if _Raising.armed:
            _Raising.armed = False
            raise KeyboardInterrupt
        return super().step(action)


@pytest.mark.parametrize("owner", ["batched_env", "transformed_env", "gymnasium_backend"])
def test_every_owner_refuses_after_an_interrupted_step_and_a_reset_clears_it(owner):
    venv = gym.vector.SyncVectorEnv(
        [lambda i=i: _Raising(CountingEnv(i)) for i in range(3)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    env = gpu_envs.wrap(venv)
    if owner == "transformed_env":
        env = TransformedEnv(env, RewardScale(2.0))
    td = env.reset()
    td["action"] = torch.zeros(3, dtype=torch.int64)
    _Raising.armed = True
    if owner == "gymnasium_backend":  # the backend alone (what a Ray worker runs)
        backend = env.backend
        with pytest.raises(KeyboardInterrupt):
            backend.step(td["action"])
        assert backend._guard.interrupted
        with pytest.raises(gpu_envs.InterruptedStepError, match="half-stepped"):
            backend.step(td["action"])
        with pytest.raises(gpu_envs.InterruptedStepError, match="a partial reset"):
            backend.reset(mask=torch.tensor([True, False, False]))
        backend.reset()
        assert not backend._guard.interrupted
        backend.step(td["action"])
        return
    with pytest.raises(KeyboardInterrupt):
        env.step_and_maybe_reset(td)
    assert env.interrupted
    for call in (env.root, lambda: env.step(td)):
        with pytest.raises(gpu_envs.InterruptedStepError, match="interrupted mid-step"):
            call()
    td = env.reset()
    assert not env.interrupted
    td["action"] = torch.zeros(3, dtype=torch.int64)
    env.step_and_maybe_reset(td)
