"""Every adapter's ``.unwrapped`` is the simulator behind the gpu_envs env, as trainers' runners expect.

Trainer code reaches through the env it was given with ``env.unwrapped``: mjlab's
``MjlabOnPolicyRunner.save`` (used by mjlab's ``train.py``) stores
``env.unwrapped.common_step_counter`` in every checkpoint and ``load`` writes it back;
Isaac Lab's scripts read ``env.unwrapped.cfg``. ``to_rsl_rl`` once had no ``.unwrapped``
and failed at the first checkpoint.
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.interop.conversions import simulator_of
from tests.test_mjlab_fake import ManagerBasedRlEnv

ADAPTERS = {
    "to_gymnasium": ("gymnasium", {}),
    "to_sb3": ("stable_baselines3", {}),
    "to_torchrl": ("torchrl", {}),
    "to_rsl_rl": ("rsl_rl", {}),
    "to_skrl": ("skrl", {}),
    "to_rl_games": ("rl_games", {"name": "unwrapped_test"}),
}


def adapt(name: str, env):
    library, kwargs = ADAPTERS[name]
    pytest.importorskip(library)
    import gpu_envs.interop as interop

    return getattr(interop, name)(env, **kwargs)


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_every_adapter_forwards_unwrapped_to_the_simulator(name):
    env = gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0)
    adapter = adapt(name, env)
    assert adapter.unwrapped is env.backend.env  # the built-in PendulumEnv
    assert adapter.unwrapped.max_episode_steps == 200  # what a runner reads from it
    env.close()


@pytest.mark.parametrize("name", ["to_rsl_rl", "to_skrl", "to_gymnasium"])
def test_unwrapped_reaches_the_mjlab_env_through_transforms(name):
    from gpu_envs.transforms import EpisodeStats, TransformedEnv

    sim = ManagerBasedRlEnv(num_envs=4)
    env = TransformedEnv(gpu_envs.wrap(sim, device="cpu"), EpisodeStats())
    adapter = adapt(name, env)
    assert adapter.unwrapped is sim and simulator_of(env) is sim


def test_mjlab_runner_checkpoints_read_the_step_counter_through_to_rsl_rl(tmp_path):
    """``MjlabOnPolicyRunner.save``/``load``'s own lines (mjlab 1.6 ``mjlab/rl/runner.py``) on ``to_rsl_rl``."""
    pytest.importorskip("rsl_rl")
    from gpu_envs.interop import to_rsl_rl

    sim = ManagerBasedRlEnv(num_envs=4)
    vec = to_rsl_rl(gpu_envs.wrap(sim, device="cpu"))
    sim.common_step_counter = 1234
    path = tmp_path / "model_0.pt"
    torch.save({"infos": {"env_state": {"common_step_counter": vec.unwrapped.common_step_counter}}}, path)  # save()
    sim.common_step_counter = 0
    infos = torch.load(path)["infos"]
    vec.unwrapped.common_step_counter = infos["env_state"]["common_step_counter"]  # load()
    assert sim.common_step_counter == 1234
