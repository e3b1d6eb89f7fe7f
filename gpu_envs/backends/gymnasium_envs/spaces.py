"""gymnasium spaces as tensor layouts: observation keys, action encodings, one-hot spec.

The gymnasium backend reads batched numpy observations and writes batched numpy
actions; this module decides, once at wrap time, how each space maps to tensors:

* Observations (:class:`ObsLayout`): a ``Box``/``Discrete``/``MultiDiscrete``/
  ``MultiBinary`` observation is one key (``"observation"``, or ``"pixels"`` for a
  pixels-only env). A ``Dict`` gives one key per entry, nested ``Dict`` s give nested
  keys (``("sensors", "imu")``); a ``Tuple`` gives keys ``"0"``, ``"1"``, ... under its
  parent (a top-level ``Tuple`` lives under ``"observation"``: ``("observation", "0")``).
  Every leaf keeps its numpy dtype (any ``Box`` dtype, ``MultiBinary`` as int8, a 0/1
  bool ``Box`` as bool), so an ``action_mask`` entry stays a plain mask tensor.
* Actions (:class:`ActionCodec`): ``Discrete`` is a categorical index ``[N]`` by
  default (``start`` included), or a one-hot ``[N, n]`` bool (:class:`OneHot`) with
  ``one_hot_actions=True``; ``Box``, ``MultiDiscrete`` and ``MultiBinary`` keep their
  shape and dtype. Composite action spaces (``Dict``/``Tuple``) are refused: a
  :class:`~gpu_envs.core.env.BatchedEnv` action is one tensor.
* ``Sequence``, ``Text``, ``Graph`` and ``OneOf`` have no fixed-shape tensor and raise
  :class:`~gpu_envs.contract.errors.UnsupportedSpaceError` naming the offending key.

Example::

    layout = ObsLayout(gym.spaces.Dict(pos=Box(-1, 1, (2,)), mask=MultiBinary(3)), "cpu")
    layout.keys            # ['pos', 'mask']
    layout.read({"pos": pos_batch, "mask": mask_batch})["mask"]   # the numpy batch
"""

from __future__ import annotations

from typing import Any, cast

import gymnasium
import numpy as np
import torch

from gpu_envs.contract.errors import UnsupportedSpaceError
from gpu_envs.contract.specs import Composite, OneHot, Spec, numpy_dtype, spec_from_gym

Key = str | tuple[str, ...]

_LEAF_SPACES = (
    gymnasium.spaces.Box,
    gymnasium.spaces.Discrete,
    gymnasium.spaces.MultiDiscrete,
    gymnasium.spaces.MultiBinary,
)


def _key(parts: tuple[str, ...]) -> Key:
    return parts[0] if len(parts) == 1 else parts


def _unsupported(space: Any, where: str) -> UnsupportedSpaceError:
    kind = type(space).__name__
    return UnsupportedSpaceError(
        f"{where} is a gymnasium {kind} space, which has no fixed-shape tensor form. Wrap the env in a "
        f"gymnasium ObservationWrapper/ActionWrapper that encodes it as a Box, Discrete, MultiDiscrete, "
        f"MultiBinary, Dict or Tuple (e.g. a Text as a Box of character ids padded to a fixed length), or drop it."
    )


class ObsLayout:
    """Flat tensor keys for a (single-env) gymnasium observation space.

    Attributes:
        spec: the observation :class:`~gpu_envs.contract.specs.Composite`.
        keys: leaf keys, in ``spec`` order.
        paths: for each key, the accessors (dict keys / tuple indices) into one observation.
        shapes / dtypes: per key, the per-env shape and the numpy dtype.
    """

    def __init__(self, space: gymnasium.spaces.Space, device: Any, default_key: str = "observation") -> None:
        self.keys: list[Key] = []
        self.paths: list[tuple] = []
        self.shapes: list[tuple[int, ...]] = []
        self.dtypes: list[np.dtype] = []
        self.spec = Composite({}, device=device)
        prefix = () if isinstance(space, gymnasium.spaces.Dict) else (default_key,)
        self._walk(space, prefix, (), device)
        self.single_leaf = len(self.keys) == 1 and not self.paths[0]

    def _walk(self, space: Any, key: tuple[str, ...], path: tuple, device: Any) -> None:
        if isinstance(space, gymnasium.spaces.Dict):
            for name, sub in space.spaces.items():
                self._walk(sub, key + (str(name),), path + (name,), device)
            return
        if isinstance(space, gymnasium.spaces.Tuple):
            for i, sub in enumerate(space.spaces):
                self._walk(sub, key + (str(i),), path + (i,), device)
            return
        where = f"observation key {_key(key)!r}"
        if not isinstance(space, _LEAF_SPACES):
            raise _unsupported(space, where)
        spec = spec_from_gym(space, device=device)
        self.spec[_key(key)] = spec
        self.keys.append(_key(key))
        self.paths.append(path)
        self.shapes.append(tuple(spec.shape))
        self.dtypes.append(numpy_dtype(spec.dtype))

    def read(self, obs: Any) -> list[np.ndarray]:
        """The leaves of one (batched or single) observation, in ``keys`` order."""
        if self.single_leaf:
            return [obs]
        out = []
        for path in self.paths:
            node = obs
            for part in path:
                node = node[part]
            out.append(node)
        return out


class ActionCodec:
    """Action spec of a gymnasium action space and the tensor -> numpy conversion.

    ``to_numpy(action)`` returns the batched numpy action gymnasium expects: the
    tensor's own memory on the CPU (no copy), or one copy into a reused (pinned) host
    buffer from an accelerator. A one-hot action becomes ``argmax + start`` first.
    """

    def __init__(
        self, space: gymnasium.spaces.Space, device: torch.device, num_envs: int, one_hot: bool = False
    ) -> None:
        if not isinstance(space, _LEAF_SPACES):
            if isinstance(space, (gymnasium.spaces.Dict, gymnasium.spaces.Tuple)):
                raise UnsupportedSpaceError(
                    f"action space {space!r} is composite, but a BatchedEnv action is one tensor. Wrap the env in a "
                    "gymnasium ActionWrapper that takes a Box or MultiDiscrete and builds the Dict/Tuple action."
                )
            raise _unsupported(space, "the action space")
        self.one_hot = bool(one_hot) and isinstance(space, gymnasium.spaces.Discrete)
        if one_hot and not isinstance(space, gymnasium.spaces.Discrete):
            raise UnsupportedSpaceError(
                f"one_hot_actions=True needs a Discrete action space, got {space!r}. Drop one_hot_actions."
            )
        if self.one_hot:
            discrete = cast(gymnasium.spaces.Discrete, space)  # one_hot: a Discrete space (above)
            self.spec: Spec = OneHot(int(discrete.n), device=device, start=int(discrete.start))
            self._start = int(discrete.start)
            host_shape, host_dtype = (num_envs,), torch.int64
        else:
            self.spec = spec_from_gym(space, device=device)
            host_shape, host_dtype = (num_envs, *self.spec.shape), self.spec.dtype
        self._host: torch.Tensor | None = None
        self._host_np: np.ndarray | None = None
        if device.type != "cpu":
            self._host = torch.empty(host_shape, dtype=host_dtype, pin_memory=device.type == "cuda")
            self._host_np = self._host.numpy()
        self._plain = not self.one_hot and self._host is None  # a CPU tensor as it is: one test per step

    def to_numpy(self, action: torch.Tensor) -> np.ndarray:
        """The batched numpy action for ``action`` (already checked by BatchedEnv)."""
        if self._plain:
            try:
                return action.numpy()  # shares the tensor's memory; gymnasium only reads it
            except RuntimeError:  # requires grad
                return action.detach().numpy()
        if self.one_hot:
            action = action.detach().to(torch.int64).argmax(-1)
            if self._start:
                action = action + self._start
        if self._host is not None:
            self._host.copy_(action.detach())  # blocking: gymnasium reads the values right away
            return cast(np.ndarray, self._host_np)  # made with _host
        try:
            return action.numpy()  # shares the tensor's memory; gymnasium only reads it
        except RuntimeError:  # requires grad
            return action.detach().numpy()
