"""JaxMARL 0.2.0 (JAX on the CPU) driven by hand: the oracle of the tier, and gpu_envs' side of the comparison.

Import this module first in every test module of the tier: where JaxMARL is missing (the
main suite) it skips the module with the reason and the command that runs the tier;
under ``GPU_ENVS_REQUIRE_JAXMARL=1`` (what ``scripts/test.sh`` sets when it runs the tier in
its venv) a missing JaxMARL is an error, never a skip::

    VENV=$(scripts/simulator_venv.sh jaxmarl | tail -n 1)
    GPU_ENVS_REQUIRE_JAXMARL=1 PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -m "slow or not slow" tests/jaxmarl

:func:`reference` is the unbatched JaxMARL env, one row at a time, with the key chain
gpu_envs gives row ``i``: ``key = fold_in(PRNGKey(seed), i)``; a reset is ``key, sub =
split(key)``, ``env.reset(sub)``; a step is ``key, sub = split(key)``, ``key_step, key_reset
= split(sub)``, ``env.step_env(key_step, ...)`` and, where ``dones["__all__"]``,
``env.reset(key_reset)``. It also runs JaxMARL's own auto-resetting ``env.step(sub, ...)``
from the same state, whose observation is the next root gpu_envs must hand on (and which
has lost the final observation). Everything is per agent, by name.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("GPU_ENVS_REQUIRE_JAXMARL") != "1":
    pytest.importorskip(
        "jaxmarl",
        reason="the JaxMARL tier runs in its own venv: VENV=$(scripts/simulator_venv.sh jaxmarl | tail -n 1) && "
        'PYTHONPATH=$PWD "$VENV/bin/python" -m pytest tests/jaxmarl',
    )

import jax
import jax.numpy as jnp
import torch

FLAGS = ("done", "terminated", "truncated")


def random_actions(env, n: int, steps: int, seed: int) -> dict[str, np.ndarray]:
    """Per agent, ``[N, T, *act]`` actions of its JaxMARL space: ints for ``Discrete``, ``[low, high)`` floats for ``Box``."""
    rng = np.random.default_rng(seed)
    out = {}
    for agent in env.agents:
        space = env.action_space(agent)
        if type(space).__name__ == "Discrete":
            out[agent] = rng.integers(0, space.n, size=(n, steps))
        else:
            low, high = float(np.min(space.low)), float(np.max(space.high))
            out[agent] = rng.uniform(low, high, size=(n, steps, *space.shape)).astype(np.float32)
    return out


def reference(env, actions: dict[str, np.ndarray], seed: int, resets: dict[int, list[int]] | None = None) -> dict:
    """Every row stepped by hand (module docstring); ``resets[t]``: rows reset just before step ``t``.

    Returns ``{name: [N, T, ...]}``: per agent ``obs/<agent>`` (the step's input),
    ``final/<agent>`` (``step_env``'s observation: the TRUE final one where the episode
    ended), ``root/<agent>`` (the next step's input), ``own/<agent>`` (JaxMARL's own
    ``env.step`` observation) and ``reward/<agent>``, ``done/<agent>``; and ``done`` (the
    env's ``dones["__all__"]``).
    """
    resets = resets or {}
    agents = list(env.agents)
    n, steps = next(iter(actions.values())).shape[:2]
    rows = []
    for i in range(n):
        row: dict[str, list] = {}

        def put(name, value, row=row):
            row.setdefault(name, []).append(np.asarray(value))

        key = jax.random.fold_in(jax.random.PRNGKey(seed), i)
        key, sub = jax.random.split(key)
        obs, state = env.reset(sub)
        for t in range(steps):
            if i in resets.get(t, ()):
                key, sub = jax.random.split(key)
                obs, state = env.reset(sub)
            for a in agents:
                put(f"obs/{a}", obs[a])
            key, sub = jax.random.split(key)
            key_step, key_reset = jax.random.split(sub)
            act = {a: jnp.asarray(actions[a][i, t]) for a in agents}
            final, stepped, rewards, dones, _ = env.step_env(key_step, state, act)
            own, _, _, _, _ = env.step(sub, state, act)
            ended = bool(dones["__all__"])
            if ended:
                obs, state = env.reset(key_reset)
            else:
                obs, state = final, stepped
            put("done", ended)
            for a in agents:
                put(f"final/{a}", final[a])
                put(f"root/{a}", obs[a])
                put(f"own/{a}", own[a])
                put(f"reward/{a}", rewards[a])
                put(f"done/{a}", dones[a])
        rows.append({k: np.stack(v) for k, v in row.items()})
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def group_action(env, actions: dict[str, np.ndarray], t: int) -> dict:
    """The actions of step ``t`` as ``{(group, "action"): [N, A, *act]}`` tensors of the env's action dtypes."""
    out = {}
    for group, agents in env.group_map.items():
        spec = env.full_action_spec[group, "action"]
        stacked = np.stack([actions[a][:, t] for a in agents], 1)
        out[(group, "action")] = torch.as_tensor(stacked).to(spec.dtype)
    return out


def per_agent(env, td, key: str) -> dict[str, np.ndarray]:
    """``td[(group, key)]`` ``[N, A, ...]`` of every group, split into ``{agent: [N, ...]}``."""
    out = {}
    for group, agents in env.group_map.items():
        value = td[group, key]
        for j, agent in enumerate(agents):
            out[agent] = value[:, j].numpy()
    return out


def record(env, td, root) -> dict[str, np.ndarray]:
    """One transition of the batched env, keyed like :func:`reference` (and the env-level entries)."""
    nxt = td["next"]
    out = {"done": nxt["done"][:, 0].numpy(), "env_reward": nxt["reward"][:, 0].numpy()}
    for flag in FLAGS:
        out[f"env_{flag}"] = nxt[flag][:, 0].numpy()
    out["final_obs_missing"] = nxt["final_obs_missing"][:, 0].numpy()
    for name, source, key in (("obs", td, "observation"), ("final", nxt, "observation"), ("root", root, "observation")):
        for agent, value in per_agent(env, source, key).items():
            out[f"{name}/{agent}"] = value
    for key in ("reward", *FLAGS, "final_obs_missing"):
        for agent, value in per_agent(env, nxt, key).items():
            out[f"{key}/{agent}"] = value[:, 0]
    return out


def batched(env, actions: dict[str, np.ndarray], seed: int, resets: dict[int, list[int]] | None = None) -> dict:
    """The same steps through gpu_envs' ``step_and_maybe_reset`` (``resets``: masked resets before step ``t``)."""
    resets = resets or {}
    n, steps = next(iter(actions.values())).shape[:2]
    td = env.reset(seed=seed)
    got: dict[str, list] = {}
    for t in range(steps):
        if t in resets:
            mask = torch.zeros(n, 1, dtype=torch.bool)
            mask[resets[t]] = True
            td = env.reset(td=td.set("_reset", mask))
        td.update(group_action(env, actions, t))
        td, root = env.step_and_maybe_reset(td)
        for k, v in record(env, td, root).items():
            got.setdefault(k, []).append(v.copy())
        td = root
    return {k: np.stack(v, 1) for k, v in got.items()}


def assert_matches(env, got: dict, want: dict, ending: str = "truncated") -> None:
    """Every agent's observations, final observations, roots, rewards and flags equal the hand-driven env's.

    Floats up to the rounding a vmapped XLA computation may change; ``ending`` is what
    gpu_envs reports JaxMARL's ``dones["__all__"]`` as.
    """
    done = want["done"]
    np.testing.assert_array_equal(got["done"], done, err_msg="done")
    np.testing.assert_array_equal(got["env_done"], done, err_msg="env done")
    never = np.zeros_like(done)
    np.testing.assert_array_equal(got["env_truncated"], done if ending == "truncated" else never)
    np.testing.assert_array_equal(got["env_terminated"], done if ending == "terminated" else never)
    assert not got["final_obs_missing"].any()
    agents = [a for members in env.group_map.values() for a in members]
    team = sum(want[f"reward/{a}"] for a in agents)
    np.testing.assert_allclose(got["env_reward"], team, rtol=1e-5, atol=1e-5, err_msg="team reward")
    for agent in agents:
        for name in ("obs", "final", "root", "reward"):
            np.testing.assert_allclose(
                got[f"{name}/{agent}"], want[f"{name}/{agent}"], rtol=1e-5, atol=1e-5, err_msg=f"{name}/{agent}"
            )
        agent_done = want[f"done/{agent}"] | done
        np.testing.assert_array_equal(got[f"done/{agent}"], agent_done, err_msg=f"done/{agent}")
        truncated = agent_done & done if ending == "truncated" else never
        np.testing.assert_array_equal(got[f"truncated/{agent}"], truncated, err_msg=f"truncated/{agent}")
        np.testing.assert_array_equal(
            got[f"terminated/{agent}"], agent_done & ~truncated, err_msg=f"terminated/{agent}"
        )
        assert not got[f"final_obs_missing/{agent}"].any()
