"""``to_gymnasium``: any gpu_envs env as a real ``gymnasium.vector.VectorEnv``.

For gymnasium-style training loops (CleanRL's) and gymnasium's vector wrappers
(``RecordEpisodeStatistics``, ``NormalizeObservation``, ``NormalizeReward``,
``ClipAction``, ``DictInfoToList``...): swap the env line and nothing else changes.

* ``arrays="numpy"``: observations, rewards and flags are numpy arrays on the host (one
  device -> host copy per step and leaf), as gymnasium's own vector envs return them;
  ``"torch"``: tensors on ``env.device``, not copied (for a torch learner on a GPU).
  Actions may be numpy arrays or tensors in both modes (a tensor on the env's device
  with the spec's dtype is used as it is). Host actions (numpy, lists, CPU tensors) are
  checked every step before the env moves -- count/shape, integer dtype for integer
  actions, ``Discrete``/``MultiDiscrete`` ranges, finite floats -- and refused with an
  :class:`~gpu_envs.contract.errors.ActionError` naming the rows and values
  (:class:`~gpu_envs.interop.conversions.HostActions`).
* ``autoreset_mode="next_step"`` (gymnasium's default, what CleanRL expects): a step
  where an episode ends returns its final observation and flags; the NEXT step returns
  a reset observation for that row, reward 0 and no flags, and ignores that row's
  action. The env below resets ended rows within the step, so here that row's step is
  discarded and the row reset again (``env.reset`` with a ``"_reset"`` mask): what the
  learner sees follows gymnasium exactly, and the env must accept masked resets.
* ``autoreset_mode="same_step"``: the step where an episode ends returns the reset
  observation, and ``info["final_obs"]`` / ``info["_final_obs"]`` hold the true final
  observations and the rows that have one, ``info["final_info"]`` /
  ``info["_final_info"]`` that step's info entries, as gymnasium's ``SyncVectorEnv``
  lays them out (numpy: an object array of per-row observations, ``None`` elsewhere;
  torch: the batched tensors, valid where the mask is True). Rows whose final
  observation the backend could not give (``("next", "final_obs_missing")``) are left
  out of ``_final_obs``.

Rewards are ``[N]``, or ``[N, K]`` for a multi-objective env (as mo-gymnasium's vector
envs give them). The env's info entries (``env.info_spec``, e.g. ``EpisodeStats``'
``episode_return``) appear in ``info`` with gymnasium's ``"_<key>"`` masks, on every
row (ended rows: the final step's, in ``final_info`` too). Reset infos are empty.

Example::

    >>> import gymnasium
    >>> import gpu_envs
    >>> envs = to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu"))   # was: gymnasium.make_vec(...)
    >>> envs = gymnasium.wrappers.vector.RecordEpisodeStatistics(envs)
    >>> obs, _ = envs.reset(seed=1)
    >>> obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
    >>> reward.shape, terminated.dtype
    ((8,), dtype('bool'))
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import AutoresetModeError, InvalidArgumentError, ResetMaskError, ResetNeededError
from gpu_envs.interop.conversions import (
    HostActions,
    Key,
    ObservationLayout,
    gym_action_spaces,
    host_copy,
    host_view,
    leaf,
    require_env,
    simulator_of,
)
from gpu_envs.utils.arguments import as_seed
from gpu_envs.utils.tensordicts import get_entry, new_td, set_entry

AutoresetMode = gymnasium.vector.AutoresetMode
MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP}
ARRAYS = ("numpy", "torch")


def to_gymnasium(
    env: Any, arrays: str = "numpy", autoreset_mode: str | AutoresetMode = "next_step"
) -> GymnasiumVectorEnv:
    """``env`` (a BatchedEnv or TransformedEnv) as a ``gymnasium.vector.VectorEnv``.

    Args:
        env: the gpu_envs env; closing the vector env closes it.
        arrays: ``"numpy"`` (host arrays, gymnasium's convention) or ``"torch"``
            (tensors on ``env.device``, no copies).
        autoreset_mode: ``"next_step"`` or ``"same_step"`` (or the ``AutoresetMode``),
            exposed as ``metadata["autoreset_mode"]`` (module docstring).

    Example::

        >>> import gpu_envs
        >>> envs = to_gymnasium(gpu_envs.make("Pendulum-v1", num_envs=16, device="cpu"), autoreset_mode="same_step")
        >>> envs.metadata["autoreset_mode"]
        <AutoresetMode.SAME_STEP: 'SameStep'>
    """
    return GymnasiumVectorEnv(env, arrays=arrays, autoreset_mode=autoreset_mode)


def parse_autoreset_mode(mode: str | AutoresetMode) -> AutoresetMode:
    """``"next_step"`` / ``"same_step"`` (any case, or the enum) -> the ``AutoresetMode``."""
    if isinstance(mode, AutoresetMode):
        found = mode
    else:
        text = str(mode).replace("_", "").lower()
        found = next((m for m in AutoresetMode if text in (m.value.lower(), m.name.replace("_", "").lower())), None)
    if found is None or found not in MODES.values():
        raise AutoresetModeError(
            f"autoreset_mode={mode!r} is not available: choose 'next_step' (gymnasium's default) or 'same_step'. "
            "gpu_envs envs reset ended rows themselves, so there is no DISABLED mode."
        )
    return found


def can_reset_rows(env: Any) -> bool:
    """Whether ``env.reset`` accepts a ``"_reset"`` mask of some rows (NEXT_STEP needs it)."""
    backend = getattr(env, "backend", None)
    capabilities = getattr(backend, "capabilities", None)
    return True if capabilities is None else capabilities.partial_reset


def nest_info(entries: dict[Key, Any], mask: Any) -> dict[str, Any]:
    """Info entries keyed by TensorDict keys -> gymnasium's nested dict with ``"_<key>"`` masks."""
    out: dict[str, Any] = {}
    for key, value in entries.items():
        path = key if isinstance(key, tuple) else (key,)
        node = out
        for part in path[:-1]:
            node[f"_{part}"] = mask
            node = node.setdefault(part, {})
        node[path[-1]] = value
        node[f"_{path[-1]}"] = mask
    return out


class GymnasiumVectorEnv(gymnasium.vector.VectorEnv):
    """A gpu_envs env behind gymnasium's ``VectorEnv`` API; build it with :func:`to_gymnasium`.

    Attributes:
        env: the wrapped gpu_envs env.
        unwrapped: the simulator behind it (the built-in env, the Isaac Lab env, ...: what
            every adapter's ``unwrapped`` is, :func:`~gpu_envs.interop.conversions.simulator_of`).
        device: ``env.device``.
        arrays: ``"numpy"`` or ``"torch"``.
    """

    def __init__(
        self,
        env: Any,
        *,
        arrays: str = "numpy",
        autoreset_mode: str | AutoresetMode = "next_step",
        caller: str = "to_gymnasium",
    ) -> None:
        """``caller`` is the call the user made, named in every error (``make_vec('gpu_envs/<id>')``)."""
        require_env(env, caller)
        if arrays not in ARRAYS:
            raise InvalidArgumentError(f"arrays must be 'numpy' or 'torch', got {arrays!r}.")
        mode = parse_autoreset_mode(autoreset_mode)
        if mode == AutoresetMode.NEXT_STEP and not can_reset_rows(env):
            raise AutoresetModeError(
                f"autoreset_mode='next_step' resets single rows after their episodes end, but {env!r} cannot reset a "
                "subset of its envs. Use to_gymnasium(env, autoreset_mode='same_step') (final observations in "
                "info['final_obs'])."
            )
        self.env = env
        self.arrays = arrays
        self.num_envs = env.num_envs
        self.device = env.device
        self.metadata = {"autoreset_mode": mode, "render_modes": []}
        self.autoreset_mode = mode  # as gymnasium's own vector envs have it (torchrl's GymWrapper reads it)
        self._layout = ObservationLayout(env.single_observation_spec, env.observation_spec)
        self.single_observation_space = self._layout.single_space
        self.observation_space = self._layout.batched_space
        self.single_action_space, self.action_space = gym_action_spaces(env)
        self._actions = HostActions(env, caller)
        self._numpy = arrays == "numpy"
        self._host = self.device.type == "cpu"  # where reading a mask costs no device sync
        self._next_step = mode == AutoresetMode.NEXT_STEP
        self._batch_size = torch.Size([self.num_envs])
        # a scalar reward is [N]; a vector one (multi-objective envs) stays [N, K], as mo-gymnasium gives it
        reward_spec = getattr(env, "single_reward_spec", None)
        per_env = (1,) if reward_spec is None else tuple(reward_spec.shape)
        self._reward_shape = (self.num_envs,) if per_env in ((), (1,)) else (self.num_envs, *per_env)
        # each leaf's [N, 1, ...] shape, for a row mask that broadcasts over it
        ranks = {key: len(env.observation_spec[key].shape) for key in self._layout.keys}
        ranks["reward"] = len(self._reward_shape)
        self._row_shapes = {key: (self.num_envs,) + (1,) * (rank - 1) for key, rank in ranks.items()}
        self._root: TensorDictBase | None = None
        self._info_keys: list[Key] | None = None  # read after the first step (backends may add keys then)
        n, device = self.num_envs, self.device
        # NEXT_STEP: rows whose episode ended on the last step, on the device and (numpy) on the host
        self._no_rows = torch.zeros(n, dtype=torch.bool, device=device)
        self._pending = self._no_rows
        self._pending_host = np.zeros(n, dtype=bool)
        self._all_rows = torch.ones(n, dtype=torch.bool, device=device)  # torch info masks (read-only)

    @property
    def unwrapped(self) -> Any:
        """The simulator behind the gpu_envs env (the built-in env, the Isaac Lab or mjlab env, ...)."""
        return simulator_of(self.env)

    @property
    def spec(self) -> Any:
        """This env's gymnasium ``EnvSpec`` (``gymnasium.make_vec`` sets it on ``unwrapped``), or None."""
        own = self.__dict__.get("_spec")
        return own if own is not None else getattr(self.unwrapped, "spec", None)

    @spec.setter
    def spec(self, value: Any) -> None:
        self.__dict__["_spec"] = value

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every row, or the rows of ``options["reset_mask"]`` (``[N]`` bool); returns ``(obs, {})``."""
        if isinstance(seed, (list, tuple, np.ndarray)):
            raise InvalidArgumentError(
                f"seed must be one int (gpu_envs seeds the whole batch from it) or None; got {seed!r}."
            )
        seed = as_seed(seed)  # an int >= 0, numpy ints included, on every backend alike
        super().reset(seed=seed)
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise InvalidArgumentError(
                f"reset options {sorted(options)} are not supported: gpu_envs envs take only 'reset_mask'. "
                "Pass per-env settings when building the env (gpu_envs.make(..., **kwargs))."
            )
        if mask is None or self._root is None or getattr(self.env, "interrupted", False):
            # (after an interrupted step the env resets every row: the adapter forgets its pending ones too)
            root = self.env.reset(seed=seed)
            self._pending, self._pending_host = self._no_rows, np.zeros(self.num_envs, dtype=bool)
        else:
            rows = self._reset_mask(mask)
            root = self.env.reset(seed=seed, td=new_td({"_reset": rows}, self._batch_size, self.device))
            self._pending = self._pending & ~rows
            self._pending_host = self._pending_host & ~rows.cpu().numpy()
        self._root = root
        return self._layout.build(self._leaf_reader(root)), {}

    def _reset_mask(self, mask: Any) -> torch.Tensor:
        rows = torch.as_tensor(mask, device=self.device)
        if rows.dtype != torch.bool or tuple(rows.shape) != (self.num_envs,):
            raise ResetMaskError(
                f"options['reset_mask'] must be a bool array of shape ({self.num_envs},); got {rows.dtype} "
                f"{tuple(rows.shape)}. Build it like np.zeros({self.num_envs}, dtype=bool)."
            )
        return rows

    # ------------------------------------------------------------------- step
    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """One step of every row: ``(obs, reward, terminated, truncated, info)``, gymnasium's layout.

        The actions are checked first (count, dtype, index ranges, finite values:
        :class:`~gpu_envs.interop.conversions.HostActions`); a refused batch raises
        :class:`~gpu_envs.contract.errors.ActionError` and leaves the env as it was.
        """
        td = self._root
        if td is None:
            raise ResetNeededError(
                "step() was called before reset(): call envs.reset() first, as with any gymnasium vector env."
            )
        set_entry(td, "action", self._actions(actions))
        td, root = self.env.step_and_maybe_reset(td)
        nxt = get_entry(td, "next")
        if self._info_keys is None:
            spec = getattr(self.env, "single_info_spec", None)
            self._info_keys = [] if spec is None else list(spec.keys(include_nested=True, leaves_only=True))
        if self._numpy:
            return self._numpy_next_step(nxt, root) if self._next_step else self._numpy_same_step(nxt, root)
        return self._torch_next_step(nxt, root) if self._next_step else self._torch_same_step(nxt, root)

    def _numpy_next_step(self, nxt: TensorDictBase, root: TensorDictBase) -> tuple:
        """NEXT_STEP on host arrays: the step's results copied once, the rows that ended last step fixed in numpy."""
        n = self.num_envs
        leaves = {key: host_copy(leaf(nxt, key)) for key in self._layout.keys}
        reward = host_copy(get_entry(nxt, "reward")).reshape(self._reward_shape)
        terminated = host_copy(get_entry(nxt, "terminated")).reshape(n)
        truncated = host_copy(get_entry(nxt, "truncated")).reshape(n)
        pending = self._pending_host
        if np.count_nonzero(pending):
            # rows that ended last step: their step just now is discarded and they start afresh
            root = self.env.reset(td=self._rows_td(pending))
            for key, values in leaves.items():
                np.copyto(values, host_view(leaf(root, key)), where=pending.reshape(self._row_shapes[key]))
            np.copyto(reward, 0.0, where=pending.reshape(self._row_shapes["reward"]))
            terminated &= ~pending
            truncated &= ~pending
        self._root = root
        self._pending_host = terminated | truncated
        info = nest_info(self._info_entries(nxt), ~pending) if self._info_keys else {}
        return self._layout.build(leaves.__getitem__), reward, terminated, truncated, info

    def _torch_next_step(self, nxt: TensorDictBase, root: TensorDictBase) -> tuple:
        """NEXT_STEP on device tensors: the same rule with device masks (no host sync to find the rows)."""
        pending = self._pending
        n = self.num_envs
        if self._host and not bool(pending.any()):
            # on the CPU, reading the mask costs no sync: a step with no row to restart is the step itself
            self._root = root
            terminated, truncated = get_entry(nxt, "terminated").view(n), get_entry(nxt, "truncated").view(n)
            self._pending = terminated | truncated
            info = nest_info(self._info_entries(nxt), self._all_rows) if self._info_keys else {}
            obs = self._layout.build(lambda key: leaf(nxt, key))
            return obs, get_entry(nxt, "reward").view(self._reward_shape), terminated, truncated, info
        # rows that ended last step: their step just now is discarded and they start afresh
        # (a no-op for an all-False mask, so no host sync is needed to decide)
        root = self.env.reset(td=new_td({"_reset": pending}, self._batch_size, self.device))
        self._root = root

        def observation(key: Key) -> Any:
            stepped = leaf(nxt, key)
            return torch.where(pending.view((n,) + (1,) * (stepped.dim() - 1)), leaf(root, key), stepped)

        obs = self._layout.build(observation)
        reward = get_entry(nxt, "reward").view(self._reward_shape)
        reward = reward.masked_fill(pending.view((n,) + (1,) * (reward.dim() - 1)), 0.0)
        stepped_rows = ~pending
        terminated = get_entry(nxt, "terminated").view(n) & stepped_rows
        truncated = get_entry(nxt, "truncated").view(n) & stepped_rows
        self._pending = terminated | truncated
        info = nest_info(self._info_entries(nxt), stepped_rows) if self._info_keys else {}
        return obs, reward, terminated, truncated, info

    def _rows_td(self, rows: np.ndarray) -> TensorDictBase:
        """A ``{"_reset": rows}`` TensorDict on the env's device for a host mask."""
        mask = torch.from_numpy(rows)
        return new_td(
            {"_reset": mask if self.device.type == "cpu" else mask.to(self.device)}, self._batch_size, self.device
        )

    def _numpy_same_step(self, nxt: TensorDictBase, root: TensorDictBase) -> tuple:
        self._root = root
        n = self.num_envs
        obs = self._layout.build(lambda key: host_copy(leaf(root, key)))
        reward = host_copy(get_entry(nxt, "reward")).reshape(self._reward_shape)
        terminated = host_copy(get_entry(nxt, "terminated")).reshape(n)
        truncated = host_copy(get_entry(nxt, "truncated")).reshape(n)
        entries = self._info_entries(nxt) if self._info_keys else {}
        info = nest_info(entries, np.ones(n, dtype=bool)) if entries else {}
        done = terminated | truncated
        if done.any():  # gymnasium adds these only on steps where some row ended
            missing = get_entry(nxt, "final_obs_missing")
            valid = done if missing is None else done & ~host_view(missing).reshape(n)
            final = {key: host_copy(leaf(nxt, key)) for key in self._layout.keys}
            rows = np.full(n, None, dtype=object)
            for i in np.flatnonzero(valid).tolist():
                rows[i] = self._layout.build(lambda key, i=i: final[key][i])
            info["final_obs"], info["_final_obs"] = rows, valid
            info["final_info"], info["_final_info"] = nest_info(entries, done), done
        return obs, reward, terminated, truncated, info

    def _torch_same_step(self, nxt: TensorDictBase, root: TensorDictBase) -> tuple:
        self._root = root
        n = self.num_envs
        obs = self._layout.build(root.get)
        reward = get_entry(nxt, "reward").view(self._reward_shape)
        terminated = get_entry(nxt, "terminated").view(n)
        truncated = get_entry(nxt, "truncated").view(n)
        missing = get_entry(nxt, "final_obs_missing")
        entries = self._info_entries(nxt) if self._info_keys else {}
        info = nest_info(entries, self._all_rows) if entries else {}
        done = terminated | truncated
        info["final_obs"] = self._layout.build(nxt.get)
        info["_final_obs"] = done if missing is None else done & ~missing.view(n)
        info["final_info"] = nest_info(entries, done)
        info["_final_info"] = done
        return obs, reward, terminated, truncated, info

    def _info_entries(self, nxt: TensorDictBase) -> dict[Key, Any]:
        if self._numpy:
            return {key: host_copy(leaf(nxt, key)) for key in self._info_keys or ()}
        return {key: leaf(nxt, key) for key in self._info_keys or ()}

    def _leaf_reader(self, td: TensorDictBase) -> Any:
        if self._numpy:
            return lambda key: host_copy(td[key])
        return td.get

    # -------------------------------------------------------------- lifecycle
    def close_extras(self, **kwargs: Any) -> None:
        """Close the wrapped gpu_envs env (``close()`` calls this once)."""
        self.env.close()

    def __repr__(self) -> str:
        mode = self.metadata.get("autoreset_mode")
        return f"GymnasiumVectorEnv({getattr(self, 'env', None)!r}, arrays={getattr(self, 'arrays', None)!r}, autoreset_mode={mode})"
