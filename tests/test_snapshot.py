"""Per-row snapshot and restore (``env.get_state`` / ``env.set_state``) against the oracle of
:mod:`tests.snapshot_checks`, for every backend that claims it, and the refusals and
argument errors of every other case.
"""

from __future__ import annotations

import io

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs import InvalidArgumentError, ResetNeededError, SnapshotError
from gpu_envs.contract.protocols import RowStateEnv
from gpu_envs.transforms import EpisodeStats, ObservationNorm, TransformedEnv
from tests.example_files import load_example
from tests.fakes import CountingTorchVectorEnv
from tests.isaac_fakes import FakeIsaacManagerEnv
from tests.snapshot_checks import assert_bitwise, check_snapshot_exact, run

N = 5


class RowStateCountingEnv(CountingTorchVectorEnv):
    """The counting env with the snapshot protocol (its whole per-row state: index, episode, t)."""

    def get_state(self, rows):
        return {"index": self.index[rows], "episode": self.episode[rows], "t": self.t[rows]}

    def set_state(self, state, rows):
        for name in ("index", "episode", "t"):  # re-bound each step: write into fresh copies
            setattr(self, name, getattr(self, name).index_copy(0, rows, state[name]))


# ------------------------------------------------------------------ exact continuations
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_builtin_envs_continue_bitwise_after_restore(env_id):
    env = gpu_envs.make(env_id, num_envs=N, seed=0, max_episode_steps=7)
    check_snapshot_exact(env, warm=9, steps=16)


def test_builtin_snapshot_holds_the_random_streams():
    env = gpu_envs.make("CartPole-v1", num_envs=3, seed=0)
    env.reset(seed=0)
    state = env.get_state([2, 0])
    assert set(state["backend"].keys()) == {"state", "elapsed_steps", "rng_key", "rng_counter", "params"}
    assert state.batch_size == (2,) and state["root", "observation"].shape == (2, 4)
    inner = env.backend.env
    assert torch.equal(state["backend", "rng_key"], inner.live_state()["rng_key"][[2, 0]])


def test_torch_env_with_the_protocol_continues_bitwise():
    assert isinstance(RowStateCountingEnv(2), RowStateEnv)
    env = gpu_envs.wrap(RowStateCountingEnv(N))
    check_snapshot_exact(env, warm=9, steps=25)


def test_gymnasium_sync_vector_env_continues_bitwise():
    env = gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", backend="gymnasium", max_episode_steps=15)
    check_snapshot_exact(env, warm=11, steps=30)


def test_gymnasium_next_step_sync_vector_env_continues_bitwise():
    venv = gym.make_vec("Pendulum-v1", num_envs=N, vectorization_mode="sync", max_episode_steps=7)
    env = gpu_envs.wrap(venv, device="cpu")
    check_snapshot_exact(env, warm=5, steps=20)


def test_single_gymnasium_env_continues_bitwise():
    env = gpu_envs.wrap(gym.make("CartPole-v1", max_episode_steps=10), device="cpu")
    check_snapshot_exact(env, warm=6, steps=30, rows=(0,), into=(0,))


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["phys2d/CartPole-v1", "gymnax/Pendulum-v1"])
def test_jax_carry_continues_bitwise(env_id):
    pytest.importorskip("jax")
    pytest.importorskip("gymnax")
    kwargs = {"max_episode_steps": 12} if env_id.startswith("phys2d") else {"env_params": {"max_steps_in_episode": 12}}
    env = gpu_envs.make(env_id, num_envs=N, device="cpu", **kwargs)
    check_snapshot_exact(env, warm=14, steps=30)


def test_transformed_env_restores_per_row_transform_state():
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=N, seed=0, max_episode_steps=10), EpisodeStats())
    original = check_snapshot_exact(env, warm=13, steps=25)
    assert bool(original["next", "episode_return"].ne(0).any())  # running returns restored per row


def test_transformed_env_full_restore_includes_shared_statistics():
    env = TransformedEnv(
        gpu_envs.make("CartPole-v1", num_envs=N, seed=0, max_episode_steps=10), EpisodeStats(), ObservationNorm()
    )
    stats = env.transforms[0]
    env.reset(seed=3)
    run(env, [env.action_spec.rand() for _ in range(15)])
    saved = env.get_state()
    totals = (stats.episodes.clone(), stats.total_return.clone())
    actions = [env.action_spec.rand() for _ in range(20)]
    original = run(env, actions)
    assert not torch.equal(stats.episodes, totals[0])
    env.set_state(saved)  # rows=None: the shared totals and the normaliser's statistics come back too
    assert torch.equal(stats.episodes, totals[0]) and torch.equal(stats.total_return, totals[1])
    assert_bitwise(run(env, actions), original, "normalised observations and episode statistics")
    some = env.get_state([0])
    before = stats.episodes.clone()
    env.set_state(some, rows=[1])  # some rows: shared statistics stay as they are
    assert torch.equal(stats.episodes, before)


@pytest.mark.slow  # builds the poisoned env of tests/test_quarantine.py
def test_quarantine_restores_its_records_and_served_rows():
    from gpu_envs.wrappers import Quarantine
    from tests.test_quarantine import PoisonedTorchEnv

    class Poisoned(RowStateCountingEnv, PoisonedTorchEnv):
        pass

    env = Quarantine(gpu_envs.wrap(Poisoned(N)))
    original = check_snapshot_exact(env, warm=9, steps=30)
    assert bool(original["next", "quarantined"].any())  # rows were quarantined inside the checked steps
    assert int(env.quarantined) > 0


def test_torch_save_round_trip_into_a_new_env():
    def build():
        return TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=N, seed=7, max_episode_steps=9), EpisodeStats())

    env = build()
    env.reset(seed=7)
    run(env, [env.action_spec.rand() for _ in range(11)])
    buffer = io.BytesIO()
    torch.save(env.get_state(), buffer)
    gen = torch.Generator().manual_seed(1)
    actions = [env.action_spec.rand(generator=gen) for _ in range(20)]
    original = run(env, actions)
    other = build()
    other.reset(seed=123)  # any state: set_state replaces every row
    buffer.seek(0)
    other.set_state(torch.load(buffer, weights_only=False))
    assert_bitwise(run(other, actions), original, "loaded into a new env")


def test_step_then_masked_reset_loop_is_restored_too():
    env = gpu_envs.make("CartPole-v1", num_envs=N, seed=0, max_episode_steps=6)
    td = env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)

    def torchrl_loop(steps):
        td = env.root()
        out = []
        for _ in range(steps):
            td["action"] = env.action_spec.rand(generator=gen)
            env.step(td)
            out.append(td.clone())
            nxt = td["next"].clone()
            nxt["_reset"] = nxt["done"]
            td = env.reset(td=nxt)
        return torch.stack(out)

    for _ in range(6):  # stop right after a step with ended rows: last_done matters
        td = env.root()  # each step from the env's current root (a stepped root is stale)
        td["action"] = env.action_spec.rand(generator=gen)
        env.step(td)
    saved, gen_state = env.get_state(), gen.get_state()
    nxt = td["next"].clone()
    nxt["_reset"] = nxt["done"]
    first = env.reset(td=nxt)
    original = torchrl_loop(12)
    env.set_state(saved)
    gen.set_state(gen_state)
    assert torch.equal(env.reset(td=nxt)["observation"], first["observation"])
    assert_bitwise(torchrl_loop(12), original, "step + masked reset")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_reset_to_state_example(env_id):
    result = load_example("reset_to_state").main(["--env", env_id, "--num-envs", "8", "--steps", "30"])
    assert result["exact"] and len(result["rows"]) == 3 and result["targets"] == [5, 6, 7]


def test_snapshot_rows_can_be_indexed_repeated_and_concatenated(cartpole):
    a, b = cartpole.get_state([0, 1]), cartpole.get_state([2, 3])
    cartpole.set_state(a[[1, 1]], rows=[2, 3])  # one snapshot row into two rows
    obs = cartpole.root()["observation"]
    assert torch.equal(obs[2], obs[1]) and torch.equal(obs[3], obs[1])
    cartpole.set_state(torch.cat([a, b]))  # a whole batch again, from two parts
    assert torch.equal(cartpole.root()["observation"], torch.cat([a["root", "observation"], b["root", "observation"]]))


# ------------------------------------------------------------------ bad arguments
@pytest.fixture
def cartpole():
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    env.reset(seed=0)
    return env


@pytest.mark.parametrize(
    "rows, match",
    [
        ([4], r"\[0, 4\)"),
        ([-1], r"\[0, 4\)"),
        (2, "for one row pass"),
        ([[0, 1]], "1-D"),
        ([0.5], "integer"),
        (torch.ones(3, dtype=torch.bool), "bool rows mask"),
    ],
)
def test_bad_rows_are_refused(cartpole, rows, match):
    with pytest.raises(InvalidArgumentError, match=match):
        cartpole.get_state(rows)


def test_rows_as_mask_tensor_and_range(cartpole):
    mask = torch.tensor([True, False, True, False])
    assert torch.equal(
        cartpole.get_state(mask)["root", "observation"], cartpole.get_state(range(0, 4, 2))["root", "observation"]
    )


def test_bad_states_are_refused_and_the_env_is_usable_after(cartpole):
    state = cartpole.get_state([0, 1])
    cases = [
        (lambda: cartpole.set_state(state), "batch size"),  # two rows into all four
        (lambda: cartpole.set_state(state, rows=[0]), "batch size"),
        (lambda: cartpole.set_state(state, rows=[1, 1]), "repeat"),
        (lambda: cartpole.set_state(state.exclude(("backend", "rng_key")), rows=[0, 1]), "missing"),
        (lambda: cartpole.set_state(state.clone().set("extra", torch.zeros(2)), rows=[0, 1]), "unexpected"),
        (
            lambda: cartpole.set_state(
                state.clone().set(("backend", "state"), torch.zeros(2, 4, dtype=torch.float64)), rows=[0, 1]
            ),
            "float64",
        ),
        (
            lambda: cartpole.set_state(state.clone().set(("backend", "state"), torch.zeros(2, 5)), rows=[0, 1]),
            r"\(5,\)",
        ),
        (lambda: cartpole.set_state(state.to_dict(), rows=[0, 1]), "TensorDict"),
    ]
    root = cartpole.root()
    for call, match in cases:
        with pytest.raises(InvalidArgumentError, match=match):
            call()
        assert_bitwise(cartpole.root(), root, "a refused set_state moves nothing")
    td = cartpole.root()
    td["action"] = cartpole.action_spec.rand()
    cartpole.step_and_maybe_reset(td)  # still usable


def test_a_state_of_another_env_is_refused(cartpole):
    other = gpu_envs.make("Pendulum-v1", num_envs=4, seed=0)
    other.reset(seed=0)
    with pytest.raises(InvalidArgumentError, match="built like this one"):
        cartpole.set_state(other.get_state())


def test_before_reset_and_after_close():
    env = gpu_envs.make("CartPole-v1", num_envs=2)
    with pytest.raises(ResetNeededError):
        env.get_state()
    env.reset(seed=0)
    state = env.get_state()
    env.close()
    with pytest.raises(gpu_envs.ClosedEnvError):
        env.set_state(state)
    tenv = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=2), EpisodeStats())
    with pytest.raises(ResetNeededError):
        tenv.get_state()


# ------------------------------------------------------------------ refusals
def test_torch_env_without_the_protocol_is_refused():
    env = gpu_envs.wrap(CountingTorchVectorEnv(2))
    env.reset()
    with pytest.raises(SnapshotError, match="RowStateEnv"):
        env.get_state()
    with pytest.raises(SnapshotError, match="get_state"):
        env.set_state(TensorDict({}, batch_size=[2]))


@pytest.mark.slow
def test_async_vector_env_is_refused():
    with gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", backend="gymnasium", vectorization="async") as env:
        env.reset(seed=0)
        with pytest.raises(SnapshotError, match="vectorization_mode='sync'"):
            env.get_state()


def test_vector_wrappers_are_refused():
    venv = gym.wrappers.vector.RecordEpisodeStatistics(
        gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    )
    env = gpu_envs.wrap(venv, device="cpu")
    env.reset(seed=0)
    with pytest.raises(SnapshotError, match="vector wrappers"):
        env.get_state()


def test_mo_gymnasium_vector_env_is_refused():
    mo_gymnasium = pytest.importorskip("mo_gymnasium")
    assert mo_gymnasium
    env = gpu_envs.make("deep-sea-treasure-v0", num_envs=2, device="cpu")
    env.reset(seed=0)
    with pytest.raises(SnapshotError, match="not gymnasium's own SyncVectorEnv"):
        env.get_state()


@pytest.mark.slow  # importing envpool takes seconds
def test_envpool_is_refused():
    pytest.importorskip("envpool")
    env = gpu_envs.make("CartPole-v1", num_envs=2, backend="envpool")
    env.reset(seed=0)
    with pytest.raises(SnapshotError, match="built-in envs"):
        env.get_state()


def test_isaaclab_manager_env_is_refused():
    env = gpu_envs.wrap(FakeIsaacManagerEnv(2))
    env.reset(seed=0)
    with pytest.raises(SnapshotError, match="reset_to"):
        env.get_state([0])


@pytest.mark.slow  # imports the video library
def test_record_episodes_transform_is_refused(tmp_path):
    from gpu_envs.transforms import RecordEpisodes

    inner = gpu_envs.make("CartPole-v1", num_envs=2, seed=0)
    env = TransformedEnv(inner, RecordEpisodes.for_env(inner, tmp_path, rows=[0]))
    env.reset(seed=0)
    with pytest.raises(SnapshotError, match="RecordEpisodes"):
        env.get_state()


def test_a_root_from_before_a_restore_is_stale_and_the_restored_root_steps(cartpole):
    """set_state replaces the cached roots: a root handed out before it no longer describes the env."""
    state = cartpole.get_state()
    action = torch.zeros(cartpole.num_envs, dtype=torch.int64)
    _, td = cartpole.step_and_maybe_reset(cartpole.root().set("action", action))
    cartpole.set_state(state)
    with pytest.raises(gpu_envs.StaleInputError):
        cartpole.step_and_maybe_reset(td.set("action", action))
    out, _ = cartpole.step_and_maybe_reset(cartpole.root().set("action", action))
    assert torch.equal(out["observation"], state["root", "observation"])


def test_a_snapshot_edited_to_an_impossible_step_count_is_refused():
    """``elapsed_steps=-100`` was accepted and the next episode ran 110 steps under ``max_episode_steps=10``."""
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", seed=0, max_episode_steps=10)
    env.reset()
    rows = torch.tensor([0])
    state = env.get_state(rows)
    for bad in (-100, 10):
        edited = state.clone()
        edited["backend", "elapsed_steps"] = torch.tensor([bad])
        with pytest.raises(InvalidArgumentError, match=r"elapsed_steps.*\[0, max_episode_steps=10\)"):
            env.set_state(edited, rows)
    edited = state.clone()
    edited["backend", "elapsed_steps"] = torch.tensor([9])  # one step left: truncated at the next step
    env.set_state(edited, rows)
    td = env.root().clone().set("action", torch.zeros(2, dtype=torch.long))
    td, _ = env.step_and_maybe_reset(td)
    assert td["next", "truncated"][0].item()
    with pytest.raises(InvalidArgumentError, match="elapsed_steps"):
        env.backend.env.elapsed_steps = torch.tensor([-1, 0])
