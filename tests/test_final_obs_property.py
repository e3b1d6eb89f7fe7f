"""Property test of the final-observation module (hypothesis).

Random done patterns, random observation structures (one tensor; a dict of groups; a
nested group; float and integer dtypes; per-env rank 0..2), with and without final
observations, with and without a final mask, default or configured placeholders. Every
row's values are unique, so a swapped, lost or duplicated row cannot go unnoticed. The
same expectations are checked on :class:`FinalObsCache` directly and through
:class:`BatchedEnv` over a scripted torch vector env.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_envs
from gpu_envs.contract.final_obs import FinalObsCache
from gpu_envs.contract.specs import Composite, numpy_dtype, spec_from_gym

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.uint8]
GROUPS = ["policy", "critic", "image", "proprio"]
CONFIGURED = 251  # a configured placeholder every dtype above holds, outside every value range below
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------- scenarios
@dataclass
class Scenario:
    num_envs: int
    structure: dict  # key (str or tuple) -> (dtype, per-env shape)
    terminated: list[torch.Tensor]  # one [N] bool per step
    truncated: list[torch.Tensor]
    final_mode: str  # "none" | "full" (valid on the ended rows) | "every" (valid on every row) | "masked"
    masks: list[torch.Tensor]
    missing_value: int | None

    def space(self) -> gym.Space:
        def box(dtype, shape):
            np_dt = numpy_dtype(dtype)
            if dtype.is_floating_point:
                return gym.spaces.Box(-np.inf, np.inf, shape, np_dt)
            return gym.spaces.Box(0, 250, shape, np_dt)

        if list(self.structure) == ["observation"]:
            return box(*self.structure["observation"])
        nested: dict = {}
        for key, leaf in self.structure.items():
            if isinstance(key, tuple):
                nested.setdefault(key[0], {})[key[1]] = box(*leaf)
            else:
                nested[key] = box(*leaf)
        return gym.spaces.Dict({k: gym.spaces.Dict(v) if isinstance(v, dict) else v for k, v in nested.items()})


leaves = st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple))


@st.composite
def scenarios(draw, steps: int = 1) -> Scenario:
    n = draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["tensor", "groups", "nested"]))
    if kind == "tensor":
        structure = {"observation": draw(leaves)}
    else:
        names = draw(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=3, unique=True))
        structure = {name: draw(leaves) for name in names}
        if kind == "nested":
            structure[("extra", "inner")] = draw(leaves)
    bools = st.lists(st.booleans(), min_size=n, max_size=n).map(lambda b: torch.tensor(b, dtype=torch.bool))
    return Scenario(
        num_envs=n,
        structure=structure,
        terminated=[draw(bools) for _ in range(steps)],
        truncated=[draw(bools) for _ in range(steps)],
        final_mode=draw(st.sampled_from(["none", "full", "every", "masked"])),
        masks=[draw(bools) for _ in range(steps)],
        missing_value=draw(st.sampled_from([None, CONFIGURED])),
    )


def unique_obs(scenario: Scenario, base: int) -> dict:
    """Values unique per (key, row, element) within one call; floats get a .5 to stay non-integer."""
    out = {}
    for j, (key, (dtype, shape)) in enumerate(scenario.structure.items()):
        numel = math.prod(shape)
        values = torch.arange(scenario.num_envs * numel, dtype=torch.float64) + base + j
        if dtype.is_floating_point:
            values = values + 0.5
        out[key] = values.reshape(scenario.num_envs, *shape).to(dtype)
    return out


def every_row(final: dict, obs: dict, done: torch.Tensor) -> dict:
    """Final observations valid on every row: the final one where a row ended, the next one elsewhere."""
    return {
        key: torch.where(done.view(-1, *([1] * (value.dim() - 1))), value, obs[key]) for key, value in final.items()
    }


def placeholder(dtype: torch.dtype, missing_value: int | None) -> float:
    if missing_value is not None:
        return float(missing_value)
    return math.nan if dtype.is_floating_point else 0.0


# ---------------------------------------------------------------------- the property
def check(
    scenario: Scenario, step: int, obs: dict, final: dict | None, next_obs: dict, missing: torch.Tensor, root: dict
) -> None:
    n = scenario.num_envs
    done = scenario.terminated[step] | scenario.truncated[step]
    given_rows = (
        torch.ones(n, dtype=torch.bool) if scenario.final_mode in ("full", "every") else scenario.masks[step].clone()
    )
    if scenario.final_mode == "none":
        given_rows[:] = False
    valid = done & given_rows
    holes = done & ~given_rows
    assert missing.shape == (n, 1) and missing.dtype == torch.bool
    assert torch.equal(missing[:, 0], holes), "final_obs_missing is True exactly on placeholder rows"
    for key, (dtype, shape) in scenario.structure.items():
        got = next_obs[key]
        assert got.dtype == dtype and tuple(got.shape) == (n, *shape)
        assert torch.equal(root[key], obs[key]), "the root is the reset obs on done rows and the next obs elsewhere"
        fill = placeholder(dtype, scenario.missing_value)
        for i in range(n):
            if valid[i]:
                want = final[key][i]
            elif holes[i]:
                want = torch.full(shape, fill, dtype=torch.float64).to(dtype)
            else:
                want = obs[key][i]
            torch.testing.assert_close(got[i], want, rtol=0, atol=0, equal_nan=True, msg=f"{key} row {i}")
        # nothing lost or duplicated: each source row appears exactly where it belongs, once
        flat = got.reshape(n, -1)
        # ("every": the final observations of the rows that did not end are their next ones, from obs)
        sources = [r for r in range(n) if done[r] or scenario.final_mode != "every"]
        from_final = {
            i
            for i in range(n)
            if final is not None and any(torch.equal(flat[i], final[key].reshape(n, -1)[r]) for r in sources)
        }
        from_obs = {i for i in range(n) if any(torch.equal(flat[i], obs[key].reshape(n, -1)[r]) for r in range(n))}
        assert from_final == set(torch.nonzero(valid).flatten().tolist())
        assert from_obs == set(torch.nonzero(~done).flatten().tolist())


@SETTINGS
@given(scenarios())
def test_final_obs_transform_property(scenario):
    spec = spec_from_gym(scenario.space())
    spec = spec if isinstance(spec, Composite) else Composite({"observation": spec})
    fo = FinalObsCache(spec, scenario.num_envs, scenario.missing_value)
    obs = unique_obs(scenario, base=1)
    final = None if scenario.final_mode == "none" else unique_obs(scenario, base=130)
    done = (scenario.terminated[0] | scenario.truncated[0]).view(-1, 1)
    # RawStep's final_mask: "full" gives final observations valid on the ended rows (done itself),
    # "every" on every row (None: the next observation there), "masked" on the mask's rows
    mask = {"masked": scenario.masks[0], "full": done}.get(scenario.final_mode)
    if scenario.final_mode == "every":
        final = every_row(final, obs, done[:, 0])
    next_obs, missing = fo(obs, done, final, mask)
    check(scenario, 0, obs, final, next_obs, missing, fo.root_obs)


# ------------------------------------------------------- through BatchedEnv, scripted
class ScriptedVectorEnv:
    """A torch vector env that replays a scenario: same-step reset, final obs per the scenario."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.num_envs = scenario.num_envs
        self.device = torch.device("cpu")
        self.single_observation_space = scenario.space()
        self.single_action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.emitted: list[tuple[dict, dict | None]] = []

    @staticmethod
    def _nest(flat: dict):
        if list(flat) == ["observation"]:
            return flat["observation"]
        out: dict = {}
        for key, value in flat.items():
            if isinstance(key, tuple):
                out.setdefault(key[0], {})[key[1]] = value
            else:
                out[key] = value
        return out

    def reset(self, *, seed=None, options=None):
        return self._nest(unique_obs(self.scenario, base=1)), {}

    def step(self, action):
        s, t = self.scenario, self.t
        self.t += 1
        # value ranges (N * numel <= 54 per key): obs in [1, 60) or [60, 120), finals in [130, 250)
        obs = unique_obs(s, base=60 if t % 2 == 0 else 1)  # post-reset obs on done rows, next obs elsewhere
        final = None if s.final_mode == "none" else unique_obs(s, base=130 + 60 * (t % 2))
        if s.final_mode == "every":
            final = every_row(final, obs, s.terminated[t] | s.truncated[t])
        self.emitted.append((obs, final))
        info = {}
        if final is not None:
            info["final_obs"] = self._nest(final)
        if s.final_mode == "masked":
            info["_final_obs"] = s.masks[t]
        reward = torch.arange(s.num_envs, dtype=torch.float32) + t
        return self._nest(obs), reward, s.terminated[t], s.truncated[t], info

    def close(self):
        pass


@SETTINGS
@given(scenarios(steps=3))
def test_batched_env_property(scenario):
    env = gpu_envs.wrap(ScriptedVectorEnv(scenario), missing_obs_value=scenario.missing_value)
    script = env.backend.env
    td = env.reset()
    previous_root = {key: td[key].clone() for key in scenario.structure}
    for step in range(3):
        td["action"] = torch.zeros(scenario.num_envs, dtype=torch.int64)
        td, root = env.step_and_maybe_reset(td)
        obs, final = script.emitted[step]
        next_obs = {key: td["next"][key] for key in scenario.structure}
        root_obs = {key: root[key] for key in scenario.structure}
        check(scenario, step, obs, final, next_obs, td["next", "final_obs_missing"], root_obs)
        done = (scenario.terminated[step] | scenario.truncated[step]).view(-1, 1)
        assert torch.equal(td["next", "done"], done)
        assert torch.equal(td["next", "terminated"], scenario.terminated[step].view(-1, 1))
        assert not root["done"].any()
        for key in scenario.structure:  # the step acted on the previous root, unchanged
            assert torch.equal(td[key], previous_root[key])
        torch.testing.assert_close(
            td["next", "reward"][:, 0], torch.arange(scenario.num_envs, dtype=torch.float32) + step
        )
        previous_root = {key: value.clone() for key, value in root_obs.items()}
        td = root
