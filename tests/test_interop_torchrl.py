"""``to_torchrl``: torchrl's own tools accept every backend, and transitions stay exact through them.

The oracle is the sequential reference loop of tests/fakes.py, read through torchrl's
``Collector`` (the adapter's ``step_and_maybe_reset``) and through a torchrl
``TransformedEnv`` (torchrl's generic ``step`` + ``maybe_reset`` path, which resets by
``"_reset"`` masks).
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("torchrl")

from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector
from torchrl.data import Bounded, Categorical, Composite, MultiCategorical, OneHot, Unbounded
from torchrl.envs import StepCounter
from torchrl.envs import TransformedEnv as TorchRLTransformedEnv
from torchrl.envs.utils import check_env_specs
from torchrl.modules import MLP, ProbabilisticActor

import gpu_envs
from gpu_envs.contract import specs
from gpu_envs.interop import to_torchrl
from gpu_envs.interop.torchrl import TorchRLEnv, torchrl_spec
from gpu_envs.transforms import EpisodeStats, TransformedEnv
from tests.fakes import CountingTorchVectorEnv, assert_trajectory_matches, reference_rollout
from tests.gym_fakes import InfoEnv
from tests.isaac_fakes import FakeIsaacDirectEnv, FakeIsaacManagerEnv
from tests.sync_guard import no_sync

N, T = 6, 60
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

BACKENDS = {
    "builtin-CartPole": lambda: gpu_envs.make("CartPole-v1", num_envs=5, device="cpu", seed=0),
    "builtin-Pendulum": lambda: gpu_envs.make("Pendulum-v1", num_envs=5, device="cpu", seed=0),
    "gymnasium-CartPole": lambda: gpu_envs.make("CartPole-v1", num_envs=3, device="cpu", backend="gymnasium", seed=0),
    "gymnasium-Pendulum": lambda: gpu_envs.make("Pendulum-v1", num_envs=3, device="cpu", backend="gymnasium", seed=0),
    "isaac-direct": lambda: gpu_envs.wrap(FakeIsaacDirectEnv(4, compute_final_obs=True, state=True)),
    "isaac-manager-no-final-obs": lambda: gpu_envs.wrap(FakeIsaacManagerEnv(4)),  # NaN placeholders at step 3
    "torch-user-env": lambda: gpu_envs.wrap(CountingTorchVectorEnv(4, final_obs="info")),
    "transformed": lambda: TransformedEnv(
        gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0), EpisodeStats()
    ),
}
JAX_BACKENDS = {
    "jax-phys2d": lambda: gpu_envs.make("phys2d/CartPole-v1", num_envs=4, device="cpu", backend="jax", seed=0),
    "jax-gymnax": lambda: gpu_envs.make("gymnax/Pendulum-v1", num_envs=4, device="cpu", seed=0),
}


# ------------------------------------------------------------------------ specs
@pytest.mark.parametrize(
    ("ours", "kind"),
    [
        (specs.Box(-1.0, 1.0, (3,)), Bounded),
        (specs.Box(-np.inf, np.inf, (2,)), Unbounded),
        (specs.Box(-1.0, np.inf, (2,)), Bounded),
        (specs.Box(0, 255, (2, 2), dtype=torch.uint8), Bounded),
        (specs.Discrete(3), Categorical),
        (specs.Discrete(3, start=2), Bounded),
        (specs.MultiDiscrete([2, 3, 4]), MultiCategorical),
        (specs.MultiDiscrete([2, 3], start=[1, -1]), Bounded),
        (specs.Binary(4), None),
        (specs.OneHot(5), OneHot),
        (specs.Composite(a=specs.Box(-1.0, 1.0, (2,)), b=specs.Composite(c=specs.Discrete(2))), Composite),
    ],
)
def test_spec_conversion_keeps_shape_dtype_and_range(ours, kind):
    batched = ours.expand(5, *ours.shape)
    theirs = torchrl_spec(batched)
    if kind is not None:
        assert isinstance(theirs, kind)
    assert theirs.shape == batched.shape
    generator = torch.Generator().manual_seed(0)
    for _ in range(25):
        assert batched.contains(theirs.rand()), "torchrl's samples are in our spec"
        assert theirs.is_in(batched.rand(generator=generator)), "our samples are in torchrl's spec"
    if not isinstance(ours, specs.Composite):
        assert theirs.dtype == ours.dtype


# ---------------------------------------------------------- torchrl's own checks
@pytest.mark.parametrize("name", list(BACKENDS))
def test_check_env_specs_passes_on_every_cpu_backend(name):
    env = to_torchrl(BACKENDS[name]())
    assert isinstance(env, TorchRLEnv)
    assert env.batch_size == env.env.batch_size and env.device == env.env.device
    check_env_specs(env, seed=0)
    check_env_specs(env, break_when_any_done="both")


@pytest.mark.slow  # jit compilation
@pytest.mark.parametrize("name", list(JAX_BACKENDS))
def test_check_env_specs_passes_on_jax_backends(name):
    pytest.importorskip("jax")
    check_env_specs(to_torchrl(JAX_BACKENDS[name]()), seed=0)


def test_vector_rewards_of_multi_objective_envs_keep_their_shape():
    pytest.importorskip("mo_gymnasium")
    import mo_gymnasium  # noqa: F401  (registers the mo- ids)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = to_torchrl(gpu_envs.make("mo-mountaincarcontinuous-v0", num_envs=3, device="cpu", seed=0))
    assert env.reward_spec.shape == (3, 2)
    check_env_specs(env)
    assert env.rollout(4, break_when_any_done=False)["next", "reward"].shape == (3, 4, 2)


def test_specs_are_batched_torchrl_specs():
    env = to_torchrl(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu"))
    assert isinstance(env.action_spec, Categorical) and env.action_spec.shape == (8,)
    assert env.observation_spec["observation"].shape == (8, 4)
    assert env.reward_spec.shape == (8, 1) and env.reward_spec.dtype == torch.float32
    assert set(env.done_keys) == {"done", "terminated", "truncated"}
    assert env.full_done_spec["done"].dtype == torch.bool and env.full_done_spec["done"].shape == (8, 1)
    td = env.reset()
    td["action"] = env.action_spec.rand()
    assert env.step(td)["next", "observation"].shape == (8, 4)


def test_probabilistic_actor_accepts_the_action_spec_and_acts():
    env = to_torchrl(gpu_envs.make("CartPole-v1", num_envs=8, device="cpu", seed=0))
    net = TensorDictModule(MLP(out_features=2, num_cells=[16]), in_keys=["observation"], out_keys=["logits"])
    actor = ProbabilisticActor(
        net,
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    data = env.rollout(10, actor, break_when_any_done=False)
    assert data.batch_size == (8, 10)
    assert env.action_spec.is_in(data["action"][:, 0]) and data["action_log_prob"].shape == (8, 10)


def test_refuses_what_is_not_a_gpu_envs_env():
    with pytest.raises(gpu_envs.NotAnEnvError, match=r"gpu_envs\.wrap"):
        to_torchrl(gym.make("CartPole-v1"))


# ------------------------------------------------------------------- exactness
def _parity_policy() -> TensorDictModule:
    """action = (index + episode + step) % 2: a function of the counting observation."""
    return TensorDictModule(
        lambda obs: (obs.nan_to_num().sum(-1) % 2).long(), in_keys=["observation"], out_keys=["action"]
    )


def _reference(final_obs: str) -> dict:
    observations = reference_rollout(N, np.zeros((N, T), np.int64), final_obs)["observation"]
    actions = observations.sum(-1).astype(np.int64) % 2  # the observations do not depend on the actions
    return reference_rollout(N, actions, final_obs)


def _assert_matches(data: TensorDict, expected: dict, step_count: bool = False) -> None:
    assert_trajectory_matches(data, expected)
    if step_count:  # torchrl's StepCounter restarted exactly where the counting env did
        np.testing.assert_array_equal(data["step_count"].squeeze(-1).numpy(), expected["observation"][..., 2])
    ended = expected["terminated"] | expected["truncated"]
    assert ended.all(axis=0).any() and expected["truncated"].any() and expected["terminated"].any()


@pytest.mark.parametrize("final_obs", ["info", "masked", "none"])
def test_collector_transitions_match_the_sequential_reference(final_obs):
    env = to_torchrl(gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs=final_obs)))
    collector = Collector(env, _parity_policy(), frames_per_batch=N * T // 3, total_frames=N * T)
    batches = list(collector)
    collector.shutdown(close_env=False)
    assert [b.batch_size for b in batches] == [torch.Size([N, T // 3])] * 3
    _assert_matches(torch.cat(batches, dim=1), _reference(final_obs))


@pytest.mark.parametrize("final_obs", ["info", "none"])
def test_torchrl_transformed_env_generic_reset_path_matches_the_reference(final_obs):
    """torchrl's TransformedEnv steps, then resets with "_reset" masks: served from the env's cache, never twice."""
    env = TorchRLTransformedEnv(
        to_torchrl(gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs=final_obs))), StepCounter()
    )
    collector = Collector(env, _parity_policy(), frames_per_batch=N * T, total_frames=N * T)
    data = next(iter(collector))
    collector.shutdown(close_env=False)
    _assert_matches(data, _reference(final_obs), step_count=True)


def test_rollout_root_is_the_post_reset_observation():
    env = to_torchrl(gpu_envs.wrap(CountingTorchVectorEnv(N)))
    data = env.rollout(T, _parity_policy(), break_when_any_done=False)
    expected = _reference("info")
    _assert_matches(data, expected)
    np.testing.assert_array_equal(data["observation"][:, 1:].numpy(), expected["root"][:, :-1])
    assert not data["done"].any() and not data["final_obs_missing"].any()


def test_explicit_partial_reset_resets_only_the_masked_rows():
    env = to_torchrl(gpu_envs.wrap(CountingTorchVectorEnv(4)))
    td = env.reset()
    td["action"] = torch.zeros(4, dtype=torch.long)
    _, root = env.step_and_maybe_reset(td)  # step 1: no episode ends (first ones last 3)
    out = env.reset(root.set("_reset", torch.tensor([[True], [False], [True], [False]])))
    assert out["observation"][:, 1].tolist() == [1, 0, 1, 0]  # episode
    assert out["observation"][:, 2].tolist() == [0, 1, 0, 1]  # step


def test_set_seed_makes_rollouts_reproducible():
    env = to_torchrl(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu"))
    runs = []
    for _ in range(2):
        env.set_seed(7)
        torch.manual_seed(0)
        runs.append(env.rollout(20, break_when_any_done=False))
    assert torch.equal(runs[0]["next", "observation"], runs[1]["next", "observation"])


@pytest.mark.parametrize("device", DEVICES)
def test_step_and_maybe_reset_never_syncs(device):
    env = to_torchrl(gpu_envs.make("CartPole-v1", num_envs=16, device=device, seed=0))
    td = env.rand_action(env.reset())
    _, root = env.step_and_maybe_reset(td)  # the first step validates (allowed to sync)
    ended = torch.zeros((), device=device)
    with no_sync():
        for _ in range(100):
            td, root = env.step_and_maybe_reset(env.rand_action(root))
            ended += td["next", "done"].sum()
    assert ended.item() > 0, "the guarded steps covered auto-resets"


def test_policy_keys_carry_over_to_the_next_root():
    env = to_torchrl(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0))
    td = env.rand_action(env.reset())
    td["hidden"] = torch.arange(4.0)
    _, root = env.step_and_maybe_reset(td)
    assert torch.equal(root["hidden"], torch.arange(4.0))


def test_info_entries_ride_along_and_late_ones_are_announced():
    venv = gym.vector.SyncVectorEnv([lambda i=i: InfoEnv(i) for i in range(3)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the gymnasium backend's own note on the string entry
        env = to_torchrl(gpu_envs.wrap(venv, device="cpu"))
        with pytest.warns(UserWarning, match="info entries"):
            data = env.rollout(6, break_when_any_done=False)
    assert data["next", "count"][0].tolist() == [1, 2, 3, 1, 2, 3]
    assert "count" in env.observation_spec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env_specs(env)  # once known, the specs hold them


def test_close_closes_the_env_but_garbage_collection_does_not():
    inner = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu")
    env = to_torchrl(inner)
    del env
    assert not inner.is_closed
    env = to_torchrl(inner)
    env.close()
    assert env.is_closed and inner.is_closed
