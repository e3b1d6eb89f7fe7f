"""Image transforms on the device: permute, float scaling, grayscale, resize, centre and random crops, normalisation.

Camera observations (Isaac Lab's tiled cameras, ManiSkill's sensors, EnvPool's Atari frames,
a gymnasium env's ``rgb_array`` through ``from_pixels=True``) reach the learner as ``[N, ...]``
batches; these transforms rework them on the env's device, batched, with no host sync, in
both the root (``td[key]``) and the transition (``("next", key)``), so a row that did not end
sees the same image as next observation and as next root.

**One layout convention.** Every transform takes ``layout="HWC"`` (channels last: Isaac Lab,
ManiSkill, gymnasium, the default) or ``"CHW"`` (channels first: EnvPool's frame stacks,
torchvision, a CNN's input); the output keeps the layout it was given. :class:`Permute` turns
one into the other (``Permute("HWC", "CHW")`` before a CNN). An image key's spec must be a
Box of at least 3 dims (``[H, W, C]`` or ``[C, H, W]``, one env's).

* :class:`ToFloat`: integer frames to float32 times ``scale`` (default ``1 / 255``);
* :class:`Grayscale`: ITU-R 601 luma ``0.2989 R + 0.587 G + 0.114 B`` (torchvision's
  weights), one channel kept; integer frames stay integer (rounded);
* :class:`Resize`: bilinear (``torch.nn.functional.interpolate``, ``align_corners=False``)
  to ``(height, width)``; integer frames rounded back to their dtype;
* :class:`CenterCrop`: the central ``(height, width)`` window (a view: no copy);
* :class:`RandomCrop`: a ``(height, width)`` window at a per-row random offset, drawn every
  step from per-row streams seeded from the env's seed (:mod:`gpu_envs.transforms.streams`;
  DrQ-style augmentation); the root after a step uses that step's offsets, so a continuing
  row's next observation and next root agree; snapshotted per row;
* :class:`Normalize`: ``(x - mean) / std`` with fixed per-channel statistics
  (:class:`~gpu_envs.transforms.ObservationNorm` keeps running ones).

:class:`~gpu_envs.transforms.RecordEpisodes` records the frames it sees: put it before (closer
to the env than) the image transforms to keep filming the untransformed frames.

Example::

    >>> import torch
    >>> from gpu_envs.contract.specs import Box, Composite
    >>> from gpu_envs.transforms import Grayscale, Resize, ToFloat
    >>> from gpu_envs.transforms.base import EnvSpecs
    >>> specs = EnvSpecs(2, torch.device("cpu"), Composite(pixels=Box(0, 255, (64, 64, 3), torch.uint8)),
    ...                  Box(-1, 1, (1,)), Box(-1, 1, (1,)), Composite(), Composite())
    >>> for t in (Grayscale("pixels"), Resize("pixels", (32, 32)), ToFloat("pixels")):
    ...     specs = t.setup(specs)
    >>> specs.observation_spec["pixels"].shape, specs.observation_spec["pixels"].dtype
    (torch.Size([32, 32, 1]), torch.float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, SpecError
from gpu_envs.contract.specs import Box, Composite
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.keys import Key, as_keys, read, write
from gpu_envs.transforms.streams import next_state_, seeded_states, unit_uniform
from gpu_envs.utils.arguments import as_number, as_size

__all__ = ["CenterCrop", "Grayscale", "Normalize", "Permute", "RandomCrop", "Resize", "ToFloat"]

LAYOUTS = ("HWC", "CHW")
_SALT = 0x1CA6E5  # keys RandomCrop's streams apart from the other transforms' (same seed)


def _layout(value: object, name: str = "layout") -> str:
    if value not in LAYOUTS:
        raise InvalidArgumentError(f"{name} must be 'HWC' (channels last) or 'CHW' (channels first), got {value!r}.")
    return cast(str, value)


class ImageTransform(Transform):
    """The shared part: image keys and their layout, the spec rewrite, the same map on roots and transitions.

    A subclass writes ``_map(x)`` on a ``[N, C, H, W]`` batch (channels first, whatever the
    layout: the base moves the channels) and ``_out(c, h, w, dtype)``, the per-env
    ``(channels, height, width, dtype)`` it produces, with ``_bounds`` for the new Box.
    """

    def __init__(self, keys: Key | Sequence[Key] = "pixels", layout: str = "HWC") -> None:
        super().__init__()
        self.keys: list[Key] = as_keys(keys, type(self).__name__)
        self.layout = _layout(layout)

    # ------------------------------------------------------------------ setup
    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        leaves = dict(specs.observation_spec.items(include_nested=True, leaves_only=True))
        obs_spec = cast(Composite, specs.observation_spec.to(specs.device))
        name = type(self).__name__
        for key in self.keys:
            leaf = leaves.get(key)
            if leaf is None:
                raise SpecError(f"{name} key {key!r} is not an observation key; available: {list(leaves)}.")
            if not isinstance(leaf, Box) or len(leaf.shape) < 3 or leaf.dtype is None:
                raise SpecError(
                    f"{name} key {key!r} is {leaf!r}; an image is a Box of at least 3 dims ({self.layout}). Name the "
                    "image key (keys=...) and its layout (layout='HWC' or 'CHW')."
                )
            c, h, w = self._chw(leaf.shape)
            out = self._out(c, h, w, leaf.dtype)
            obs_spec[key] = self._box(leaf, out, specs.device)
        return specs.replace(observation_spec=obs_spec)

    def _chw(self, shape: torch.Size) -> tuple[int, int, int]:
        if self.layout == "HWC":
            return shape[-1], shape[-3], shape[-2]
        return shape[-3], shape[-2], shape[-1]

    def _shape(self, lead: torch.Size, c: int, h: int, w: int) -> tuple[int, ...]:
        return (*lead, h, w, c) if self.layout == "HWC" else (*lead, c, h, w)

    def _out(self, c: int, h: int, w: int, dtype: torch.dtype) -> tuple[int, int, int, torch.dtype]:
        return c, h, w, dtype

    def _bounds(self, leaf: Box, dtype: torch.dtype) -> tuple[float, float]:
        """The output's (low, high); the input's overall bounds by default."""
        return float(leaf.low.min()), float(leaf.high.max())

    def _box(self, leaf: Box, out: tuple[int, int, int, torch.dtype], device: torch.device) -> Box:
        c, h, w, dtype = out
        low, high = self._bounds(leaf, dtype)
        return Box(low, high, self._shape(leaf.shape[:-3], c, h, w), dtype, device=device)

    # ------------------------------------------------------------- data hooks
    def _apply(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-3]
        chw = x if self.layout == "CHW" else x.movedim(-1, -3)
        y = self._map(chw.reshape(-1, *chw.shape[-3:]))
        y = y.reshape(*lead, *y.shape[-3:])
        return y if self.layout == "CHW" else y.movedim(-3, -1)

    def _map(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def step(self, td: TensorDictBase) -> TensorDictBase:
        for key in self.keys:
            write(td, key, self._apply(read(td, key, nxt=True)), nxt=True)
        return td

    def root(self, td: TensorDictBase) -> TensorDictBase:
        for key in self.keys:
            write(td, key, self._apply(read(td, key)))
        return td

    def __repr__(self) -> str:
        return f"{type(self).__name__}(keys={self.keys!r}, layout={self.layout!r})"


def _round_to(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``y`` (float) in ``dtype``: rounded and clamped to an integer dtype's range, cast otherwise."""
    if dtype.is_floating_point:
        return y.to(dtype)
    info = torch.iinfo(dtype)
    return y.round().clamp_(info.min, info.max).to(dtype)


class Permute(ImageTransform):
    """Channels last to first (``Permute("HWC", "CHW")``) or back; a view (no copy)."""

    def __init__(self, source: str = "HWC", target: str = "CHW", keys: Key | Sequence[Key] = "pixels") -> None:
        super().__init__(keys, _layout(source, "Permute source"))
        self.target = _layout(target, "Permute target")
        if self.target == self.layout:
            raise InvalidArgumentError(f"Permute from {source!r} to {target!r} does nothing; pass two layouts.")

    def _box(self, leaf: Box, out: tuple[int, int, int, torch.dtype], device: torch.device) -> Box:
        order = (-1, -3, -2) if self.layout == "HWC" else (-2, -1, -3)
        lead = len(leaf.shape) - 3
        dims = (*range(lead), *(lead + 3 + d for d in order))
        return Box(leaf.low.permute(dims), leaf.high.permute(dims), None, leaf.dtype, device=device)

    def _apply(self, x: torch.Tensor) -> torch.Tensor:
        return x.movedim(-1, -3) if self.layout == "HWC" else x.movedim(-3, -1)

    def __repr__(self) -> str:
        return f"Permute({self.layout!r}, {self.target!r}, keys={self.keys!r})"


class ToFloat(ImageTransform):
    """Frames as float32 times ``scale`` (default ``1 / 255``: uint8 to ``[0, 1]``)."""

    def __init__(self, keys: Key | Sequence[Key] = "pixels", scale: float = 1 / 255, layout: str = "HWC") -> None:
        super().__init__(keys, layout)
        self.scale = as_number(scale, "ToFloat scale", allow_inf=False)

    def _out(self, c: int, h: int, w: int, dtype: torch.dtype) -> tuple[int, int, int, torch.dtype]:
        return c, h, w, torch.float32

    def _bounds(self, leaf: Box, dtype: torch.dtype) -> tuple[float, float]:
        low, high = float(leaf.low.min()) * self.scale, float(leaf.high.max()) * self.scale
        return min(low, high), max(low, high)

    def _apply(self, x: torch.Tensor) -> torch.Tensor:  # elementwise: no layout to move
        # (an integer tensor times a Python float is float32: one pass, no separate cast)
        return x * self.scale if not x.dtype.is_floating_point else x.to(torch.float32) * self.scale


class Grayscale(ImageTransform):
    """``0.2989 R + 0.587 G + 0.114 B`` into one channel (3-channel images); integer frames rounded."""

    def _out(self, c: int, h: int, w: int, dtype: torch.dtype) -> tuple[int, int, int, torch.dtype]:
        if c != 3:
            raise SpecError(f"Grayscale takes 3-channel (RGB) images, got {c} channels (layout {self.layout}).")
        return 1, h, w, dtype

    def _map(self, x: torch.Tensor) -> torch.Tensor:
        float32 = x if not x.dtype.is_floating_point or x.dtype == torch.float32 else x.to(torch.float32)
        r, g, b = float32.unbind(1)
        # (integer channels times Python floats are float32: no separate cast pass)
        return _round_to(0.2989 * r + 0.587 * g + 0.114 * b, x.dtype).unsqueeze(1)


class Resize(ImageTransform):
    """Bilinear resize to ``size`` (``(height, width)`` or one int); integer frames rounded back."""

    def __init__(self, keys: Key | Sequence[Key] = "pixels", size: int | tuple[int, int] = 84, layout: str = "HWC"):
        super().__init__(keys, layout)
        self.size = as_size(size, "Resize")

    def _out(self, c: int, h: int, w: int, dtype: torch.dtype) -> tuple[int, int, int, torch.dtype]:
        return c, *self.size, dtype

    def _map(self, x: torch.Tensor) -> torch.Tensor:
        y = F.interpolate(x.to(torch.float32), size=self.size, mode="bilinear", align_corners=False)
        return _round_to(y, x.dtype)


class CenterCrop(ImageTransform):
    """The central ``size`` window (torchvision's offsets: ``(H - h) // 2``, ``(W - w) // 2``); a view."""

    def __init__(self, keys: Key | Sequence[Key] = "pixels", size: int | tuple[int, int] = 84, layout: str = "HWC"):
        super().__init__(keys, layout)
        self.size = as_size(size, "CenterCrop")

    def _out(self, c: int, h: int, w: int, dtype: torch.dtype) -> tuple[int, int, int, torch.dtype]:
        if self.size[0] > h or self.size[1] > w:
            raise SpecError(f"CenterCrop size {self.size} is larger than the image ({h}, {w}).")
        return c, *self.size, dtype

    def _map(self, x: torch.Tensor) -> torch.Tensor:
        h, w = self.size
        top, left = (x.shape[-2] - h) // 2, (x.shape[-1] - w) // 2
        return x[..., top : top + h, left : left + w]


class RandomCrop(ImageTransform):
    """A ``size`` window at per-row random offsets drawn every step (see the module docstring)."""

    def __init__(self, keys: Key | Sequence[Key] = "pixels", size: int | tuple[int, int] = 84, layout: str = "HWC"):
        super().__init__(keys, layout)
        self.size = as_size(size, "RandomCrop")
        self.row_state = ("draws", "offsets")
        self._image: tuple[int, int] | None = None

    def _out(self, c: int, h: int, w: int, dtype: torch.dtype) -> tuple[int, int, int, torch.dtype]:
        if self.size[0] > h or self.size[1] > w:
            raise SpecError(f"RandomCrop size {self.size} is larger than the image ({h}, {w}).")
        if self._image is not None and self._image != (h, w):
            raise SpecError(f"RandomCrop keys must share one image size, got {self._image} and {(h, w)}.")
        self._image = (h, w)
        return c, *self.size, dtype

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        out = super().setup(specs)
        n, dev = specs.num_envs, specs.device
        h, w = self._image or self.size  # (set by _out, from the first key's image)
        self._room = torch.tensor([h - self.size[0] + 1, w - self.size[1] + 1], dtype=torch.float32, device=dev)
        self._draws = torch.zeros(n, 2, dtype=torch.int64, device=dev)
        self._offsets = torch.zeros(n, 2, dtype=torch.int64, device=dev)  # (top, left) per row
        self._rows_y = torch.arange(self.size[0], device=dev).view(1, 1, -1, 1)
        self._rows_x = torch.arange(self.size[1], device=dev).view(1, 1, 1, -1)
        self.reseed(specs.seed)
        return out

    def reseed(self, seed: int | None) -> None:
        self._draws.copy_(seeded_states(self.num_envs, 2, self.device, seed, _SALT))
        self._draw()

    def _draw(self) -> None:
        offsets = (unit_uniform(next_state_(self._draws)) * self._room).to(torch.int64)
        self._offsets.copy_(torch.minimum(offsets, self._room.to(torch.int64) - 1))

    def step(self, td: TensorDictBase) -> TensorDictBase:
        self._draw()  # this step's offsets: its transition's crops and the next root's
        return super().step(td)

    def _map(self, x: torch.Tensor) -> torch.Tensor:
        n = self.num_envs
        per = x.shape[0] // n  # images per row (several keys' leading dims flattened into the batch)
        top = self._offsets[:, 0].repeat_interleave(per).view(-1, 1, 1, 1)
        left = self._offsets[:, 1].repeat_interleave(per).view(-1, 1, 1, 1)
        c, h, w = x.shape[1], self.size[0], self.size[1]
        y = x.gather(2, (top + self._rows_y).expand(x.shape[0], c, h, x.shape[-1]))
        return y.gather(3, (left + self._rows_x).expand(x.shape[0], c, h, w))

    def live_state(self) -> dict[str, torch.Tensor]:
        return {"draws": self._draws, "offsets": self._offsets}

    @property
    def offsets(self) -> torch.Tensor:
        """This step's ``(top, left)`` offset per row, ``[N, 2]`` int64 (a copy)."""
        self.check_bound("offsets")
        return self._offsets.clone()


class Normalize(ImageTransform):
    """``(x - mean) / std`` per channel with fixed statistics (floats; ``mean`` and ``std`` per channel or one number)."""

    def __init__(
        self,
        keys: Key | Sequence[Key] = "pixels",
        mean: float | Sequence[float] = 0.5,
        std: float | Sequence[float] = 0.5,
        layout: str = "HWC",
    ) -> None:
        super().__init__(keys, layout)
        self.mean = [as_number(m, "Normalize mean", allow_inf=False) for m in _listed(mean)]
        self.std = [
            as_number(s, "Normalize std", minimum=0.0, strict_minimum=True, allow_inf=False) for s in _listed(std)
        ]

    def _out(self, c: int, h: int, w: int, dtype: torch.dtype) -> tuple[int, int, int, torch.dtype]:
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, c):
                raise SpecError(f"Normalize {name} has {len(values)} values for {c}-channel images; pass 1 or {c}.")
        if not dtype.is_floating_point:
            raise SpecError("Normalize takes float images; put ToFloat before it.")
        return c, h, w, dtype

    def _bounds(self, leaf: Box, dtype: torch.dtype) -> tuple[float, float]:
        return -float("inf"), float("inf")

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        out = super().setup(specs)
        self._mean = torch.tensor(self.mean, device=specs.device).view(1, -1, 1, 1)
        self._std = torch.tensor(self.std, device=specs.device).view(1, -1, 1, 1)
        return out

    def _map(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self._mean.to(x.dtype)) / self._std.to(x.dtype)


def _listed(value: float | Sequence[float]) -> list[float]:
    return list(value) if isinstance(value, (list, tuple)) else [value]  # type: ignore[list-item]
