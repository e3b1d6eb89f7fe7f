"""ManiSkill3 3.0.1 (CPU PhysX, one env, no rendering) through gpu_envs, against the env stepped by hand.

``ManiSkillVectorEnv`` resets ended rows inside ``step`` and hands the pre-reset
observation over in ``info["final_observation"]``; gpu_envs' torch backend reads it. The
oracle is a second, identically built bare env (``gym.make``), reset with the same seed,
stepped with the same actions and reset by hand the way the vector env resets
(``reset(options={"env_idx": ...})``): every observation group, the TRUE final
observation, reward and flags must be equal. ManiSkill resets without a seed (its
auto-resets) draw from torch's global RNG unless the env is built with
``enhanced_determinism=True`` (then from the env's own seeded episode RNG), so the tier
builds them so. PickCube's episodes end at its 50-step time
limit (a random-ish arm never succeeds); resets put the cube on the table (z = its half
size, 0.02) within +-0.1 m of the origin, the arm at rest.
"""

from __future__ import annotations

import gymnasium as gym
import mani_skill.envs  # noqa: F401 - registers ManiSkill's ids
import numpy as np
import pytest
import torch
from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

import gpu_envs
from gpu_envs.backends.torch_envs import TorchVectorBackend
from gpu_envs.contract.errors import AutoresetModeError

pytestmark = pytest.mark.slow  # ManiSkill builds a SAPIEN scene per env: seconds each
# enhanced_determinism: ManiSkill's resets without a seed (its auto-resets) otherwise draw from torch's
# global RNG, so two identically seeded envs part ways at their first auto-reset (see the module doc).
KW = {
    "num_envs": 1,
    "obs_mode": "state_dict",
    "sim_backend": "physx_cpu",
    "render_backend": "none",
    "enhanced_determinism": True,
}
T, SEED, LIMIT = 110, 4, 50
CUBE_HALF_SIZE, CUBE_SPAWN = 0.02, 0.1


def actions(steps: int, size: int) -> np.ndarray:
    """Smooth arm motions (a slow sinusoid per joint): consecutive observations stay close."""
    t = np.arange(steps)[:, None]
    return (0.5 * np.sin(0.07 * t + np.arange(size)[None, :])).astype(np.float32)


def flat(obs) -> dict:
    out = {}

    def visit(prefix, node):
        for k, v in node.items():
            if isinstance(v, dict):
                visit((*prefix, k), v)
            else:
                out[(*prefix, k)] = np.asarray(v).reshape(-1)

    visit((), obs)
    return out


def distance(a: dict, b: dict) -> float:
    """Euclidean distance between two observations (every group, flags as 0/1)."""
    return float(np.sqrt(sum(np.sum((a[k].astype(np.float64) - b[k].astype(np.float64)) ** 2) for k in a)))


def reference(task: str, acts: np.ndarray) -> dict:
    """The bare env stepped by hand, reset at the end of an episode as ManiSkillVectorEnv resets."""
    env = gym.make(task, **KW)
    obs, _ = env.reset(seed=SEED)
    rows = {k: [] for k in ("observation", "next_observation", "root", "reward", "terminated", "truncated")}
    for a in acts:
        rows["observation"].append(flat(obs))
        obs, reward, terminated, truncated, _ = env.step(torch.as_tensor(a)[None])
        rows["next_observation"].append(flat(obs))
        rows["reward"].append(float(reward[0]))
        rows["terminated"].append(bool(terminated[0]))
        rows["truncated"].append(bool(truncated[0]))
        if terminated[0] or truncated[0]:
            obs, _ = env.reset(options={"env_idx": torch.tensor([0])})
        rows["root"].append(flat(obs))
    env.close()
    return rows


def batched(env, acts: np.ndarray) -> dict:
    keys = env.single_observation_spec.keys(include_nested=True, leaves_only=True)
    td = env.reset(seed=SEED)
    rows = {k: [] for k in ("observation", "next_observation", "root", "reward", "terminated", "truncated", "missing")}
    for a in acts:
        td["action"] = torch.as_tensor(a)[None]
        td, root = env.step_and_maybe_reset(td)
        rows["observation"].append({k: td[k][0].numpy().copy() for k in keys})
        rows["next_observation"].append({k: td[("next", *k)][0].numpy().copy() for k in keys})
        rows["root"].append({k: root[k][0].numpy().copy() for k in keys})
        rows["reward"].append(float(td["next", "reward"][0, 0]))
        rows["terminated"].append(bool(td["next", "terminated"][0, 0]))
        rows["truncated"].append(bool(td["next", "truncated"][0, 0]))
        rows["missing"].append(bool(td["next", "final_obs_missing"][0, 0]))
        td = root
    return rows


def assert_same(got: dict, want: dict) -> None:
    for key in ("reward", "terminated", "truncated"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-6, err_msg=key)
    for name in ("observation", "next_observation", "root"):
        for t, (g, w) in enumerate(zip(got[name], want[name], strict=True)):
            assert set(g) == set(w), name
            for k in w:
                np.testing.assert_allclose(g[k], w[k], rtol=1e-5, atol=1e-6, err_msg=f"{name} {k} step {t}")
    assert not any(got["missing"])


@pytest.fixture(scope="module")
def pickcube_reference():
    return reference("PickCube-v1", actions(T, 8))


@pytest.mark.parametrize("form", ["bare", "vector", "make"])
def test_pickcube_matches_the_env_stepped_by_hand(form, pickcube_reference):
    if form == "bare":  # gym.make's env: batched observations behind a single-env interface
        env = gpu_envs.wrap(gym.make("PickCube-v1", **KW))
    elif form == "vector":
        env = gpu_envs.wrap(ManiSkillVectorEnv(gym.make("PickCube-v1", **KW)))
    else:
        env = gpu_envs.make("PickCube-v1", **KW)
    with env:
        assert isinstance(env.backend, TorchVectorBackend)
        assert tuple(env.single_observation_spec["agent", "qpos"].shape) == (9,)  # no extra batch dimension
        got = batched(env, actions(T, 8))
    assert_same(got, pickcube_reference)
    ends = np.flatnonzero(np.array(got["truncated"]) | np.array(got["terminated"]))
    np.testing.assert_array_equal(ends + 1, [LIMIT, 2 * LIMIT])


def test_pickcube_finals_and_resets_follow_the_task(pickcube_reference):
    want = pickcube_reference
    ends = [t for t, (a, b) in enumerate(zip(want["terminated"], want["truncated"], strict=True)) if a or b]
    assert ends and all(want["truncated"][t] and not want["terminated"][t] for t in ends)  # the time limit
    for t in ends:
        root, final, before = want["root"][t], want["next_observation"][t], want["observation"][t]
        cube = root[("extra", "obj_pose")]
        assert abs(cube[2] - CUBE_HALF_SIZE) < 2e-3 and (np.abs(cube[:2]) <= CUBE_SPAWN + 1e-6).all()
        assert np.abs(root[("agent", "qvel")]).max() < 1e-3  # the arm at rest
        assert np.abs(final[("agent", "qvel")]).max() > 1e-2  # the final one: the arm still moving
        assert distance(final, before) < distance(root, before)


@pytest.mark.parametrize("task", ["PushCube-v1", "MS-CartpoleBalance-v1"])
def test_other_bundled_tasks_match_the_env_stepped_by_hand(task):
    size = gym.make(task, **KW).action_space.shape[-1]
    acts = actions(60, size)
    want = reference(task, acts)
    with gpu_envs.wrap(gym.make(task, **KW)) as env:
        got = batched(env, acts)
    assert_same(got, want)


def test_check_env_passes():
    with gpu_envs.make("PickCube-v1", **KW) as env:
        report = gpu_envs.check_env(env, steps=110, name="PickCube-v1")
    assert report.ok, report.format()


def test_vector_env_without_auto_reset_is_refused():
    vector = ManiSkillVectorEnv(gym.make("PushCube-v1", **KW), auto_reset=False)
    with pytest.raises(AutoresetModeError, match="auto_reset=True"):
        gpu_envs.wrap(vector)
    vector.close()


def test_maniskill_ids_are_listed():
    ids = gpu_envs.available_envs()["maniskill"]
    assert {"PickCube-v1", "PushCube-v1", "MS-CartpoleBalance-v1"} <= set(ids)
