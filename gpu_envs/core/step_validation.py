"""What the step path checks, and the errors that explain a failed check.

Two kinds of input meet :class:`~gpu_envs.core.step_path.StepPath`: the learner's
action, and the backend's outputs. :class:`StepValidator` holds every check of both, each
as one method the path binds where it applies (:mod:`gpu_envs.core.step_path`):

* the action's metadata (type, shape, dtype, device) on every step -- the path compares
  them inline and calls :meth:`StepValidator.action` only to raise the explanation;
  its values (:meth:`StepValidator.action_values`: Discrete ranges on the first step, every
  range and non-finite Box values with ``validate``), which cost one host sync;
* the backend's outputs: everything on the first step (:meth:`StepValidator.raw_step`:
  types, shapes, dtypes, devices of the one :class:`~gpu_envs.backends.base.RawStep`
  shape) and on every reset (:meth:`StepValidator.observations`); metadata only on the
  later steps of backends that hand on tensors someone else made
  (:meth:`StepValidator.outputs`, no host sync).

Example::

    checks = StepValidator(backend, specs, device)
    checks.raw_step(backend.step(action))   # BackendError naming the field and the fix
"""

from __future__ import annotations

from typing import Any

import torch

from gpu_envs.backends.base import Backend
from gpu_envs.contract.errors import ActionError, BackendError
from gpu_envs.contract.specs import Box, Composite, Spec

__all__ = ["StepValidator"]

_FLAGS = ("terminated", "truncated", "done")


class StepValidator:
    """The checks of one env's actions and backend outputs (module docstring).

    Args:
        backend: the backend whose outputs are checked (named in messages).
        action_spec: the batched action spec; single_action_spec: one env's (messages).
        observation_spec: one env's observation Composite; reward_shape: ``[N, 1]`` or ``[N, K]``.
        num_envs, device: the batch size and the env's device.
    """

    def __init__(
        self,
        backend: Backend,
        action_spec: Spec,
        single_action_spec: Spec,
        observation_spec: Any,
        reward_shape: torch.Size,
        num_envs: int,
        device: torch.device,
    ) -> None:
        self.backend = backend
        self.action_spec = action_spec
        self.single_action_spec = single_action_spec
        self.action_shape = action_spec.shape
        self.action_dtype = action_spec.dtype
        # an env of agent groups: one action entry per group, (group, "action") [N, A, *act] (gpu_envs.contract.groups)
        self.action_leaves: dict[Any, Spec] | None = (
            dict(action_spec.items(include_nested=True, leaves_only=True))
            if isinstance(action_spec, Composite)
            else None
        )
        self.reward_shape = tuple(reward_shape)
        self._reward_size = torch.Size(reward_shape)
        self._flag_size = torch.Size((num_envs, 1))
        self.num_envs = num_envs
        self.device = device
        self.box = isinstance(action_spec, Box)
        # the group action specs (held above) whose bounds are all finite: a value inside them is finite too
        self._finite_boxes = {
            id(spec)
            for spec in (self.action_leaves or {}).values()
            if isinstance(spec, Box) and bool(torch.isfinite(spec.low).all() and torch.isfinite(spec.high).all())
        }
        self.obs_meta = {
            key: (torch.Size((num_envs, *leaf.shape)), leaf.dtype)
            for key, leaf in observation_spec.items(include_nested=True, leaves_only=True)
        }

    # ------------------------------------------------------------------ action
    def action(self, action: Any) -> None:
        """The full metadata check (the hot path only compares the exact type, shape, dtype, device)."""
        if self.action_leaves is not None:
            self.group_actions(action)
            return
        if (
            not isinstance(action, torch.Tensor)
            or action.shape != self.action_shape
            or action.dtype != self.action_dtype
            or action.device != self.device
        ):
            raise ActionError(self._explain_action(action))

    def group_actions(self, actions: Any) -> None:
        """An env of agent groups: ``actions`` is ``{(group, "action"): tensor}``, each leaf checked as one action."""
        leaves = self.action_leaves or {}
        for key, spec in leaves.items():
            value = actions.get(key) if isinstance(actions, dict) else None
            want = f"shape {tuple(spec.shape)}, dtype {spec.dtype}, device {self.device}"
            if value is None:
                raise ActionError(
                    f"td has no {key!r} entry: this env's agents act in groups, so every group's action goes to "
                    f"td[{', '.join(map(repr, key)) if isinstance(key, tuple) else repr(key)}] ({want}); draw all of "
                    "them with td.update(env.full_action_spec.rand())."
                )
            if not isinstance(value, torch.Tensor) or value.shape != spec.shape or value.dtype != spec.dtype:
                got = f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
                raise ActionError(f"the action {key!r} is {got}; this env expects {want}.")
            if value.device != self.device:
                raise ActionError(
                    f"the action {key!r} is on {value.device} but the env runs on {self.device}: move it with "
                    f".to('{self.device}')."
                )

    def action_values(self, action: torch.Tensor) -> None:
        """Values in the spec's range (and finite, for a Box); one host sync."""
        if self.action_leaves is not None:
            for key, spec in self.action_leaves.items():
                self.leaf_values(action[key], spec, f"the action {key!r}")  # type: ignore[index]  # a group env's dict
            return
        if self.box and action.dtype.is_floating_point and not bool(torch.isfinite(action).all()):
            bad = int((~torch.isfinite(action)).sum())
            raise ActionError(
                f"the action holds {bad} non-finite value(s) (NaN or inf); {self.single_action_spec!r} needs finite "
                "values. Check the policy's outputs (a NaN loss, a diverged network)."
            )
        if not self.action_spec.contains(action):
            raise ActionError(
                f"action values are outside {self.single_action_spec!r} "
                f"(min {action.min().item()}, max {action.max().item()}). "
                "Sample actions from env.action_spec, or clamp them to its range (e.g. the ClipAction transform)."
            )

    def leaf_values(self, action: torch.Tensor, spec: Spec, what: str) -> None:
        """One action tensor's values against ``spec`` (batched): finite for a Box, in range; one host sync."""
        if spec.contains(action) and (not action.dtype.is_floating_point or id(spec) in self._finite_boxes):
            return  # inside finite bounds: finite too (NaN fails every comparison), so one check did both
        single = spec.unbatched()
        if isinstance(spec, Box) and action.dtype.is_floating_point and not bool(torch.isfinite(action).all()):
            bad = int((~torch.isfinite(action)).sum())
            raise ActionError(
                f"{what} holds {bad} non-finite value(s) (NaN or inf); {single!r} needs finite "
                "values. Check the policy's outputs (a NaN loss, a diverged network)."
            )
        if not spec.contains(action):
            raise ActionError(
                f"{what} values are outside {single!r} "
                f"(min {action.min().item()}, max {action.max().item()}). "
                "Sample actions from env.action_spec, or clamp them to its range (e.g. the ClipAction transform)."
            )

    def _explain_action(self, action: Any) -> str:
        want = f"shape {tuple(self.action_shape)}, dtype {self.action_dtype}, device {self.device}"
        if action is None:
            return f'td has no "action" entry: set td["action"] to a tensor with {want} (e.g. env.action_spec.rand()).'
        if not isinstance(action, torch.Tensor):
            return f"action must be a torch.Tensor with {want}; got {type(action).__name__}."
        if action.shape != self.action_shape:
            hint = ""
            if action.shape == self.action_shape + (1,):
                hint = " Drop the trailing dim with action.squeeze(-1)."
            elif action.shape + (1,) == self.action_shape:
                hint = " Add the trailing dim with action.unsqueeze(-1)."
            return f"action has shape {tuple(action.shape)} but the env expects {tuple(self.action_shape)}.{hint}"
        if action.dtype != self.action_dtype:
            return f"action has dtype {action.dtype} but the env expects {self.action_dtype}: cast it with action.to({self.action_dtype})."
        return (
            f"action is on {action.device} but the env runs on {self.device}: move it with action.to('{self.device}')."
        )

    # --------------------------------------------------------------- outputs
    def raw_step(self, raw: Any) -> None:
        """Validate a step's outputs fully (the first step): the one RawStep shape, field by field."""
        describe = self.backend.describe()
        if not isinstance(raw, tuple) or len(raw) != 8:
            raise BackendError(
                f"{describe}'s step returned a {type(raw).__name__}; a backend returns a "
                "gpu_envs.backends.base.RawStep (built with keywords: obs, reward, terminated, truncated, done, "
                "final_obs, final_mask, info)."
            )
        n = self.num_envs
        for name, value, want in (
            ("reward", raw[1], self.reward_shape),
            ("terminated", raw[2], (n, 1)),
            ("truncated", raw[3], (n, 1)),
            ("done", raw[4], (n, 1)),
        ):
            if not isinstance(value, torch.Tensor):
                raise BackendError(
                    f"{describe} returned {name} as a {type(value).__module__}.{type(value).__name__}, not a "
                    f"torch.Tensor; expected shape {want} on {self.device}. Return torch tensors (e.g. "
                    f"torch.as_tensor(x, device='{self.device}')), or wrap a numpy env as a gymnasium VectorEnv."
                )
            if tuple(value.shape) != want or value.device != self.device:
                hint = " (backends.common.flag_columns turns flat [N] values into columns)" if value.dim() == 1 else ""
                raise BackendError(
                    f"{describe} returned {name} {tuple(value.shape)} on {value.device}; expected shape {want} on "
                    f"{self.device}{hint}."
                )
            want_dtype = torch.float32 if name == "reward" else torch.bool
            if value.dtype != want_dtype:
                raise BackendError(f"{describe} returned {name} of dtype {value.dtype}; expected {want_dtype}.")
        self.observations("step", raw[0])
        final_obs, final_mask = raw[5], raw[6]
        if final_obs is not None:
            self.observations("step", final_obs, "final observation")
        if final_mask is not None and (
            not isinstance(final_mask, torch.Tensor)
            or final_mask.dtype != torch.bool
            or tuple(final_mask.shape) not in ((n,), (n, 1))
            or final_mask.device != self.device
        ):
            got = (
                f"{tuple(final_mask.shape)} {final_mask.dtype}"
                if isinstance(final_mask, torch.Tensor)
                else type(final_mask).__name__
            )
            raise BackendError(
                f"{describe} returned final_mask {got}; expected None (final_obs valid on every row) or a bool "
                f"tensor of shape ({n},) or ({n}, 1) on {self.device} (the rows where final_obs is valid)."
            )
        if final_mask is not None and final_obs is None:
            raise BackendError(f"{describe} returned a final_mask without final_obs; pass final_mask=None.")
        if not isinstance(raw[7], dict):
            raise BackendError(
                f"{describe} returned info as a {type(raw[7]).__name__}; expected a dict (NO_INFO when none)."
            )

    def observations(self, call: str, obs: Any, what: str = "observation") -> None:
        """Observations of ``call`` against the spec: the keys, and each one's type, shape, dtype and device."""
        describe = self.backend.describe()
        if not isinstance(obs, dict):
            raise BackendError(
                f"{describe}'s {call} returned {type(obs).__name__} {what}s; expected a dict of tensors."
            )
        if obs.keys() != self.obs_meta.keys():
            raise BackendError(
                f"{describe}'s {call} returned {what} keys {sorted(map(str, obs))}; its observation spec "
                f"declares {sorted(map(str, self.obs_meta))}."
            )
        for key, value in obs.items():
            shape, dtype = self.obs_meta[key]
            if not isinstance(value, torch.Tensor):
                raise BackendError(
                    f"{describe}'s {call} returned the {what} {key!r} as a {type(value).__name__}; "
                    f"expected a torch.Tensor of shape {tuple(shape)}, {dtype} on {self.device}. Return tensors "
                    "(or arrays with __dlpack__) from the env."
                )
            if value.shape != shape or value.dtype != dtype or value.device != self.device:
                raise BackendError(
                    f"{describe}'s {call} returned the {what} {key!r} with shape {tuple(value.shape)}, "
                    f"{value.dtype} on {value.device}; its spec says {tuple(shape)}, {dtype} on {self.device}. Make the "
                    "env's outputs match its single_observation_space (and num_envs), on every call."
                )

    def outputs(self, raw: tuple) -> None:
        """Every step after the first, for backends handing on tensors they did not make: metadata only.

        A changed shape could broadcast silently in the final-observation rule, a changed
        dtype would promote; flags that are not ``[N, 1]`` bool would corrupt the
        transition. No value is read: no host sync.
        """
        meta = self.obs_meta
        try:
            obs, reward, terminated, truncated, done, final_obs, _, _ = raw
            for key, value in obs.items():
                shape, dtype = meta[key]
                if value.shape != shape or value.dtype is not dtype:
                    raise ValueError(key)
            if final_obs is not None:
                for key, value in final_obs.items():
                    shape, dtype = meta[key]
                    if value.shape != shape or value.dtype is not dtype:
                        raise ValueError(key)
            flag_size = self._flag_size
            for flag in (terminated, truncated, done):
                if flag.dtype is not torch.bool or flag.shape != flag_size:
                    raise ValueError("flags")
            if reward.dtype is not torch.float32 or reward.shape != self._reward_size:
                raise ValueError("reward")
        except (AttributeError, KeyError, TypeError, ValueError):
            self.raw_step(raw)  # says exactly what changed
            raise BackendError(f"{self.backend.describe()} changed its step outputs after the first step.") from None
