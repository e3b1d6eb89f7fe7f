"""The interfaces of the library as ``typing.Protocol`` s, and the one "is this an env?" check.

* :class:`EnvAPI` -- what every layer above the env uses of one: ``BatchedEnv`` and
  ``TransformedEnv`` implement it; ``collect``, the transforms and the interop adapters
  accept anything that does. :func:`require_env_api` refuses something that does not,
  naming the missing attributes and the way out.
* :class:`TorchVectorEnv` -- what a user's own device-resident env implements to be
  wrapped by the torch backend (documented in full in :mod:`gpu_envs.backends.torch`).
* :class:`RowStateEnv` -- what a torch vector env adds so that ``env.get_state(rows)`` /
  ``env.set_state(state, rows)`` can snapshot and restore its rows (:mod:`gpu_envs.core.snapshot`).
* :class:`BackendPlugin` -- the registry entry of one backend family
  (:mod:`gpu_envs.registry`).

Protocols only describe: nothing here imports an implementation.

Example::

    from gpu_envs.contract.protocols import EnvAPI, require_env_api

    def my_loop(env: EnvAPI) -> None:
        require_env_api(env, "my_loop")
        td = env.reset()
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError

__all__ = ["ENV_API", "BackendPlugin", "EnvAPI", "RowStateEnv", "TorchVectorEnv", "require_env_api"]


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
    """A user's vector env speaking torch tensors (see :mod:`gpu_envs.backends.torch` for the rules).

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


class BackendPlugin(Protocol):
    """One backend family's entry in :mod:`gpu_envs.registry` (a module's ``PLUGIN``)."""

    name: str

    def available(self) -> bool: ...
    def env_ids(self) -> list[str]: ...
    def can_make(self, env_id: str) -> bool: ...
    def make(self, env_id: str, num_envs: int, device: torch.device, **kwargs: Any) -> Any: ...
    def detect(self, obj: Any) -> bool: ...
    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Any: ...
