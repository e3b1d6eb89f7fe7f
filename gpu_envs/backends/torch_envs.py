"""Torch vector envs: the protocol users implement to plug their own GPU env in.

Any object with the shape of a gymnasium ``VectorEnv`` that speaks torch tensors can be
wrapped, with no numpy and no host synchronisation::

    class MyEnv:
        num_envs: int                       # N
        device: torch.device                # optional; where the tensors live
        single_observation_space: gymnasium.Space   # Box, or Dict of Boxes (groups)
        single_action_space: gymnasium.Space
        supports_reset_mask: bool = False   # optional; True if reset honours reset_mask

        def reset(self, *, seed=None, options=None) -> (obs, info): ...
        def step(self, action) -> (obs, reward, terminated, truncated, info): ...
        def close(self): ...

* ``obs`` is a tensor ``[N, *shape]`` (key ``"observation"``) or a dict of tensors, one
  per observation group (keys ``"policy"``, ``"critic"``, ...; nested dicts allowed).
* ``reward`` is ``[N]`` float; ``terminated`` and ``truncated`` are ``[N]`` bool.
* Rows that end are reset inside ``step`` (same-step auto-reset): the returned ``obs``
  is the post-reset observation there.
* The true final observations, when the env keeps them, go in ``info["final_obs"]``
  (same structure as ``obs``, the FULL batch, trusted only on rows that ended in this
  step), optionally with ``info["_final_obs"]``, a ``[N]`` bool mask of valid rows.
  ManiSkill3's ``info["final_observation"]`` / ``info["_final_observation"]`` (only on
  steps where some row ended) are read the same way. Without them, ended rows get
  placeholders and ``("next", "final_obs_missing")``.
* ``reset(options={"reset_mask": mask})`` with ``mask`` ``[N]`` bool resets only those
  rows, if the env sets ``supports_reset_mask = True``.
* Return new tensors from every call. An env that rewrites its output tensors in place
  (Isaac Gym style) is detected from its first calls -- an output whose storage an
  earlier call already returned -- and from then on its outputs are copied each step
  (``copy_buffers=None``, the default; see :mod:`gpu_envs.backends.reuse`).
  ``copy_buffers=True`` copies from the start (no detection); ``copy_buffers=False``
  refuses such an env with a clear error instead of copying.
* One env object is driven by one ``BatchedEnv`` at a time: wrapping it (or another
  wrapper around the same ``unwrapped`` env) again before closing the first is refused.
* To be replayed by a CUDA graph (``collect(..., cudagraph=True)``) an env says where its
  per-step state is: ``live_state()`` returning those tensors (live, not copies) with
  ``load_live_state(d)`` copying values into them, or a class attribute
  ``state_attributes = ("pos", "vel", ...)`` naming its tensor attributes (updated in
  place or re-bound each step). The built-in envs have ``live_state()``. (An env naming
  the two ``state_dict()``/``load_state_dict(d)``, as before, is still taken, with a
  DeprecationWarning.)
* To be snapshot and restored per row (``env.get_state(rows)`` / ``env.set_state(state,
  rows)``, :mod:`gpu_envs.core.snapshot`) an env implements
  :class:`~gpu_envs.contract.protocols.RowStateEnv`: ``get_state(rows)`` returning copies
  of those rows' state tensors ``[k, ...]`` and ``set_state(state, rows)`` writing them
  back into ``rows``. The built-in envs do; an env without both is refused with a
  :class:`~gpu_envs.contract.errors.SnapshotError`.
* Envs written in CuPy, Warp or JAX may return their own arrays instead of tensors:
  whatever implements ``__dlpack__`` crosses into torch without a copy when it lives on
  the target device, and the action goes back as an array of the same framework (see
  :mod:`gpu_envs.utils.arrays`). The framework is read once, from the first ``reset``.

Optional fast path (what the built-in envs implement): an env that already holds its
step's results in the contract's layout may also define::

        def raw_step(self, action) -> gpu_envs.contract.raw_step.RawStep: ...

returning a :class:`~gpu_envs.contract.raw_step.RawStep` (a NamedTuple: build it with
``RawStep(obs=..., reward=..., ...)``), with its meaning:

* ``obs``: a dict keyed like the observation spec (``{"observation": tensor}`` for a lone
  observation; group names, tuple keys for nested groups), post-reset on ended rows;
* ``reward`` ``[N, 1]`` float32, ``terminated``/``truncated``/``done == terminated | truncated`` ``[N, 1]`` bool;
* ``final_obs``: a dict like ``obs`` with the observation each row reached BEFORE any
  auto-reset, or ``None`` if the env does not keep final observations (ended rows then
  get placeholders); ``final_mask``: ``None`` when ``final_obs`` is valid on every row
  (the true final observation where an episode ended, the plain next one elsewhere),
  else the ``[N]`` bool rows where it is;
* ``info``: extra numeric entries ``[N, ...]`` (an empty dict when none).

Nothing is swapped, reshaped or or-ed after it: ``BatchedEnv`` calls it directly as its
step (``Backend.direct_step``; not with ``copy_buffers=True``); the plain ``step`` keeps
its gymnasium shape. Every returned tensor must be fresh (never written again by the
env), as for ``step``; a user env's outputs are checked against its specs on every step
(metadata only). A subclass overriding ``step`` (not ``raw_step``) is stepped through
its ``step``. (``step_transition``, the old name, still works, with a DeprecationWarning.)
An env whose ``raw_step`` checks its own action and outputs may say so with a
``last_step_clean`` bool (:class:`~gpu_envs.contract.protocols.SelfCheckedStep`, as the
built-in envs' native step does): on the CPU the default health checks of a hand-written
loop then skip their own look of the steps it calls clean.

Example::

    env = gpu_envs.wrap(MyEnv(num_envs=4096, device="cuda"))
    td = env.reset(seed=0)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from types import MethodType
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.backends.base import NO_INFO, Backend, Capabilities, RawStep
from gpu_envs.backends.common import (
    check_same_step,
    claim_simulator,
    env_device,
    flag_columns,
    flatten_obs,
    innermost,
    observation_spec_from_space,
)
from gpu_envs.backends.reuse import ReuseDetector
from gpu_envs.backends.torch_protocol import (
    REQUIRED_ATTRIBUTES,
    REQUIRED_METHODS,
    final_obs_in,
    looks_like_torch_vector_env,
    raw_step_of,
)
from gpu_envs.contract.errors import (
    BackendError,
    InvalidArgumentError,
    NotAnEnvError,
    ObservationError,
    RolloutError,
    SnapshotError,
)
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.protocols import OutputTargets, SelfCheckedStep
from gpu_envs.contract.specs import Composite, Spec, spec_from_gym
from gpu_envs.utils.arguments import as_bool, as_int, keywords_of
from gpu_envs.utils.arrays import framework_of, from_torch, to_torch
from gpu_envs.utils.live_state import prefixed, same_memory, under


class TorchVectorBackend(Backend):
    """Backend over any env following the torch vector env protocol (module docstring).

    A step is one of three ways of calling the env, chosen when what decides it is known
    (the framework at the first reset, reuse detection after the first calls), never per
    step: the env's own ``raw_step`` (a RawStep already: the built-in envs),
    :meth:`_step_vector` (its gymnasium-shaped ``step``) or :meth:`_step_foreign` (an env
    speaking CuPy/JAX/Warp/numpy arrays, through DLPack); while reuse of output buffers is
    being decided, :meth:`_step_deciding` wraps the chosen one. Each returns a
    :class:`RawStep`; ``step`` calls the chosen one and :meth:`direct_step` hands it to the
    env to call directly (``capabilities.direct_step``): for the built-in envs, their
    ``raw_step`` with nothing in between.
    """

    name = "torch"
    capabilities = Capabilities(
        # info["final_obs"] (or ManiSkill3's final_observation) from the env when it keeps them, placeholders otherwise
        final_obs=(FinalObsKind.SIMULATOR, FinalObsKind.PLACEHOLDER),
        direct_step=True,
    )

    def __init__(
        self,
        env: Any,
        device: torch.device | str | None = None,
        *,
        copy_buffers: bool | None = None,
        observation_spec: Composite | None = None,
        action_spec: Spec | None = None,
    ) -> None:
        if not looks_like_torch_vector_env(env):
            missing = [m for m in REQUIRED_METHODS if not callable(getattr(env, m, None))]
            missing += [a for a in REQUIRED_ATTRIBUTES if not hasattr(env, a)]
            raise NotAnEnvError(
                f"{type(env).__name__} is not a torch vector env: it lacks {', '.join(missing)}. "
                "See gpu_envs.backends.torch_envs for the protocol to implement."
            )
        check_same_step(env)
        if copy_buffers is not None:
            copy_buffers = as_bool(copy_buffers, "copy_buffers")
        if observation_spec is not None and not isinstance(observation_spec, Composite):
            raise InvalidArgumentError(
                f"observation_spec must be a gpu_envs.contract.specs.Composite of the observation keys, got "
                f"{type(observation_spec).__name__}."
            )
        if action_spec is not None and not isinstance(action_spec, Spec):
            raise InvalidArgumentError(
                f"action_spec must be a gpu_envs.contract.specs spec, got {type(action_spec).__name__}."
            )
        self.env = env
        self.num_envs = as_int(env.num_envs, f"{type(env).__name__}.num_envs", minimum=1)
        self.device = env_device(env, device)
        self.observation_spec = observation_spec or observation_spec_from_space(
            env.single_observation_space, self.device
        )
        self.action_spec = action_spec or spec_from_gym(env.single_action_space, device=self.device)
        self.info_spec = Composite({}, device=self.device)
        self.capabilities = self.capabilities.replace(
            partial_reset=bool(getattr(env, "supports_reset_mask", False)),
            # the snapshot protocol (RowStateEnv): both methods, callable
            snapshot_rows=callable(getattr(env, "get_state", None)) and callable(getattr(env, "set_state", None)),
        )
        self._reward_shape = (self.num_envs, 1)
        # copy_buffers None: detect in-place rewrites from the first calls, then copy if found
        self.copy_buffers = copy_buffers is True
        self._reuse = None if copy_buffers else ReuseDetector(self.describe(), refuse=copy_buffers is False)
        self._obs_keys = list(self.observation_spec.keys(include_nested=True, leaves_only=True))
        self._single_tensor_obs = self._obs_keys == ["observation"]
        # "torch", or the array framework (cupy, jax, warp, numpy) the env speaks; read
        # from the first reset's observation.
        self.framework: str | None = None
        # the env's raw_step (module docstring), used once the env is known to speak torch
        self._raw_step = None if copy_buffers else raw_step_of(env)
        claim_simulator(innermost(env), self)
        # the built-in envs' outputs are ours: fresh tensors in the layout of their specs (no reuse to
        # detect, nothing to compare per step); a user env's are watched
        if type(env) in builtin_envs().values():
            self._reuse = None
            kind = FinalObsKind.SIMULATOR if env.expose_final_obs else FinalObsKind.PLACEHOLDER
            self.capabilities = self.capabilities.replace(final_obs=kind, trusted_outputs=True)
        self._choose_stepper()

    def describe(self) -> str:
        return f"torch({type(self.env).__name__})"

    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        framework = self.framework
        if mask is not None and framework is not None and framework != "torch":
            mask = from_torch(mask, framework)
        options = None if mask is None else {"reset_mask": mask}
        obs, _info = self.env.reset(seed=seed, options=options)
        if self.framework is None:
            self.framework = framework_of(next(iter(flatten_obs(obs).values())))
            self._choose_stepper()
        out = self._obs(self._tensors(obs))
        if self._reuse is not None:
            out = self._watch_reset(out)
        return out

    # ------------------------------------------------------------------- step
    def step(self, action: torch.Tensor) -> RawStep:
        raw = self._step_deciding(action) if self._reuse is not None else self._step_plain(action)
        if raw.__class__ is not RawStep:
            raise self._bad_output("raw_step", raw, 8)
        return raw

    def direct_step(self) -> Callable[[torch.Tensor], RawStep]:
        """The way of stepping chosen now (class docstring): what :meth:`step` calls, handed to the env.

        For the built-in envs, their own ``raw_step``. (The functions handed out are made
        here, not kept: the backend holds no bound method of itself, so a dropped env
        frees its simulator at once.)
        """
        if self._reuse is not None:
            return MethodType(TorchVectorBackend._step_deciding, self)
        plain = self._plain
        if plain is None:
            assert self._raw_step is not None
            return self._raw_step
        return MethodType(plain, self)

    def _direct_env(self) -> Any:
        """The env, where :meth:`direct_step` is its own ``raw_step`` with nothing between; else None."""
        env = self.env
        direct = self._reuse is None and self._plain is None and getattr(self._raw_step, "__self__", None) is env
        return env if direct else None

    def self_checked_step(self) -> SelfCheckedStep | None:
        """:meth:`Backend.self_checked_step`: the env, where :meth:`direct_step` is its own checking ``raw_step``."""
        env = self._direct_env()
        return env if isinstance(env, SelfCheckedStep) else None

    def output_targets(self) -> OutputTargets | None:
        """:meth:`Backend.output_targets`: the env, where :meth:`direct_step` is its own ``raw_step`` and it takes targets."""
        env = self._direct_env()
        return env if isinstance(env, OutputTargets) else None

    def reuse_outputs(self, on: bool) -> bool:
        """:meth:`Backend.reuse_outputs` by the env's own (the built-in envs'), once no reuse detector watches its outputs."""
        reuse = getattr(self.env, "reuse_outputs", None)
        return callable(reuse) and not (on and (self._reuse is not None or self._raw_step is None)) and bool(reuse(on))

    def _choose_stepper(self) -> None:
        """Fix the way of stepping the env that holds from now on (class docstring)."""
        if self.framework not in (None, "torch"):
            self._plain = TorchVectorBackend._step_foreign
        elif self._raw_step is not None:
            self._plain = None  # the env's raw_step: a RawStep, nothing to add
        else:
            self._plain = TorchVectorBackend._step_vector

    def _step_plain(self, action: torch.Tensor) -> RawStep:
        plain = self._plain
        if plain is None:
            assert self._raw_step is not None
            return self._raw_step(action)
        return plain(self, action)

    def _step_vector(self, action: torch.Tensor) -> RawStep:
        """The env's gymnasium-shaped ``step``."""
        out = self.env.step(action)
        try:
            obs, reward, terminated, truncated, info = out
        except (TypeError, ValueError):
            raise self._bad_output("step", out, 5) from None
        return self._fields(obs, reward, terminated, truncated, info)

    def _step_foreign(self, action: torch.Tensor) -> RawStep:
        """A step of an env that speaks CuPy/JAX/Warp/numpy arrays, through DLPack."""
        framework = self.framework
        if framework is None:  # chosen only once the first reset told the framework
            raise BackendError(f"{self.describe()} stepped before its first reset told its array framework.")
        out = self.env.step(from_torch(action, framework))
        try:
            obs, reward, terminated, truncated, info = out
        except (TypeError, ValueError):
            raise self._bad_output("step", out, 5) from None
        key, final, final_mask = final_obs_in(info)
        info = {} if final is None else {key: self._tensors(final)}
        if final_mask is not None:
            info["_" + key] = to_torch(final_mask, self.device)
        obs = self._tensors(obs)
        reward, terminated, truncated = (to_torch(x, self.device) for x in (reward, terminated, truncated))
        return self._fields(obs, reward, terminated, truncated, info)

    def _step_deciding(self, action: torch.Tensor) -> RawStep:
        """One of the first steps (reuse detection): copies handed out; the plain way once decided."""
        raw = self._step_plain(action)
        if self._reuse is None:  # decided since the env took this function
            return raw
        if raw.__class__ is not RawStep:
            raise self._bad_output("raw_step", raw, 8)
        raw = self._watch_step(raw)
        self._choose_stepper()
        return raw

    def _fields(self, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any) -> RawStep:
        """A RawStep from the gymnasium-shaped outputs (flat flags, final observations in info)."""
        key, final, final_mask = final_obs_in(info)
        if self.copy_buffers:
            reward, terminated, truncated, final_mask = (
                _copy(reward),
                _copy(terminated),
                _copy(truncated),
                _copy(final_mask),
            )
        reward, terminated, truncated, done = flag_columns(
            reward, terminated, truncated, self._reward_shape, self.describe()
        )
        final_obs = None if final is None else self._obs(final, f"info[{key!r}]")
        if final_obs is not None and final_mask is None:
            final_mask = done  # the protocol: the full batch, trusted only on rows that ended
        return RawStep(self._obs(obs), reward, terminated, truncated, done, final_obs, final_mask, NO_INFO)

    def _bad_output(self, call: str, out: Any, want: int) -> BackendError:
        got = f"a tuple of {len(out)}" if type(out) is tuple else f"a {type(out).__name__}"
        what = (
            "(obs, reward, terminated, truncated, info), gymnasium >= 0.26's API"
            if want == 5
            else "gpu_envs.contract.raw_step.RawStep(obs, reward, terminated, truncated, done, final_obs, final_mask, info)"
        )
        hint = (
            " An env written for gym < 0.26 returns 4 (obs, reward, done, info): split done into terminated and truncated."
            if want == 5
            else " (The old six (obs, reward, terminated, truncated, done, next_obs) are final_obs=next_obs, "
            "final_mask=None, info={}.)"
        )
        return BackendError(
            f"{type(self.env).__name__}.{call}() returned {got}; a torch vector env returns "
            f"{'the 5 values ' if want == 5 else ''}{what}.{hint}"
        )

    # ------------------------------------------------------- reused output buffers
    def _watch_reset(self, obs: ObsDict) -> ObsDict:
        """While deciding (first calls): remember the env's outputs, hand out copies."""
        if self._watching().reused("reset", list(obs.values())):
            self._copy_from_now_on()
        out = {key: _copy(value) for key, value in obs.items()}
        self._decided()
        return out

    def _watch_step(self, raw: RawStep) -> RawStep:
        obs, reward, terminated, truncated, done, final_obs, final_mask, info = raw
        tensors = [*obs.values(), *(final_obs or {}).values(), reward, terminated, truncated, done, final_mask]
        if self._watching().reused("step", tensors):
            self._copy_from_now_on()
        # copies, the done mask kept as the same tensor where it stands for "the ended rows"
        done_copy = _copy(done)
        out = RawStep(
            {key: _copy(value) for key, value in obs.items()},
            _copy(reward),
            _copy(terminated),
            _copy(truncated),
            done_copy,
            None if final_obs is None else {key: _copy(v) for key, v in final_obs.items()},
            done_copy if final_mask is done else _copy(final_mask),
            info,
        )
        self._decided()
        return out

    def _watching(self) -> ReuseDetector:
        """The reuse detector of the first calls (only called while one decides)."""
        reuse = self._reuse
        if reuse is None:
            raise BackendError(f"{self.describe()} is no longer watching its outputs for reuse: nothing to decide.")
        return reuse

    def _copy_from_now_on(self) -> None:
        self.copy_buffers = True
        self._raw_step = None  # raw_step hands out the env's own tensors: take the copying step

    def _decided(self) -> None:
        if self.copy_buffers or not self._watching().deciding:
            self._reuse = None

    def _tensors(self, obs: Any) -> Any:
        """Observations (a tensor/array, or a dict of them) as torch tensors on the device."""
        if self.framework == "torch":
            return obs
        if isinstance(obs, Mapping):
            return {key: self._tensors(value) for key, value in obs.items()}
        return to_torch(obs, self.device)

    def _obs(self, obs: Any, where: str = "observation") -> ObsDict:
        if self._single_tensor_obs and isinstance(obs, torch.Tensor) and not self.copy_buffers:
            return {"observation": obs}  # the common case, without the generic walk
        flat = flatten_obs(obs)
        try:
            out = {key: flat[key] for key in self._obs_keys}
        except KeyError as err:
            raise ObservationError(
                f"{type(self.env).__name__} returned an {where} without key {err.args[0]!r}; "
                f"its observation space declares {self._obs_keys}. Return every group on every step."
            ) from None
        if self.copy_buffers:
            out = {key: value.clone() for key, value in out.items()}
        return out

    # ------------------------------------------------------------------ state
    def live_state(self) -> dict[str, torch.Tensor]:
        """The env's per-step state tensors, live, as ``{"env.<name>": tensor}``.

        From the env's ``state_attributes`` (tensor attribute names) if it declares them,
        else from its own ``live_state()``; an env with neither is refused, naming both.
        """
        env, names = self.env, getattr(self.env, "state_attributes", None)
        if names is not None:
            state = {name: getattr(env, name, None) for name in names}
        elif _live_state_methods(env) is not None:
            state = cast("tuple[Callable[[], Any], Callable[[Any], None]]", _live_state_methods(env))[0]()
        else:
            raise RolloutError(
                f"{type(env).__name__} does not say which tensors hold its per-step state, so a CUDA graph cannot "
                "replay it: give it live_state() (those tensors, live) and load_live_state(d) (copying values into "
                "them), or a class attribute state_attributes = ('pos', 'vel', ...) naming its tensor attributes."
            )
        for name, value in state.items():
            if not isinstance(value, torch.Tensor):
                raise RolloutError(
                    f"{type(env).__name__} state {name!r} is a {type(value).__name__}, not a torch tensor; a CUDA graph "
                    "replays device tensors only. Keep the per-step state in tensors on the env's device."
                )
        return prefixed("env", cast("dict[str, torch.Tensor]", state))  # every value checked above

    def load_live_state(self, state: dict[str, torch.Tensor]) -> None:
        """Give the env these values: through its ``load_live_state``, or by re-binding its
        declared attributes to copies (it may have handed the current tensors out)."""
        mine = under("env", self.live_state())  # validates the env's side
        values = under("env", state)
        if getattr(self.env, "state_attributes", None) is None:
            methods = _live_state_methods(self.env)
            assert methods is not None  # live_state() above refused an env without them
            methods[1](values)
            return
        if set(values) != set(mine):
            raise InvalidArgumentError(
                f"{type(self.env).__name__} state names are {sorted(mine)}; got {sorted(values)} to load."
            )
        for name, current in mine.items():
            value = values[name]
            if not same_memory(value, current):
                setattr(self.env, name, value.clone())

    # ------------------------------------------------------------ row snapshots
    def get_state(self, rows: torch.Tensor) -> TensorDictBase:
        """The env's ``get_state(rows)`` (the RowStateEnv protocol) as a TensorDict ``[len(rows)]``."""
        if not self.capabilities.snapshot_rows:
            raise SnapshotError(self.snapshot_refusal())
        state = self.env.get_state(rows)
        k = int(rows.shape[0])
        if not isinstance(state, (Mapping, TensorDictBase)):
            raise BackendError(
                f"{type(self.env).__name__}.get_state(rows) returned a {type(state).__name__}; the snapshot protocol "
                "(gpu_envs.contract.protocols.RowStateEnv) returns a dict of tensors [len(rows), ...]."
            )
        for name, value in (
            state.items(include_nested=True, leaves_only=True) if isinstance(state, TensorDictBase) else state.items()
        ):
            if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[0] != k:
                got = f"{tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
                raise BackendError(
                    f"{type(self.env).__name__}.get_state(rows) entry {name!r} is {got}; every entry must be a torch "
                    f"tensor with one row per requested row ([{k}, ...])."
                )
        return TensorDict(state.to_dict() if isinstance(state, TensorDictBase) else dict(state), batch_size=[k])

    def set_state(self, state: TensorDictBase, rows: torch.Tensor) -> None:
        if not self.capabilities.snapshot_rows:
            raise SnapshotError(self.snapshot_refusal())
        self.env.set_state(state, rows)

    def snapshot_refusal(self) -> str:
        return (
            f"{type(self.env).__name__} cannot snapshot and restore rows: it lacks get_state(rows) and/or "
            "set_state(state, rows). Add both (the protocol gpu_envs.contract.protocols.RowStateEnv: return copies "
            "of those rows' state tensors, write them back with index_copy_), as the built-in envs do."
        )

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def _live_state_methods(env: Any) -> tuple[Callable[[], Any], Callable[[Any], None]] | None:
    """The env's ``(live_state, load_live_state)``, or its old-named ``(state_dict, load_state_dict)`` (deprecated), or None."""
    for read, load in (("live_state", "load_live_state"), ("state_dict", "load_state_dict")):
        reader, loader = getattr(env, read, None), getattr(env, load, None)
        if callable(reader) and callable(loader):
            if read == "state_dict":
                warnings.warn(
                    f"{type(env).__name__} names its live per-step state state_dict()/load_state_dict(); the torch "
                    "protocol now calls them live_state()/load_live_state(); the old names go away in the next release.",
                    DeprecationWarning,
                    stacklevel=3,
                )
            return cast("Callable[[], Any]", reader), cast("Callable[[Any], None]", loader)
    return None


def builtin_envs() -> dict[str, type]:
    """The built-in envs by id (imported late: ``gpu_envs.builtin`` sits above the backends)."""
    from gpu_envs.builtin import BUILTIN_ENVS

    return BUILTIN_ENVS


def _copy(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


class TorchPlugin:
    """Registry entry: built-in torch envs for ``make``, protocol envs for ``wrap``."""

    name = "torch"
    accepts_env_index_offset = True  # the built-in envs take it (make(..., distributed=True) shards seeds)

    def available(self) -> bool:
        return True

    def env_ids(self) -> list[str]:
        return sorted(builtin_envs())

    def can_make(self, env_id: str) -> bool:
        return env_id in self.env_ids()

    def make(self, env_id: str, num_envs: int, device: torch.device, **kwargs: Any) -> Backend:
        return TorchVectorBackend(builtin_envs()[env_id](num_envs=num_envs, device=device, **kwargs))

    def make_kwargs(self, env_id: str) -> list[str] | None:
        """Options of a built-in env (``make`` takes ``seed`` itself)."""
        return keywords_of(builtin_envs()[env_id].__init__, skip=("self", "num_envs", "device", "seed"))

    def min_bytes_per_env(self, env_id: str) -> int:
        """A lower bound of one built-in env's memory: its state, held twice (state and observation)."""
        return 8 * int(getattr(builtin_envs()[env_id], "state_size", 1)) + 8

    def wrap_kwargs(self, obj: Any) -> list[str] | None:
        return keywords_of(TorchVectorBackend.__init__, skip=("self", "env", "device"))

    def detect(self, obj: Any) -> bool:
        return looks_like_torch_vector_env(obj)

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Backend:
        return TorchVectorBackend(obj, device, **kwargs)


PLUGIN = TorchPlugin()
