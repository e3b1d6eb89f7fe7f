"""The backend contract: what every env family adapter hands to :class:`BatchedEnv`.

A backend is the ONLY layer that reads foreign types (numpy arrays, JAX arrays, info
dicts, observation groups). It returns plain torch tensors on the target device in a
:class:`RawStep`, and it never builds a TensorDict: that is :mod:`gpu_envs.core.env`'s job.

Every backend behaves like a *same-step auto-resetting* vector env: when a row ends in
``step``, the backend resets it before returning, reports the post-reset observation in
``RawStep.obs`` and, where it can, the true final observation in ``RawStep.final_obs``.
Backends over envs that reset differently (gymnasium's NEXT_STEP or DISABLED modes, a
single env) translate to this one shape, so the layers above have one path.

Example (a minimal backend over something that already speaks torch)::

    class MyBackend(Backend):
        def reset(self, seed=None, mask=None):
            return {"observation": self.sim.reset(seed)}
        def step(self, action):
            obs, rew, term, trunc, final = self.sim.step(action)
            return RawStep({"observation": obs}, rew, term, trunc, {"observation": final})
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from gpu_envs.contract.errors import RolloutError
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Composite, Spec


@dataclass(slots=True)
class RawStep:
    """One vector step, as torch tensors on the target device.

    Two layouts, told apart by ``done``:

    * flat (``done is None``): ``reward``, ``terminated``, ``truncated`` are ``[N]``;
      :class:`~gpu_envs.core.env.BatchedEnv` views them as ``[N, 1]`` and ors the flags.
    * TensorDict layout (``done`` given): ``reward``, ``terminated``, ``truncated`` and
      ``done`` are already ``[N, 1]``, as they go into the TensorDict. Backends that
      can produce them at no cost (the built-in envs, numpy, JAX) use it.

    The next observation of the transition comes either from ``next_obs`` (the backend
    already has it for every row: the final observation where an episode ended, the
    plain next observation elsewhere; nothing is swapped) or, when ``next_obs`` is
    ``None``, from ``final_obs``/``final_mask`` merged by
    :class:`~gpu_envs.contract.final_obs.FinalObsTransform` (placeholders where none is known).

    Every tensor is the backend's to give away: it is never written again after
    ``step`` returns (a transition handed out stays as it was).

    Attributes:
        obs: observation per key, ``[N, *shape]``; post-reset on rows that ended.
        reward: ``[N]`` or ``[N, 1]`` (any float dtype; cast once to float32), or
            ``[N, *shape]`` for a backend that declares a non-scalar ``reward_spec``
            (multi-objective envs).
        terminated: ``[N]`` or ``[N, 1]`` bool.
        truncated: ``[N]`` or ``[N, 1]`` bool.
        final_obs: the pre-reset observation per key for the FULL batch, trusted only on
            rows that ended in this step (and where ``final_mask`` is True), or ``None``
            when the env cannot give it (then placeholders are used).
        final_mask: ``[N]`` bool, rows on which ``final_obs`` is valid; ``None`` means
            every ended row.
        info: extra numeric entries ``[N, ...]`` placed under ``("next", key)``.
        done: ``terminated | truncated`` as ``[N, 1]`` bool, or ``None`` (flat layout).
        next_obs: the transition's next observation per key for every row, or ``None``.
    """

    obs: ObsDict
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: ObsDict | None = None
    final_mask: torch.Tensor | None = None
    info: ObsDict = field(default_factory=dict)
    done: torch.Tensor | None = None
    next_obs: ObsDict | None = None


class Backend(ABC):
    """Adapter from one env family to torch tensors on ``device``.

    Subclasses set ``num_envs``, ``device``, ``observation_spec`` (a Composite whose
    leaves are the observation keys), ``action_spec`` and, if they emit info entries,
    ``info_spec``: ONE env's specs, without batch dims (the env exposes them as
    ``env.single_*_spec`` and adds the batch dims for ``env.*_spec``). ``reward_spec``
    stays ``None`` for a scalar reward (the env exposes it as ``[N, 1]``); a backend whose
    reward is a vector (K objectives of a multi-objective env) sets it to ONE env's float32
    ``Box`` of shape ``(K,)``, and ``("next", "reward")`` is then ``[N, K]``.
    ``supports_partial_reset`` says whether ``reset(mask=...)`` can reset
    a subset of rows. ``name`` is shown in ``repr``.
    """

    name: str = "backend"
    # True when every tensor the backend returns is one it made itself, in the layout of its
    # specs (the gymnasium and JAX backends, the built-in envs): BatchedEnv then checks the
    # outputs' metadata on the first step only, instead of on every step.
    trusted_outputs: bool = False
    num_envs: int
    device: torch.device
    observation_spec: Composite
    action_spec: Spec
    info_spec: Composite
    reward_spec: Spec | None = None
    supports_partial_reset: bool = False

    @abstractmethod
    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        """Reset all rows (``mask is None``) or the rows where ``mask`` ``[N]`` is True.

        Returns the observation of ALL rows (unchanged ones included).
        """

    @abstractmethod
    def step(self, action: torch.Tensor) -> RawStep:
        """Step every row once, auto-resetting rows that end (same-step semantics)."""

    def plain_transition(self) -> Callable[[torch.Tensor], tuple] | None:
        """The function a step of this backend amounts to in the common case, or None.

        A backend whose ``step`` is, from now on, exactly one call of an env's
        ``step_transition`` (see :mod:`gpu_envs.backends.torch`) returning a single
        ``"observation"`` tensor, a float32 reward and flags already ``[N, 1]``, with
        outputs that need no per-step check, returns that function, and
        :class:`~gpu_envs.core.env.BatchedEnv` then calls it directly after the first step
        (:meth:`~gpu_envs.core.env.BatchedEnv._bind_fast_steps`). Every other backend keeps
        this default: its steps go through :meth:`step` and a :class:`RawStep`.
        """
        return None

    def check_usable(self) -> None:  # noqa: B027 - optional hook
        """Raise a clear error if the simulator can no longer be used (died, closed).

        :class:`~gpu_envs.core.env.BatchedEnv` asks this first when a step was interrupted,
        so that a backend that knows why (a dead worker process) says so.
        """

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The simulator's per-step state as live tensors (see :mod:`gpu_envs.utils.state_dicts`).

        This default refuses: most simulators (numpy envs, JAX arrays, a physics engine)
        keep their state outside torch tensors, where a CUDA graph cannot replay it.
        """
        raise RolloutError(
            f"the {self.describe()} backend keeps its simulator's state outside torch tensors, so it has no "
            "state_dict(); a CUDA graph can only replay envs whose per-step state lives in device tensors "
            "(torch vector envs). Use cudagraph=False for this env."
        )

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Take the values of a :meth:`state_dict` (refused where that is)."""
        self.state_dict()  # raises where the state is not torch tensors
        raise NotImplementedError(f"{type(self).__name__} has a state_dict() but no load_state_dict()")

    def close(self) -> None:  # noqa: B027 - optional hook, most backends own nothing
        """Release the simulator's resources. Called once by ``BatchedEnv.close``."""

    def recover(self) -> None:  # noqa: B027 - optional hook, most backends need nothing
        """Make the simulator callable again after a ``reset``/``step`` that did not finish.

        Called by ``BatchedEnv.reset`` after an interrupted call (an exception or Ctrl-C
        escaped it), right before the full reset that follows. In-process simulators need
        nothing (the reset restores them); backends that talk to other processes drain
        or restart them here.
        """

    def describe(self) -> str:
        """A short text for ``repr``: the wrapped object's type."""
        return self.name
