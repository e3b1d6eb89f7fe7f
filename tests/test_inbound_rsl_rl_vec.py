"""rsl_rl-style VecEnvs (legged_gym / Genesis task pattern) through gpu_envs.wrap, against their known dynamics.

The fake follows rsl_rl's ``VecEnv`` interface exactly (it subclasses ``rsl_rl.env.VecEnv``
where rsl_rl is installed, and has the same members where it is not): ``step`` advances
every row, computes rewards and dones, and calls ``reset_idx`` on the ended rows before it
returns -- so its returned observation is the next episode's there -- with
``extras["time_outs"]`` for the time-limit ends. Its observation is ``(row, episode, t)`` in
groups ``policy`` and ``critic``; rows terminate when ``t`` reaches their own episode length
(below the time limit) or time out at ``max_episode_length``. With ``final_obs=True`` the task
puts the pre-reset observations in ``extras["final_obs"]`` (the documented hook).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError, ResetMaskError

N, LIMIT = 5, 7

if importlib.util.find_spec("rsl_rl") is not None:
    from rsl_rl.env import VecEnv as _Base
else:  # the same members, without rsl_rl
    _Base = object


class LeggedStyleTask(_Base):  # type: ignore[misc, valid-type]
    def __init__(self, num_envs: int = N, final_obs: bool = False) -> None:
        self.num_envs = num_envs
        self.num_actions = 2
        self.max_episode_length = LIMIT
        self.device = torch.device("cpu")
        self.cfg = {}
        self.final_obs = final_obs
        self.rows = torch.arange(num_envs)
        self.episode = torch.zeros(num_envs, dtype=torch.long)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.extras: dict = {}

    def own_length(self) -> torch.Tensor:  # some rows fall before the time limit, some never do
        return torch.where(self.rows % 2 == 0, 3 + (self.rows + self.episode) % 3, 100)

    def compute_observations(self) -> TensorDict:
        obs = torch.stack([self.rows, self.episode, self.episode_length_buf], 1).float()
        return TensorDict({"policy": obs, "critic": obs * 2}, batch_size=[self.num_envs])

    def get_observations(self) -> TensorDict:
        return self.compute_observations()

    def reset_idx(self, env_ids: torch.Tensor) -> None:
        self.episode[env_ids] += 1
        self.episode_length_buf[env_ids] = 0

    def step(self, actions: torch.Tensor):
        self.episode_length_buf += 1
        rewards = actions.sum(1) + self.episode_length_buf.float()
        fell = self.episode_length_buf >= self.own_length()
        time_outs = (self.episode_length_buf >= self.max_episode_length) & ~fell
        dones = fell | time_outs
        extras = {"time_outs": time_outs, "log": {"/reward": rewards.mean()}}
        if self.final_obs:
            extras["final_obs"] = self.compute_observations()
        self.reset_idx(dones.nonzero(as_tuple=False).flatten())  # legged_gym: reset inside step
        return self.compute_observations(), rewards, dones, extras


def run(env, steps: int = 20):
    root = env.reset()
    out = []
    for _ in range(steps):
        root["action"] = torch.ones(N, 2)
        td, root = env.step_and_maybe_reset(root)
        out.append(td)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("final_obs", [True, False])
def test_dones_split_by_time_outs_and_final_observations_true_or_marked_missing(final_obs):
    env = gpu_envs.wrap(LeggedStyleTask(final_obs=final_obs))
    assert env.backend.name == "torch" and set(env.observation_spec.keys()) == {"policy", "critic"}
    traj = run(env)
    nxt = traj["next"]
    done, terminated, truncated = (nxt[k].view(N, -1) for k in ("done", "terminated", "truncated"))
    t = nxt["policy"][..., 2]
    root_t = traj["policy"][..., 2]
    # every step counts one: the next observation's t is the root's + 1 (its own episode), wherever it is real
    real = ~nxt["final_obs_missing"].view(N, -1)
    assert torch.equal(t[real], root_t[real] + 1)
    assert truncated.any() and terminated.any()
    assert (truncated == done & (t == LIMIT) if final_obs else truncated <= done).all()
    rows = torch.arange(N).view(N, 1).expand_as(done)
    assert not truncated[rows % 2 == 0].any() and not terminated[rows % 2 == 1].any()
    if final_obs:
        assert not nxt["final_obs_missing"].any()
        # the ended episode's own last observation (its episode index, its full length), never the reset one
        assert (t[done] > 0).all() and torch.equal(nxt["policy"][..., 1][done], traj["policy"][..., 1][done])
        torch.testing.assert_close(nxt["critic"], 2 * nxt["policy"])
    else:
        assert torch.equal(nxt["final_obs_missing"].view(N, -1), done)  # placeholders, marked
    assert torch.equal(nxt["reward"].view(N, -1), 2.0 + (root_t + 1))  # actions 1 + 1, plus the step count


def test_reset_masks_and_a_second_reset_without_reset_are_refused_with_the_fix():
    env = gpu_envs.wrap(LeggedStyleTask())
    root = env.reset()
    root["action"] = torch.zeros(N, 2)
    _, root = env.step_and_maybe_reset(root)
    with pytest.raises((ResetMaskError, InvalidArgumentError), match="reset"):
        env.reset(td=root.set("_reset", torch.tensor([[True], [False], [False], [False], [False]])))
    with pytest.raises(InvalidArgumentError, match="has no reset"):
        env.reset()


def test_an_env_with_its_own_reset_is_reset_by_it_and_rl_libraries_see_the_simulator():
    class WithReset(LeggedStyleTask):
        def reset(self):
            self.episode.zero_()
            self.episode_length_buf.zero_()
            return self.get_observations(), {}

    task = WithReset(final_obs=True)
    env = gpu_envs.wrap(task)
    run(env, 5)
    root = env.reset()
    assert (root["policy"][:, 1:] == 0).all()
    from gpu_envs.interop import to_rsl_rl

    assert to_rsl_rl(env).unwrapped is task
    assert gpu_envs.check_env(env, steps=30).ok
