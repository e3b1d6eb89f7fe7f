"""What every built-in torch env shares: lifecycle, seeding, state, partial resets.

A built-in env is a gymnasium ``VectorEnv`` (so gymnasium and torchrl tooling accept it)
that follows the torch vector env protocol (:mod:`gpu_envs.backends.torch`): torch
tensors in and out, same-step auto-reset, final observations in ``info["final_obs"]``.
Subclasses write the physics (``step``) and the initial-state draw; this base owns the
rest, so the envs differ only where their dynamics do.

Example (a subclass)::

    class MyEnv(BatchedTorchEnv):
        state_size = 2
        def reset(self, *, seed=None, options=None):
            options = self._begin_reset(seed, options)
            self._apply_reset(torch.zeros(self.num_envs, 2), options.get("reset_mask"))
            return self._state.clone(), {}
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
import torch

from gpu_envs.arrays import to_torch
from gpu_envs.errors import ClosedEnvError, InvalidArgumentError, ResetMaskError, ResetNeededError


class BatchedTorchEnv(gymnasium.vector.VectorEnv):
    """Base of the built-in envs: ``N`` systems as one ``[N, state_size]`` float32 state.

    Args:
        num_envs: number of independent systems ``N``.
        device: where every tensor (state, outputs, random generator) lives.
        expose_final_obs: if True, ``step`` returns ``info = {"final_obs": obs before the
            auto-reset, "_final_obs": done mask [N]}``; if False, ``info = {}`` (Isaac Lab
            style: the final observation of ended rows is lost).
        max_episode_steps: truncation limit (``truncated = elapsed_steps >= limit``).
        seed: seeds the env's ``torch.Generator`` (on ``device``), the only source of
            randomness; ``None`` draws a fresh seed. ``reset(seed=...)`` re-seeds it.

    Attributes:
        state: ``[N, state_size]`` float32. ``step`` replaces it with a new tensor (never
            writes into the old one); callers may overwrite it in place or assign one.
        elapsed_steps: ``[N]`` int64, steps since each row's episode began.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP,
        "render_modes": [],
    }
    autoreset_mode = gymnasium.vector.AutoresetMode.SAME_STEP  # read by torchrl's GymWrapper
    render_mode = None
    supports_reset_mask = True
    state_size: ClassVar[int]

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device,
        *,
        expose_final_obs: bool,
        max_episode_steps: int,
        seed: int | None,
    ) -> None:
        if int(num_envs) < 1:
            raise InvalidArgumentError(f"num_envs must be >= 1, got {num_envs}.")
        if int(max_episode_steps) < 1:
            raise InvalidArgumentError(f"max_episode_steps must be >= 1, got {max_episode_steps}.")
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.expose_final_obs = bool(expose_final_obs)
        self.max_episode_steps = int(max_episode_steps)
        self._state = torch.zeros(self.num_envs, self.state_size, dtype=torch.float32, device=self.device)
        self.elapsed_steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._generator = torch.Generator(device=self.device)
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(int(seed))
        self._needs_reset = True
        self._closed = False

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> torch.Tensor:
        """``[N, state_size]`` float32; writable in place or assignable."""
        return self._state

    @state.setter
    def state(self, value: torch.Tensor) -> None:
        value = torch.as_tensor(value, dtype=torch.float32, device=self.device)
        if tuple(value.shape) != (self.num_envs, self.state_size):
            raise InvalidArgumentError(
                f"state must have shape ({self.num_envs}, {self.state_size}), got {tuple(value.shape)}."
            )
        self._state = value.contiguous()

    # ------------------------------------------------------------------ reset
    def _begin_reset(self, seed: int | None, options: dict | None) -> dict:
        """Checks and seeding common to every ``reset``; returns ``options`` (never None)."""
        if self._closed:
            raise ClosedEnvError(f"{type(self).__name__} was closed; build a new one.")
        if seed is not None:
            self._generator.manual_seed(int(seed))
        return options or {}

    def _apply_reset(self, fresh: torch.Tensor, mask: Any | None) -> None:
        """Install ``fresh`` initial states on every row, or on the rows of ``mask`` [N]."""
        if mask is None:
            self._state = fresh
            self.elapsed_steps = torch.zeros_like(self.elapsed_steps)
        else:
            mask = self._check_mask(mask)
            self._state = torch.where(mask.unsqueeze(1), fresh, self._state)
            self.elapsed_steps = self.elapsed_steps.masked_fill(mask, 0)
        self._needs_reset = False

    def _check_mask(self, mask: Any) -> torch.Tensor:
        if self._needs_reset:
            raise ResetNeededError("call reset() without reset_mask before resetting some rows.")
        mask = torch.as_tensor(mask, device=self.device)
        if mask.dtype != torch.bool or tuple(mask.shape) != (self.num_envs,):
            raise ResetMaskError(
                f"reset_mask must be a bool tensor of shape ({self.num_envs},), got {mask.dtype} {tuple(mask.shape)}."
            )
        return mask

    # ----------------------------------------------------------------- action
    def _as_action(self, action: Any) -> torch.Tensor:
        """The action as a tensor on ``device``: gymnasium's conventions at the boundary.

        A tensor already on ``device`` passes through (no copy, no sync); a numpy array
        (``env.action_space.sample()``, a CleanRL ``action.cpu().numpy()``), a list or a
        tensor on another device is copied once to ``device``.
        """
        if isinstance(action, torch.Tensor) and action.device == self.device:
            return action
        if not isinstance(action, torch.Tensor) and not hasattr(action, "__dlpack__"):
            action = np.asarray(action)
        return to_torch(action, self.device)

    # ------------------------------------------------------------------ step
    def _advance(self, action: torch.Tensor) -> tuple:
        """One step of the physics and the same-step auto-reset (subclasses).

        Returns ``(obs, reward [N], terminated [N], truncated [N], done [N], done [N, 1]
        or None, pre-reset obs or None)``: what :meth:`step` and :meth:`step_transition`
        present in their two layouts, each tensor computed once (``done [N, 1]`` where the
        physics needs it anyway, else None).
        """
        raise NotImplementedError

    def step(self, action: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """gymnasium's ``(obs, reward [N], terminated [N], truncated [N], info)``.

        ``action`` may be a tensor on ``device`` (used as is) or, as gymnasium's envs take
        it, a numpy array (``env.action_space.sample()``) or a tensor elsewhere (copied).

        ``info`` is ``{"final_obs": pre-reset obs, "_final_obs": done [N]}`` when
        ``expose_final_obs``, else ``{}``; ``obs`` is post-reset on ended rows.
        """
        obs, reward, terminated, truncated, done, _, final = self._advance(self._as_action(action))
        if not self.expose_final_obs:
            return obs, reward, terminated, truncated, {}
        return obs, reward, terminated, truncated, {"final_obs": final, "_final_obs": done}

    def step_transition(self, action: torch.Tensor) -> tuple:
        """The same step in the TensorDict layout (:mod:`gpu_envs.backends.torch`'s fast path).

        Returns ``(obs, reward [N, 1], terminated [N, 1], truncated [N, 1], done [N, 1],
        next_obs)``: ``next_obs`` is the pre-reset observation of every row (the final
        one where an episode ended), or ``None`` without ``expose_final_obs``.
        """
        obs, reward, terminated, truncated, done, done_rows, final = self._advance(action)
        n = self.num_envs
        done = done.view(n, 1) if done_rows is None else done_rows
        next_obs = final if self.expose_final_obs else None
        return obs, reward.view(n, 1), terminated.view(n, 1), truncated.view(n, 1), done, next_obs

    # -------------------------------------------------------------- lifecycle
    def _raise_not_ready(self) -> None:
        if self._closed:
            raise ClosedEnvError(f"{type(self).__name__} was closed; build a new one.")
        raise ResetNeededError("call reset() before step().")

    def close(self, **kwargs: Any) -> None:
        """Mark the env closed (it holds no external resources); later calls raise."""
        self._closed = True
        self._needs_reset = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"
