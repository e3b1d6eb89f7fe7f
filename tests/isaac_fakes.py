"""Contract fakes of device-resident simulators: Isaac Lab (direct and manager-based) and ManiSkill3.

They run the counting dynamics of ``tests/fakes.py`` (observation = (env index,
episode, step), deterministic episode lengths and end kinds), so the sequential oracle
``reference_rollout`` checks every transition, while mirroring the real contracts:

Isaac Lab 3.0 (read from ``isaaclab/envs/direct_rl_env.py`` and ``manager_based_rl_env.py``):

* a ``gymnasium.Env`` with ``num_envs`` and ``device`` (a string) as properties,
  ``metadata["autoreset_mode"] = SAME_STEP`` and ``unwrapped`` (itself);
* observations are a dict of groups (``{"policy": [N, 3]}``, plus ``"critic"``); a
  manager-based group that is not concatenated is a dict of terms;
* ``single_observation_space`` is a Dict of groups; the batched ``observation_space``
  is a Dict for the manager-based env but a Box of the policy group only for the
  direct env;
* reward, terminated and truncated are the SAME tensors on every step, rewritten in
  place (``obs_in_place=True`` does that to the observation too);
* rows that end are reset inside ``step``; ``extras`` is created once and never
  cleared; ``extras["final_obs"]`` (with ``compute_final_obs``) is written only on
  steps where some row resets, so it is stale in between; ``extras["log"]`` gets
  episode metrics on resets;
* the manager-based ``reset(env_ids=slice(None), *, seed=None, options=None)`` resets a
  subset; the direct ``reset(seed=None, options=None)`` resets everything.

The fakes opt into the Isaac Lab backend with the class attribute
``gpu_envs_backend = "isaaclab"`` (the detector's documented hook), as they do not live
in an ``isaaclab`` module.

ManiSkill3 (``mani_skill/vector/wrappers/gymnasium.py``): a ``VectorEnv`` with a
``device``; on steps where some row ends, ``info["final_observation"]`` (a clone of the
pre-reset batch) and ``info["_final_observation"]`` (the done mask) are added.

Like the real simulators, these decide on the host whether any row ended (a host sync);
tests that guard against syncs in gpu_envs run the simulator itself outside the guard
(:func:`outside_sync_guard`).

Example::

    env = gpu_envs.wrap(FakeIsaacDirectEnv(8, compute_final_obs=True))
    traj = env.rollout(20, policy=lambda td: td.set("action", torch.ones(8, 1)))
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes

from tests.fakes import MAX_LEN, ends_truncated, episode_length, final_obs_valid, reward_of

SAME_STEP = gym.vector.AutoresetMode.SAME_STEP


def _box(shape: tuple[int, ...]) -> gym.spaces.Box:
    return gym.spaces.Box(-np.inf, np.inf, shape, np.float32)


class _CountingState:
    """Per-row (index, episode, step) counters on the device; episodes start at 0 on reset."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.index = torch.arange(num_envs, device=device)
        self.episode = torch.full((num_envs,), -1, device=device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=device)

    def counts(self) -> torch.Tensor:
        return torch.stack([self.index, self.episode, self.t], dim=-1).float()

    def advance(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step: returns (ended, terminated, truncated)."""
        self.t += 1
        ended = self.t >= episode_length(self.index, self.episode)
        truncated = ended & ends_truncated(self.index, self.episode)
        return ended, ended & ~truncated, truncated

    def reward(self, action: torch.Tensor) -> torch.Tensor:
        return reward_of(self.index, self.episode, self.t).float() + action[:, 0].float()

    def reset_rows(self, env_ids: Any) -> None:
        self.episode[env_ids] += 1
        self.t[env_ids] = 0


class _FakeIsaacEnv(gym.Env):
    """What both Isaac Lab env kinds share (see the module docstring)."""

    gpu_envs_backend: ClassVar[str] = "isaaclab"
    is_vector_env: ClassVar[bool] = True
    metadata: ClassVar[dict[str, Any]] = {"render_modes": [None, "human"], "autoreset_mode": SAME_STEP}

    def __init__(
        self,
        num_envs: int = 4,
        device: str = "cpu",
        compute_final_obs: bool = False,
        obs_in_place: bool = False,
    ) -> None:
        self.cfg = SimpleNamespace(
            compute_final_obs=compute_final_obs,
            sim=SimpleNamespace(device=device),
            scene=SimpleNamespace(num_envs=num_envs),
        )
        self.obs_in_place = obs_in_place
        self.state = _CountingState(num_envs, torch.device(device))
        # Isaac Lab's output buffers: allocated once, rewritten in place every step.
        self.reward_buf = torch.zeros(num_envs, device=device)
        self.reset_terminated = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self.reset_time_outs = torch.zeros_like(self.reset_terminated)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.extras: dict = {}  # created once, never cleared
        self.obs_buf: dict = {}
        self._obs_out: dict = {}
        self.last_seed: int | None = None
        self.steps = 0
        self._configure_gym_env_spaces()
        self._is_closed = False

    @property
    def num_envs(self) -> int:
        return self.cfg.scene.num_envs

    @property
    def device(self) -> str:
        return self.cfg.sim.device

    # the observation groups of this env kind
    def _get_observations(self) -> dict:
        raise NotImplementedError

    def _compute_observations(self, in_place: bool = False) -> dict:
        obs = self._get_observations()
        if not in_place:
            return obs
        # a task that keeps persistent observation buffers and writes into them
        if not self._obs_out:
            self._obs_out = _map(torch.clone, obs)
        _map2(lambda dst, src: dst.copy_(src), self._obs_out, obs)
        return self._obs_out

    def seed(self, seed: int) -> int:
        self.last_seed = seed
        torch.manual_seed(seed)
        return seed

    def step(self, action: torch.Tensor):
        action = action.to(self.device)
        self.steps += 1
        ended, terminated, truncated = self.state.advance()
        self.episode_length_buf += 1
        self.reset_terminated[:] = terminated
        self.reset_time_outs[:] = truncated
        self.reward_buf[:] = self.state.reward(action)
        reset_env_ids = ended.nonzero(as_tuple=False).squeeze(-1).int()
        if len(reset_env_ids) > 0:
            if self.cfg.compute_final_obs:
                self.extras["final_obs"] = self._compute_observations()
            self._reset_idx(reset_env_ids)
        self.obs_buf = self._compute_observations(self.obs_in_place)
        return self.obs_buf, self.reward_buf, self.reset_terminated, self.reset_time_outs, self.extras

    def _reset_idx(self, env_ids: Any) -> None:
        self.state.reset_rows(env_ids)
        self.episode_length_buf[env_ids] = 0

    def close(self) -> None:
        if not self._is_closed:
            self.single_observation_space = None
            self.single_action_space = None
            self.observation_space = None
            self.action_space = None
            self._is_closed = True


class FakeIsaacDirectEnv(_FakeIsaacEnv):
    """A ``DirectRLEnv``: group ``"policy"`` (and ``"critic"`` = 2 x counts with ``state=True``)."""

    def __init__(self, num_envs: int = 4, device: str = "cpu", *, state: bool = False, **kwargs: Any) -> None:
        self.state_group = state
        super().__init__(num_envs, device, **kwargs)

    def _configure_gym_env_spaces(self) -> None:
        self.single_observation_space = gym.spaces.Dict()
        self.single_observation_space["policy"] = _box((3,))
        self.single_action_space = _box((1,))
        # the direct-env quirk: the batched observation space is the policy group only
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space["policy"], self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.state_space = None
        if self.state_group:
            self.single_observation_space["critic"] = _box((3,))
            self.state_space = gym.vector.utils.batch_space(self.single_observation_space["critic"], self.num_envs)

    def _get_observations(self) -> dict:
        counts = self.state.counts()
        obs = {"policy": counts}
        if self.state_group:
            obs["critic"] = 2 * counts
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.seed(seed)
        self._reset_idx(torch.arange(self.num_envs, dtype=torch.int32, device=self.device))
        self.obs_buf = self._compute_observations(self.obs_in_place)
        return self.obs_buf, self.extras

    def _reset_idx(self, env_ids: Any) -> None:
        survived = self.reset_time_outs[env_ids].float()
        self.extras.setdefault("log", {})["Metrics/success_rate"] = survived.mean()
        super()._reset_idx(env_ids)


class FakeIsaacManagerEnv(_FakeIsaacEnv):
    """A ``ManagerBasedRLEnv``: ``"policy"`` (concatenated) and ``"critic"`` (a dict of terms).

    ``critic = {"counts": counts, "progress": step / MAX_LEN}``.
    """

    def _configure_gym_env_spaces(self) -> None:
        self.single_observation_space = gym.spaces.Dict()
        self.single_observation_space["policy"] = _box((3,))
        self.single_observation_space["critic"] = gym.spaces.Dict({"counts": _box((3,)), "progress": _box((1,))})
        self.single_action_space = _box((1,))
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)

    def _get_observations(self) -> dict:
        counts = self.state.counts()
        return {"policy": counts, "critic": {"counts": counts.clone(), "progress": counts[:, 2:] / MAX_LEN}}

    def reset(self, env_ids: Any = slice(None), *, seed: int | None = None, options: dict | None = None):
        if env_ids is None:
            env_ids = slice(None)
        if seed is not None:
            self.seed(seed)
        self._reset_idx(env_ids)
        self.obs_buf = self._compute_observations(self.obs_in_place)
        return self.obs_buf, self.extras

    def _reset_idx(self, env_ids: Any) -> None:
        # a new dict on every reset, as the managers' reset infos are collected
        self.extras["log"] = {"Episode_Termination/time_out": int(self.reset_time_outs[env_ids].sum())}
        super()._reset_idx(env_ids)


class FakeManiSkillVectorEnv(gym.vector.VectorEnv):
    """ManiSkill3's ``ManiSkillVectorEnv`` contract over the counting dynamics.

    ``obs_mode="state"`` gives a ``[N, 3]`` tensor, ``"state_dict"`` a nested dict
    ``{"agent": {"counts": [N, 3]}, "extra": {"progress": [N, 1]}}``. With
    ``withhold=True`` the ``_final_observation`` mask leaves out some ended rows
    (``tests.fakes.final_obs_valid``), to exercise the mask.
    """

    def __init__(
        self, num_envs: int = 4, device: str = "cpu", *, obs_mode: str = "state", withhold: bool = False
    ) -> None:
        self.num_envs = num_envs
        self._device = torch.device(device)
        self.obs_mode = obs_mode
        self.withhold = withhold
        self.state = _CountingState(num_envs, self._device)
        if obs_mode == "state":
            self.single_observation_space = _box((3,))
        else:
            self.single_observation_space = gym.spaces.Dict(
                {"agent": gym.spaces.Dict({"counts": _box((3,))}), "extra": gym.spaces.Dict({"progress": _box((1,))})}
            )
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)

    @property
    def device(self) -> torch.device:
        return self._device

    def _obs(self) -> Any:
        counts = self.state.counts()
        if self.obs_mode == "state":
            return counts
        return {"agent": {"counts": counts}, "extra": {"progress": counts[:, 2:] / MAX_LEN}}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        env_idx = (options or {}).get("env_idx", slice(None))
        self.state.reset_rows(env_idx)
        return self._obs(), {"elapsed_steps": self.state.t.clone()}

    def step(self, actions: torch.Tensor):
        _, terminations, truncations = self.state.advance()
        valid = final_obs_valid(self.state.index, self.state.episode)
        rew = self.state.reward(actions)
        obs = self._obs()
        infos: dict = {"elapsed_steps": self.state.t.clone()}
        dones = torch.logical_or(terminations, truncations)
        if dones.any():
            final_obs = _map(torch.clone, obs)
            env_idx = torch.arange(0, self.num_envs, device=self.device)[dones]
            final_info = dict(infos)
            obs, infos = self.reset(options={"env_idx": env_idx})
            infos["final_observation"] = final_obs
            infos["final_info"] = final_info
            infos["_final_info"] = dones
            infos["_final_observation"] = dones & valid if self.withhold else dones
            infos["_elapsed_steps"] = dones
        return obs, rew, terminations, truncations, infos

    def close_extras(self, **kwargs: Any) -> None:
        pass


def _map(fn, tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _map(fn, v) for k, v in tree.items()}
    return fn(tree)


def _map2(fn, dst: Any, src: Any) -> None:
    if isinstance(dst, dict):
        for k in dst:
            _map2(fn, dst[k], src[k])
    else:
        fn(dst, src)


def outside_sync_guard(env: Any, *methods: str) -> Any:
    """Run ``env``'s own ``methods`` (default: step, reset) with no dispatch mode active.

    The simulators themselves sync (Isaac Lab's ``len(reset_env_ids)``, ManiSkill's
    ``dones.any()``); the sync guard is about what gpu_envs adds around them.
    """
    for name in methods or ("step", "reset"):
        original = getattr(env, name)

        @functools.wraps(original)
        def unguarded(*args, _original=original, **kwargs):
            with _disable_current_modes():
                return _original(*args, **kwargs)

        setattr(env, name, unguarded)
    return env
