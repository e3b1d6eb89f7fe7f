"""The gymnasium backend against the sequential oracle (docs/DESIGN.md, "How correctness is proven").

Every transition key of ``step_and_maybe_reset`` -- observation, next observation (the
TRUE final one where an episode ended), reward, terminated, truncated, done, the info
field and the next root -- must equal a plain loop of single envs stepped one by one and
reset by hand, for every auto-reset mode, sync and async, and for a single env.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.backends.gymnasium_envs import FrameSkip, add_pixels
from tests.fakes import CountingEnv, reward_of
from tests.gym_fakes import (
    PixelCountingEnv,
    assert_same_transitions,
    batched_transitions,
    counting_oracle,
    counting_vector_env,
    frame_of,
    register_test_envs,
    sequential_reference,
)

register_test_envs()


def _counting_oracle(env, num_envs: int, steps: int) -> None:
    assert num_envs * steps >= 5000
    counting_oracle(env, num_envs, steps)


@pytest.mark.parametrize("mode", ["same_step", "disabled", "next_step"])
def test_counting_sync_matches_sequential_reference(mode):
    with gpu_envs.wrap(counting_vector_env(8, mode), device="cpu") as env:
        assert env.backend.mode.name.lower() == mode
        _counting_oracle(env, 8, 700)
        assert list(env.info_spec.keys()) == ["step_count"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["same_step", "disabled", "next_step"])
def test_counting_async_matches_sequential_reference(mode):
    with gpu_envs.wrap(counting_vector_env(3, mode, "async"), device="cpu") as env:
        _counting_oracle(env, 3, 1700)


@pytest.mark.slow
def test_single_env_is_a_batch_of_one_and_matches_reference():
    env = gpu_envs.wrap(CountingEnv(0), device="cpu")
    assert env.batch_size == torch.Size([1])
    assert "single env" in repr(env)
    _counting_oracle(env, 1, 5000)
    env.close()


def test_cartpole_make_matches_sequential_gymnasium():
    n, steps, seed = 8, 650, 3
    actions = np.random.default_rng(1).integers(0, 2, size=(n, steps))
    want = sequential_reference(lambda i: gym.make("CartPole-v1"), actions, seed=seed)
    with gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", backend="gymnasium") as env:
        got = batched_transitions(env, torch.as_tensor(actions), seed=seed)
    assert_same_transitions(got, want)
    assert want["done"].sum() > 100


def test_pendulum_make_matches_sequential_gymnasium():
    n, steps, seed = 4, 1250, 11
    actions = np.random.default_rng(2).uniform(-2, 2, size=(n, steps, 1)).astype(np.float32)
    want = sequential_reference(lambda i: gym.make("Pendulum-v1"), actions, seed=seed)
    with gpu_envs.make("Pendulum-v1", num_envs=n, device="cpu", backend="gymnasium") as env:
        got = batched_transitions(env, torch.as_tensor(actions), seed=seed)
    assert_same_transitions(got, want)
    assert want["truncated"].sum() == 6 * n  # six time limits each, every final obs checked


def test_cartpole_async_make_matches_sequential_gymnasium():
    n, steps, seed = 3, 300, 5
    actions = np.random.default_rng(3).integers(0, 2, size=(n, steps))
    want = sequential_reference(lambda i: gym.make("CartPole-v1"), actions, seed=seed)
    with gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", backend="gymnasium", vectorization="async") as env:
        assert isinstance(env.backend.env.unwrapped, gym.vector.AsyncVectorEnv)
        got = batched_transitions(env, torch.as_tensor(actions), seed=seed)
    assert_same_transitions(got, want)


def test_seeded_runs_are_bit_for_bit_reproducible():
    actions = torch.as_tensor(np.random.default_rng(4).integers(0, 2, size=(5, 300)))

    def run(seed):
        with gpu_envs.make("CartPole-v1", num_envs=5, device="cpu", backend="gymnasium") as env:
            return batched_transitions(env, actions, seed=seed)

    first, again, other = run(7), run(7), run(8)
    for key in first:
        assert np.array_equal(first[key], again[key]), key
    assert not np.array_equal(first["observation"], other["observation"])


def test_reset_seed_seeds_sub_env_i_with_seed_plus_i():
    with gpu_envs.make("CartPole-v1", num_envs=3, device="cpu", backend="gymnasium") as env:
        obs = env.reset(seed=40)["observation"].numpy()
    for i in range(3):
        single = gym.make("CartPole-v1")
        np.testing.assert_array_equal(obs[i], single.reset(seed=40 + i)[0])
    single_env = gpu_envs.wrap(gym.make("CartPole-v1"), device="cpu")
    np.testing.assert_array_equal(single_env.reset(seed=40)["observation"][0].numpy(), obs[0])


def test_make_seed_and_random_policy_rollout_are_reproducible():
    def rollout():
        with gpu_envs.make("Acrobot-v1", num_envs=3, device="cpu", backend="gymnasium", seed=9) as env:
            return env.rollout(40)

    a, b = rollout(), rollout()
    assert torch.equal(a["action"], b["action"]) and torch.equal(a["next", "observation"], b["next", "observation"])


@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_reset_mask_resets_only_masked_rows(mode):
    with gpu_envs.wrap(counting_vector_env(4, mode), device="cpu") as env:
        td = env.reset()
        td["action"] = torch.zeros(4, dtype=torch.long)
        td, root = env.step_and_maybe_reset(td)  # nobody ends on step 1
        out = env.reset(td=root.set("_reset", torch.tensor([[True], [False], [True], [False]])))
        assert out["observation"][:, 1].tolist() == [1, 0, 1, 0]
        assert out["observation"][:, 2].tolist() == [0, 1, 0, 1]
        # stepping on continues every row from where it is
        out["action"] = torch.zeros(4, dtype=torch.long)
        td = env.step(out)
        assert td["next", "observation"][:, 2].tolist() == [1, 2, 1, 2]


def test_rollout_continues_across_calls():
    with gpu_envs.wrap(counting_vector_env(4, "disabled"), device="cpu") as env:
        first = env.rollout(9)
        second = env.rollout(9, reset=False)
    actions = torch.cat([first["action"], second["action"]], dim=1).numpy()
    want = sequential_reference(CountingEnv, actions)
    np.testing.assert_array_equal(second["next", "observation"].numpy(), want["next_observation"][:, 9:])
    np.testing.assert_array_equal(second["observation"].numpy(), want["observation"][:, 9:])


def _frame_skip_reference(num_envs: int, actions: np.ndarray, skip: int) -> dict:
    """Plain loop: repeat each action ``skip`` times, sum rewards, stop early at done."""
    envs = [CountingEnv(0) for _ in range(num_envs)]
    for env in envs:
        env.reset()
    out = {"next_observation": [], "reward": [], "done": []}
    for t in range(actions.shape[1]):
        rows = {k: [] for k in out}
        for i, env in enumerate(envs):
            total = 0.0
            for _ in range(skip):
                obs, reward, term, trunc, _ = env.step(int(actions[i, t]))
                total += reward
                if term or trunc:
                    break
            rows["next_observation"].append(obs)
            rows["reward"].append(total)
            rows["done"].append(term or trunc)
            if term or trunc:
                env.reset()
        for k in out:
            out[k].append(np.asarray(rows[k]))
    return {k: np.stack(v, axis=1) for k, v in out.items()}


@pytest.mark.parametrize("how", ["make", "wrap_single"])
def test_frame_skip_repeats_sums_and_stops_at_done(how):
    n = 2 if how == "make" else 1
    actions = np.random.default_rng(5).integers(0, 2, size=(n, 60))
    if how == "make":
        env = gpu_envs.make("GpuEnvsTest/Counting-v0", num_envs=n, device="cpu", backend="gymnasium", frame_skip=3)
    else:
        env = gpu_envs.wrap(CountingEnv(0), device="cpu", frame_skip=3)
    got = batched_transitions(env, torch.as_tensor(actions))
    env.close()
    want = _frame_skip_reference(n, actions, 3)
    assert_same_transitions(got, want)
    # episodes of length 3 (the first) end after exactly one macro step; reward sums three steps
    assert want["done"][:, 0].tolist() == [True] * n
    assert want["reward"][0, 0] == sum(reward_of(0, 0, s) for s in (1, 2, 3)) + 3 * actions[0, 0]


def test_pixels_with_state_show_the_final_frame_on_ended_rows():
    steps = 40
    actions = torch.zeros(3, steps, dtype=torch.long)
    with gpu_envs.make(
        "GpuEnvsTest/PixelCounting-v0",
        num_envs=3,
        device="cpu",
        backend="gymnasium",
        from_pixels=True,
        pixels_only=False,
    ) as env:
        assert set(env.observation_spec.keys()) == {"observation", "pixels"}
        assert env.observation_spec["pixels"].dtype == torch.uint8
        got = batched_transitions(env, actions, obs_keys=["observation", "pixels"])
    ended = got["done"]
    assert ended.any()
    for name in ("next_observation", "root", "observation"):
        obs, pixels = got[f"{name}/observation"], got[f"{name}/pixels"]
        want = np.stack([[frame_of(o) for o in row] for row in obs])
        np.testing.assert_array_equal(pixels, want, err_msg=name)
    # on ended rows, the final frame (step count = episode length), not the reset frame
    assert (got["next_observation/pixels"][ended][:, 0, 0, 2] > 0).all()


def test_pixels_only_matches_sequential_reference():
    actions = np.random.default_rng(6).integers(0, 2, size=(2, 30))

    def make_single(i):
        return add_pixels(PixelCountingEnv(i), pixels_only=True)

    want = sequential_reference(make_single, actions)
    venv_fns = [lambda i=i: add_pixels(PixelCountingEnv(i)) for i in range(2)]
    venv = gym.vector.SyncVectorEnv(venv_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    with gpu_envs.wrap(venv, device="cpu") as env:
        got = batched_transitions(env, torch.as_tensor(actions))
    assert_same_transitions(got, want)
    single = gpu_envs.wrap(PixelCountingEnv(0), device="cpu", from_pixels=True)
    assert list(single.observation_spec.keys()) == ["pixels"]
    assert single.reset()["pixels"].shape == (1, 4, 5, 3)
    single.close()


def test_frame_skip_wrapper_is_usable_with_make_vec():
    venv = gym.make_vec(
        "GpuEnvsTest/Counting-v0",
        num_envs=2,
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        wrappers=[functools.partial(FrameSkip, skip=2)],
    )
    with gpu_envs.wrap(venv, device="cpu") as env:
        td = env.reset()
        td["action"] = torch.zeros(2, dtype=torch.long)
        td = env.step(td)
    assert td["next", "observation"][:, 2].tolist() == [2.0, 2.0]


def cartpole_vector_reference(actions: np.ndarray, seed: int, max_episode_steps: int) -> dict[str, np.ndarray]:
    """The oracle for gymnasium's ``CartPoleVectorEnv``: one one-row ``CartPoleVectorEnv`` per env, stepped one by
    one and reset by hand when done, with the reset states drawn the way the vector env draws them: one stream
    (``np_random`` seeded with ``seed``), ``uniform(-0.05, 0.05, size=(4, k))`` for the ``k`` rows reset together.
    """
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
    from gymnasium.utils import seeding

    n, steps = actions.shape
    stream, _ = seeding.np_random(seed)
    rows = [CartPoleVectorEnv(num_envs=1, max_episode_steps=max_episode_steps) for _ in range(n)]
    for row in rows:
        row.reset()

    def reset(which: list[int]) -> None:
        draws = stream.uniform(-0.05, 0.05, size=(4, len(which)))
        for j, i in enumerate(which):
            rows[i].state, rows[i].steps[:], rows[i].prev_done[:] = draws[:, j : j + 1].copy(), 0, False

    reset(list(range(n)))
    obs = [row.state.T.astype(np.float32)[0] for row in rows]
    out = {k: [] for k in ("observation", "next_observation", "root", "reward", "terminated", "truncated", "done")}
    for t in range(steps):
        step = {k: [] for k in out}
        for i, row in enumerate(rows):
            next_obs, reward, term, trunc, _ = row.step(np.array([actions[i, t]]))
            for key, value in zip(("next_observation", "reward", "terminated", "truncated"), (next_obs[0], *(v[0] for v in (reward, term, trunc))), strict=True):  # fmt: skip
                step[key].append(value)
            step["observation"].append(obs[i])
            step["done"].append(term[0] or trunc[0])
        reset([i for i in range(n) if step["done"][i]])  # every ended row, together, in row order
        obs = [row.state.T.astype(np.float32)[0] if step["done"][i] else step["next_observation"][i] for i, row in enumerate(rows)]  # fmt: skip
        step["root"] = obs
        for key, values in step.items():
            out[key].append(np.asarray(values))
    return {key: np.stack(values, axis=1) for key, values in out.items()}


def test_gymnasium_cartpole_vector_env_next_step_is_wrapped_exactly():
    """``gym.make_vec("CartPole-v1", n)`` is gymnasium 1.x's NEXT_STEP ``CartPoleVectorEnv`` without masked resets:
    its ended rows are reset in the same step, drawing what its own next-step reset would (no wasted step, no
    ignored action), equal to the oracle key by key, terminations and time limits (30 steps here) alike."""
    n, steps, seed, limit = 6, 1100, 2, 30
    actions = np.random.default_rng(5).integers(0, 2, size=(n, steps))
    actions[:3, :] = np.arange(steps) % 2  # alternating pushes keep some poles up until the time limit
    with gpu_envs.wrap(gym.make_vec("CartPole-v1", n, max_episode_steps=limit), device="cpu") as env:
        assert env.backend.mode == gym.vector.AutoresetMode.NEXT_STEP
        got = batched_transitions(env, torch.as_tensor(actions), seed=seed)
        td = env.reset(seed=seed)  # a masked reset resets only those rows, as the ended rows' reset does
        mask = torch.tensor([True, False, True, False, False, False]).unsqueeze(-1)
        partial = env.reset(td=td.clone().set("_reset", mask))
        assert torch.equal(partial["observation"][1:2], td["observation"][1:2])
        assert not torch.equal(partial["observation"][0], td["observation"][0])
    want = cartpole_vector_reference(actions, seed, limit)
    assert_same_transitions(got, want)
    assert want["terminated"].sum() > 100 and want["truncated"].sum() > 20
    assert (got["reward"] == 1.0).all()  # NEXT_STEP's wasted step would show as a reward of 0
