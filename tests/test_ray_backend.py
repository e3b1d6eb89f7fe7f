"""The Ray backend (gpu_envs.backends.ray) on a local 2-CPU Ray: exact, and clear when it fails.

Exactness is the gymnasium backend's oracle run through Ray workers: the counting env
(obs = env index, episode, step) over every auto-reset mode the workers can run, a
step where every env ends at once, seeds ``s + i`` over global indices, partial reset
masks that span workers. Faults: an env raising inside a worker (its own traceback
comes back), a worker process killed (clear error within 10 s, nothing left running),
a worker that does not answer within ``step_timeout`` (named).

Every test here shares one local Ray (started by the module fixture, shut down after
it), which the envs join; tests/test_ray_cluster.py covers envs that start Ray
themselves.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

import gpu_envs
from tests.fakes import CountingEnv
from tests.gym_fakes import (
    MODES,
    RaisingEnv,
    SlowEnv,
    assert_same_transitions,
    batched_transitions,
    counting_oracle,
    sequential_reference,
)
from tests.processes import alive, assert_gone, worker_pids

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install '.[ray]' in the gpu_envs clone)")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    assert not ray.is_initialized(), "a previous test left Ray running"
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="warning")
    yield
    ray.shutdown()


def counting_fns(num_envs: int, cls=CountingEnv, **kwargs) -> list:
    return [lambda i=i: cls(i, **kwargs) for i in range(num_envs)]


# ------------------------------------------------------------------ exactness
@pytest.mark.parametrize("mode", ["same_step", "disabled", "next_step"])
def test_counting_envs_through_ray_match_the_sequential_reference(mode):
    # 7 envs over 2 workers: uneven shares (4 + 3), and the info entry discovered per worker
    with gpu_envs.wrap_ray(counting_fns(7), num_workers=2, device="cpu", autoreset_mode=MODES[mode]) as env:
        assert [(w.start, w.stop) for w in env.backend.workers] == [(0, 4), (4, 7)]
        assert mode.replace("_", "").upper() in env.backend.describe().replace("_", "")
        counting_oracle(env, 7, 720)
        assert list(env.info_spec.keys()) == ["step_count"]


def test_the_packed_staging_path_of_accelerators_matches_the_oracle_too(monkeypatch):
    """Workers' rows written into ONE packed buffer (what a CUDA target uses), run on the CPU."""
    from gpu_envs.backends.ray import RayBackend

    monkeypatch.setattr(RayBackend, "staging_packed", True)
    with gpu_envs.wrap_ray(counting_fns(7), num_workers=2, device="cpu") as env:
        assert env.backend._reset_stage.packed
        counting_oracle(env, 7, 720)


def test_make_seeds_env_i_with_seed_plus_i_over_global_indices():
    n, steps, seed = 6, 400, 3
    actions = np.random.default_rng(1).integers(0, 2, size=(n, steps))
    want = sequential_reference(lambda i: gym.make("CartPole-v1"), actions, seed=seed)
    with gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", backend="ray", num_workers=2) as env:
        got = batched_transitions(env, torch.as_tensor(actions), seed=seed)
    assert_same_transitions(got, want)
    assert want["done"].sum() > 50


def test_make_passes_the_gymnasium_options_and_equals_the_gymnasium_backend():
    actions = torch.as_tensor(np.random.default_rng(2).uniform(-2, 2, size=(4, 12, 1)).astype(np.float32))
    kwargs = {"num_envs": 4, "device": "cpu", "frame_skip": 50}
    with gpu_envs.make("Pendulum-v1", backend="ray", num_workers=2, **kwargs) as env:
        got = batched_transitions(env, actions, seed=7)
    with gpu_envs.make("Pendulum-v1", backend="gymnasium", **kwargs) as env:
        want = batched_transitions(env, actions, seed=7)
    assert_same_transitions(got, want)
    assert want["truncated"][:, 3].all(), "200 steps = 4 macro steps of 50: every env truncates at once"


def test_env_index_offset_shifts_the_seeds_like_a_shard():
    actions = torch.as_tensor(np.random.default_rng(3).integers(0, 2, size=(6, 40)))
    with gpu_envs.make("CartPole-v1", num_envs=6, device="cpu", backend="gymnasium") as env:
        whole = batched_transitions(env, actions, seed=11)
    with gpu_envs.make(
        "CartPole-v1", num_envs=3, device="cpu", backend="ray", num_workers=2, env_index_offset=3
    ) as env:
        shard = batched_transitions(env, actions[3:], seed=11)
    for key, value in shard.items():
        np.testing.assert_array_equal(value, whole[key][3:], err_msg=key)


@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_partial_reset_masks_reach_the_right_rows_of_each_worker(mode):
    with gpu_envs.wrap_ray(counting_fns(4), num_workers=2, device="cpu", autoreset_mode=MODES[mode]) as env:
        td = env.reset()
        td["action"] = torch.zeros(4, dtype=torch.long)
        td, root = env.step_and_maybe_reset(td)  # nobody ends on step 1
        out = env.reset(td=root.set("_reset", torch.tensor([[True], [False], [False], [True]])))
        assert out["observation"][:, 1].tolist() == [1, 0, 0, 1]  # episode
        assert out["observation"][:, 2].tolist() == [0, 1, 1, 0]  # step
        out = env.reset(td=out.set("_reset", torch.tensor([[False], [True], [False], [False]])))  # worker 0 only
        assert out["observation"][:, 1].tolist() == [1, 1, 0, 1] and out["observation"][:, 2].tolist() == [0, 0, 1, 0]
        out["action"] = torch.zeros(4, dtype=torch.long)
        td = env.step(out)
        assert td["next", "observation"][:, 2].tolist() == [1, 1, 2, 1]


def test_one_hot_actions_and_validation_through_ray():
    with gpu_envs.make(
        "CartPole-v1", num_envs=3, device="cpu", backend="ray", num_workers=2, one_hot_actions=True
    ) as env:
        td = env.reset(seed=0)
        td["action"] = torch.nn.functional.one_hot(torch.tensor([0, 1, 1]), 2).bool()
        td = env.step(td)
        assert td["next", "observation"].shape == (3, 4)


# ------------------------------------------------------------------ failures
def test_an_env_error_comes_back_with_the_envs_own_traceback():
    # envs 0 and 2 (the first of each worker) raise on their 2nd step; the others never
    fns = [lambda i=i: RaisingEnv(i, fail_at=2 if i % 2 == 0 else 10**6) for i in range(4)]
    with gpu_envs.wrap_ray(fns, num_workers=2, device="cpu") as env:
        td = env.reset()
        td["action"] = torch.zeros(4, dtype=torch.long)
        env.step(td)
        td = env.root().set("action", td["action"])
        with pytest.raises(gpu_envs.BackendError) as info:
            env.step(td)
        text = str(info.value)
        assert "simulator exploded (env 0, call 2)" in text and "simulator exploded (env 2, call 2)" in text
        assert "gym_fakes.py" in text and "in step" in text, "the env's own frames"
        assert "worker 0 (envs 0..1" in text and "worker 1 (envs 2..3" in text
        with pytest.raises(gpu_envs.BackendError, match=r"call env\.reset"):
            env.step(td)
        td = env.reset()  # a full reset makes the env usable again
        td["action"] = torch.zeros(4, dtype=torch.long)
        assert env.step(td)["next", "observation"][:, 2].tolist() == [1, 1, 1, 1]


@pytest.fixture
def script_id():
    """An id registered as a user's script registers it: an entry point defined in ``__main__``."""
    script_env = type("ScriptEnv", (CountingEnv,), {"__module__": "__main__"})
    gym.register("GpuEnvsTest/ScriptOnly-v0", entry_point=script_env)
    yield "GpuEnvsTest/ScriptOnly-v0"
    del gym.registry["GpuEnvsTest/ScriptOnly-v0"]


def test_an_id_registered_in_the_users_script_reaches_the_workers(script_id):
    # make(id, backend="ray") and wrap_ray(lambda: gym.make(id)): the workers never ran the script
    with gpu_envs.make(script_id, num_envs=2, device="cpu", backend="ray", num_workers=1) as env:
        made = env.reset(seed=0)["observation"]
    with gpu_envs.wrap_ray(lambda: gym.make(script_id), num_envs=2, num_workers=1, device="cpu") as env:
        wrapped = env.reset(seed=0)["observation"]
    assert made.shape == wrapped.shape == (2, 3)


def test_an_id_the_workers_cannot_see_is_a_short_error_naming_env_fn():
    gym.register("GpuEnvsTest/DriverOnly-v0", entry_point="tests.fakes:CountingEnv")  # not in any module they import
    try:
        with pytest.raises(gpu_envs.BackendError, match=r"NotFound.*wrap_ray\(env_fn=") as info:
            gpu_envs.wrap_ray(lambda: gym.make("GpuEnvsTest/DriverOnly-v0"), num_envs=1, num_workers=1, device="cpu")
        assert "Traceback" not in str(info.value) and len(str(info.value)) < 700
    finally:
        del gym.registry["GpuEnvsTest/DriverOnly-v0"]


def test_a_killed_worker_gives_a_clear_error_soon_and_nothing_survives_close():
    env = gpu_envs.wrap_ray(counting_fns(4), num_workers=2, device="cpu")
    pids = worker_pids(env)
    td = env.reset()
    td["action"] = torch.zeros(4, dtype=torch.long)
    env.step(td)
    td = env.root().set("action", td["action"])
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(gpu_envs.BackendError, match=r"worker 1 \(envs 2..3, pid \d+ on .*\) died") as info:
        env.step(td)
    assert time.monotonic() - start < 50  # Ray notices a dead actor in about a second; a hang never ends
    assert "build a new env" in str(info.value)
    with pytest.raises(gpu_envs.BackendError, match="cannot be used any more"):
        env.reset()  # its envs are gone: not even a reset brings them back
    env.close()
    assert_gone(pids)


def test_a_worker_that_does_not_answer_is_named_after_step_timeout():
    fns = [lambda: CountingEnv(0), lambda: SlowEnv(1, delay=60.0)]
    env = gpu_envs.wrap_ray(fns, num_workers=2, device="cpu", step_timeout=1.5)
    pids = worker_pids(env)
    td = env.reset()
    td["action"] = torch.zeros(2, dtype=torch.long)
    start = time.monotonic()
    with pytest.raises(
        gpu_envs.BackendError, match=r"no answer to step within step_timeout=1.5 s from Ray worker 1"
    ) as info:
        env.step(td)
    assert time.monotonic() - start < 50  # step_timeout=1.5 s plus the stop; the slow env would answer after 60 s
    assert "worker 0" not in str(info.value).split("from", 1)[1].split("(an env")[0]
    assert_gone(pids)  # the hung worker was stopped, and the others with it
    for call in (lambda: env.step(td), env.reset):  # the env says it is gone, not "call env.reset()"
        with pytest.raises(gpu_envs.BackendError, match=r"cannot be used any more.*Build a new env"):
            call()
    env.close()


def test_a_worker_that_cannot_be_started_takes_the_started_ones_down_with_it():
    lock = threading.Lock()

    def unpicklable():  # closes over a lock: Ray cannot ship it to an actor
        assert lock is not None
        return CountingEnv(1)

    def all_cpus_free(within: float) -> bool:  # earlier tests' actors are released asynchronously
        deadline = time.monotonic() + within
        while ray.available_resources().get("CPU", 0.0) < ray.cluster_resources().get("CPU", 0.0):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    assert all_cpus_free(within=30)
    with pytest.raises(Exception, match=r"(?i)pickl|serializ") as info:  # kept: its traceback holds the handles
        gpu_envs.wrap_ray([lambda: CountingEnv(0), unpicklable], num_workers=2, device="cpu", start_timeout=30)
    time.sleep(3)  # actors take their CPU asynchronously: give a leaked one time to show
    assert all_cpus_free(within=10), "worker 0's actor still holds its CPU"
    assert info.value is not None


def test_close_stops_every_worker_of_a_joined_cluster():
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", backend="ray", num_workers=2)
    pids = worker_pids(env)
    assert all(alive(p) for p in pids)
    env.close()
    assert_gone(pids)
    assert ray.is_initialized(), "a cluster the env joined is not the env's to stop"
    with pytest.raises(gpu_envs.ClosedEnvError):
        env.reset()


def test_bad_sub_env_arguments_are_refused_before_any_worker_starts(monkeypatch):
    from gpu_envs.backends.ray import cluster

    monkeypatch.setattr(cluster, "start_workers", lambda *a, **k: pytest.fail("workers started before the check"))
    for kwargs, words in (
        ({"frame_skip": 0}, "frame_skip"),
        ({"wrappers": [3]}, "wrappers"),
        ({"vector_kwargs": 1}, "vector_kwargs"),
    ):
        with pytest.raises(gpu_envs.InvalidArgumentError, match=words):
            gpu_envs.make("CartPole-v1", num_envs=2, backend="ray", num_workers=1, **kwargs)


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(gpu_envs.InvalidArgumentError, match="more than num_envs"):
        gpu_envs.make("CartPole-v1", num_envs=2, backend="ray", num_workers=3)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="num_workers= sets the number of Ray workers"):
        gpu_envs.make("CartPole-v1", num_envs=2, backend="ray", vectorization="async")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="step_timeout"):
        gpu_envs.make("CartPole-v1", num_envs=2, backend="ray", num_workers=1, step_timeout=0)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="needs num_envs"):
        gpu_envs.wrap_ray(lambda: CountingEnv(0))
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"unknown keyword arguments \['step_timout'\]"):
        gpu_envs.wrap_ray(lambda: CountingEnv(0), num_envs=2, step_timout=3)
    with pytest.raises(gpu_envs.NotAnEnvError, match="function that builds one gymnasium env"):
        gpu_envs.wrap_ray(CountingEnv(0), num_envs=2)
    with pytest.raises(gpu_envs.NotAnEnvError, match="wrap_ray"):
        gpu_envs.wrap(CountingEnv(0), backend="ray")
    with pytest.raises(gpu_envs.BackendError, match="could not build its envs") as info:
        gpu_envs.make("CartPole-v1", num_envs=2, backend="ray", num_workers=1, not_an_option=1)
    assert "not_an_option" in str(info.value)
