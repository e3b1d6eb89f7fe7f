"""Batched CartPole-v1 in pure torch: thousands of carts per step, on any device.

Same physics as gymnasium 1.4's ``CartPole-v1`` (Barto, Sutton & Anderson): the same
constants, explicit Euler integration, uniform initial state in ``[-0.05, 0.05]^4``,
termination when ``|x| > 2.4`` or ``|theta| > 12 deg``, reward ``1.0`` on every step
(including the terminating one) and truncation after 500 steps. Only the precision
differs: the state is float32 (gymnasium integrates in float64).

Why: stepping N numpy envs costs N Python calls per step; here one ``step`` advances all
N rows with a fixed, small number of tensor ops that never wait for the device (no
``.item()``, no data-dependent branch), so it can be queued on a GPU stream or captured.
Ended rows are reset inside ``step`` (gymnasium's SAME_STEP auto-reset, as in Isaac Lab),
with their final observation kept in ``info["final_obs"]``.

Example::

    import torch
    from gpu_envs.builtin import CartPoleEnv

    env = CartPoleEnv(num_envs=4096, device="cuda")
    obs, _ = env.reset(seed=0)                                  # [4096, 4] float32
    for _ in range(1000):
        action = torch.randint(0, 2, (env.num_envs,), device=env.device)
        obs, reward, terminated, truncated, info = env.step(action)
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from gpu_envs.builtin import native
from gpu_envs.builtin.base import BatchedTorchEnv
from gpu_envs.builtin.draw_pool import DrawPool
from gpu_envs.builtin.output_blocks import OutputBlocks
from gpu_envs.builtin.render import render_cartpole
from gpu_envs.contract.errors import BackendError
from gpu_envs.utils.native_library import native_allowed

__all__ = ["CartPoleEnv"]


class CartPoleEnv(BatchedTorchEnv):
    """``num_envs`` CartPole-v1 systems stepped together as one ``[N, 4]`` float32 tensor.

    A gymnasium ``VectorEnv`` (so gymnasium and torchrl tooling accept it) that follows
    the torch vector env protocol (see :mod:`gpu_envs.backends.torch_envs`): torch tensors in and out and same-step
    auto-reset. The state ``(x, x_dot, theta, theta_dot)`` is also the observation.

    Args:
        num_envs: number of independent carts ``N``.
        device: where every tensor (state, outputs, random generator) lives.
        expose_final_obs: if True, ``step`` returns ``info = {"final_obs": obs before the
            auto-reset [N, 4], "_final_obs": done mask [N]}``; if False, ``info = {}``
            (Isaac Lab style, the final observation of ended rows is lost).
        max_episode_steps: truncation limit, 500 by default (gymnasium's).
        seed, env_index_offset: the keys of the per-row random streams, as in
            :class:`~gpu_envs.builtin.base.BatchedTorchEnv`.

    Attributes:
        state: ``[N, 4]`` float32, updated in place by ``reset``/``step``.
        elapsed_steps: ``[N]`` int64, steps since each row's episode began (in place).

    ``raw_step`` (the torch backend's direct step, see :mod:`gpu_envs.backends.torch_envs`)
    returns the same step in the TensorDict layout.

    Every tensor ``reset``/``step`` return is newly allocated (never the state itself, never
    rewritten later), so callers may keep or modify them.

    Example::

        env = CartPoleEnv(num_envs=8, seed=1)
        obs, _ = env.reset()
        obs, rew, term, trunc, info = env.step(torch.ones(8, dtype=torch.long))
        final = torch.where((term | trunc)[:, None], info["final_obs"], obs)

    Gymnasium: ``gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=8)`` builds it
    (after ``import gpu_envs``) behind the gymnasium-facing boundary, whose ``step`` takes
    numpy actions such as ``envs.action_space.sample()`` (converted once); the env's own
    ``step`` takes tensors on its device. torchrl: ``torchrl.envs.GymWrapper`` takes that
    gymnasium env as it is: batch size ``[8]``, the true final observations in ``("next",
    "observation")`` (torchrl's ``VecGymEnvTransform`` reads ``info["final_obs"]``) and
    one-hot actions (torchrl's default for ``Discrete``), handed over as numpy. Pass
    ``categorical_action_encoding=True`` for integer actions as in gymnasium, and with it
    ``convert_actions_to_numpy=False`` to hand the action tensor to ``CartPoleEnv(8)``
    itself, without a numpy round trip (on a GPU, the default copies each action to the
    host and back; a one-hot tensor this env does not take). Faster still, an
    ``EnvBase`` over the gpu_envs env:
    ``gpu_envs.interop.to_torchrl(gpu_envs.make("CartPole-v1", num_envs=8))``.
    """

    default_max_episode_steps = 500
    state_size = 4
    _ROW_VIEWS_MIN_ENVS = 512  # see __init__

    # gymnasium CartPoleEnv constants
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    reset_low = -0.05
    reset_high = 0.05
    param_defaults = {"gravity": 9.8, "masscart": 1.0, "masspole": 0.1, "length": 0.5, "force_mag": 10.0}

    def _build(self) -> None:
        """Spaces and step constants (after the base set up the state and the generator)."""
        high = np.array(
            [self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf],
            dtype=np.float32,
        )
        self.single_observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

        n, dev, f32 = self.num_envs, self.device, torch.float32
        self._reset_bounds = self._rng.bounds([self.reset_low] * 4, [self.reset_high] * 4)
        self._step_draws = DrawPool(self._rng, self._reset_bounds)  # the step's reset candidates
        # Large eager batches handle whole [N, 4] rows as single elements: a float32 row is
        # 16 bytes (one complex128) and a bool row 4 bytes (one int32), which avoids slow
        # per-row loops over 4 columns in `where` and `any`. Small batches pay more for the
        # extra view ops than they save, and torch.compile fuses the loops anyway (and
        # cannot lower such views). (Decided once here; MPS has no complex128.)
        self._row_views = n >= self._ROW_VIEWS_MIN_ENVS and dev.type in ("cpu", "cuda")

        # Step constants, folded so that one step is a short fixed chain of tensor ops;
        # accelerations are computed divided by g (see step).
        def scalar(value: float) -> torch.Tensor:
            # 0-dim float32: keeps results float32 whatever the action's dtype.
            return torch.tensor(value, dtype=f32, device=dev)

        g, tm = self.gravity, self.total_mass
        self._force_neg = scalar(-self.force_mag / (tm * g))  # action 0
        self._force_step = 2 * self.force_mag / (tm * g)  # action 1 adds this
        self._k_pml = self.polemass_length / (tm * g)
        # thetaacc denominator / g: length * (4/3 - masspole * cos^2 / total_mass) / g
        self._den_const = scalar(self.length * 4.0 / 3.0 / g)
        self._den_cos2 = -self.length * self.masspole / tm / g
        tau = torch.tensor([self.tau, self.tau * g, self.tau, self.tau], dtype=f32, device=dev)
        self._tau = tau.expand(n, 4).contiguous()  # full [N, 4]: no broadcast in the kernel
        # termination bound on |state|, x and theta only (full [N, 4] for the same reason)
        bounds = torch.tensor(
            [self.x_threshold, math.inf, self.theta_threshold_radians, math.inf], dtype=f32, device=dev
        )
        self._bounds = bounds.expand(n, 4).contiguous()
        self._reward_shape = ((n,), (n, 1))  # [N], or [N, 1] in the TensorDict layout
        # per-row step constants (set_params): force_neg, force_step, k_pml, den_const, den_cos2, and tau per column
        self._row_consts = torch.zeros(n, 5, dtype=f32, device=dev)
        self._row_tau = self._tau.clone()
        self._native_setup()

    def _native_setup(self) -> None:
        """The native CPU step (:mod:`gpu_envs.builtin.native`) where it can run: its constants and pointers, once.

        The env's tensors are never re-bound, so their data pointers are read here once.
        ``self._native`` is None where the pure-torch step runs (not a CPU, no compiler,
        ``GPU_ENVS_NATIVE=0``, inference tensors whose counters the draw pool cannot track).
        """
        self._native = None
        if self.device.type != "cpu":
            return
        lib = native.kernels()
        if lib is None:
            return
        values = [
            float(self._force_neg),
            self._force_step,
            self._k_pml,
            float(self._den_const),
            self._den_cos2,
            *self._tau[0].tolist(),
            *self._bounds[0].tolist(),
        ]
        # what the step and the partial reset (BatchedTorchEnv._reset_rows) read at every call, packed once
        self._native_constants = native.step_constants(
            self._state, self._elapsed, self.max_episode_steps, self._rng, self._reset_bounds, values
        )
        self._native_reset = lib.reset_rows
        # cos / sin of theta, rewritten by each step for its kernel (never returned); every pointer a step
        # passes but its action's and outputs', read once (the tensors are never re-bound)
        self._native_trig = torch.empty(2, self.num_envs, dtype=torch.float32).unbind(0)
        cos, sin = self._native_trig
        self._native_args = (self._native_constants.address(), cos.data_ptr(), sin.data_ptr())
        self._native_blocks = OutputBlocks(self._fresh_outputs)  # the step's outputs, a few steps' worth at a time
        self._native = lib.cartpole_step

    def _params_changed(self) -> None:
        """The step constants of :meth:`_build`, per row, from ``self._params`` (in place: graphs keep reading them)."""
        p = self._params
        g, mc, mp, length, force = (p.column(k) for k in ("gravity", "masscart", "masspole", "length", "force_mag"))
        tm = mc + mp
        tm_g = tm * g
        consts = torch.stack(
            (-force / tm_g, 2 * force / tm_g, mp * length / tm_g, length * 4.0 / 3.0 / g, -length * mp / tm / g), 1
        )
        self._row_consts.copy_(consts)
        self._row_tau[:, 1].copy_(self.tau * g)

    def _row_dynamics(self, action: torch.Tensor) -> torch.Tensor:
        """The next state of every row with its own constants (:meth:`set_params`): gymnasium's Euler step."""
        s = self._state
        _, x_dot, theta, theta_dot = self._state_columns()
        force_neg, force_step, k_pml, den_const, den_cos2 = self._row_consts.unbind(1)
        cos = torch.cos(theta)
        sin = torch.sin(theta)
        temp = force_neg + action * force_step
        temp = temp + k_pml * theta_dot * theta_dot * sin
        theta_acc = (sin - cos * temp) / (den_const + den_cos2 * cos * cos)
        x_acc = temp - k_pml * theta_acc * cos
        return torch.addcmul(s, torch.stack((x_dot, x_acc, theta_dot, theta_acc), 1), self._row_tau)

    render_fps = 50  # gymnasium's, for videos of render_observations

    def render_observations(
        self, obs: torch.Tensor, height: int | None = None, width: int | None = None
    ) -> torch.Tensor:
        """RGB frames ``uint8 [K, H, W, 3]`` of observations ``[K, obs_dim]`` (any rows: final ones too).

        Drawn as gymnasium draws this env, with torch ops on ``obs.device``; see
        :mod:`gpu_envs.builtin.render`. The hook :class:`~gpu_envs.transforms.RecordEpisodes` uses.
        """
        return render_cartpole(obs, height, width)

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Reset all rows, or only ``options["reset_mask"]`` rows; return ``(obs [N, 4], {})``.

        ``seed`` re-keys the env's generator (bit-for-bit reproducible). ``options`` may
        hold ``"reset_mask"`` (``[N]`` bool: rows to reset, the others keep their state and
        step count; only they advance their random stream) and, like gymnasium,
        ``"low"``/``"high"`` bounds of the uniform initial state for this reset (default
        ``-0.05``/``0.05``; values in ``[low, high)``).
        """
        options = self._begin_reset(seed, options)
        low = float(options.get("low", self.reset_low))
        high = float(options.get("high", self.reset_high))
        if low > high:
            raise ValueError(f"options low ({low}) must be <= high ({high})")
        bounds = self._reset_bounds
        if (low, high) != (self.reset_low, self.reset_high):
            bounds = self._rng.bounds([low] * 4, [high] * 4)
        mask = options.get("reset_mask")
        self._reset_rows(bounds, mask)
        return self._state.clone(), {}

    # ------------------------------------------------------------------ step
    def _advance(self, action: torch.Tensor, columns: bool) -> tuple:
        """Advance every row by one step of ``tau = 0.02`` s and auto-reset ended rows.

        Args:
            action: ``[N]`` integer (or bool) tensor on ``device`` with values 0 (push
                left) or 1 (push right). Values are not checked (that would need a host
                synchronisation); anything else gives a force outside gymnasium's.
            columns: reward and flags as ``[N, 1]`` (True) or ``[N]``.

        Returns:
            ``(obs [N, 4] float32, reward float32, terminated bool, truncated bool,
            done bool, pre-reset obs [N, 4])``; ``obs`` is post-reset on ended rows (see
            ``step`` and ``raw_step``).
        """
        if self._needs_reset:
            self._raise_not_ready()
        if (
            self._native is not None
            and not self.randomized
            and action.dtype == torch.int64
            and action.is_contiguous()
            and action.device.type == "cpu"
            and native_allowed()
        ):
            return self._native_advance(action, columns)
        if self.last_step_clean and native_allowed():  # an eager step whose values were not looked at
            self.last_step_clean = False  # (traced or captured steps leave it: no Python state changes there)
        s = self._state
        if self.randomized:
            new = self._row_dynamics(action)
        else:
            _, x_dot, theta, theta_dot = self._state_columns()
            cos = torch.cos(theta)
            sin = torch.sin(theta)
            # Everything below is divided by g (folded into the constants):
            # temp/g = (force + polemass_length * theta_dot^2 * sin) / (total_mass * g)
            temp = torch.add(self._force_neg, action, alpha=self._force_step)
            temp = torch.addcmul(temp, theta_dot * theta_dot, sin, value=self._k_pml)
            # thetaacc = (g sin - cos temp) / (length (4/3 - masspole cos^2 / total_mass))
            theta_acc = torch.addcmul(sin, cos, temp, value=-1.0)
            theta_acc = theta_acc / torch.addcmul(self._den_const, cos, cos, value=self._den_cos2)
            # xacc/g = temp/g - polemass_length * thetaacc * cos / (total_mass * g)
            x_acc = torch.addcmul(temp, theta_acc, cos, value=-self._k_pml)
            # euler: state += tau * (x_dot, xacc, theta_dot, thetaacc)  (tau * g on xacc)
            new = torch.addcmul(s, torch.stack((x_dot, x_acc, theta_dot, theta_acc), 1), self._tau)

        # (row views: a flag fixed at construction, and whether this is traced; not a data branch)
        row_views = self._row_views and not torch.compiler.is_compiling()
        # |x| > x_threshold or |theta| > theta_threshold; flags [N, 1] or [N] from the start
        out_of_bounds = new.abs() > self._bounds
        if row_views:  # a bool row of 4 is one int32: nonzero where any column is
            terminated = out_of_bounds.view(torch.int32).bool()
            terminated = terminated if columns else terminated.view(-1)
        else:
            terminated = out_of_bounds.any(1, keepdim=columns)
        elapsed, truncated = self._count_step(columns)
        done = terminated | truncated

        # Same-step auto-reset: fresh candidates for every row, kept where done; only the
        # ended rows count the draw. Everything is written into the env's own tensors.
        fresh = self._step_draws.uniform()  # == self._rng.uniform(self._reset_bounds)
        done_rows = done if columns else done.unsqueeze(1)
        if row_views:
            post = torch.where(done_rows, fresh.view(torch.complex128), new.view(torch.complex128))
            post = post.view(torch.float32)
        else:
            post = torch.where(done_rows, fresh, new)
        s.copy_(post)
        self._end_episodes(elapsed, done)
        reward = torch.ones(self._reward_shape[columns], dtype=torch.float32, device=self.device)
        return post, reward, terminated, truncated, done, new

    output_names = ("observation", "final_observation", "reward", "terminated", "truncated", "done")

    def _new_outputs(self, columns: bool) -> tuple[torch.Tensor, ...]:
        """A fresh set of the native step's outputs, carved from a block of a few steps' worth (:mod:`.output_blocks`)."""
        return self._native_blocks.take(columns)

    def _fresh_outputs(self, columns: bool) -> tuple[torch.Tensor, ...]:
        """The native step's outputs, allocated: obs, pre-reset obs, reward, terminated, truncated, done."""
        n, f32, flag = self.num_envs, torch.float32, torch.bool
        shape = self._reward_shape[columns]
        return (
            torch.empty(n, 4, dtype=f32),
            torch.empty(n, 4, dtype=f32),
            torch.empty(shape, dtype=f32),
            torch.empty(shape, dtype=flag),
            torch.empty(shape, dtype=flag),
            torch.empty(shape, dtype=flag),
        )

    def _native_advance(self, action: torch.Tensor, columns: bool) -> tuple:
        """:meth:`_advance` in one native call (same values bit for bit): the eager CPU step."""
        theta = self._columns[2]
        cos, sin = self._native_trig
        torch.cos(theta, out=cos)
        torch.sin(theta, out=sin)
        obs, new, reward, terminated, truncated, done = self._output_ring.take(columns, self._new_outputs)
        a, cos_p, sin_p = self._native_args
        # counted first, as CounterRNG.advance counts: interrupted after, the draw pool refills early, never late
        kernel = self._native
        if kernel is None:  # (only called where _advance found the kernel)
            raise BackendError(f"{type(self).__name__}: the native step ran without its kernel.")
        self._rng.count_advance()  # the kernel advances the counters of the rows that end
        self.last_step_clean = not kernel(
            a, cos_p, sin_p, action.data_ptr(), obs.data_ptr(), new.data_ptr(), reward.data_ptr(),
            terminated.data_ptr(), truncated.data_ptr(), done.data_ptr(),
        )  # fmt: skip
        return obs, reward, terminated, truncated, done, new
