"""``Quarantine``: non-finite rows are ended, reset and counted, and the run goes on.

The oracle is the counting env's reference loop with the quarantine rule applied by
hand: single envs stepped one by one; where a step's observation or reward is not
finite, the transition becomes ``(obs, a, 0, obs, terminated)`` and the env is reset.
The batched, wrapped env must give the very same transitions, key by key, through
``step_and_maybe_reset`` (``collect``) and through torchrl's ``step`` + masked ``reset``.
Built-in Pendulum fed NaN torques on chosen rows ends exactly those rows, and the other
rows run bit for bit as without the NaNs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.rollout import collect
from gpu_envs.transforms import EpisodeStats, TransformedEnv
from gpu_envs.wrappers import Quarantine, QuarantineLimitError
from tests.fakes import CountingEnv, CountingTorchVectorEnv
from tests.sync_guard import no_sync

N, T = 5, 40


def nan_obs_at(index, episode, t):
    """Where the poisoned env's observation is NaN: a pure function of (row, episode, step)."""
    return (7 * index + 3 * episode + 5 * t) % 13 == 0


def nan_reward_at(index, episode, t):
    return (index + 5 * episode + 2 * t) % 17 == 3


class PoisonedEnv(CountingEnv):
    """The single counting env with NaN observations and rewards where the functions above say."""

    def step(self, action):
        episode = self.episode
        obs, reward, terminated, truncated, info = super().step(action)
        if nan_obs_at(self.index, episode, self.t):
            obs = np.full_like(obs, np.nan)
        if nan_reward_at(self.index, episode, self.t):
            reward = math.nan
        return obs, reward, terminated, truncated, info


class PoisonedTorchEnv(CountingTorchVectorEnv):
    """The batched counting env (a user's torch vector env) with the same NaNs."""

    def step(self, action):
        episode, t = self.episode.clone(), self.t + 1
        obs, reward, terminated, truncated, info = super().step(action)
        bad_obs = nan_obs_at(self.index, episode, t)
        ended = terminated | truncated
        nan = torch.tensor(math.nan)
        obs = torch.where((bad_obs & ~ended)[:, None], nan, obs)  # pre-reset rows: the next observation
        info["final_obs"] = torch.where(bad_obs[:, None], nan, info["final_obs"])  # the final one too
        reward = torch.where(nan_reward_at(self.index, episode, t), nan, reward)
        return obs, reward, terminated, truncated, info


def reference(actions: np.ndarray) -> dict:
    """N single poisoned envs, stepped by hand, with the quarantine rule applied by hand."""
    envs = [PoisonedEnv(i) for i in range(N)]
    obs = [env.reset()[0] for env in envs]
    keys = ("observation", "next_observation", "reward", "terminated", "truncated", "quarantined", "root", "case")
    out = {k: [] for k in keys}
    for t in range(actions.shape[1]):
        rows = {k: [] for k in keys}
        for i, env in enumerate(envs):
            next_obs, reward, term, trunc, _ = env.step(int(actions[i, t]))
            bad = not (np.isfinite(next_obs).all() and np.isfinite(reward))
            case = (
                "" if not bad else "reward" if np.isfinite(next_obs).all() else "final obs" if term or trunc else "obs"
            )
            rows["case"].append(case)
            if bad:
                next_obs, reward, term, trunc = obs[i], 0.0, True, False
            rows["observation"].append(obs[i])
            rows["next_observation"].append(next_obs)
            rows["reward"].append(reward)
            rows["terminated"].append(term)
            rows["truncated"].append(trunc)
            rows["quarantined"].append(bad)
            obs[i] = env.reset()[0] if (term or trunc) else next_obs
            rows["root"].append(obs[i])
        for k in keys:
            out[k].append(np.stack(rows[k]))
    return {k: np.stack(v, axis=1) for k, v in out.items()}


def _actions(seed=0):
    return torch.randint(0, 2, (N, T), generator=torch.Generator().manual_seed(seed))


def _assert_matches(got: dict, expected: dict) -> None:
    for key, value in got.items():
        np.testing.assert_array_equal(value.numpy(), expected[key].astype(value.numpy().dtype), err_msg=key)


def _entries(traj) -> dict:
    """The transition entries the references give, from a collected ``[N, T]`` trajectory."""
    nxt = traj["next"]
    flags = {key: nxt[key].squeeze(-1) for key in ("reward", "terminated", "truncated", "quarantined")}
    return {"observation": traj["observation"], "next_observation": nxt["observation"], **flags}


def test_the_reference_covers_every_case():
    cases = reference(_actions().numpy())["case"]
    # NaN observations on rows that would go on, on rows ending there anyway (the final
    # observation), and NaN rewards
    assert {"obs", "final obs", "reward"} <= set(cases.ravel().tolist())


def test_collect_matches_the_reference_with_the_quarantine_rule():
    actions = _actions()
    env = Quarantine(gpu_envs.wrap(PoisonedTorchEnv(N)))
    env.reset()
    step = iter(range(T))

    def policy(td):
        td["action"] = actions[:, next(step)]
        return td

    traj = collect(env, policy, steps=T)
    expected = reference(actions.numpy())
    _assert_matches(
        _entries(traj),
        expected,
    )
    torch.testing.assert_close(traj["next", "done"], traj["next", "terminated"] | traj["next", "truncated"])
    assert torch.isfinite(traj["next", "observation"]).all() and torch.isfinite(traj["next", "reward"]).all()
    assert env.check() == int(expected["quarantined"].sum())
    per_row = torch.as_tensor(expected["quarantined"].sum(axis=1))
    torch.testing.assert_close(env.quarantined_per_row, per_row)


def test_torchrl_style_step_then_masked_reset_matches_the_reference_and_resets_nothing_twice():
    actions = _actions(seed=3)
    sim = PoisonedTorchEnv(N)
    env = Quarantine(gpu_envs.wrap(sim))
    td = env.reset()
    got = {
        k: [] for k in ("observation", "next_observation", "reward", "terminated", "truncated", "quarantined", "root")
    }
    for t in range(T):
        td["action"] = actions[:, t]
        td = env.step(td)
        nxt = td["next"]
        for key, value in (
            ("observation", td["observation"]),
            ("next_observation", nxt["observation"]),
            ("reward", nxt["reward"].squeeze(-1)),
            ("terminated", nxt["terminated"].squeeze(-1)),
            ("truncated", nxt["truncated"].squeeze(-1)),
            ("quarantined", nxt["quarantined"].squeeze(-1)),
        ):
            got[key].append(value.clone())
        td = env.reset(td=TensorDict({"_reset": nxt["done"]}, batch_size=[N]))  # torchrl's maybe_reset
        got["root"].append(td["observation"])
    expected = reference(actions.numpy())
    _assert_matches({k: torch.stack(v, dim=1) for k, v in got.items()}, expected)  # "root": no row reset twice


def _pendulum(n=8, seed=0):
    return gpu_envs.make("Pendulum-v1", num_envs=n, device="cpu", seed=seed)


def _torques(n, steps, seed=1):
    return 4 * torch.rand(steps, n, 1, generator=torch.Generator().manual_seed(seed)) - 2


def test_pendulum_with_nan_torques_ends_those_rows_and_the_others_run_as_without():
    n, steps, at, rows = 8, 30, 10, [2, 5]
    torques = _torques(n, steps)
    poisoned = torques.clone()
    poisoned[at, rows] = math.nan
    stats = EpisodeStats()
    env = TransformedEnv(Quarantine(_pendulum(n)), stats)
    plain = _pendulum(n)
    td, ref = env.reset(), plain.reset()
    out, twin = [], []
    for t in range(steps):
        td["action"], ref["action"] = poisoned[t], torques[t]
        td, root = env.step_and_maybe_reset(td)
        ref, ref_root = plain.step_and_maybe_reset(ref)
        out.append(td.clone())
        twin.append(ref.clone())
        td, ref = root, ref_root
    traj, twin = torch.stack(out, dim=1), torch.stack(twin, dim=1)
    assert torch.isfinite(traj["next", "observation"]).all() and torch.isfinite(traj["next", "reward"]).all()
    expected = torch.zeros(n, steps, 1, dtype=torch.bool)
    expected[rows, at] = True
    torch.testing.assert_close(traj["next", "quarantined"], expected)
    torch.testing.assert_close(traj["next", "terminated"], expected)
    torch.testing.assert_close(traj["next", "done"], expected)
    # the quarantined transition: the observation acted on, reward 0
    torch.testing.assert_close(traj["next", "observation"][rows, at], traj["observation"][rows, at])
    assert (traj["next", "reward"][rows, at] == 0).all()
    # reset in the same call: the next input is a fresh episode (|thdot| <= 1, the reset range)
    fresh = traj["observation"][rows, at + 1]
    assert (fresh[:, 2].abs() <= 1).all()
    # the other rows ran bit for bit as without the NaNs (per-row random streams)
    others = [i for i in range(n) if i not in rows]
    for key in (("next", "observation"), ("next", "reward"), "observation"):
        torch.testing.assert_close(traj[key][others], twin[key][others], rtol=0, atol=0)
    # statistics above it see two ended episodes of 11 steps
    summary = stats.summary()
    assert summary.episodes == 2 and summary.mean_length == at + 1
    # and the record of what happened
    records = env.env.records()
    assert (
        records["row"].tolist() == rows and records["count"].tolist() == [1, 1] and records["step"].tolist() == [at, at]
    )
    torch.testing.assert_close(records["observation", "observation"], traj["observation"][rows, at])
    assert records["action"].isnan().all() and records["next_observation", "observation"].isnan().all()
    assert records["reward"].isnan().all()


def test_quarantine_never_syncs_even_while_it_quarantines():
    env = Quarantine(_pendulum(16))
    td = env.reset()
    td["action"] = torch.zeros(16, 1)
    td, td = env.step_and_maybe_reset(td)  # the first step validates (allowed to sync)
    torques = _torques(16, 20)
    torques[5, 3] = math.nan
    torques[12, [0, 7]] = math.nan  # an infinite torque is clipped to 2: only NaN poisons Pendulum
    with no_sync():
        for t in range(20):
            td["action"] = torques[t]
            td, td = env.step_and_maybe_reset(td)
        for t in range(20):  # torchrl's path
            td["action"] = torques[t]
            td = env.step(td)
            td = env.reset(td=TensorDict({"_reset": td["next", "done"]}, batch_size=[16]))
        count = env.quarantined
    assert count.item() == 6  # rows 3, 0 and 7 in each loop
    assert torch.isfinite(td["observation"]).all()


def test_raise_after_k_quarantines_at_the_next_full_reset_or_check():
    env = Quarantine(_pendulum(4), raise_after=2)
    td = env.reset()
    for action in ([[math.nan], [0.0], [0.0], [0.0]], [[math.nan]] * 4):  # row 0, then every row
        td["action"] = torch.tensor(action)
        td, td = env.step_and_maybe_reset(td)  # no raise inside steps: the host does not wait there
    assert env.quarantined.item() == 5
    with pytest.raises(
        QuarantineLimitError, match=r"5 rows were quarantined.*raise_after=2.*rows 0, 1, 2, 3.*records\(\).*clear\(\)"
    ):
        env.check()
    td = env.reset()  # reported once: caught, the run goes on (it once repeated at every later reset)
    assert env.check() == 5
    td["action"] = torch.tensor([[math.nan], [0.0], [0.0], [0.0]])
    td, td = env.step_and_maybe_reset(td)
    with pytest.raises(QuarantineLimitError, match="6 rows"):  # more rows quarantined: raised again
        env.reset()
    records = env.records()  # readable after the error
    assert records["row"].tolist() == [0, 1, 2, 3] and records["count"].tolist() == [3, 1, 1, 1]
    env.clear()
    assert env.check() == 0
    env.reset()


def test_below_the_limit_nothing_is_raised():
    env = Quarantine(_pendulum(4), raise_after=3)
    td = env.reset()
    td["action"] = torch.tensor([[math.nan], [0.0], [0.0], [0.0]])
    td, td = env.step_and_maybe_reset(td)
    assert env.check() == 1
    env.reset()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_bad_raise_after_is_refused(bad):
    with pytest.raises(gpu_envs.InvalidArgumentError, match="raise_after"):
        Quarantine(_pendulum(2), raise_after=bad)


def test_an_env_that_cannot_reset_single_rows_is_refused():
    class NoMask(CountingTorchVectorEnv):
        supports_reset_mask = False

    with pytest.raises(gpu_envs.InvalidArgumentError, match="cannot reset a subset"):
        Quarantine(gpu_envs.wrap(NoMask(2)))


def test_the_quarantined_key_is_in_the_info_spec_and_in_every_step():
    env = Quarantine(_pendulum(3))
    assert "quarantined" in env.single_info_spec
    td = env.reset()
    td["action"] = torch.zeros(3, 1)
    td = env.step(td)
    assert td["next", "quarantined"].shape == (3, 1) and not td["next", "quarantined"].any()


def nan_reset_at(index, episode):
    """Which fresh episodes start from a non-finite observation (a reset that blew up)."""
    return (3 * index + 2 * episode) % 7 == 1


class BadResetTorchEnv(CountingTorchVectorEnv):
    """The batched counting env whose reset observations are NaN where ``nan_reset_at`` says."""

    def _obs(self):
        obs = super()._obs()
        bad = nan_reset_at(self.index, self.episode) & (self.t == 0)
        return torch.where(bad[:, None], torch.tensor(math.nan), obs)


def bad_reset_reference(actions: np.ndarray) -> dict:
    """Single counting envs by hand: a non-finite reset observation becomes zeros, is counted,
    and the row's next transition is quarantined (acting on the zeros) and reset."""
    envs = [CountingEnv(i) for i in range(N)]

    def fresh(env):
        obs = env.reset()[0]
        bad = bool(nan_reset_at(env.index, env.episode))
        return (np.zeros(3, np.float32) if bad else obs), bad

    roots = [fresh(env) for env in envs]
    obs, pending = [r[0] for r in roots], [r[1] for r in roots]
    counts = np.array(pending, dtype=np.int64)
    keys = ("observation", "next_observation", "reward", "terminated", "truncated", "quarantined", "root")
    out = {k: [] for k in keys}
    for t in range(actions.shape[1]):
        rows = {k: [] for k in keys}
        for i, env in enumerate(envs):
            next_obs, reward, term, trunc, _ = env.step(int(actions[i, t]))
            if pending[i]:
                next_obs, reward, term, trunc = obs[i], 0.0, True, False
            for key, value in (
                ("observation", obs[i]),
                ("next_observation", next_obs),
                ("reward", reward),
                ("terminated", term),
                ("truncated", trunc),
                ("quarantined", pending[i]),
            ):
                rows[key].append(value)
            if term or trunc:
                obs[i], pending[i] = fresh(env)
                counts[i] += pending[i]
            else:
                obs[i] = next_obs
            rows["root"].append(obs[i])
        for k in keys:
            out[k].append(np.stack(rows[k]))
    result = {k: np.stack(v, axis=1) for k, v in out.items()}
    result["counts"] = counts
    return result


def test_non_finite_reset_observations_are_replaced_counted_and_their_next_step_quarantined():
    actions = _actions(seed=5)
    env = Quarantine(gpu_envs.wrap(BadResetTorchEnv(N)))
    env.reset()
    step = iter(range(T))

    def policy(td):
        assert torch.isfinite(td["observation"]).all(), "the policy never acts on a NaN"
        td["action"] = actions[:, next(step)]
        return td

    traj = collect(env, policy, steps=T)
    expected = bad_reset_reference(actions.numpy())
    assert expected["quarantined"].sum() >= 3, "the reference has bad resets to quarantine"
    _assert_matches(
        _entries(traj),
        {k: v for k, v in expected.items() if k not in ("root", "counts")},
    )
    torch.testing.assert_close(env.quarantined_per_row, torch.as_tensor(expected["counts"]))
    rec = env.records()
    assert rec["reset"].any() and torch.isnan(rec["next_observation", "observation"][rec["reset"]]).all()


def test_torchrl_style_resets_screen_fresh_observations_without_counting_twice():
    actions = _actions(seed=5)
    env = Quarantine(gpu_envs.wrap(BadResetTorchEnv(N)))
    td = env.reset()
    roots = []
    for t in range(T):
        assert torch.isfinite(td["observation"]).all()
        td["action"] = actions[:, t]
        td = env.step(td)
        td = env.reset(td=TensorDict({"_reset": td["next", "done"]}, batch_size=[N]))
        roots.append(td["observation"])
    expected = bad_reset_reference(actions.numpy())
    np.testing.assert_array_equal(torch.stack(roots, dim=1).numpy(), expected["root"])
    torch.testing.assert_close(env.quarantined_per_row, torch.as_tensor(expected["counts"]))


def test_numpy_integers_count_for_raise_after():
    env = Quarantine(_pendulum(2), raise_after=np.int64(3))  # once refused as "must be an int"
    assert env.raise_after == 3 and type(env.raise_after) is int
