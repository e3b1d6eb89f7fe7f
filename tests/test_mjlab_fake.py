"""The mjlab backend against a fake that mirrors mjlab 1.6's ``ManagerBasedRlEnv`` contract, in the main suite.

The real mjlab tier (``tests/mjlab/``) needs its own venv; this fake runs everywhere.
It runs the counting dynamics of ``tests/fakes.py`` (observations encode env index,
episode and step), so every transition is checked against the sequential oracle
(``reference_rollout``), and it reproduces what makes mjlab tricky:

* auto-reset inside ``step`` unless ``cfg.auto_reset`` is False; with it off, ``step``
  refuses to run while ended rows wait for ``reset(env_ids=...)`` (as mjlab does);
* reward and termination buffers rewritten in place on every step;
* ``reset(env_ids=...)`` recomputing the observations of ALL rows, with a value that
  changes on every computation (mjlab draws fresh observation noise);
* mjlab's own space classes (not gymnasium's) and ``extras["log"]`` rebuilt every call.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.backends.mjlab import MjlabBackend, is_mjlab_env
from gpu_envs.contract.final_obs import FinalObsKind
from tests.fakes import ends_truncated, episode_length, reference_rollout, reward_of

N, T = 6, 60


@dataclass
class Box:
    """The shape of ``mjlab.utils.spaces.Box``."""

    shape: tuple = ()
    dtype: str = "float32"
    low: float = -math.inf
    high: float = math.inf


@dataclass
class Dict:
    """The shape of ``mjlab.utils.spaces.Dict``."""

    shape: tuple = ()
    dtype: str = "float32"
    spaces: dict = field(default_factory=dict)


class ManagerBasedRlEnv:
    """mjlab 1.6's RL env contract over the counting dynamics (class named and placed like mjlab's)."""

    __module__ = "mjlab.envs.manager_based_rl_env"

    def __init__(self, num_envs: int = N, nested: bool = False) -> None:
        self.cfg = SimpleNamespace(auto_reset=True, is_finite_horizon=False)
        self.num_envs = num_envs
        self.device = "cpu"
        self.max_episode_length = 40
        self.nested = nested
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        critic = Dict(spaces={"counts": Box((3,)), "calls": Box((1,))}) if nested else Box((4,))
        self.single_observation_space = Dict(spaces={"actor": Box((3,)), "critic": critic})
        self.single_action_space = Box((1,))
        self.index = torch.arange(num_envs)
        self.episode = torch.full((num_envs,), -1)
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.calls = 0  # observation computations so far: stands in for fresh observation noise
        self.extras: dict = {}
        self.reward_buf = torch.zeros(num_envs)
        self.terminated_buf = torch.zeros(num_envs, dtype=torch.bool)
        self.truncated_buf = torch.zeros(num_envs, dtype=torch.bool)
        self.pending = torch.zeros(num_envs, dtype=torch.bool)
        self.closed = False
        self.common_step_counter = 0  # what mjlab's MjlabOnPolicyRunner.save/load keep in a checkpoint

    @property
    def unwrapped(self):
        return self

    def _observe(self) -> dict:
        self.calls += 1
        counts = torch.stack([self.index, self.episode, self.t], dim=-1).float()
        calls = torch.full((self.num_envs, 1), float(self.calls))
        critic = {"counts": counts, "calls": calls} if self.nested else torch.cat([counts, calls], dim=-1)
        return {"actor": counts, "critic": critic}

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        self.extras["log"]["Episode_Reward/count"] = torch.tensor(float(len(env_ids)))
        self.episode[env_ids] += 1
        self.t[env_ids] = 0
        self.episode_length_buf[env_ids] = 0
        self.pending[env_ids] = False

    def reset(self, *, seed=None, env_ids=None, options=None):
        self.extras["log"] = {}
        self._reset_idx(torch.arange(self.num_envs) if env_ids is None else env_ids)
        return self._observe(), self.extras

    def step(self, action: torch.Tensor):
        if not self.cfg.auto_reset and self.pending.any():
            raise RuntimeError("ended rows must be reset via reset(env_ids=...) before step() when auto_reset=False")
        self.extras["log"] = {"Metrics/step": torch.tensor(1.0)}
        self.t += 1
        self.episode_length_buf += 1
        ended = self.t >= episode_length(self.index, self.episode)
        truncated = ended & ends_truncated(self.index, self.episode)
        self.reward_buf[:] = reward_of(self.index, self.episode, self.t).float() + action[:, 0]
        self.terminated_buf[:] = ended & ~truncated
        self.truncated_buf[:] = truncated
        if self.cfg.auto_reset and ended.any():
            self._reset_idx(ended.nonzero().view(-1))
        else:
            self.pending |= ended
        return self._observe(), self.reward_buf, self.terminated_buf, self.truncated_buf, self.extras

    def close(self) -> None:
        self.closed = True


class RslRlVecEnvWrapper:
    """The shape of mjlab's rsl_rl wrapper: another step contract around an mjlab env."""

    __module__ = "mjlab.rl.vecenv_wrapper"

    def __init__(self, env) -> None:
        self.env = env

    @property
    def unwrapped(self):
        return self.env.unwrapped


def actions_for(steps: int = T, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, size=(N, steps)).astype(np.float32)


def run(env, actions: np.ndarray) -> tuple[dict, list]:
    """Step with ``actions`` ``[N, T]``; the oracle's keys as ``[N, T]`` arrays, and the critic rows."""
    got = {
        k: []
        for k in ("observation", "next_observation", "reward", "terminated", "truncated", "final_obs_missing", "root")
    }
    critic = []
    td = env.reset()
    for t in range(actions.shape[1]):
        td["action"] = torch.as_tensor(actions[:, t]).unsqueeze(-1)
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        got["observation"].append(td["actor"])
        got["next_observation"].append(nxt["actor"])
        got["reward"].append(nxt["reward"].squeeze(-1))
        got["terminated"].append(nxt["terminated"].squeeze(-1))
        got["truncated"].append(nxt["truncated"].squeeze(-1))
        got["final_obs_missing"].append(nxt["final_obs_missing"].squeeze(-1))
        got["root"].append(root["actor"])
        critic.append((nxt["critic"], root["critic"], nxt["done"].squeeze(-1)))
        td = root
    return {k: torch.stack(v, dim=1).numpy() for k, v in got.items()}, critic


def test_detects_mjlab_envs_without_importing_mjlab():
    fake = ManagerBasedRlEnv()

    class Task(ManagerBasedRlEnv):  # a task built on the env class
        pass

    assert is_mjlab_env(fake) and is_mjlab_env(Task()) and is_mjlab_env(RslRlVecEnvWrapper(fake))
    assert not is_mjlab_env(SimpleNamespace(unwrapped=None)) and not is_mjlab_env(object())
    env = gpu_envs.wrap(fake)
    assert isinstance(env.backend, MjlabBackend) and env.backend.capabilities.final_obs == FinalObsKind.WRAPPER_RESET
    assert "mjlab" not in sys.modules


def test_transitions_match_the_sequential_oracle():
    fake = ManagerBasedRlEnv()
    env = gpu_envs.wrap(fake)
    assert fake.cfg.auto_reset is False  # the backend resets ended rows itself, after reading the final obs
    actions = actions_for()
    got, _ = run(env, actions)
    expected = reference_rollout(N, actions, final_obs="info")
    for key in got:
        np.testing.assert_array_equal(got[key], expected[key].astype(got[key].dtype), err_msg=key)
    assert expected["terminated"].any() and expected["truncated"].any() and not got["final_obs_missing"].any()
    traj = env.rollout(25)
    assert torch.equal(traj["next", "done"], traj["next", "terminated"] | traj["next", "truncated"])
    assert traj["next", "done"].any() and not traj["next", "final_obs_missing"].any()


def test_rows_that_did_not_end_keep_the_observation_step_made():
    """mjlab's reset(env_ids) recomputes (re-noises) every row; only the reset rows are taken from it."""
    env = gpu_envs.wrap(ManagerBasedRlEnv())
    _, critic = run(env, actions_for())
    resets_seen = 0
    for nxt, root, done in critic:
        assert torch.equal(root[~done], nxt[~done])  # the next observation IS the next root
        if done.any() and not done.all():
            resets_seen += 1
            # the reset rows come from a later computation than the step's observation
            assert (root[done, 3] == nxt[0, 3] + 1).all() and (nxt[:, 3] == nxt[0, 3]).all()
    assert resets_seen > 5


def test_in_place_buffers_are_copied():
    env = gpu_envs.wrap(ManagerBasedRlEnv())
    td = env.reset()
    kept = []
    for t in range(20):
        td["action"] = torch.full((N, 1), float(t % 2))
        td, root = env.step_and_maybe_reset(td)
        kept.append((td, td.clone()))
        td = root
    for handed_out, snapshot in kept:
        for key in snapshot.keys(include_nested=True, leaves_only=True):
            assert torch.equal(handed_out[key], snapshot[key]), key


def test_partial_reset_resets_only_the_masked_rows():
    fake = ManagerBasedRlEnv()
    env = gpu_envs.wrap(fake)
    assert env.backend.capabilities.partial_reset
    td = env.reset()
    td["action"] = torch.zeros(N, 1)
    td, td = env.step_and_maybe_reset(td)
    mask = torch.zeros(N, 1, dtype=torch.bool)
    mask[[1, 4]] = True
    before, lengths, episodes = td.clone(), fake.episode_length_buf.clone(), fake.episode.clone()
    out = env.reset(td=TensorDict({"_reset": mask}, batch_size=[N]))
    rows = mask.view(-1)
    assert torch.equal(fake.episode[rows], episodes[rows] + 1) and torch.equal(fake.episode[~rows], episodes[~rows])
    assert fake.episode_length_buf[rows].eq(0).all() and torch.equal(fake.episode_length_buf[~rows], lengths[~rows])
    for key in ("actor", "critic"):  # untouched rows keep their observation (and its noise)
        assert torch.equal(out[key][~rows], before[key][~rows])
    assert out["actor"][rows, 2].eq(0).all()
    calls = fake.calls
    same = env.reset(td=TensorDict({"_reset": torch.zeros(N, 1, dtype=torch.bool)}, batch_size=[N]))
    assert fake.calls == calls and torch.equal(same["critic"], out["critic"])  # an empty mask resets nothing


def test_episode_log_has_the_steps_metrics_and_the_episode_sums_of_its_resets():
    env = gpu_envs.wrap(ManagerBasedRlEnv())
    td = env.reset()
    kinds = set()
    for _ in range(12):
        td["action"] = torch.zeros(N, 1)
        td, td_root = env.step_and_maybe_reset(td)
        log = env.backend.episode_log
        assert "Metrics/step" in log
        ended = int(td["next", "done"].sum())
        assert ("Episode_Reward/count" in log) == (ended > 0)
        if ended:
            assert float(log["Episode_Reward/count"]) == ended
        kinds.add(ended > 0)
        td = td_root
    assert kinds == {True, False}


def test_nested_groups_and_mjlab_spaces_become_specs():
    env = gpu_envs.wrap(ManagerBasedRlEnv(nested=True))
    keys = env.single_observation_spec.keys(include_nested=True, leaves_only=True)
    assert set(keys) == {"actor", ("critic", "counts"), ("critic", "calls")}
    assert env.single_action_spec.shape == (1,) and env.single_action_spec.dtype == torch.float32
    traj = env.rollout(10)
    assert traj["next", "critic", "counts"].shape == (N, 10, 3)
    assert torch.equal(traj["next", "critic", "counts"], traj["next", "actor"])


def test_refusals_name_the_fix():
    fake = ManagerBasedRlEnv()
    with pytest.raises(gpu_envs.NotAnEnvError, match=r"wrap\(wrapper\.unwrapped\)"):
        gpu_envs.wrap(RslRlVecEnvWrapper(fake))
    old = ManagerBasedRlEnv()
    old.cfg = SimpleNamespace()
    with pytest.raises(gpu_envs.NotAnEnvError, match="auto_reset"):
        gpu_envs.wrap(old)
    with pytest.raises(gpu_envs.DeviceMismatchError, match="ManagerBasedRlEnv"):
        gpu_envs.wrap(fake, device="meta")
    env = gpu_envs.wrap(fake)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven"):
        gpu_envs.wrap(fake)
    env.close()
    assert fake.closed and fake.cfg.auto_reset is True
    with pytest.raises(gpu_envs.ClosedEnvError):
        gpu_envs.wrap(fake)


def test_to_rsl_rl_reads_mjlabs_episode_clock_and_log():
    pytest.importorskip("rsl_rl")
    from gpu_envs.interop import to_rsl_rl

    fake = ManagerBasedRlEnv()
    vec = to_rsl_rl(gpu_envs.wrap(fake))
    assert vec.max_episode_length == fake.max_episode_length
    assert vec.episode_length_buf is fake.episode_length_buf
    saw_log = False
    for _ in range(5):
        _, rewards, dones, extras = vec.step(torch.zeros(N, 1))
        assert rewards.shape == dones.shape == (N,)
        saw_log |= "Episode_Reward/count" in extras.get("log", {})
    assert saw_log


def test_exact_final_obs_false_keeps_mjlabs_auto_reset_with_placeholders():
    fake = ManagerBasedRlEnv()
    env = gpu_envs.wrap(fake, exact_final_obs=False)
    assert fake.cfg.auto_reset is True and env.backend.capabilities.final_obs == FinalObsKind.PLACEHOLDER
    actions = actions_for()
    got, _ = run(env, actions)
    expected = reference_rollout(N, actions, final_obs="none")
    for key in got:
        np.testing.assert_array_equal(got[key], expected[key].astype(got[key].dtype), err_msg=key)
    assert got["final_obs_missing"].any()
