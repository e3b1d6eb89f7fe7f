"""Transforms on the device: values against hand computations, specs, order, resets, no syncs.

Each transformed env is compared with an untransformed twin stepped with the same
actions (the counting envs are deterministic), so every expected value is computed by
hand from the raw transitions.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError, ResetNeededError, SpecError
from gpu_envs.contract.specs import Box
from gpu_envs.transforms import (
    ActionRescale,
    ClipAction,
    ClipReward,
    EpisodeStats,
    ObservationNorm,
    RewardScale,
    Transform,
    TransformedEnv,
    completed_episodes,
)
from tests.fakes import CountingTorchVectorEnv
from tests.sync_guard import no_sync

N, T = 6, 40


def counting(final_obs: str = "info", n: int = N) -> gpu_envs.BatchedEnv:
    return gpu_envs.wrap(CountingTorchVectorEnv(n, "cpu", final_obs=final_obs))


def fixed_actions(n: int = N, t: int = T) -> torch.Tensor:
    return (torch.arange(n)[:, None] + torch.arange(t)[None, :]) % 2  # [N, T] in {0, 1}


def replay(env, actions: torch.Tensor) -> list:
    """Step ``env`` with ``actions[:, t]`` from a fresh reset; the list of (td, root) per step."""
    td = env.reset()
    out = []
    for t in range(actions.shape[1]):
        td.set("action", actions[:, t].clone())
        td, root = env.step_and_maybe_reset(td)
        out.append((td, root))
        td = root
    return out


class EchoActionEnv:
    """Torch vector env whose observation is the action it last received (to see rescaling).

    Box action bounds differ per dim; every episode is truncated after 3 steps.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int = 4, low=(-2.0, 0.0), high=(2.0, 10.0)) -> None:
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.single_action_space = gym.spaces.Box(np.array(low, np.float32), np.array(high, np.float32))
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (len(low),), np.float32)
        self.t = torch.zeros(num_envs, dtype=torch.long)

    def reset(self, *, seed=None, options=None):
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        return torch.zeros(self.num_envs, self.single_observation_space.shape[0]), {}

    def step(self, action):
        self.t = self.t + 1
        truncated = self.t >= 3
        self.t = torch.where(truncated, 0, self.t)
        obs = torch.where(truncated[:, None], 0.0, action)
        reward = action.sum(-1)
        false = torch.zeros_like(truncated)
        return obs, reward, false, truncated, {"final_obs": action.clone()}

    def close(self):
        pass


# ---------------------------------------------------------------------------- EpisodeStats


def test_episode_stats_emits_returns_and_lengths_on_done_rows_only():
    actions = fixed_actions()
    raw = replay(counting(), actions)
    stats = EpisodeStats()
    got = replay(TransformedEnv(counting(), stats), actions)
    running_ret, running_len = [0.0] * N, [0] * N
    finished = []
    for (raw_td, _), (td, _) in zip(raw, got, strict=True):
        for i in range(N):
            running_ret[i] += float(raw_td["next", "reward"][i])
            running_len[i] += 1
            done = bool(raw_td["next", "done"][i])
            assert bool(td["next", "done"][i]) == done
            if done:
                assert td["next", "episode_return"][i].item() == pytest.approx(running_ret[i])
                assert td["next", "episode_length"][i].item() == running_len[i]
                finished.append((running_ret[i], running_len[i]))
                running_ret[i], running_len[i] = 0.0, 0
            else:
                assert td["next", "episode_return"][i].item() == 0.0
                assert td["next", "episode_length"][i].item() == 0
    assert len(finished) > 2 * N
    summary = stats.summary()
    assert summary.episodes == len(finished)
    assert summary.mean_return == pytest.approx(sum(r for r, _ in finished) / len(finished))
    assert summary.mean_length == pytest.approx(sum(n for _, n in finished) / len(finished))
    assert stats.running_return.view(-1).tolist() == pytest.approx(running_ret)
    assert stats.running_length.view(-1).tolist() == running_len
    # the same numbers from a stacked trajectory, with the done mask
    traj = torch.stack([td for td, _ in got], dim=1)
    count, mean_ret, mean_len = completed_episodes(traj)
    assert count.item() == len(finished)
    assert mean_ret.item() == pytest.approx(summary.mean_return)
    assert mean_len.item() == pytest.approx(summary.mean_length)


def test_episode_stats_dtypes_spec_and_empty_summary():
    stats = EpisodeStats()
    env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=3, device="cpu", seed=0), stats)
    assert stats.summary().episodes == 0 and math.isnan(stats.summary().mean_return)
    traj = env.rollout(5)
    assert traj["next", "episode_return"].dtype == torch.float32
    assert traj["next", "episode_length"].dtype == torch.int64
    single = env.single_info_spec
    assert single["episode_return"].shape == (1,) and single["episode_length"].dtype == torch.int64
    assert env.info_spec["episode_return"].shape == (3, 1)  # with the batch dims, as in torchrl
    assert single.contains(traj["next"])  # a trajectory [N, T] holds per-env values
    count, mean_ret, _ = completed_episodes(traj)
    assert count.item() == 0 and math.isnan(mean_ret.item())
    assert stats.running_length.view(-1).tolist() == [5, 5, 5]


def test_episode_stats_reset_drops_unfinished_episodes_and_clear_zeroes_the_aggregate():
    stats = EpisodeStats()
    env = TransformedEnv(counting(), stats)
    env.rollout(4)  # first episodes last 3 steps; of the second ones only env 3's lasts 1 step
    assert stats.summary().episodes == N + 1
    assert stats.running_length.view(-1).tolist() == [1, 1, 1, 0, 1, 1]
    before = stats.running_return.clone()
    mask = torch.tensor([True, False] * (N // 2))[:, None]
    td = env.root()
    td.set("_reset", mask)
    env.reset(td=td)  # partial reset: those rows start over, the others keep running
    assert stats.running_length.view(-1).tolist() == [0, 1, 0, 0, 0, 1]
    torch.testing.assert_close(stats.running_return, torch.where(mask, 0.0, before))
    assert before[1].item() > 0
    env.reset()
    assert stats.running_length.sum().item() == 0
    assert stats.summary().episodes == N + 1  # interrupted episodes are not counted
    stats.clear()
    assert stats.summary().episodes == 0
    saved = {
        "episodes": torch.tensor(4),
        "total_return": torch.tensor(10.0, dtype=torch.float64),
        "total_length": torch.tensor(8),
    }
    stats.load_statistics(saved)
    assert stats.summary().mean_return == 2.5 and stats.statistics()["total_length"].item() == 8


# ------------------------------------------------------------------------ ObservationNorm


def _valid_rows(obs: torch.Tensor, missing: torch.Tensor | None) -> torch.Tensor:
    keep = torch.isfinite(obs).all(-1)
    if missing is not None:
        keep &= ~missing.view(-1)
    return obs[keep].double()


@pytest.mark.parametrize("final_obs", ["info", "masked", "none"])
def test_observation_norm_running_stats_match_a_hand_computation(final_obs):
    actions = fixed_actions()
    raw_env = counting(final_obs)
    seen = [raw_env.reset()["observation"].double()]
    for t in range(T):
        td = raw_env.root()
        td.set("action", actions[:, t].clone())
        td, _ = raw_env.step_and_maybe_reset(td)
        seen.append(_valid_rows(td["next", "observation"], td["next", "final_obs_missing"]))
    norm = ObservationNorm()
    got = replay(TransformedEnv(counting(final_obs), norm), actions)
    data = torch.cat(seen)
    assert norm.count().item() == data.shape[0]
    torch.testing.assert_close(norm.mean(), data.mean(0))
    torch.testing.assert_close(norm.var(), data.var(0, unbiased=False))
    assert torch.isfinite(norm.mean()).all() and torch.isfinite(norm.var()).all()
    # the last step's outputs use the final statistics
    td, root = got[-1]
    scale = torch.rsqrt(data.var(0, unbiased=False) + 1e-8).float()
    loc = data.mean(0).float()
    raw_td = raw_env.root()
    torch.testing.assert_close(root["observation"], (raw_td["observation"] - loc) * scale)
    missing = td["next", "final_obs_missing"].view(-1)
    assert torch.isnan(td["next", "observation"][missing]).all()  # placeholders stay placeholders
    assert torch.isfinite(td["next", "observation"][~missing]).all()


def test_observation_norm_root_and_next_agree_on_running_rows_and_freeze():
    norm = ObservationNorm()
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=32, device="cpu", seed=3), norm)
    env.rollout(30)
    td = env.root()
    td.set("action", env.action_spec.rand())
    td, root = env.step_and_maybe_reset(td)
    keep = ~td["next", "done"].view(-1)
    assert keep.any() and not keep.all()
    torch.testing.assert_close(root["observation"][keep], td["next", "observation"][keep])
    norm.freeze()
    frozen = norm.statistics()
    env.rollout(10, reset=False)
    for key, value in norm.statistics().items():
        assert torch.equal(value, frozen[key]), key
    norm.unfreeze()
    env.rollout(2, reset=False)
    assert norm.count().item() > frozen["observation.count"].item()


def test_observation_norm_state_dict_round_trip_and_errors():
    source = ObservationNorm(clip=5.0)
    TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=0), source).rollout(20)
    target = ObservationNorm(clip=5.0, frozen=True)
    env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=1), target)
    target.load_statistics(source.statistics())
    root = env.reset()
    torch.testing.assert_close(target.mean(), source.mean())
    assert root["observation"].abs().max() <= 5.0
    assert env.single_observation_spec["observation"] == Box(-5.0, 5.0, (3,), torch.float32)
    assert env.observation_spec["observation"] == Box(-5.0, 5.0, (3,), torch.float32).expand(8, 3)
    with pytest.raises(InvalidArgumentError, match="do not match"):
        target.load_statistics({"obs.mean": torch.zeros(3)})
    with pytest.raises(InvalidArgumentError, match="set up"):
        ObservationNorm().load_statistics(source.statistics())


def test_observation_norm_key_selection():
    int_env = gpu_envs.wrap(CountingTorchVectorEnv(4, "cpu", obs_dtype=torch.int64))
    with pytest.raises(SpecError, match="no floating-point observation"):
        TransformedEnv(int_env, ObservationNorm())
    with pytest.raises(SpecError, match="only floating-point"):
        TransformedEnv(
            gpu_envs.wrap(CountingTorchVectorEnv(4, "cpu", obs_dtype=torch.int64)), ObservationNorm("observation")
        )
    with pytest.raises(SpecError, match="not an observation key"):
        TransformedEnv(counting(), ObservationNorm(keys=["policy"]))
    norm = ObservationNorm(keys="observation")
    TransformedEnv(counting(), norm)
    assert norm.keys == ["observation"]
    with pytest.raises(InvalidArgumentError):
        ObservationNorm(eps=0)
    with pytest.raises(InvalidArgumentError):
        ObservationNorm(clip=-1.0)


# ---------------------------------------------------------------------------- rewards


def test_reward_scale_and_clip_values_specs_and_order():
    actions = fixed_actions()
    raw = replay(counting(), actions)
    scale_then_clip = replay(TransformedEnv(counting(), RewardScale(0.01, loc=-2.0), ClipReward(-1.5, 0.5)), actions)
    clip_then_scale = replay(TransformedEnv(counting(), ClipReward(-1.5, 0.5), RewardScale(0.01, loc=-2.0)), actions)
    for (raw_td, _), (a, _), (b, _) in zip(raw, scale_then_clip, clip_then_scale, strict=True):
        r = raw_td["next", "reward"]
        torch.testing.assert_close(a["next", "reward"], (r * 0.01 - 2.0).clamp(-1.5, 0.5))
        torch.testing.assert_close(b["next", "reward"], r.clamp(-1.5, 0.5) * 0.01 - 2.0)
    env = TransformedEnv(counting(), RewardScale(-2.0, loc=1.0), ClipReward(-math.inf, 0.0))
    assert env.single_reward_spec == Box(-math.inf, 0.0, (1,), torch.float32)
    assert env.reward_spec == env.single_reward_spec.expand(6, 1)
    assert TransformedEnv(counting(), RewardScale(0.0, loc=3.0)).single_reward_spec == Box(
        3.0, 3.0, (1,), torch.float32
    )
    assert TransformedEnv(counting(), ClipReward(-1, 1)).single_reward_spec == Box(-1.0, 1.0, (1,), torch.float32)
    with pytest.raises(InvalidArgumentError, match="low <= high"):
        ClipReward(1.0, -1.0)
    with pytest.raises(InvalidArgumentError, match="finite"):
        RewardScale(math.nan)
    with pytest.raises(InvalidArgumentError, match="number"):
        RewardScale("2")


# ----------------------------------------------------------------------------- actions


def test_action_rescale_maps_unit_box_to_the_env_bounds():
    env = TransformedEnv(gpu_envs.wrap(EchoActionEnv(4)), ActionRescale())
    assert env.single_action_spec == Box(-1.0, 1.0, (2,), torch.float32)
    assert env.action_spec == Box(-1.0, 1.0, (2,), torch.float32).expand(4, 2)
    td = env.reset()
    policy_action = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0], [0.5, -0.5]])
    td.set("action", policy_action.clone())
    td, _ = env.step_and_maybe_reset(td)
    expected = torch.tensor([[-2.0, 0.0], [2.0, 10.0], [0.0, 5.0], [1.0, 2.5]])
    torch.testing.assert_close(td["next", "observation"], expected)  # what the env received
    torch.testing.assert_close(td["action"], policy_action)  # the policy's action is kept
    traj = env.rollout(6)  # random actions come from the exposed Box(-1, 1)
    assert (traj["action"].abs() <= 1).all()
    received = traj["next", "observation"]
    assert (received[..., 0].abs() <= 2).all() and (received[..., 1] >= 0).all() and (received[..., 1] <= 10).all()


def test_clip_action_and_both_orders_with_rescale():
    big = torch.tensor([[-3.0, -3.0], [3.0, 3.0], [0.0, 0.25], [-0.5, 20.0]])
    env = TransformedEnv(gpu_envs.wrap(EchoActionEnv(4)), ClipAction())
    assert env.single_action_spec == Box(np.array([-2.0, 0.0]), np.array([2.0, 10.0]), (2,), torch.float32)
    td = env.reset()
    td.set("action", big.clone())
    td, _ = env.step_and_maybe_reset(td)
    torch.testing.assert_close(
        td["next", "observation"], torch.tensor([[-2.0, 0.0], [2.0, 3.0], [0.0, 0.25], [-0.5, 10.0]])
    )
    torch.testing.assert_close(td["action"], big)
    for order in ((ClipAction(), ActionRescale()), (ActionRescale(), ClipAction())):
        env = TransformedEnv(gpu_envs.wrap(EchoActionEnv(4)), *order)
        assert env.single_action_spec == Box(-1.0, 1.0, (2,), torch.float32)
        td = env.reset()
        td.set("action", big.clone())
        td, _ = env.step_and_maybe_reset(td)
        # -3 -> low, 3 -> high, 0 -> centre, 0.25 -> 6.25 in [0, 10], -0.5 -> -1, 20 -> high
        want = torch.tensor([[-2.0, 0.0], [2.0, 10.0], [0.0, 6.25], [-1.0, 10.0]])
        torch.testing.assert_close(td["next", "observation"], want)


def test_action_transforms_refuse_specs_they_cannot_handle():
    with pytest.raises(SpecError, match="continuous"):
        TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=2, device="cpu"), ActionRescale())
    with pytest.raises(SpecError, match="Box action spec"):
        TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=2, device="cpu"), ClipAction())
    unbounded = gpu_envs.wrap(EchoActionEnv(2, low=(-np.inf, 0.0), high=(np.inf, 1.0)))
    with pytest.raises(SpecError, match="finite bounds"):
        TransformedEnv(unbounded, ActionRescale())


# ----------------------------------------------------------------- TransformedEnv itself


def test_transformed_env_api_nesting_and_errors():
    stats = EpisodeStats()
    inner = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0), stats, RewardScale(2.0))
    env = TransformedEnv(inner, ClipAction(), ActionRescale())
    assert env.num_envs == 4 and env.batch_size == torch.Size([4]) and env.device == torch.device("cpu")
    assert env.backend.describe() == "torch(PendulumEnv)"  # read through to the BatchedEnv
    assert "EpisodeStats()" in repr(env) and "ActionRescale()" in repr(env)
    with pytest.raises(ResetNeededError):
        env.step(TensorDict({"action": torch.zeros(4, 1)}, [4]))  # never reset through this wrapper
    env.reset(seed=5)
    a = env.rollout(7, reset=False)
    env.reset(seed=5)  # same seed: same random actions (env.generator) and states
    b = env.rollout(7, reset=False)
    assert torch.equal(a["action"], b["action"]) and torch.equal(a["next", "observation"], b["next", "observation"])
    assert env.single_reward_spec.contains(a["next", "reward"])
    assert a["next", "episode_return"].shape == (4, 7, 1)
    c = env.rollout(3, reset=False)
    assert torch.equal(c["observation"][:, 0], b["next", "observation"][:, -1])
    with pytest.raises(InvalidArgumentError, match="Transform instances"):
        TransformedEnv(counting(), EpisodeStats)
    with pytest.raises(InvalidArgumentError, match="already part of another"):
        TransformedEnv(counting(), stats)
    with pytest.raises(InvalidArgumentError, match="BatchedEnv API"):
        TransformedEnv(object())
    with pytest.raises(InvalidArgumentError, match="steps"):
        env.rollout(0)
    with env:
        pass
    assert inner.env.is_closed


def test_a_custom_transform_sees_every_hook():
    calls = []

    class Spy(Transform):
        def inv(self, td):
            calls.append("inv")
            return td

        def step(self, td):
            calls.append("step")
            return td

        def root(self, td):
            calls.append("root")
            return td

    env = TransformedEnv(counting(), Spy())
    td = env.reset()  # reset() defaults to root()
    for _ in range(2):
        td.set("action", env.action_spec.rand())
        td, td = env.step_and_maybe_reset(td)
    assert calls == ["root", "inv", "step", "root", "inv", "step", "root"]
    env.root()
    assert calls[-1] == "root" and len(calls) == 8


def test_collect_in_chunks_equals_one_rollout_through_transforms():
    from gpu_envs.rollout import collect

    def build():
        base = gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0)
        return TransformedEnv(base, EpisodeStats(), ObservationNorm(), RewardScale(0.1), ActionRescale())

    chunked, whole = build(), build()
    chunked.reset(seed=1)
    parts = [collect(chunked, steps=10).clone() for _ in range(3)]  # the root carries over
    whole.reset(seed=1)
    one = whole.rollout(30, reset=False)
    assert torch.equal(torch.cat(parts, dim=1).get(("next", "observation")), one.get(("next", "observation")))
    assert torch.equal(torch.cat(parts, dim=1).get(("next", "reward")), one.get(("next", "reward")))
    assert torch.equal(chunked.transforms[1].mean(), whole.transforms[1].mean())


@pytest.mark.slow
def test_compiled_collection_keeps_the_transform_state_identical_to_eager():
    # torch.compile (2.13, CPU) silently dropped in-place updates of 0-d float64 tensors:
    # the transforms' running state must survive compiled collection unchanged
    from gpu_envs.rollout import collect

    def build():
        base = gpu_envs.make("CartPole-v1", num_envs=16, device="cpu", seed=0)
        return TransformedEnv(base, EpisodeStats(), ObservationNorm(), RewardScale(0.5), ClipReward(-1, 1))

    eager, compiled = build(), build()
    for _ in range(2):
        a = collect(eager, steps=8)
        b = collect(compiled, steps=8, compile=True)
        for key in a.keys(include_nested=True, leaves_only=True):
            torch.testing.assert_close(b.get(key), a.get(key), equal_nan=True, msg=str(key))
    assert compiled.transforms[0].summary() == eager.transforms[0].summary()
    assert eager.transforms[0].summary().episodes > 0
    assert compiled.transforms[1].count().item() == eager.transforms[1].count().item() == 16 * 17
    torch.testing.assert_close(compiled.transforms[1].var(), eager.transforms[1].var())


# --------------------------------------------------------------------------- sync guard


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _transformed(name: str, device: str) -> TransformedEnv:
    if name == "Pendulum-v1":
        base = gpu_envs.make("Pendulum-v1", num_envs=16, device=device, seed=0)
        return TransformedEnv(
            base,
            EpisodeStats(),
            ObservationNorm(clip=10.0),
            RewardScale(0.1),
            ClipReward(-1, 1),
            ClipAction(),
            ActionRescale(),
        )
    if name == "CartPole-no-final-obs":
        base = gpu_envs.make("CartPole-v1", num_envs=16, device=device, seed=0, expose_final_obs=False)
    elif name == "user-env-masked-final-obs":
        base = gpu_envs.wrap(CountingTorchVectorEnv(16, device, final_obs="masked"))
    else:
        base = gpu_envs.make("CartPole-v1", num_envs=16, device=device, seed=0)
    return TransformedEnv(base, EpisodeStats(), ObservationNorm(), RewardScale(0.5, loc=1.0), ClipReward(-1, 1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "CartPole-no-final-obs", "user-env-masked-final-obs"])
def test_transformed_envs_never_sync(name, device):
    env = _transformed(name, device)
    td = env.reset()
    td.set("action", env.action_spec.rand(generator=env.generator))
    td, td = env.step_and_maybe_reset(td)  # the first step validates (allowed to sync)
    with no_sync():
        for _ in range(100):
            td.set("action", env.action_spec.rand(generator=env.generator))
            td, root = env.step_and_maybe_reset(td)
            td = root
        traj = env.rollout(20, reset=False)
        count, _, _ = completed_episodes(traj)
    assert traj.batch_size == torch.Size([16, 20])
    stats = env.transforms[0]
    if name == "Pendulum-v1":  # 200-step episodes: none ended in these 121 steps
        assert stats.running_length.view(-1).tolist() == [121] * 16
    else:
        assert stats.summary().episodes >= count.item() > 0
    norm = env.transforms[1]
    assert torch.isfinite(norm.mean()).all() and torch.isfinite(norm.var()).all()
