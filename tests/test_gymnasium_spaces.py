"""gymnasium spaces, info entries and staging through the gymnasium backend.

Each space kind must round-trip (the tensors equal what the env returned) and step (the
env receives exactly the action that was sent); info entries must equal the step's info
(the final step's on ended rows); the staged tensors must never alias between steps.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.backends.gymnasium_envs import GymnasiumBackend
from gpu_envs.contract.specs import Binary, Box, Composite, Discrete, MultiDiscrete, OneHot
from tests.fakes import CountingEnv
from tests.gym_fakes import (
    InfoEnv,
    SpacesEnv,
    assert_same_transitions,
    batched_transitions,
    counting_vector_env,
    register_test_envs,
    sequential_reference,
)

register_test_envs()
S = gym.spaces
SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
N = 3


def _spaces_env(obs_space, act_space, **kwargs):
    venv = gym.vector.SyncVectorEnv(
        [lambda i=i: SpacesEnv(obs_space, act_space, index=i) for i in range(N)], autoreset_mode=SAME_STEP
    )
    return gpu_envs.wrap(venv, device="cpu", **kwargs), venv


def _leaf(obs, key):
    parts = (key,) if isinstance(key, str) else key
    if not isinstance(obs, dict):  # a non-Dict observation lives under "observation"
        parts = parts[1:]
    for part in parts:
        obs = obs[int(part)] if isinstance(obs, tuple) else obs[part]
    return obs


OBS_SPACES = {
    "box_float64_unbounded": (
        S.Box(-np.inf, np.inf, (2, 3), np.float64),
        {"observation": (Box, torch.float64, (2, 3))},
    ),
    "box_uint8_image": (S.Box(0, 255, (4, 4, 3), np.uint8), {"observation": (Box, torch.uint8, (4, 4, 3))}),
    "box_int32": (S.Box(-5, 5, (2,), np.int32), {"observation": (Box, torch.int32, (2,))}),
    "box_bool": (S.Box(0, 1, (3,), np.bool_), {"observation": (Binary, torch.bool, (3,))}),
    "discrete_start": (S.Discrete(4, start=-2), {"observation": (Discrete, torch.int64, ())}),
    "multidiscrete": (S.MultiDiscrete([3, 5]), {"observation": (MultiDiscrete, torch.int64, (2,))}),
    "multibinary": (S.MultiBinary(4), {"observation": (Binary, torch.int8, (4,))}),
    "dict_nested": (
        S.Dict({"pos": S.Box(-1, 1, (2,), np.float32), "inner": S.Dict({"a": S.Discrete(3), "b": S.MultiBinary(2)})}),
        {
            "pos": (Box, torch.float32, (2,)),
            ("inner", "a"): (Discrete, torch.int64, ()),
            ("inner", "b"): (Binary, torch.int8, (2,)),
        },
    ),
    "tuple": (
        S.Tuple((S.Box(-1, 1, (2,), np.float32), S.Discrete(3))),
        {("observation", "0"): (Box, torch.float32, (2,)), ("observation", "1"): (Discrete, torch.int64, ())},
    ),
    "tuple_in_dict": (
        S.Dict({"t": S.Tuple((S.MultiDiscrete([2, 2]), S.Box(0, 1, (1,), np.float16)))}),
        {("t", "0"): (MultiDiscrete, torch.int64, (2,)), ("t", "1"): (Box, torch.float16, (1,))},
    ),
}


@pytest.mark.parametrize("name", sorted(OBS_SPACES))
def test_observation_space_round_trips(name):
    space, leaves = OBS_SPACES[name]
    env, venv = _spaces_env(space, S.Discrete(2))
    assert set(env.observation_spec.keys(True, True)) == set(leaves)
    for key, (kind, dtype, shape) in leaves.items():
        spec = env.single_observation_spec[key]
        assert type(spec) is kind and spec.dtype == dtype and tuple(spec.shape) == shape, key
    td = env.reset()
    for t in range(6):  # episodes last 4 steps: crosses a same-step reset
        td["action"] = torch.zeros(N, dtype=torch.long)
        td, root = env.step_and_maybe_reset(td)
        for i, sub in enumerate(venv.envs):
            step_t = 4 if t == 3 else (t + 1) % 4
            for key in leaves:
                want = np.asarray(_leaf(sub.obs_at(step_t), key))
                np.testing.assert_array_equal(td["next", key][i].numpy(), want, err_msg=f"{key} t={t}")
                np.testing.assert_array_equal(root[key][i].numpy(), np.asarray(_leaf(sub.obs_at((t + 1) % 4), key)))
        td = root
    env.close()


ACTION_SPACES = {
    "discrete_start": (S.Discrete(5, start=3), Discrete, lambda sent: sent),
    "box_float32": (S.Box(-1, 1, (2,), np.float32), Box, lambda sent: sent),
    "box_float64": (S.Box(-2, 2, (3,), np.float64), Box, lambda sent: sent),
    "multidiscrete": (S.MultiDiscrete([3, 4]), MultiDiscrete, lambda sent: sent),
    "multibinary": (S.MultiBinary(3), Binary, lambda sent: sent),
}


@pytest.mark.parametrize("name", sorted(ACTION_SPACES))
def test_action_space_steps_with_exact_actions(name):
    space, kind, decode = ACTION_SPACES[name]
    env, venv = _spaces_env(S.Box(-1, 1, (1,), np.float32), space)
    assert type(env.action_spec) is kind
    traj = env.rollout(6)
    sent = traj["action"].numpy()
    for i, sub in enumerate(venv.envs):
        received = np.stack([np.asarray(a) for a in sub.actions])
        np.testing.assert_array_equal(received, decode(sent[i]).astype(received.dtype))
        assert received.dtype == np.asarray(space.sample()).dtype
    env.close()


def test_one_hot_discrete_actions_on_request():
    env, venv = _spaces_env(S.Box(-1, 1, (1,), np.float32), S.Discrete(4, start=1), one_hot_actions=True)
    single = env.single_action_spec
    assert isinstance(single, OneHot) and single.shape == (4,) and single.dtype == torch.bool
    assert single.contains(single.rand((7,))) and single.contains(single.zero((2,)))
    assert not single.contains(torch.zeros(2, 4, dtype=torch.bool))
    assert isinstance(env.action_spec, OneHot) and env.action_spec.rand().shape == (N, 4)
    td = env.reset()
    td["action"] = torch.ones(N, 4, dtype=torch.bool)  # not one-hot: refused on the first step
    with pytest.raises(gpu_envs.ActionError):
        env.step(td)
    traj = env.rollout(6)
    sent = traj["action"]
    assert (sent.sum(-1) == 1).all()
    for i, sub in enumerate(venv.envs):
        assert [int(a) for a in sub.actions] == (sent[i].long().argmax(-1) + 1).tolist()
    env.close()


def test_categorical_is_the_default_discrete_encoding():
    env, _ = _spaces_env(S.Box(-1, 1, (1,), np.float32), S.Discrete(3))
    assert type(env.action_spec) is Discrete and env.single_action_spec.shape == ()
    env.close()


def test_action_mask_in_dict_observation_stays_usable():
    with gpu_envs.make("GpuEnvsTest/MaskedChoice-v0", num_envs=4, device="cpu", backend="gymnasium", seed=0) as env:
        mask_spec = env.single_observation_spec["action_mask"]
        assert mask_spec.dtype == torch.int8 and mask_spec.shape == (5,)
        gen = torch.Generator().manual_seed(0)

        def masked_policy(td):
            scores = torch.rand(td["action_mask"].shape, generator=gen)
            return td.set("action", torch.where(td["action_mask"].bool(), scores, -1.0).argmax(-1))

        traj = env.rollout(25, policy=masked_policy)  # the env raises on a masked-out action
    assert traj["next", "truncated"].any()
    chosen = traj["action"]
    assert traj["action_mask"].gather(-1, chosen.unsqueeze(-1)).bool().all()


@pytest.mark.parametrize(
    "space, where",
    [
        (S.Text(8), "observation key 'observation'"),
        (S.Dict({"ok": S.Discrete(2), "words": S.Sequence(S.Discrete(3))}), "observation key 'words'"),
        (S.Graph(S.Box(0, 1, (2,)), S.Discrete(2)), "Graph"),
    ],
)
def test_unsupported_observation_spaces_are_refused_with_the_key(space, where):
    with pytest.raises(gpu_envs.UnsupportedSpaceError, match=where) as info:
        gpu_envs.wrap(SpacesEnv(space, S.Discrete(2)), device="cpu")
    assert "ObservationWrapper" in str(info.value)


@pytest.mark.parametrize("space", [S.Dict({"a": S.Discrete(2)}), S.Tuple((S.Discrete(2), S.Discrete(2))), S.Text(4)])
def test_unsupported_action_spaces_are_refused(space):
    with pytest.raises(gpu_envs.UnsupportedSpaceError, match="action"):
        gpu_envs.wrap(SpacesEnv(S.Box(-1, 1, (1,), np.float32), space), device="cpu")


def test_one_hot_needs_a_discrete_action_space():
    with pytest.raises(gpu_envs.UnsupportedSpaceError, match="one_hot_actions"):
        gpu_envs.wrap(SpacesEnv(S.Box(-1, 1, (1,)), S.Box(-1, 1, (2,))), device="cpu", one_hot_actions=True)


# ---------------------------------------------------------------------------- info


def _info_reference(num_envs: int, steps: int) -> dict:
    envs = [InfoEnv(i) for i in range(num_envs)]
    for env in envs:
        env.reset()
    out = {k: [] for k in ("count", "ratio", "flag", "vec", "nested_a")}
    for _ in range(steps):
        rows = {k: [] for k in out}
        for env in envs:
            _, _, term, trunc, info = env.step(0)
            for k in ("count", "ratio", "flag", "vec"):
                rows[k].append(info[k])
            rows["nested_a"].append(info["nested"]["a"])
            if term or trunc:
                env.reset()
        for k in out:
            out[k].append(np.asarray(rows[k]))
    return {k: np.stack(v, axis=1) for k, v in out.items()}


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.DISABLED])
def test_numeric_info_matches_the_step_info_and_non_numeric_warns_once(mode):
    venv = gym.vector.SyncVectorEnv([lambda i=i: InfoEnv(i) for i in range(N)], autoreset_mode=mode)
    env = gpu_envs.wrap(venv, device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traj = env.rollout(12, policy=lambda td: td.set("action", torch.zeros(N, dtype=torch.long)))
    dropped = [str(w.message) for w in caught if "dropping info" in str(w.message)]
    # one warning per key, when it first shows up: 'name' (a string) at the first step, 'late' later, and
    # in SAME_STEP the reset-only 'from_reset' (the plain info of an ended row is its reset info)
    expected = ["'name' is not numeric", "'late' first appeared"]
    if mode == gym.vector.AutoresetMode.SAME_STEP:
        expected.insert(1, "'from_reset' first appeared")
    assert len(dropped) == len(expected), dropped
    for message, key in zip(dropped, expected, strict=True):
        assert key in message
    spec = env.single_info_spec
    assert env.info_spec == spec.expand(N)  # discovered at the first step, batched on reading
    assert {k: (spec[k].dtype, tuple(spec[k].shape)) for k in spec.keys(True, True)} == {
        "count": (torch.int64, ()),
        "ratio": (torch.float64, ()),
        "flag": (torch.bool, ()),
        "vec": (torch.float32, (2,)),
        ("nested", "a"): (torch.int64, ()),
    }
    want = _info_reference(N, 12)
    for key in ("count", "ratio", "flag", "vec"):
        np.testing.assert_array_equal(traj["next", key].numpy(), want[key], err_msg=key)
    np.testing.assert_array_equal(traj["next", "nested", "a"].numpy(), want["nested_a"])
    assert (traj["next", "count"][traj["next", "done"].squeeze(-1)] == 3).all()  # the final info, not reset's -1
    env.close()


def test_declared_info_spec_keeps_exactly_those_entries():
    venv = gym.vector.SyncVectorEnv([lambda i=i: InfoEnv(i) for i in range(N)], autoreset_mode=SAME_STEP)
    declared = Composite(count=Box(-np.inf, np.inf, (), torch.int64), late=Box(-np.inf, np.inf, (), torch.float64))
    env = gpu_envs.wrap(venv, device="cpu", info_spec=declared)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traj = env.rollout(10, policy=lambda td: td.set("action", torch.zeros(N, dtype=torch.long)))
    assert set(traj["next"].keys()) >= {"count", "late"} and "ratio" not in traj["next"]
    assert (traj["next", "late"][:, :5] == 0).all() and (traj["next", "late"][:, 5:] == 1).all()  # from step 6
    assert any("not in info_spec" in str(w.message) for w in caught)
    env.close()


def test_record_episode_statistics_entries_are_declared_up_front():
    venv = gym.wrappers.vector.RecordEpisodeStatistics(counting_vector_env(4, "same_step"))
    env = gpu_envs.wrap(venv, device="cpu")
    actions = np.zeros((4, 30), dtype=np.int64)
    traj = env.rollout(30, policy=lambda td: td.set("action", torch.zeros(4, dtype=torch.long)))
    want = sequential_reference(CountingEnv, actions)
    done = want["done"]
    # episode length and return on ended rows, from a plain running sum of the reference
    lengths, returns = np.zeros(4), np.zeros(4)
    for t in range(30):
        lengths += 1
        returns += want["reward"][:, t]
        ended = done[:, t]
        np.testing.assert_array_equal(traj["next", "episode", "l"][:, t].numpy()[ended], lengths[ended])
        np.testing.assert_allclose(traj["next", "episode", "r"][:, t].numpy()[ended], returns[ended])
        assert (traj["next", "episode", "l"][:, t].numpy()[~ended] == 0).all()
        lengths[ended], returns[ended] = 0, 0
    env.close()


# ------------------------------------------------------------------------- staging


@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_packed_staging_path_matches_the_oracle(mode, monkeypatch):
    """The accelerator data path (one packed buffer, one transfer), run on the CPU."""
    monkeypatch.setattr(GymnasiumBackend, "staging_packed", True)
    actions = np.random.default_rng(8).integers(0, 2, size=(4, 150))
    want = sequential_reference(CountingEnv, actions, info_keys=["step_count"])
    with gpu_envs.wrap(counting_vector_env(4, mode), device="cpu") as env:
        assert env.backend._stage is None and env.backend._reset_stage.packed
        got = batched_transitions(env, torch.as_tensor(actions), info_keys=["step_count"])
    assert_same_transitions(got, want)


def test_transitions_are_not_overwritten_by_later_steps():
    with gpu_envs.wrap(counting_vector_env(3, "same_step", copy=False), device="cpu") as env:
        td = env.reset()
        kept = []
        for _ in range(5):
            td["action"] = torch.zeros(3, dtype=torch.long)
            td, root = env.step_and_maybe_reset(td)
            kept.append(
                (
                    td["next", "observation"],
                    td["next", "observation"].clone(),
                    root["observation"],
                    root["observation"].clone(),
                )
            )
            td = root
        for live, snapshot, live_root, snapshot_root in kept:
            assert torch.equal(live, snapshot) and torch.equal(live_root, snapshot_root)


class _CollidingInfoEnv(CountingEnv):
    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        return obs, reward, term, trunc, {**info, "reward": 5.0, "observation": 1}


def test_info_keys_that_collide_with_transition_keys_are_dropped_with_a_warning():
    venv = gym.vector.SyncVectorEnv([lambda: _CollidingInfoEnv(0)], autoreset_mode=SAME_STEP)
    with gpu_envs.wrap(venv, device="cpu") as env, pytest.warns(UserWarning, match="collides") as caught:
        traj = env.rollout(5)
    assert list(env.info_spec.keys()) == ["step_count"]
    final = traj["next", "observation"]  # reward = 10 * episode + step + action (env index 0): the env's own
    np.testing.assert_array_equal(
        traj["next", "reward"].squeeze(-1).numpy(), (10 * final[..., 1] + final[..., 2] + traj["action"]).numpy()
    )
    assert sum("dropping info" in str(w.message) for w in caught) == 1
