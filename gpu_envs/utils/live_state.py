"""The state protocol every layer of an env speaks: ``live_state()`` and ``load_live_state()``.

An object that keeps per-step state in tensors (a built-in env, a backend, ``BatchedEnv``,
``TransformedEnv``) exposes it as torch modules do:

* ``live_state()`` -> ``{name: tensor}``: the LIVE tensors (not copies) holding everything
  a step reads and writes; a layer that wraps another includes the inner one's entries
  under a prefix (``"backend.env.state"``);
* ``load_live_state(d)``: take the values of ``d`` (same names, shapes and dtypes), by
  copying them into its own tensors. A cache of tensors the layer only ever replaces and
  never writes into (``BatchedEnv``'s root observations) takes copies instead.

The CUDA-graph collector (:mod:`gpu_envs.rollout.cudagraph`) needs nothing else: what is updated
in place stays in the graph's memory, what is re-bound is copied back into it.

Because the tensors are live, a ``live_state()`` kept without copying moves on with the
env: loading it back after the env stepped would restore what was re-bound (the root
observations) but not what was updated in place (the simulator), a silent mix of two
moments. ``BatchedEnv`` and ``TransformedEnv`` therefore hand out a :class:`DatedState`
(a dict that remembers which env and which root it was taken at) and refuse to load one
of their own from an earlier root, naming the fix (clone when saving). A copy
(``{k: v.clone() ...}``, a plain dict) is never refused.

Example::

    >>> import torch
    >>> import gpu_envs
    >>> env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    >>> td = env.reset()
    >>> saved = {name: t.clone() for name, t in env.live_state().items()}
    >>> def steps(n):
    ...     root = env.root()
    ...     for _ in range(n):
    ...         root["action"] = torch.ones(4, dtype=torch.int64)
    ...         _, root = env.step_and_maybe_reset(root)
    ...     return root["observation"]
    >>> first = steps(20)
    >>> env.load_live_state(saved)      # back to exactly that state (same future draws)
    >>> torch.equal(steps(20), first)
    True
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from gpu_envs.contract.errors import InvalidArgumentError

__all__ = ["DatedState", "check_state", "check_values", "copy_into", "prefixed", "refuse_stale", "same_memory", "under"]


class DatedState(dict):
    """A ``live_state()`` of live tensors that says when it was taken.

    ``date`` is ``(owner, moment)``: an object identifying the env that made it and the
    number of its root at that time (``None`` when unknown). Anything else about it is a
    plain dict; a copy of it is a plain dict again.
    """

    __slots__ = ("date",)

    def __init__(self, state: Mapping[str, torch.Tensor], date: tuple[object, int] | None) -> None:
        super().__init__(state)
        self.date = date


def refuse_stale(state: object, owner: object, moment: int, who: str) -> None:
    """Refuse ``state`` if it is ``owner``'s own live live_state() from another moment than ``moment``."""
    date = getattr(state, "date", None)
    if type(state) is DatedState and date is not None and date[0] is owner and date[1] != moment:
        raise InvalidArgumentError(
            f"{who}.load_live_state was given this env's own live_state() from an earlier moment, not a copy of it. "
            "Its tensors are the env's live ones: the simulator's have moved on with the env since, so loading it "
            "would move the root observations back but not the simulator. Copy the state when you save it: "
            "saved = {k: v.clone() for k, v in env.live_state().items()}, then env.load_live_state(saved)."
        )


def prefixed(prefix: str, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with every name as ``prefix + "." + name``."""
    return {f"{prefix}.{name}": value for name, value in state.items()}


def under(prefix: str, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries of ``state`` named ``prefix + "." + name``, as ``{name: value}``."""
    head = prefix + "."
    return {name[len(head) :]: value for name, value in state.items() if name.startswith(head)}


def check_state(state: object, owner: str) -> None:
    """Refuse anything but a mapping of names to tensors before a ``load_live_state`` reads it."""
    if not isinstance(state, Mapping):
        raise InvalidArgumentError(
            f"{owner}.load_live_state takes the dict of tensors a live_state() returned (or a copy of it), got "
            f"{type(state).__name__}."
        )


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True if ``a`` and ``b`` are the same elements of the same storage (views included)."""
    return a is b or (
        a.device == b.device
        and a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.data_ptr() == b.data_ptr()
    )


def check_values(targets: Mapping[str, torch.Tensor], values: Mapping[str, torch.Tensor], owner: str) -> None:
    """Refuse ``values`` unless they have exactly the names, shapes and dtypes of ``targets``."""
    check_state(values, owner)
    if set(values) != set(targets):
        raise InvalidArgumentError(
            f"{owner}.load_live_state expects the names {sorted(targets)} of its live_state(), got {sorted(values)}."
        )
    for name, target in targets.items():
        value = values[name]
        if not isinstance(value, torch.Tensor) or value.shape != target.shape or value.dtype != target.dtype:
            got = f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise InvalidArgumentError(
                f"{owner} state {name!r} must be a {tuple(target.shape)} {target.dtype} tensor, got {got}."
            )


def copy_into(targets: Mapping[str, torch.Tensor], values: Mapping[str, torch.Tensor], owner: str) -> None:
    """Copy ``values`` into the tensors of ``targets`` (same names, shapes, dtypes), in place.

    Every value is checked before the first copy, so a refused state leaves the targets as they were.
    """
    check_values(targets, values, owner)
    for name, target in targets.items():
        value = values[name]
        if not same_memory(value, target):
            target.copy_(value)
