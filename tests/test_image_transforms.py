"""Image transforms against references computed on the raw frames of the same env, root and transition alike.

The env is a torch vector env of RGB frames ``uint8 [N, 12, 16, 3]`` whose every pixel is a
known function of (row, episode step, y, x, channel); two copies with the same seed, one
plain and one transformed, take the same actions, and every transformed entry must be the
reference transform of the plain entry (``torch.nn.functional.interpolate`` for Resize,
slicing for the crops, the luma weights for Grayscale).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError, SpecError
from gpu_envs.rollout import collect
from gpu_envs.transforms import (
    CenterCrop,
    Grayscale,
    History,
    Normalize,
    Permute,
    RandomCrop,
    Resize,
    ToFloat,
    TransformedEnv,
)

N, H, W = 4, 12, 16


class Frames:
    """RGB frames ``uint8 [N, H, W, 3]``: pixel = (7 row + 3 t + 5 y + 11 x + 13 c) mod 256; episodes of 5 + row steps."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    supports_reset_mask = True
    state_attributes = ("t",)

    def __init__(self, num_envs: int = N) -> None:
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.single_observation_space = gym.spaces.Box(0, 255, (H, W, 3), np.uint8)
        self.single_action_space = gym.spaces.Discrete(2)
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.rows = torch.arange(num_envs)

    def frames(self) -> torch.Tensor:
        y = torch.arange(H).view(1, H, 1, 1)
        x = torch.arange(W).view(1, 1, W, 1)
        c = torch.arange(3).view(1, 1, 1, 3)
        value = 7 * self.rows.view(-1, 1, 1, 1) + 3 * self.t.view(-1, 1, 1, 1) + 5 * y + 11 * x + 13 * c
        return (value % 256).to(torch.uint8)

    def reset(self, *, seed=None, options=None):
        mask = None if options is None else options.get("reset_mask")
        self.t = torch.where(mask, 0, self.t) if mask is not None else torch.zeros_like(self.t)
        return self.frames(), {}

    def step(self, action):
        self.t = self.t + 1 + action
        ended = self.t >= 5 + self.rows
        final = self.frames()
        self.t = torch.where(ended, 0, self.t)
        zeros = torch.zeros(self.num_envs, dtype=torch.bool)
        return self.frames(), torch.zeros(self.num_envs), ended, zeros, {"final_obs": final}

    def close(self):
        pass


def pair(*transforms):
    plain = gpu_envs.wrap(Frames())
    env = TransformedEnv(gpu_envs.wrap(Frames()), *transforms)
    return plain, env


def run_against(reference, *transforms, steps: int = 14):
    """Step both envs with the same actions; every root and next observation is ``reference`` of the plain one."""
    plain, env = pair(*transforms)
    root_p, root = plain.reset(seed=0), env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        torch.testing.assert_close(root["observation"], reference(root_p["observation"], env), rtol=0, atol=0)
        action = torch.randint(0, 2, (N,), generator=gen)
        root_p["action"], root["action"] = action, action.clone()
        td_p, root_p = plain.step_and_maybe_reset(root_p)
        td, root = env.step_and_maybe_reset(root)
        want = reference(td_p["next", "observation"], env)
        torch.testing.assert_close(td["next", "observation"], want, rtol=0, atol=0)
    assert env.observation_spec["observation"].contains(root["observation"])
    return env


def chw(x):
    return x.permute(0, 3, 1, 2)


def test_permute_and_to_float():
    env = run_against(lambda x, _: chw(x), Permute("HWC", "CHW", keys="observation"))
    assert env.observation_spec["observation"].shape == (N, 3, H, W)
    env = run_against(lambda x, _: x.float() * (1 / 255), ToFloat("observation"))
    assert env.observation_spec["observation"].dtype == torch.float32


def test_grayscale_uses_the_luma_weights_and_keeps_uint8():
    def gray(x, _):
        y = 0.2989 * x[..., 0].float() + 0.587 * x[..., 1].float() + 0.114 * x[..., 2].float()
        return y.round().clamp(0, 255).to(torch.uint8).unsqueeze(-1)

    env = run_against(gray, Grayscale("observation"))
    assert env.observation_spec["observation"].shape == (N, H, W, 1)


@pytest.mark.parametrize("layout", ["HWC", "CHW"])
def test_resize_is_bilinear_interpolation_in_either_layout(layout):
    def resized(x, _):
        y = F.interpolate(chw(x).float(), size=(6, 8), mode="bilinear", align_corners=False)
        y = y.round().clamp(0, 255).to(torch.uint8)
        return y if layout == "CHW" else y.permute(0, 2, 3, 1)

    transforms = [Resize("observation", (6, 8), layout=layout)]
    if layout == "CHW":
        transforms.insert(0, Permute("HWC", "CHW", keys="observation"))
    env = run_against(resized, *transforms)
    assert env.observation_spec["observation"].shape == ((N, 3, 6, 8) if layout == "CHW" else (N, 6, 8, 3))


def test_center_crop_takes_the_middle_window():
    env = run_against(lambda x, _: x[:, 2:10, 3:13], CenterCrop("observation", (8, 10)))
    assert env.observation_spec["observation"].shape == (N, 8, 10, 3)


def test_random_crop_takes_each_rows_window_at_its_offsets_and_the_root_agrees():
    crop = RandomCrop("observation", (8, 10))

    def cropped(x, env):
        offsets = crop.offsets
        return torch.stack([x[i, t : t + 8, left : left + 10] for i, (t, left) in enumerate(offsets.tolist())])

    run_against(cropped, crop, steps=30)
    # the offsets move every step, differ across rows and stay inside the image
    _, env = pair(RandomCrop("observation", (8, 10)))
    env.reset(seed=1)
    seen = []
    for _ in range(20):
        root = env.root()
        root["action"] = torch.zeros(N, dtype=torch.long)
        env.step_and_maybe_reset(root)
        seen.append(env.transforms[0].offsets)
    offsets = torch.stack(seen)
    assert offsets[..., 0].max() <= H - 8 and offsets[..., 1].max() <= W - 10 and offsets.min() >= 0
    assert offsets[..., 0].unique().numel() == H - 8 + 1 and offsets[..., 1].unique().numel() == W - 10 + 1
    # the same seed, the same offsets
    _, again = pair(RandomCrop("observation", (8, 10)))
    again.reset(seed=1)
    for step in range(20):
        root = again.root()
        root["action"] = torch.zeros(N, dtype=torch.long)
        again.step_and_maybe_reset(root)
        assert torch.equal(again.transforms[0].offsets, seen[step])


def test_a_chain_with_history_and_normalize_has_the_specs_of_its_outputs():
    env = TransformedEnv(
        gpu_envs.wrap(Frames()),
        Grayscale("observation"),
        Resize("observation", 6),
        ToFloat("observation"),
        Normalize("observation", mean=0.5, std=0.25),
        History(length=2),
    )
    traj = collect(env, None, steps=10)
    assert traj["observation"].shape == (N, 10, 2, 6, 6, 1)
    assert traj["observation"].dtype == torch.float32
    assert env.observation_spec["observation"].shape == (N, 2, 6, 6, 1)
    x = traj["next", "observation"]
    assert torch.isfinite(x).all() and x.min() >= -2.0 and x.max() <= 2.0  # (pixel / 255 - 0.5) / 0.25


def test_bad_image_arguments_are_named():
    with pytest.raises(InvalidArgumentError, match="layout"):
        Resize("observation", 8, layout="NHWC")
    with pytest.raises(InvalidArgumentError, match="does nothing"):
        Permute("HWC", "HWC")
    with pytest.raises(InvalidArgumentError, match="size"):
        Resize("observation", (8,))
    with pytest.raises(SpecError, match="larger than the image"):
        pair(CenterCrop("observation", (20, 20)))
    with pytest.raises(SpecError, match="3-channel"):
        pair(Grayscale("observation"), Grayscale("observation"))
    with pytest.raises(SpecError, match="ToFloat before it"):
        pair(Normalize("observation"))
    with pytest.raises(SpecError, match="at least 3 dims"):
        TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=2, device="cpu"), Resize("observation", 8))


@pytest.mark.slow
def test_a_compiled_collection_matches_the_eager_one():
    def build():
        return TransformedEnv(
            gpu_envs.wrap(Frames()), RandomCrop("observation", (8, 10)), Grayscale("observation"),
            Resize("observation", 6), ToFloat("observation"),
        )  # fmt: skip

    eager, compiled = build(), build()
    eager.reset(seed=2), compiled.reset(seed=2)

    def policy(td):
        return td.set("action", torch.zeros(N, dtype=torch.long))

    # the crops exactly; the uint8 rounding of grayscale and resize may land one grey level (1 / 255) apart
    # where the compiler fuses the float sums in another order
    for _ in range(2):
        want = collect(eager, policy, steps=16).clone()
        got = collect(compiled, policy, steps=16, compile=True).clone()
        for key in ("observation", ("next", "observation")):
            diff = (got[key] - want[key]).abs()
            assert diff.max() <= 1 / 255 + 1e-6 and (diff > 1e-6).float().mean() < 0.1, key
