"""The VMAS backend: agent groups with exact same-step auto-reset, against a sequential reference and VMAS by hand.

* A counting scenario (``tests/marl_fakes.py``) run in VMAS's own ``Environment``:
  every key of every transition -- each agent's observation, its TRUE final one where
  the row ended, each agent's reward, the env's and each agent's flags, the team reward
  and the next root -- equals a plain Python loop over rows, through ``step_and_maybe_reset``,
  ``collect`` chunks and masked resets; two groups whose specs differ.
* A real scenario (navigation) against VMAS driven by hand with the same seed and
  actions, ended rows reset with ``reset_at``: identical observations and rewards, and
  the final observation of an ended row is VMAS's own pre-reset one.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import ActionError, SpecError
from gpu_envs.rollout import collect
from tests.marl_fakes import AGENTS, CountingReference, counting_scenario, row_lengths

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vmas") is None, reason="vmas not installed (CI installs it)")

if importlib.util.find_spec("vmas") is not None:
    import vmas

GROUPS = {"predator": ["predator_0", "predator_1"], "prey": ["prey_0"]}


def counting_env(num_envs: int, max_steps: int | None, **kwargs):
    raw = vmas.make_env(counting_scenario()(), num_envs=num_envs, max_steps=max_steps, seed=0)
    return gpu_envs.wrap(raw, **kwargs)


def group_actions(env, generator: torch.Generator) -> dict:
    """Actions in [-1, 1] for every group: {(group, "action"): [N, A, 2]}."""
    out = {}
    for group, agents in env.group_map.items():
        out[group, "action"] = torch.rand(env.num_envs, len(agents), 2, generator=generator) * 2 - 1
    return out


def agent_actions(actions: dict, row: int) -> list[list[float]]:
    """Row ``row``'s action of every agent, in AGENTS order."""
    out = []
    for name in AGENTS:
        group = name.split("_")[0]
        j = GROUPS[group].index(name)
        out.append(actions[group, "action"][row, j].tolist())
    return out


def check_transition(td, root, refs: list[CountingReference], actions: dict) -> None:
    """``td`` (with "next") and ``root`` against one reference step of every row."""
    for i, ref in enumerate(refs):
        want = ref.step(agent_actions(actions, i))
        for group, names in GROUPS.items():
            for j, name in enumerate(names):
                k = AGENTS.index(name)
                assert td["next", group, "observation"][i, j].tolist() == pytest.approx(want["obs"][name]), (i, name)
                assert root[group, "observation"][i, j].tolist() == pytest.approx(want["root"][name]), (i, name)
                assert td["next", group, "reward"][i, j, 0].item() == pytest.approx(want["reward"][k])
                assert td["next", group, "terminated"][i, j, 0].item() == want["terminated"]
                assert td["next", group, "truncated"][i, j, 0].item() == want["truncated"]
                assert not td["next", group, "final_obs_missing"][i, j, 0].item()
        assert td["next", "terminated"][i, 0].item() == want["terminated"]
        assert td["next", "truncated"][i, 0].item() == want["truncated"]
        assert td["next", "done"][i, 0].item() == (want["terminated"] or want["truncated"])
        assert td["next", "reward"][i, 0].item() == pytest.approx(sum(want["reward"]), rel=1e-6)


def test_counting_scenario_matches_the_sequential_reference_through_auto_resets():
    env = counting_env(6, max_steps=4, group_map=GROUPS)
    assert env.group_map == GROUPS
    refs = [CountingReference(length, 4) for length in row_lengths(6)]
    root = env.reset(seed=0)
    for i, ref in enumerate(refs):
        ref.reset()
        for group, names in GROUPS.items():
            for j, name in enumerate(names):
                assert root[group, "observation"][i, j].tolist() == ref.observe()[name]
    g = torch.Generator().manual_seed(0)
    for _ in range(12):
        actions = group_actions(env, g)
        root.update(actions)
        td, root = env.step_and_maybe_reset(root)
        check_transition(td, root, refs, actions)
    assert sum(ref.episode for ref in refs) > 12  # rows ended, by termination and by the horizon


def test_default_groups_follow_torchrl_and_split_agents_whose_specs_differ():
    env = counting_env(2, max_steps=None)
    assert env.group_map == GROUPS  # by name prefix; prey's spec differs from predators' anyway
    assert env.single_observation_spec["predator", "observation"].shape == (2, 5)
    assert env.single_observation_spec["prey", "observation"].shape == (1, 6)
    with pytest.raises(SpecError, match="mixes agents whose specs differ"):
        counting_env(2, max_steps=None, group_map={"all": list(AGENTS)})
    with pytest.raises(SpecError, match="leaves out the agents"):
        counting_env(2, max_steps=None, group_map={"predator": ["predator_0", "predator_1"]})


def test_collect_chunks_and_masked_resets_match_the_reference():
    env = counting_env(5, max_steps=6, group_map=GROUPS)
    refs = [CountingReference(length, 6) for length in row_lengths(5)]
    env.reset(seed=0)
    for ref in refs:
        ref.reset()
    seen = []

    def policy(td):
        actions = group_actions(env, g)
        seen.append(actions)
        td.update(actions)
        return td

    g = torch.Generator().manual_seed(1)
    for _ in range(2):  # two chunks: episodes carry over
        traj = collect(env, policy, steps=5)
        for t in range(5):
            step = traj[:, t]
            check_transition(step, _next_root(traj, t, env), refs, seen[t])
        seen.clear()
    mask = torch.tensor([True, False, True, False, False])
    root = env.reset(td=env.root().set("_reset", mask.view(5, 1)))
    for i in (0, 2):
        refs[i].reset()
    for i, ref in enumerate(refs):
        for group, names in GROUPS.items():
            for j, name in enumerate(names):
                assert root[group, "observation"][i, j].tolist() == pytest.approx(ref.observe()[name])


def _next_root(traj, t: int, env):
    """The root step ``t`` led to: step ``t + 1``'s root, or the env's current root after the last step."""
    return traj[:, t + 1] if t + 1 < traj.batch_size[1] else env.root()


def test_random_action_collect_draws_every_group_and_keeps_the_layout():
    env = counting_env(3, max_steps=3, group_map=GROUPS)
    traj = collect(env, None, steps=7)
    assert traj["predator", "action"].shape == (3, 7, 2, 2)
    assert traj["prey", "action"].shape == (3, 7, 1, 2)
    assert traj["next", "predator", "reward"].shape == (3, 7, 2, 1)
    assert traj["next", "prey", "done"].shape == (3, 7, 1, 1)
    # each agent's flags are its env's; the team reward is the agents' sum
    torch.testing.assert_close(traj["next", "predator", "done"], traj["next", "done"].unsqueeze(2).expand(3, 7, 2, 1))
    team = traj["next", "predator", "reward"].sum(2) + traj["next", "prey", "reward"].sum(2)
    torch.testing.assert_close(traj["next", "reward"], team)


def test_a_missing_or_wrong_group_action_is_refused_before_anything_moves():
    env = counting_env(2, max_steps=None, group_map=GROUPS)
    td = env.reset(seed=0)
    td["predator", "action"] = torch.zeros(2, 2, 2)
    with pytest.raises(ActionError, match=r"\('prey', 'action'\).*full_action_spec"):
        env.step(td)
    td["prey", "action"] = torch.zeros(2, 1, 3)
    with pytest.raises(ActionError, match=r"\('prey', 'action'\) is \(2, 1, 3\)"):
        env.step(td)
    td["prey", "action"] = torch.zeros(2, 1, 2)
    env.step(td)  # the env was left usable


def test_full_specs_are_keyed_like_the_tensordict():
    env = counting_env(4, max_steps=None, group_map=GROUPS)
    td = env.reset(seed=0)
    td.update(env.full_action_spec.rand())
    assert env.full_action_spec.contains(td)
    td = env.step(td)
    assert set(env.full_reward_spec.keys(True, True)) == {"reward", ("predator", "reward"), ("prey", "reward")}
    assert ("prey", "truncated") in env.full_done_spec.keys(True, True)
    for key, spec in env.full_done_spec.items(True, True):
        assert td["next", key].shape == spec.shape, key
    for key, spec in env.full_reward_spec.items(True, True):
        assert td["next", key].shape == spec.shape, key


# ------------------------------------------------------------------------------ a real scenario
@pytest.mark.parametrize("continuous", [True, False])
def test_navigation_matches_vmas_driven_by_hand(continuous: bool):
    n, horizon = 8, 5
    kwargs = dict(num_envs=n, max_steps=horizon, continuous_actions=continuous, terminated_truncated=True)
    env = gpu_envs.wrap(vmas.make_env("navigation", seed=3, **kwargs))
    ref = vmas.make_env("navigation", seed=3, **kwargs)
    root = env.reset(seed=7)
    obs = ref.reset(seed=7)
    spec = env.full_action_spec
    g = torch.Generator().manual_seed(0)
    ended_seen = 0
    # VMAS keeps ONE random state per process, shared by both envs: each draws from where the other started
    shared = vmas.simulator.environment.environment.Environment.vmas_random_state
    for _ in range(2 * horizon + 1):
        actions = spec.rand(generator=g)
        torch.testing.assert_close(root["agents", "observation"], torch.stack(obs, 1))
        root.update(actions)
        start = [shared[0].clone(), shared[1], shared[2]]
        td, root = env.step_and_maybe_reset(root)
        shared[:] = start
        a = actions["agents", "action"]
        obs, rews, terminated, truncated, _ = ref.step([a[:, k].clone() for k in range(a.shape[1])])
        done = terminated | truncated
        torch.testing.assert_close(td["next", "agents", "observation"], torch.stack(obs, 1))  # final obs on ended rows
        torch.testing.assert_close(td["next", "agents", "reward"], torch.stack(rews, 1).unsqueeze(-1))
        assert torch.equal(td["next", "done"].view(-1), done)
        rows = done.nonzero().view(-1).tolist()
        ended_seen += len(rows)
        if len(rows) == n:  # every row ended: one reset of all of them (torchrl's VmasEnv does the same)
            obs = ref.reset()
            continue
        for row in rows:
            ref.reset_at(row, return_observations=False)
        obs = ref.get_from_scenario(get_observations=True, get_rewards=False, get_infos=False, get_dones=False)[0]
    assert ended_seen >= n  # every row ended at the horizon at least once


def test_make_vmas_ids_and_refusals():
    env = gpu_envs.make("vmas/balance", num_envs=3, seed=0, max_episode_steps=4)
    assert "vmas/navigation" in gpu_envs.available_envs()["vmas"]
    traj = env.rollout(9)
    assert traj["next", "done"].sum() >= 3  # the horizon ended every row at step 4 (and 8)
    with pytest.raises(gpu_envs.UnknownEnvError, match="not a VMAS scenario"):
        gpu_envs.make("vmas/no_such_scenario", num_envs=2)
    raw = vmas.make_env("balance", num_envs=2, device="cpu")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="runs on cpu"):
        gpu_envs.wrap(raw, device="meta")


def test_check_env_passes_on_a_vmas_scenario():
    report = gpu_envs.check_env(gpu_envs.make("vmas/balance", num_envs=4, max_episode_steps=20), steps=60, seed=0)
    assert report.ok, report.format()
    assert "vmas balance" in repr(gpu_envs.make("vmas/balance", num_envs=2))


def test_dict_spaces_give_the_same_transitions_as_lists():
    kwargs = dict(num_envs=4, max_steps=3, seed=0, continuous_actions=False)
    trajectories = []
    for dict_spaces in (True, False):  # one after the other, each from reset(seed=1): VMAS's one random state
        env = gpu_envs.wrap(vmas.make_env("navigation", dict_spaces=dict_spaces, **kwargs))
        env.reset(seed=1)
        trajectories.append(collect(env, None, steps=7))
    as_dicts, as_lists = trajectories
    assert as_dicts["agents", "action"].shape == (4, 7, 4)  # Discrete(9) per agent
    assert as_lists["next", "done"].sum() >= 8  # the horizon ended every row twice
    for key in (("next", "agents", "observation"), ("agents", "observation"), ("next", "agents", "reward")):
        torch.testing.assert_close(as_dicts[key], as_lists[key])


# ------------------------------------------------------------------------------ videos
def _decode(path):
    av = pytest.importorskip("av")
    import numpy as np

    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]).astype(float)


def test_record_episodes_films_vmas_with_its_renderer_and_the_true_final_frame(tmp_path):
    """Each video is VMAS's own drawing of the episode, frame by frame, and ends on the state before the reset."""
    pytest.importorskip("av")
    from gpu_envs.transforms import RecordEpisodes, TransformedEnv

    n, horizon, rows = 5, 4, (1, 3)
    kwargs = dict(num_envs=n, max_steps=horizon, terminated_truncated=True)
    env = gpu_envs.wrap(vmas.make_env("navigation", seed=3, **kwargs))
    g = torch.Generator().manual_seed(0)
    actions = [env.full_action_spec.rand(generator=g) for _ in range(2 * horizon)]
    # the reference first, by hand: two VMAS viewers open at once in one process draw stale buffers
    ref = vmas.make_env("navigation", seed=3, **kwargs)
    ref.reset(seed=7)
    want: dict[int, list] = {row: [[ref.render(mode="rgb_array", env_index=row)]] for row in rows}
    resets: dict[int, list] = {row: [] for row in rows}  # the frame after each end: what a video must NOT end on
    for step in actions:
        a = step["agents", "action"]
        ref.step([a[:, k].clone() for k in range(a.shape[1])])
        for row in rows:
            want[row][-1].append(ref.render(mode="rgb_array", env_index=row))
        if len(want[rows[0]][-1]) == horizon + 1:  # every row ends at the horizon: VMAS resets them all
            ref.reset()
            for row in rows:
                first = ref.render(mode="rgb_array", env_index=row)
                resets[row].append(first)
                want[row].append([first])
    ref.viewer.close()
    ref.viewer = None
    rec = RecordEpisodes.for_env(env, tmp_path, rows=rows)
    tenv = TransformedEnv(env, rec)
    root = tenv.reset(seed=7)
    for step in actions:
        td, root = tenv.step_and_maybe_reset(root.update(step))
    assert td["next", "done"].all()
    videos = rec.close()
    assert len(videos) == 2 * len(rows)
    for row in rows:
        for episode in range(2):
            got = _decode(tmp_path / f"row{row}-episode{episode}.mp4")
            frames = [f.astype(float) for f in want[row][episode]]
            assert got.shape == (horizon + 1, *frames[0].shape)  # first frame .. the final state
            for t, frame in enumerate(frames):
                assert abs(got[t] - frame).mean() < 1.5, (row, episode, t)  # H.264 differs by < 1 grey level
            reset = resets[row][episode].astype(float)  # the last frame is the final state, not the reset that followed
            assert abs(got[-1] - frames[-1]).mean() * 2 < abs(got[-1] - reset).mean()


def test_record_episodes_on_vmas_draws_only_filmed_rows_and_stops_after_close(tmp_path, monkeypatch):
    pytest.importorskip("av")
    from gpu_envs.transforms import RecordEpisodes, TransformedEnv

    env = gpu_envs.wrap(vmas.make_env("navigation", num_envs=6, max_steps=3, seed=0))
    drawn: list[int] = []
    draw = env.backend.env.render

    def counted(*args, env_index=0, **kwargs):
        drawn.append(env_index)
        return draw(*args, env_index=env_index, **kwargs)

    monkeypatch.setattr(env.backend.env, "render", counted)
    rec = RecordEpisodes.for_env(env, tmp_path, rows=[2], every=2, size=(64, 48))
    tenv = TransformedEnv(env, rec)
    tenv.reset(seed=0)
    collect(tenv, steps=12)  # 4 episodes of row 2: episodes 0 and 2 filmed
    assert set(drawn) == {2}
    # two filmed episodes of 3 steps (first frame + one per step), and the first frame of the filmed episode 4,
    # drawn when episode 3 ended (the step that begins it would find the state gone); nothing else
    assert len(drawn) == 2 * (3 + 1) + 1
    videos = rec.close()
    assert [p.name for p in videos] == ["row2-episode0.mp4", "row2-episode2.mp4"]
    assert _decode(videos[0]).shape == (4, 64, 48, 3)
    drawn.clear()
    tenv.reset(seed=0)
    collect(tenv, steps=6)
    assert drawn == []  # closed: the simulator draws nothing more for it


@pytest.mark.parametrize(
    ("continuous", "bad", "words"),
    [(True, float("nan"), "non-finite"), (True, 1.5, "outside"), (False, 9, "outside"), (False, -1, "outside")],
)
def test_a_bad_action_is_a_clear_error_before_vmas_asserts_and_the_env_goes_on(continuous, bad, words):
    """VMAS refuses these with a bare AssertionError; gpu_envs names the group first and nothing moves."""
    env = gpu_envs.make("vmas/navigation", num_envs=4, seed=0, continuous_actions=continuous)
    root = env.reset(seed=0)
    before = root["agents", "observation"].clone()
    root.update(env.full_action_spec.rand())
    root["agents", "action"][1, 0] = bad
    with pytest.raises(ActionError, match=rf"\('agents', 'action'\).*{words}"):
        env.step_and_maybe_reset(root)
    assert torch.equal(env.root()["agents", "observation"], before)  # refused before VMAS moved
    td, _ = env.step_and_maybe_reset(env.root().update(env.full_action_spec.rand()))  # usable: no reset needed
    assert torch.isfinite(td["next", "agents", "observation"]).all()

    def policy(td):
        td.update(env.full_action_spec.rand())
        td["agents", "action"][2, 1] = bad
        return td

    with pytest.raises(ActionError, match=words):
        collect(env, policy, steps=3)


@pytest.mark.parametrize(("size", "words"), [((1, 64), "RecordEpisodes frame height"), ("big", "an int or")])
def test_a_bad_frame_size_for_vmas_videos_is_named(tmp_path, size, words):
    pytest.importorskip("av")
    from gpu_envs.transforms import RecordEpisodes

    env = gpu_envs.wrap(vmas.make_env("navigation", num_envs=2, seed=0))
    with pytest.raises(gpu_envs.InvalidArgumentError, match=words):
        RecordEpisodes.for_env(env, tmp_path, size=size)
