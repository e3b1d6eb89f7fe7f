"""MiniGrid/BabyAI envs through ``gpu_envs.wrap``/``make``: Dict observations, the text mission as bytes.

The oracle (docs/DESIGN.md): the same minigrid envs stepped one by one and reset by hand give
the same transitions, key by key (``image``, ``direction``, ``mission`` decoded back to
the text, reward, flags), for a counting env written in minigrid's API (its mission
names env and episode, so a final observation swapped with a post-reset one shows; every
env ends at once on step 3) and minigrid's own Empty env, through each path: a single
env, vector envs in both auto-reset modes, and ``make``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gpu_envs
from tests.fakes import MAX_LEN, episode_length
from tests.gym_fakes import assert_same_transitions, batched_transitions, sequential_reference

pytest.importorskip("minigrid")
import gymnasium as gym
from minigrid.core.grid import Grid
from minigrid.core.mission import MissionSpace
from minigrid.core.world_object import Goal
from minigrid.minigrid_env import MiniGridEnv
from minigrid.wrappers import FullyObsWrapper, ImgObsWrapper

from gpu_envs.backends.minigrid import decode_missions

KEYS = ["image", "direction", "mission"]


class CountingGridEnv(MiniGridEnv):
    """Env ``index`` in minigrid's API: mission "env <index> episode <episode>", episodes of known lengths.

    An episode is truncated after ``tests.fakes.episode_length(index, episode)`` steps
    (3 for every first episode: all envs end at once), or terminates earlier at the goal.
    """

    def __init__(self, index: int = 0) -> None:
        self.index, self.episode = index, -1
        space = MissionSpace(mission_func=lambda: "env 0 episode 0")
        super().__init__(mission_space=space, grid_size=5, max_steps=MAX_LEN, see_through_walls=True)

    def _gen_grid(self, width: int, height: int) -> None:
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        self.put_obj(Goal(), width - 2, height - 2)
        self.place_agent()
        self.mission = f"env {self.index} episode {self.episode}"

    def reset(self, *, seed=None, options=None):
        self.episode += 1
        self.max_steps = episode_length(self.index, self.episode)
        return super().reset(seed=seed, options=options)


def _assert_same(got: dict, want: dict, keys=KEYS) -> None:
    """Key by key; ``mission`` bytes are decoded and compared with the oracle's text."""
    for name in ("observation", "next_observation", "root"):
        if "mission" in keys:
            np.testing.assert_array_equal(
                np.array(decode_missions(got.pop(f"{name}/mission"))), want.pop(f"{name}/mission")
            )
    assert_same_transitions(got, want)


def _oracle(env, make_env, n: int, steps: int, seed: int = 0, keys=KEYS) -> dict:
    # turn left, turn right or (mostly) move forward: the goal gets reached, so both end kinds occur
    actions = np.random.default_rng(n + steps).choice([0, 1, 2, 2, 2, 2], size=(n, steps))
    want = sequential_reference(make_env, actions, seed=seed, obs_keys=keys)
    got = batched_transitions(env, torch.as_tensor(actions), obs_keys=keys, seed=seed)
    _assert_same(got, dict(want), keys)
    return want


def _check_counting_coverage(want: dict) -> None:
    done = want["done"]
    assert want["terminated"].any() and want["truncated"].any() and done.all(axis=0).any()
    # the missions change at every episode end: final and post-reset observations differ there
    assert (want["next_observation/mission"][done] != want["root/mission"][done]).all()


def test_single_minigrid_env_is_a_batch_of_one_and_matches_reference():
    with gpu_envs.wrap(CountingGridEnv(0), device="cpu") as env:
        assert env.batch_size == torch.Size([1])
        spec = env.single_observation_spec
        assert spec["mission"].shape == (256,) and spec["mission"].dtype == torch.uint8
        assert spec["image"].shape == (7, 7, 3) and spec["direction"].shape == ()
        _check_counting_coverage(_oracle(env, CountingGridEnv, 1, 250))


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP])
def test_minigrid_vector_env_matches_reference_in_both_autoreset_modes(mode):
    venv = gym.vector.SyncVectorEnv([lambda i=i: CountingGridEnv(i) for i in range(4)], autoreset_mode=mode)
    with gpu_envs.wrap(venv, device="cpu") as env:
        assert env.backend.mode == mode
        _check_counting_coverage(_oracle(env, CountingGridEnv, 4, 80))


def test_make_empty_matches_minigrid_stepped_by_hand():
    n, steps = 2, 230
    with gpu_envs.make("MiniGrid-Empty-5x5-v0", num_envs=n, device="cpu") as env:
        want = _oracle(env, lambda i: gym.make("MiniGrid-Empty-5x5-v0"), n, steps, seed=4)
    assert want["terminated"].sum() >= 2 and want["truncated"].sum() >= 1  # goal reached, 100-step limit hit


def test_babyai_missions_decode_to_the_envs_own_text():
    with gpu_envs.make("BabyAI-GoToLocal-v0", num_envs=3, device="cpu") as env:
        missions = decode_missions(env.reset(seed=11)["mission"])
    want = [gym.make("BabyAI-GoToLocal-v0").reset(seed=11 + i)[0]["mission"] for i in range(3)]
    assert missions == want and len(set(missions)) > 1


def test_mission_drop_removes_the_key_and_the_rest_still_matches():
    keys = ["image", "direction"]
    with gpu_envs.wrap(CountingGridEnv(0), device="cpu", mission="drop") as env:
        assert set(env.single_observation_spec.keys()) == {"image", "direction"}
        _oracle(env, CountingGridEnv, 1, 60, keys=keys)
    venv = gym.vector.SyncVectorEnv([lambda i=i: CountingGridEnv(i) for i in range(2)])
    with gpu_envs.wrap(venv, device="cpu", mission="drop") as env:
        _oracle(env, CountingGridEnv, 2, 60, keys=keys)


def test_minigrid_wrappers_apply_first_and_an_image_only_env_is_plain_gymnasium():
    with gpu_envs.make("MiniGrid-Empty-5x5-v0", num_envs=2, device="cpu", wrappers=[FullyObsWrapper]) as env:
        assert env.single_observation_spec["image"].shape == (5, 5, 3)
        assert decode_missions(env.reset(seed=0)["mission"]) == ["get to the green goal square"] * 2
    with gpu_envs.wrap(ImgObsWrapper(gym.make("MiniGrid-Empty-5x5-v0")), device="cpu") as env:
        assert list(env.single_observation_spec.keys()) == ["observation"]


def test_decode_missions_handles_any_leading_dims():
    data = np.zeros((2, 3, 8), dtype=np.uint8)
    data[..., :2] = np.frombuffer(b"hi", dtype=np.uint8)
    assert decode_missions(torch.from_numpy(data[0, 0])) == "hi"
    assert decode_missions(data) == [["hi"] * 3] * 2


def test_bad_mission_options_and_too_long_missions_raise_clear_errors():
    with pytest.raises(gpu_envs.InvalidArgumentError, match="mission must be one of"):
        gpu_envs.wrap(CountingGridEnv(0), device="cpu", mission="text")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="mission_length"):
        gpu_envs.wrap(CountingGridEnv(0), device="cpu", mission_length=0)
    env = gpu_envs.wrap(CountingGridEnv(0), device="cpu", mission_length=8)
    with pytest.raises(gpu_envs.ObservationError, match=r"longer than mission_length=8.*mission_length="):
        env.reset(seed=0)
    env.close()
