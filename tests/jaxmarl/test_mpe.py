"""JaxMARL's MPE envs through gpu_envs' JAX backend, against JaxMARL driven by hand with the same keys.

Every transition is compared agent by agent with :func:`tests.jaxmarl.oracle.reference`
(``step_env`` and ``reset`` per row): the observations, every agent's TRUE final
observation on rows that ended (which JaxMARL's own ``step`` drops), the next roots (which
must be what JaxMARL's own ``step`` returns), each agent's reward, the team reward and the
flags. MPE ends an episode only at its horizon: ``done = state.step >= max_steps`` is
checked BEFORE the step is counted, so an episode lasts ``max_steps + 1`` steps, and every
end is ``truncated``.

A masked reset of some rows puts their episodes out of step with the others, so that a
step ends a few rows (``reset_batch=2``: they are gathered and reset) and another ends
more (every row is reset and the ended ones selected): both reset paths run.
"""

from __future__ import annotations

import jaxmarl
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.rollout import collect
from tests.jaxmarl.oracle import assert_matches, batched, group_action, random_actions, reference
from tests.sync_guard import no_sync

pytestmark = pytest.mark.slow  # JIT compiles of the vmapped MPE step and of JaxMARL's own functions
N, SEED = 4, 5


@pytest.fixture(scope="module")
def spread():
    env = gpu_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=N, device="cpu", reset_batch=2)
    yield env
    env.close()


@pytest.fixture(scope="module")
def raw_spread():
    return jaxmarl.make("MPE_simple_spread_v3")


def episode_lengths(done: np.ndarray, restarts: dict[int, int] | None = None) -> list[int]:
    """The lengths of every row's finished episodes (``restarts[row]``: a masked reset before that step)."""
    lengths = []
    for row in range(done.shape[0]):
        start = 0
        for t in np.flatnonzero(done[row]):
            restart = (restarts or {}).get(row)
            if restart is not None and start <= restart <= t:
                start = restart
            lengths.append(int(t) + 1 - start)
            start = int(t) + 1
    return lengths


def test_simple_spread_matches_jaxmarl_stepped_by_hand(spread, raw_spread):
    steps, resets = 60, {10: [0]}  # row 0 restarts at step 10: rows 1-3 end together, row 0 alone
    actions = random_actions(raw_spread, N, steps, seed=1)
    want = reference(raw_spread, actions, SEED, resets)
    got = batched(spread, actions, SEED, resets)
    assert_matches(spread, got, want, ending="truncated")
    assert spread.group_map == {"agents": ["agent_0", "agent_1", "agent_2"]}
    done = want["done"]
    per_step = done.sum(0)
    assert (per_step == 1).any() and (per_step == 3).any(), "both reset paths (gathered rows, every row) ran"
    # MPE's only ending is its horizon: every episode lasts max_steps + 1 = 26 steps
    assert sorted(set(episode_lengths(done, restarts={0: 10}))) == [26]
    for agent in raw_spread.agents:
        # the next root is what JaxMARL's own auto-resetting step returns ...
        np.testing.assert_allclose(want[f"root/{agent}"], want[f"own/{agent}"], rtol=1e-6, atol=1e-6)
        # ... and on rows that ended it has lost the final observation, which gpu_envs keeps
        final, own = got[f"final/{agent}"][done], want[f"own/{agent}"][done]
        assert (np.abs(final - own).max(-1) > 1e-3).all()
        # continuity: a true final observation is one step from the observation before it
        before = got[f"obs/{agent}"][done]
        assert (np.linalg.norm(final - before, axis=-1) < np.linalg.norm(own - before, axis=-1)).all()


def test_continuous_actions_match_jaxmarl_stepped_by_hand():
    raw = jaxmarl.make("MPE_simple_spread_v3", action_type="Continuous", max_steps=9)
    env = gpu_envs.wrap(raw, num_envs=N, device="cpu")
    spec = env.full_action_spec["agents", "action"]
    assert spec.shape == (N, 3, 5) and spec.dtype == torch.float32
    assert float(spec.low.min()) == 0.0 and float(spec.high.max()) == 1.0
    actions = random_actions(raw, N, 25, seed=2)
    want = reference(raw, actions, SEED, {4: [1, 3]})
    assert_matches(env, batched(env, actions, SEED, {4: [1, 3]}), want, ending="truncated")
    assert sorted(set(episode_lengths(want["done"], restarts={1: 4, 3: 4}))) == [10]
    env.close()


def test_two_groups_whose_specs_differ_match_jaxmarl_stepped_by_hand():
    raw = jaxmarl.make("MPE_simple_tag_v3", max_steps=12)
    env = gpu_envs.wrap(raw, num_envs=N, device="cpu", reset_batch=2)
    assert env.group_map == {"adversary": ["adversary_0", "adversary_1", "adversary_2"], "agent": ["agent_0"]}
    obs = env.full_observation_spec
    assert obs["adversary", "observation"].shape == (N, 3, 16) and obs["agent", "observation"].shape == (N, 1, 14)
    actions = random_actions(raw, N, 40, seed=3)
    resets = {5: [1, 2]}
    want = reference(raw, actions, SEED, resets)
    got = batched(env, actions, SEED, resets)
    assert_matches(env, got, want, ending="truncated")
    assert any(want[f"reward/{a}"].any() for a in raw.agents), "some rewards are not zero (tags happened)"
    assert want["done"].sum() >= 8
    env.close()


def test_collect_matches_jaxmarl_stepped_by_hand(spread, raw_spread):
    spread.reset(seed=SEED)
    traj = collect(spread, steps=30).clone()  # random actions from the env's generator
    actions = {a: traj["agents", "action"][:, :, j].numpy() for j, a in enumerate(spread.group_map["agents"])}
    want = reference(raw_spread, actions, SEED)
    assert want["done"].sum() == N, "every row ended once (at step 26)"
    np.testing.assert_array_equal(traj["next", "truncated"][..., 0].numpy(), want["done"])
    np.testing.assert_array_equal(traj["next", "terminated"].numpy(), False)
    team = sum(want[f"reward/{a}"] for a in raw_spread.agents)
    np.testing.assert_allclose(traj["next", "reward"][..., 0].numpy(), team, rtol=1e-5, atol=1e-5)
    for j, agent in enumerate(spread.group_map["agents"]):
        np.testing.assert_allclose(
            traj["agents", "observation"][:, :, j].numpy(), want[f"obs/{agent}"], rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(
            traj["next", "agents", "observation"][:, :, j].numpy(), want[f"final/{agent}"], rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(
            traj["next", "agents", "reward"][:, :, j, 0].numpy(), want[f"reward/{agent}"], rtol=1e-5, atol=1e-5
        )
    # the step after an end starts from the reset observation (the next root), not the final one
    ended = torch.from_numpy(want["done"][:, :-1])
    roots = np.stack([want[f"root/{a}"][:, :-1] for a in spread.group_map["agents"]], 2)
    np.testing.assert_allclose(
        traj["agents", "observation"][:, 1:][ended].numpy(), roots[ended.numpy()], rtol=1e-5, atol=1e-5
    )


def test_check_env_passes_and_steps_never_sync(spread):
    report = gpu_envs.check_env(spread, steps=60, name="jaxmarl/MPE_simple_spread_v3")
    assert report.ok, report.format()
    td = spread.reset(seed=0)
    td.update(spread.full_action_spec.rand())
    td, td = spread.step_and_maybe_reset(td)  # the first step validates (allowed to sync)
    ended = torch.zeros(())
    with no_sync():
        for _ in range(30):
            td.update(spread.full_action_spec.rand())
            td, root = spread.step_and_maybe_reset(td)
            ended += td["next", "done"].sum()
            td = root
    assert ended.item() == N, "the guarded steps covered an auto-reset of every row"


def test_snapshots_restore_rows_exactly(spread, raw_spread):
    actions = random_actions(raw_spread, N, 12, seed=4)
    td = spread.reset(seed=1)
    for t in range(20):  # near the end of the first episodes: the continuation crosses a reset
        td.update(group_action(spread, random_actions(raw_spread, N, 1, seed=t), 0))
        td, td = spread.step_and_maybe_reset(td)
    snapshot = spread.get_state()

    def continuation():
        out = []
        nonlocal td
        for t in range(12):
            td.update(group_action(spread, actions, t))
            td, root = spread.step_and_maybe_reset(td)
            out.append(td["next", "agents", "observation"].clone())
            td = root
        return torch.stack(out, 1)

    first = continuation()
    spread.set_state(snapshot)
    td = spread.root()
    assert torch.equal(continuation(), first)
