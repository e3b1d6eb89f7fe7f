"""The Ray backend: CPU env fleets on a Ray cluster, one batch on the learner's device.

For envs whose steps are CPU-heavy (MuJoCo, Atari, anything numpy) and outgrow one
machine's cores: ``W`` Ray actors, anywhere on the cluster, each run a gymnasium
``SyncVectorEnv`` of their share of the ``N`` envs (same-step auto-reset) and step it
in parallel; the driver assembles one batch and moves it with one staged copy, just as
the gymnasium backend does for one process. ``pip install '.[ray]'`` in the gpu_envs clone.

Example::

    env = gpu_envs.make("Pendulum-v1", num_envs=64, backend="ray", num_workers=8, seed=0)
    env = gpu_envs.wrap_ray(lambda: gym.make("HalfCheetah-v5"), num_envs=64, num_workers=8)

Read in this order:

* :mod:`.plugin` -- ``make`` by gymnasium id and :func:`wrap_env_fns` (``wrap_ray``):
  ``num_workers``, the :class:`RayOptions` (``step_timeout`` in seconds, default
  :data:`DEFAULT_STEP_TIMEOUT`; ``start_timeout``, ``cpus_per_worker``, ``address``,
  ``ray_init_kwargs``), plus the gymnasium backend's own options;
* :mod:`.backend` -- :class:`RayBackend`, the driver: parallel steps, one batch, errors;
* :mod:`.worker` -- what each actor runs (the gymnasium backend, numpy in and out);
* :mod:`.cluster` -- joining or starting Ray, placing and stopping the actors.

Cluster: the envs join the Ray this process already initialised, the cluster at
``address=`` or ``RAY_ADDRESS``, or start a local one that ``env.close()`` shuts down
again. Exactness: the same transitions as the gymnasium backend over the same envs
(env ``i`` is seeded ``s + i`` over the global index). Failures: an env's exception
comes back with its own traceback; a dead worker or one that does not answer within
``step_timeout`` gives a :class:`~gpu_envs.contract.errors.BackendError` naming it.
"""

from gpu_envs.backends.ray.backend import DEFAULT_START_TIMEOUT, DEFAULT_STEP_TIMEOUT, RayBackend, RayOptions
from gpu_envs.backends.ray.plugin import PLUGIN, RayPlugin, wrap_env_fns

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "DEFAULT_STEP_TIMEOUT",
    "PLUGIN",
    "RayBackend",
    "RayOptions",
    "RayPlugin",
    "wrap_env_fns",
]
