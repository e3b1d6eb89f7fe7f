"""``SimulatorEnv``: a batched env on any physics engine, where the user writes only what is task-specific.

Engines such as Newton, MuJoCo Warp or Genesis step physics but have no env API, and the
tasks written on them in rsl_rl's style reset rows inside ``step`` and lose the final
observation. Subclass :class:`SimulatorEnv` and write five methods -- gpu_envs does the rest
the way its built-in envs do:

* ``setup()``: build the state tensors (``[N, ...]`` on ``self.device``) and the spaces
  ``single_observation_space`` / ``single_action_space`` (gymnasium spaces of one env);
* ``physics_step(action)``: advance every row one control step (in place);
* ``observe()`` -> a NEW ``[N, *obs]`` tensor; ``reward()`` -> ``[N]``; ``terminated()`` -> ``[N]`` bool;
* ``reset_rows(rows, noise)``: reset the rows where ``rows`` (bool ``[N]``) is True, and
  only those, from ``noise`` (``[N, reset_noise]`` float32 uniform in ``[0, 1)``, each row's
  own draws), with ``torch.where`` (no host sync);
* optionally ``state()`` -> the live state tensors by name (``[N, ...]`` each), which makes
  the env snapshottable per row (``env.get_state(rows)`` / ``set_state``) and replayable by
  CUDA graphs.

What the base does, with no host sync: the time limit (``max_episode_steps``: ``truncated``
where the env did not terminate), same-step auto-reset with the TRUE final observation
(``info["final_obs"]``: the observation before the reset; the masked reset runs every step
on a GPU, and on the CPU -- where reading the flags costs no sync -- only on steps where a
row ended, which spares engines whose reset kernels cost milliseconds), masked resets
(``reset(options={"reset_mask": m})``), per-row random streams (row ``i``'s reset draws depend
only on the seed, its index and how many times it was reset: a
:class:`~gpu_envs.builtin.counter_rng.CounterRNG`), and the torch vector env protocol
(:mod:`gpu_envs.backends.torch_envs`), so ``gpu_envs.wrap(env)`` gives a
:class:`~gpu_envs.BatchedEnv` with its specs, health checks, ``collect`` and adapters. Arrays of
other frameworks cross with their own zero-copy views (``wp.to_torch``, DLPack) inside the
five methods.

Example::

    >>> import gymnasium, torch
    >>> import gpu_envs
    >>> class PointMass(gpu_envs.SimulatorEnv):
    ...     reset_noise = 1                                    # one draw per reset row
    ...     def setup(self):
    ...         self.single_observation_space = gymnasium.spaces.Box(-10.0, 10.0, (2,))
    ...         self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,))
    ...         self.pos = torch.zeros(self.num_envs, device=self.device)
    ...         self.vel = torch.zeros(self.num_envs, device=self.device)
    ...     def physics_step(self, action):
    ...         self.vel.add_(0.1 * action.view(-1)).mul_(0.95)
    ...         self.pos.add_(0.1 * self.vel)
    ...     def observe(self):
    ...         return torch.stack((self.pos, self.vel), 1)
    ...     def reward(self):
    ...         return -self.pos.abs()
    ...     def terminated(self):
    ...         return self.pos.abs() > 2.0
    ...     def reset_rows(self, rows, noise):
    ...         self.pos.copy_(torch.where(rows, noise[:, 0] * 2 - 1, self.pos))
    ...         self.vel.masked_fill_(rows, 0.0)
    ...     def state(self):
    ...         return {"pos": self.pos, "vel": self.vel}
    >>> env = gpu_envs.wrap(PointMass(num_envs=8, max_episode_steps=50), seed=0)
    >>> gpu_envs.check_env(env, steps=120).ok
    True
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import torch

from gpu_envs.builtin.counter_rng import CounterRNG
from gpu_envs.contract.errors import ClosedEnvError, InvalidArgumentError, ResetNeededError
from gpu_envs.utils.arguments import as_int, as_seed
from gpu_envs.utils.devices import resolve_device
from gpu_envs.utils.live_state import copy_into

__all__ = ["SimulatorEnv"]


class SimulatorEnv:
    """Base of a batched env on any engine: subclass it and write the task (see the module docstring).

    Args:
        num_envs: rows ``N``.
        device: where the state lives (``None``: CUDA when available, as :func:`gpu_envs.make`).
        max_episode_steps: the time limit (default: the class's ``default_max_episode_steps``;
            ``None`` there means no limit).
        seed: the first ``reset``'s seed when it is given none.
        env_index_offset: global index of row 0 (a shard of a larger run draws what those rows draw).

    Class attributes a subclass may set: ``reset_noise`` (random numbers per reset row, default
    0) and ``default_max_episode_steps`` (default 1000).
    """

    metadata: ClassVar[dict] = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}
    supports_reset_mask = True
    reset_noise: ClassVar[int] = 0
    default_max_episode_steps: ClassVar[int | None] = 1000
    single_observation_space: gymnasium.Space
    single_action_space: gymnasium.Space

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = None,
        *,
        max_episode_steps: int | None = -1,
        seed: int | None = None,
        env_index_offset: int = 0,
    ) -> None:
        self.num_envs = as_int(num_envs, "num_envs", minimum=1)
        self.device = resolve_device(device)
        limit = self.default_max_episode_steps if max_episode_steps == -1 else max_episode_steps
        self.max_episode_steps = None if limit is None else as_int(limit, "max_episode_steps", minimum=1)
        self._seed = as_seed(seed)
        lanes = as_int(self.reset_noise, f"{type(self).__name__}.reset_noise", minimum=0)
        self._rng = CounterRNG(self.num_envs, max(1, lanes), self.device, self._seed, env_index_offset)
        self._unit = self._rng.bounds([0.0] * max(1, lanes), [1.0] * max(1, lanes))
        self._lanes = lanes
        self._elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._limit = torch.tensor(self.max_episode_steps or 0, dtype=torch.int64, device=self.device)
        self._all = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._host_checks = self.device.type == "cpu"  # reading a flag on the host costs no sync there
        self._needs_reset = True
        self._closed = False
        self.setup()
        for name in ("single_observation_space", "single_action_space"):
            if not isinstance(getattr(self, name, None), gymnasium.Space):
                raise InvalidArgumentError(
                    f"{type(self).__name__}.setup() must set self.{name} to a gymnasium space of one env, e.g. "
                    "gymnasium.spaces.Box(-1.0, 1.0, (3,))."
                )

    # ------------------------------------------------------- the task (subclasses)
    def setup(self) -> None:
        """Build the state tensors and the two spaces (called once by ``__init__``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement setup() (see gpu_envs.SimulatorEnv).")

    def physics_step(self, action: torch.Tensor) -> None:
        """Advance every row one control step with ``action`` ``[N, *act]``, in place."""
        raise NotImplementedError(f"{type(self).__name__} must implement physics_step(action).")

    def observe(self) -> torch.Tensor:
        """A NEW ``[N, *obs]`` tensor of every row's observation."""
        raise NotImplementedError(f"{type(self).__name__} must implement observe().")

    def reward(self) -> torch.Tensor:
        """``[N]`` float: the reward of the step just taken."""
        raise NotImplementedError(f"{type(self).__name__} must implement reward().")

    def terminated(self) -> torch.Tensor:
        """``[N]`` bool: rows whose episode ended by the task's own condition (not the time limit)."""
        raise NotImplementedError(f"{type(self).__name__} must implement terminated().")

    def reset_rows(self, rows: torch.Tensor, noise: torch.Tensor) -> None:
        """Reset the rows where ``rows`` (bool ``[N]``) is True from ``noise`` ``[N, reset_noise]``, and only them."""
        raise NotImplementedError(f"{type(self).__name__} must implement reset_rows(rows, noise).")

    def state(self) -> dict[str, torch.Tensor]:
        """The live state tensors by name, ``[N, ...]`` each (optional: snapshots and CUDA graphs need it)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no state(): implement it (the live state tensors by name, [N, ...] each) to "
            "snapshot rows or replay CUDA graphs."
        )

    # ----------------------------------------------------------- the env protocol
    @property
    def elapsed_steps(self) -> torch.Tensor:
        """``[N]`` int64: steps since each row's episode began (live)."""
        return self._elapsed

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Reset every row, or those of ``options["reset_mask"]`` (``[N]`` bool); return ``(obs, {})``."""
        self._check_open()
        if seed is None and self._needs_reset:
            seed = self._seed
        if seed is not None:
            self._rng.reseed(as_seed(seed))
        mask = None if options is None else options.get("reset_mask")
        if mask is None or self._needs_reset:
            mask = self._all
        else:
            mask = torch.as_tensor(mask, device=self.device).reshape(self.num_envs).to(torch.bool)
        self._reset_masked(mask)
        self._needs_reset = False
        return self.observe(), {}

    def step(self, action: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """One step of every row, with the same-step auto-reset; ``info["final_obs"]`` holds the TRUE final observations."""
        self._check_open()
        if self._needs_reset:
            raise ResetNeededError(f"call reset() before step() on {type(self).__name__}.")
        self.physics_step(action)
        self._elapsed.add_(1)
        final = self.observe()
        reward = self.reward().reshape(self.num_envs).to(torch.float32)
        terminated = self.terminated().reshape(self.num_envs).to(torch.bool)
        if self.max_episode_steps is None:
            truncated = torch.zeros_like(terminated)
        else:
            truncated = (self._elapsed >= self._limit) & ~terminated
        done = terminated | truncated
        if self._host_checks and not torch.compiler.is_compiling() and not bool(done.any()):
            # on the CPU reading the flags costs nothing: a step where no row ended skips the masked reset (a
            # no-op then; the random streams advance only for reset rows) and the second observation
            return final, reward, terminated, truncated, {"final_obs": final}
        self._reset_masked(done)
        return self.observe(), reward, terminated, truncated, {"final_obs": final}

    def _reset_masked(self, rows: torch.Tensor) -> None:
        noise = self._rng.uniform(self._unit)
        self.reset_rows(rows, noise if self._lanes else noise[:, :0])
        self._rng.advance(rows)
        self._elapsed.masked_fill_(rows, 0)

    # ------------------------------------------------------------------ state
    def live_state(self) -> dict[str, torch.Tensor]:
        """The user's :meth:`state` plus the step counts and the random streams (live: CUDA graphs replay them)."""
        state = dict(self.state())
        for reserved in ("elapsed_steps", "rng_key", "rng_counter"):
            if reserved in state:
                raise InvalidArgumentError(f"{type(self).__name__}.state() uses the reserved name {reserved!r}.")
        return {**state, "elapsed_steps": self._elapsed, "rng_key": self._rng.key, "rng_counter": self._rng.counter}

    def load_live_state(self, state: dict[str, torch.Tensor]) -> None:
        """Copy a :meth:`live_state` into the env's tensors (in place)."""
        copy_into(self.live_state(), state, type(self).__name__)
        self._rng.invalidate()
        self._needs_reset = False

    def get_state(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copies of ``rows``' state (the :class:`~gpu_envs.contract.protocols.RowStateEnv` protocol)."""
        return {name: value.index_select(0, rows) for name, value in self.live_state().items()}

    def set_state(self, state: Any, rows: torch.Tensor) -> None:
        """Write a :meth:`get_state` into ``rows``, in place."""
        mine = self.live_state()
        if set(state.keys()) != set(mine):
            raise InvalidArgumentError(
                f"{type(self).__name__}.set_state takes the entries {sorted(mine)} (a get_state()), got "
                f"{sorted(state.keys())}."
            )
        for name, target in mine.items():
            target.index_copy_(0, rows, state[name].to(self.device, target.dtype))
        self._rng.invalidate()

    # -------------------------------------------------------------- lifecycle
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedEnvError(f"{type(self).__name__} was closed; build a new one.")

    def close(self, **kwargs: Any) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"
