"""CuPy arrays cross to torch and back through DLPack without copies (CUDA machines only).

CuPy has no CPU backend: this file runs where ``cupy`` (the ``cupy`` extra,
``cupy-cuda12x``) and a CUDA device exist, and skips with that reason elsewhere (the
2-core CPU CI runners have neither). What it checks there:

* ``to_torch(cupy_array)`` and ``from_torch(tensor, "cupy")`` share one device buffer;
* a CuPy vector env (the counting env of tests/fakes.py written in CuPy, returning CuPy
  arrays) wrapped directly by ``gpu_envs.wrap`` matches the sequential oracle key by
  key, and its step loop never synchronises.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

cupy = pytest.importorskip(
    "cupy", reason="CuPy is not installed: it needs CUDA; install the 'cupy' extra on a CUDA machine to run this test"
)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the CuPy DLPack path needs one", allow_module_level=True)
try:
    cupy.cuda.runtime.getDeviceCount()
except Exception as err:  # cupy installed without a usable CUDA runtime
    pytest.skip(f"CuPy cannot reach a CUDA device ({err})", allow_module_level=True)

import gymnasium as gym  # noqa: E402

import gpu_envs  # noqa: E402
from gpu_envs.utils.arrays import array_device, framework_of, from_torch, is_zero_copy, to_torch  # noqa: E402
from tests.fakes import MAX_LEN, reference_rollout  # noqa: E402
from tests.sync_guard import no_sync  # noqa: E402

N, T = 6, 300


def test_cupy_to_torch_and_back_share_memory():
    a = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    t = to_torch(a)
    assert framework_of(a) == "cupy" and array_device(a).type == "cuda"
    assert t.device.type == "cuda" and t.data_ptr() == a.data.ptr and is_zero_copy(a, t)
    a += 1  # a write through CuPy is seen by torch: one buffer
    assert torch.equal(t.cpu(), torch.arange(1, 13, dtype=torch.float32).reshape(3, 4))
    u = torch.arange(5, device="cuda", dtype=torch.int64)
    b = from_torch(u, "cupy")
    assert b.data.ptr == u.data_ptr() and is_zero_copy(b, u)
    assert cupy.asnumpy(b).tolist() == [0, 1, 2, 3, 4]


class CupyCountingEnv:
    """tests.fakes.CountingTorchVectorEnv's dynamics in CuPy: the torch vector env
    protocol, but CuPy arrays in and out (same-step reset, final obs in info)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.device = torch.device("cuda", cupy.cuda.Device().id)
        self.single_observation_space = gym.spaces.Box(-(2**20), 2**20, (3,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.index = cupy.arange(num_envs)
        self.episode = cupy.full(num_envs, -1)
        self.t = cupy.zeros(num_envs, dtype=cupy.int64)

    def _obs(self):
        return cupy.stack([self.index, self.episode, self.t], axis=-1).astype(cupy.float32)

    def reset(self, *, seed=None, options=None):
        self.episode = self.episode + 1
        self.t = cupy.zeros_like(self.t)
        return self._obs(), {}

    def step(self, action):
        assert isinstance(action, cupy.ndarray)  # the action comes back as CuPy, by DLPack
        self.t = self.t + 1
        varied = 1 + (5 * self.index + 3 * self.episode + self.index * self.episode) % MAX_LEN
        ended = self.t >= cupy.where(self.episode == 0, 3, varied)
        truncated = ended & ((self.index + self.episode) % 3 == 0)
        terminated = ended & ~truncated
        reward = (100.0 * self.index + 10.0 * self.episode + self.t + action).astype(cupy.float32)
        final = self._obs()
        self.episode = cupy.where(ended, self.episode + 1, self.episode)
        self.t = cupy.where(ended, 0, self.t)
        return self._obs(), reward, terminated, truncated, {"final_obs": final}

    def close(self):
        pass


def test_cupy_env_matches_sequential_reference():
    actions = np.random.default_rng(0).integers(0, 2, size=(N, T))
    expected = reference_rollout(N, actions, final_obs="info")
    env = gpu_envs.wrap(CupyCountingEnv(N))
    td = env.reset()
    got = {"observation": [], "next_observation": [], "reward": [], "terminated": [], "truncated": [], "root": []}
    for t in range(T):
        td["action"] = torch.as_tensor(actions[:, t], device=env.device)
        td, root = env.step_and_maybe_reset(td)
        got["observation"].append(td["observation"])
        got["next_observation"].append(td["next", "observation"])
        got["reward"].append(td["next", "reward"][:, 0])
        got["terminated"].append(td["next", "terminated"][:, 0])
        got["truncated"].append(td["next", "truncated"][:, 0])
        got["root"].append(root["observation"])
        td = root
    for key, values in got.items():
        have = torch.stack(values, dim=1).cpu().numpy()
        np.testing.assert_array_equal(have, expected[key].astype(have.dtype), err_msg=key)
    assert expected["terminated"].any() and expected["truncated"].any()


def test_cupy_env_steps_never_sync():
    env = gpu_envs.wrap(CupyCountingEnv(N))
    td = env.reset()
    td["action"] = env.action_spec.rand(generator=env.generator)
    td, td = env.step_and_maybe_reset(td)  # the first step validates (allowed to sync)
    ended = torch.zeros((), device=env.device)
    with no_sync():
        for _ in range(50):
            td["action"] = env.action_spec.rand(generator=env.generator)
            td, root = env.step_and_maybe_reset(td)
            ended += td["next", "done"].sum()
            td = root
    assert ended.item() > 0
