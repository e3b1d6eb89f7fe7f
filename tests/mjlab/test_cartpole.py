"""mjlab's Cartpole-Balance through gpu_envs, checked against mjlab itself and against what the task promises.

* Every transition equals mjlab's own: the roots (what the next step acts on) and the
  rewards and flags equal those of mjlab stepped as it ships (auto-reset on) on EVERY
  step -- this task draws random numbers in resets only, so the two stay in lockstep --
  and the next observations equal what mjlab's ``step`` returns with its auto-reset off:
  the true final observation, which mjlab alone throws away.
* Episodes end on the time limit only, each exactly ``max_episode_length`` steps after
  its reset; every reset observation lies in the reset events' ranges; a final
  observation lies closer to the observation before it than the reset one does.
* ``gpu_envs.check_env`` passes.

8 envs, 1 s episodes (20 steps of 0.05 s).
"""

from __future__ import annotations

import math

import pytest
import torch

import gpu_envs
from tests.mjlab.reference import first_difference, gpu_envs_steps, mjlab_auto_reset, mjlab_manual_reset
from tests.mjlab.tasks import (
    CART_RESET,
    CARTPOLE,
    POLE_RESET,
    VEL_RESET,
    quiet,
    raw_env,
    replay,
    smooth_actions,
    task_cfg,
)

NUM_ENVS = 8
EPISODE_STEPS = 20
STEPS = 50  # two and a half episodes per row


@pytest.fixture(scope="module")
def env():
    env = gpu_envs.wrap(raw_env(task_cfg(CARTPOLE, NUM_ENVS)))
    assert env.backend.base.max_episode_length == EPISODE_STEPS
    yield env
    env.close()


@pytest.fixture(scope="module")
def trajectory(env):
    with quiet():
        env.reset(seed=7)
        traj = env.rollout(STEPS, policy=replay(smooth_actions(NUM_ENVS, 1, STEPS, seed=2)), reset=False)
        last_root = env.root()
    return traj, last_root


@pytest.mark.slow
def test_transitions_equal_mjlabs_own_step_with_and_without_its_auto_reset(env):
    sequence = smooth_actions(NUM_ENVS, 1, STEPS, seed=1)
    ours = gpu_envs_steps(env, sequence, seed=3)
    shipped = mjlab_auto_reset(raw_env(task_cfg(CARTPOLE, NUM_ENVS)), sequence, seed=3)
    manual = mjlab_manual_reset(raw_env(task_cfg(CARTPOLE, NUM_ENVS)), sequence, seed=3)
    assert sum(bool((s["terminated"] | s["truncated"]).any()) for s in ours) >= 2, "episodes must end in the window"
    # the input of every next step, the rewards and the flags: mjlab's own auto-reset stepping
    assert first_difference(ours, shipped, STEPS, ("root", "reward", "terminated", "truncated")) is None
    # the transition's next observation: what mjlab's step returns before any reset (true final obs)
    assert first_difference(ours, manual, STEPS, ("obs", "root", "reward", "terminated", "truncated")) is None
    # and it is NOT what mjlab hands on with its auto-reset (the post-reset observation) where rows ended
    for step, theirs in zip(ours, shipped, strict=True):
        done = step["terminated"] | step["truncated"]
        assert not (step["obs"]["actor"][done] == theirs["obs"]["actor"][done]).all(-1).any()
        assert torch.equal(step["obs"]["actor"][~done], theirs["obs"]["actor"][~done])


def test_episodes_end_on_the_time_limit_only(trajectory):
    traj, _ = trajectory
    nxt = traj["next"]
    done = nxt["done"].squeeze(-1)
    assert not nxt["terminated"].any() and torch.equal(nxt["truncated"].squeeze(-1), done)
    # steps since each row's reset (the rollout starts right after a full reset)
    count = torch.zeros(NUM_ENVS, dtype=torch.long)
    for t in range(STEPS):
        count += 1
        assert torch.equal(done[:, t], count == EPISODE_STEPS), f"step {t}: {count.tolist()}"
        count[done[:, t]] = 0
    assert int(done.sum()) == NUM_ENVS * (STEPS // EPISODE_STEPS)


def _in_reset_range(obs: torch.Tensor) -> torch.Tensor:
    """Rows of [cart_pos, cos, sin, cart_vel, pole_vel] that the reset events can produce."""
    eps = 1e-6
    return (
        (obs[:, 0].abs() <= CART_RESET + eps)
        & (obs[:, 1] >= math.cos(POLE_RESET) - eps)
        & (obs[:, 2].abs() <= math.sin(POLE_RESET) + eps)
        & (obs[:, 3].abs() <= VEL_RESET + eps)
        & (obs[:, 4].abs() <= VEL_RESET + eps)
    )


def test_reset_observations_lie_in_the_reset_distribution(env, trajectory):
    traj, last_root = trajectory
    done = traj["next", "done"].squeeze(-1)
    roots = torch.cat([traj["actor"][:, 1:], last_root["actor"].unsqueeze(1)], dim=1)  # root after each step
    reset_roots = roots[done]
    assert reset_roots.shape[0] >= NUM_ENVS and _in_reset_range(reset_roots).all()
    assert _in_reset_range(traj["actor"][:, 0]).all()  # the full reset before the rollout
    # the final observations of those episodes are elsewhere (the pole swung under the smooth pushes)
    assert not _in_reset_range(traj["next", "actor"][done]).any()
    # the critic group (the same terms, no noise either) agrees
    assert torch.equal(traj["next", "critic"], traj["next", "actor"])


def test_final_observation_is_one_step_from_the_previous_one(trajectory):
    traj, last_root = trajectory
    done = traj["next", "done"].squeeze(-1)
    roots = torch.cat([traj["actor"][:, 1:], last_root["actor"].unsqueeze(1)], dim=1)
    before, final, fresh = traj["actor"][done], traj["next", "actor"][done], roots[done]
    to_final = (final - before).norm(dim=-1)
    to_reset = (fresh - before).norm(dim=-1)
    assert (to_final < to_reset).all(), (to_final, to_reset)
    # elsewhere the next observation IS the next root (nothing swapped, nothing stale)
    assert torch.equal(traj["next", "actor"][~done], roots[~done])


@pytest.mark.slow
def test_check_env_passes(env):
    with quiet():
        report = gpu_envs.check_env(env, steps=3 * EPISODE_STEPS, name=CARTPOLE)
    assert report.ok and all(r.status == "pass" for r in report.results), report.format()
