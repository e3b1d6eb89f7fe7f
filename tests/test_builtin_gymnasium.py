"""The built-in envs keep gymnasium's conventions (issue 9, deliverable 2; issue 26).

* ``gymnasium.make_vec("gpu_envs/CartPole-v1", ...)`` builds them once gpu_envs is
  imported (and the ``"gpu_envs:..."`` form imports it) as gymnasium's own vector envs
  are: numpy arrays, NEXT_STEP auto-reset, so gymnasium's vector wrappers run on them;
  ``gymnasium.make("gpu_envs/<id>")`` gives one env that ``check_env`` passes, and
  CleanRL's unmodified ``ppo.py`` trains on it;
* ``arrays="torch", autoreset_mode="same_step"`` gives the env itself behind the
  gymnasium-facing boundary: ``envs.step(envs.action_space.sample())`` works, numpy
  actions (and lists, and tensors on another device) are converted there, tensors on the
  device pass through;
* the env's own ``step`` takes tensors on its device only, and says where numpy goes;
* torchrl's ``GymWrapper`` takes them the way their docstrings say.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
import types
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.builtin import CartPoleEnv, PendulumEnv
from gpu_envs.builtin.gymnasium_ids import GymnasiumActions
from gpu_envs.gymnasium_ids import register_gymnasium_ids

ENVS = {"CartPole-v1": CartPoleEnv, "Pendulum-v1": PendulumEnv}
NATIVE = {"arrays": "torch", "autoreset_mode": "same_step"}  # the built-in env itself behind GymnasiumActions


def _steps(env, actions):
    env.reset(seed=3)
    return [env.step(a) for a in actions]


@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_numpy_actions_from_the_action_space_step_like_tensors(env_id):
    env = gymnasium.make_vec(f"gpu_envs/{env_id}", num_envs=6, seed=0, **NATIVE)
    env.action_space.seed(1)
    numpy_actions = [env.action_space.sample() for _ in range(30)]
    assert isinstance(numpy_actions[0], np.ndarray)
    with_numpy = _steps(env, numpy_actions)
    as_lists = _steps(env, [a.tolist() for a in numpy_actions])
    as_tensors = _steps(env, [torch.as_tensor(a) for a in numpy_actions])
    for got_numpy, got_list, want in zip(with_numpy, as_lists, as_tensors, strict=True):
        for a, b, c in zip(got_numpy[:4], got_list[:4], want[:4], strict=True):
            assert torch.equal(a, c) and torch.equal(b, c)
        assert torch.equal(got_numpy[4]["final_obs"], want[4]["final_obs"])


def test_float64_torques_are_accepted_and_cast():
    env = gymnasium.make_vec("gpu_envs/Pendulum-v1", num_envs=4, seed=0, **NATIVE)
    env.reset(seed=0)
    obs64 = env.step(np.full((4, 1), 0.5))[0]
    env.reset(seed=0)
    obs32 = env.step(torch.full((4, 1), 0.5))[0]
    assert torch.equal(obs64, obs32)


def test_action_tensor_on_the_env_device_is_used_without_a_copy():
    env = CartPoleEnv(num_envs=4)
    action = torch.ones(4, dtype=torch.long)
    assert env._as_action(action) is action
    boundary = GymnasiumActions(env)
    assert boundary.actions(action) is action
    from_numpy = boundary.actions(np.ones(4, dtype=np.int64))
    assert isinstance(from_numpy, torch.Tensor) and from_numpy.device == env.device


@pytest.mark.parametrize("action", [np.ones(4, dtype=np.int64), [1, 1, 1, 1]], ids=["numpy", "list"])
def test_the_env_itself_refuses_numpy_actions_naming_the_boundary(action):
    env = CartPoleEnv(num_envs=4, seed=0)
    env.reset(seed=0)
    with pytest.raises(gpu_envs.ActionError, match=r"torch\.Tensor on cpu.*gymnasium\.make_vec\('gpu_envs/<id>'"):
        env.step(action)
    env.step(torch.ones(4, dtype=torch.long))  # nothing moved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device (CUDA)")
def test_actions_on_another_device_are_moved_to_the_env():
    env = gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=4, device="cuda", **NATIVE)
    env.reset(seed=0)
    obs = env.step(torch.ones(4, dtype=torch.long))[0]  # a CPU tensor for a CUDA env
    assert obs.device.type == "cuda"
    obs = env.step(np.ones(4, dtype=np.int64))[0]
    assert obs.device.type == "cuda"


@pytest.mark.parametrize(
    ("env_id", "cls", "limit"), [("CartPole-v1", CartPoleEnv, 500), ("Pendulum-v1", PendulumEnv, 200)]
)
def test_gymnasium_make_vec_builds_the_builtin_env(env_id, cls, limit):
    """numpy arrays and NEXT_STEP by default, as gymnasium's own vector envs; ``envs.unwrapped`` is the built-in env."""
    envs = gymnasium.make_vec(f"gpu_envs/{env_id}", num_envs=8, vectorization_mode="vector_entry_point", seed=5)
    assert type(envs.unwrapped) is cls and isinstance(envs, gymnasium.vector.VectorEnv)
    assert envs.num_envs == 8 and envs.unwrapped.device == torch.device("cpu")
    assert envs.spec.id == f"gpu_envs/{env_id}" and envs.unwrapped.max_episode_steps == limit
    assert envs.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.NEXT_STEP
    obs, _ = envs.reset(seed=0)
    obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
    assert obs.shape == (8, *envs.single_observation_space.shape) and reward.shape == terminated.shape == (8,)
    for value, dtype in ((obs, np.float32), (reward, np.float32), (terminated, np.bool_), (truncated, np.bool_)):
        assert type(value) is np.ndarray and value.dtype == dtype
    assert envs.observation_space.contains(obs)
    # the default vectorization mode is the vector entry point; "sync" batches gymnasium.make's single envs
    assert type(gymnasium.make_vec(f"gpu_envs/{env_id}", num_envs=2).unwrapped) is cls
    sync = gymnasium.make_vec(f"gpu_envs/{env_id}", num_envs=2, vectorization_mode="sync")
    assert isinstance(sync, gymnasium.vector.SyncVectorEnv) and sync.reset(seed=0)[0].dtype == np.float32
    assert register_gymnasium_ids() == ["gpu_envs/CartPole-v1", "gpu_envs/Pendulum-v1"]  # idempotent


def test_make_vec_options_give_torch_arrays_and_same_step():
    torch_next = gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=3, arrays="torch")
    assert torch_next.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.NEXT_STEP
    assert isinstance(torch_next.reset(seed=0)[0], torch.Tensor)
    numpy_same = gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=3, autoreset_mode="same_step")
    numpy_same.reset(seed=0)
    ends = [numpy_same.step(np.ones(3, dtype=np.int64))[4] for _ in range(40)]
    final = next(info for info in ends if "final_obs" in info)
    assert final["_final_obs"].any() and isinstance(final["final_obs"][final["_final_obs"]][0], np.ndarray)
    native = gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=3, **NATIVE)
    assert isinstance(native, GymnasiumActions) and type(native.unwrapped) is CartPoleEnv
    assert native.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    with pytest.raises(gpu_envs.AutoresetModeError, match="next_step"):
        gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=3, autoreset_mode="disabled")


def test_gymnasiums_vector_wrappers_run_on_make_vec():
    """RecordEpisodeStatistics, NormalizeObservation, TransformObservation, ClipAction: each once broke on tensors
    or on the SAME_STEP mode ("Expected autoreset_mode to be NEXT_STEP or DISABLED")."""
    wrappers = gymnasium.wrappers.vector
    envs = wrappers.RecordEpisodeStatistics(gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=4))
    envs = wrappers.NormalizeObservation(envs)
    envs = wrappers.TransformObservation(envs, lambda obs: np.clip(obs, -5, 5), envs.observation_space)
    obs, _ = envs.reset(seed=0)
    envs.action_space.seed(0)
    lengths = []
    for _ in range(300):
        obs, _, terminated, truncated, info = envs.step(envs.action_space.sample())
        assert np.isfinite(obs).all() and (np.abs(obs) <= 5).all()
        if "episode" in info:
            ended = info["_episode"]
            assert np.array_equal(ended, terminated | truncated)
            lengths += info["episode"]["l"][ended].tolist()
            # CartPole pays 1 per step: an episode's return is its length (no NEXT_STEP reward-0 step counted)
            assert np.array_equal(info["episode"]["r"][ended], info["episode"]["l"][ended].astype(np.float32))
    assert len(lengths) > 20 and min(lengths) >= 8 and max(lengths) <= 500
    clipped = wrappers.ClipAction(gymnasium.make_vec("gpu_envs/Pendulum-v1", num_envs=3, seed=1))
    plain = gymnasium.make_vec("gpu_envs/Pendulum-v1", num_envs=3, seed=1)
    clipped.reset(seed=2), plain.reset(seed=2)
    for _ in range(5):
        torque = np.array([[5.0], [-7.0], [0.5]], dtype=np.float32)
        np.testing.assert_array_equal(clipped.step(torque)[0], plain.step(np.clip(torque, -2, 2))[0])


@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_gymnasium_make_gives_a_single_env_that_check_env_passes(env_id):
    """``gymnasium.make("gpu_envs/<id>")`` once failed with gymnasium's bare "entry_point is not specified"."""
    from gymnasium.utils.env_checker import check_env

    def warnings_of(env) -> set[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env)
        return {str(w.message) for w in caught}

    env = gymnasium.make(f"gpu_envs/{env_id}", render_mode="rgb_array")
    assert (
        isinstance(env.unwrapped, gymnasium.Env)
        and env.spec.max_episode_steps == ENVS[env_id].default_max_episode_steps
    )
    # the same (space) warnings as gymnasium's own env of that id, nothing more
    assert warnings_of(env.unwrapped) == warnings_of(gymnasium.make(env_id).unwrapped)
    obs, info = env.reset(seed=0)
    assert type(obs) is np.ndarray and obs.dtype == np.float32 and env.observation_space.contains(obs) and info == {}
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3
    steps, ended = 0, False
    while not ended:
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert type(reward) is float and type(terminated) is bool and type(truncated) is bool
        steps, ended = steps + 1, terminated or truncated
    assert env.observation_space.contains(env.reset()[0])
    env.close()


@pytest.mark.slow
def test_module_prefixed_id_imports_gpu_envs_itself():
    code = (
        "import sys, gymnasium\n"
        "assert 'gpu_envs' not in sys.modules\n"
        "envs = gymnasium.make_vec('gpu_envs:gpu_envs/CartPole-v1', num_envs=3)\n"
        "print(type(envs.unwrapped).__name__, envs.num_envs)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["CartPoleEnv", "3"]


@pytest.mark.parametrize(
    ("kwargs", "action_shape", "integer_actions"),
    [
        ({}, (8, 2), False),  # torchrl's default for Discrete: one-hot
        ({"categorical_action_encoding": True}, (8,), True),
        ({"categorical_action_encoding": True, "convert_actions_to_numpy": False}, (8,), True),
    ],
)
def test_torchrl_gym_wrapper_takes_cartpole_as_documented(kwargs, action_shape, integer_actions):
    from torchrl.envs import GymWrapper
    from torchrl.envs.utils import check_env_specs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # torchrl hands numpy actions unless convert_actions_to_numpy=False: the gymnasium-facing env takes them
        numpy_actions = kwargs.get("convert_actions_to_numpy", True)
        cartpoles = (
            # torchrl takes SAME_STEP (or DISABLED) vector envs, gymnasium's own as ours
            gymnasium.make_vec("gpu_envs/CartPole-v1", num_envs=8, seed=0, autoreset_mode="same_step")
            if numpy_actions
            else CartPoleEnv(8, seed=0)
        )
        env = GymWrapper(cartpoles, **kwargs)
        check_env_specs(env)
        traj = env.rollout(250, break_when_any_done=False)
    assert env.batch_size == torch.Size([8])
    assert traj["action"].shape == (8, 250, *action_shape[1:])
    assert integer_actions == (traj["action"].dim() == 2)
    terminated = traj["next", "terminated"].squeeze(-1)
    assert terminated.sum() > 20
    final = traj["next", "observation"][terminated]
    # the TRUE final observations: the cart or the pole is out of bounds
    assert (
        (final[:, 0].abs() > CartPoleEnv.x_threshold) | (final[:, 2].abs() > CartPoleEnv.theta_threshold_radians)
    ).all()
    # and the next step starts from a reset state
    assert (traj["observation"][:, 1:][terminated[:, :-1]].abs() <= CartPoleEnv.reset_high).all()


def test_torchrl_gym_wrapper_takes_pendulum_as_documented():
    from torchrl.envs import GymWrapper
    from torchrl.envs.utils import check_env_specs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = GymWrapper(PendulumEnv(4, seed=0), convert_actions_to_numpy=False)
        check_env_specs(env)
        traj = env.rollout(201, break_when_any_done=False)
    assert traj["action"].shape == (4, 201, 1)
    assert traj["next", "truncated"][:, 199].all() and not traj["next", "truncated"][:, 200].any()


@pytest.mark.slow
def test_cleanrls_unmodified_ppo_runs_on_the_gymnasium_id(tmp_path, monkeypatch, capsys):
    """CleanRL's ``ppo.py`` (tests/third_party/cleanrl, byte for byte) for 3 iterations with env_id="gpu_envs/CartPole-v1":
    its ``SyncVectorEnv([lambda: RecordEpisodeStatistics(gym.make(env_id))])`` runs on gpu_envs' single envs."""
    script = Path(__file__).parent / "third_party" / "cleanrl" / "ppo.py"
    args = {"env_id": "gpu_envs/CartPole-v1", "num_envs": 4, "num_steps": 64, "total_timesteps": 3 * 4 * 64}
    args.update(cuda=False, torch_deterministic=True, seed=1)
    try:
        import tyro  # noqa: F401  (the real command line parser, when installed)

        monkeypatch.setattr(sys, "argv", [str(script), *(f"--{k.replace('_', '-')}={v}" for k, v in args.items())])
    except ImportError:
        monkeypatch.setitem(sys.modules, "tyro", types.SimpleNamespace(cli=lambda cls: cls(**args)))
    monkeypatch.chdir(tmp_path)  # its SummaryWriter writes runs/
    done = runpy.run_path(str(script), run_name="__main__")
    assert done["global_step"] == 3 * 4 * 64 and isinstance(done["envs"], gymnasium.vector.SyncVectorEnv)
    assert capsys.readouterr().out.count("SPS:") == 3
    assert done["dones"].sum() > 5  # episodes ended (and were reset by gymnasium's SyncVectorEnv)
    assert torch.isfinite(done["b_obs"]).all() and np.isfinite(done["v_loss"].item())
    assert list((tmp_path / "runs").iterdir())
