"""A DirectMARLEnv whose agents end apart, with a centralised state of its own, through gpu_envs.

The real pendulum task's agents share their flags, so the env-level rule (Isaac Lab
resets an env when EVERY agent terminated or EVERY agent timed out) is checked here on a
subclass of the real task whose pendulum agent also ends when the upper link leans
(:func:`~tests.isaaclab.marl_tasks.split_dones_env`), against Isaac Lab's own reset
decision (``episode_length_buf`` back at 0) and its own outputs, kept by a gymnasium
wrapper before gpu_envs reads them. Its state comes from the task's ``_get_states()``,
which Isaac Lab does not keep before a reset: placeholders, even with
``compute_final_obs``.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.contract.final_obs import FinalObsKind
from tests.isaaclab.cartpoles import adopt, close_live, pendulum_marl_cfg
from tests.isaaclab.marl_tasks import AGENTS, SEED, STEPS, Recorder, group_actions, split_dones_env

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")  # Isaac Lab's own


def test_agents_that_end_apart_and_a_state_without_final_value():
    recorder = Recorder(split_dones_env(pendulum_marl_cfg(compute_final_obs=True)))
    env = adopt(lambda: gpu_envs.wrap(recorder))
    try:
        # Isaac Lab keeps no final value of a task's own state: placeholders, even with compute_final_obs
        assert env.backend.capabilities.final_obs is FinalObsKind.PLACEHOLDER
        assert env.single_observation_spec["state"].shape == (3,)
        root = env.reset(seed=SEED)
        apart = ended = 0
        held = None
        for t in range(STEPS):
            root.update(group_actions(t))
            td, root = env.step_and_maybe_reset(root)
            own, nxt = recorder.steps[-1], td["next"]
            done = nxt["done"].view(-1)
            assert torch.equal(done, own["reset"]), t  # Isaac Lab's own reset decision
            all_terminated = own["terminated"]["cart"] & own["terminated"]["pendulum"]
            all_truncated = own["truncated"]["cart"] & own["truncated"]["pendulum"]
            assert torch.equal(nxt["terminated"].view(-1), all_terminated)
            assert torch.equal(nxt["truncated"].view(-1), all_truncated)
            for agent in AGENTS:
                assert torch.equal(nxt[agent, "terminated"].view(-1), own["terminated"][agent])
                assert torch.equal(nxt[agent, "truncated"].view(-1), own["truncated"][agent])
                assert torch.equal(nxt[agent, "reward"].view(-1), own["reward"][agent])
                assert torch.equal(root[agent, "observation"][:, 0], own["obs"][agent])
                assert torch.equal(nxt[agent, "observation"][~done, 0], own["obs"][agent][~done])
                assert nxt[agent, "observation"][done].isnan().all()
            pendulum_only = nxt["pendulum", "done"].view(-1) & ~nxt["cart", "done"].view(-1)
            apart += int(pendulum_only.sum())
            assert not done[pendulum_only].any()  # one agent's end does not reset its env
            assert torch.equal(nxt["final_obs_missing"].view(-1), done)
            assert nxt["state"][done].isnan().all() and torch.equal(nxt["state"][~done], own["state"][~done])
            assert torch.equal(root["state"], own["state"])
            ended += int(done.sum())
            if t == 10:
                held = (root["state"], root["state"].clone())
        assert held is not None and torch.equal(*held)  # the task rewrites its state buffer: handed out as a copy
        assert apart > 0 and ended > 0, (apart, ended)
    finally:
        close_live()
