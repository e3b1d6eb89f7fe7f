"""The EnvPool backend against the sequential oracle: real EnvPool pools (CartPole, Ant, Pong).

EnvPool resets an ended env on the NEXT step (ignoring that step's action, reward 0);
the backend resets the ended rows in the same call instead. The oracle is N one-env
pools (env ``i`` built with ``seed + i``, EnvPool's own seeding rule), each stepped one
by one and reset by hand when its episode ends: every key of every transition
(observation, the TRUE final observation, reward, flags, info, next root) must be equal,
bit for bit. A fake or lost step, a swapped row or a post-reset final observation fails it.
"""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.backends.envpool import EnvPoolBackend
from gpu_envs.contract.errors import InvalidArgumentError, NotAnEnvError
from tests.gym_fakes import assert_same_transitions, batched_transitions, sequential_reference

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("envpool") is None, reason="envpool not installed (CI installs it)"
)

if importlib.util.find_spec("envpool") is not None:
    import envpool


def pool(task: str, num_envs: int, seed: int, **kwargs):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered.*")
        return envpool.make(task, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs)


class SinglePool:
    """A one-env pool with a single env's gymnasium API: the oracle's sub-env ``i`` (seed ``s + i``)."""

    def __init__(self, task: str, seed: int, **kwargs) -> None:
        self.pool = pool(task, 1, seed, **kwargs)

    def reset(self, seed=None):
        obs, info = self.pool.reset()  # the pool's seed is fixed at construction (seed + i)
        return obs[0], {k: v[0] for k, v in info.items() if isinstance(v, np.ndarray)}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.pool.step(np.asarray(action)[None])
        info = {k: v[0] for k, v in info.items() if isinstance(v, np.ndarray)}
        return obs[0], reward[0], bool(terminated[0]), bool(truncated[0]), info

    def close(self):
        self.pool.close()


def oracle(task: str, actions: np.ndarray, seed: int, info_keys=(), **kwargs) -> dict:
    return sequential_reference(lambda i: SinglePool(task, seed + i, **kwargs), actions, info_keys=info_keys)


def test_cartpole_matches_single_env_pools_stepped_by_hand():
    n, steps, seed = 8, 600, 5
    actions = np.random.default_rng(0).integers(0, 2, size=(n, steps))
    want = oracle("CartPole-v1", actions, seed, info_keys=["elapsed_step"])
    with gpu_envs.make("CartPole-v1", num_envs=n, backend="envpool", device="cpu") as env:
        assert isinstance(env.backend, EnvPoolBackend)
        got = batched_transitions(env, torch.as_tensor(actions), info_keys=["elapsed_step"], seed=seed)
    assert_same_transitions(got, want)
    ended = want["done"]
    assert ended.sum() > 150
    # no fake step: the step after an episode end is a real one (reward 1, elapsed step 1), never reward 0
    after = np.zeros_like(ended)
    after[:, 1:] = ended[:, :-1]
    assert (got["reward"][after] == 1).all() and (got["elapsed_step"][after] == 1).all()
    # the final observations satisfy CartPole's ending condition; the others do not
    final = got["next_observation"]
    outside = (np.abs(final[..., 0]) > 2.4) | (np.abs(final[..., 2]) > 12 * 2 * np.pi / 360)
    np.testing.assert_array_equal(outside, got["terminated"])


@pytest.mark.slow
def test_ant_matches_single_env_pools_with_time_limit_and_unhealthy_ends():
    n, steps, seed = 4, 400, 2
    actions = np.random.default_rng(1).uniform(-1, 1, size=(n, steps, 8))
    info = ["elapsed_step", "x_position", "reward_ctrl"]
    want = oracle("Ant-v4", actions, seed, info_keys=info, max_episode_steps=60)
    with gpu_envs.make("Ant-v4", num_envs=n, backend="envpool", device="cpu", max_episode_steps=60) as env:
        assert env.single_observation_spec["observation"].dtype == torch.float64
        got = batched_transitions(env, torch.as_tensor(actions), info_keys=info, seed=seed)
    assert_same_transitions(got, want)
    assert want["truncated"].sum() >= n * (steps // 60) - n and want["terminated"].sum() >= 0


@pytest.mark.slow
def test_pong_uint8_frames_match_single_env_pools():
    n, steps, seed = 3, 120, 9
    actions = np.random.default_rng(2).integers(0, 6, size=(n, steps))
    info = ["elapsed_step", "lives", "info_reward"]
    want = sequential_reference(
        lambda i: SinglePool("Pong-v5", seed + i, max_episode_steps=25), actions, info_keys=info[:2]
    )
    with gpu_envs.make("Pong-v5", num_envs=n, backend="envpool", device="cpu", max_episode_steps=25) as env:
        spec = env.single_observation_spec["observation"]
        assert spec.dtype == torch.uint8 and tuple(spec.shape) == (4, 84, 84)
        assert {"lives", "ram", "info_reward", "info_terminated", "elapsed_step"} <= set(env.info_spec.keys())
        got = batched_transitions(env, torch.as_tensor(actions), info_keys=info, seed=seed)
    assert got["observation"].dtype == np.uint8
    assert_same_transitions(got, want)
    np.testing.assert_array_equal(got["info_reward"], got["reward"])  # unclipped reward (reward_clip is off)
    assert want["truncated"].sum() >= n * (steps // 25) - n
    # a final frame is the last frame of its episode, not the first of the next one
    ended = got["done"]
    assert not np.array_equal(got["next_observation"][ended], got["root"][ended])


def test_wrapped_pool_matches_oracle_and_keeps_its_seed():
    n, steps, seed = 5, 300, 11
    actions = np.random.default_rng(3).integers(0, 2, size=(n, steps))
    want = oracle("CartPole-v1", actions, seed)
    env = gpu_envs.wrap(pool("CartPole-v1", n, seed), device="cpu")
    got = batched_transitions(env, torch.as_tensor(actions), seed=seed)  # the seed it was built with: accepted
    assert_same_transitions(got, want)
    with pytest.raises(InvalidArgumentError, match="cannot reseed this EnvPool pool"):
        env.reset(seed=seed)  # used since: EnvPool would ignore it, so it is refused
    with pytest.raises(InvalidArgumentError, match=r"envpool.make\(\.\.\., seed=3\)"):
        gpu_envs.wrap(pool("CartPole-v1", n, seed), device="cpu").reset(seed=3)
    env.reset()  # a new episode without a seed: fine
    env.close()


def test_env_seed_list_pools_are_accepted_with_their_own_seeds():
    p = pool("CartPole-v1", 3, [4, 5, 6])
    env = gpu_envs.wrap(p, device="cpu", seed=4)  # env_seed == [4, 5, 6]: what reset(seed=4) means
    first = env.reset()["observation"]
    np.testing.assert_array_equal(first[1].numpy(), SinglePool("CartPole-v1", 5).reset()[0])
    env.close()


def test_made_pool_is_rebuilt_per_seed_and_repeats_bit_for_bit():
    actions = torch.as_tensor(np.random.default_rng(4).integers(0, 2, size=(4, 80)))
    with gpu_envs.make("CartPole-v1", num_envs=4, backend="envpool", device="cpu") as env:
        a = batched_transitions(env, actions, seed=7)
        b = batched_transitions(env, actions, seed=8)
        c = batched_transitions(env, actions, seed=7)
        first_pool = env.backend.pool
        env.reset()  # no seed: the same pool, a new episode
        assert env.backend.pool is first_pool
    assert_same_transitions(c, a)
    assert not np.array_equal(a["observation"][:, 0], b["observation"][:, 0])


def test_env_index_offset_shifts_the_seeds():
    with gpu_envs.make("CartPole-v1", num_envs=2, backend="envpool", device="cpu", env_index_offset=3) as env:
        obs = env.reset(seed=10)["observation"].numpy()
    np.testing.assert_array_equal(obs[0], SinglePool("CartPole-v1", 13).reset()[0])


def test_partial_reset_matches_rows_reset_by_hand():
    n, seed = 4, 21
    with gpu_envs.make("CartPole-v1", num_envs=n, backend="envpool", device="cpu") as env:
        td = env.reset(seed=seed)
        for _ in range(3):
            td["action"] = torch.zeros(n, dtype=torch.int64)
            td = env.step_and_maybe_reset(td)[1]
        before = td["observation"].clone()
        mask = torch.tensor([False, True, False, True])
        after = env.reset(td=td.set("_reset", mask.unsqueeze(-1)))["observation"]
        with pytest.raises(InvalidArgumentError, match="partial reset cannot take a seed"):
            env.backend.reset(seed=1, mask=mask)
    singles = [SinglePool("CartPole-v1", seed + i) for i in range(n)]
    for i, single in enumerate(singles):
        single.reset()
        for _ in range(3):
            obs = single.step(0)[0]
        np.testing.assert_array_equal(before[i].numpy(), obs)
        want = single.reset()[0] if mask[i] else obs
        np.testing.assert_array_equal(after[i].numpy(), want)


def test_packed_staging_path_gives_the_same_transitions(monkeypatch):
    """The CUDA data path (one packed pinned buffer) run on the CPU."""
    monkeypatch.setattr(EnvPoolBackend, "staging_packed", True)
    actions = torch.as_tensor(np.random.default_rng(5).integers(0, 2, size=(3, 200)))
    with gpu_envs.make("CartPole-v1", num_envs=3, backend="envpool", device="cpu") as env:
        assert env.backend._stage.packed
        got = batched_transitions(env, actions, info_keys=["elapsed_step"], seed=1)
    assert_same_transitions(got, oracle("CartPole-v1", actions.numpy(), 1, info_keys=["elapsed_step"]))


def test_transitions_handed_out_are_never_rewritten():
    with gpu_envs.make("CartPole-v1", num_envs=4, backend="envpool", device="cpu") as env:
        td = env.reset(seed=0)
        kept = []
        for _ in range(40):
            td["action"] = torch.ones(4, dtype=torch.int64)
            td, root = env.step_and_maybe_reset(td)
            kept.append(
                (
                    td["next", "observation"],
                    td["next", "observation"].clone(),
                    root["observation"],
                    root["observation"].clone(),
                )
            )
            td = root
        for live, copy, live_root, copy_root in kept:
            assert torch.equal(live, copy) and torch.equal(live_root, copy_root)


def test_refusals_name_the_fix():
    with pytest.raises(InvalidArgumentError, match="batch_size=num_envs"):
        gpu_envs.wrap(pool("CartPole-v1", 4, 0, batch_size=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm = envpool.make("CartPole-v1", env_type="dm", num_envs=2)
    with pytest.raises(NotAnEnvError, match="env_type='gymnasium'"):
        gpu_envs.wrap(dm, backend="envpool")
    with (
        gpu_envs.make("CartPole-v1", num_envs=2, backend="envpool", device="cpu") as env,
        pytest.raises(InvalidArgumentError, match="int32"),
    ):
        env.reset(seed=2**31)
    with pytest.raises(InvalidArgumentError, match="sets env_seed itself"):
        gpu_envs.make("CartPole-v1", num_envs=2, backend="envpool", env_seed=[1, 2])


@pytest.mark.slow
def test_ids_only_envpool_has_go_to_envpool_by_default_and_are_listed():
    assert "Pong-v5" in gpu_envs.available_envs()["envpool"]
    with gpu_envs.make("Pong-v5", num_envs=1, device="cpu", seed=0) as env:
        assert env.backend.name == "envpool"
    with gpu_envs.make("CartPole-v1", num_envs=1, device="cpu") as env:
        assert env.backend.name == "torch"  # the built-in one, as before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "kwargs"),
    [("CartPole-v1", {}), ("Ant-v4", {"max_episode_steps": 50}), ("Pong-v5", {"max_episode_steps": 40})],
)
def test_check_env_passes(task, kwargs):
    with gpu_envs.make(task, num_envs=4, backend="envpool", device="cpu", **kwargs) as env:
        report = gpu_envs.check_env(env, steps=120, name=task)
    assert report.ok, str(report)
