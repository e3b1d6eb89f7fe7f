"""The gymnasium backend: CPU gymnasium envs (vector or single) as exact same-step transitions.

Read in this order:

* :mod:`.plugin` -- the registry entry: ``make`` builds a SAME_STEP Sync/AsyncVectorEnv
  from a gymnasium id, ``wrap`` takes a ``VectorEnv`` or a single ``Env`` (batch of one);
* :mod:`.backend` -- :class:`GymnasiumBackend`: every auto-reset mode mapped to
  same-step transitions with true final observations, failures as clear errors;
* :mod:`.spaces` -- gymnasium spaces as observation keys and action encodings;
* :mod:`.info` -- numeric info entries as ``("next", key)`` tensors;
* :mod:`.vector` -- facts about gymnasium's vector envs (auto-reset mode, NEXT_STEP checks);
* :mod:`.workers` -- AsyncVectorEnv workers: ``step_timeout``, recovery of interrupted
  calls, workers that ignore Ctrl-C and die with their parent;
* :mod:`.wrappers` -- per-env :class:`FrameSkip` and :func:`add_pixels`.

Each step's numpy results cross to the target device through one
:class:`gpu_envs.utils.arrays.HostStaging` (for a CUDA target: one packed pinned buffer, one
transfer).

Example::

    from gpu_envs.backends.gymnasium_envs import PLUGIN, GymnasiumBackend, FrameSkip

    backend = PLUGIN.make("CartPole-v1", num_envs=8, device=torch.device("cpu"))
"""

from gpu_envs.backends.gymnasium_envs.backend import GymnasiumBackend, wrap_single
from gpu_envs.backends.gymnasium_envs.plugin import PLUGIN, GymnasiumPlugin
from gpu_envs.backends.gymnasium_envs.vector import autoreset_mode
from gpu_envs.backends.gymnasium_envs.workers import DEFAULT_STEP_TIMEOUT, guarded_worker
from gpu_envs.backends.gymnasium_envs.wrappers import FrameSkip, add_pixels

__all__ = [
    "DEFAULT_STEP_TIMEOUT",
    "PLUGIN",
    "FrameSkip",
    "GymnasiumBackend",
    "GymnasiumPlugin",
    "add_pixels",
    "autoreset_mode",
    "guarded_worker",
    "wrap_single",
]
