"""One exception hierarchy for everything ``gpu_envs`` refuses.

Every error subclasses :class:`GpuEnvsError` *and* the builtin that fits
(``ValueError``, ``TypeError`` or ``RuntimeError``), so callers can catch either
``gpu_envs.GpuEnvsError`` or the usual builtin. Messages name the cause and the fix.

Example::

    >>> import torch
    >>> import gpu_envs
    >>> env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    >>> td = env.reset()
    >>> td["action"] = torch.zeros(4, 2)              # CartPole takes one int64 per env
    >>> try:
    ...     env.step(td)
    ... except gpu_envs.ActionError as err:           # also a ValueError
    ...     print(isinstance(err, ValueError), "action" in str(err))
    True True
"""

from __future__ import annotations


class GpuEnvsError(Exception):
    """Base class of every error raised on purpose by gpu_envs."""


class SpecError(GpuEnvsError, ValueError):
    """A spec was built from inconsistent arguments (bounds, shapes, sizes)."""


class UnsupportedSpaceError(GpuEnvsError, TypeError):
    """A gymnasium space has no tensor representation here (Sequence, Text, Graph...)."""


class ActionError(GpuEnvsError, ValueError):
    """An action has the wrong shape, dtype, device or values for the action spec."""


class HealthCheckError(GpuEnvsError, ValueError):
    """Bad values were flagged on the device: an out-of-range discrete action, a non-finite action,
    observation or reward (see :mod:`gpu_envs.core.health`).

    Attributes: ``rows`` (the rows flagged), ``steps`` (each row's first faulty step, counted
    from the last full reset) and ``values`` (the value found there), in the same order.
    """

    def __init__(self, message: str, *, rows: list[int], steps: list[int], values: list[float]) -> None:
        super().__init__(message)
        self.rows, self.steps, self.values = rows, steps, values


class ResetMaskError(GpuEnvsError, ValueError):
    """A ``"_reset"`` mask has the wrong shape or dtype, or the backend cannot reset partially."""


class UnknownEnvError(GpuEnvsError, ValueError):
    """``make`` was given an env id no backend provides."""


class UnknownBackendError(GpuEnvsError, ValueError):
    """``make``/``wrap`` was given a backend name that does not exist."""


class NotAnEnvError(GpuEnvsError, TypeError):
    """``wrap`` was given an object that no backend recognises as an environment."""


class DeviceMismatchError(GpuEnvsError, ValueError):
    """The wrapped env lives on another device than the one requested."""


class ObservationError(GpuEnvsError, ValueError):
    """An env returned observations that do not match its declared observation space."""


class ResetNeededError(GpuEnvsError, RuntimeError):
    """``step`` was called before the first ``reset``."""


class ClosedEnvError(GpuEnvsError, RuntimeError):
    """The env was used after ``close()``."""


class BackendError(GpuEnvsError, RuntimeError):
    """The wrapped simulator failed (raised, died, or broke its own contract)."""


class InterruptedStepError(ResetNeededError, BackendError):
    """A reset/step raised before it completed (the env, a timeout, Ctrl-C): only ``reset()`` helps.

    Both a :class:`ResetNeededError` (what to do) and a :class:`BackendError` (the
    simulator may be half-stepped). Every call but ``reset()`` (which recovers) and
    ``close()`` raises it until then.
    """


class ConcurrentCallError(InterruptedStepError):
    """Two threads called one env at the same time: its state may be half-stepped by both.

    An env is not thread-safe: step each env from one thread (one env per thread), or
    hold one lock around every call. Only ``reset()`` makes it usable again.
    """


class StaleInputError(GpuEnvsError, ValueError):
    """``step`` got a TensorDict that is not the current root: an earlier root, or a step's ``td["next"]``.

    On rows that ended, ``td["next"]`` holds the FINAL observation, not the post-reset one
    the env continues from; an earlier root holds observations the env has moved past.
    Step the root ``step_and_maybe_reset`` returns (or ``env.root()``).
    """


class StepTimeoutError(BackendError):
    """Sub-envs in other processes did not answer a ``reset``/``step`` within ``step_timeout`` seconds."""


class InvalidArgumentError(GpuEnvsError, ValueError):
    """An argument is out of its allowed range (``num_envs < 1``, ``steps < 1``...)."""


class AutoresetModeError(GpuEnvsError, ValueError):
    """The env auto-resets in a way this backend cannot turn into exact transitions."""


class RolloutError(GpuEnvsError, RuntimeError):
    """A collection cannot proceed: the transitions changed layout, or the env or policy cannot be compiled/captured."""


class MissingComponentError(GpuEnvsError, RuntimeError):
    """An optional part is absent: the benchmarks of a source checkout, an optional dependency."""


class NotCopyableError(GpuEnvsError, TypeError):
    """A gpu_envs env was pickled or copied (``copy``/``deepcopy``): it holds a live simulator, so it cannot be."""


class SnapshotError(GpuEnvsError, RuntimeError):
    """``get_state``/``set_state`` cannot snapshot or restore this env's rows exactly (its simulator keeps state out of reach)."""
