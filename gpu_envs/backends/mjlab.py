"""mjlab envs behind the backend contract, with EXACT final observations mjlab never computes.

mjlab (Isaac Lab's manager-based API on MuJoCo Warp) resets ended rows inside ``step``
and keeps nothing of the state they ended in. ``gpu_envs.wrap(env)`` recognises its RL
envs -- ``mjlab.envs.ManagerBasedRlEnv`` and anything built on it (the registered tasks,
``VideoRecorder``) -- WITHOUT importing mjlab (it reads the classes' module names), and
makes every transition exact:

* **Same-step handling in gpu_envs.** The backend turns mjlab's auto-reset off
  (``env.cfg.auto_reset = False``, read by mjlab on every step). mjlab's ``step`` then
  returns the observation the episode ended in; the backend resets exactly the rows that
  ended, in the same call, with mjlab's own ``reset(env_ids=...)``, and hands on the
  pre-reset observation of every row as ``RawStep.final_obs`` (``final_mask=None``: no
  placeholders, ``final_obs_missing`` is never set) and the post-reset one as
  ``RawStep.obs``. No step is wasted, no action ignored.
* **What it costs.** ``reset(env_ids=...)`` takes indices, so the ended rows are read on
  the host once per step (one ``nonzero``); mjlab's own ``step`` already synchronises
  several times per call (its ``nonzero``/``len`` on the reset buffer), so the device
  never runs ahead anyway. On steps where rows end, mjlab's reset runs a second
  ``forward``/``sense``/observation pass (the first one made the final observations):
  ``benchmarks/bench_simulators.py`` measures the whole difference.
* **Rows that did not end keep the observation ``step`` made.** mjlab's
  ``reset(env_ids=...)`` recomputes the observations of ALL rows (drawing fresh
  observation noise on the others); the backend takes only the reset rows from it, so
  a row's next observation in a transition is exactly the root it acts on next.
* Observation groups (``"actor"``, ``"critic"``, ...) become TensorDict keys; a group
  that does not concatenate its terms becomes nested keys (``("critic", "joint_pos")``).
  mjlab's own space classes (``mjlab.utils.spaces.Box``/``Dict``, not gymnasium's) are
  converted to specs here.
* mjlab rewrites its reward and termination buffers in place on every step: they are
  copied before they are handed on. Observations are fresh tensors in mjlab 1.6; with
  ``copy_obs=None`` (default) the first calls check that
  (:class:`~gpu_envs.backends.reuse.ReuseDetector`) and copy from then on if a task
  returns a buffer twice.
* ``"_reset"`` masks reset a subset of rows (``reset(env_ids=...)``).
* ``env.backend.episode_log`` is mjlab's ``extras["log"]`` of the latest step: the step's
  own metrics merged with the episode sums of the rows reset in it (empty on steps where
  nothing is logged); ``to_rsl_rl`` hands it to rsl_rl as ``extras["log"]`` and reads
  mjlab's ``episode_length_buf`` / ``max_episode_length`` (``backend.base``).
* ``reset(seed=s)`` is mjlab's: it seeds the process-wide generators (torch, numpy,
  Warp) and resets every row. Construction-time randomisation (mjlab's ``startup``
  events: friction, masses) follows ``cfg.seed`` instead.

Example::

    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg("Mjlab-Velocity-Flat-Unitree-Go1"); cfg.scene.num_envs = 64
    env = gpu_envs.wrap(ManagerBasedRlEnv(cfg, device="cuda:0"))
    traj = env.rollout(100)       # ("next", "actor") holds true final observations
    # or: gpu_envs.make("Mjlab-Velocity-Flat-Unitree-Go1", num_envs=64, backend="mjlab")
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from gpu_envs.backends.base import Backend, Capabilities, RawStep
from gpu_envs.backends.common import NO_INFO, claim_simulator, copied_flag_columns, flatten_obs
from gpu_envs.backends.reuse import ReuseDetector
from gpu_envs.contract.errors import (
    ClosedEnvError,
    DeviceMismatchError,
    NotAnEnvError,
    ObservationError,
    UnsupportedSpaceError,
)
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Box, Composite, Spec
from gpu_envs.contract.specs.dtypes import torch_dtype
from gpu_envs.utils.arguments import as_bool, as_int
from gpu_envs.utils.devices import resolve_device, same_device

__all__ = ["MjlabBackend", "is_mjlab_env"]

# Class attribute honoured by the detector, for objects that follow mjlab's contract.
BACKEND_HOOK = "gpu_envs_backend"
# The class every mjlab RL env derives from (mjlab 1.x).
_ENV_CLASS = ("mjlab.envs.manager_based_rl_env", "ManagerBasedRlEnv")

# the mjlab envs a backend of ours has closed (mjlab keeps no mark of its own): wrapping one again is refused
_CLOSED: weakref.WeakSet = weakref.WeakSet()


def _mjlab_class(cls: type) -> bool:
    if getattr(cls, BACKEND_HOOK, None) == "mjlab":
        return True
    return any((getattr(c, "__module__", None), c.__name__) == _ENV_CLASS for c in cls.__mro__)


def is_mjlab_env(obj: Any) -> bool:
    """True if ``obj`` or ``obj.unwrapped`` is an mjlab RL env (no mjlab import).

    Example: ``is_mjlab_env(ManagerBasedRlEnv(cfg, device="cpu"))`` is True; so is it for
    mjlab's ``RslRlVecEnvWrapper`` around one, which :class:`MjlabBackend` then refuses
    with the fix (wrap the env itself).
    """
    if _mjlab_class(type(obj)):
        return True
    try:
        base = obj.unwrapped
    except Exception:  # an object without `unwrapped`, or one whose property raises
        return False
    return base is not obj and base is not None and _mjlab_class(type(base))


def _refuse_unsupported(env: Any, base: Any) -> None:
    if not _mjlab_class(type(env)):
        raise NotAnEnvError(
            f"{type(env).__module__}.{type(env).__name__} wraps an mjlab env with another step contract "
            "(an RL library's vec-env wrapper, such as mjlab's RslRlVecEnvWrapper). Wrap the mjlab env itself: "
            "gpu_envs.wrap(wrapper.unwrapped); for rsl_rl, use gpu_envs.interop.to_rsl_rl(gpu_envs.wrap(env))."
        )
    if not hasattr(base, "cfg") or not hasattr(base.cfg, "auto_reset"):
        raise NotAnEnvError(
            f"{type(base).__name__} has no cfg.auto_reset: gpu_envs needs mjlab >= 1.6, whose ManagerBasedRlEnvCfg "
            "can turn the auto-reset off (that is how the true final observations are read). Upgrade mjlab."
        )
    if base in _CLOSED:
        raise ClosedEnvError(f"this {type(base).__name__} was closed; build a new mjlab env to wrap.")


def _spec(space: Any, device: torch.device, where: str) -> Spec:
    """An mjlab space (``mjlab.utils.spaces``: Box, Dict) as a spec; gymnasium's work too."""
    children = getattr(space, "spaces", None)
    if isinstance(children, Mapping):
        return Composite(
            {name: _spec(child, device, f"{where}[{name!r}]") for name, child in children.items()}, device=device
        )
    if all(hasattr(space, name) for name in ("shape", "low", "high", "dtype")):
        return Box(space.low, space.high, tuple(space.shape), torch_dtype(str(space.dtype)), device)
    raise UnsupportedSpaceError(
        f"{where} is a {type(space).__name__} ({space!r}); gpu_envs converts mjlab's Box and Dict spaces only. "
        "Declare the observation or action term with a Box space."
    )


def _accepts_env_ids(env: Any) -> bool:
    try:
        params = inspect.signature(env.reset).parameters
    except (TypeError, ValueError):
        return False
    return "env_ids" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class MjlabBackend(Backend):
    """Backend over an mjlab ``ManagerBasedRlEnv`` (or a task / wrapper built on it).

    Args:
        env: the mjlab env. Steps and resets go through ``env`` (so a ``VideoRecorder``
            sees them); its ``unwrapped`` env's ``cfg.auto_reset`` is set to False.
        device: the device the learner expects; must be the env's, ``None`` means the env's.
        copy_obs: clone observations before handing them on: ``None`` (default) when the
            first calls show the task rewrites them in place, ``True`` always, ``False`` never.
        exact_final_obs: ``True`` (default): mjlab's auto-reset off, ended rows reset by
            this backend in the same step, true final observations. ``False``: mjlab's
            own auto-reset (``cfg.auto_reset = True``), no second observation pass and no
            host read by gpu_envs, but ended rows get placeholders and
            ``("next", "final_obs_missing")``, as Isaac Lab without ``compute_final_obs``.
    """

    name = "mjlab"
    capabilities = Capabilities(
        # WRAPPER_RESET by default (auto-reset off, ended rows reset here); PLACEHOLDER with
        # exact_final_obs=False (an instance narrows it to the one in force)
        final_obs=(FinalObsKind.WRAPPER_RESET, FinalObsKind.PLACEHOLDER),
        # Observations are mjlab's own tensors (handed on uncopied unless the task reuses them),
        # so the env compares every step's metadata (no host sync) instead of the first only.
        trusted_outputs=False,
        partial_reset=True,
    )

    def __init__(
        self,
        env: Any,
        device: torch.device | str | None = None,
        *,
        copy_obs: bool | None = None,
        exact_final_obs: bool = True,
    ) -> None:
        base = env.unwrapped
        _refuse_unsupported(env, base)
        if copy_obs is not None:
            copy_obs = as_bool(copy_obs, "copy_obs")
        self.exact_final_obs = as_bool(exact_final_obs, "exact_final_obs")
        kind = FinalObsKind.WRAPPER_RESET if self.exact_final_obs else FinalObsKind.PLACEHOLDER
        self.capabilities = self.capabilities.replace(final_obs=kind)
        if not _accepts_env_ids(env):
            env = base  # a wrapper whose reset takes no env_ids: reset through the env itself
        self.env = env
        self.base = base
        self.num_envs = as_int(base.num_envs, f"{type(base).__name__}.num_envs", minimum=1)
        self.device = self._check_device(device)
        obs_spec = _spec(base.single_observation_space, self.device, "single_observation_space")
        self.observation_spec = (
            obs_spec if isinstance(obs_spec, Composite) else Composite({"observation": obs_spec}, device=self.device)
        )
        self.action_spec = _spec(base.single_action_space, self.device, "single_action_space")
        self.info_spec = Composite({}, device=self.device)
        self.copy_obs = copy_obs is True  # None: decided by the first calls (_watch)
        self._keys = list(self.observation_spec.keys(include_nested=True, leaves_only=True))
        self._flat = all(isinstance(key, str) for key in self._keys)
        self._reuse = None if copy_obs is not None else ReuseDetector(self.describe(), refuse=False)
        self._last_obs: ObsDict | None = None
        self.extras: Mapping = {}
        self.episode_log: dict = {}
        claim_simulator(base, self)
        # Exact: from here on mjlab's step returns the observation each episode ended in;
        # the rows that ended are reset by step() below, in the same call.
        self._auto_reset_was = base.cfg.auto_reset
        base.cfg.auto_reset = not self.exact_final_obs

    # ------------------------------------------------------------------ setup
    def _check_device(self, device: torch.device | str | None) -> torch.device:
        env_device = torch.device(self.base.device)
        if device is None or same_device(resolve_device(device), env_device):
            return env_device
        raise DeviceMismatchError(
            f"the mjlab env {type(self.base).__name__} simulates on {env_device} but device={torch.device(device)} "
            f"was requested. Build it with ManagerBasedRlEnv(cfg, device='{torch.device(device)}') (a MuJoCo Warp "
            f"model cannot move), or wrap it with device='{env_device}'."
        )

    def describe(self) -> str:
        wrapped = "" if self.env is self.base else f", in {type(self.env).__name__}"
        return f"mjlab({type(self.base).__name__}{wrapped})"

    # -------------------------------------------------------------- hot path
    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        if mask is None:
            obs, extras = self.env.reset(seed=seed)
            self._set_log(extras, None)
            self._last_obs = self._watch("reset", self._obs(obs, "reset observation"))
            return self._last_obs
        # mjlab resets by indices: turning the mask into them reads it on the host here.
        mask = mask.to(self.device).view(self.num_envs)
        env_ids = mask.nonzero().view(-1)
        if env_ids.numel() == 0 and self._last_obs is not None:
            return self._last_obs  # nothing to reset
        self._last_obs = self._reset_rows(env_ids, mask, self._last_obs, seed)
        return self._last_obs

    def step(self, action: torch.Tensor) -> RawStep:
        obs, reward, terminated, truncated, extras = self.env.step(action)
        final = self._watch("step", self._obs(obs, "observation"))
        # mjlab rewrites its reward and termination buffers on every step: copied
        reward, terminated, truncated, done = copied_flag_columns(
            reward, terminated, truncated, self.num_envs, self.describe()
        )
        step_log = extras.get("log") if isinstance(extras, Mapping) else None
        if not self.exact_final_obs:  # mjlab reset the ended rows itself: placeholders for their final obs
            self._set_log(extras, None)
            self._last_obs = final
            return RawStep(
                obs=final, reward=reward, terminated=terminated, truncated=truncated, done=done, info=NO_INFO
            )
        # The one host read of the step: which rows to hand to reset(env_ids=...).
        ended = done.view(self.num_envs).nonzero().view(-1)
        if ended.numel():
            obs = self._reset_rows(ended, done, final, None, step_log)
        else:
            obs = final
            self._set_log(extras, step_log)
        self._last_obs = obs
        # final: every row's pre-reset observation (the final one where an episode ended,
        # the plain next one elsewhere), so final_mask=None; on steps without an end the
        # very same tensors as obs (never written again: mjlab builds new ones every call)
        return RawStep(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            done=done,
            final_obs=final,
            final_mask=None,
            info=NO_INFO,
        )

    def _reset_rows(
        self, env_ids: torch.Tensor, mask: torch.Tensor, keep: ObsDict | None, seed: int | None, step_log: Any = None
    ) -> ObsDict:
        """Reset ``env_ids``; their fresh observations, ``keep``'s on every other row."""
        obs, extras = self.env.reset(env_ids=env_ids, seed=seed)
        self._set_log(extras, step_log)
        fresh = self._obs(obs, "reset observation")
        if keep is None:
            return self._watch("reset", fresh)
        rows = mask.view(self.num_envs, 1)
        return {
            key: torch.where(rows.view((self.num_envs,) + (1,) * (value.dim() - 1)), value, keep[key])
            for key, value in fresh.items()
        }

    def _set_log(self, extras: Any, step_log: Any) -> None:
        """``episode_log``: the step's own metrics, then the episode sums of the rows reset after it."""
        self.extras = extras if isinstance(extras, Mapping) else {}
        log = self.extras.get("log") or {}
        if step_log and step_log is not log:
            log = {**step_log, **log}
        self.episode_log = dict(log)

    def _watch(self, call: str, obs: ObsDict) -> ObsDict:
        """Copies while deciding whether the task rewrites its observations, then only if it does."""
        if self._reuse is None:
            return {key: value.clone() for key, value in obs.items()} if self.copy_obs else obs
        if self._reuse.reused(call, list(obs.values())):
            self.copy_obs = True
        out = {key: value.clone() for key, value in obs.items()}
        if self.copy_obs or not self._reuse.deciding:
            self._reuse = None
        return out

    def _obs(self, obs: Any, where: str) -> ObsDict:
        try:
            if self._flat and isinstance(obs, Mapping):
                return {key: obs[key] for key in self._keys}
            flat = flatten_obs(obs)
            return {key: flat[key] for key in self._keys}
        except KeyError as err:
            got = list(obs.keys()) if isinstance(obs, Mapping) else type(obs).__name__
            key = err.args[0]
            raise ObservationError(
                f"{type(self.base).__name__} returned a {where} without {key!r} (its groups: {got}); its "
                f"single_observation_space declares {self._keys}. Every observation group must be computed on every call."
            ) from None

    def close(self) -> None:
        self.base.cfg.auto_reset = self._auto_reset_was
        _CLOSED.add(self.base)
        self.env.close()


class MjlabPlugin:
    """Registry entry: ``make("Mjlab-...", backend="mjlab")`` from mjlab's task registry, ``wrap`` for its envs."""

    name = "mjlab"

    def available(self) -> bool:
        return importlib.util.find_spec("mjlab") is not None

    def env_ids(self) -> list[str]:
        return list(_task_ids()) if self.available() else []

    def can_make(self, env_id: str) -> bool:
        return env_id.startswith("Mjlab-") and self.available() and env_id in _task_ids()

    def make_kwargs(self, env_id: str) -> list[str]:
        return ["cfg", "play", "copy_obs", "exact_final_obs"]

    def make(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device,
        *,
        cfg: Any = None,
        play: bool = False,
        copy_obs: bool | None = None,
        exact_final_obs: bool = True,
    ) -> Backend:
        """``ManagerBasedRlEnv(cfg, device)`` for a registered mjlab task, ``cfg.scene.num_envs = num_envs``.

        ``cfg=None`` loads the task's registered config (``play=True``: its "play" config,
        without observation noise and with endless episodes); a given ``cfg`` is used as it is.
        """
        from mjlab.envs import ManagerBasedRlEnv  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv
        from mjlab.tasks.registry import load_env_cfg  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

        if cfg is None:
            cfg = load_env_cfg(env_id, play=as_bool(play, "play"))
        cfg.scene.num_envs = num_envs
        env = ManagerBasedRlEnv(cfg, device=str(device))
        return MjlabBackend(env, device, copy_obs=copy_obs, exact_final_obs=exact_final_obs)

    def detect(self, obj: Any) -> bool:
        return is_mjlab_env(obj)

    def wrap_kwargs(self, obj: Any) -> list[str]:
        return ["copy_obs", "exact_final_obs"]

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Backend:
        return MjlabBackend(obj, device, **kwargs)


@functools.cache
def _task_ids() -> tuple[str, ...]:
    """mjlab's registered task ids (importing ``mjlab.tasks`` registers them all: seconds, so once)."""
    import mjlab.tasks  # noqa: F401  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv
    from mjlab.tasks.registry import list_tasks  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

    return tuple(list_tasks())


PLUGIN = MjlabPlugin()
