"""Everything downstream of an env of agent groups: GAE per agent, transforms, torchrl, adapters that refuse.

The env is the counting scenario in VMAS (``tests/marl_fakes.py``): two groups whose
specs differ, known rewards and endings.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.rollout import collect, gae
from gpu_envs.transforms import EpisodeStats, RewardScale, TransformedEnv
from tests.marl_fakes import counting_scenario

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vmas") is None, reason="vmas not installed (CI installs it)")

if importlib.util.find_spec("vmas") is not None:
    import vmas


def counting_env(num_envs: int = 4, max_steps: int | None = 5):
    return gpu_envs.wrap(vmas.make_env(counting_scenario()(), num_envs=num_envs, max_steps=max_steps, seed=0))


def test_gae_per_agent_is_each_agents_own_gae():
    traj = collect(counting_env(), None, steps=9)
    reward = traj["next", "predator", "reward"]  # [N, T, 2, 1]
    g = torch.Generator().manual_seed(0)
    value = torch.randn(reward.shape, generator=g)
    next_value = torch.randn(reward.shape, generator=g)
    flags = [traj["next", key] for key in ("terminated", "truncated", "final_obs_missing")]  # the env's [N, T, 1]
    adv, target = gae(reward, value, next_value, *flags, gamma=0.9, lam=0.8)
    assert adv.shape == reward.shape
    for a in range(2):
        want_adv, want_target = gae(reward[:, :, a], value[:, :, a], next_value[:, :, a], *flags, gamma=0.9, lam=0.8)
        torch.testing.assert_close(adv[:, :, a], want_adv)
        torch.testing.assert_close(target[:, :, a], want_target)
    # each agent's own flags give the same (its env's, here)
    own = [traj["next", "predator", key] for key in ("terminated", "truncated", "final_obs_missing")]
    torch.testing.assert_close(gae(reward, value, next_value, *own, gamma=0.9, lam=0.8)[0], adv)
    with pytest.raises(InvalidArgumentError, match=r"per-agent reward gives \[N, T, A\]"):
        gae(reward, value[:, :, :1], next_value, *flags, gamma=0.9, lam=0.8)


def test_reward_scale_rewrites_every_agents_reward_and_episode_stats_count_the_team():
    scale, stats = RewardScale(0.5, loc=1.0), EpisodeStats()
    plain = collect(counting_env(), None, steps=12).clone()
    env = TransformedEnv(counting_env(), stats, scale)
    traj = collect(env, None, steps=12)
    for group in ("predator", "prey"):
        torch.testing.assert_close(traj["next", group, "reward"], plain["next", group, "reward"] * 0.5 + 1.0)
    torch.testing.assert_close(traj["next", "reward"], plain["next", "reward"] * 0.5 + 1.0)
    # EpisodeStats sits below RewardScale: it sums the raw team reward over each episode
    done = plain["next", "done"].squeeze(-1)
    returns, running = [], torch.zeros(4)
    for t in range(12):
        running += plain["next", "reward"][:, t, 0]
        returns += running[done[:, t]].tolist()
        running[done[:, t]] = 0
    summary = stats.summary()
    assert summary.episodes == len(returns) > 0
    assert summary.mean_return == pytest.approx(sum(returns) / len(returns), rel=1e-5)


@pytest.mark.parametrize("adapter", ["to_gymnasium", "to_sb3", "to_rsl_rl", "to_rl_games"])
def test_single_agent_adapters_refuse_a_grouped_env_naming_to_torchrl(adapter):
    import gpu_envs.interop as interop

    try:
        convert = getattr(interop, adapter)
    except Exception as err:  # (an adapter whose library is not installed says so itself)
        pytest.skip(str(err))
    with pytest.raises(InvalidArgumentError, match=r"act in groups.*to_torchrl"):
        convert(counting_env())


def test_to_torchrl_hands_the_groups_to_torchrl():
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    from gpu_envs.interop import to_torchrl

    tenv = to_torchrl(counting_env(num_envs=3, max_steps=4))
    assert tenv.group_map == {"predator": ["predator_0", "predator_1"], "prey": ["prey_0"]}
    assert set(tenv.action_keys) == {("predator", "action"), ("prey", "action")}
    assert set(tenv.reward_keys) == {"reward", ("predator", "reward"), ("prey", "reward")}
    assert ("prey", "terminated") in tenv.done_keys and "done" in tenv.done_keys
    check_env_specs(tenv)  # (it resets and steps the env: the same scenario's episode numbers move on)
    tenv = to_torchrl(counting_env(num_envs=3, max_steps=4))
    ref = counting_env(num_envs=3, max_steps=4)
    ref.reset(seed=0)
    tenv.set_seed(0)
    data = tenv.rollout(9, break_when_any_done=False)
    root = ref.root()
    for t in range(9):
        root.update({key: data[key][:, t] for key in (("predator", "action"), ("prey", "action"))})
        td, root = ref.step_and_maybe_reset(root)
        for key in (("predator", "observation"), ("prey", "reward"), ("predator", "done"), "reward", "truncated"):
            torch.testing.assert_close(data["next", key][:, t], td["next", key])


def test_replay_buffer_sums_each_agents_n_step_reward_like_the_team_reward():
    from gpu_envs.replay import ReplayBuffer

    traj = collect(counting_env(num_envs=3, max_steps=4), None, steps=12).clone()
    rb = ReplayBuffer(3 * 12)
    rb.extend(traj)
    env_rows = torch.arange(3).repeat_interleave(12)
    positions = torch.arange(12).repeat(3)
    batch = rb.gather(env_rows, positions, n_step=3, gamma=0.5)
    # linear in the rewards, with the env's own windows: the agents' sums add up to the team's
    agents = batch["next", "predator", "reward"].sum((1, 2)) + batch["next", "prey", "reward"].sum((1, 2))
    torch.testing.assert_close(agents, batch["next", "reward"].squeeze(-1))
    assert batch["next", "predator", "discount"].shape == (36, 2, 1)
    torch.testing.assert_close(batch["next", "predator", "discount"][:, 1], batch["next", "discount"])
    # one window written out: row 0 from step 0, cut where the episode ends
    done = traj["next", "done"][0, :, 0].tolist()
    want, k = 0.0, 0
    while True:
        want += 0.5**k * traj["next", "prey", "reward"][0, k, 0, 0].item()
        if done[k] or k == 2:
            break
        k += 1
    assert batch["next", "prey", "reward"][0, 0, 0].item() == pytest.approx(want)
    assert batch["next", "steps"][0, 0].item() == k + 1


def test_to_skrl_of_a_grouped_env_is_skrls_multi_agent_wrapper():
    pytest.importorskip("skrl")
    from gpu_envs.interop import to_skrl

    env = to_skrl(counting_env(num_envs=3, max_steps=4))
    assert env.possible_agents == ["predator_0", "predator_1", "prey_0"]
    assert env.observation_spaces["prey_0"].shape == (6,) and env.action_spaces["predator_1"].shape == (2,)
    assert env.state_spaces["prey_0"].shape == (16,)  # every agent's observation, concatenated
    obs, _ = env.reset()
    assert obs["predator_1"].shape == (3, 5)
    ref = counting_env(num_envs=3, max_steps=4)
    root = ref.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        actions = {agent: torch.rand(3, 2, generator=g) * 2 - 1 for agent in env.possible_agents}
        obs, rewards, _, truncated, _ = env.step(actions)
        root["predator", "action"] = torch.stack([actions["predator_0"], actions["predator_1"]], 1)
        root["prey", "action"] = actions["prey_0"].unsqueeze(1)
        td, root = ref.step_and_maybe_reset(root)
        torch.testing.assert_close(obs["predator_1"], root["predator", "observation"][:, 1])
        torch.testing.assert_close(rewards["prey_0"], td["next", "prey", "reward"][:, 0])
        torch.testing.assert_close(truncated["predator_0"], td["next", "predator", "truncated"][:, 0])
        state = env.state()["prey_0"]
        torch.testing.assert_close(state[:, -6:], root["prey", "observation"][:, 0])
    with pytest.raises(InvalidArgumentError, match="no action for agents"):
        env.step({"predator_0": torch.zeros(3, 2)})


def test_episode_stats_of_a_group_tracks_each_agents_return():
    stats, team = EpisodeStats(group="predator", emit=True), EpisodeStats(emit=False)
    env = TransformedEnv(counting_env(num_envs=4, max_steps=5), team, stats)
    traj = collect(env, None, steps=14)
    reward, done = traj["next", "predator", "reward"], traj["next", "done"][..., 0]
    returns, running = [], torch.zeros(4, 2)
    for t in range(14):
        running += reward[:, t, :, 0]
        ended = running[done[:, t]]
        returns += ended.tolist()
        want = torch.where(done[:, t].view(4, 1), running, 0.0)
        torch.testing.assert_close(traj["next", "predator", "episode_return"][:, t, :, 0], want)
        running[done[:, t]] = 0
    summary = stats.summary()
    assert summary.episodes == len(returns) == team.summary().episodes > 0  # the env's episodes, once each
    mean = sum(sum(r) for r in returns) / (2 * len(returns))  # over episodes and the group's two agents
    assert summary.mean_return == pytest.approx(mean, rel=1e-5)
    with pytest.raises(InvalidArgumentError, match="no agent group 'wolves'"):
        TransformedEnv(counting_env(), EpisodeStats(group="wolves"))
