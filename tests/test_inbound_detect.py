"""``wrap`` picks the inbound adapters (SB3, legacy gym, MO-Gymnasium, minigrid) only for their own objects.

Their detectors read class modules and attributes, so wrapping anything else imports
none of those libraries, and each object goes to the most specific backend.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

import gpu_envs
from gpu_envs.registry import MAKE_ORDER, WRAP_ORDER, get_plugin
from tests.fakes import CountingEnv, CountingTorchVectorEnv

INBOUND = ("sb3", "legacy_gym", "mo_gymnasium", "minigrid")


@pytest.mark.slow
def test_wrapping_and_making_other_envs_imports_none_of_the_inbound_libraries():
    code = textwrap.dedent(
        """
        import sys
        import gymnasium as gym
        import gpu_envs
        from tests.fakes import CountingTorchVectorEnv
        gpu_envs.wrap(gym.make("CartPole-v1"), device="cpu").rollout(3)
        gpu_envs.wrap(gym.make_vec("Acrobot-v1", 2, vectorization_mode="sync"), device="cpu").rollout(3)
        gpu_envs.wrap(CountingTorchVectorEnv(2), device="cpu")
        gpu_envs.make("Acrobot-v1", num_envs=2, device="cpu").rollout(3)
        try:
            gpu_envs.wrap(object())
        except gpu_envs.NotAnEnvError:
            pass
        print(sorted(m for m in ("stable_baselines3", "gym", "mo_gymnasium", "minigrid") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_inbound_adapters_come_before_the_generic_backends():
    assert all(WRAP_ORDER.index(name) < WRAP_ORDER.index("gymnasium") for name in INBOUND)
    # a gym 0.26 VectorEnv has the attributes of the torch protocol: legacy_gym must see it first
    assert WRAP_ORDER.index("legacy_gym") < WRAP_ORDER.index("torch")
    assert MAKE_ORDER.index("mo_gymnasium") < MAKE_ORDER.index("gymnasium")
    assert MAKE_ORDER.index("minigrid") < MAKE_ORDER.index("gymnasium")


@pytest.mark.parametrize("name", INBOUND)
def test_inbound_detectors_decline_other_envs(name):
    plugin = get_plugin(name)
    for obj in (gym.make("CartPole-v1"), CountingEnv(0), CountingTorchVectorEnv(2), object()):
        assert not plugin.detect(obj)


def test_other_envs_keep_their_backends():
    with gpu_envs.wrap(CountingEnv(0), device="cpu") as env:
        assert env.backend.name == "gymnasium"
    with gpu_envs.wrap(CountingTorchVectorEnv(2), device="cpu") as env:
        assert env.backend.name == "torch"


class HalfVectorEnv(gym.vector.VectorEnv):
    """SuperSuit's ``ConcatVecEnv`` shape: a gymnasium VectorEnv without ``single_observation_space``, which the
    minigrid detector read (``AttributeError`` out of ``wrap()``)."""

    def __init__(self) -> None:
        self.num_envs = 2
        self.observation_space = gym.spaces.Box(-1, 1, (2, 3))
        self.action_space = gym.spaces.MultiDiscrete([2, 2])

    def __getattr__(self, name):
        if name == "single_observation_space":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_a_detector_that_raises_never_escapes_wrap(monkeypatch):
    env = HalfVectorEnv()
    with pytest.raises(AttributeError):
        get_plugin("minigrid").detect(env)  # the detector itself does raise on it
    with pytest.raises(gpu_envs.GpuEnvsError, match="NEXT_STEP"):  # the gymnasium backend's own clear refusal
        gpu_envs.wrap(env, device="cpu")

    class Broken:  # a plugin whose detect raises on everything is skipped: the right backend still claims the env
        name = "broken"

        def detect(self, obj):
            raise RuntimeError("boom")

    import gpu_envs.factory as factory

    real = factory.plugins
    monkeypatch.setattr(factory, "plugins", lambda order: [Broken(), *real(order)])
    with gpu_envs.wrap(CountingTorchVectorEnv(2), device="cpu") as wrapped:
        assert wrapped.backend.name == "torch"
    with pytest.raises(gpu_envs.NotAnEnvError, match=r"does not know how to wrap.*broken backend's detect raised"):
        gpu_envs.wrap(object())  # nobody claims it: the message says which detector raised
    monkeypatch.setattr(factory, "require_plugin", lambda name: Broken())
    with pytest.raises(gpu_envs.NotAnEnvError, match=r"backend='broken'.*RuntimeError: boom"):
        gpu_envs.wrap(CountingTorchVectorEnv(2), device="cpu", backend="broken")


def test_a_jax_env_of_an_unknown_kind_is_refused_naming_the_jax_envs_gpu_envs_takes():
    """Once refused with the generic message, which says JAX envs are accepted."""

    class OtherJaxEnv:
        __module__ = "jumanji.environments.fake"  # a JAX library's env class (not imported)

        def reset(self, key):
            return None

    with pytest.raises(gpu_envs.NotAnEnvError, match=r"a JAX env, but not of a kind gpu_envs takes.*gymnax.*DLPack"):
        gpu_envs.wrap(OtherJaxEnv())
