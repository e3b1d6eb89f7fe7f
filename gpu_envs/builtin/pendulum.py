"""Batched Pendulum-v1 in pure torch: thousands of pendulums per step, on any device.

Same physics as gymnasium 1.4's ``Pendulum-v1`` (g = 10, m = l = 1, dt = 0.05): torque
clipped to ``[-2, 2]``, angular speed clipped to ``[-8, 8]``, semi-implicit update of
``(th, thdot)``, reward ``-(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2)`` on the
pre-step state and clipped torque, observation ``[cos th, sin th, thdot]``, initial state
uniform in ``[-pi, pi] x [-1, 1]``, never terminates, truncated after 200 steps. Only the
precision differs: the state is float32 (gymnasium integrates in float64).

Why: one ``step`` advances all N rows with a fixed, small number of tensor ops that
never wait for the device (no ``.item()``, no data-dependent branch). Ended rows are
reset inside ``step`` (gymnasium's SAME_STEP auto-reset, as in Isaac Lab), with their
final observation kept in ``info["final_obs"]``.

Example::

    import torch
    from gpu_envs.builtin import PendulumEnv

    env = PendulumEnv(num_envs=4096, device="cuda")
    obs, _ = env.reset(seed=0)                                  # [4096, 3] float32
    for _ in range(1000):
        torque = 4 * torch.rand(env.num_envs, 1, device=env.device) - 2
        obs, reward, terminated, truncated, info = env.step(torque)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from gpu_envs.builtin import native
from gpu_envs.builtin.base import BatchedTorchEnv
from gpu_envs.builtin.draw_pool import DrawPool
from gpu_envs.builtin.output_blocks import OutputBlocks
from gpu_envs.builtin.render import render_pendulum
from gpu_envs.contract.errors import BackendError
from gpu_envs.utils.native_library import native_allowed
from gpu_envs.utils.torch_internals import version_counter

__all__ = ["PendulumEnv"]


class PendulumEnv(BatchedTorchEnv):
    """``num_envs`` Pendulum-v1 systems stepped together as one ``[N, 2]`` float32 state.

    A gymnasium ``VectorEnv`` (so gymnasium and torchrl tooling accept it) that follows
    the torch vector env protocol (see :mod:`gpu_envs.backends.torch_envs`): torch tensors in and out and same-step
    auto-reset. The state is ``(th, thdot)`` with ``th`` unwrapped (as in gymnasium);
    the observation is ``[cos th, sin th, thdot]``.

    Args:
        num_envs: number of independent pendulums ``N``.
        device: where every tensor (state, outputs, random generator) lives.
        expose_final_obs: if True, ``step`` returns ``info = {"final_obs": obs before the
            auto-reset [N, 3], "_final_obs": done mask [N]}``; if False, ``info = {}``.
        max_episode_steps: truncation limit, 200 by default (gymnasium's).
        seed, env_index_offset: the keys of the per-row random streams, as in
            :class:`~gpu_envs.builtin.base.BatchedTorchEnv`.

    Attributes:
        state: ``[N, 2]`` float32, updated in place by ``reset``/``step``.
        elapsed_steps: ``[N]`` int64, steps since each row's episode began (in place).

    Every tensor ``reset``/``step`` return is newly allocated (never the state itself, never
    rewritten later), so callers may keep or modify them.

    Example::

        env = PendulumEnv(num_envs=8, seed=1)
        obs, _ = env.reset()
        obs, rew, term, trunc, info = env.step(torch.zeros(8, 1))

    Gymnasium: ``gymnasium.make_vec("gpu_envs/Pendulum-v1", num_envs=8)`` builds it
    (after ``import gpu_envs``) behind the gymnasium-facing boundary, whose ``step`` takes
    numpy actions such as ``envs.action_space.sample()`` (converted once); the env's own
    ``step`` takes tensors on its device. torchrl: ``torchrl.envs.GymWrapper(PendulumEnv(8),
    convert_actions_to_numpy=False)`` takes the env as it is: batch size ``[8]``, ``[8, 1]``
    torque actions and the true final observations in ``("next", "observation")``
    (torchrl's ``VecGymEnvTransform`` reads ``info["final_obs"]``); with torchrl's default
    numpy actions, wrap the gymnasium env above instead. Faster still, an ``EnvBase``
    over the gpu_envs env:
    ``gpu_envs.interop.to_torchrl(gpu_envs.make("Pendulum-v1", num_envs=8))``.
    """

    default_max_episode_steps = 200
    state_size = 2

    # gymnasium PendulumEnv constants
    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    g = 10.0
    m = 1.0
    l = 1.0  # noqa: E741 (gymnasium's name)
    default_x_init = math.pi
    default_y_init = 1.0
    param_defaults = {"m": 1.0, "l": 1.0, "g": 10.0, "max_torque": 2.0}

    def _build(self) -> None:
        """Spaces and step constants (after the base set up the state and the generator)."""
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.single_observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = spaces.Box(low=-self.max_torque, high=self.max_torque, shape=(1,), dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

        dev, f32 = self.device, torch.float32
        self._reset_bounds = self._bounds(self.default_x_init, self.default_y_init)
        self._step_draws = DrawPool(self._rng, self._reset_bounds)  # the step's reset candidates

        # thdot' = thdot + (3 g / (2 l) sin th + 3 / (m l^2) u) dt
        self._k_sin = 3 * self.g / (2 * self.l) * self.dt
        self._k_u = 3.0 / (self.m * self.l**2) * self.dt
        self._zero = torch.zeros((), dtype=f32, device=dev)
        # per-row step constants (set_params): k_sin, k_u, max_torque
        self._row_consts = torch.zeros(self.num_envs, 3, dtype=f32, device=dev)
        self._native_setup()

    def _native_setup(self) -> None:
        """The native CPU step (:mod:`gpu_envs.builtin.native`) where it can run: constants and pointers, once.

        ``self._native`` is None where the pure-torch step runs (not a CPU, no compiler,
        ``GPU_ENVS_NATIVE=0``). The env's tensors are never re-bound: their pointers are read once.
        """
        self._native = None
        if self.device.type != "cpu":
            return
        lib = native.kernels()
        if lib is None:
            return
        values = [self.max_torque, self.max_speed, self.dt, self._k_sin, self._k_u]
        # what the step and the partial reset (BatchedTorchEnv._reset_rows) read at every call, packed once
        self._native_constants = native.step_constants(
            self._state, self._elapsed, self.max_episode_steps, self._rng, self._reset_bounds, values
        )
        self._native_reset = lib.reset_rows
        n = self.num_envs
        self._reward_shape = ((n,), (n, 1))  # [N], or [N, 1] in the TensorDict layout
        # scratch the step rewrites (never returned): new thdot, and [post th | new th] for the trigonometry
        self._native_thdot = torch.empty(n, dtype=torch.float32)
        self._native_angles = torch.empty(2 * n, dtype=torch.float32)
        # the trigonometry of [post th | new th], rewritten by each step: its first half is cos / sin of the
        # state's th, the next step's input while the state is untouched (see _native_advance)
        cos, sin, angle = torch.empty(3, 2 * n, dtype=torch.float32).unbind(0)  # views made once (never re-bound)
        self._trig = (cos, sin, cos[:n], sin[:n], angle[:n])  # [2N] cos, sin; [N] cos th, sin th, atan2(sin th, cos th)
        self._trig_of: int | None = None  # the state's version counter when _trig was computed (None: stale)
        # an env built under torch.inference_mode has inference tensors: no version counter, so nothing is reused
        self._trig_versioned = not self._state.is_inference()
        # every pointer a step passes but its outputs', read once (the tensors are never re-bound)
        self._native_args = (
            self._native_constants.address(),
            sin[:n].data_ptr(),
            angle[:n].data_ptr(),
            self._native_thdot.data_ptr(),
            self._native_angles.data_ptr(),
        )
        # pendulum_obs: [post th] with the state's thdot, [new th] with the new thdot
        self._native_obs_args = (
            n,
            cos.data_ptr(),
            sin.data_ptr(),
            self._state.data_ptr(),
            self._native_thdot.data_ptr(),
        )
        self._native_blocks = OutputBlocks(self._fresh_outputs)  # the step's outputs, a few steps' worth at a time
        self._native = lib.pendulum_step
        self._native_obs = lib.pendulum_obs

    def _params_changed(self) -> None:
        """The step constants of :meth:`_build`, per row, from ``self._params`` (in place: graphs keep reading them)."""
        p = self._params
        m, length, g, max_torque = (p.column(k) for k in ("m", "l", "g", "max_torque"))
        consts = torch.stack((3 * g / (2 * length) * self.dt, 3.0 / (m * length * length) * self.dt, max_torque), 1)
        self._row_consts.copy_(consts)

    render_fps = 30  # gymnasium's, for videos of render_observations

    def render_observations(
        self, obs: torch.Tensor, height: int | None = None, width: int | None = None
    ) -> torch.Tensor:
        """RGB frames ``uint8 [K, H, W, 3]`` of observations ``[K, obs_dim]`` (any rows: final ones too).

        Drawn as gymnasium draws this env, with torch ops on ``obs.device``; see
        :mod:`gpu_envs.builtin.render`. The hook :class:`~gpu_envs.transforms.RecordEpisodes` uses.
        """
        return render_pendulum(obs, height, width)

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Reset all rows, or only ``options["reset_mask"]`` rows; return ``(obs [N, 3], {})``.

        ``seed`` re-keys the env's generator (bit-for-bit reproducible). ``options`` may
        hold ``"reset_mask"`` (``[N]`` bool: rows to reset, the others keep their state and
        step count; only they advance their random stream) and, like gymnasium,
        ``"x_init"``/``"y_init"``: the symmetric bounds of the uniform initial
        ``th``/``thdot`` for this reset (default ``pi``/``1``; values in ``[-x, x)``).
        """
        options = self._begin_reset(seed, options)
        x = float(options.get("x_init", self.default_x_init))
        y = float(options.get("y_init", self.default_y_init))
        bounds = self._reset_bounds
        if (x, y) != (self.default_x_init, self.default_y_init):
            bounds = self._bounds(x, y)
        mask = options.get("reset_mask")
        self._reset_rows(bounds, mask)
        th, thdot = self._state.unbind(1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), 1), {}

    # ------------------------------------------------------------------ step
    def _advance(self, action: torch.Tensor, columns: bool) -> tuple:
        """Advance every row by ``dt = 0.05`` s and auto-reset rows that reached the limit.

        Args:
            action: ``[N, 1]`` float torque on ``device`` (clipped to ``[-2, 2]``).
            columns: reward and flags as ``[N, 1]`` (True) or ``[N]``.

        Returns:
            ``(obs [N, 3] float32, reward float32, terminated bool (always False),
            truncated bool, done bool (truncated), pre-reset obs [N, 3] or None)``;
            ``obs`` is post-reset on truncated rows; the pre-reset observation is
            computed only with ``expose_final_obs``.
        """
        if self._needs_reset:
            self._raise_not_ready()
        if (
            self._native is not None
            and not self.randomized
            and action.dtype == torch.float32
            and action.is_contiguous()
            and action.device.type == "cpu"
            and action.numel() == self.num_envs
            and native_allowed()
        ):
            return self._native_advance(action, columns)
        if self.last_step_clean and native_allowed():  # an eager step whose values were not looked at
            self.last_step_clean = False  # (traced or captured steps leave it: no Python state changes there)
        th, thdot = self._state_columns()
        u = action.reshape(self.num_envs)
        if u.dtype != torch.float32:  # a dtype check, not a data read
            u = u.to(torch.float32)
        if self.randomized:
            k_sin, k_u, max_torque = self._row_consts.unbind(1)
            u = torch.minimum(torch.maximum(u, -max_torque), max_torque)
        else:
            u = u.clamp(-self.max_torque, self.max_torque)
        # reward = -(angle_normalize(th)^2 + .1 thdot^2 + .001 u^2), pre-step state.
        # atan2(sin, cos) is angle_normalize up to the sign at exactly +-pi (same square),
        # and far more precise in float32 than ((th + pi) % 2pi) - pi once |th| grows.
        sin = torch.sin(th)
        angle = torch.atan2(sin, torch.cos(th))
        reward = torch.addcmul(self._zero, angle, angle, value=-1.0)
        reward = torch.addcmul(reward, thdot, thdot, value=-0.1)
        reward = torch.addcmul(reward, u, u, value=-0.001)
        # thdot' = clip(thdot + (3 g / (2 l) sin th + 3 / (m l^2) u) dt) ; th' = th + thdot' dt
        if self.randomized:
            new_thdot = (thdot + sin * k_sin + u * k_u).clamp_(-self.max_speed, self.max_speed)
        else:
            new_thdot = torch.add(thdot, sin, alpha=self._k_sin)
            new_thdot = torch.add(new_thdot, u, alpha=self._k_u).clamp_(-self.max_speed, self.max_speed)
        new_th = torch.add(th, new_thdot, alpha=self.dt)

        elapsed, truncated = self._count_step(columns)  # nothing terminates: done is truncated
        terminated = torch.zeros_like(truncated)

        # Same-step auto-reset: fresh candidates for every row, kept where truncated; only
        # the ended rows count the draw. Everything is written into the env's own tensors.
        fresh = self._step_draws.uniform()  # == self._rng.uniform(self._reset_bounds)
        new = torch.stack((new_th, new_thdot), 1)
        torch.where(truncated if columns else truncated.unsqueeze(1), fresh, new, out=self._state)
        self._end_episodes(elapsed, truncated)
        post_th, post_thdot = self._state_columns()
        obs = torch.stack((torch.cos(post_th), torch.sin(post_th), post_thdot), 1)
        if columns:
            reward = reward.view(self.num_envs, 1)
        if not self.expose_final_obs:
            return obs, reward, terminated, truncated, truncated, None
        final_obs = torch.stack((torch.cos(new_th), torch.sin(new_th), new_thdot), 1)
        return obs, reward, terminated, truncated, truncated, final_obs

    # (no "done": it is truncated itself, nothing terminates)
    output_names = ("reward", "terminated", "truncated", "observation", "final_observation")

    def _new_outputs(self, columns: bool) -> tuple[Any, ...]:
        """A fresh set of the native step's outputs, carved from a block of a few steps' worth (:mod:`.output_blocks`)."""
        return self._native_blocks.take(columns)

    def _fresh_outputs(self, columns: bool) -> tuple[Any, ...]:
        """The native step's outputs, allocated: reward, terminated, truncated, obs, final obs (None if not exposed)."""
        n, f32, flag = self.num_envs, torch.float32, torch.bool
        shape = self._reward_shape[columns]
        final = torch.empty(n, 3, dtype=f32) if self.expose_final_obs else None
        return (
            torch.empty(shape, dtype=f32),
            torch.empty(shape, dtype=flag),
            torch.empty(shape, dtype=flag),
            torch.empty(n, 3, dtype=f32),
            final,
        )

    def _native_advance(self, action: torch.Tensor, columns: bool) -> tuple:
        """:meth:`_advance` in two native calls around torch's trigonometry (same values bit for bit).

        The observation's ``cos``/``sin`` of the post-step ``th`` are the next step's
        ``cos``/``sin`` of its pre-step ``th``: kept, and reused while the state's version
        counter says nothing wrote it since (a reset, ``set_state``, a torch step or a
        user's in-place write all move it; the native partial reset, which writes through
        a pointer, forgets them itself: :meth:`_forget_state_cache`). Two torch ops of five saved.
        """
        cos, sin, cos_th, sin_th, angle_th = self._trig
        if self._trig_of is None or self._trig_of != version_counter(self._state):
            th = self._columns[0]
            torch.cos(th, out=cos_th)
            torch.sin(th, out=sin_th)
        torch.atan2(sin_th, cos_th, out=angle_th)
        reward, terminated, truncated, obs, final = self._output_ring.take(columns, self._new_outputs)
        a, sin_p, angle_p, thdot_p, angles_p = self._native_args
        # counted first, as CounterRNG.advance counts: interrupted after, the draw pool refills early, never late
        kernel = self._native
        if kernel is None:  # (only called where _advance found the kernel)
            raise BackendError(f"{type(self).__name__}: the native step ran without its kernel.")
        self._trig_of = None  # until the trigonometry below is that of the new state
        self._rng.count_advance()  # the kernel advances the counters of the rows that end
        self.last_step_clean = not kernel(
            a, sin_p, angle_p, action.data_ptr(), reward.data_ptr(), terminated.data_ptr(), truncated.data_ptr(),
            thdot_p, angles_p,
        )  # fmt: skip
        angles = self._native_angles
        torch.cos(angles, out=cos)  # of [post th | new th]
        torch.sin(angles, out=sin)
        if self._trig_versioned:  # the kernel wrote the state through its pointer: no bump
            self._trig_of = version_counter(self._state)
        self._native_obs(*self._native_obs_args, obs.data_ptr(), None if final is None else final.data_ptr())
        return obs, reward, terminated, truncated, truncated, final

    def _forget_state_cache(self) -> None:
        """The state was written where its version counter does not see it (a native reset): recompute its trigonometry."""
        self._trig_of = None

    def _bounds(self, x: float, y: float):
        """Initial ``(th, thdot)`` bounds: ``[-x, x) x [-y, y)``."""
        return self._rng.bounds([-x, -y], [x, y])
