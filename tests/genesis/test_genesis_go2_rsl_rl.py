"""rsl_rl-style VecEnvs inbound on a real simulator: a Go2 task in rsl_rl's style on Genesis (tests/genesis/go2_task.py).

The task resets ended rows inside its own ``step`` (legged_gym / Genesis' locomotion pattern)
and returns ``extras["time_outs"]``; with ``final_obs_hook`` it also puts the pre-reset
observations in ``extras["final_obs"]``. Checked by DESIGN.md's physics method, from outside:

* ``gpu_envs.wrap`` takes it with the rsl_rl_vec backend (its shim around the very task), and
  ``gpu_envs.check_env`` passes with and without the hook;
* every transition follows what the task's own ``step`` returned for the same actions (exactly):
  non-ended rows' next observation, every reward, and the next root (the reset observation on
  ended rows); a second task (the other fixture) stepped by hand with the same actions returns
  the same observations (Genesis on the CPU is deterministic);
* ``("next", "truncated")`` is the ended rows with ``time_outs``, ``("next", "terminated")`` the
  other ended rows; a terminated row's final observation is tilted beyond the limit (roll and
  pitch read from its projected gravity here, not from the task's quaternion), a truncated row's
  episode lasted exactly ``max_episode_length`` steps, and a row that goes on is upright and
  younger; reset observations are the standing pose at rest (the task's only reset state);
* with the hook, ended rows carry the task's pre-reset observation (and lie closer to the
  observation before the step than the reset one does); without it they carry
  ``("next", "final_obs_missing")`` and never the reset observation.

Half the rows stand still (zero actions: they time out), the others are shaken by large random
actions (they fall over within a few steps).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import gpu_envs
from gpu_envs.backends.rsl_rl_vec import RslRlVecEnvShim, looks_like_rsl_rl_vec_env
from tests.genesis.go2_task import NUM_OBS, Go2Task

pytestmark = pytest.mark.slow  # Genesis kernels (cached in ~/.cache/quadrants after the first run)

N, LIMIT, STEPS = 6, 25, 60
TILT = 10.0  # degrees
GRAVITY, DOF_POS = slice(3, 6), slice(9, 21)  # columns of the observation
CALM = torch.arange(N) < N // 2  # zero actions: these rows stand and time out; the others are shaken


class Recorded(Go2Task):
    """The task, keeping a copy of what each ``step`` took and returned (read by the tests, never by gpu_envs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[dict[str, torch.Tensor | None]] = []

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, dict[str, Any]]:
        obs, rewards, dones, extras = super().step(actions)
        final = extras.get("final_obs")
        self.calls.append(
            {
                "actions": actions.clone(),
                "obs": obs["policy"].clone(),
                "rewards": rewards.clone(),
                "dones": dones.clone(),
                "time_outs": extras["time_outs"].bool(),
                "final_obs": None if final is None else final["policy"].clone(),
            }
        )
        return obs, rewards, dones, extras


@pytest.fixture(scope="module")
def hooked() -> Recorded:
    return Recorded(N, LIMIT, final_obs_hook=True, tilt_limit=TILT)


@pytest.fixture(scope="module")
def plain() -> Recorded:
    return Recorded(N, LIMIT, final_obs_hook=False, tilt_limit=TILT)


def tilt_from_gravity(obs: torch.Tensor) -> torch.Tensor:
    """``max(|roll|, |pitch|)`` in degrees, from the projected gravity ``(sin p, -cos p sin r, -cos p cos r)``."""
    g = obs[:, GRAVITY].double()
    pitch = torch.atan2(g[:, 0], torch.hypot(g[:, 1], g[:, 2]))
    roll = torch.atan2(-g[:, 1], -g[:, 2])
    return torch.rad2deg(torch.maximum(roll.abs(), pitch.abs()))


def pose(obs: torch.Tensor) -> torch.Tensor:
    """The pose columns of observations: projected gravity and joint positions (no velocities, no last actions)."""
    return torch.cat((obs[:, GRAVITY], obs[:, DOF_POS]), 1)


def actions_for(gen: torch.Generator) -> torch.Tensor:
    return torch.where(CALM[:, None], 0.0, 4.0 * torch.randn(N, 12, generator=gen))


def rollout(task: Recorded, twin: Recorded, seed: int) -> list[dict[str, Any]]:
    """``STEPS`` steps of ``gpu_envs.wrap(task)`` and, by hand, of ``twin`` with the same actions; one dict per step."""
    env = gpu_envs.wrap(task)
    root = env.reset()  # the task's own reset(): every row standing
    assert torch.equal(twin.reset()["policy"], root["policy"])
    task.calls.clear()
    gen = torch.Generator().manual_seed(seed)
    steps = []
    for _ in range(STEPS):
        action = actions_for(gen)
        before = root["policy"].clone()
        root["action"] = action.clone()
        td, root = env.step_and_maybe_reset(root)
        twin_out = twin.step(action.clone())
        steps.append({"before": before, "td": td, "root": root.clone(), "action": action, "twin": twin.calls[-1]})
        assert twin_out[0]["policy"].shape == (N, NUM_OBS)
    assert len(task.calls) == STEPS  # one task step per env step, nothing else
    for step, call in zip(steps, task.calls, strict=True):
        step["task"] = call
    return steps


def check_transitions(steps: list[dict[str, Any]], standing: torch.Tensor) -> dict[str, int]:
    """The checks both hook settings share (module docstring); returns the count of each kind of end."""
    lengths = torch.zeros(N, dtype=torch.long)
    ends = {"terminated": 0, "truncated": 0}
    for step in steps:
        td, call, twin = step["td"], step["task"], step["twin"]
        nxt = td["next"]
        lengths += 1
        assert torch.equal(call["actions"], step["action"])  # the actions reach the task unchanged
        done, terminated, truncated = (nxt[key].view(N) for key in ("done", "terminated", "truncated"))
        assert torch.equal(done, call["dones"])
        assert torch.equal(truncated, call["dones"] & call["time_outs"])
        assert torch.equal(terminated, call["dones"] & ~call["time_outs"])
        # transitions are the task's own: rewards of every row, next observations of the rows that go on
        assert torch.equal(nxt["reward"].view(N), call["rewards"])
        assert torch.equal(nxt["policy"][~done], call["obs"][~done])
        # ... and the next root is what the task returned: the reset observation on ended rows
        assert torch.equal(step["root"]["policy"], call["obs"])
        assert torch.equal(step["root"]["policy"][done], standing[done])
        # an identical task stepped by hand with the same actions: the same observations and ends
        assert torch.equal(twin["obs"], call["obs"]) and torch.equal(twin["dones"], call["dones"])
        # time outs after exactly max_episode_length steps; rows that go on are younger
        assert (lengths[truncated] == LIMIT).all() and (lengths[~done] < LIMIT).all()
        lengths[done] = 0
        ends["terminated"] += int(terminated.sum())
        ends["truncated"] += int(truncated.sum())
    return ends


def true_final_observations(steps: list[dict[str, Any]], key: str) -> list[torch.Tensor]:
    """Per step, the final observation each row reached (its ``extras["final_obs"]`` from ``steps[i][key]``)."""
    return [step[key]["final_obs"] for step in steps]


def check_ending_conditions(steps: list[dict[str, Any]], finals: list[torch.Tensor]) -> None:
    """Terminated rows ended tilted beyond the limit; the rows that go on are upright."""
    for step, final in zip(steps, finals, strict=True):
        nxt = step["td"]["next"]
        done, terminated = nxt["done"].view(N), nxt["terminated"].view(N)
        tilt = tilt_from_gravity(final)
        assert (tilt[terminated] > TILT - 1e-3).all(), tilt[terminated]
        assert (tilt[~done] < TILT + 1e-3).all(), tilt[~done]
        assert (tilt[CALM] < TILT).all()  # the standing rows never fall


def test_the_go2_task_is_wrapped_by_the_rsl_rl_backend_and_passes_check_env(hooked, plain):
    for task in (hooked, plain):
        assert looks_like_rsl_rl_vec_env(task)
        env = gpu_envs.wrap(task)
        shim = env.backend.env
        assert isinstance(shim, RslRlVecEnvShim) and shim.venv is task and shim.unwrapped is task
        assert set(env.observation_spec.keys()) == {"policy"}
        assert tuple(env.single_observation_spec["policy"].shape) == (NUM_OBS,)
        assert tuple(env.single_action_spec.shape) == (12,)
        report = gpu_envs.check_env(env, steps=2 * LIMIT)
        assert report.ok, report.format()


def test_with_the_final_obs_hook_ended_rows_carry_the_tasks_pre_reset_observation(hooked, plain):
    steps = rollout(hooked, plain, seed=1)
    standing = hooked.reset()["policy"]
    # the reset state: upright, at rest, at the default angles, with the command and no last action
    assert torch.equal(standing[:, GRAVITY], torch.tensor([[0.0, 0.0, -1.0]]).expand(N, 3))
    assert standing[:, DOF_POS].abs().max() < 1e-6 and standing[:, 21:].abs().max() < 1e-6
    ends = check_transitions(steps, standing)
    assert ends["terminated"] >= 8 and ends["truncated"] >= N // 2, ends
    finals = true_final_observations(steps, "task")
    check_ending_conditions(steps, finals)
    for step, final in zip(steps, finals, strict=True):
        nxt = step["td"]["next"]
        done, terminated = nxt["done"].view(N), nxt["terminated"].view(N)
        assert not nxt["final_obs_missing"].any()
        assert torch.equal(nxt["policy"][done], final[done])  # the task's own pre-reset observation
        assert not (nxt["policy"][done] == standing[done]).all(1).any()  # never the reset observation
        # continuity: the final pose (gravity, joints) is one step from the one before, the reset one a new episode
        moved = (pose(final) - pose(step["before"])).abs().amax(1)
        jumped = (pose(step["root"]["policy"]) - pose(step["before"])).abs().amax(1)
        assert (moved[terminated] < jumped[terminated]).all(), (moved[terminated], jumped[terminated])


def test_without_the_hook_ended_rows_are_marked_missing_and_never_carry_the_reset_observation(hooked, plain):
    steps = rollout(plain, hooked, seed=2)
    standing = plain.reset()["policy"]
    ends = check_transitions(steps, standing)
    assert ends["terminated"] >= 8 and ends["truncated"] >= N // 2, ends
    # the twin (the hooked task, stepped by hand) kept the true final observations: the ends were real ones
    check_ending_conditions(steps, true_final_observations(steps, "twin"))
    for step in steps:
        nxt = step["td"]["next"]
        done = nxt["done"].view(N)
        assert torch.equal(nxt["final_obs_missing"].view(N), done)
        placeholder, fresh = nxt["policy"][done], step["root"]["policy"][done]
        # never the reset observation passed off as a final one
        assert not (placeholder == fresh).all(1).any()
