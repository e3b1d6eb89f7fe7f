"""``to_gymnasium`` against sequential references of single counting envs (docs/DESIGN.md).

* SAME_STEP: the reference is gymnasium's own ``SyncVectorEnv`` in SAME_STEP mode over
  N single ``CountingEnv``s (it steps them one by one and resets them by hand), so
  observations, rewards, flags, ``final_obs``/``_final_obs`` and ``final_info`` must
  equal gymnasium's, entry by entry.
* NEXT_STEP: the reference is a plain loop of single envs with gymnasium's NEXT_STEP
  semantics (the step after an end gives a reset observation, reward 0, no flags, and
  ignores its action); as documented, the env row's step there is discarded and the row
  reset again, so the loop steps and resets the single env the same way.

Both array kinds, for the torch backend, the gymnasium backend (info entries) and a
TransformedEnv; episodes of known lengths, including a step where every env ends.
Then gymnasium's vector wrappers on the adapter, and its errors.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers import vector as vector_wrappers

import gpu_envs
from gpu_envs.contract.errors import (
    AutoresetModeError,
    InvalidArgumentError,
    NotAnEnvError,
    ResetMaskError,
    ResetNeededError,
)
from gpu_envs.interop import to_gymnasium
from gpu_envs.interop.gymnasium import GymnasiumVectorEnv
from gpu_envs.transforms import EpisodeStats, TransformedEnv
from tests.fakes import CountingEnv, CountingTorchVectorEnv
from tests.gym_fakes import counting_vector_env

N, T = 6, 160
SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
NEXT_STEP = gym.vector.AutoresetMode.NEXT_STEP


def counting_env(source: str, final_obs: str = "info"):
    """A gpu_envs env over N counting envs (row i is CountingEnv(i)) from ``source``."""
    if source == "torch":
        return gpu_envs.wrap(CountingTorchVectorEnv(N, final_obs=final_obs), device="cpu")
    if source == "gymnasium":
        return gpu_envs.wrap(counting_vector_env(N, "same_step"), device="cpu")
    if source == "transformed":
        return TransformedEnv(gpu_envs.wrap(CountingTorchVectorEnv(N), device="cpu"), EpisodeStats())
    raise AssertionError(source)


def random_actions(steps: int = T, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, size=(steps, N))


def numpy_of(x):
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def gymnasium_same_step_reference() -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([lambda i=i: CountingEnv(i) for i in range(N)], autoreset_mode=SAME_STEP)


def next_step_reference(actions: np.ndarray) -> tuple[np.ndarray, list[tuple]]:
    """Reset observations and per step ``(obs, reward, terminated, truncated, step_count, has_info)``."""
    envs = [CountingEnv(i) for i in range(N)]
    first = np.stack([env.reset()[0] for env in envs])
    pending = [False] * N
    steps = []
    for t in range(actions.shape[0]):
        rows = []
        for i, env in enumerate(envs):
            action = int(actions[t, i])
            if pending[i]:  # the step after an end: discarded, then a fresh reset
                _, _, term, trunc, _ = env.step(action)
                if term or trunc:
                    env.reset()
                rows.append((env.reset()[0], 0.0, False, False, 0, False))
                pending[i] = False
            else:
                obs, reward, term, trunc, info = env.step(action)
                if term or trunc:
                    env.reset()  # the env below resets within the step
                    pending[i] = True
                rows.append((obs, reward, term, trunc, info["step_count"], True))
        steps.append(tuple(np.stack(column) for column in zip(*rows, strict=True)))
    return first, steps


def assert_coverage(terminated: np.ndarray, truncated: np.ndarray) -> None:
    done = terminated | truncated
    assert terminated.any() and truncated.any()
    assert done.all(axis=1).any(), "a step where every env ends at once"
    assert (~done).all(axis=1).any(), "a step where no env ends"


# ------------------------------------------------------------------ the oracles
@pytest.mark.parametrize("arrays", ["numpy", "torch"])
@pytest.mark.parametrize("source", ["torch", "gymnasium", "transformed"])
def test_same_step_equals_gymnasium_sync_vector_env(source, arrays):
    actions = random_actions()
    ours = to_gymnasium(counting_env(source), arrays=arrays, autoreset_mode="same_step")
    ref = gymnasium_same_step_reference()
    assert ours.metadata["autoreset_mode"] == SAME_STEP
    np.testing.assert_array_equal(numpy_of(ours.reset(seed=0)[0]), ref.reset(seed=0)[0])
    terminated_seen, truncated_seen = [], []
    for t in range(T):
        action = actions[t] if arrays == "numpy" else torch.as_tensor(actions[t])
        obs, reward, terminated, truncated, info = ours.step(action)
        want = ref.step(actions[t])
        if arrays == "numpy":
            assert all(isinstance(x, np.ndarray) for x in (obs, reward, terminated, truncated))
        else:
            assert all(isinstance(x, torch.Tensor) for x in (obs, reward, terminated, truncated))
        for name, have, expected in zip(
            ("obs", "reward", "terminated", "truncated"), (obs, reward, terminated, truncated), want[:4], strict=True
        ):
            np.testing.assert_array_equal(
                numpy_of(have), expected.astype(numpy_of(have).dtype), err_msg=f"{name} t={t}"
            )
        ref_info = want[4]
        done = want[2] | want[3]
        if arrays == "numpy" and not done.any():
            assert "final_obs" not in info  # gymnasium adds it only when some row ended
        if done.any():
            np.testing.assert_array_equal(numpy_of(info["_final_obs"]), ref_info["_final_obs"])
            np.testing.assert_array_equal(numpy_of(info["_final_info"]), ref_info["_final_info"])
            if arrays == "numpy":
                assert info["final_obs"].dtype == object
                assert [row is None for row in info["final_obs"]] == [row is None for row in ref_info["final_obs"]]
                finals = [row for row in info["final_obs"] if row is not None]
                wants = [row for row in ref_info["final_obs"] if row is not None]
                np.testing.assert_array_equal(np.stack(finals), np.stack(wants))
            else:
                np.testing.assert_array_equal(numpy_of(info["final_obs"])[done], np.stack(ref_info["final_obs"][done]))
        if source == "gymnasium":  # the env's info entry: every row, and the final step's in final_info
            stepped = ~done
            np.testing.assert_array_equal(numpy_of(info["step_count"])[stepped], ref_info["step_count"][stepped])
            assert numpy_of(info["_step_count"]).all()
            if done.any():
                np.testing.assert_array_equal(
                    numpy_of(info["final_info"]["step_count"])[done], ref_info["final_info"]["step_count"][done]
                )
        if source == "transformed" and done.any():  # EpisodeStats' entries: the episode's length
            lengths = numpy_of(info["final_info"]["episode_length"])[done].reshape(-1)
            np.testing.assert_array_equal(lengths, np.stack(ref_info["final_obs"][done])[:, 2])
        terminated_seen.append(want[2])
        truncated_seen.append(want[3])
    assert_coverage(np.stack(terminated_seen), np.stack(truncated_seen))
    ours.close()


@pytest.mark.parametrize("arrays", ["numpy", "torch"])
@pytest.mark.parametrize("source", ["torch", "gymnasium", "transformed"])
def test_next_step_equals_sequential_reference(source, arrays):
    actions = random_actions(seed=1)
    first, reference = next_step_reference(actions)
    ours = to_gymnasium(counting_env(source), arrays=arrays)  # NEXT_STEP is the default, as in gymnasium
    assert ours.metadata["autoreset_mode"] == NEXT_STEP
    np.testing.assert_array_equal(numpy_of(ours.reset()[0]), first)
    for t in range(T):
        obs, reward, terminated, truncated, info = ours.step(
            actions[t] if arrays == "numpy" else torch.as_tensor(actions[t])
        )
        want_obs, want_reward, want_term, want_trunc, want_count, has_info = reference[t]
        np.testing.assert_array_equal(numpy_of(obs), want_obs, err_msg=f"obs t={t}")
        np.testing.assert_array_equal(numpy_of(reward), want_reward.astype(np.float32), err_msg=f"reward t={t}")
        np.testing.assert_array_equal(numpy_of(terminated), want_term, err_msg=f"terminated t={t}")
        np.testing.assert_array_equal(numpy_of(truncated), want_trunc, err_msg=f"truncated t={t}")
        assert "final_obs" not in info
        if source == "gymnasium":  # info entries only on rows that stepped
            np.testing.assert_array_equal(numpy_of(info["_step_count"]), has_info)
            np.testing.assert_array_equal(numpy_of(info["step_count"])[has_info], want_count[has_info])
    terminated = np.stack([step[2] for step in reference])
    truncated = np.stack([step[3] for step in reference])
    assert_coverage(terminated, truncated)
    reset_steps = ~np.stack([step[5] for step in reference])
    assert reset_steps.any() and (np.stack([step[0] for step in reference])[reset_steps][:, 2] == 0).all()


@pytest.mark.parametrize("arrays", ["numpy", "torch"])
def test_rows_without_a_final_observation_are_left_out_of_final_obs(arrays):
    ours = to_gymnasium(counting_env("torch", final_obs="masked"), arrays=arrays, autoreset_mode="same_step")
    ours.reset()
    withheld = 0
    for _ in range(60):
        _, _, terminated, truncated, info = ours.step(np.zeros(N, dtype=np.int64))
        done = numpy_of(terminated) | numpy_of(truncated)
        if done.any():
            valid = numpy_of(info["_final_obs"])
            assert not (valid & ~done).any()
            withheld += int((done & ~valid).sum())
            if arrays == "numpy":
                assert all((row is None) == (not ok) for row, ok in zip(info["final_obs"], valid, strict=True))
    assert withheld > 0


def test_torch_arrays_stay_on_the_env_device_without_copies():
    env = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0)
    ours = to_gymnasium(env, arrays="torch", autoreset_mode="same_step")
    obs, _ = ours.reset()
    root = ours._root
    assert obs.data_ptr() == root["observation"].data_ptr()  # the env's own tensor
    action = torch.ones(4, dtype=torch.long)
    obs, reward, *_ = ours.step(action)
    assert obs.data_ptr() == ours._root["observation"].data_ptr()
    assert reward.dtype == torch.float32 and reward.device == env.device


def test_device_actions_pass_through_and_numpy_actions_are_converted():
    from gpu_envs.interop.conversions import action_tensor

    env = gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu")
    torque = torch.zeros(4, 1)
    assert action_tensor(torque, env.action_spec, env.device) is torque
    converted = action_tensor(np.zeros((4, 1)), env.action_spec, env.device)  # float64 -> the spec's float32
    assert converted.dtype == torch.float32 and converted.shape == (4, 1)
    cartpole = gpu_envs.make("CartPole-v1", num_envs=4, device="cpu")
    assert action_tensor(np.ones(4, np.int32), cartpole.action_spec, cartpole.device).dtype == torch.int64
    # a float action for a Discrete env is not truncated silently: the env names the dtype
    ours = to_gymnasium(cartpole)
    ours.reset()
    with pytest.raises(gpu_envs.ActionError, match="dtype"):
        ours.step(np.ones(4, np.float32))


# -------------------------------------------------------------- spaces and API
def test_spaces_metadata_and_type():
    env = gpu_envs.make("Pendulum-v1", num_envs=5, device="cpu")
    ours = to_gymnasium(env, autoreset_mode=SAME_STEP)
    assert isinstance(ours, gym.vector.VectorEnv) and ours.num_envs == 5
    assert ours.unwrapped is env.backend.env  # the simulator (here the built-in PendulumEnv), as every adapter's
    assert ours.single_observation_space == gym.make("Pendulum-v1").observation_space
    assert ours.single_action_space == gym.make("Pendulum-v1").action_space
    assert ours.observation_space == gym.vector.utils.batch_space(ours.single_observation_space, 5)
    assert ours.action_space == gym.vector.utils.batch_space(ours.single_action_space, 5)
    assert ours.metadata["autoreset_mode"] == SAME_STEP
    assert ours.observation_space.contains(ours.reset(seed=0)[0])
    ours.close()
    assert ours.closed and env.is_closed


def test_dict_observations_keep_the_dict_layout():
    class GroupsEnv(CountingTorchVectorEnv):
        def __init__(self):
            super().__init__(3)
            box = self.single_observation_space
            self.single_observation_space = gym.spaces.Dict({"policy": box, "critic": gym.spaces.Dict({"state": box})})

        def _obs(self):
            obs = super()._obs()
            return {"policy": obs, "critic": {"state": obs * 2}}

    ours = to_gymnasium(gpu_envs.wrap(GroupsEnv(), device="cpu"))
    obs, _ = ours.reset()
    assert set(obs) == {"policy", "critic"} and set(obs["critic"]) == {"state"}
    assert ours.observation_space.contains(obs)
    np.testing.assert_array_equal(obs["critic"]["state"], 2 * obs["policy"])


def test_seeded_resets_are_reproducible_and_partial_resets_touch_only_masked_rows():
    ours = to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu"))
    first, _ = ours.reset(seed=7)
    again, _ = ours.reset(seed=7)
    np.testing.assert_array_equal(first, again)
    ours.step(np.ones(4, np.int64))
    before = ours.step(np.ones(4, np.int64))[0]
    mask = np.array([True, False, True, False])
    after, _ = ours.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(after[~mask], before[~mask])
    assert (np.abs(after[mask]) <= 0.05).all() and not np.array_equal(after[mask], before[mask])


def test_clear_errors():
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu")
    with pytest.raises(NotAnEnvError, match=r"gpu_envs.wrap"):
        to_gymnasium(gym.make("CartPole-v1"))
    with pytest.raises(InvalidArgumentError, match="'numpy' or 'torch'"):
        to_gymnasium(env, arrays="jax")
    with pytest.raises(AutoresetModeError, match="next_step"):
        to_gymnasium(env, autoreset_mode="disabled")
    ours = to_gymnasium(env)
    with pytest.raises(ResetNeededError, match="reset"):
        ours.step(np.zeros(2, np.int64))
    with pytest.raises(InvalidArgumentError, match="one int"):
        ours.reset(seed=[1, 2])
    with pytest.raises(InvalidArgumentError, match="reset_mask"):
        ours.reset(options={"low": -0.1})
    ours.reset()
    with pytest.raises(ResetMaskError, match="bool"):
        ours.reset(options={"reset_mask": np.ones(3, bool)})

    class NoMaskedResets(CountingTorchVectorEnv):
        supports_reset_mask = False

    rigid = gpu_envs.wrap(NoMaskedResets(2), device="cpu")
    with pytest.raises(AutoresetModeError, match="same_step"):
        to_gymnasium(rigid)
    assert isinstance(to_gymnasium(rigid, autoreset_mode="same_step"), GymnasiumVectorEnv)


# --------------------------------------------------------- gymnasium's wrappers
class Replay(gym.vector.VectorEnv):
    """A plain numpy VectorEnv replaying recorded steps (what gymnasium would return)."""

    def __init__(self, like: gym.vector.VectorEnv, first: np.ndarray, steps: list[tuple], mode) -> None:
        self.num_envs = like.num_envs
        self.single_observation_space, self.observation_space = like.single_observation_space, like.observation_space
        self.single_action_space, self.action_space = like.single_action_space, like.action_space
        self.metadata = {"autoreset_mode": mode}
        self.first, self.steps, self.t = first, steps, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.first.copy(), {}

    def step(self, actions):
        obs, reward, terminated, truncated = self.steps[self.t][:4]
        self.t += 1
        return obs.copy(), reward.astype(np.float32), terminated.copy(), truncated.copy(), {}


def _run(venv, actions):
    out = [venv.reset(seed=0)]
    out += [venv.step(a) for a in actions]
    return out


def _assert_same_runs(ours, theirs, keys=("r", "l")):
    for step, (got, want) in enumerate(zip(ours, theirs, strict=True)):
        for have, expected in zip(got[:-1], want[:-1], strict=True):
            np.testing.assert_allclose(have, expected, rtol=1e-6, err_msg=f"step {step}")
        if "episode" in want[-1]:
            np.testing.assert_array_equal(got[-1]["_episode"], want[-1]["_episode"])
            for key in keys:
                np.testing.assert_allclose(got[-1]["episode"][key], want[-1]["episode"][key], rtol=1e-6)
        else:
            assert "episode" not in got[-1]


@pytest.mark.parametrize(
    "wrap",
    [vector_wrappers.RecordEpisodeStatistics, vector_wrappers.NormalizeReward, vector_wrappers.NormalizeObservation],
)
def test_stateful_wrappers_see_what_they_see_on_gymnasium_next_step(wrap):
    actions = random_actions(120, seed=2)
    first, reference = next_step_reference(actions)
    ours = to_gymnasium(counting_env("torch"))
    got = _run(wrap(ours), actions)
    want = _run(wrap(Replay(ours, first, reference, NEXT_STEP)), actions)
    _assert_same_runs(got, want)
    if wrap is vector_wrappers.RecordEpisodeStatistics:
        assert sum(int(step[-1].get("_episode", np.zeros(1)).sum()) for step in got[1:]) > 40


@pytest.mark.parametrize("wrap", [vector_wrappers.RecordEpisodeStatistics, vector_wrappers.NormalizeReward])
def test_stateful_wrappers_match_gymnasium_same_step(wrap):
    actions = random_actions(120, seed=3)
    ours = wrap(to_gymnasium(counting_env("torch"), autoreset_mode="same_step"))
    theirs = wrap(gymnasium_same_step_reference())
    _assert_same_runs(_run(ours, actions), _run(theirs, actions))


def test_normalize_observation_refuses_same_step_as_it_does_for_gymnasium():
    with pytest.raises(ValueError, match="NEXT_STEP"):
        vector_wrappers.NormalizeObservation(gymnasium_same_step_reference())
    with pytest.raises(ValueError, match="NEXT_STEP"):
        vector_wrappers.NormalizeObservation(to_gymnasium(counting_env("torch"), autoreset_mode="same_step"))


def test_dict_info_to_list_gives_each_row_its_final_observation():
    actions = random_actions(40, seed=4)
    ours = vector_wrappers.DictInfoToList(to_gymnasium(counting_env("torch"), autoreset_mode="same_step"))
    theirs = vector_wrappers.DictInfoToList(gymnasium_same_step_reference())
    for got, want in zip(_run(ours, actions)[1:], _run(theirs, actions)[1:], strict=True):
        assert isinstance(got[-1], list) and len(got[-1]) == N
        for row_got, row_want in zip(got[-1], want[-1], strict=True):
            assert ("final_obs" in row_got) == ("final_obs" in row_want)
            if "final_obs" in row_want:
                np.testing.assert_array_equal(row_got["final_obs"], row_want["final_obs"])


class EchoEnv:
    """Torch vector env with Box(-1, 1) actions whose observation is the action it received."""

    single_observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, num_envs: int = 3) -> None:
        self.num_envs = num_envs
        self.device = torch.device("cpu")

    def reset(self, *, seed=None, options=None):
        return torch.zeros(self.num_envs, 2), {}

    def step(self, action):
        flags = torch.zeros(self.num_envs, dtype=torch.bool)
        return action.clone(), torch.zeros(self.num_envs), flags, flags, {}


def test_clip_action_clips_actions_before_the_env():
    venv = vector_wrappers.ClipAction(to_gymnasium(gpu_envs.wrap(EchoEnv(), device="cpu"), autoreset_mode="same_step"))
    venv.reset()
    actions = np.array([[5.0, -0.5], [-3.0, 0.25], [0.0, 1.5]], np.float32)
    received = venv.step(actions)[0]
    np.testing.assert_array_equal(received, np.clip(actions, -1, 1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arrays", ["numpy", "torch"])
def test_cuda_env_gives_host_arrays_or_device_tensors(arrays):
    ours = to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=8, device="cuda", seed=0), arrays=arrays)
    ours.reset(seed=0)
    for _ in range(30):  # numpy actions from the action space cross to the device
        obs, reward, terminated, truncated, _ = ours.step(ours.action_space.sample())
    outputs = (obs, reward, terminated, truncated)
    if arrays == "numpy":
        assert all(isinstance(x, np.ndarray) for x in outputs)
    else:
        assert all(x.device.type == "cuda" for x in outputs)
        action = torch.ones(8, dtype=torch.long, device="cuda")
        assert ours.step(action)[0].device.type == "cuda"


class MOCountingEnv(CountingEnv):
    """CountingEnv with mo-gymnasium's vector reward: (counting reward, -step)."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(index)
        self.reward_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.array([reward, -self.t], dtype=np.float32), terminated, truncated, info


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_vector_rewards_of_multi_objective_envs_stay_n_by_k(mode):
    mo_vector = pytest.importorskip("mo_gymnasium.wrappers.vector")
    actions = random_actions(40, seed=5)
    ours = to_gymnasium(
        gpu_envs.wrap(mo_vector.MOSyncVectorEnv([lambda i=i: MOCountingEnv(i) for i in range(N)])), autoreset_mode=mode
    )
    ours.reset()
    if mode == "same_step":
        ref = gymnasium_same_step_reference()
        ref.reset()
        wants = [ref.step(a)[1] for a in actions]
    else:
        wants = [step[1] for step in next_step_reference(actions)[1]]
    for action, want in zip(actions, wants, strict=True):
        obs, reward, *_ = ours.step(action)
        assert reward.shape == (N, 2)
        np.testing.assert_array_equal(reward[:, 0], want.astype(np.float32))
        if mode == "next_step":  # -step count: the returned obs' own (0 on reset rows, whose reward is all 0)
            np.testing.assert_array_equal(reward[:, 1], -obs[:, 2])
        else:  # every row stepped (the obs of ended rows is already the reset one)
            assert (reward[:, 1] <= -1).all()
    with pytest.raises(gpu_envs.SpecError, match="to_sb3"):
        from gpu_envs.interop import to_sb3

        to_sb3(ours.env)
