"""An env's specs both ways: per env (``single_*``) and batched (torchrl's convention).

Backends and transforms describe ONE env (``batch_shape == ()``), as gymnasium's
``single_*`` spaces do. Learners written for torchrl expect the env's specs to carry
the batch dims (``env.action_spec.shape == env.batch_size + per-env shape``), so that
``td["action"] = env.action_spec.rand()`` is a whole batch. :class:`BatchedSpecs` gives
an env both from the per-env specs it is built with.

Example::

    class MyEnv(BatchedSpecs):
        def __init__(self, backend):
            self.batch_size = torch.Size([backend.num_envs])
            self._set_specs(backend.observation_spec, backend.action_spec, reward, done, info)

    env.single_action_spec.shape      # (2,)
    env.action_spec.shape             # (N, 2)
"""

from __future__ import annotations

import torch

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.specs.base import Spec
from gpu_envs.contract.specs.composite import Composite


def batched(spec: Spec, batch_size: torch.Size) -> Spec:
    """``spec`` with ``batch_size`` prepended as batch dims (``spec.expand(*batch_size, *spec.shape)``)."""
    return spec.expand(*batch_size, *spec.shape)


class BatchedSpecs:
    """Mixin: ``single_*`` specs (per env) and the batched ``*_spec`` derived from them.

    Attributes set by :meth:`_set_specs`: ``single_observation_spec``,
    ``single_action_spec``, ``single_reward_spec``, ``single_done_spec``,
    ``single_info_spec`` (per env) and ``observation_spec`` (a Composite of shape
    ``batch_size``, leaves ``[*batch_size, *obs]``), ``action_spec``, ``reward_spec``,
    ``done_spec`` (batched). ``info_spec`` is batched on every read, because a backend
    may discover its info entries at the first step and add them to its per-env spec.
    """

    batch_size: torch.Size
    single_info_spec: Composite

    def _set_specs(self, observation: Composite, action: Spec, reward: Spec, done: Composite, info: Composite) -> None:
        named = {"observation": observation, "action": action, "reward": reward, "done": done, "info": info}
        for name, spec in named.items():
            if spec.batch_shape:
                raise SpecError(
                    f"the {name} spec given to the env already has batch dims {tuple(spec.batch_shape)}: "
                    f"{spec!r}. Backends and transforms declare ONE env's spec; pass spec.unbatched()."
                )
        self.single_observation_spec = observation
        self.single_action_spec = action
        self.single_reward_spec = reward
        self.single_done_spec = done
        self.single_info_spec = info
        self.observation_spec = batched(observation, self.batch_size)
        self.action_spec = batched(action, self.batch_size)
        self.reward_spec = batched(reward, self.batch_size)
        self.done_spec = batched(done, self.batch_size)

    @property
    def info_spec(self) -> Composite:
        """The info entries (``("next", key)``) with the batch dims, as of now."""
        return batched(self.single_info_spec, self.batch_size)  # type: ignore[return-value]

    # torchrl's full_*_spec: every entry of a kind, keyed like the TensorDict (agent groups' included)
    @property
    def full_action_spec(self) -> Composite:
        """Every action entry: ``td.update(env.full_action_spec.rand())`` draws all of them (every group's)."""
        return _keyed(self.action_spec, "action", self.batch_size)

    @property
    def full_observation_spec(self) -> Composite:
        """Every observation entry of a root (``observation_spec`` itself)."""
        return self.observation_spec  # type: ignore[return-value]  # always a Composite

    @property
    def full_reward_spec(self) -> Composite:
        """Every reward entry under ``"next"``: ``"reward"`` and each agent group's ``(group, "reward")``."""
        return _with_group_entries(_keyed(self.reward_spec, "reward", self.batch_size), self.info_spec, ("reward",))

    @property
    def full_done_spec(self) -> Composite:
        """Every done flag under ``"next"``: the env's three and each agent group's ``(group, "done")``, ..."""
        return _with_group_entries(self.done_spec, self.info_spec, ("done", "terminated", "truncated"))  # type: ignore[arg-type]


def _keyed(spec: Spec, key: str, batch_size: torch.Size) -> Composite:
    """``spec`` as a Composite keyed like the TensorDict: itself if it is one, else ``{key: spec}``."""
    if isinstance(spec, Composite):
        return spec
    return Composite({key: spec}, shape=batch_size, device=spec.device)


def _with_group_entries(spec: Composite, info: Composite, names: tuple[str, ...]) -> Composite:
    """A copy of ``spec`` with every ``(group, name)`` entry of ``info`` (agent groups' rewards or flags) added."""
    out = Composite({str(k): v for k, v in spec.items()}, shape=spec.shape, device=spec.device)
    for key, leaf in info.items(True, True):
        if isinstance(key, tuple) and len(key) == 2 and key[1] in names:
            out[key] = leaf
    return out


def require_scalar_reward(shape: tuple[int, ...] | torch.Size, who: str) -> None:
    """Refuse a vector reward (one env's ``shape`` other than ``()``/``(1,)``) where ``who`` needs one number.

    Multi-objective envs (``gpu_envs.backends.mo_gymnasium``) give ``[N, K]`` rewards;
    learners, GAE and episode returns need a scalar, so the error names the two fixes.

    Example: ``require_scalar_reward(env.single_reward_spec.shape, "EpisodeStats")``.
    """
    shape = tuple(shape)
    if shape in ((), (1,)):
        return
    raise SpecError(
        f"{who} needs one reward per step, but this env's reward has shape {shape} per env: a vector of objectives "
        "(a multi-objective env such as MO-Gymnasium's). Scalarise it first: TransformedEnv(env, "
        f"ScalarizeReward(weights)) with {shape[-1]} weights (gpu_envs.transforms), or wrap the env in "
        "mo_gymnasium.wrappers.LinearReward before gpu_envs.wrap()."
    )
