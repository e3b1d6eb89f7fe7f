"""No silent misuse (issue 19): each way of holding the API wrong gets the right result or a clear error.

* a step's ``td["next"]`` fed back as the next input (torchrl's ``td = env.step(td)["next"]``
  or ``step_mdp``) is stepped the torchrl way: the env's cached post-reset root replaces
  its observations, so the transitions equal ``step_and_maybe_reset``'s (the oracle);
* an earlier root (stepped twice, from two steps ago, from before a reset) is refused
  before anything moves, with no host sync;
* two threads calling one env at once are refused (ConcurrentCallError), never silent;
* ``load_live_state`` of the env's own un-copied live_state from an earlier moment is
  refused (it would move the roots back but not the simulator);
* ``EpisodeStats`` behind a ``TransformedEnv`` restarts when the env below is reset directly;
* a gym-era env using ``np.float_`` on numpy 2 is told what helps;
* gymnasium's ``obs, r, terminated, truncated, info = env.step(td)`` at N=5 and
  ``td, root = env.step(td)`` at N=2, which would unpack the TensorDict's rows without an
  error, are refused before anything moves (other unpackings stay Python's own errors).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.backends.common import numpy2_advice
from gpu_envs.transforms import EpisodeStats, TransformedEnv
from gpu_envs.utils.call_guard import CallGuard
from tests.fakes import CountingTorchVectorEnv
from tests.sync_guard import no_sync

N = 4


def counting_env(**kwargs):
    return gpu_envs.wrap(CountingTorchVectorEnv(N), **kwargs)


def actions(steps, seed=0):
    return torch.randint(0, 2, (steps, N), generator=torch.Generator().manual_seed(seed))


def snapshot(env):
    return {name: value.clone() for name, value in env.live_state().items()}


def assert_same(a, b, keys=None):
    if keys is None:
        assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in keys or a.keys(True, True):
        assert torch.equal(a[key], b[key]), key


def reference(steps):
    """The oracle: step_and_maybe_reset, stepping the root it returns."""
    env = counting_env()
    td, out = env.reset(seed=0), []
    for a in actions(steps):
        td["action"] = a
        step, td = env.step_and_maybe_reset(td)
        out.append(step.clone())
    return out


# ------------------------------------------------------- 1: td["next"] fed back
@pytest.mark.parametrize("advance", ["next", "step_mdp"])
def test_next_fed_back_is_stepped_the_torchrl_way(advance):
    steps = 12  # the counting env ends rows at steps 2..5: several rows end on the way
    expected = reference(steps)
    env = counting_env()
    td = env.reset(seed=0)
    ended = 0
    for t, a in enumerate(actions(steps)):
        td["action"] = a
        td = env.step(td)
        # the input's observations are the post-reset ones the env continued from (a fed-back td["next"]
        # keeps its own other entries: its reward, final_obs_missing)
        assert_same(td, expected[t], keys=list(expected[t].keys(True, True)))
        ended += int(td["next", "done"].sum())
        nxt = td["next"]
        # torchrl's step_mdp: a new TensorDict sharing the next observation and flags
        td = nxt if advance == "next" else TensorDict({k: nxt[k] for k in ("observation", "done")}, batch_size=[N])
    assert ended > 0


def test_next_fed_back_takes_no_host_sync():
    env = counting_env()
    td = env.reset(seed=0)
    td["action"] = torch.zeros(N, dtype=torch.long)
    td = env.step(td)["next"]
    td["action"] = torch.zeros(N, dtype=torch.long)
    with no_sync():
        td = env.step(td)["next"]
        td["action"] = torch.zeros(N, dtype=torch.long)
        env.step(td)


def test_stale_roots_are_refused_before_anything_moves():
    env = counting_env()
    root0 = env.reset(seed=0)
    root0["action"] = torch.zeros(N, dtype=torch.long)
    first, root1 = env.step_and_maybe_reset(root0)
    with pytest.raises(gpu_envs.StaleInputError, match=r"earlier root .*step_and_maybe_reset"):
        env.step(root0)  # the same root stepped twice
    root1["action"] = torch.ones(N, dtype=torch.long)
    _, root2 = env.step_and_maybe_reset(root1)
    before = snapshot(env)
    for stale in (root0, root1, first["next"]):  # two steps ago, one step ago, an older td["next"]
        stale["action"] = torch.zeros(N, dtype=torch.long)
        with no_sync(), pytest.raises(gpu_envs.StaleInputError, match="this env is at root"):
            env.step_and_maybe_reset(stale)
    for name, value in env.live_state().items():
        assert torch.equal(value, before[name]), name
    env.reset()
    root2["action"] = torch.zeros(N, dtype=torch.long)
    with pytest.raises(gpu_envs.StaleInputError):
        env.step(root2)  # from before a reset
    # the current root, env.root() and a TensorDict the env did not build are stepped
    root = env.root()
    root["action"] = torch.zeros(N, dtype=torch.long)
    _, root = env.step_and_maybe_reset(root)
    root["action"] = torch.zeros(N, dtype=torch.long)
    env.step_and_maybe_reset(root)
    env.step(TensorDict({"action": torch.zeros(N, dtype=torch.long)}, batch_size=[N]))


def test_a_copy_of_an_old_root_is_stepped_from_where_the_env_is_as_the_readme_says():
    """A ``.clone()`` carries no date (the README says so): the env steps its own state, whatever the copy holds."""
    env = counting_env()
    root0 = env.reset(seed=0)
    old = root0.clone()
    root0["action"] = torch.zeros(N, dtype=torch.long)
    env.step_and_maybe_reset(root0)
    old["action"] = torch.zeros(N, dtype=torch.long)
    td, _ = env.step_and_maybe_reset(old)  # not refused: the env cannot date a copy
    reference = counting_env()
    ref_root = reference.reset(seed=0)
    for _ in range(2):
        ref_root["action"] = torch.zeros(N, dtype=torch.long)
        ref_td, ref_root = reference.step_and_maybe_reset(ref_root)
    assert torch.equal(td["next", "observation"], ref_td["next", "observation"])  # the env's second step
    assert torch.equal(td["observation"], root0["observation"])  # the copy's (old) observations are kept in td


def test_a_root_from_before_a_collection_is_stale():
    from gpu_envs.rollout import collect

    env = gpu_envs.make("CartPole-v1", num_envs=N, device="cpu")
    root = env.reset(seed=0)
    _, nxt = env.step_and_maybe_reset(root.set("action", torch.zeros(N, dtype=torch.long)))
    copy = TensorDict({"observation": root["observation"]}, batch_size=[N])
    collect(env, steps=4)  # random actions: the tensors-only path, no TensorDict handed out
    for stale in (nxt, root):
        stale["action"] = torch.zeros(N, dtype=torch.long)
        with pytest.raises(gpu_envs.StaleInputError):
            env.step(stale)
    copy["action"] = torch.zeros(N, dtype=torch.long)
    env.step(copy)  # a TensorDict the env did not build carries no date: taken


def test_torchrl_maybe_reset_route_matches_the_oracle():
    """``env.step`` then ``env.reset(td["next"] with "_reset")``: torchrl's maybe_reset, no row reset twice."""
    steps = 10
    expected = reference(steps)
    env = counting_env()
    td = env.reset(seed=0)
    for t, a in enumerate(actions(steps)):
        td["action"] = a
        td = env.step(td)
        assert_same(td, expected[t])
        nxt = td["next"].clone()
        nxt["_reset"] = nxt["done"]
        td = env.reset(td=nxt)


# ------------------------------------------------------------- 2: two threads
class ReentrantEnv(CountingTorchVectorEnv):
    """Runs ``during_step`` inside its step: another thread's call made while this one is in flight."""

    during_step = None

    def step(self, action):
        hook, self.during_step = self.during_step, None
        if hook is not None:
            hook()
        return super().step(action)


def in_thread(fn):
    errors = []

    def run():
        try:
            fn()
        except Exception as err:
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    return errors


def test_a_second_thread_stepping_during_a_step_is_refused_with_the_fix():
    sim = ReentrantEnv(N)
    env = gpu_envs.wrap(sim)
    td = env.reset(seed=0)
    td["action"] = torch.zeros(N, dtype=torch.long)
    errors = []
    sim.during_step = lambda: errors.extend(in_thread(lambda: env.step(env.root())))
    env.step_and_maybe_reset(td)  # this thread's step completes; the other thread's was refused on entry
    # as the README promises (it was an InterruptedStepError: "interrupted mid-step")
    assert len(errors) == 1 and isinstance(errors[0], gpu_envs.ConcurrentCallError)
    assert "two threads at once" in str(errors[0]) and "another thread's step() was running" in str(errors[0])
    assert "one env per thread" in str(errors[0]) and "threading.Lock" in str(errors[0])
    root = env.root().clone().set("action", torch.zeros(N, dtype=torch.long))
    env.step_and_maybe_reset(root)  # and the env goes on: the refused call touched nothing


def test_a_call_that_overlaps_a_step_fails_both_until_a_reset():
    sim = ReentrantEnv(N)
    env = gpu_envs.wrap(sim)
    td = env.reset(seed=0)
    td["action"] = torch.zeros(N, dtype=torch.long)
    sim.during_step = lambda: in_thread(lambda: env.reset())  # the other thread's reset runs to its end
    with pytest.raises(gpu_envs.ConcurrentCallError, match=r"two threads at once.*one env per thread.*Lock"):
        env.step_and_maybe_reset(td)
    with pytest.raises(gpu_envs.InterruptedStepError):
        env.step(TensorDict({"action": td["action"]}, batch_size=[N]))
    root = env.reset()  # a reset makes it usable again
    root["action"] = torch.zeros(N, dtype=torch.long)
    env.step_and_maybe_reset(root)


def test_call_guard_numbers_calls():
    guard = CallGuard("this thing")
    first = guard.start("step")
    second = guard.start("step")  # another thread
    assert second == first + 1 and guard.calls == second
    with pytest.raises(gpu_envs.ConcurrentCallError, match="this thing was called from two threads"):
        guard.overlapped("step")
    assert guard.interrupted and guard.calls != second  # the other call fails its own check too


# ------------------------------------------------------- 3: live live_state
def test_loading_the_envs_own_live_state_dict_after_steps_is_refused():
    env = counting_env()
    td = env.reset(seed=0)
    live = env.live_state()
    env.load_live_state(live)  # nothing moved yet: loading it is a no-op, accepted
    td = env.root()  # (a load replaces the root: the earlier one is stale)
    live = env.live_state()
    for a in actions(3):
        td["action"] = a
        _, td = env.step_and_maybe_reset(td)
    before = snapshot(env)
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"own live_state\(\) from an earlier moment.*clone"):
        env.load_live_state(live)
    for name, value in env.live_state().items():
        assert torch.equal(value, before[name]), name  # refused before anything moved
    td["action"] = torch.zeros(N, dtype=torch.long)
    env.step_and_maybe_reset(td)  # and the env goes on


def test_a_copied_state_dict_restores_root_and_simulator_together():
    env = counting_env()
    td = env.reset(seed=0)
    saved = snapshot(env)
    saved_root = env.root().clone()
    for a in actions(4):
        td["action"] = a
        _, td = env.step_and_maybe_reset(td)
    env.load_live_state(saved)
    assert_same(env.root(), saved_root)
    env2 = counting_env()
    expected = env2.reset(seed=0)
    for a in actions(3, seed=1):  # both continue identically: the simulator moved back with the root
        expected["action"] = a
        want, expected = env2.step_and_maybe_reset(expected)
        root = env.root()
        root["action"] = a
        got, _ = env.step_and_maybe_reset(root)
        assert_same(got, want)


def test_transformed_env_refuses_its_own_live_state_dict_too():
    env = TransformedEnv(counting_env(), EpisodeStats())
    td = env.reset(seed=0)
    live = env.live_state()
    td["action"] = torch.zeros(N, dtype=torch.long)
    env.step_and_maybe_reset(td)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="earlier moment"):
        env.load_live_state(live)
    env.load_live_state({k: v.clone() for k, v in live.items()})  # a copy is a plain dict: taken


# ------------------------------------------------ 4: EpisodeStats, direct reset
def run_zero_actions(env, td, steps):
    for _ in range(steps):
        td["action"] = torch.zeros(N, dtype=torch.long)
        _, td = env.step_and_maybe_reset(td)
    return td


@pytest.mark.parametrize("nested", [False, True])
def test_episode_stats_restart_after_the_inner_env_is_reset_directly(nested):
    inner = counting_env()
    stats = EpisodeStats()
    env = TransformedEnv(inner, stats)
    if nested:
        env = TransformedEnv(env)  # the reset is noticed through two layers
    run_zero_actions(env, env.reset(seed=0), 1)
    inner.reset(seed=0)  # bypasses the transforms
    run_zero_actions(env, env.root(), 6)
    # the oracle: the same calls, with the transformed env's own reset in place of the direct one
    ref_stats = EpisodeStats()
    ref = TransformedEnv(counting_env(), ref_stats)
    run_zero_actions(ref, ref.reset(seed=0), 1)
    run_zero_actions(ref, ref.reset(seed=0), 6)
    for name in ("episodes", "total_return", "total_length", "running_return", "running_length"):
        assert torch.equal(getattr(stats, name), getattr(ref_stats, name)), name


def test_episode_stats_restart_only_the_rows_of_a_direct_partial_reset():
    inner = counting_env()
    stats = EpisodeStats()
    env = TransformedEnv(inner, stats)
    run_zero_actions(env, env.reset(seed=0), 1)
    mask = torch.tensor([True, False, False, False]).view(N, 1)
    inner.reset(td=TensorDict({"_reset": mask}, batch_size=[N]))
    env.root()  # the next call notices the reset
    assert stats.running_length.view(-1).tolist() == [0, 1, 1, 1]


# --------------------------------------------------------- 5: numpy 2 advice
def test_a_gym_env_using_np_float_on_numpy2_is_told_what_helps():
    gym = pytest.importorskip("gym")
    if hasattr(np, "float_"):
        pytest.skip("numpy < 2 still has np.float_")

    class OldEnv(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            np.float_(0.0)  # what gym-era envs do
            return np.zeros(2, np.float32), 1.0, False, False, {}

    env = gpu_envs.wrap(OldEnv(), device="cpu")
    td = env.reset(seed=0)
    td["action"] = env.action_spec.rand()
    with pytest.raises(gpu_envs.BackendError, match=r"np\.float_, which numpy 2 removed: pin numpy<2.*np\.float64"):
        env.step(td)


def test_numpy2_advice_reads_numpys_message_only():
    message = "AttributeError: `np.bool8` was removed in the NumPy 2.0 release. Use `np.bool` instead."
    advice = numpy2_advice(message)
    assert "np.bool8" in advice and "np.bool " in advice and "numpy<2" in advice
    assert numpy2_advice("AttributeError: 'Foo' object has no attribute 'float_'") == ""


@pytest.mark.parametrize("transformed", [False, True], ids=["env", "transformed"])
@pytest.mark.parametrize("n", [5, 2])
def test_unpacking_a_step_into_its_rows_is_refused_before_anything_moves(n, transformed):
    env = gpu_envs.make("CartPole-v1", num_envs=n, seed=0)
    if transformed:
        env = TransformedEnv(env, EpisodeStats())
    td = env.reset(seed=0)
    td["action"] = env.action_spec.rand()
    before = env.root()["observation"].clone()
    with pytest.raises(gpu_envs.InvalidArgumentError, match="ROWS of the one TensorDict") as info:
        if n == 5:
            _obs, _reward, _terminated, _truncated, _info = env.step(td)
        else:
            _out, _root = env.step(td)
    assert ("obs, reward, terminated, truncated, info" in str(info.value)) == (n == 5)
    assert torch.equal(env.root()["observation"], before)  # nothing was stepped
    out = env.step(td)  # the same call, not unpacked: fine, and the env was usable
    assert out["next", "reward"].shape == (n, 1)
    rows = list(out)  # iterating a step's rows on purpose stays possible
    assert len(rows) == n


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "with a nested entry"])
def test_a_transformed_env_that_rewrites_actions_refuses_a_stale_root_too(nested):
    """The action transforms step a shallow copy of the caller's root (which keeps the policy's action); the copy
    keeps the root's date, so a stale root is refused as the bare env refuses it, and the caller's td is untouched."""
    from gpu_envs.transforms import Delay, TransformedEnv

    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=N, device="cpu"), Delay(action_steps=1))
    root0 = env.reset(seed=0)
    if nested:
        root0["extra"] = TensorDict({"x": torch.zeros(N)}, batch_size=[N])
    action = torch.ones(N, dtype=torch.long)
    root0["action"] = action
    td, root1 = env.step_and_maybe_reset(root0)
    assert td["action"] is action  # the policy's own action stays in the transition
    root0["action"] = torch.zeros(N, dtype=torch.long)
    with pytest.raises(gpu_envs.StaleInputError, match="this env is at root"):
        env.step_and_maybe_reset(root0)
    root1["action"] = torch.zeros(N, dtype=torch.long)
    env.step_and_maybe_reset(root1)  # the current root is taken
