"""Small device-aware specs: what a tensor (or a TensorDict of tensors) may hold.

A spec knows its per-env ``shape``, ``dtype`` and ``device`` and can

* build values directly on its device: ``zero(batch)`` and ``rand(batch, generator)``
  (pure torch, no numpy, so sampling never leaves the GPU);
* check values: ``contains(x)`` (may synchronise; meant for validation, not the hot path);
* convert to and from gymnasium spaces: ``to_gym()`` / :func:`spec_from_gym`.

It is a deliberately tiny cousin of torchrl's ``TensorSpec``.

Example::

    >>> spec = Composite(obs=Box(-1.0, 1.0, (3,)), action=Discrete(4))
    >>> td = spec.rand((8,))               # TensorDict, batch_size=[8]
    >>> td["obs"].shape, td["action"].shape
    (torch.Size([8, 3]), torch.Size([8]))
    >>> spec.contains(td)
    True
    >>> spec_from_gym(spec.to_gym()) == spec
    True

Conventions: a scalar ``Box`` has shape ``()`` (gymnasium would use ``(1,)``), and
``zero()`` returns the value closest to zero that the spec contains (so ``Discrete(3,
start=1).zero()`` is ``1``), which makes it a safe placeholder for resets.
"""

from gpu_envs.specs.base import Spec
from gpu_envs.specs.box import Box
from gpu_envs.specs.composite import Composite
from gpu_envs.specs.discrete import Binary, Discrete, MultiDiscrete, OneHot
from gpu_envs.specs.dtypes import numpy_dtype, torch_dtype
from gpu_envs.specs.gym_spaces import spec_from_gym, spec_to_gym

__all__ = [
    "Binary",
    "Box",
    "Composite",
    "Discrete",
    "MultiDiscrete",
    "OneHot",
    "Spec",
    "numpy_dtype",
    "spec_from_gym",
    "spec_to_gym",
    "torch_dtype",
]
