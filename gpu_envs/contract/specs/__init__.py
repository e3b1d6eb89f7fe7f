"""Small device-aware specs: what a tensor (or a TensorDict of tensors) may hold.

A spec knows its ``shape``, ``dtype`` and ``device`` and can

* build values directly on its device: ``zero(shape)`` and ``rand(shape, generator)``
  (pure torch, no numpy, so sampling never leaves the GPU); ``shape`` prepends dims;
* check values: ``contains(x)`` (may synchronise; meant for validation, not the hot path);
* carry batch dims as torchrl's specs do: ``expand(*new_shape)`` adds leading batch dims,
  ``unbatched()`` drops them, ``shape == batch_shape + event_shape``;
* convert to and from gymnasium spaces: ``to_gym()`` / :func:`spec_from_gym`.

Per env and batched: backends declare what ONE env holds (``batch_shape == ()``, like
gymnasium's ``single_*`` spaces); an env exposes those as ``env.single_action_spec``...
and, as torchrl does, ``env.action_spec = single.expand(*env.batch_size, *single.shape)``,
so ``td["action"] = env.action_spec.rand()`` is a whole batch on the env's device.

It is a deliberately tiny cousin of torchrl's ``TensorSpec``. Modules: :mod:`.base`
(``Spec``), :mod:`.box`, :mod:`.discrete` (Discrete, MultiDiscrete, Binary, OneHot),
:mod:`.composite`, :mod:`.dtypes` (torch <-> numpy dtypes), :mod:`.gym_spaces`, and
:mod:`.env_specs` (an env's ``single_*_spec`` and batched ``*_spec`` attributes).

Example::

    >>> spec = Composite(obs=Box(-1.0, 1.0, (3,)), action=Discrete(4))
    >>> td = spec.rand((8,))               # TensorDict, batch_size=[8]
    >>> td["obs"].shape, td["action"].shape
    (torch.Size([8, 3]), torch.Size([8]))
    >>> batched = spec.expand(8)           # the same, as an env of 8 exposes it
    >>> batched.rand().batch_size, batched["obs"].shape
    (torch.Size([8]), torch.Size([8, 3]))
    >>> spec.contains(td) and batched.contains(td)
    True
    >>> spec_from_gym(spec.to_gym()) == spec
    True

Conventions: a scalar ``Box`` has shape ``()`` (gymnasium would use ``(1,)``), and
``zero()`` returns the value closest to zero that the spec contains (so ``Discrete(3,
start=1).zero()`` is ``1``), which makes it a safe placeholder for resets.
"""

from gpu_envs.contract.specs.base import Spec
from gpu_envs.contract.specs.box import Box
from gpu_envs.contract.specs.composite import Composite
from gpu_envs.contract.specs.discrete import Binary, Discrete, MultiDiscrete, OneHot
from gpu_envs.contract.specs.dtypes import numpy_dtype, torch_dtype
from gpu_envs.contract.specs.gym_spaces import spec_from_gym, spec_to_gym

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
