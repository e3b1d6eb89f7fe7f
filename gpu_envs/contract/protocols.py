"""The interfaces of the library as ``typing.Protocol`` s, and the one "is this an env?" check.

* :class:`EnvAPI` -- what every layer above the env uses of one: ``BatchedEnv`` and
  ``TransformedEnv`` implement it; ``collect``, the transforms and the interop adapters
  accept anything that does. :func:`require_env_api` refuses something that does not,
  naming the missing attributes and the way out.
* :class:`TorchVectorEnv` -- what a user's own device-resident env implements to be
  wrapped by the torch backend (documented in full in :mod:`gpu_envs.backends.torch_envs`).
* :class:`RowStateEnv` -- what a torch vector env adds so that ``env.get_state(rows)`` /
  ``env.set_state(state, rows)`` can snapshot and restore its rows (:mod:`gpu_envs.core.snapshot`).
* :class:`FusedCollectEnv` -- what an env offers a random-action collection that writes
  its tensors straight into a buffer (``transition_values``; ``BatchedEnv`` has it).
* :class:`SimulatorFrames` -- a backend whose frames come from its simulator's own
  renderer (VMAS), which ``RecordEpisodes`` films with the true final frame.
* :class:`LiveStateEnv` -- an env whose per-step state is live tensors
  (``live_state``/``load_live_state``), which a CUDA-graph collection replays.
* :class:`BackendPlugin` -- the registry entry of one backend family
  (:mod:`gpu_envs.registry`), every hook the registry and ``make``/``wrap`` call.

Protocols only describe: nothing here imports an implementation.

Example::

    from gpu_envs.contract.protocols import EnvAPI, require_env_api

    def my_loop(env: EnvAPI) -> None:
        require_env_api(env, "my_loop")
        td = env.reset()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError

__all__ = [
    "ENV_API",
    "NOT_SELF_CHECKED",
    "BackendPlugin",
    "EnvAPI",
    "FusedCollectEnv",
    "LiveStateEnv",
    "OptionalPluginHooks",
    "RowStateEnv",
    "SelfCheckedStep",
    "SimulatorFrames",
    "TorchVectorEnv",
    "require_env_api",
]


@runtime_checkable
class EnvAPI(Protocol):
    """A batch of envs behind torchrl-style TensorDicts (``BatchedEnv``, ``TransformedEnv``).

    Specs carry the batch dims (``action_spec.shape == batch_size + single_action_spec.shape``);
    ``single_*_spec`` describe one env. See ``docs/ARCHITECTURE.md`` for the keys.
    """

    num_envs: int
    batch_size: torch.Size
    device: torch.device
    generator: torch.Generator

    @property
    def single_observation_spec(self) -> Any: ...
    @property
    def single_action_spec(self) -> Any: ...
    @property
    def observation_spec(self) -> Any: ...
    @property
    def action_spec(self) -> Any: ...
    @property
    def needs_reset(self) -> bool: ...

    def reset(self, seed: int | None = None, td: TensorDictBase | None = None) -> TensorDictBase: ...
    def step(self, td: TensorDictBase) -> TensorDictBase: ...
    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]: ...
    def root(self) -> TensorDictBase: ...
    def close(self) -> None: ...


# The attributes require_env_api looks for: EnvAPI's members that tell an env from
# anything else without calling it.
ENV_API = (
    "reset",
    "step",
    "step_and_maybe_reset",
    "root",
    "single_observation_spec",
    "single_action_spec",
    "num_envs",
    "batch_size",
    "device",
)


def require_env_api(env: Any, who: str, error: type[Exception] = InvalidArgumentError, fix: str = "") -> None:
    """Refuse something that is not an env (``collect(42, steps=4)``), saying what is expected.

    ``who`` names the caller in the message, ``error`` is the class raised (the interop
    adapters raise ``NotAnEnvError``) and ``fix`` a last sentence naming the way out.
    """
    missing = [name for name in ENV_API if not hasattr(env, name)]
    if missing:
        raise error(
            f"{who} needs an env with the BatchedEnv API (a gpu_envs.BatchedEnv or TransformedEnv, from gpu_envs.make/wrap) as its first "
            f"argument, got {type(env).__module__}.{type(env).__name__} (it lacks {', '.join(missing)}).{fix}"
        )


@runtime_checkable
class TorchVectorEnv(Protocol):
    """A user's vector env speaking torch tensors (see :mod:`gpu_envs.backends.torch_envs` for the rules).

    The shape of a gymnasium ``VectorEnv`` with same-step auto-reset: ``reset`` returns
    ``(obs, info)``, ``step`` returns ``(obs, reward [N], terminated [N], truncated [N],
    info)`` with the post-reset observation on ended rows and, where kept, the true final
    one in ``info["final_obs"]``.
    """

    num_envs: int
    single_observation_space: Any
    single_action_space: Any

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]: ...
    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict]: ...


@runtime_checkable
class RowStateEnv(Protocol):
    """A torch vector env whose rows can be snapshot and restored exactly (the built-in envs are).

    * ``get_state(rows)``: ``rows`` is an int64 ``[k]`` tensor on the env's device (each in
      ``[0, N)``, repeats allowed); return a dict (or TensorDict) of NEW tensors
      ``[k, ...]``, one entry per piece of per-row state: everything the rows'
      continuation depends on -- physics state, step counters, the per-row random
      streams' keys and counters. The same keys, shapes and dtypes on every call.
    * ``set_state(state, rows)``: ``state`` is a TensorDict ``[k]`` with those keys (on the
      env's device; gpu_envs checked its keys, shapes and dtypes against a ``get_state``),
      ``rows`` distinct; write it into those rows (in place: ``index_copy_``), so that
      stepping on gives, bitwise, what the snapshot rows gave -- in the same rows or others.

    State shared by all rows (a global step counter, one generator for the whole batch)
    cannot be restored per row: such an env is not exact and should not claim this protocol.

    Example::

        class MyEnv:
            def get_state(self, rows):
                return {"pos": self.pos[rows], "steps": self.steps[rows]}

            def set_state(self, state, rows):
                self.pos.index_copy_(0, rows, state["pos"])
                self.steps.index_copy_(0, rows, state["steps"])
    """

    def get_state(self, rows: torch.Tensor) -> Any: ...
    def set_state(self, state: TensorDictBase, rows: torch.Tensor) -> None: ...


@runtime_checkable
class SimulatorFrames(Protocol):
    """A backend whose frames are drawn by its simulator from the simulator's state, not from observations.

    VMAS renders a world; an observation does not hold enough to draw it. A same-step
    auto-reset resets an ended row inside ``step``, so the frame of its final state must be
    drawn there, before the reset, for the rows a recorder films:

    * ``render_rows(rows)``: uint8 ``[len(rows), H, W, 3]`` frames of those rows' state now
      (between steps: the state the next step starts from);
    * ``keep_final_frames(rows)``: from the next ``step`` on, each of those rows that ends
      is rendered before its reset (``[]`` stops it: rendering costs the simulator's time);
    * ``final_frames``: ``{row: uint8 [H, W, 3]}`` drawn by the last ``step``, for its ended
      kept rows only.

    Example::

        backend.keep_final_frames([0, 1])
        env.step_and_maybe_reset(td)
        backend.final_frames          # {1: frame of row 1's last state} where row 1 ended
    """

    final_frames: dict[int, torch.Tensor]

    def render_rows(self, rows: list[int]) -> torch.Tensor: ...

    def keep_final_frames(self, rows: list[int]) -> None: ...


@runtime_checkable
class SelfCheckedStep(Protocol):
    """An env whose step looks at its own action and outputs, as the default health look would.

    ``last_step_clean`` is True only when the last step checked every action against the
    action space (integer actions in range, float actions finite) and found every
    observation and reward it wrote finite; False when that step checked nothing (a path
    without the check) or found something. A hand-written loop in the default health
    mode then skips its own look of a clean step (:mod:`gpu_envs.core.health`); a step
    reported not clean gets the full look and the exact per-row record. The built-in
    envs' native CPU step checks while its values are in registers, for nearly nothing.

    Example::

        raw = env.raw_step(action)
        if not env.last_step_clean:
            ...  # look at the step's values yourself
    """

    last_step_clean: bool


class _NeverChecked:
    """A simulator that never checks its own steps (every step is looked at)."""

    last_step_clean = False


NOT_SELF_CHECKED: SelfCheckedStep = _NeverChecked()
"""The stand-in where no simulator checks its own steps: ``last_step_clean`` is always False."""


@runtime_checkable
class FusedCollectEnv(Protocol):
    """An env a random-action collection can step straight into its buffer (:func:`gpu_envs.rollout.loop.fused_writer`).

    ``transition_values(keys)`` returns ``action -> tensors`` (one per key of ``keys``, a
    buffer's layout, in that order): the same step ``step_and_maybe_reset`` makes, without
    its TensorDicts; or None where it cannot (a wrapper whose transforms rewrite
    transitions, transitions with entries the step does not make).
    """

    def transition_values(self, keys: list) -> Callable[[torch.Tensor], Any] | None: ...


@runtime_checkable
class OutputTargets(Protocol):
    """A simulator whose next step can write its outputs into tensors its caller names (a collection's buffer slots).

    ``output_layout()`` gives ``{name: (shape, dtype)}`` of what a step writes (the
    TensorDict layout: ``"observation"``, ``"final_observation"``, ``"reward"`` and the flags);
    ``write_next_step_into(targets)`` makes the next step write the named ones there
    (:meth:`gpu_envs.builtin.base.BatchedTorchEnv.write_next_step_into`).
    """

    def output_layout(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]: ...
    def write_next_step_into(self, targets: dict[str, torch.Tensor]) -> None: ...


@runtime_checkable
class LiveStateEnv(Protocol):
    """An env (or backend, or transform) whose per-step state is torch tensors, handed out LIVE.

    ``live_state()`` returns the very tensors a step reads and writes (not copies), by
    name; ``load_live_state(state)`` copies values into them. A CUDA-graph collection
    (:mod:`gpu_envs.rollout.cudagraph`) keeps state this way; see
    :mod:`gpu_envs.utils.live_state`. (A snapshot of rows, copies, is ``get_state``.)
    """

    def live_state(self) -> dict[str, torch.Tensor]: ...
    def load_live_state(self, state: dict[str, torch.Tensor]) -> None: ...


class BackendPlugin(Protocol):
    """One backend family's entry in :mod:`gpu_envs.registry` (a module's ``PLUGIN``): every hook called on it.

    Required: ``name``, ``available()``, ``env_ids()``, ``can_make(env_id)``,
    ``make(env_id, num_envs, device, **kwargs)``, ``detect(obj)`` and
    ``wrap(obj, device, **kwargs)``. Optional (the registry falls back when a plugin
    lacks one; :func:`gpu_envs.registry.plugin_hook` reads them): ``claims(env_id)``
    (no other backend may make the id), ``make_kwargs(env_id)`` / ``wrap_kwargs(obj)``
    (the backend's accepted keyword names, for error messages; None: any),
    ``min_bytes_per_env(env_id)`` (a lower bound checked before building),
    ``accepts_env_index_offset`` (``make`` takes ``env_index_offset=k``: what
    ``distributed=True`` needs to shard seeds) and ``defers_to_registering_packages``
    (``backend="auto"`` leaves ids of packages whose import registers them, such as
    ``ALE/``, to the backend that registers them).
    """

    name: str

    def available(self) -> bool: ...
    def env_ids(self) -> list[str]: ...
    def can_make(self, env_id: str) -> bool: ...
    def make(self, env_id: str, num_envs: int, device: torch.device, **kwargs: Any) -> Any: ...
    def detect(self, obj: Any) -> bool: ...
    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Any: ...


class OptionalPluginHooks(Protocol):
    """The optional hooks of a :class:`BackendPlugin` (each looked up, with a default, by the registry)."""

    accepts_env_index_offset: bool
    defers_to_registering_packages: bool

    def claims(self, env_id: str) -> bool: ...
    def make_kwargs(self, env_id: str) -> list[str] | None: ...
    def wrap_kwargs(self, obj: Any) -> list[str] | None: ...
    def min_bytes_per_env(self, env_id: str) -> int: ...
