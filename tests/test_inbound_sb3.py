"""Stable-Baselines3 VecEnvs through ``gpu_envs.wrap``, against the sequential oracle.

SB3 auto-resets inside ``step``; the true final observation is in
``infos[i]["terminal_observation"]`` and the truncation in ``infos[i]["TimeLimit.truncated"]``.
The batched transitions must equal single envs stepped one by one and reset by hand,
key by key: a DummyVecEnv of counting envs (every env ends at once on step 3, both end
kinds, an info entry), a SubprocVecEnv, and SB3's own ``make_vec_env`` CartPole.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import gpu_envs
from tests.fakes import CountingEnv
from tests.gym_fakes import (
    MaskedChoiceEnv,
    assert_same_transitions,
    batched_transitions,
    check_seeding,
    counting_oracle,
    sequential_reference,
)

pytest.importorskip("stable_baselines3")
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnvWrapper

from gpu_envs.backends.sb3 import SB3VecEnvBackend


def _counting_vec_env(n: int, cls=DummyVecEnv, **kwargs):
    return cls([lambda i=i: CountingEnv(i) for i in range(n)], **kwargs)


def test_dummy_vec_env_matches_sequential_reference():
    with gpu_envs.wrap(_counting_vec_env(8), device="cpu") as env:
        assert env.backend.name == "sb3" and "sb3(DummyVecEnv)" in repr(env)
        counting_oracle(env, 8, 500)
        assert list(env.info_spec.keys()) == ["step_count"]  # discovered at the first step


def test_packed_staging_path_of_a_cuda_target_matches_too(monkeypatch):
    monkeypatch.setattr(SB3VecEnvBackend, "staging_packed", True)
    with gpu_envs.wrap(_counting_vec_env(4), device="cpu") as env:
        assert env.backend._stage is None
        counting_oracle(env, 4, 300)
        assert env.backend._stage.packed


@pytest.mark.slow
def test_subproc_vec_env_matches_sequential_reference():
    with gpu_envs.wrap(_counting_vec_env(3, SubprocVecEnv, start_method="fork"), device="cpu") as env:
        counting_oracle(env, 3, 600)


def test_make_vec_env_cartpole_matches_sequential_gymnasium_and_keeps_monitor_episodes():
    n, steps, seed = 4, 500, 3
    actions = np.random.default_rng(1).integers(0, 2, size=(n, steps))
    want = sequential_reference(lambda i: gym.make("CartPole-v1"), actions, seed=seed)
    with gpu_envs.wrap(make_vec_env("CartPole-v1", n_envs=n), device="cpu") as env:
        assert "sb3(DummyVecEnv)" in repr(env)
        got = batched_transitions(
            env, torch.as_tensor(actions), info_keys=[("episode", "l"), ("episode", "r")], seed=seed
        )
    assert_same_transitions(got, want)
    assert want["done"].sum() > 50
    # SB3's Monitor reports each finished episode's length and return on its last step, 0 elsewhere
    lengths = got[("episode", "l")]
    done = want["done"]
    assert (lengths[~done] == 0).all() and (lengths[done] > 0).all()
    np.testing.assert_array_equal(got[("episode", "r")][done], lengths[done])  # CartPole: reward 1 per step


def test_reset_seed_seeds_sub_env_i_with_seed_plus_i_and_runs_repeat():
    actions = torch.as_tensor(np.random.default_rng(2).integers(0, 2, size=(3, 200)))
    with gpu_envs.wrap(DummyVecEnv([lambda: gym.make("CartPole-v1")] * 3), device="cpu") as env:
        check_seeding(env, lambda: gym.make("CartPole-v1"), actions, seed=40)


class _DropTerminalObs(VecEnvWrapper):
    """A VecEnv that withholds terminal_observation on odd rows (as a custom VecEnv might)."""

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, reward, done, infos = self.venv.step_wait()
        for i in range(1, len(infos), 2):
            infos[i].pop("terminal_observation", None)
        return obs, reward, done, infos


def test_missing_terminal_observation_gives_placeholders_on_exactly_those_rows():
    with gpu_envs.wrap(_DropTerminalObs(_counting_vec_env(4)), device="cpu") as env:
        assert "sb3(_DropTerminalObs over DummyVecEnv)" in repr(env)
        td = env.reset()
        for _ in range(3):  # every first episode ends on step 3
            td["action"] = torch.zeros(4, dtype=torch.long)
            td, root = env.step_and_maybe_reset(td)
            nxt = td["next"]
            td = root
    assert nxt["done"].all()
    assert nxt["final_obs_missing"].squeeze(-1).tolist() == [False, True, False, True]
    assert torch.isnan(nxt["observation"][1::2]).all()
    assert nxt["observation"][0::2].tolist() == [[0, 0, 3], [2, 0, 3]]
    assert root["observation"].tolist() == [[i, 1, 0] for i in range(4)]


class _DropTruncation(VecEnvWrapper):
    """SuperSuit's SB3 vec env (PettingZoo): TimeLimit.truncated never in the infos, every end looks terminated."""

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, reward, done, infos = self.venv.step_wait()
        for info in infos:
            info.pop("TimeLimit.truncated", None)
        return obs, reward, done, infos


def test_a_vec_env_that_never_reports_truncation_is_named_in_a_warning():
    with gpu_envs.wrap(_DropTruncation(_counting_vec_env(4)), device="cpu") as env:
        td = env.reset()
        with pytest.warns(UserWarning, match=r"_DropTruncation put no 'TimeLimit.truncated'.*SuperSuit") as caught:
            for _ in range(40):
                td["action"] = torch.zeros(4, dtype=torch.long)
                td, td = env.step_and_maybe_reset(td)
    assert len([w for w in caught if "TimeLimit.truncated" in str(w.message)]) == 1  # once
    with gpu_envs.wrap(_counting_vec_env(4), device="cpu") as env, warnings.catch_warnings():
        warnings.simplefilter("error")  # SB3's own DummyVecEnv reports it: no warning
        env.rollout(40)


def test_dict_observations_become_keys():
    with gpu_envs.wrap(DummyVecEnv([MaskedChoiceEnv] * 2), device="cpu") as env:
        td = env.reset()
        assert set(td.keys()) >= {"observation", "action_mask"}
        assert td["action_mask"].dtype == torch.int8 and td["action_mask"].shape == (2, 5)
        td["action"] = torch.tensor([0, 2])
        assert env.step(td)["next", "observation"].squeeze(-1).tolist() == [1.0, 1.0]


def test_unsupported_cases_raise_clear_errors():
    with gpu_envs.wrap(_counting_vec_env(3), device="cpu") as env:
        root = env.reset()
        with pytest.raises(gpu_envs.ResetMaskError, match="cannot reset a subset"):
            env.reset(td=root.set("_reset", torch.tensor([True, False, False])))
        env.reset(td=root.set("_reset", torch.ones(3, dtype=torch.bool)))  # all rows: a full reset
    with pytest.raises(gpu_envs.InvalidArgumentError, match="frame_skip"):
        gpu_envs.wrap(_counting_vec_env(1), device="cpu", frame_skip=2)


def test_a_failing_sub_env_raises_a_backend_error():
    class Broken(CountingEnv):
        def step(self, action):
            raise RuntimeError("simulator exploded")

    with gpu_envs.wrap(DummyVecEnv([Broken]), device="cpu") as env:
        td = env.reset()
        td["action"] = torch.zeros(1, dtype=torch.long)
        with pytest.raises(gpu_envs.BackendError, match=r"simulator exploded.*env.reset"):
            env.step(td)
