"""``to_torchrl(env)``: any gpu_envs env as a torchrl ``EnvBase``, for its collectors, transforms and losses.

The TensorDicts already use torchrl's keys, so the adapter is thin: it converts the
specs once (batched, as torchrl's envs declare them) and hands torchrl the env's own
TensorDicts. Transitions are what ``VecGymEnvTransform`` promises: ``("next", obs)``
holds the TRUE final observation on rows that ended, and the root of the next step
(what ``step_and_maybe_reset`` and torchrl's ``maybe_reset`` give) the post-reset one.

* ``step_and_maybe_reset`` (what torchrl's ``Collector`` calls) is the env's own: no
  ``reset`` round trip, no host sync to find out whether a row ended.
* ``reset(td)`` with a ``"_reset"`` mask right after a ``step`` (torchrl's generic
  ``maybe_reset``, e.g. under a torchrl ``TransformedEnv``) serves the rows the env
  already reset from its cache instead of resetting them twice.
* ``("next", "final_obs_missing")`` (True where a backend could not give the final
  observation and a placeholder stands in) and the env's info entries are declared in
  the observation spec; roots carry them as False / zeros, as torchrl's step_mdp expects.
  A gymnasium backend discovers its info entries at its first step: they join the
  spec then (with a warning, as a Collector built earlier has no room for them);
  declare them with ``info_spec=`` to have them from the start.
* Placeholders (NaN by default) stand where a backend cannot give a final
  observation; they lie outside a bounded observation spec, so torchrl's
  ``check_env_specs`` flags them when its rollout meets one, as it does for its own
  native-autoreset placeholders. Unbounded observations (Isaac Lab's) are unaffected.
* Spec kinds: ``Box`` -> ``Bounded`` (``Unbounded`` when no bound is finite),
  ``Discrete`` -> ``Categorical``, ``MultiDiscrete`` -> ``MultiCategorical`` (an
  integer ``Bounded`` where ``start != 0``), ``Binary`` -> ``Binary``, ``OneHot`` ->
  ``OneHot``, ``Composite`` -> ``Composite``; done flags are ``Categorical(2, bool)``
  as in torchrl's own envs.

Example::

    from torchrl.collectors import Collector
    from torchrl.envs import StepCounter, TransformedEnv
    from gpu_envs.interop import to_torchrl

    env = TransformedEnv(to_torchrl(gpu_envs.make("CartPole-v1", num_envs=64)), StepCounter())
    for batch in Collector(env, policy, frames_per_batch=64 * 32, total_frames=10**5):
        ...   # batch: TensorDict [64, 32], ("next", "observation") the true final ones
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.contract.errors import SpecError
from gpu_envs.contract.groups import group_entry_keys
from gpu_envs.contract.specs import Binary, Box, Composite, Discrete, MultiDiscrete, OneHot, Spec
from gpu_envs.interop.conversions import require_env, simulator_of
from gpu_envs.interop.libraries import require
from gpu_envs.utils.arguments import as_seed
from gpu_envs.utils.tensordicts import set_entry

torchrl_data = require("torchrl.data", package="torchrl", extra="torchrl", consumer="to_torchrl")
torchrl_envs = require("torchrl.envs", package="torchrl", extra="torchrl", consumer="to_torchrl")

__all__ = ["TorchRLEnv", "to_torchrl", "torchrl_spec"]

MISSING_KEY = "final_obs_missing"


def torchrl_spec(spec: Spec) -> Any:
    """The torchrl ``TensorSpec`` equal to ``spec``: same shape (batch dims included), dtype, device and range.

    Example::

        >>> from gpu_envs.contract.specs import Discrete
        >>> torchrl_spec(Discrete(3).expand(8))
        Categorical(
            shape=torch.Size([8]),
            space=CategoricalBox(n=3),
            ...)
    """
    shape, device, dtype = spec.shape, spec.device, spec.dtype
    if isinstance(spec, Composite):
        entries = {key: torchrl_spec(value) for key, value in spec.items()}
        return torchrl_data.Composite(entries, shape=shape, device=device)
    if isinstance(spec, Box):
        if not (spec.bounded_below.any() or spec.bounded_above.any()):
            return torchrl_data.Unbounded(shape=shape, device=device, dtype=dtype)
        return torchrl_data.Bounded(spec.low, spec.high, shape=shape, device=device, dtype=dtype)
    if isinstance(spec, Discrete):
        if spec.start == 0:
            return torchrl_data.Categorical(spec.n, shape=shape, device=device, dtype=dtype)
        return torchrl_data.Bounded(spec.start, spec.start + spec.n - 1, shape=shape, device=device, dtype=dtype)
    if isinstance(spec, MultiDiscrete):
        if bool((spec.start == 0).all()):
            return torchrl_data.MultiCategorical(spec.nvec, shape, device, dtype, remove_singleton=False)
        return torchrl_data.Bounded(spec.start, spec.start + spec.nvec - 1, shape=shape, device=device, dtype=dtype)
    if isinstance(spec, OneHot):  # before Binary, its base class
        return torchrl_data.OneHot(spec.n, shape=shape, device=device, dtype=dtype)
    if isinstance(spec, Binary):
        return torchrl_data.Binary(shape[-1] if shape else 1, shape=shape, device=device, dtype=dtype)
    raise SpecError(f"to_torchrl cannot convert a {type(spec).__name__} spec ({spec!r}) to a torchrl spec.")


def _done_spec(full_done_spec: Composite, batch_size: torch.Size, device: torch.device) -> Any:
    """Every done flag (the env's three, each agent group's): ``Categorical(2, bool)``, as in torchrl's own envs."""
    out = torchrl_data.Composite(shape=batch_size, device=device)
    for key, leaf in full_done_spec.items(include_nested=True, leaves_only=True):
        out[key] = torchrl_data.Categorical(2, leaf.shape, device, torch.bool)
    return out


class TorchRLEnv(torchrl_envs.EnvBase):
    """A gpu_envs env seen as a torchrl ``EnvBase`` (build it with :func:`to_torchrl`).

    Attributes:
        env: the wrapped :class:`~gpu_envs.BatchedEnv` (or ``TransformedEnv``); closing
            this torchrl env closes it, garbage-collecting this one does not.
    """

    def __init__(self, env: Any) -> None:
        super().__init__(device=env.device, batch_size=env.batch_size)
        self.env = env
        observation = torchrl_spec(env.observation_spec)
        extras = Composite({MISSING_KEY: Binary(1, device=env.device)}, device=env.device)
        self._extras_spec = extras.expand(*env.batch_size)
        # an env of agent groups: each agent's rewards and flags are reward and done keys, not extras
        self.group_map: dict[str, list[str]] = dict(getattr(env, "group_map", None) or {})
        self._not_extras = set(group_entry_keys(self.group_map)) - {(g, MISSING_KEY) for g in self.group_map}
        self._add_extras(observation, env.info_spec)
        self.observation_spec = observation
        if self.group_map:  # torchrl's multi-agent layout: (group, "action"), (group, "reward"), (group, "done"), ...
            self.full_action_spec = torchrl_spec(env.full_action_spec)
            self.full_reward_spec = torchrl_spec(env.full_reward_spec)
        else:
            self.action_spec = torchrl_spec(env.action_spec)
            self.reward_spec = torchrl_spec(env.reward_spec)
        self.full_done_spec = _done_spec(env.full_done_spec, env.batch_size, env.device)
        self._seed: int | None = None
        self._last_done: torch.Tensor | None = None  # ("next", "done") of the latest plain step
        self._info_known = False
        self.is_closed = False

    # ------------------------------------------------------------------ specs
    def _add_extras(self, observation: Any, info: Composite) -> None:
        """Declare ``final_obs_missing`` and the info entries: they ride along with the observations."""
        for key, leaf in info.items(include_nested=True, leaves_only=True):
            if key not in self._extras_spec and key not in self._not_extras:
                self._extras_spec[key] = leaf
        for key, leaf in self._extras_spec.items(include_nested=True, leaves_only=True):
            observation[key] = torchrl_spec(leaf)
        self._reset_extras = self._extras_spec.zero()
        # leaves: a group's extras join the group's sub-TensorDict of the root, never replace it
        self._reset_extras_items = dict(self._reset_extras.items(include_nested=True, leaves_only=True))

    def _sync_info_spec(self, root: TensorDictBase) -> None:
        """Info entries a backend discovers at its first step join the observation spec then.

        ``root`` (this first step's input, from a reset that did not know them yet) gets
        them as zeros, so the transitions of a rollout or a collector stack alike.
        """
        self._info_known = True
        info = self.env.info_spec
        new = [
            key
            for key in info.keys(include_nested=True, leaves_only=True)
            if key not in self._extras_spec and key not in self._not_extras
        ]
        if not new:
            return
        locked = self.is_spec_locked
        self.set_spec_lock_(False)
        self._add_extras(self.observation_spec, info)
        self.set_spec_lock_(locked)
        self.empty_cache()
        for key in new:
            root.set(key, self._reset_extras.get(key))
        warnings.warn(
            f"the env reported info entries {new} at its first step, after torchrl read its specs: they are in "
            "observation_spec from now on, but a torchrl Collector built before this step drops them. Declare them "
            "up front (gpu_envs.wrap(venv, info_spec=Composite(...))) or step the env once before to_torchrl().",
            stacklevel=4,
        )

    # --------------------------------------------------------------- torchrl API
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        seed, self._seed = self._seed, None
        mask = None if tensordict is None else tensordict.get("_reset", None)
        last_done, self._last_done = self._last_done, None
        if mask is not None and last_done is not None and seed is None and not getattr(self.env, "interrupted", False):
            # torchrl's maybe_reset after a step: the rows that ended are already reset
            already = not bool((mask.view_as(last_done) & ~last_done).any())
            if already:
                return self.env.root().update(self._reset_extras)
        root = self.env.reset(seed=seed, td=tensordict)
        return root.update(self._reset_extras)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        nxt = self.env.step(tensordict).get("next")
        if not self._info_known:
            self._sync_info_spec(tensordict)
        self._last_done = nxt.get("done")
        return nxt

    def _step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """The env's own step_and_maybe_reset: the ended rows are already reset, nothing to sync or redo."""
        if tensordict.device != self.device:
            tensordict = tensordict.to(self.device)
        if "_step" in tensordict:  # partial steps: torchrl's generic path says what it supports
            return super()._step_and_maybe_reset(tensordict)
        tensordict, root = self.env.step_and_maybe_reset(tensordict)
        if not self._info_known:
            self._sync_info_spec(tensordict)
        self._last_done = None
        # torchrl's step_mdp, given the env's root: its observations and flags, the extras as
        # False/zeros, and every other root entry of this step (the action, the policy's own keys)
        carried = {key: value for key, value in tensordict.items() if key != "next" and key not in root}
        carried.update(self._reset_extras_items)
        if type(root) is TensorDict:  # the env just built it: skip update()'s re-validation
            for key, value in carried.items():
                if isinstance(key, str):
                    set_entry(root, key, value)
                else:
                    root.set(key, value)
        else:
            root.update(carried)
        return tensordict, root

    def _set_seed(self, seed: int | None) -> None:
        """Seed the next reset (torchrl's ``env.set_seed(seed)``); checked now, as every seed is."""
        self._seed = as_seed(seed)

    @property
    def unwrapped(self) -> Any:
        """The simulator behind the gpu_envs env (the built-in env, the Isaac Lab or mjlab env, ...), what
        trainers' runners read (mjlab's ``MjlabOnPolicyRunner.save``: ``env.unwrapped.common_step_counter``)."""
        return simulator_of(self.env)

    def close(self, *, raise_if_closed: bool = True) -> None:
        self.is_closed = True
        self.env.close()

    def __del__(self) -> None:
        # torchrl closes envs when they are garbage-collected; the gpu_envs env may outlive this view
        pass


def to_torchrl(env: Any) -> TorchRLEnv:
    """``env`` (any :class:`~gpu_envs.BatchedEnv`, transformed or not) as a torchrl ``EnvBase``.

    Batch size ``env.batch_size``, device ``env.device``, torchrl specs converted from
    the env's batched specs. torchrl's ``check_env_specs``, ``Collector``,
    ``TransformedEnv`` and ``ProbabilisticActor(spec=...)`` accept it.

    Example::

        tenv = to_torchrl(gpu_envs.make("Pendulum-v1", num_envs=256))
        torchrl.envs.utils.check_env_specs(tenv)
        data = tenv.rollout(100, break_when_any_done=False)     # [256, 100]
    """
    require_env(env, "to_torchrl", groups=True)
    return TorchRLEnv(env)
