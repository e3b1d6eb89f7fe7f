"""Compiled and graph-captured collections give the same transitions as eager ones.

* ``compile=True`` (``K``-step chunks of policy + env step + buffer writes under
  torch.compile) against eager, on the CPU: exactly on the counting env (integer-valued
  observations, placeholders included), and on the built-in CartPole (actions and flags
  exactly, float physics to rounding).
* ``cudagraph=True`` needs CUDA. Its logic -- warm-up, state pinning, re-binding,
  generator handling, refusal of Python-side per-step state -- is checked here on the
  CPU with an emulated graph: a dispatch mode records the ATen ops of the capture and
  ``replay`` re-runs them on the very same tensors, which is what a CUDA graph does
  with its static memory. ``benchmarks/gpu_check.py`` runs the real thing on a GPU.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError, RolloutError
from gpu_envs.rollout import RolloutBuffer, collect
from gpu_envs.rollout.cache import collect_cache
from gpu_envs.rollout.compiled import chunk_length, compiled_loop
from gpu_envs.rollout.cudagraph import GraphCollector
from tests.fakes import CountingTorchVectorEnv
from tests.graph_emulation import EmulatedGraphs
from tests.sync_guard import no_sync

N = 6


def collect_buffer(env, steps):
    """The buffer collect(env, steps=steps) caches on the env."""
    return collect_cache(env).buffers[steps]


def count_policy(td):
    """Deterministic, observation-dependent actions: the policy is part of what is compiled."""
    obs = td["observation"]
    td["action"] = ((obs[:, 0] + obs[:, 2]) % 2).long()
    td["score"] = obs.sum(-1, keepdim=True) * 0.5
    return td


def assert_same(a, b, float_exact=True, tol=1e-5):
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        x, y = a[key], b[key]
        if x.is_floating_point() and not float_exact:
            torch.testing.assert_close(x, y, atol=tol, rtol=tol, equal_nan=True, msg=str(key))
        elif x.is_floating_point():
            assert torch.equal(torch.isnan(x), torch.isnan(y)), key
            assert torch.equal(x.nan_to_num(-1.5), y.nan_to_num(-1.5)), key
        else:
            assert torch.equal(x, y), key


def counting_runs(n_calls, steps, **kw):
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs="masked"))
    env.reset(seed=0)
    return torch.cat([collect(env, count_policy, steps=steps, **kw).clone() for _ in range(n_calls)], dim=1)


@pytest.mark.slow
def test_compiled_collect_equals_eager_on_counting_env():
    eager = counting_runs(3, 20)
    compiled = counting_runs(3, 20, compile=True)
    assert_same(eager, compiled)
    assert compiled["next", "final_obs_missing"].any() and compiled["next", "truncated"].any()
    assert compiled["score"].shape == (N, 60, 1)


@pytest.mark.slow
def test_compiled_cartpole_equals_eager():
    def run(compile):
        env = gpu_envs.make("CartPole-v1", num_envs=64, device="cpu", seed=3)
        return torch.cat([collect(env, None, steps=25, compile=compile).clone() for _ in range(2)], dim=1)

    eager, compiled = run(False), run(True)
    assert eager["next", "done"].any(), "auto-resets inside the compared window"
    # random actions and resets come from the same generators: identical; physics to rounding
    assert_same(eager, compiled, float_exact=False)


def test_chunk_length_divides_the_collection_and_shrinks_with_n():
    assert [chunk_length(t, 8) for t in (1, 7, 16, 20, 25, 31, 64)] == [1, 7, 8, 5, 5, 1, 8]
    assert chunk_length(64, 2048) == 4 and chunk_length(64, 4096) == 4 and chunk_length(6, 2048) == 3
    assert chunk_length(64, 1 << 20) == 2 and chunk_length(63, 1 << 20) == 1


@pytest.mark.slow
def test_compiled_collect_refuses_a_key_the_buffer_lacks():
    calls = []

    def policy(td):
        calls.append(1)
        td["action"] = torch.zeros(N, dtype=torch.long)
        if len(calls) > 4:  # a key the first collection did not have
            td["extra"] = torch.ones(N, 1)
        return td

    env = gpu_envs.wrap(CountingTorchVectorEnv(N))
    buf = RolloutBuffer(env, 2)
    collect(env, policy, buffer=buf, compile=True)  # the first chunk: eager, binds the layout
    collect(env, policy, buffer=buf, compile=True)  # compiled
    with pytest.raises(RolloutError, match=r"keys \[\('extra',\)\] that this RolloutBuffer was not laid out for"):
        collect(env, policy, buffer=buf, compile=True)


@pytest.mark.slow
def test_compiled_chunks_run_eagerly_under_a_dispatch_mode_and_compile_after():
    """torch.compile cannot trace under a TorchDispatchMode (and would never retry a skipped
    frame): there the chunk runs eagerly, sync-free, and compiles once the mode is gone."""
    env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
    eager_env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
    buf, eager_buf = RolloutBuffer(env, 2), RolloutBuffer(eager_env, 2)
    out = [collect(env, buffer=buf, compile=True).clone()]  # eager first chunk
    with no_sync():
        out.append(collect(env, buffer=buf, compile=True).clone())
    loop = compiled_loop(env, None, buf)
    assert not loop.compiled
    out.append(collect(env, buffer=buf, compile=True).clone())
    assert loop.compiled
    eager = torch.cat([collect(eager_env, buffer=eager_buf).clone() for _ in range(3)], dim=1)
    assert_same(eager, torch.cat(out, dim=1), float_exact=False)


@pytest.mark.slow
def test_compiled_collect_with_a_trainable_policy_feeds_a_learner():
    net = torch.nn.Linear(4, 2)  # parameters require grad

    def policy(td):
        logits = net(td["observation"])
        td["action"] = logits.argmax(-1)
        td["logits"] = logits
        return td

    env = gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0)
    for _ in range(3):  # eager first chunk, then compiled
        traj = collect(env, policy, steps=4, compile=True)
    assert compiled_loop(env, policy, collect_buffer(env, 4)).compiled
    assert not traj["logits"].requires_grad
    loss = net(traj["observation"]).logsumexp(-1).mean()
    loss.backward()
    assert net.weight.grad is not None and bool(torch.isfinite(net.weight.grad).all())


def test_cudagraph_on_cpu_is_a_clear_error():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    with pytest.raises(InvalidArgumentError, match=r"cudagraph=True needs an env on a CUDA device"):
        collect(env, steps=4, cudagraph=True)


# ---------------------------------------------------------------------------
# CUDA graph logic, emulated on the CPU (tests/graph_emulation.py)
# ---------------------------------------------------------------------------


def graph_runs(make_env, policy, n_calls, steps, between=None):
    env = make_env()
    buf = RolloutBuffer(env, steps)
    collector = GraphCollector(env, policy, buf, api=EmulatedGraphs())
    out = []
    for i in range(n_calls):
        out.append(collector.collect().clone())
        if between is not None:
            between(env, i)
    return torch.cat(out, dim=1), collector, env


def eager_runs(make_env, policy, n_calls, steps, between=None):
    env = make_env()
    buf = RolloutBuffer(env, steps)
    out = []
    for i in range(n_calls):
        out.append(collect(env, policy, buffer=buf).clone())
        if between is not None:
            between(env, i)
    return torch.cat(out, dim=1)


def counting_env():
    env = gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs="masked"))
    env.reset(seed=0)
    return env


def cartpole_env():
    return gpu_envs.make("CartPole-v1", num_envs=16, device="cpu", seed=5)


def pendulum_env():
    return gpu_envs.make("Pendulum-v1", num_envs=16, device="cpu", seed=5, max_episode_steps=7)


def transformed_env():
    """Transforms keep state too (running returns, running mean/variance): it must be pinned."""
    from gpu_envs.transforms import EpisodeStats, ObservationNorm, RewardScale, TransformedEnv

    return TransformedEnv(cartpole_env(), EpisodeStats(), ObservationNorm(), RewardScale(0.5))


@pytest.mark.parametrize(
    ("make_env", "policy"),
    [
        (counting_env, count_policy),
        (counting_env, None),
        (cartpole_env, None),
        (pendulum_env, None),
        (transformed_env, None),
    ],
    ids=["counting-policy", "counting-random", "cartpole-random", "pendulum-random", "transformed-cartpole"],
)
def test_graph_replays_equal_eager_collections(make_env, policy):
    graphed, collector, env = graph_runs(make_env, policy, 4, 15)
    assert collector.graph is not None and collector.graph.replays == 3  # 1 warm-up + 3 replays
    eager = eager_runs(make_env, policy, 4, 15)
    assert_same(eager, graphed)
    assert eager["next", "done"].any(), "episodes ended inside the replays"
    # after the replays the env's root is where the last replay ended
    last = graphed[:, -1]
    root = env.root()
    ended = last["next", "done"].squeeze(-1)
    assert torch.equal(root["observation"][~ended], last["next", "observation"][~ended])


def test_graph_picks_up_resets_and_eager_steps_between_replays():
    def between(env, i):
        if i == 1:
            env.reset(seed=11)  # replaces the env's state tensors from outside the graph
        if i == 2:
            td = env.root()
            td["action"] = torch.ones(env.num_envs, dtype=torch.long)
            env.step_and_maybe_reset(td)

    graphed, _, _ = graph_runs(cartpole_env, None, 4, 10, between)
    eager = eager_runs(cartpole_env, None, 4, 10, between)
    assert_same(eager, graphed)


def test_graph_replays_normalise_with_statistics_merged_between_them():
    """sync_stats between collections writes the merged statistics into the tensors the graph replays."""
    from gpu_envs.transforms import ObservationNorm

    def between(env, i):
        for t in env.transforms:
            pending = t.pending_stats()
            if pending is not None:  # as if a second rank had seen twice these observations
                t.merge_stats(torch.stack([pending, pending * 2]))

    graphed, _, graph_env = graph_runs(transformed_env, None, 4, 10, between)
    eager, eager_env = eager_runs(transformed_env, None, 4, 10, between), transformed_env()
    assert_same(eager, graphed)
    norm = next(t for t in graph_env.transforms if isinstance(t, ObservationNorm))
    assert float(norm.count()) == 3 * 4 * 10 * eager_env.num_envs + 3 * eager_env.num_envs  # steps and first reset, x3
    assert not norm.pending_stats().any()


def test_graph_refuses_state_whose_shape_or_dtype_changed_since_the_capture():
    env = gpu_envs.wrap(CountingTorchVectorEnv(N))
    env.reset()
    collector = GraphCollector(env, None, RolloutBuffer(env, 5), api=EmulatedGraphs())
    collector.collect()
    env.backend.env.t = env.backend.env.t.float()  # re-bound with another dtype between replays
    with pytest.raises(
        RolloutError, match=r"env state 'backend.env.t' is now .*float32.* but the captured graph was built for .*int64"
    ):
        collector.collect()


def test_graph_refuses_python_side_step_state():
    class PythonCounter(CountingTorchVectorEnv):
        calls = 0

        def step(self, action):
            self.calls += 1  # per-step state a CUDA graph cannot replay
            return super().step(action)

    env = gpu_envs.wrap(PythonCounter(N))
    env.reset()
    collector = GraphCollector(env, None, RolloutBuffer(env, 5), api=EmulatedGraphs())
    with pytest.raises(RolloutError, match=r"Python-side state .*PythonCounter\.calls"):
        collector.collect()
    assert env.backend.env.calls == 5  # restored to its value before the capture
    collect(env, steps=5)  # the env still works eagerly


def test_graph_refuses_an_env_that_does_not_expose_its_state():
    class Undeclared(CountingTorchVectorEnv):
        state_attributes = None  # neither state_attributes nor live_state()/load_live_state()

    env = gpu_envs.wrap(Undeclared(N))
    env.reset()
    with pytest.raises(RolloutError, match=r"Undeclared does not say which tensors .*live_state\(\).*state_attributes"):
        GraphCollector(env, None, RolloutBuffer(env, 5), api=EmulatedGraphs())


def test_graph_refuses_state_off_the_device():
    class HostCounter(CountingTorchVectorEnv):
        state_attributes = ("episode", "t", "host_steps")

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.host_steps = torch.zeros(1, dtype=torch.long, device="meta")

    env = gpu_envs.wrap(HostCounter(N))
    env.reset()
    collector = GraphCollector(env, None, RolloutBuffer(env, 5), api=EmulatedGraphs())
    with pytest.raises(RolloutError, match=r"'backend.env.host_steps' is a \(1,\) torch.int64 tensor on meta"):
        collector.collect()


def test_graph_refuses_a_host_sync_in_the_policy():
    def syncing(td):
        td["action"] = torch.full((N,), int(td["observation"][0, 2].item()) % 2)
        return td

    env = counting_env()
    collector = GraphCollector(env, syncing, RolloutBuffer(env, 5), api=EmulatedGraphs())
    with pytest.raises(RolloutError, match="could not capture the collection in a CUDA graph"):
        collector.collect()
    before = env.root()["observation"].clone()
    traj = collect(env, syncing, steps=3)  # restored: the env continues eagerly
    assert torch.equal(traj["observation"][:, 0], before)


def test_graph_state_is_what_the_layers_expose():
    """The collector pins what live_state() lists: live tensors, in place for the built-in env."""
    env = transformed_env()
    env.reset()
    state = env.live_state()
    inner = env.env.backend.env
    assert state["env.backend.env.state"] is inner.state
    assert state["env.backend.env.rng_counter"] is inner.live_state()["rng_counter"]
    assert state["env.root.observation"] is env.env.root()["observation"]
    assert {"transforms.0.running_return", "transforms.1.observation.mean"} <= set(state)
    collector = GraphCollector(env, None, RolloutBuffer(env, 6), api=EmulatedGraphs())
    collector.collect()
    collector.collect()
    # in-place state stays the very tensor the graph replays into
    assert env.live_state()["env.backend.env.state"] is state["env.backend.env.state"]


@pytest.mark.slow
def test_a_compiled_loop_follows_its_policy_after_another_policy_re_laid_the_shared_buffer_out():
    """collect's cached buffer is shared per steps: an eager collection of a policy writing an
    extra key re-lays it out, and the compiled loop of the first policy must lay it back out
    (it used to pair its traced keys with the new columns: a fake-tensor shape error, or
    transitions in the wrong columns where shapes agree)."""

    def act(td):
        return td.set("action", (td["observation"][:, 2] > 0).long())

    def act_and_note(td):
        return act(td).set("extra", td["observation"][:, :1] * 2)

    def run(compile):
        env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
        env.reset(seed=0)
        out = [collect(env, act, steps=8, compile=compile).clone(), collect(env, act_and_note, steps=8).clone()]
        out.append(collect(env, act, steps=8, compile=compile).clone())
        return out

    compiled, eager = run(True), run(False)
    assert "extra" in compiled[1] and "extra" not in compiled[2]
    for got, want in zip(compiled, eager, strict=True):
        assert_same(got, want, float_exact=False)  # compiled physics may round the last bit differently


def transformed(env_id: str, *transforms):
    from gpu_envs.transforms import TransformedEnv

    return TransformedEnv(gpu_envs.make(env_id, num_envs=16, device="cpu", seed=0), *transforms)


def shipped_transform_envs():
    """Every shipped transform ``collect`` runs (RecordEpisodes writes files from the host: not in a chunk),
    with the policy each needs (None: random actions; EvalRows reads a deterministic action too)."""
    from gpu_envs.transforms import (
        ActionRescale,
        ClipAction,
        ClipReward,
        Delay,
        EpisodeStats,
        EvalRows,
        History,
        InitTracker,
        ObservationNorm,
        Randomize,
        RewardScale,
    )

    return {
        "cartpole": (
            lambda: transformed(
                "CartPole-v1", EpisodeStats(), ObservationNorm(), RewardScale(0.5), InitTracker(), History(length=3)
            ),
            None,
        ),
        "pendulum": (
            lambda: transformed(
                "Pendulum-v1",
                ActionRescale(),
                ClipAction(),
                Delay(action_steps=(0, 2), observation_steps=(0, 1), hold_probability=0.2),
                Randomize({"m": (0.5, 2.0), "g": (9.0, 11.0)}),
                ClipReward(-5.0, 0.0),
                EpisodeStats(),
                ObservationNorm(),
                EvalRows([0, 1]),
            ),
            pendulum_policy,
        ),
    }


def pendulum_policy(td):
    """A fixed torque per row, with the mode EvalRows asks for: the same actions eager and compiled.

    Open loop on purpose: a policy fed back from the observations grows the compiler's
    last-bit rounding differences step by step (1e-6 to 1e-3 over 72 steps)."""
    action = torch.linspace(-0.9, 0.9, td.batch_size[0]).unsqueeze(1)
    return td.set("action", action).set("action_mode", action * 0.5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cartpole", "pendulum"])
def test_a_transformed_env_compiles_once_and_matches_eager(name):
    from torch._dynamo.utils import counters

    make, policy = shipped_transform_envs()[name]
    eager_env, env = make(), make()
    eager = torch.cat([collect(eager_env, policy, steps=24).clone() for _ in range(3)], dim=1)
    torch._dynamo.reset()
    counters.clear()
    compiled = [collect(env, policy, steps=24, compile=True).clone()]
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1, "the chunks were compiled"
    compiled += [collect(env, policy, steps=24, compile=True).clone() for _ in range(2)]
    assert counters["stats"]["unique_graphs"] == graphs, "a later call recompiled"
    assert not counters["recompiles"], dict(counters["recompiles"])
    assert name != "cartpole" or eager["next", "done"].any(), "auto-resets inside the compared window"
    # actions, flags and counts exactly; float physics to rounding, which the pendulum's swing grows
    # over its 72 steps (fused kernels round differently: ~1e-4 at the end), the cart's stays ~1e-6
    assert_same(eager, torch.cat(compiled, dim=1), float_exact=False, tol=1e-5 if name == "cartpole" else 1e-3)


@pytest.mark.slow
def test_more_loops_than_dynamos_recompile_limit_each_compile():
    """Every loop compiles its own chunk: dynamo's per-code-object limit (here lowered to 1) is never reached.

    All loops' ``chunk`` once shared one code object, and the loop past the limit ran eagerly
    with only a logged warning (the ninth ``collect(..., compile=True)`` of a process)."""
    from unittest import mock

    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    envs = [gpu_envs.wrap(CountingTorchVectorEnv(n, final_obs="masked")) for n in (3, 5, 7)]
    with mock.patch.object(torch._dynamo.config, "recompile_limit", 1):
        runs = [[collect(env, count_policy, steps=4, compile=True).clone() for _ in range(3)] for env in envs]
        loops = [next(iter(collect_cache(env).compiled.values())) for env in envs]
    assert all(loop.compiled for loop in loops)
    assert counters["stats"]["unique_graphs"] == len(envs), dict(counters["stats"])
    assert not counters["recompiles"], dict(counters["recompiles"])
    for env, run in zip(envs, runs, strict=True):
        eager_env = gpu_envs.wrap(CountingTorchVectorEnv(env.num_envs, final_obs="masked"))
        eager = [collect(eager_env, count_policy, steps=4).clone() for _ in range(3)]
        assert_same(torch.cat(eager, dim=1), torch.cat(run, dim=1))
