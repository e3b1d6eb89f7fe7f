"""The hot path never synchronises host and device (docs/DESIGN.md, hot-path rule 1).

A dispatch mode fails on every syncing aten op; on CUDA machines the same test also
runs under ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
import gpu_envs.utils.tensordicts as tds
from gpu_envs.builtin import CartPoleEnv
from gpu_envs.rollout import collect
from tests.fakes import CountingTorchVectorEnv
from tests.sync_guard import SyncError, SyncGuard, no_sync

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class _PlainCartPole(CartPoleEnv):
    raw_step = None


def _builders(device):
    return {
        "CartPole-v1": lambda: gpu_envs.make("CartPole-v1", num_envs=16, device=device, seed=0),
        "Pendulum-v1": lambda: gpu_envs.make("Pendulum-v1", num_envs=16, device=device, seed=0),
        "CartPole-no-final-obs": lambda: gpu_envs.make(
            "CartPole-v1", num_envs=16, device=device, seed=0, expose_final_obs=False
        ),
        "Pendulum-no-final-obs": lambda: gpu_envs.make(
            "Pendulum-v1", num_envs=16, device=device, seed=0, expose_final_obs=False
        ),
        # the plain gymnasium-shaped step of a built-in env (no raw_step fast path)
        "CartPole-plain-step": lambda: gpu_envs.wrap(_PlainCartPole(16, device=device, seed=0)),
        "user-env-final-obs": lambda: gpu_envs.wrap(CountingTorchVectorEnv(16, device, final_obs="info")),
        "user-env-masked-final-obs": lambda: gpu_envs.wrap(CountingTorchVectorEnv(16, device, final_obs="masked")),
        "user-env-no-final-obs": lambda: gpu_envs.wrap(CountingTorchVectorEnv(16, device, final_obs="none")),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(_builders("cpu")))
def test_step_and_rollout_never_sync(device, name):
    env = _builders(device)[name]()
    td = env.reset()
    td["action"] = env.action_spec.rand(generator=env.generator)
    td, td = env.step_and_maybe_reset(td)  # the first step validates (allowed to sync)
    ended = torch.zeros((), device=env.device)
    with no_sync():
        for _ in range(100):
            td["action"] = env.action_spec.rand(generator=env.generator)
            td, root = env.step_and_maybe_reset(td)
            ended += td["next", "done"].sum()
            td = root
        traj = env.rollout(20)
    assert traj.batch_size == torch.Size([16, 20])
    if "Pendulum" not in name:
        assert ended.item() > 0, "the guarded steps covered auto-resets"


def test_guard_catches_a_sync():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu")
    td = env.reset()
    with pytest.raises(SyncError), SyncGuard():
        bool(td["done"].any())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["CartPole-v1", "user-env-final-obs"])
def test_torchrl_style_step_then_masked_reset_never_syncs(device, name):
    """step(), then reset(td with "_reset" = done): the partial reset is sync-free too."""
    env = _builders(device)[name]()
    td = env.reset()
    td["action"] = env.action_spec.rand(generator=env.generator)
    td, td = env.step_and_maybe_reset(td)  # first step validates outside the guard
    ended = torch.zeros((), device=env.device)
    with no_sync():
        for _ in range(60):
            td["action"] = env.action_spec.rand(generator=env.generator)
            td = env.step(td)
            nxt = td["next"]
            ended += nxt["done"].sum()
            td = env.reset(td=nxt.exclude("reward").set("_reset", nxt["done"]))
    assert ended.item() > 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(_builders("cpu")))
def test_collect_never_syncs(device, name):
    """collect's loop (inference mode in the middle, no_grad at its ends, buffer writes) is sync-free."""
    env = _builders(device)[name]()
    net = torch.nn.Linear(env.observation_spec["observation"].shape[-1], 1).to(device)

    def policy(td):
        td["value"] = net(td["observation"].float())
        td["action"] = env.action_spec.rand(generator=env.generator)
        return td

    collect(env, policy, steps=12)  # lays the buffer out, validates the first step
    with no_sync():
        for _ in range(3):
            traj = collect(env, policy, steps=12)
    assert traj["value"].shape == (16, 12, 1)


@pytest.mark.parametrize("device", DEVICES)
def test_public_tensordict_path_never_syncs(device, monkeypatch):
    """The path other tensordict versions take (public constructor) is sync-free too."""
    monkeypatch.setattr(tds, "DIRECT", False)
    env = _builders(device)["user-env-masked-final-obs"]()
    env.rollout(3)
    with no_sync():
        traj = env.rollout(30, reset=False)
    assert traj["next", "final_obs_missing"].any()
