"""The names issue 24 replaced still work for one release, each with a DeprecationWarning naming the new one.

Every old public name a user may hold maps to exactly the new object or behaviour: the
final-observation kind ``SAME_STEP`` (now ``WRAPPER_RESET``), ``gpu_envs.check``,
``gpu_envs.transforms.Quarantine`` / ``FinalObsTransform``, ``validate=``, the live
``state_dict`` of envs, a transform's ``state_dict`` (its statistics) and ``state_tensors``
(its live state), a backend's capability attributes and the built-in envs'
``step_transition``.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

import gpu_envs
from gpu_envs.backends.base import Backend, Capabilities
from gpu_envs.contract.final_obs import FinalObsCache, FinalObsKind
from gpu_envs.transforms import EpisodeStats, ObservationNorm, Transform, TransformedEnv
from gpu_envs.wrappers import Quarantine


def test_the_final_obs_kind_same_step_is_wrapper_reset():
    with pytest.warns(DeprecationWarning, match="WRAPPER_RESET"):
        assert FinalObsKind.SAME_STEP is FinalObsKind.WRAPPER_RESET
    assert "SAME_STEP" not in FinalObsKind.__members__  # not a member: gymnasium's SAME_STEP is another thing


def test_moved_modules_and_classes_are_the_new_ones():
    sys.modules.pop("gpu_envs.check", None)
    with pytest.warns(DeprecationWarning, match="env_checker"):
        old = importlib.import_module("gpu_envs.check")
    assert old.check_env is gpu_envs.check_env
    import gpu_envs.transforms as transforms

    with pytest.warns(DeprecationWarning, match=r"gpu_envs\.wrappers"):
        assert transforms.Quarantine is Quarantine
    with pytest.warns(DeprecationWarning, match="FinalObsCache"):
        assert transforms.FinalObsTransform is FinalObsCache
    with pytest.raises(AttributeError):
        transforms.NoSuchThing  # noqa: B018


def test_validate_is_validate_actions():
    with pytest.warns(DeprecationWarning, match="validate_actions"):
        env = gpu_envs.make("CartPole-v1", num_envs=2, validate=True)
    assert env.validate_actions is True
    with pytest.warns(DeprecationWarning, match="validate_actions"):
        assert env.validate is True
    with pytest.raises(gpu_envs.InvalidArgumentError, match="validate_actions= only"):
        gpu_envs.make("CartPole-v1", num_envs=2, validate=True, validate_actions=False)


def test_an_envs_state_dict_is_its_live_state():
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=3, seed=0), EpisodeStats())
    env.reset()
    live = env.live_state()
    with pytest.warns(DeprecationWarning, match="live_state"):
        old = env.state_dict()
    assert old.keys() == live.keys() and all(old[k] is live[k] for k in live)
    with pytest.warns(DeprecationWarning, match="load_live_state"):
        env.load_state_dict({k: v.clone() for k, v in live.items()})
    inner = env.env.backend.env
    with pytest.warns(DeprecationWarning, match="live_state"):
        assert inner.state_dict()["state"] is inner.live_state()["state"]


def test_a_transforms_state_dict_is_its_statistics_and_state_tensors_its_live_state():
    norm = ObservationNorm()
    TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=3, seed=0), norm).rollout(4)
    with pytest.warns(DeprecationWarning, match="statistics"):
        saved = norm.state_dict()
    assert saved.keys() == norm.statistics().keys()
    with pytest.warns(DeprecationWarning, match="live_state"):
        assert norm.state_tensors().keys() == norm.live_state().keys()
    with pytest.warns(DeprecationWarning, match="load_statistics"):
        norm.load_state_dict(saved)


def test_a_user_transform_written_with_the_old_names_keeps_working():
    with pytest.warns(DeprecationWarning, match="statistics"):

        class Old(Transform):
            def state_dict(self):
                return {"x": torch.ones(1)}

    assert torch.equal(Old().statistics()["x"], torch.ones(1))


def test_a_backend_declaring_the_old_class_attributes_gets_capabilities():
    with pytest.warns(DeprecationWarning, match="Capabilities"):

        class OldBackend(Backend):
            supports_partial_reset = True
            final_obs_kind = FinalObsKind.SIMULATOR

            def reset(self, seed=None, mask=None):
                return {}

            def step(self, action):
                raise NotImplementedError

    assert OldBackend.capabilities == Capabilities(final_obs=FinalObsKind.SIMULATOR, partial_reset=True)
    backend = OldBackend()
    assert backend.supports_partial_reset is True  # read through the alias
    with pytest.warns(DeprecationWarning, match="capabilities"):
        backend.trusted_outputs = True
    assert backend.capabilities.trusted_outputs and not OldBackend.capabilities.trusted_outputs


def test_step_transition_is_raw_step_as_a_tuple():
    env = gpu_envs.builtin.CartPoleEnv(4, seed=0)
    env.reset()
    twin = gpu_envs.builtin.CartPoleEnv(4, seed=0)
    twin.reset()
    action = torch.ones(4, dtype=torch.int64)
    with pytest.warns(DeprecationWarning, match="raw_step"):
        old = env.step_transition(action)
    new = twin.raw_step(action)
    assert type(old) is tuple and len(old) == 8
    assert torch.equal(old[0]["observation"], new.obs["observation"]) and torch.equal(old[1], new.reward)
