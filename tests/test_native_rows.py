"""History's and Delay's C kernel (gpu_envs.transforms.native_rows) against their torch ops: the same bytes.

Each case builds the same transformed env twice, once with the kernel and once with
``GPU_ENVS_NATIVE=0`` (the torch ops), and steps both with the same seeded random actions
through auto-resets, masked resets, a ``collect`` and a snapshot restored mid-episode,
comparing every transition, every root and the transforms' whole state bit for bit. The
envs cover the row sizes the kernel copies differently: CartPole (16-byte observation
rows, int64 actions), Pendulum (12-byte rows, one float torque), the counting env's int64
observations (24 bytes), and a uint8 image env (35-byte frames, 3-float actions). The
sequential references of the transforms themselves are tests/test_history.py and
tests/test_delay.py, which run on both paths too (the ``row_kernel_paths`` fixture).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.rollout import collect
from gpu_envs.transforms import Delay, History, InitTracker, TransformedEnv, native_rows
from tests.fakes import CountingTorchVectorEnv

pytestmark = pytest.mark.skipif(
    native_rows.kernels(torch.device("cpu")) is None, reason="no C compiler: only the torch ops run here"
)


class FramesEnv:
    """A torch vector env of uint8 ``[5, 7]`` frames and a 3-float action; episodes of 3 + row % 4 steps."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    supports_reset_mask = True

    def __init__(self, num_envs: int) -> None:
        self.num_envs, self.device = num_envs, torch.device("cpu")
        self.single_observation_space = gym.spaces.Box(0, 255, (5, 7), np.uint8)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.frame = torch.zeros(num_envs, 5, 7, dtype=torch.uint8)
        self.length = 3 + torch.arange(num_envs) % 4

    def reset(self, *, seed=None, options=None):
        mask = None if options is None else options.get("reset_mask")
        mask = torch.ones(self.num_envs, dtype=torch.bool) if mask is None else mask
        self.t = torch.where(mask, 0, self.t)
        self.frame = torch.where(
            mask.view(-1, 1, 1), (7 * torch.arange(self.num_envs) % 256).view(-1, 1, 1).to(torch.uint8), self.frame
        )
        return self.frame.clone(), {}

    def step(self, action):
        self.t = self.t + 1
        shift = (action.sum(-1) * 50).round().to(torch.uint8).view(-1, 1, 1)
        self.frame = self.frame + shift + torch.arange(35, dtype=torch.uint8).view(1, 5, 7)
        ended = self.t >= self.length
        final = self.frame.clone()
        self.t = torch.where(ended, 0, self.t)
        self.frame = torch.where(ended.view(-1, 1, 1), torch.zeros_like(self.frame), self.frame)
        reward = action.sum(-1)
        return self.frame.clone(), reward, ended & (self.t % 2 == 0), ended & (self.t % 2 == 1), {"final_obs": final}

    def close(self):
        pass


CASES = {
    "cartpole": (
        lambda: gpu_envs.make("CartPole-v1", num_envs=300, seed=5, max_episode_steps=12),
        lambda: [
            History(length=4),
            Delay(action_steps=(0, 3), observation_steps=(0, 2), initial_action="first", hold_probability=0.3),
            InitTracker(),
        ],
    ),
    "pendulum": (
        lambda: gpu_envs.make("Pendulum-v1", num_envs=37, seed=2, max_episode_steps=7),
        lambda: [Delay(action_steps=2, observation_steps=(1, 3), hold_probability=0.5), History(length=1)],
    ),
    "counting_int64": (
        lambda: gpu_envs.wrap(CountingTorchVectorEnv(6, final_obs="masked", obs_dtype=torch.int64)),
        lambda: [History(length=3), Delay(action_steps=(1, 2), observation_steps=(0, 3))],
    ),
    "frames_uint8": (
        lambda: gpu_envs.wrap(FramesEnv(9)),
        lambda: [Delay(action_steps=(0, 1), observation_steps=(0, 2), initial_action="first"), History(length=3)],
    ),
}


def _run(env, seed: int) -> list:
    """Every transition and root of a run with masked resets, a collect, and a snapshot restored mid-episode.

    The snapshot needs an env that restores rows (the built-in ones); the fakes run without it."""
    snapshots = env.env.backend.capabilities.snapshot_rows
    g = torch.Generator().manual_seed(seed)
    out = []
    td = env.reset(seed=seed)
    for t in range(30):
        td["action"] = env.action_spec.rand(generator=g)
        step, td = env.step_and_maybe_reset(td)
        out += [step.clone(), td.clone()]
        if t in (8, 19):  # a masked reset of some rows
            mask = torch.rand(env.num_envs, 1, generator=g) < 0.3
            td = env.reset(td=td.clone().set("_reset", mask))
            out.append(td.clone())
        if t == 12 and snapshots:
            saved = env.get_state()
    out.append(collect(env, None, steps=9).clone())
    if snapshots:
        env.set_state(saved)
        out.append(env.root().clone())
        out.append(env.get_state().clone())
    out.append(collect(env, None, steps=5).clone())
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_the_kernel_and_the_torch_ops_give_the_same_bytes(monkeypatch, case):
    make_env, make_transforms = CASES[case]
    native = TransformedEnv(make_env(), *make_transforms())
    env = make_env()  # built outside: the built-in envs keep their own native step, only the transforms differ
    with monkeypatch.context() as m:
        m.setenv("GPU_ENVS_NATIVE", "0")
        torch_ops = TransformedEnv(env, *make_transforms())
    kernels = [t for t in native.transforms if not isinstance(t, InitTracker)]
    assert all(t.native for t in kernels)
    assert not any(t.native for t in torch_ops.transforms if not isinstance(t, InitTracker))
    ours, theirs = _run(native, seed=1), _run(torch_ops, seed=1)
    assert len(ours) == len(theirs)
    ended = 0
    for a, b in zip(ours, theirs, strict=True):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            x, y = a[key], b[key]
            assert x.dtype == y.dtype and x.shape == y.shape, key
            assert torch.equal(
                x.view(torch.uint8) if x.dtype.is_floating_point else x,
                y.view(torch.uint8) if y.dtype.is_floating_point else y,
            ), key
        if "next" in a:
            ended += int(a["next", "done"].sum())
    assert ended > 0, "the run went through auto-resets"


def test_an_input_the_kernel_was_not_set_up_for_goes_through_the_torch_ops():
    """A non-contiguous observation (same shape and values) is not read as raw bytes: the same windows come out."""
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=4, seed=0), History(length=3))
    history = env.transforms[0]
    root = env.reset()
    root["action"] = torch.ones(4, dtype=torch.long)
    td, _ = env.step_and_maybe_reset(root)
    window = history.live_state()["window_0"].clone()
    obs = td["next", "observation"][:, -1]
    strided = torch.empty(4, 8)[:, ::2]  # [4, 4], not contiguous
    strided.copy_(obs)
    assert not native_rows.fits(strided, torch.Size((4, 4)), torch.float32)
    for given in (obs.clone(), strided):
        history.live_state()["window_0"].copy_(window)
        out = history.step(td.clone().set(("next", "observation"), given))
        assert torch.equal(out["next", "observation"][:, :-1], window[:, 1:])
        assert torch.equal(out["next", "observation"][:, -1], obs)


@pytest.mark.parametrize("make", [lambda: History(length=3), lambda: Delay(action_steps=(0, 2), observation_steps=1)])
def test_a_deep_copy_of_a_set_up_transform_is_refused_with_the_envs_clear_error(make):
    """A set-up transform belongs to its env; copying it copies the env, which says what works instead.

    The library handle (a ctypes.CDLL, which deepcopy cannot copy) is passed over, so its
    obscure ValueError never comes first."""
    import copy

    transform = make()
    TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=4, seed=0), transform)
    assert transform.native
    with pytest.raises(gpu_envs.NotCopyableError, match="cannot be pickled or copied"):
        copy.deepcopy(transform)
    assert copy.deepcopy(make()).native is False  # not set up yet: a plain copy


def test_under_a_dispatch_mode_the_hooks_run_their_torch_ops():
    """A TorchDispatchMode (an op recorder, a sync guard, a graph emulation) sees no C call: the torch ops run there."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    def run(record: bool):
        env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=6, seed=3, max_episode_steps=4), History(length=3))
        root, out = env.reset(), []
        for t in range(8):
            root["action"] = torch.full((6,), t % 2, dtype=torch.long)
            if record:
                with Recorder() as recorder:
                    td, root = env.step_and_maybe_reset(root)
                assert any("aten.cat" in op for op in recorder.ops), "History's torch ops ran"
            else:
                td, root = env.step_and_maybe_reset(root)
            out += [td["next", "observation"].clone(), root["observation"].clone()]
        return out

    for a, b in zip(run(record=True), run(record=False), strict=True):
        assert torch.equal(a, b)
