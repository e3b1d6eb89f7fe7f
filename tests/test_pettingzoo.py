"""PettingZoo ParallelEnvs batched N ways: against N single envs stepped by hand, key by key.

The counting ParallelEnv (``tests/marl_fakes.py``) has agents that leave at different
steps (terminated one by one, the rest truncated at a horizon), rows with different
episode lengths and seeded resets. The reference is the same class, one object per row,
stepped alone with PettingZoo's own API: actions for the live agents only, the episode
over when none is left, then ``reset()``. Every agent's observation (frozen once it
left), reward, flags, the env's flags, the team reward, the TRUE final observations and
the next root must agree. Then a real game (mpe2's simple_spread) against its own
single envs, and the refusals.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import BackendError, InvalidArgumentError, UnknownEnvError
from gpu_envs.rollout import collect
from tests.marl_fakes import AGENTS, counting_parallel_env_class

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pettingzoo") is None, reason="pettingzoo not installed (CI installs it)"
)

GROUPS = {"predator": ["predator_0", "predator_1"], "prey": ["prey_0"]}


class RowReference:
    """One row: a single ParallelEnv stepped by hand, with the batch's masking rules written out plainly."""

    def __init__(self, env) -> None:
        self.env = env
        self.last: dict = {}
        self.left: dict = {}

    def reset(self, seed=None) -> dict:
        obs, _ = self.env.reset(seed=seed)
        self.last, self.left = dict(obs), {}
        return dict(self.last)

    def step(self, actions: dict) -> dict:
        live = list(self.env.agents)
        obs, rew, term, trunc, _ = self.env.step({a: actions[a] for a in live})
        self.last.update(obs)
        flags = {}
        for a in AGENTS:
            if a in live:
                flags[a] = (bool(term[a]), bool(trunc[a]))
                if term[a] or trunc[a]:
                    self.left[a] = flags[a]
            else:
                flags[a] = self.left[a]
        rewards = {a: float(rew.get(a, 0.0)) for a in AGENTS}
        final = dict(self.last)
        done = not self.env.agents
        truncated = done and any(trunc.get(a, False) for a in live)
        root = self.reset() if done else final
        return {"obs": final, "root": root, "reward": rewards, "flags": flags, "done": done, "truncated": truncated}


def actions_for(env, generator) -> dict:
    return {
        (g, "action"): torch.rand(env.num_envs, len(a), 2, generator=generator) * 2 - 1
        for g, a in env.group_map.items()
    }


def per_agent(actions: dict, row: int) -> dict:
    out = {}
    for group, names in GROUPS.items():
        for j, name in enumerate(names):
            out[name] = actions[group, "action"][row, j].numpy()
    return out


def check(td, root, refs, actions) -> None:
    for i, ref in enumerate(refs):
        want = ref.step(per_agent(actions, i))
        for group, names in GROUPS.items():
            for j, name in enumerate(names):
                np.testing.assert_allclose(td["next", group, "observation"][i, j].numpy(), want["obs"][name], rtol=1e-6)
                np.testing.assert_allclose(root[group, "observation"][i, j].numpy(), want["root"][name], rtol=1e-6)
                assert td["next", group, "reward"][i, j, 0].item() == pytest.approx(want["reward"][name], rel=1e-6)
                term, trunc = want["flags"][name]
                assert (
                    td["next", group, "terminated"][i, j, 0].item(),
                    td["next", group, "truncated"][i, j, 0].item(),
                ) == (
                    term,
                    trunc,
                ), (i, name)
                assert td["next", group, "done"][i, j, 0].item() == (term or trunc)
        assert td["next", "done"][i, 0].item() == want["done"]
        assert td["next", "truncated"][i, 0].item() == want["truncated"]
        assert td["next", "terminated"][i, 0].item() == (want["done"] and not want["truncated"])
        assert td["next", "reward"][i, 0].item() == pytest.approx(sum(want["reward"].values()), rel=1e-5)


def test_batched_counting_envs_match_single_envs_stepped_by_hand():
    cls = counting_parallel_env_class()
    n = 5
    env = gpu_envs.wrap([cls(max_steps=4) for _ in range(n)])
    assert env.group_map == GROUPS
    refs = [RowReference(cls(max_steps=4)) for _ in range(n)]
    root = env.reset(seed=10)
    for i, ref in enumerate(refs):
        start = ref.reset(seed=10 + i)
        for group, names in GROUPS.items():
            for j, name in enumerate(names):
                np.testing.assert_allclose(root[group, "observation"][i, j].numpy(), start[name])
    g = torch.Generator().manual_seed(0)
    masked = ended = 0
    for _ in range(14):
        actions = actions_for(env, g)
        root.update(actions)
        td, root = env.step_and_maybe_reset(root)
        masked += int((td["next", "predator", "done"].any(1) & ~td["next", "done"].unsqueeze(1)).sum())
        ended += int(td["next", "done"].sum())
        check(td, root, refs, actions)
    assert masked > 0 and ended > 5  # agents left before their env ended; rows ended and were reset


def test_collect_and_masked_resets_follow_the_reference():
    cls = counting_parallel_env_class()
    env = gpu_envs.wrap([cls(max_steps=5) for _ in range(3)])
    refs = [RowReference(cls(max_steps=5)) for _ in range(3)]
    env.reset(seed=0)
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
    g = torch.Generator().manual_seed(2)
    seen = []

    def policy(td):
        seen.append(actions_for(env, g))
        return td.update(seen[-1])

    traj = collect(env, policy, steps=6)
    for t in range(6):
        nxt_root = traj[:, t + 1] if t < 5 else env.root()
        check(traj[:, t], nxt_root, refs, seen[t])
    root = env.reset(td=env.root().set("_reset", torch.tensor([[False], [True], [False]])))
    want = refs[1].reset()
    np.testing.assert_allclose(root["prey", "observation"][1, 0].numpy(), want["prey_0"])


def test_mpe_simple_spread_matches_its_single_envs():
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    n = 3
    env = gpu_envs.make("pettingzoo/mpe2.simple_spread_v3", num_envs=n, max_cycles=4, seed=5)
    refs = [simple_spread_v3.parallel_env(max_cycles=4) for _ in range(n)]
    root = env.reset()
    obs = [ref.reset(seed=5 + i)[0] for i, ref in enumerate(refs)]
    assert env.group_map == {"agents": ["agent_0", "agent_1", "agent_2"]}
    assert env.single_action_spec["agents", "action"].shape == (3,)  # Discrete(5) per agent
    g = torch.Generator().manual_seed(0)
    for _ in range(9):
        for i in range(n):
            np.testing.assert_allclose(
                root["agents", "observation"][i].numpy(), np.stack([obs[i][a] for a in AGENTS_MPE])
            )
        actions = env.full_action_spec.rand(generator=g)
        root.update(actions)
        td, root = env.step_and_maybe_reset(root)
        for i, ref in enumerate(refs):
            sent = {a: int(actions["agents", "action"][i, k]) for k, a in enumerate(AGENTS_MPE)}
            o, r, _, trunc, _ = ref.step(sent)
            np.testing.assert_allclose(
                td["next", "agents", "observation"][i].numpy(), np.stack([o[a] for a in AGENTS_MPE])
            )
            np.testing.assert_allclose(
                td["next", "agents", "reward"][i, :, 0].numpy(), [r[a] for a in AGENTS_MPE], rtol=1e-6
            )
            assert td["next", "truncated"][i, 0].item() == all(trunc.values())
            obs[i] = ref.reset()[0] if not ref.agents else o


AGENTS_MPE = ["agent_0", "agent_1", "agent_2"]


def test_refusals_name_the_cause():
    cls = counting_parallel_env_class()
    one = cls()
    with pytest.raises(InvalidArgumentError, match="one env per row"):
        gpu_envs.wrap([one, one])
    with pytest.raises(UnknownEnvError, match="no module"):
        gpu_envs.make("pettingzoo/no_such_game_v0", num_envs=2)

    class LateJoiner(cls):
        def reset(self, seed=None, options=None):
            obs, info = super().reset(seed, options)
            self.agents = self.agents[:2]
            return {a: obs[a] for a in self.agents}, info

    env = gpu_envs.wrap([LateJoiner(), LateJoiner()])
    with pytest.raises(BackendError, match="not live after reset"):
        env.reset()


def test_check_env_passes_on_batched_parallel_envs():
    cls = counting_parallel_env_class()
    report = gpu_envs.check_env(gpu_envs.wrap([cls(max_steps=6) for _ in range(3)]), steps=30, seed=0)
    assert report.ok, report.format()


# ------------------------------------------------------------------------------ Quarantine over agent groups
def _poisoned_class(what: str):
    """The counting env whose episode 0 turns one entry non-finite at t = 2 (``what``: "obs" or "reward")."""
    base = counting_parallel_env_class()

    class Poisoned(base):
        def step(self, actions: dict):
            obs, rew, term, trunc, info = super().step(actions)
            if self.episode == 0 and self.t == 2:
                if what == "obs":
                    obs["prey_0"] = np.full_like(obs["prey_0"], np.nan)
                else:
                    rew["predator_1"] = float("inf")
            return obs, rew, term, trunc, info

    return Poisoned


@pytest.mark.parametrize("what", ["obs", "reward"])
def test_quarantine_ends_every_agent_of_a_poisoned_row_and_the_run_goes_on(what):
    from gpu_envs.wrappers import Quarantine

    cls, poisoned = counting_parallel_env_class(), _poisoned_class(what)
    rows = [cls(length=9, max_steps=9), poisoned(length=9, max_steps=9), cls(length=9, max_steps=9)]
    env = Quarantine(gpu_envs.wrap(rows))
    root = env.reset()
    g = torch.Generator().manual_seed(0)
    acted = None
    for t in range(1, 4):
        root.update(env.full_action_spec.rand(generator=g))
        if t == 2:
            acted = {group: root[group, "action"][1].clone() for group in GROUPS}
            good = {group: root[group, "observation"][1].clone() for group in GROUPS}
        td, root = env.step_and_maybe_reset(root)
        quarantined = td["next", "quarantined"].view(-1).tolist()
        assert quarantined == [False, t == 2, False]
        if t != 2:
            continue
        assert td["next", "done"].view(-1).tolist() == [False, True, False]
        for group in GROUPS:
            flags = td["next", group]
            assert flags["terminated"][1].all() and not flags["truncated"][1].any() and flags["done"][1].all()
            assert not flags["done"][[0, 2]].any()  # the other rows go on
            assert (flags["reward"][1] == 0).all()
            assert torch.equal(flags["observation"][1], good[group])  # the observation acted on: finite
            assert torch.isfinite(td["next", group, "observation"]).all()
        # the row was reset below: its next root is a fresh episode's (t = 0) observation
        fresh = cls(length=9)
        fresh.reset()
        second, _ = fresh.reset()  # episode 1's first observation
        assert root["prey", "observation"][1, 0].tolist() == pytest.approx(second["prey_0"].tolist())
    assert env.check() == 1
    records = env.records()
    assert records["row"].tolist() == [1]
    for group in GROUPS:
        assert torch.equal(records["action", group, "action"][0], acted[group])
    traj = collect(env, steps=6)  # the default health checks agree: a quarantined row is no health failure
    assert traj["next", "done"].any()
