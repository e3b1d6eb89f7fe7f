"""``gpu_envs.replay.ReplayBuffer``: n-step transitions equal a sequential reference, sampling is uniform and sync-free.

The data come from the counting env (tests/fakes.py) through gpu_envs: every observation
encodes (env, episode, step), ends are terminations or truncations, and final
observations are true ones (or placeholders with ``final_obs="masked"``). The reference
keeps each env's transitions in a Python list, the last ``H`` of them, and builds each
n-step target with a plain loop.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu_envs
from gpu_envs.replay import ReplayBuffer
from gpu_envs.rollout import collect
from tests.fakes import CountingTorchVectorEnv
from tests.sync_guard import no_sync

N = 3
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class SequentialReference:
    """Each env's transitions in order (the last ``horizon`` kept); n-step targets by a plain loop."""

    def __init__(self, horizon: int) -> None:
        self.horizon = horizon
        self.rows: list[list[dict]] = [[] for _ in range(N)]

    def extend(self, td) -> None:
        td = td.unsqueeze(1) if td.batch_dims == 1 else td
        for i in range(N):
            for t in range(td.batch_size[1]):
                step = td[i, t]
                previous = self.rows[i][-1] if self.rows[i] else None
                obs = step["observation"].numpy()
                continues = (
                    previous is not None and not previous["done"] and np.array_equal(obs, previous["next_observation"])
                )
                self.rows[i].append(
                    {
                        "observation": obs,
                        "action": step["action"].numpy(),
                        "next_observation": step["next", "observation"].numpy(),
                        "reward": float(step["next", "reward"]),
                        "terminated": bool(step["next", "terminated"]),
                        "truncated": bool(step["next", "truncated"]),
                        "done": bool(step["next", "done"]),
                        "missing": bool(step["next", "final_obs_missing"]),
                        "continues": continues,
                    }
                )

    def n_step(self, i: int, position: int, n: int, gamma: float) -> dict:
        kept = self.rows[i][-self.horizon :]
        reward, k = 0.0, 0
        while True:
            step = kept[position + k]
            reward += gamma**k * step["reward"]
            k += 1
            if step["done"] or k == n or position + k == len(kept) or not kept[position + k]["continues"]:
                break
        first = kept[position]
        return {
            "observation": first["observation"],
            "action": first["action"],
            "next_observation": step["next_observation"],
            "reward": reward,
            "terminated": step["terminated"],
            "truncated": step["truncated"],
            "missing": step["missing"],
            "steps": k,
            "discount": 0.0 if step["terminated"] else gamma**k,
        }


def run_ops(ops, horizon: int, final_obs: str = "info", device: str = "cpu", policy=None):
    """Feed the same data to a ReplayBuffer and the reference: collects [N, T], single steps [N], resets."""
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, device=device, final_obs=final_obs), device=device)
    rb, ref = ReplayBuffer(N * horizon + (horizon % 2)), SequentialReference(horizon)  # capacity // N steps per env
    env.reset(seed=0)
    for op in ops:
        if op == "reset":  # the next data does not continue the stored steps
            env.reset()
            continue
        if op == "step":
            td = env.root().clone()
            td.set("action", env.action_spec.rand())
            td, _ = env.step_and_maybe_reset(td)
            data = td
        else:
            data = collect(env, policy, steps=op).clone()
        rb.extend(data)
        ref.extend(data.cpu())
    return rb, ref


def assert_matches_reference(rb, ref, n: int, gamma: float) -> None:
    filled = len(ref.rows[0][-ref.horizon :])
    assert len(rb) == N * filled
    env = torch.arange(N).repeat_interleave(filled)
    position = torch.arange(filled).repeat(N)
    got = rb.gather(env, position, n_step=n, gamma=gamma).cpu()
    for b in range(env.shape[0]):
        want = ref.n_step(int(env[b]), int(position[b]), n, gamma)
        where = f"env {int(env[b])}, position {int(position[b])}, n={n}, gamma={gamma}"
        np.testing.assert_array_equal(got["observation"][b].numpy(), want["observation"], err_msg=where)
        np.testing.assert_array_equal(got["action"][b].numpy(), want["action"], err_msg=where)
        np.testing.assert_array_equal(got["next", "observation"][b].numpy(), want["next_observation"], err_msg=where)
        assert float(got["next", "reward"][b]) == pytest.approx(want["reward"], rel=1e-6), where
        assert float(got["next", "discount"][b]) == pytest.approx(want["discount"], rel=1e-6), where
        assert bool(got["next", "terminated"][b]) == want["terminated"], where
        assert bool(got["next", "truncated"][b]) == want["truncated"], where
        assert bool(got["next", "final_obs_missing"][b]) == want["missing"], where
        assert int(got["next", "steps"][b]) == want["steps"], where


OPS = st.lists(st.one_of(st.integers(1, 6), st.just("step"), st.just("reset")), min_size=1, max_size=8)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    ops=OPS,
    horizon=st.integers(1, 12),
    n=st.integers(1, 5),
    gamma=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    final_obs=st.sampled_from(["info", "masked"]),
)
def test_n_step_transitions_match_the_sequential_reference(ops, horizon, n, gamma, final_obs):
    """Partial fills, wrap-around (within one extend too), [N] and [N, T] extends, resets, placeholders."""
    if all(op == "reset" for op in ops):
        ops = [*ops, 2]
    rb, ref = run_ops(ops, horizon, final_obs)
    assert_matches_reference(rb, ref, n, gamma)


@pytest.mark.parametrize("device", DEVICES)
def test_targets_stop_at_terminations_and_bootstrap_through_truncations(device):
    """A hand-checked case: env 0's first episode is truncated after 3 steps, env 2's terminated."""
    zero = lambda td: td.set("action", torch.zeros(N, dtype=torch.int64, device=device))  # noqa: E731
    rb, ref = run_ops([5], horizon=8, device=device, policy=zero)  # rewards: 100 * env + 10 * episode + step
    batch = rb.gather(torch.tensor([0, 2, 0]), torch.tensor([0, 0, 1]), n_step=4, gamma=0.5).cpu()
    # env 0 from (0, 0, 0): 3 steps to the truncation at (0, 0, 3): rewards 1, 2, 3
    assert batch["next", "observation"][0].tolist() == [0, 0, 3] and bool(batch["next", "truncated"][0])
    assert float(batch["next", "reward"][0]) == 1 + 0.5 * 2 + 0.25 * 3 and float(batch["next", "discount"][0]) == 0.125
    # env 2 from (2, 0, 0): terminated at (2, 0, 3): no bootstrap
    assert bool(batch["next", "terminated"][1]) and float(batch["next", "discount"][1]) == 0.0
    assert float(batch["next", "reward"][1]) == pytest.approx(201 + 0.5 * 202 + 0.25 * 203)
    assert_matches_reference(rb, ref, 4, 0.5)


def test_sampling_is_uniform_and_reproducible_with_a_generator():
    rb, _ = run_ops([4, 4], horizon=5)  # 5 steps kept of 3 envs: 15 transitions
    draw = lambda seed: rb.sample(3000, n_step=2, gamma=0.9, generator=torch.Generator().manual_seed(seed))  # noqa: E731
    a, b, c = draw(7), draw(7), draw(8)
    assert (a == b).all() and not (a["observation"] == c["observation"]).all()
    counts = Counter(map(tuple, a["observation"].tolist()))
    assert len(counts) == 15 and min(counts.values()) > 130 and max(counts.values()) < 280  # 200 expected each
    elsewhere = SimpleNamespace(device=torch.device("cuda"))  # a CUDA generator for this CPU buffer
    with pytest.raises(gpu_envs.InvalidArgumentError, match="generator lives on cuda"):
        rb.sample(4, generator=elsewhere)


@pytest.mark.parametrize("device", DEVICES)
def test_extend_and_sample_never_sync(device):
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, device=device), device=device)
    rb = ReplayBuffer(N * 10, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    rb.extend(collect(env, None, steps=4))  # the first extend allocates (allowed to sync)
    with no_sync():
        for _ in range(5):
            rb.extend(collect(env, None, steps=3))
            td = env.root().clone().set("action", env.action_spec.rand())
            rb.extend(env.step_and_maybe_reset(td)[0])
            batch = rb.sample(64, n_step=3, gamma=0.99, generator=generator)
    assert batch.batch_size == (64,) and batch.device == torch.device(device)


def test_bad_inputs_get_clear_errors():
    env = gpu_envs.wrap(CountingTorchVectorEnv(N))
    traj = collect(env, None, steps=2)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="capacity"):
        ReplayBuffer(0)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="less than one step of 3 envs"):
        ReplayBuffer(2).extend(traj)
    rb = ReplayBuffer(30)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="empty"):
        rb.sample(4)
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"\[N\] \(one step\) or \[N, T\]"):
        rb.extend(traj.unsqueeze(0))
    with pytest.raises(gpu_envs.InvalidArgumentError, match="lacks"):
        rb.extend(traj.exclude(("next", "reward")))
    rb.extend(traj)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="holds 3 envs"):
        rb.extend(traj[:2])
    with pytest.raises(gpu_envs.InvalidArgumentError, match="dtype"):
        rb.extend(traj.clone().set("action", traj["action"].float()))
    for bad in ({"batch_size": 0}, {"batch_size": 4, "n_step": 0}, {"batch_size": 4, "gamma": 1.5}):
        with pytest.raises(gpu_envs.InvalidArgumentError):
            rb.sample(**bad)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_slots_never_written_do_not_leak_into_targets(n):
    """A partly filled buffer's unwritten slots hold whatever torch.empty left (NaN here): never in a target."""
    rb, ref = run_ops([2], horizon=8)
    for storage in rb._storage.values():
        if storage.is_floating_point():
            storage[:, 2:] = float("nan")  # the 6 slots per env that no extend wrote
    assert_matches_reference(rb, ref, n, gamma=0.9)


@pytest.mark.parametrize("n", [1, 3])
def test_the_readme_target_line_is_one_column_for_every_n_step(n):
    """``reward + discount * q(next_obs)`` stays ``[B, 1]``: a ``[B]`` reward would broadcast it to ``[B, B]``."""
    rb, ref = run_ops([6], horizon=8)
    batch = rb.sample(5, n_step=n, gamma=0.9, generator=torch.Generator().manual_seed(0))
    assert batch["next", "reward"].shape == (5, 1) and batch["next", "discount"].shape == (5, 1)
    q = lambda obs: obs.float().sum(dim=-1, keepdim=True)  # noqa: E731  -- a critic's [B, 1] output
    target = batch["next", "reward"] + batch["next", "discount"] * q(batch["next", "observation"])
    assert target.shape == (5, 1)
    assert_matches_reference(rb, ref, n, gamma=0.9)


def test_gather_refuses_positions_and_rows_that_hold_no_transition():
    """3 steps stored: position 3 or later (and a row past N) would read slots no extend wrote."""
    rb, ref = run_ops([3], horizon=8)
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"position.*\[0, 3\).*7"):
        rb.gather(torch.tensor([0]), torch.tensor([7]))
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"position.*-1"):
        rb.gather(torch.tensor([0]), torch.tensor([-1]))
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"env.*\[0, 3\).*3"):
        rb.gather(torch.tensor([3]), torch.tensor([0]))
    with pytest.raises(gpu_envs.InvalidArgumentError, match="the same shape"):
        rb.gather(torch.tensor([0, 1]), torch.tensor([0]))
    got = rb.gather(1, 2, n_step=1)  # plain ints name one transition
    assert got.batch_size == (1,) and got["observation"][0].tolist() == ref.rows[1][2]["observation"].tolist()


def test_numpy_integers_count_as_ints_and_bad_generators_are_named():
    rb, _ = run_ops([3], horizon=4)
    rb2 = ReplayBuffer(np.int64(30))
    assert rb2.capacity == 30 and type(rb2.capacity) is int
    assert rb.sample(np.int64(4), n_step=np.int32(2)).batch_size == (4,)
    for bad in (0, 1.5, "cpu"):
        with pytest.raises(gpu_envs.InvalidArgumentError, match=r"torch\.Generator"):
            rb.sample(4, generator=bad)


def test_extending_with_no_steps_stores_nothing():
    """An ``[N, 0]`` trajectory (``collect(steps=0)``-shaped) is a no-op, first extend or later."""
    env = gpu_envs.wrap(CountingTorchVectorEnv(N))
    traj = collect(env, None, steps=2).clone()
    rb = ReplayBuffer(30)
    rb.extend(traj[:, :0])
    assert len(rb) == 0
    rb.extend(traj)
    rb.extend(traj[:, :0])
    assert len(rb) == 2 * N
