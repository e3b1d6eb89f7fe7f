"""Env wrappers: an env around an env, changing which rows end and reset (not a Transform).

* :class:`Quarantine` wraps an env so that rows whose observation or reward is not finite
  are ended, reset and counted, sync-free, and the run goes on
  (:mod:`gpu_envs.wrappers.quarantine`).

A :class:`~gpu_envs.transforms.Transform` rewrites TensorDicts on their way between env
and learner; a wrapper here also resets rows of the env it wraps in the same call, which
no transform may do. Wrappers keep the env API, so a ``TransformedEnv`` takes one.

Example::

    >>> import gpu_envs
    >>> from gpu_envs.wrappers import Quarantine
    >>> env = Quarantine(gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=0), raise_after=100)
    >>> traj = env.rollout(10)
    >>> env.check()                            # rows quarantined so far (one sync)
    0
"""

from gpu_envs.wrappers.quarantine import QUARANTINED_KEY, Quarantine, QuarantineLimitError

__all__ = ["QUARANTINED_KEY", "Quarantine", "QuarantineLimitError"]
