"""collect and autograd: policies with trainable parameters, buffers a learner can train on.

collect runs its steps without autograd (the middle ones under ``torch.inference_mode``),
so these prove what that must not break: a policy whose parameters require grad
collects (it used to hit "a leaf Variable that requires grad is being used in an
in-place operation"), the buffer feeds a network that backpropagates, and nothing
collect leaves behind in the env is an inference tensor.
"""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule

import gpu_envs
from gpu_envs.rollout import collect
from gpu_envs.transforms import EpisodeStats, ObservationNorm, TransformedEnv


def _actor() -> TensorDictModule:
    net = torch.nn.Linear(4, 2)
    assert net.weight.requires_grad

    def act(td):
        logits = net(td["observation"])
        td["logits"] = logits
        td["action"] = logits.argmax(-1)
        return td

    return act, net


@pytest.mark.parametrize("steps", [1, 2, 3, 16])
def test_policy_with_trainable_parameters_collects(steps):
    env = gpu_envs.make("CartPole-v1", num_envs=8, seed=0)
    act, net = _actor()
    for _ in range(3):  # the first call lays the buffer out, later ones reuse it
        traj = collect(env, act, steps=steps)
    assert traj["logits"].shape == (8, steps, 2)
    assert not traj["logits"].requires_grad and net.weight.grad is None
    expected = net(traj["observation"]).detach()
    assert torch.allclose(traj["logits"], expected)


def test_a_network_fed_from_the_buffer_backpropagates():
    env = gpu_envs.make("CartPole-v1", num_envs=16, seed=0)
    act, _ = _actor()
    traj = collect(env, act, steps=8)
    critic = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    loss = (critic(traj["observation"]) - traj["next", "reward"]).pow(2).mean()
    loss = loss + critic(traj["next", "observation"].nan_to_num()).mean()
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in critic.parameters())
    assert not any(t.is_inference() for t in traj.values(True, True))


def test_nothing_collect_leaves_in_the_env_is_an_inference_tensor():
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=8, seed=0), EpisodeStats(), ObservationNorm())
    collect(env, steps=10)
    root = env.root()
    assert not any(t.is_inference() for t in root.values(True, True))
    raw = env.env.backend.env
    raw.state[:, 0] = 0.0  # the documented in-place write still works after collect
    raw.elapsed_steps.add_(1)
    critic = torch.nn.Linear(4, 1)
    critic(root["observation"]).sum().backward()  # a root fed to a network that saves it
    td = env.step(root.set("action", torch.zeros(8, dtype=torch.int64)))
    assert td["next", "observation"].shape == (8, 4)


def test_rollout_with_a_trainable_policy():
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    act, _ = _actor()
    traj = env.rollout(5, act)
    assert traj["logits"].shape == (4, 5, 2) and not traj["logits"].is_inference()
