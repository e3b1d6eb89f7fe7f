"""What every adapter does at its boundary with another library.

* :func:`require_env`: the object has the BatchedEnv API (``make``/``wrap``'s result, or a
  ``TransformedEnv``), else a clear error;
* :class:`ObservationLayout`: a TensorDict's observation keys as the value a gymnasium
  space describes (one array for a lone ``"observation"`` key, else a dict, nested, or a
  tuple, mirroring the observation Composite), and those spaces;
* :func:`host_copy`: one device -> host copy of a tensor as a numpy array the caller owns
  (:func:`host_view`: the values to read, without a copy on the CPU); :func:`leaf`: a
  TensorDict entry by str or tuple key, the cheapest way;
* :func:`action_tensor`: numpy (or torch, on any device) actions as a tensor of the
  action spec's dtype on the env's device, passing through what already is one;
  :func:`reshaped_action_tensor` first takes them in any shape with the right number of
  values (skrl's ``[N, 1]`` for a ``[N]`` spec), refusing other counts by name;
* :class:`HostActions`: the same for the numpy-facing adapters (``to_gymnasium``,
  ``to_sb3``), which also check the VALUES on the host every step, where it costs a
  reduction or two over a few numbers and no device sync: an index outside a
  ``Discrete``/``MultiDiscrete``/``Binary`` range, a NaN or inf in a float action, a
  wrong action count or dtype raise :class:`~gpu_envs.contract.errors.ActionError`
  naming the rows, the values and the fix, before the env moves.

Example::

    layout = ObservationLayout(env.single_observation_spec)
    obs = layout.build(lambda key: host_copy(root[key]))      # numpy, gymnasium's layout
    td["action"] = action_tensor(actions, env.action_spec, env.device)
    td["action"] = HostActions(env, "to_gymnasium")(np.array([0, 1, 1, 0]))   # values checked
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import gymnasium
import numpy as np
import torch

from gpu_envs.contract.errors import ActionError, InvalidArgumentError, NotAnEnvError
from gpu_envs.contract.protocols import require_env_api
from gpu_envs.contract.specs import Binary, Box, Composite, Discrete, MultiDiscrete, Spec, numpy_dtype
from gpu_envs.utils.arrays import any_to_torch
from gpu_envs.utils.devices import same_device
from gpu_envs.utils.tensordicts import get_entry

Key = str | tuple[str, ...]


def require_env(env: Any, consumer: str, *, groups: bool = False) -> None:
    """Refuse anything without the BatchedEnv API, naming what to build instead.

    An env of agent groups (``env.group_map``) is refused too unless the consumer takes
    groups (``groups=True``: ``to_torchrl``, ``to_skrl``): single-agent trainers have one
    action and one reward per env, and no honest way to get them from several agents.
    """
    require_env_api(env, consumer, NotAnEnvError, f" Wrap it first: {consumer}(gpu_envs.wrap(your_env)).")
    group_map = getattr(env, "group_map", None)
    if group_map and not groups:
        raise InvalidArgumentError(
            f"{consumer} takes single-agent envs, but this env's agents act in groups {dict(group_map)} (one action "
            "and one reward per agent). Train it through to_torchrl(env) (torchrl's multi-agent layout: MAPPO/IPPO "
            "with MultiAgentMLP, see examples/mappo_vmas.py) or to_skrl(env) (skrl's MAPPO/IPPO, "
            "examples/mappo_skrl.py); to treat all agents as one, build a single-agent env whose action is every "
            "agent's."
        )


def simulator_of(env: Any) -> Any:
    """The simulator object behind a gpu_envs env: what an adapter's ``unwrapped`` is.

    The innermost env the backend drives (``.unwrapped`` of it where it has one): the
    Isaac Lab or mjlab env (trainers' runners read ``env.unwrapped.common_step_counter``,
    ``.cfg``, ...), the built-in torch env, the gymnasium vector env, the EnvPool pool.
    The gpu_envs env itself when its backend names no simulator.

    Example::

        >>> import gpu_envs
        >>> type(simulator_of(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu"))).__name__
        'CartPoleEnv'
    """
    backend = getattr(env, "backend", None)
    for name in ("base", "env", "pool"):
        sim = getattr(backend, name, None)
        if sim is not None:
            break
    else:
        return env
    try:
        unwrapped = sim.unwrapped
    except Exception:  # a half-built or closed simulator: the object itself
        return sim
    return sim if unwrapped is None else unwrapped


class ObservationLayout:
    """How an env's observation keys become the value its gymnasium space describes.

    A lone ``"observation"`` key is one array (a ``Box`` space); several keys (Isaac Lab's
    ``"policy"``/``"critic"`` groups, a gymnasium ``Dict``) are a dict, nested like the
    Composite, or a tuple for a ``tuple_like`` one.

    Attributes:
        keys: the TensorDict keys of the observation leaves.
        single_space: one env's gymnasium space; ``batched_space`` the whole batch's.
    """

    def __init__(self, single_spec: Composite, batched_spec: Composite) -> None:
        self.spec = single_spec
        self.keys: list[Key] = list(single_spec.keys(include_nested=True, leaves_only=True))
        self.lone = self.keys == ["observation"]
        self.single_space = (single_spec["observation"] if self.lone else single_spec).to_gym()
        self.batched_space = (batched_spec["observation"] if self.lone else batched_spec).to_gym()

    def build(self, leaf: Callable[[Key], Any]) -> Any:
        """The observation value, with ``leaf(key)`` at each leaf (an array, or one row of one)."""
        if self.lone:
            return leaf("observation")
        return self._node(self.spec, (), leaf)

    def _node(self, spec: Composite, prefix: tuple[str, ...], leaf: Callable[[Key], Any]) -> Any:
        items = {}
        # the top-level keys of a Composite (items() without include_nested) are str
        for name, child in cast("list[tuple[str, Spec]]", spec.items()):
            path = (*prefix, name)
            if isinstance(child, Composite):
                items[name] = self._node(child, path, leaf)
            else:
                items[name] = leaf(path if prefix else name)
        if spec.tuple_like:
            return tuple(items[str(i)] for i in range(len(items)))
        return items


def host_copy(tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` copied once to the host, as a numpy array the caller may keep or modify."""
    if tensor.is_cpu:
        return (tensor.detach() if tensor.requires_grad else tensor).numpy().copy()
    return tensor.detach().cpu().numpy()


def host_view(tensor: torch.Tensor) -> np.ndarray:
    """``tensor``'s values as a numpy array to READ: its own memory on the CPU (no copy), a copy from elsewhere."""
    if tensor.is_cpu:
        return (tensor.detach() if tensor.requires_grad else tensor).numpy()
    return tensor.detach().cpu().numpy()


def leaf(td: Any, key: Key) -> Any:
    """``td``'s entry at ``key`` (a str or a nested tuple key), None if absent; the cheapest lookup for a str."""
    return get_entry(td, key) if type(key) is str else td.get(key, None)


def action_tensor(actions: Any, spec: Spec, device: torch.device) -> torch.Tensor:
    """``actions`` as a tensor on ``device`` with ``spec``'s dtype (within the same kind).

    A tensor already on ``device`` with the spec's dtype passes through (no copy, no
    sync). Numpy arrays (``action_space.sample()``, a learner's ``.cpu().numpy()``),
    lists, and tensors elsewhere are copied to ``device`` once. Floats become the spec's
    float dtype and integers its integer dtype (``np.float64`` torques, ``np.int32``
    indices); a float action for an integer spec is left as it is, so the env's own
    check names the dtype mismatch instead of truncating values silently.
    """
    tensor = any_to_torch(actions)
    if tensor.shape != spec.shape:
        raise ActionError(
            f"the actions have shape {tuple(tensor.shape)}; this env takes {tuple(spec.shape)} (one action per env, "
            "as its action_space says)."
        )
    dtype = spec.dtype
    if dtype is None:
        raise ActionError(
            f"this env's action spec {spec!r} has no single dtype (a Composite): its actions are not one tensor."
        )
    if tensor.dtype != dtype and tensor.dtype.is_floating_point == dtype.is_floating_point:
        tensor = tensor.to(dtype)
    if not same_device(tensor.device, device):
        tensor = tensor.to(device)
    return tensor


def reshaped_action_tensor(actions: Any, spec: Spec, device: torch.device) -> torch.Tensor:
    """:func:`action_tensor` of ``actions`` reshaped to ``spec``'s shape (no copy for a contiguous tensor).

    For libraries whose policies emit actions in their own layout (skrl's ``[N, 1]``
    columns, rsl_rl's ``[N, num_actions]``): the number of values must match, else an
    :class:`~gpu_envs.contract.errors.ActionError` names both shapes instead of a reshape failing
    inside the adapter.
    """
    tensor = any_to_torch(actions)
    if tensor.numel() != spec.shape.numel():
        raise ActionError(
            f"the actions have shape {tuple(tensor.shape)} ({tensor.numel()} values); this env takes "
            f"{tuple(spec.shape)} ({spec.shape.numel()} values: one action per env, as its action_space says)."
        )
    return action_tensor(tensor.reshape(spec.shape), spec, device)


def gym_action_spaces(env: Any) -> tuple[gymnasium.spaces.Space, gymnasium.spaces.Space]:
    """``(single, batched)`` gymnasium action spaces of ``env``."""
    return env.single_action_spec.to_gym(), env.action_spec.to_gym()


class HostActions:
    """A numpy-facing library's actions, checked on the host, as the tensor the env takes.

    ``to_gymnasium`` and ``to_sb3`` get their actions as numpy arrays (a policy's
    ``.cpu().numpy()``, ``action_space.sample()``, a list): checking them there costs a
    reduction over ``N`` numbers, so every step is checked, before anything moves:

    * the count/shape (the batched action spec's shape, e.g. ``(N,)`` for ``Discrete``,
      ``(N, 1)`` for Pendulum's torque);
    * the dtype kind: integer indices for integer specs (a float array would be
      truncated silently), numbers for float specs;
    * the values: indices inside ``Discrete``/``MultiDiscrete``/``Binary`` ranges (an
      index of 2 for CartPole's ``Discrete(2)`` would otherwise push with 90 N), finite
      floats (a NaN torque would flow into the physics and the data).

    A refusal raises :class:`ActionError` naming the rows, their values and the fix;
    the env is left as it was. Accepted actions become a tensor of the spec's dtype on
    the env's device (``torch.from_numpy``, sharing the array's memory on the CPU; one
    copy to a GPU). Torch tensors are taken too: on the CPU they are checked the same
    way (a view, no copy); on another device they go through :func:`action_tensor`
    unchecked here (a host check would synchronise; the env's own checks apply).

    Example::

        >>> import numpy as np
        >>> import gpu_envs
        >>> env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu")
        >>> actions = HostActions(env, "to_gymnasium")
        >>> actions(np.array([0, 1, 1, 0]))                  # int64 [4] on env.device
        tensor([0, 1, 1, 0])
        >>> actions(np.array([0, 2, 1, 0]))
        Traceback (most recent call last):
            ...
        gpu_envs.contract.errors.ActionError: ...
    """

    def __init__(self, env: Any, consumer: str) -> None:
        self.consumer = consumer
        self.spec: Spec = env.action_spec
        self.single: Spec = env.single_action_spec
        self.device = torch.device(env.device)
        self.shape = tuple(self.spec.shape)
        dtype = self.spec.dtype
        self.dtype: torch.dtype | None = dtype  # None for a Composite action spec
        # a spec without one numpy dtype (a Composite, bfloat16) is passed to action_tensor unchecked
        self._checked = isinstance(dtype, torch.dtype) and dtype in _NUMPY_TORCH_DTYPES
        self._fast_dtype: np.dtype | None = None  # no array takes the fast path of __call__
        if not self._checked or dtype is None:  # (dtype is None only where it is not checked)
            return
        self.np_dtype = numpy_dtype(dtype)
        self._integer = not dtype.is_floating_point
        self._on_cpu = self.device.type == "cpu"
        self._low: Any = None  # integer bounds (scalars, or arrays of the per-env shape), when the spec has them
        self._high: Any = None
        self._finite = isinstance(self.single, Box) and dtype.is_floating_point
        single = self.single
        if isinstance(single, Discrete):
            self._low, self._high = single.start, single.start + single.n - 1
        elif isinstance(single, MultiDiscrete):
            start = single.start.cpu().numpy()
            self._low, self._high = start, start + single.nvec.cpu().numpy() - 1
        elif isinstance(single, Binary) and self._integer:
            self._low, self._high = 0, 1
        # the common case, checked in a few Python operations: an array of the spec's dtype and shape (see __call__)
        self._fast_dtype = self.np_dtype
        few = self.spec.shape.numel() <= _FEW
        self._allowed: frozenset[int] | None = None  # every valid index, for a few values checked as a set
        if self._integer and isinstance(self._low, int) and few and self._high - self._low < _ALLOWED_MAX:
            self._allowed = frozenset(range(self._low, self._high + 1))
        elif not (self._integer and self._low is None):  # (no bounds: nothing to check beyond dtype and shape)
            self._fast_dtype = None  # float values, array bounds, wide ranges, many values: the general path (_check)
        self._flat = len(self.shape) == 1
        self._contiguous = np.empty(self.shape, self.np_dtype).strides  # a C-contiguous array's strides

    def __call__(self, actions: Any) -> torch.Tensor:
        """``actions`` checked (see the class docstring), as a tensor for ``td["action"]``."""
        if actions.__class__ is np.ndarray and actions.dtype is self._fast_dtype and actions.shape == self.shape:
            # the common case (a policy's int64 indices): _check's checks, in two C calls
            allowed = self._allowed
            if allowed is not None and not allowed.issuperset(
                actions.tolist() if self._flat else actions.ravel().tolist()
            ):
                self._raise_out_of_range(actions)
            if actions.strides == self._contiguous:
                tensor = torch.from_numpy(actions)
                return tensor if self._on_cpu else tensor.to(self.device)
        if not self._checked:
            return action_tensor(actions, self.spec, self.device)
        if isinstance(actions, torch.Tensor):
            if actions.device.type != "cpu" or actions.dtype not in _NUMPY_TORCH_DTYPES:
                return action_tensor(actions, self.spec, self.device)
            self._check(actions.detach().numpy())
            return action_tensor(actions, self.spec, self.device)
        array = actions if type(actions) is np.ndarray else np.asarray(actions)
        self._check(array)
        if array.dtype != self.np_dtype:
            array = array.astype(self.np_dtype)
        elif not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        tensor = torch.from_numpy(array)
        return tensor if self._on_cpu else tensor.to(self.device)

    # ----------------------------------------------------------------- checks
    def _check(self, array: np.ndarray) -> None:
        if array.shape != self.shape:
            raise ActionError(
                f"{self.consumer}: the actions have shape {array.shape} ({array.size} values); this env takes "
                f"{self.shape}: one action of shape {tuple(self.single.shape)} for each of its "
                f"{self.shape[0] if self.shape else 1} envs, as its action_space says. Nothing was stepped."
            )
        kind = array.dtype.kind
        if self._integer:
            if kind not in "biu":
                raise ActionError(
                    f"{self.consumer}: the actions have dtype {array.dtype}; this env's actions are integers "
                    f"({self.np_dtype}, {self.single!r}). Pass integer indices (e.g. np.argmax(logits, axis=-1) or "
                    "action_space.sample()); float values are not truncated silently. Nothing was stepped."
                )
            if self._low is not None and array.size and not self._within(array):
                self._raise_out_of_range(array)
        else:
            if kind not in "fiub":
                raise ActionError(
                    f"{self.consumer}: the actions have dtype {array.dtype}; this env takes numbers "
                    f"({self.np_dtype}, {self.single!r}). Nothing was stepped."
                )
            if self._finite and kind == "f" and not np.logical_and.reduce(np.isfinite(array), None):
                self._raise_not_finite(array)

    def _within(self, array: np.ndarray) -> bool:
        low, high = self._low, self._high
        if isinstance(low, int):
            if array.size <= _FEW:  # a few values: min/max over a list cost less than a ufunc reduction's setup
                values = array.reshape(-1).tolist()
                return low <= min(values) and max(values) <= high
            if low == 0:  # one reduction: negative values are huge once read as unsigned
                values = array.view(_UNSIGNED[array.dtype.itemsize]) if array.dtype.kind == "i" else array
                return bool(np.maximum.reduce(values, None) <= high)
            return bool(np.minimum.reduce(array, None) >= low and np.maximum.reduce(array, None) <= high)
        return bool(np.logical_and.reduce(((array >= low) & (array <= high)), None))

    def _raise_out_of_range(self, array: np.ndarray) -> None:
        bad = (array < self._low) | (array > self._high)
        rows, values = _bad_rows(array, bad)
        if isinstance(self._low, int):
            valid = f"{self._low}..{self._high}"
        else:
            valid = f"low {np.asarray(self._low).tolist()} .. high {np.asarray(self._high).tolist()} per element"
        raise ActionError(
            f"{self.consumer}: action values outside {self.single!r} on row(s) {rows}: {values} (valid: {valid}). "
            "Nothing was stepped. Sample actions from the action_space, or map the policy's output into that range "
            "(e.g. an argmax over the logits)."
        )

    def _raise_not_finite(self, array: np.ndarray) -> None:
        rows, values = _bad_rows(array, ~np.isfinite(array))
        raise ActionError(
            f"{self.consumer}: non-finite action values (NaN or inf) on row(s) {rows}: {values}; {self.single!r} needs "
            "finite values. Nothing was stepped. Check the policy's outputs (a NaN loss, a diverged network), or "
            "replace them (np.nan_to_num) before stepping."
        )


_NUMPY_TORCH_DTYPES = {
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.float32, torch.float64,
}  # fmt: skip
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_SHOWN_ROWS = 8
_FEW = 32  # up to this many action values, HostActions checks an index range in Python (N = 8: ~1 us less)
_ALLOWED_MAX = 4096  # index ranges up to this wide are checked as a set of valid indices (few values, right dtype)


def _bad_rows(array: np.ndarray, bad: np.ndarray) -> tuple[list[int], str]:
    """The first rows where ``bad`` holds (``array``'s leading dim is the env) and their actions, as text."""
    if array.ndim == 0:
        return [0], repr(array.item())
    per_row = bad.reshape(bad.shape[0], -1).any(axis=1)
    rows = np.flatnonzero(per_row)
    shown = rows[:_SHOWN_ROWS].tolist()
    values = ", ".join(f"row {i}: {array[i].tolist()!r}" for i in shown)
    more = f" (and {rows.size - len(shown)} more rows)" if rows.size > len(shown) else ""
    return shown, values + more
