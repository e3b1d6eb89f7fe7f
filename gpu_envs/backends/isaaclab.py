"""Isaac Lab envs behind the backend contract: tensors stay where the simulator put them.

``gpu_envs.wrap(env)`` recognises Isaac Lab's ``DirectRLEnv`` and ``ManagerBasedRLEnv``
(and any task built on them), and its multi-agent ``DirectMARLEnv`` (an env of agent
groups: :mod:`gpu_envs.backends.isaaclab_marl`), also through gymnasium wrappers such as the
``OrderEnforcing`` that ``gym.make("Isaac-...")`` adds, WITHOUT importing isaaclab: it
looks at the module names of the classes of ``env`` and ``env.unwrapped``. An object
that follows Isaac Lab's contract without being Isaac Lab (a test fake, a port) opts in
with the class attribute ``gpu_envs_backend = "isaaclab"``.

What the backend does with Isaac Lab's contract (read from Isaac Lab 3.0's source):

* Observation groups (``"policy"``, ``"critic"``, ...) become TensorDict keys, for BOTH
  kinds of env; a group that is a dict of terms becomes nested keys
  (``("critic", "joint_pos")``). Specs come from ``single_observation_space``: the
  direct env's batched ``observation_space`` is a Box of the policy group only. The
  action spec comes from ``single_action_space``.
* Isaac Lab rewrites its reward, terminated and truncated buffers in place on every
  step; they are cloned before they are handed out, so a transition kept from step k
  does not change at step k+1. A task may also return persistent observation buffers
  (an observation manager's pre-allocated terms): with ``copy_obs=None`` (default) the
  first reset and steps hand out copies while :class:`~gpu_envs.backends.reuse.ReuseDetector`
  watches the storages of the observations; a storage returned twice means the task
  rewrites them, and every observation is cloned from then on; otherwise none is (both
  cartpoles return fresh tensors: no copy per step). ``copy_obs=True`` clones from the
  start, ``copy_obs=False`` never (for tasks known to return fresh tensors).
* Rows that end are reset inside ``step`` (same step). With ``cfg.compute_final_obs =
  True`` Isaac Lab stores the pre-reset observations in ``extras["final_obs"]``: the
  full batch, written only on steps where some row resets and never cleared. It is
  handed on as ``RawStep.final_obs`` and read ONLY on rows that ended in this step,
  where it is fresh; stale rows never leak. Without ``compute_final_obs`` the ended
  rows get placeholders and ``("next", "final_obs_missing")``.
* Truncation is ``step``'s fourth return value (time-outs).
* ``extras["log"]`` (episode metrics: means over the envs that reset, not per-env
  values) is exposed as :attr:`IsaacLabBackend.episode_log`, reachable as
  ``env.backend.episode_log``; the whole ``extras`` dict as ``env.backend.extras``.
* ``"_reset"`` masks reset a subset of rows where the env's ``reset`` accepts
  ``env_ids`` (manager-based envs); a direct env can only reset all rows at once.

Example::

    cfg = CartpoleEnvCfg(); cfg.sim.device = "cuda:0"; cfg.compute_final_obs = True
    env = gpu_envs.wrap(gym.make("Isaac-Cartpole-Direct", cfg=cfg))
    td = env.reset(seed=0)
    traj = env.rollout(64)            # ("next", "policy") holds true final observations
    env.backend.episode_log           # {"Metrics/success_rate": tensor(...)}
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from gpu_envs.backends.base import Backend, Capabilities, RawStep
from gpu_envs.backends.common import (
    check_same_step,
    claim_simulator,
    copied_flag_columns,
    flatten_obs,
    observation_spec_from_space,
)
from gpu_envs.backends.isaaclab_marl import IsaacLabMARLBackend, is_marl_env
from gpu_envs.backends.reuse import ReuseDetector
from gpu_envs.contract.errors import (
    ClosedEnvError,
    DeviceMismatchError,
    InvalidArgumentError,
    NotAnEnvError,
    ObservationError,
    ResetMaskError,
)
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Composite, spec_from_gym
from gpu_envs.utils.arguments import as_bool, as_int
from gpu_envs.utils.devices import resolve_device, same_device

# Class attribute honoured by the detector, for objects that follow Isaac Lab's contract.
BACKEND_HOOK = "gpu_envs_backend"


def _isaaclab_class(cls: type) -> bool:
    if getattr(cls, BACKEND_HOOK, None) == "isaaclab":
        return True
    modules = (getattr(c, "__module__", None) or "" for c in cls.__mro__)
    return any(module == "isaaclab" or module.startswith("isaaclab.") for module in modules)


def is_isaaclab_env(obj: Any) -> bool:
    """True if ``obj`` or ``obj.unwrapped`` is an Isaac Lab env (no isaaclab import).

    Example: ``is_isaaclab_env(gym.make("Isaac-Cartpole-Direct", cfg=cfg))`` is True.
    """
    if _isaaclab_class(type(obj)):
        return True
    try:
        base = obj.unwrapped
    except Exception:  # an object without `unwrapped`, or one whose property raises
        return False
    return base is not obj and base is not None and _isaaclab_class(type(base))


def _class_names(obj: Any) -> set[str]:
    return {c.__name__ for c in type(obj).__mro__}


def _closed(base: Any) -> bool:
    """Isaac Lab's own closed mark, ``env._is_closed`` (private; set by ``close()`` in 2.x and 3.0)."""
    return bool(getattr(base, "_is_closed", False))


def _refuse_unsupported(env: Any, base: Any, *, marl: bool = False) -> None:
    """Clear errors for Isaac Lab objects that do not follow the RL contract (``marl``: the multi-agent one)."""
    if _closed(base):
        raise ClosedEnvError(f"this {type(base).__name__} was closed; build a new Isaac Lab env to wrap.")
    names = _class_names(base)
    if "DirectMARLEnv" in names and not marl:
        raise NotAnEnvError(
            f"{type(base).__name__} is a multi-agent Isaac Lab env (DirectMARLEnv): its observations and actions "
            "are dicts per agent. Wrap it with gpu_envs.wrap(env) (an env of agent groups: IsaacLabMARLBackend), "
            "or convert it with isaaclab.envs.multi_agent_to_single_agent(env) and wrap that."
        )
    if "ManagerBasedEnv" in names and "ManagerBasedRLEnv" not in names:
        raise NotAnEnvError(
            f"{type(base).__name__} is a ManagerBasedEnv without rewards or terminations; gpu_envs wraps RL envs. "
            "Build a ManagerBasedRLEnv (a ManagerBasedRLEnvCfg with rewards and terminations) instead."
        )
    if env is not base and not _is_gym_wrapper_chain(env):
        raise NotAnEnvError(
            f"{type(env).__module__}.{type(env).__name__} wraps an Isaac Lab env with another step contract "
            "(an RL library's vec-env wrapper). Wrap the Isaac Lab env itself: gpu_envs.wrap(wrapper.unwrapped), "
            "or the gym.make(...) result."
        )


def _is_gym_wrapper_chain(env: Any) -> bool:
    import gymnasium as gym

    return isinstance(env, gym.Wrapper)


def _attr(env: Any, name: str) -> Any:
    """``name`` from the outermost gymnasium wrapper defining it, else from the env."""
    getter = getattr(env, "get_wrapper_attr", None)
    if callable(getter):
        try:
            return getter(name)
        except AttributeError:
            pass
    return getattr(env.unwrapped, name)


class IsaacLabBackend(Backend):
    """Backend over an Isaac Lab RL env (direct or manager-based), gym-wrapped or not.

    Args:
        env: the Isaac Lab env, or gymnasium wrappers around it (``gym.make`` output).
            Steps and full resets go through ``env`` (so wrappers apply); partial
            resets call ``env.unwrapped.reset(env_ids=...)``.
        device: the device the learner expects; must be the env's (``cfg.sim.device``),
            ``None`` means the env's.
        copy_obs: clone observation tensors before handing them out: ``None`` (default)
            when the first calls show the task rewrites them in place, ``True`` always,
            ``False`` never (see module doc).
    """

    name = "isaaclab"
    # extras["final_obs"] with cfg.compute_final_obs, placeholders without (an instance knows which)
    capabilities = Capabilities(final_obs=(FinalObsKind.SIMULATOR, FinalObsKind.PLACEHOLDER))

    def __init__(self, env: Any, device: torch.device | str | None = None, *, copy_obs: bool | None = None) -> None:
        base = env.unwrapped
        _refuse_unsupported(env, base)
        check_same_step(base)
        if copy_obs is not None:
            copy_obs = as_bool(copy_obs, "copy_obs")
        self.env = env
        self.base = base
        self.num_envs = as_int(_attr(env, "num_envs"), f"{type(base).__name__}.num_envs", minimum=1)
        self.device = _isaaclab_device(env, base, device)
        self.observation_spec: Composite = observation_spec_from_space(
            _attr(env, "single_observation_space"), self.device
        )
        self.action_spec = spec_from_gym(_attr(env, "single_action_space"), device=self.device)
        self.info_spec = Composite({}, device=self.device)
        self.capabilities = self.capabilities.replace(partial_reset=_accepts_env_ids(base))
        self.copy_obs = copy_obs is True  # None: decided by the first calls (_watch)
        self._keys = list(self.observation_spec.keys(include_nested=True, leaves_only=True))
        self._flat = all(isinstance(key, str) for key in self._keys)
        self.extras: dict = {}
        self._reuse = None if copy_obs is not None else ReuseDetector(self.describe(), refuse=False)
        self._last_obs: ObsDict | None = None  # served when a partial reset names no row
        compute_final_obs = getattr(getattr(base, "cfg", None), "compute_final_obs", None)
        if isinstance(compute_final_obs, bool):
            kind = FinalObsKind.SIMULATOR if compute_final_obs else FinalObsKind.PLACEHOLDER
            self.capabilities = self.capabilities.replace(final_obs=kind)
        claim_simulator(base, self)

    def describe(self) -> str:
        wrapped = "" if self.env is self.base else ", gym-wrapped"
        return f"isaaclab({type(self.base).__name__}{wrapped})"

    def snapshot_refusal(self) -> str:
        """Why Isaac Lab rows are not snapshot: no exact restore is known (``get_state`` raises this)."""
        return (
            f"{self.describe()} cannot snapshot and restore rows exactly: Isaac Lab's scene.get_state() / "
            "env.reset_to(state, env_ids) write back the articulations' and rigid objects' poses and velocities, but "
            "reset_to RESETS the rows' managers (episode_length_buf to 0, new commands, reset events and their "
            "random draws) instead of restoring them, and PhysX's solver and contact caches are not part of the "
            "state, so the continuation after a restore is not bitwise the original's, and gpu_envs does not claim "
            "it. For reset-to-state curricula where near is enough, call "
            "the Isaac Lab env's own reset_to (env.backend.base.reset_to(...)); exact snapshots work for the "
            "built-in envs, torch envs with get_state/set_state, JAX envs and gymnasium SyncVectorEnv envs."
        )

    @property
    def episode_log(self) -> dict:
        """Isaac Lab's ``extras["log"]``: episode metrics of the latest resets (scalars, not per env).

        Isaac Lab refreshes it on steps where some rows reset; between resets it keeps
        the last values. Example: ``env.backend.episode_log["Metrics/success_rate"]``.
        """
        return self.extras.get("log", {}) if isinstance(self.extras, Mapping) else {}

    # -------------------------------------------------------------- hot path
    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        if mask is None:
            obs, extras = self.env.reset(seed=seed)
        else:
            if not self.capabilities.partial_reset:
                raise ResetMaskError(
                    f"{type(self.base).__name__} (a direct Isaac Lab env) can only reset all of its envs at once: "
                    "its reset() takes no env_ids. Reset everything with env.reset(), or use a manager-based env."
                )
            # Isaac Lab resets by indices: turning the mask into them syncs once here.
            env_ids = mask.to(self.device).view(self.num_envs).nonzero().view(-1)
            if env_ids.numel() == 0 and self._last_obs is not None:
                return self._last_obs  # nothing to reset
            obs, extras = self.base.reset(env_ids=env_ids, seed=seed)
        self.extras = extras
        self._last_obs = self._obs(obs, self.copy_obs, "observation")
        if self._reuse is not None:
            self._last_obs = self._watch("reset", self._last_obs)
        return self._last_obs

    def step(self, action: torch.Tensor) -> RawStep:
        obs, reward, terminated, truncated, extras = self.env.step(action)
        self.extras = extras
        obs = self._obs(obs, self.copy_obs, "observation")
        if self._reuse is not None:
            obs = self._watch("step", obs)
        self._last_obs = obs
        final = extras.get("final_obs")
        # Fresh on the rows that ended in this step, possibly stale elsewhere: final_mask=done,
        # so the final-observation rule reads the ended rows only.
        final = None if final is None else self._obs(final, False, "extras['final_obs']")
        # Isaac Lab writes reward, terminated and truncated into the same buffers on every step: copied
        reward, terminated, truncated, done = copied_flag_columns(
            reward, terminated, truncated, self.num_envs, self.describe()
        )
        return RawStep(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            done=done,
            final_obs=final,
            final_mask=None if final is None else done,
        )

    def _watch(self, call: str, obs: ObsDict) -> ObsDict:
        """While deciding whether the task rewrites its observations: copies out, storages remembered."""
        reuse = self._reuse
        if reuse is None:  # decided already: the caller copies (copy_obs) or passes obs on as they are
            return obs
        if reuse.reused(call, list(obs.values())):
            self.copy_obs = True
        out = {key: value.clone() for key, value in obs.items()}
        if self.copy_obs or not reuse.deciding:
            self._reuse = None
        return out

    def _obs(self, obs: Any, copy: bool, where: str) -> ObsDict:
        try:
            if self._flat and isinstance(obs, Mapping):
                out = {key: obs[key] for key in self._keys}
            else:
                flat = flatten_obs(obs)
                out = {key: flat[key] for key in self._keys}
        except KeyError as err:
            got = list(obs.keys()) if isinstance(obs, Mapping) else type(obs).__name__
            declared = [_name(key) for key in self._keys]
            raise ObservationError(
                f"{type(self.base).__name__} returned an {where} without {_name(err.args[0])!r} (its groups: {got}); "
                f"its single_observation_space declares {declared}. Every observation group must be computed on "
                "every step: check the task's _get_observations() / observation manager groups."
            ) from None
        if copy:
            return {key: value.clone() for key, value in out.items()}
        return out

    def close(self) -> None:
        self.env.close()


def _name(key: Any) -> str:
    """``("critic", "joint_pos")`` -> ``"critic/joint_pos"`` (a group's term), ``"policy"`` -> ``"policy"``."""
    return "/".join(key) if isinstance(key, tuple) else str(key)


def _accepts_env_ids(base: Any) -> bool:
    try:
        return "env_ids" in inspect.signature(base.reset).parameters
    except (TypeError, ValueError):
        return False


def _isaaclab_device(env: Any, base: Any, device: torch.device | str | None) -> torch.device:
    """The Isaac Lab env's device (``cfg.sim.device``), checked against the requested one."""
    env_device = torch.device(_attr(env, "device"))
    if device is None or same_device(resolve_device(device), env_device):
        return env_device
    raise DeviceMismatchError(
        f"the Isaac Lab env {type(base).__name__} simulates on {env_device} but device={torch.device(device)} "
        f"was requested. Build it with cfg.sim.device='{torch.device(device)}' (a running Isaac Lab simulation "
        f"cannot move), or wrap it with device='{env_device}'."
    )


def isaaclab_backend(
    env: Any,
    device: torch.device | str | None = None,
    *,
    copy_obs: bool | None = None,
    group_map: Any = None,
    state: bool | None = None,
) -> Backend:
    """The backend for an Isaac Lab env: :class:`IsaacLabMARLBackend` for a ``DirectMARLEnv``, else :class:`IsaacLabBackend`.

    ``copy_obs`` is the single-agent backend's option; ``group_map`` and ``state`` the
    multi-agent one's. Example: ``isaaclab_backend(gym.make("Isaac-Pendulum-MARL-Direct", cfg=cfg))``.
    """
    base = env.unwrapped
    if not is_marl_env(base):
        if group_map is not None or state is not None:
            raise InvalidArgumentError(
                f"group_map= and state= are for multi-agent Isaac Lab envs (DirectMARLEnv); {type(base).__name__} "
                "has one agent. Leave them out."
            )
        return IsaacLabBackend(env, device, copy_obs=copy_obs)
    if copy_obs is not None:
        raise InvalidArgumentError(
            f"copy_obs= is for single-agent Isaac Lab envs; {type(base).__name__} is a DirectMARLEnv, whose "
            "observations are always copied (stacked into agent groups). Leave it out."
        )
    _refuse_unsupported(env, base, marl=True)
    return IsaacLabMARLBackend(env, _isaaclab_device(env, base, device), group_map=group_map, state=state)


class IsaacLabPlugin:
    """Registry entry: ``make("Isaac-...")`` through Isaac Lab's gym registry, ``wrap`` for its envs."""

    name = "isaaclab"

    def available(self) -> bool:
        return (
            importlib.util.find_spec("isaaclab") is not None and importlib.util.find_spec("isaaclab_tasks") is not None
        )

    def env_ids(self) -> list[str]:
        if not self.available():
            return []
        import gymnasium as gym
        import isaaclab_tasks  # noqa: F401  (registers the Isaac-* ids)  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

        return sorted(env_id for env_id, spec in gym.registry.items() if is_isaaclab_spec(spec))

    def can_make(self, env_id: str) -> bool:
        return env_id.startswith("Isaac-") and env_id in self.env_ids()

    def claims(self, env_id: str) -> bool:
        """Isaac Lab tasks in gymnasium's registry are this backend's alone (``gpu_envs.registry.may_make``)."""
        import gymnasium as gym

        spec = gym.registry.get(env_id)
        return spec is not None and is_isaaclab_spec(spec)

    def make(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device,
        *,
        cfg: Any = None,
        cfg_overrides: Sequence[str] = (),
        compute_final_obs: bool | None = None,
        copy_obs: bool | None = None,
        group_map: Any = None,
        state: bool | None = None,
        **gym_kwargs: Any,
    ) -> Backend:
        """``gym.make(env_id, cfg=cfg)`` with ``cfg.scene.num_envs`` and ``cfg.sim.device`` set.

        ``cfg=None`` loads the task's registered config (``parse_env_cfg``, with
        ``cfg_overrides`` such as ``["physics=newton_mjwarp"]``). ``compute_final_obs``
        overrides the config's flag when given. A multi-agent task
        (``"Isaac-Pendulum-MARL-Direct"``) takes ``group_map`` and ``state``
        (:class:`~gpu_envs.backends.isaaclab_marl.IsaacLabMARLBackend`).
        """
        import gymnasium as gym
        import isaaclab_tasks  # noqa: F401  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

        if cfg is None:
            from isaaclab_tasks.utils import parse_env_cfg  # pyright: ignore[reportMissingImports]  # optional: only in its own tier's venv

            cfg = parse_env_cfg(env_id, device=str(device), num_envs=num_envs, overrides=list(cfg_overrides))
        else:
            cfg.scene.num_envs = num_envs
            cfg.sim.device = str(device)
        if compute_final_obs is not None:
            cfg.compute_final_obs = compute_final_obs
        env = gym.make(env_id, cfg=cfg, **gym_kwargs)
        try:
            return isaaclab_backend(env, device, copy_obs=copy_obs, group_map=group_map, state=state)
        except BaseException:
            env.close()  # one simulation per process: a refused env must not keep it
            raise

    def detect(self, obj: Any) -> bool:
        return is_isaaclab_env(obj)

    def wrap(self, obj: Any, device: torch.device | None, **kwargs: Any) -> Backend:
        return isaaclab_backend(obj, device, **kwargs)


def is_isaaclab_spec(spec: Any) -> bool:
    """A gym registry entry whose entry point lives in an ``isaaclab*`` package."""
    entry = spec.entry_point if isinstance(spec.entry_point, str) else getattr(spec.entry_point, "__module__", "")
    return (entry or "").split(":")[0].split(".")[0].startswith("isaaclab")


PLUGIN = IsaacLabPlugin()
