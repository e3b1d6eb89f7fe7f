"""Action transforms: ``ActionRescale`` ([-1, 1] to the env's bounds) and ``ClipAction``.

Both act on the way down (``inv``): the env receives the rewritten action while the
TensorDict handed back keeps the policy's own ``"action"`` (for log-probabilities).

* ``ActionRescale``: a policy that outputs values in ``[-1, 1]`` (tanh squashing, or
  ``env.action_spec.rand()`` above the transform) drives an env whose Box action spec
  has other bounds: ``a_env = low + (a + 1) * (high - low) / 2``. The action spec seen
  above becomes ``Box(-1, 1)`` of the same shape and dtype. Values outside ``[-1, 1]``
  map outside the bounds (the map is affine); add ``ClipAction`` to clamp them.
* ``ClipAction``: clamps the action into the Box bounds of the spec below it, e.g. the
  samples of a Gaussian policy. The action spec is unchanged.

Order: in ``TransformedEnv(env, ClipAction(), ActionRescale())`` the rescaled action is
clipped to the env's bounds; in ``TransformedEnv(env, ActionRescale(), ClipAction())``
the policy's action is clipped to ``[-1, 1]`` and then rescaled. Both give valid actions.

Example::

    >>> import gpu_envs
    >>> from gpu_envs.transforms import ActionRescale, ClipAction, TransformedEnv
    >>> env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu"), ClipAction(), ActionRescale())
    >>> env.single_action_spec              # Pendulum's own is [-2, 2]
    Box(low=-1.0, high=1.0, shape=(1,), dtype=float32, device=cpu)
    >>> action = env.action_spec.rand()     # [4, 1] in [-1, 1]
    >>> action.shape, bool(action.abs().max() <= 1)
    (torch.Size([4, 1]), True)
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.specs import Box
from gpu_envs.transforms.base import EnvSpecs, Transform

__all__ = ["ActionRescale", "ClipAction"]


class ActionRescale(Transform):
    """Map policy actions in ``[-1, 1]`` to the bounds of the env's Box action spec."""

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        spec = specs.action_spec
        if not isinstance(spec, Box) or not spec.dtype.is_floating_point:
            raise SpecError(
                f"ActionRescale needs a continuous (float Box) action spec, got {spec!r}. "
                "It maps [-1, 1] to Box bounds; drop it for discrete actions."
            )
        if not bool((spec.bounded_below & spec.bounded_above).all()) or not bool(
            torch.isfinite(spec.low).all() and torch.isfinite(spec.high).all()
        ):
            raise SpecError(
                f"ActionRescale needs finite bounds on every action dim, got {spec!r}. "
                "Give the env a bounded action space, or scale the policy output yourself."
            )
        self.low, self.high = spec.low, spec.high
        self._center = (spec.high + spec.low) / 2
        self._half = (spec.high - spec.low) / 2
        return specs.replace(action_spec=Box(-1.0, 1.0, spec.shape, spec.dtype, device=specs.device))

    def inv(self, td: TensorDictBase) -> TensorDictBase:
        td.set("action", torch.addcmul(self._center, td.get("action"), self._half))
        return td


class ClipAction(Transform):
    """Clamp actions into the Box bounds of the action spec below this transform."""

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        spec = specs.action_spec
        if not isinstance(spec, Box):
            raise SpecError(
                f"ClipAction needs a Box action spec, got {spec!r}. Discrete actions sampled from the "
                "spec are already valid; drop the transform."
            )
        self.low, self.high = spec.low, spec.high
        return specs

    def inv(self, td: TensorDictBase) -> TensorDictBase:
        td.set("action", torch.clamp(td.get("action"), self.low, self.high))
        return td
