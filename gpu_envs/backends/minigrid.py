"""MiniGrid and BabyAI envs: their Dict observation, with the text ``mission`` as bytes.

A minigrid observation is a Dict of ``image`` (uint8 ``[7, 7, 3]`` by default),
``direction`` (Discrete 4) and ``mission``, a text (minigrid's ``MissionSpace``) with no
tensor form. Most tasks keep one mission for good (MiniGrid-Empty: "get to the green
goal square"), but many change it every episode (Fetch, GoToObject, every BabyAI level),
and there it is what the agent must do, so it is kept, not dropped:

* ``mission="bytes"`` (the default): ``td["mission"]`` is the text's UTF-8 bytes, uint8
  ``[N, mission_length]`` (256 by default; the longest of 1200 sampled BabyAI
  BossLevel/Synth missions is 166 bytes), zero-padded, with no vocabulary to maintain. :func:`decode_missions` gives the strings back
  (``decode_missions(td["mission"])`` -> ``["go to the red ball", ...]``); a learner
  embeds the bytes, or decodes and tokenises them with its own vocabulary. A mission
  longer than ``mission_length`` raises :class:`~gpu_envs.contract.errors.ObservationError`
  naming the option (never truncated silently).
* ``mission="drop"``: no ``mission`` key (for tasks whose mission never changes).

``image`` and ``direction`` become ``td["image"]`` (uint8 ``[N, 7, 7, 3]``) and
``td["direction"]`` (int64 ``[N]``), as the gymnasium backend maps any Dict; minigrid's
own wrappers (``FullyObsWrapper``, ``RGBImgObsWrapper``...) may be applied first, and an
env whose wrappers removed the mission (``ImgObsWrapper``) is a plain gymnasium env.

The encoding is a gymnasium wrapper on each sub-env (:class:`MissionBytes`), or on a
whole vector env (:class:`VectorMissionBytes`, which also encodes the true final
observations of a SAME_STEP env), so the gymnasium backend steps the env as usual
(every auto-reset mode, exact final observations, info, seeding, pixels).
``gpu_envs.make(id, num_envs=n, mission=..., mission_length=...)`` builds minigrid ids
(``import minigrid`` first, as for any gymnasium plugin) with the gymnasium backend's
options. Detection looks for a ``MissionSpace`` by its class module, without importing
minigrid.

Example::

    import minigrid
    env = gpu_envs.make("BabyAI-GoToRedBall-v0", num_envs=8, device="cpu")
    td = env.reset(seed=0)
    decode_missions(td["mission"])[0]          # 'go to the red ball'
    env = gpu_envs.wrap(gymnasium.make("MiniGrid-Empty-5x5-v0"), mission="drop")
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from gpu_envs.backends.gymnasium_envs import PLUGIN as GYMNASIUM
from gpu_envs.backends.gymnasium_envs import GymnasiumBackend
from gpu_envs.backends.inbound import InboundPlugin, from_package
from gpu_envs.contract.errors import InvalidArgumentError, NotAnEnvError, ObservationError
from gpu_envs.utils.arguments import as_int

__all__ = ["PLUGIN", "MiniGridPlugin", "MissionBytes", "VectorMissionBytes", "decode_missions", "mission_keys"]

MISSION_MODES = ("bytes", "drop")
DEFAULT_MISSION_LENGTH = 256


def mission_keys(space: Any) -> list[str]:
    """The keys of a Dict observation space that hold a minigrid ``MissionSpace``."""
    if not isinstance(space, gym.spaces.Dict):
        return []
    return [key for key, sub in space.spaces.items() if from_package(sub, "minigrid", ("MissionSpace",))]


def _encoded_space(space: gym.spaces.Dict, keys: list[str], mode: str, length: int) -> gym.spaces.Dict:
    entries = {}
    for key, sub in space.spaces.items():
        if key not in keys:
            entries[key] = sub
        elif mode == "bytes":
            entries[key] = gym.spaces.Box(0, 255, (length,), np.uint8)
    return gym.spaces.Dict(entries)


def _encode(text: str, length: int) -> np.ndarray:
    data = str(text).encode("utf-8")
    if len(data) > length:
        raise ObservationError(
            f"minigrid mission {text!r} is {len(data)} bytes, longer than mission_length={length}. Pass a larger "
            "mission_length= to gpu_envs.wrap/make (or mission='drop' if the agent does not need it)."
        )
    out = np.zeros(length, dtype=np.uint8)
    out[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return out


def _encode_obs(obs: dict, keys: list[str], mode: str, length: int, batched: bool) -> dict:
    out = dict(obs)
    for key in keys:
        if mode == "drop":
            del out[key]
        elif batched:
            out[key] = np.stack([_encode(text, length) for text in obs[key]])
        else:
            out[key] = _encode(obs[key], length)
    return out


def _check_mode(mode: str, length: int) -> None:
    if mode not in MISSION_MODES:
        raise InvalidArgumentError(f"mission must be one of {list(MISSION_MODES)}, got {mode!r}.")
    as_int(length, "mission_length", minimum=1)


def decode_missions(missions: torch.Tensor | np.ndarray) -> Any:
    """The mission strings of ``mission="bytes"`` data: ``[L]`` -> str, ``[N, L]`` -> list, ``[N, T, L]`` -> lists.

    Example: ``decode_missions(td["mission"])`` -> ``["get to the green goal square", ...]``.
    """
    array = missions.detach().cpu().numpy() if isinstance(missions, torch.Tensor) else np.asarray(missions)
    if array.ndim == 1:
        return bytes(array.astype(np.uint8)).rstrip(b"\0").decode("utf-8")
    return [decode_missions(row) for row in array]


class MissionBytes(gym.ObservationWrapper):
    """One minigrid env with its mission(s) as UTF-8 bytes (``mode="bytes"``) or dropped."""

    def __init__(self, env: gym.Env, mode: str = "bytes", length: int = DEFAULT_MISSION_LENGTH) -> None:
        super().__init__(env)
        _check_mode(mode, length)
        self.mode, self.length = mode, length
        space = env.observation_space
        self.keys = mission_keys(space)
        if self.keys and isinstance(space, gym.spaces.Dict):  # (mission keys are found in Dict spaces only)
            self.observation_space = _encoded_space(space, self.keys, mode, length)

    def observation(self, observation: Any) -> Any:
        return _encode_obs(observation, self.keys, self.mode, self.length, batched=False) if self.keys else observation


class VectorMissionBytes(gym.vector.VectorWrapper):
    """A vector env of minigrid envs with the missions encoded, final observations included."""

    def __init__(self, env: gym.vector.VectorEnv, mode: str = "bytes", length: int = DEFAULT_MISSION_LENGTH) -> None:
        super().__init__(env)
        _check_mode(mode, length)
        self.mode, self.length = mode, length
        space = env.single_observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise NotAnEnvError(
                f"VectorMissionBytes wraps vector envs with a Dict observation space (minigrid's), got {space!r}."
            )
        self.keys = mission_keys(space)
        self.single_observation_space = _encoded_space(space, self.keys, mode, length)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)

    def reset(self, *, seed: Any = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        return _encode_obs(obs, self.keys, self.mode, self.length, batched=True), info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        obs = _encode_obs(obs, self.keys, self.mode, self.length, batched=True)
        final = info.get("final_obs")
        if final is not None:  # SAME_STEP: an object array of single observations (None where no end)
            encoded = np.empty(len(final), dtype=object)
            for i, single in enumerate(final):
                if single is not None:
                    encoded[i] = _encode_obs(single, self.keys, self.mode, self.length, batched=False)
            info = {**info, "final_obs": encoded}
        return obs, reward, terminated, truncated, info


class MiniGridPlugin(InboundPlugin):
    """Registry entry: minigrid envs (a ``MissionSpace`` in their Dict observation) and minigrid ids."""

    name = "minigrid"
    package = "minigrid"

    def make(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | None,
        *,
        mission: str = "bytes",
        mission_length: int = DEFAULT_MISSION_LENGTH,
        wrappers: list | None = None,
        **kwargs: Any,
    ) -> GymnasiumBackend:
        """The gymnasium backend's ``make``, with the mission encoded on each sub-env (after ``wrappers``)."""
        _check_mode(mission, mission_length)
        encode = functools.partial(MissionBytes, mode=mission, length=mission_length)
        return GYMNASIUM.make(env_id, num_envs, device, wrappers=[*(wrappers or []), encode], **kwargs)

    def detect(self, obj: Any) -> bool:
        if isinstance(obj, gym.vector.VectorEnv):
            return bool(mission_keys(obj.single_observation_space))
        return isinstance(obj, gym.Env) and bool(mission_keys(obj.observation_space))

    def wrap(
        self,
        obj: Any,
        device: torch.device | None,
        *,
        mission: str = "bytes",
        mission_length: int = DEFAULT_MISSION_LENGTH,
        **kwargs: Any,
    ) -> GymnasiumBackend:
        """A minigrid Env (batch of one) or VectorEnv, mission encoded, then the gymnasium backend."""
        if not self.detect(obj):
            raise NotAnEnvError(
                f"the minigrid backend wraps gymnasium envs with a minigrid MissionSpace in their observation, got "
                f"{type(obj).__module__}.{type(obj).__name__}."
            )
        if isinstance(obj, gym.vector.VectorEnv):
            return GYMNASIUM.wrap(VectorMissionBytes(obj, mission, mission_length), device, **kwargs)
        return GYMNASIUM.wrap(MissionBytes(obj, mission, mission_length), device, **kwargs)


PLUGIN = MiniGridPlugin()
