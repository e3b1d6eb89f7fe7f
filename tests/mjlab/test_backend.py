"""The mjlab backend on real mjlab 1.6.0 objects: detection, make, specs, buffers, partial resets, logs, refusals.

Cheap checks on mjlab's cartpole (8 envs); the physics checks live in test_cartpole.py
and test_go1.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.backends.mjlab import MjlabBackend
from gpu_envs.contract.final_obs import FinalObsKind
from tests.mjlab.tasks import CARTPOLE, GO1, quiet, raw_env, task_cfg

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")

NUM_ENVS = 8
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def env():
    env = gpu_envs.wrap(raw_env(task_cfg(CARTPOLE, NUM_ENVS)))
    yield env
    env.close()


def push(value: float = 1.0) -> torch.Tensor:
    return torch.full((NUM_ENVS, 1), value)


def test_wrap_recognises_mjlab_and_turns_its_auto_reset_off(env):
    from mjlab.envs import ManagerBasedRlEnv

    assert isinstance(env.backend, MjlabBackend) and isinstance(env.backend.base, ManagerBasedRlEnv)
    assert env.backend.base.cfg.auto_reset is False and env.backend.capabilities.final_obs == FinalObsKind.WRAPPER_RESET
    assert env.backend.capabilities.partial_reset and env.device == torch.device("cpu")
    # mjlab's own space classes became specs: the groups as keys, the action as a Box
    assert set(env.single_observation_spec.keys()) == {"actor", "critic"}
    assert env.single_observation_spec["actor"].shape == (5,) and env.observation_spec["critic"].shape == (NUM_ENVS, 5)
    assert env.single_action_spec.shape == (1,) and env.single_action_spec.dtype == torch.float32
    td = env.reset(seed=0)
    assert set(td.keys()) == {"actor", "critic", "done", "terminated", "truncated"}


def test_a_task_class_built_on_mjlabs_env_is_recognised_too():
    from mjlab.envs import ManagerBasedRlEnv

    class MyCartpole(ManagerBasedRlEnv):
        pass

    env = gpu_envs.wrap(raw_env(task_cfg(CARTPOLE, 2), cls=MyCartpole))
    assert env.backend.describe() == "mjlab(MyCartpole)"
    assert env.rollout(3)["next", "actor"].shape == (2, 3, 5)
    env.close()


def test_groups_that_keep_their_terms_become_nested_keys():
    cfg = task_cfg(CARTPOLE, 2)
    cfg.observations["critic"].concatenate_terms = False
    env = gpu_envs.wrap(raw_env(cfg))
    keys = set(env.single_observation_spec.keys(include_nested=True, leaves_only=True))
    assert keys == {
        "actor",
        ("critic", "cart_pos"),
        ("critic", "pole_angle"),
        ("critic", "cart_vel"),
        ("critic", "pole_vel"),
    }
    traj = env.rollout(25)  # past the 20-step time limit
    assert traj["next", "critic", "pole_angle"].shape == (2, 25, 2) and traj["next", "done"].any()
    assert torch.equal(traj["next", "critic", "pole_angle"], traj["next", "actor"][..., 1:3])
    env.close()


def test_transitions_handed_out_never_change(env):
    """mjlab rewrites its reward and termination buffers in place on every step."""
    td = env.reset(seed=1)
    kept = []
    for t in range(25):
        td["action"] = push(1.0 if t % 4 < 2 else -1.0)
        td, root = env.step_and_maybe_reset(td)
        kept.append((td, td.clone()))
        td = root
    assert any(handed["next", "done"].any() for handed, _ in kept)
    assert env.backend.copy_obs is False  # mjlab 1.6 returns fresh observation tensors: no copies per step
    for handed, snapshot in kept:
        for key in snapshot.keys(include_nested=True, leaves_only=True):
            assert torch.equal(handed[key], snapshot[key]), key


def test_partial_reset_resets_only_the_masked_rows(env):
    base = env.backend.base
    td = env.reset(seed=2)
    for _ in range(4):
        td["action"] = push()
        td, td = env.step_and_maybe_reset(td)
    mask = torch.zeros(NUM_ENVS, 1, dtype=torch.bool)
    mask[[0, 5]] = True
    before, lengths = td.clone(), base.episode_length_buf.clone()
    out = env.reset(td=TensorDict({"_reset": mask}, batch_size=[NUM_ENVS]))
    rows = mask.view(-1)
    assert base.episode_length_buf[rows].eq(0).all() and torch.equal(base.episode_length_buf[~rows], lengths[~rows])
    assert torch.equal(out["actor"][~rows], before["actor"][~rows])
    assert (out["actor"][rows, 3:].abs() <= 0.01 + 1e-6).all() and not torch.equal(
        out["actor"][rows], before["actor"][rows]
    )
    td = out
    td["action"] = push()
    td, _ = env.step_and_maybe_reset(td)  # and stepping goes on from there
    assert base.episode_length_buf[rows].eq(1).all()


def test_episode_metrics_are_reachable_and_reach_rsl_rl(env):
    from gpu_envs.interop import to_rsl_rl

    td = env.reset(seed=3)
    for _ in range(20):  # the 20th step times every row out
        td["action"] = push()
        td, td = env.step_and_maybe_reset(td)
    log = env.backend.episode_log
    assert "Episode_Reward/smooth_reward" in log and "Episode_Termination/time_out" in log
    assert float(log["Episode_Termination/time_out"]) == NUM_ENVS
    vec = to_rsl_rl(env)
    base = env.backend.base
    assert vec.episode_length_buf is base.episode_length_buf and vec.max_episode_length == base.max_episode_length == 20
    assert vec.cfg is base.cfg and set(vec.get_observations().keys()) == {"actor", "critic"}
    length = torch.zeros(NUM_ENVS, dtype=torch.long)
    length[2] = 19  # rsl_rl's init_at_random_ep_len writes mjlab's own clock: row 2 times out next step
    vec.episode_length_buf = length
    _, rewards, dones, extras = vec.step(push())
    assert dones.tolist() == [int(i == 2) for i in range(NUM_ENVS)] and bool(extras["time_outs"][2])
    assert "Episode_Reward/smooth_reward" in extras["log"] and rewards.shape == (NUM_ENVS,)


def test_make_builds_mjlabs_registered_tasks():
    assert {CARTPOLE, GO1} <= set(gpu_envs.available_envs()["mjlab"])
    with quiet():
        env = gpu_envs.make(CARTPOLE, num_envs=4, device="cpu", backend="mjlab", seed=0)
    assert isinstance(env.backend, MjlabBackend) and env.num_envs == 4
    assert env.rollout(3)["next", "actor"].shape == (4, 3, 5)
    env.close()
    with quiet():
        auto = gpu_envs.make(CARTPOLE, num_envs=2, device="cpu")  # backend="auto" finds it too
    assert isinstance(auto.backend, MjlabBackend)
    auto.close()
    with pytest.raises(gpu_envs.InvalidArgumentError, match="exact_final_obs"):
        gpu_envs.make(CARTPOLE, num_envs=2, device="cpu", backend="mjlab", compute_final_obs=True)


@pytest.mark.slow
def test_cli_lists_mjlabs_task_ids():
    done = subprocess.run(
        [sys.executable, "-m", "gpu_envs", "list"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    section = done.stdout.split("mjlab (", 1)[1]
    assert f"  {GO1}\n" in section and f"  {CARTPOLE}\n" in section


def test_exact_final_obs_false_keeps_mjlabs_auto_reset_with_placeholders():
    env = gpu_envs.wrap(raw_env(task_cfg(CARTPOLE, 2)), exact_final_obs=False)
    assert env.backend.base.cfg.auto_reset is True
    traj = env.rollout(21)
    done = traj["next", "done"]
    assert done.any() and torch.equal(traj["next", "final_obs_missing"], done)
    assert traj["next", "actor"][done.squeeze(-1)].isnan().all()
    env.close()


def test_refusals_name_the_fix(env):
    from mjlab.rl import RslRlVecEnvWrapper

    with quiet():
        wrapper = RslRlVecEnvWrapper(raw_env(task_cfg(CARTPOLE, 2)))
    with pytest.raises(gpu_envs.NotAnEnvError, match=r"wrap\(wrapper\.unwrapped\)"):
        gpu_envs.wrap(wrapper)
    with pytest.raises(gpu_envs.DeviceMismatchError, match="ManagerBasedRlEnv"):
        gpu_envs.wrap(wrapper.unwrapped, device="meta")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="already driven by another BatchedEnv"):
        gpu_envs.wrap(env.backend.base)
    td = env.reset()
    td["action"] = torch.zeros(NUM_ENVS)
    with pytest.raises(gpu_envs.ActionError, match="shape"):
        env.step(td)


def test_close_restores_and_refuses_reuse():
    raw = raw_env(task_cfg(CARTPOLE, 2))
    env = gpu_envs.wrap(raw)
    env.close()
    assert raw.cfg.auto_reset is True and env.is_closed
    with pytest.raises(gpu_envs.ClosedEnvError):
        env.reset()
    with pytest.raises(gpu_envs.ClosedEnvError):
        gpu_envs.wrap(raw)
