"""torch.compile traces the built-in envs' step, BatchedEnv's step and collect's compiled
chunk as ONE graph each: ``torch._dynamo.explain`` counts 0 graph breaks.

(A ``torch.Generator`` in the reset draws used to cut every compiled step into ~20 graphs;
the counter-based generator of :mod:`gpu_envs.builtin.counter_rng` is plain integer ops.)
Both batch sizes are covered: 512 rows take the eager-only row-view paths when not traced.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.builtin import CartPoleEnv, PendulumEnv
from gpu_envs.rollout import RolloutBuffer
from gpu_envs.rollout.compiled import CompiledLoop
from gpu_envs.transforms import EpisodeStats, ObservationNorm, RewardScale, TransformedEnv

SIZES = [8, 512]


def breaks(fn, *args) -> tuple[int, int, list[str]]:
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    return explained.graph_count, explained.graph_break_count, [str(b.reason)[:300] for b in explained.break_reasons]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
def test_builtin_env_step_is_one_graph(cls, n):
    env = cls(num_envs=n, seed=0)
    env.reset()
    action = torch.ones(n, dtype=torch.long) if cls is CartPoleEnv else torch.zeros(n, 1)
    assert breaks(env.step, action) == (1, 0, [])


def batched(env_id, n):
    return gpu_envs.make(env_id, num_envs=n, device="cpu", seed=0)


def transformed(env_id, n):
    return TransformedEnv(batched(env_id, n), EpisodeStats(), ObservationNorm(), RewardScale(0.1))


def stepped_root(env):
    td = env.reset()
    td["action"] = env.action_spec.rand()
    env.step_and_maybe_reset(td)  # the first step validates (reads values on the host) once
    td = env.root()
    td["action"] = env.action_spec.rand()
    return td


@pytest.mark.slow
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("make", [batched, transformed])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_step_and_maybe_reset_is_one_graph(env_id, make, n):
    env = make(env_id, n)
    assert breaks(env.step_and_maybe_reset, stepped_root(env)) == (1, 0, [])


def zero_policy(td):
    td["action"] = torch.zeros_like(td["observation"][:, :1]).squeeze(-1).long()
    return td


class LinearPolicy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    @torch.no_grad()
    def forward(self, td):
        logits = self.net(td["observation"])
        td["action"] = logits.argmax(-1)
        td["logits"] = logits
        return td


@pytest.mark.slow
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("policy", [None, zero_policy, LinearPolicy()], ids=["random", "function", "module"])
def test_collect_compiled_chunk_is_one_graph(policy, n):
    env = batched("CartPole-v1", n)
    buffer = RolloutBuffer(env, 8)
    loop = CompiledLoop(env, policy, buffer)
    loop.run()  # the first chunk runs eagerly: validation and the buffer's layout
    actions = None
    if policy is None:
        actions = [env.action_spec.rand(generator=env.generator) for _ in range(loop.k)]
    columns = [x.narrow(1, 0, loop.k) for x in buffer.storage()]
    assert loop.k == 8
    assert breaks(loop.chunk, env.root(), actions, columns) == (1, 0, [])  # the form with the writes in the graph
    assert loop.writes_outside  # on the CPU the chunk returns its values and the writes follow eagerly
    assert breaks(loop.chunk_values, env.root(), actions) == (1, 0, [])
