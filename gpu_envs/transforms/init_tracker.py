"""``InitTracker``: an ``"is_init"`` flag on the first step of every episode, per row (torchrl's name).

A recurrent policy must zero its hidden state where an episode starts. ``InitTracker()``
adds ``td["is_init"]`` ``[N, 1]`` bool to every root: True on the rows whose root is the
first observation of an episode (after a full reset, a masked ``reset(td)`` with
``"_reset"``, or the auto-reset of ``step_and_maybe_reset``), False where the episode goes
on. ``("next", "is_init")`` is always False (a next observation is never an episode's
first), as torchrl's ``InitTracker`` writes it. A masked reset sets its rows and leaves the
others as they were (a row reset a moment ago and not stepped since stays True).

State: one ``[N, 1]`` bool, written with in-place ops only (no host sync, CUDA-graph and
``compile=True`` safe) and snapshotted per row by ``get_state`` / ``set_state``.

Example::

    >>> import gpu_envs
    >>> from gpu_envs.transforms import InitTracker, TransformedEnv
    >>> env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0), InitTracker())
    >>> env.reset()["is_init"].view(-1).tolist()
    [True, True, True, True]
    >>> root = env.root()
    >>> root["action"] = env.action_spec.rand(generator=env.generator)
    >>> td, root = env.step_and_maybe_reset(root)
    >>> root["is_init"].view(-1).tolist()           # no episode ended in one step
    [False, False, False, False]
"""

from __future__ import annotations

from typing import cast

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.specs import Binary, Composite
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.keys import read, write

__all__ = ["InitTracker"]


class InitTracker(Transform):
    """Mark each episode's first root with ``"is_init"`` (see the module docstring).

    Args:
        key: the flag's name, default ``"is_init"``.
    """

    row_state = ("is_init",)

    def __init__(self, key: str = "is_init") -> None:
        super().__init__()
        if not isinstance(key, str) or not key:
            raise SpecError(f"InitTracker key must be a non-empty string, got {key!r}.")
        self.key = key

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        dev = specs.device
        if self.key in specs.observation_spec:
            raise SpecError(
                f"InitTracker key {self.key!r} is already an observation key of the env; pass another name "
                "(InitTracker(key=...))."
            )
        obs_spec = cast(Composite, specs.observation_spec.to(dev))
        obs_spec[self.key] = Binary(1, device=dev)
        self._init = torch.zeros(specs.num_envs, 1, dtype=torch.bool, device=dev)
        self._never = torch.zeros(specs.num_envs, 1, dtype=torch.bool, device=dev)  # ("next", key): read only
        return specs.replace(observation_spec=obs_spec)

    def step(self, td: TensorDictBase) -> TensorDictBase:
        self._init.copy_(read(td, "done", nxt=True))
        write(td, self.key, self._never, nxt=True)
        return td

    def root(self, td: TensorDictBase) -> TensorDictBase:
        write(td, self.key, self._init.clone())
        return td

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        self._init.logical_or_(mask.view(self.num_envs, 1))
        return self.root(td)

    def live_state(self) -> dict[str, torch.Tensor]:
        return {"is_init": self._init}

    def __repr__(self) -> str:
        return f"InitTracker(key={self.key!r})"
