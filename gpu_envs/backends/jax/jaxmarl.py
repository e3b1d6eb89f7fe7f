"""JaxMARL envs through the JAX backend, as envs of agent groups: detection, spaces, ``make`` by id.

``gpu_envs.wrap(jaxmarl.make("MPE_simple_spread_v3"), num_envs=N)`` and
``gpu_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=N, **env_kwargs)`` run N copies of
a JaxMARL ``MultiAgentEnv`` in one jitted XLA call per step
(:mod:`gpu_envs.backends.jax.jaxmarl_core`) and hand them over in torchrl's multi-agent
layout (:mod:`gpu_envs.contract.groups`):

* **Groups.** The agents (``env.agents``) are grouped as torchrl groups them (``agent_0``,
  ``agent_1`` share ``"agents"``; ``adversary_0`` goes to ``"adversary"``; agents whose
  spaces differ get a group each; ``group_map=`` chooses otherwise). JaxMARL's own space
  classes become gpu_envs specs (:func:`spec_from_jaxmarl`): ``(group, "observation")``
  ``[N, A, *obs]``, ``(group, "action")`` ``[N, A, *act]`` (a ``Discrete(n)`` agent:
  ``[N, A]`` int64). Observations that belong to no agent (SMAX's ``"world_state"``) are
  env-level keys ``[N, *obs]``.
* **Exact final observations.** JaxMARL's own ``env.step`` auto-resets when
  ``dones["__all__"]`` and DROPS the final observation. gpu_envs steps with
  ``env.step_env`` (no reset) and resets exactly the rows whose episode ended with
  ``env.reset``, selected per row, in the same call: the transition holds every agent's TRUE
  final observation, the next root the reset one.
* **Rewards and flags.** ``("next", group, "reward")`` ``[N, A, 1]`` is each agent's,
  ``("next", "reward")`` ``[N, 1]`` their sum (the team reward). The env-level done is
  JaxMARL's ``dones["__all__"]``; each agent's done is its ``dones[agent]`` (or its env's).
* **terminated / truncated.** JaxMARL has one ``done`` per agent and no split. What can be
  told: every MPE env (``step_env`` of ``jaxmarl.environments.mpe``) ends an episode only
  at its horizon (``done = state.step >= max_steps``, checked before the step is counted,
  so an episode lasts ``max_steps + 1`` steps; no other ending exists in its code), so its
  endings are ``truncated`` and never ``terminated``. What cannot be told: for
  every other JaxMARL env (SMAX, Overcooked, Hanabi, ...) a time limit and a task's own
  end look the same from outside, so its endings are reported as ``terminated`` (a
  learner then does not bootstrap them: safe for a task's end, biased for a time limit).
  ``done_as="truncated"`` / ``"terminated"`` declares it yourself. On a row that did not
  end, an agent JaxMARL marks done (a SMAX unit that died) is ``terminated``; on a row
  that ended, every agent's flags are the env's.
* Keys: row ``i`` starts from ``fold_in(PRNGKey(seed), i)``; a reset does ``key, sub =
  split(key)`` and ``env.reset(sub)``; a step does ``key, sub = split(key)`` and then what
  JaxMARL's own ``env.step(sub, ...)`` does: ``key_step, key_reset = split(sub)``,
  ``env.step_env(key_step, ...)``, and ``env.reset(key_reset)`` on a row that ended. So
  row ``i`` is JaxMARL's ``env.step`` driven with that chain, except that the final
  observation is kept. Masked resets (``"_reset"``) and row snapshots work.

JaxMARL's wrappers (``LogWrapper``, ``MPELogWrapper``, ``CTRolloutManager``, ...) are refused:
they step with JaxMARL's auto-reset, which drops the final observation; wrap the env
itself and count returns with gpu_envs' ``EpisodeStats``.

Options: ``num_envs``, ``group_map``, ``done_as`` (``"auto"``), ``reset_batch`` (how many ended
rows a step resets by gathering them; default ``N / 8``, at least 4, every row up to
N = 8), ``expose_info`` (JaxMARL's numeric per-row ``infos`` as ``("next", "info", key)``).

Detection never imports JAX or JaxMARL: it looks at class modules.

Example (JaxMARL 0.2 prints a line about its optional submodules when first imported, then sets
``sys.stdout`` to the terminal's: ``redirect_stdout`` hides the line and puts the stream back):

>>> import contextlib, io
>>> with contextlib.redirect_stdout(io.StringIO()):
...     import jaxmarl
>>> import gpu_envs
>>> env = gpu_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=64, device="cpu", seed=0)
>>> env.group_map
{'agents': ['agent_0', 'agent_1', 'agent_2']}
>>> td = env.reset().update(env.full_action_spec.rand())
>>> td, root = env.step_and_maybe_reset(td)
>>> td["next", "agents", "observation"].shape, td["next", "agents", "reward"].shape, td["next", "reward"].shape
(torch.Size([64, 3, 18]), torch.Size([64, 3, 1]), torch.Size([64, 1]))
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import numpy as np
import torch

from gpu_envs.backends.jax.backend import prepare_jax
from gpu_envs.contract.errors import InvalidArgumentError, NotAnEnvError, UnknownEnvError, UnsupportedSpaceError
from gpu_envs.contract.specs import Box, Composite, Discrete, MultiDiscrete, Spec, torch_dtype
from gpu_envs.utils.arguments import as_int

__all__ = [
    "CORE_OPTIONS",
    "DONE_AS",
    "JAXMARL_PREFIX",
    "is_jaxmarl_env",
    "jaxmarl_env_ids",
    "jaxmarl_installed",
    "jaxmarl_refusal",
    "make_jaxmarl_core",
    "make_jaxmarl_env",
    "spec_from_jaxmarl",
]

JAXMARL_PREFIX = "jaxmarl/"
DONE_AS = ("auto", "truncated", "terminated")
CORE_OPTIONS = ("group_map", "done_as", "reset_batch")  # make_jaxmarl_core's, besides num_envs

_ENV = ("jaxmarl.environments.multi_agent_env", "MultiAgentEnv")
_WRAPPERS = "jaxmarl.wrappers."
_MPE = "jaxmarl.environments.mpe."
_SPACES = "jaxmarl.environments.spaces"


def _classes(obj: Any) -> set[tuple[str, str]]:
    return {(c.__module__, c.__qualname__) for c in type(obj).__mro__}


def is_jaxmarl_env(obj: Any) -> bool:
    """A JaxMARL ``MultiAgentEnv`` (by its class's module: JaxMARL is not imported to find out)."""
    return _ENV in _classes(obj)


def jaxmarl_refusal(obj: Any) -> str | None:
    """The error message for a JaxMARL wrapper gpu_envs refuses, or None if ``obj`` is not one."""
    wrapper = next((c for c in type(obj).__mro__ if c.__module__.startswith(_WRAPPERS)), None)
    if wrapper is None:
        return None
    return (
        f"{type(obj).__name__} is a JaxMARL wrapper ({wrapper.__module__}.{wrapper.__qualname__}): it steps with "
        "JaxMARL's own auto-reset, which drops the final observation, and gpu_envs would skip its logic. Wrap the "
        "MultiAgentEnv itself and gpu_envs batches, jits and resets it exactly: "
        "gpu_envs.wrap(jaxmarl.make(name), num_envs=N) or gpu_envs.make('jaxmarl/<name>', num_envs=N); count "
        "episode returns with gpu_envs.transforms.EpisodeStats."
    )


# ----------------------------------------------------------------------- spaces
def spec_from_jaxmarl(space: Any, device: torch.device | str = "cpu", *, action: bool = False) -> Spec:
    """A gpu_envs spec for one of JaxMARL's spaces (``jaxmarl.environments.spaces``), one agent's.

    ``Box`` -> :class:`Box` (its bounds broadcast to its shape), ``Discrete(n)`` ->
    :class:`Discrete`, ``MultiDiscrete`` -> :class:`MultiDiscrete`, ``Dict`` / ``Tuple`` ->
    :class:`Composite`. Integers keep the space's dtype (what the env's observations
    hold), except in an ``action`` space: int64 there, as policies emit them (JAX is handed
    int32).

    Example:

    >>> import contextlib, io
    >>> with contextlib.redirect_stdout(io.StringIO()):  # JaxMARL's first-import message (module docstring)
    ...     import jaxmarl
    >>> env = jaxmarl.make("MPE_simple_spread_v3")
    >>> spec_from_jaxmarl(env.action_space("agent_0"), action=True)
    Discrete(n=5, dtype=int64, device=cpu)
    >>> spec_from_jaxmarl(env.observation_space("agent_0")).shape
    torch.Size([18])
    """
    kind = next((c.__name__ for c in type(space).__mro__ if c.__module__ == _SPACES), None)
    integer = torch.int64 if action else torch_dtype(np.dtype(getattr(space, "dtype", np.int32)))
    if kind == "Box":
        shape = tuple(int(d) for d in space.shape)
        dtype = torch_dtype(np.dtype(space.dtype))
        low = np.broadcast_to(np.asarray(space.low, dtype=np.float64), shape)
        high = np.broadcast_to(np.asarray(space.high, dtype=np.float64), shape)
        return Box(torch.as_tensor(low.copy()), torch.as_tensor(high.copy()), shape, dtype, device)
    if kind == "Discrete":
        return Discrete(int(space.n), integer, device)
    if kind == "MultiDiscrete":
        return MultiDiscrete(np.asarray(space.num_categories).astype(np.int64), integer, device)
    if kind == "Dict":
        children = {str(k): spec_from_jaxmarl(v, device, action=action) for k, v in space.spaces.items()}
        return Composite(children, device=device)
    if kind == "Tuple":
        children = {str(i): spec_from_jaxmarl(v, device, action=action) for i, v in enumerate(space.spaces)}
        return Composite(children, device=device, tuple_like=True)
    raise UnsupportedSpaceError(
        f"{type(space).__module__}.{type(space).__name__} is not one of JaxMARL's spaces gpu_envs converts (Box, "
        "Discrete, MultiDiscrete, Dict, Tuple); give the env's agents one of those."
    )


def _ends_at_horizon_only(env: Any) -> bool:
    """True when the env's ``step_env`` is one of JaxMARL's MPE ones, whose only ending is ``step >= max_steps``."""
    step_env = getattr(type(env), "step_env", None)
    step_env = getattr(step_env, "__wrapped__", step_env)  # under JaxMARL's jax.jit decorator
    return str(getattr(step_env, "__module__", "")).startswith(_MPE)


def _ending(env: Any, done_as: Any) -> str:
    if done_as not in DONE_AS:
        raise InvalidArgumentError(
            f"done_as={done_as!r}: say what JaxMARL's dones['__all__'] is, one of {DONE_AS} ('auto': MPE envs "
            "end only at their horizon, so 'truncated'; every other env 'terminated', since gpu_envs cannot tell)."
        )
    if done_as == "auto":
        return "truncated" if _ends_at_horizon_only(env) else "terminated"
    return str(done_as)


# ----------------------------------------------------------------------- builders
def make_jaxmarl_core(
    env: Any, num_envs: Any = None, group_map: Any = None, done_as: Any = "auto", reset_batch: Any = None
) -> Any:
    """The :class:`~gpu_envs.backends.jax.jaxmarl_core.JaxMarlCore` running ``env`` (module docstring)."""
    from gpu_envs.backends.agent_groups import GroupLayout

    message = jaxmarl_refusal(env)
    if message is not None:
        raise NotAnEnvError(message)
    num_envs = as_int(
        num_envs,
        "num_envs",
        minimum=1,
        hint="JaxMARL envs are single envs: tell gpu_envs how many to batch, e.g. "
        "gpu_envs.wrap(jaxmarl.make('MPE_simple_spread_v3'), num_envs=64).",
    )
    if reset_batch is not None:
        reset_batch = as_int(reset_batch, "reset_batch", minimum=1)
    agents = [str(a) for a in env.agents]
    observation_specs = {a: spec_from_jaxmarl(env.observation_space(a)) for a in agents}
    action_specs = {a: spec_from_jaxmarl(env.action_space(a), action=True) for a in agents}
    layout = GroupLayout(agents, observation_specs, action_specs, group_map)
    from gpu_envs.backends.jax.jaxmarl_core import JaxMarlCore

    return JaxMarlCore(env, num_envs, layout, _ending(env, done_as), reset_batch)


def jaxmarl_installed() -> bool:
    """JaxMARL can be imported here (found without importing it)."""
    return importlib.util.find_spec("jaxmarl") is not None


def jaxmarl_registration() -> Any:
    """``jaxmarl.registration`` (``make``, ``registered_envs``), imported with the caller's output streams kept.

    JaxMARL 0.2's MA-Brax module silences Brax's import and then sets ``sys.stdout`` and
    ``sys.stderr`` to the process's own (``sys.__stdout__``): after a first import, a
    notebook's output, a ``contextlib.redirect_stdout`` or a test runner's capture would
    go to the terminal. The streams in place before the import are put back after it.
    Without JaxMARL this raises ``ModuleNotFoundError`` (``make()`` says what to install).
    """
    prepare_jax()  # JaxMARL imports JAX
    out, err = sys.stdout, sys.stderr
    try:
        return importlib.import_module("jaxmarl.registration")
    finally:
        sys.stdout, sys.stderr = out, err


def _registered() -> list[str]:
    if not jaxmarl_installed():
        return []
    return list(jaxmarl_registration().registered_envs)


def jaxmarl_env_ids() -> list[str]:
    """``jaxmarl/<name>`` for JaxMARL's registered envs (none where JaxMARL is not installed)."""
    return [JAXMARL_PREFIX + name for name in _registered()]


def make_jaxmarl_env(env_id: str, kwargs: dict) -> tuple[Any, dict]:
    """``(env, core options)`` for ``jaxmarl/<name>``: ``jaxmarl.make(name, **env kwargs)``.

    ``group_map``, ``done_as`` and ``reset_batch`` are the core's (returned apart); every
    other keyword goes to the env (``num_agents=``, ``action_type="Continuous"``, ``max_steps=``...).
    """
    kwargs = dict(kwargs)
    core_options = {k: kwargs.pop(k) for k in CORE_OPTIONS if k in kwargs}
    name = env_id[len(JAXMARL_PREFIX) :]
    make = jaxmarl_registration().make  # without JaxMARL: ModuleNotFoundError, which make() turns into what to install
    registered = _registered()
    if name not in registered:
        raise UnknownEnvError(
            f"{env_id!r} is not a JaxMARL env; JaxMARL has {', '.join(JAXMARL_PREFIX + n for n in registered)}."
        )
    return make(name, **kwargs), core_options
