"""Image frames (large uint8 entries) go into the rollout buffer as 8-byte words: the same bytes, exactly.

``RolloutBuffer.write`` copies entries of at least ``PARALLEL_COPY_ELEMENTS`` narrow
elements as ``int64`` words on the CPU (see :mod:`gpu_envs.rollout.buffer`). These tests
prove the data is bit for bit what a plain loop of ``step_and_maybe_reset`` produced,
for contiguous sources, sources at an odd byte offset (no word view exists: copied
through a clone) and non-contiguous ones, and that nothing else takes that path.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.rollout import RolloutBuffer, collect
from gpu_envs.rollout.buffer import PARALLEL_COPY_ELEMENTS, word_dtype

N, T, FRAMES = 8, 12, (2, 64, 64)  # 8 x 8192 bytes = 65536 uint8 elements per copy: split over threads as such


class FrameEnv:
    """Counting frames: row i's frame at step t of episode e is (i + 7 e + 3 t + pixel) mod 256; episodes of 3..6 steps."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int = N, frames: tuple = FRAMES) -> None:
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.single_observation_space = gym.spaces.Box(0, 255, frames, np.uint8)
        self.single_action_space = gym.spaces.Discrete(6)
        self.pixels = torch.arange(int(np.prod(frames))).to(torch.uint8).view(1, *frames)
        self.index = torch.arange(num_envs)
        self.t = torch.zeros(num_envs, dtype=torch.int64)
        self.episode = torch.zeros(num_envs, dtype=torch.int64)

    def _frames(self) -> torch.Tensor:
        base = (self.index + 7 * self.episode + 3 * self.t).to(torch.uint8)
        return self.pixels + base.view(-1, *([1] * (self.pixels.dim() - 1)))  # uint8: wraps at 256

    def reset(self, *, seed=None, options=None):
        self.t = torch.zeros_like(self.t)
        self.episode = torch.zeros_like(self.episode)
        return self._frames(), {}

    def step(self, action):
        self.t = self.t + 1
        final = self._frames()
        done = self.t >= 3 + (self.index + self.episode) % 4
        truncated = done & (self.episode % 2 == 1)
        self.t = torch.where(done, 0, self.t)
        self.episode = self.episode + done
        return self._frames(), action.float(), done & ~truncated, truncated, {"final_obs": final}

    def close(self):
        pass


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: these frames are big enough for torch to split each op over threads, which on a busy
    machine waits milliseconds per op (what the word copies avoid in collect; here it would only slow the env)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def reference(steps: int, seed: int) -> TensorDict:
    """The transitions of ``steps`` plain ``step_and_maybe_reset`` calls with ``collect``'s random actions."""
    env = gpu_envs.wrap(FrameEnv(), device="cpu", seed=seed)
    sample = env.action_spec.sampler(generator=env.generator)
    td, out = env.reset(), []
    for _ in range(steps):
        td.set("action", sample())
        step, td = env.step_and_maybe_reset(td)
        out.append(step.clone())
    return torch.stack(out, dim=1)


def test_frames_are_written_as_words_and_equal_a_plain_loop_bit_for_bit():
    env = gpu_envs.wrap(FrameEnv(), device="cpu", seed=5)
    buffer = RolloutBuffer(env, T)
    traj = collect(env, buffer=buffer)
    keys = buffer.keys
    worded = {keys[i] for i, _ in buffer._words}
    assert worded == {"observation", ("next", "observation")}  # the frames, nothing else
    want = reference(T, seed=5)
    assert set(traj.keys(True, True)) == set(want.keys(True, True))
    for key in want.keys(True, True):
        assert torch.equal(traj.get(key), want.get(key)), key
    assert want["next", "done"].any() and traj["observation"].dtype == torch.uint8


def _transition(env: gpu_envs.BatchedEnv) -> TensorDict:
    td = env.reset()
    td.set("action", env.action_spec.zero())
    return env.step_and_maybe_reset(td)[0]


def _odd_offset(frames: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, at a storage offset of 1 byte: no int64 view of it exists."""
    storage = torch.empty(frames.numel() + 1, dtype=torch.uint8)
    out = storage[1:].view(frames.shape)
    out.copy_(frames)
    with pytest.raises(RuntimeError):
        out.flatten(1).view(torch.int64)
    return out


def _strided(frames: torch.Tensor) -> torch.Tensor:
    """The same values through a transposed buffer: not contiguous."""
    out = torch.empty(frames.shape[0], *frames.shape[1:][::-1], dtype=torch.uint8).permute(0, 3, 2, 1)
    out.copy_(frames)
    assert not out.is_contiguous()
    return out


@pytest.mark.parametrize("layout", [_odd_offset, _strided])
def test_sources_without_a_word_view_are_copied_exactly(layout):
    env = gpu_envs.wrap(FrameEnv(), device="cpu")
    buffer = RolloutBuffer(env, 3)
    first = _transition(env)
    buffer.write(0, first, check_keys=True)
    assert buffer._words
    second = first.clone()
    frames = second["next", "observation"] + 1  # other values than column 0
    second["next", "observation"] = layout(frames)
    second["observation"] = layout(frames + 1)
    buffer.write(1, second)
    assert torch.equal(buffer.data["next", "observation"][:, 1], frames)
    assert torch.equal(buffer.data["observation"][:, 1], frames + 1)
    assert torch.equal(buffer.data["next", "observation"][:, 0], first["next", "observation"])  # untouched


def test_small_or_wide_entries_keep_the_plain_copy():
    small = gpu_envs.wrap(FrameEnv(frames=(3, 8, 8)), device="cpu")  # 8 x 192 bytes: below the split
    buffer = RolloutBuffer(small, 2)
    collect(small, buffer=buffer)
    assert buffer._words == []
    cartpole = gpu_envs.make("CartPole-v1", num_envs=8192, device="cpu")  # 32768 float32: 4-byte elements
    buffer = RolloutBuffer(cartpole, 2)
    collect(cartpole, buffer=buffer)
    assert buffer._words == [] and buffer._word_columns is buffer._columns


def test_word_dtype_is_the_widest_whole_word():
    assert word_dtype(torch.Size([4, 84, 84]), torch.uint8) == torch.int64  # an Atari frame stack
    assert word_dtype(torch.Size([210, 160, 3]), torch.uint8) == torch.int64
    assert word_dtype(torch.Size([3, 5, 5]), torch.uint8) is None  # 75 bytes: no 2-byte word divides it
    assert word_dtype(torch.Size([6]), torch.uint8) == torch.int16
    assert word_dtype(torch.Size([3]), torch.float32) is None  # 12 bytes per env: not a whole int64
    assert word_dtype(torch.Size([2]), torch.float32) == torch.int64
    assert word_dtype(torch.Size([4]), torch.float64) is None  # already 8 bytes
    assert word_dtype(torch.Size([]), torch.uint8) is None
    assert PARALLEL_COPY_ELEMENTS == 32768


def test_write_values_takes_a_tuple_in_layout_order_and_writes_words_too():
    """The tensors-only entry (a loop holding a step's tensors without a TensorDict) writes what write() does."""
    env = gpu_envs.wrap(FrameEnv(), device="cpu")
    by_td, by_values = RolloutBuffer(env, 2), RolloutBuffer(env, 2)
    first = _transition(env)
    by_td.write(0, first, check_keys=True)
    by_values.write(0, first, check_keys=True)
    second = first.clone().apply(lambda x: x + 1 if x.dtype == torch.uint8 else x)
    by_td.write(1, second)
    by_values.write_values(1, tuple(second.get(key) for key in by_values.keys))
    assert by_values._words
    for key in by_td.keys:
        assert torch.equal(by_values.data.get(key), by_td.data.get(key)), key
