"""The JAX backend against sequential reference loops, key by key, and without syncs.

Each family is checked against the single env of its own library, stepped one row at a
time and reset by hand with the same per-row keys (``fold_in(PRNGKey(seed), i)``):

* gymnasium's functional JAX envs (``phys2d/CartPole-v1``, ``phys2d/Pendulum-v0``)
  against gymnasium's single ``FunctionalJaxEnv`` plus a hand-counted time limit;
* gymnax envs against their ``step_env`` / ``reset_env`` / ``is_truncated`` called by
  hand (no auto-reset involved).

Envs are small and module-scoped: jit compilation dominates on a 2-core machine.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax", reason="JAX is not installed: install the 'jax' extra (pip install -e '.[jax]')")
gymnax = pytest.importorskip("gymnax", reason="gymnax is not installed: install the 'jax' extra")

import gymnasium as gym  # noqa: E402
from gymnasium.envs.phys2d.cartpole import CartPoleJaxEnv  # noqa: E402
from gymnasium.envs.phys2d.pendulum import PendulumJaxEnv  # noqa: E402

import gpu_envs  # noqa: E402
from gpu_envs.backends.jax import PLUGIN, JaxBackend, looks_like_jax_env  # noqa: E402
from tests.env_spec_checks import assert_batched_and_single_specs_agree, assert_torchrl_action_idiom_steps  # noqa: E402
from tests.fakes import CountingTorchVectorEnv  # noqa: E402
from tests.sync_guard import no_sync  # noqa: E402

N, T, SEED = 4, 100, 3
CARTPOLE_LIMIT, PENDULUM_LIMIT = 25, 10


# ----------------------------------------------------------------------------- envs
@pytest.fixture(scope="module")
def phys2d_cartpole():
    return gpu_envs.make(
        "phys2d/CartPole-v1", num_envs=N, device="cpu", backend="jax", max_episode_steps=CARTPOLE_LIMIT
    )


@pytest.fixture(scope="module")
def phys2d_pendulum():
    return gpu_envs.make(
        "phys2d/Pendulum-v0", num_envs=N, device="cpu", backend="jax", max_episode_steps=PENDULUM_LIMIT
    )


@pytest.fixture(scope="module")
def gymnax_cartpole():
    return gpu_envs.wrap(gymnax.make("CartPole-v1"), num_envs=N, env_params={"max_steps_in_episode": CARTPOLE_LIMIT})


@pytest.fixture(scope="module")
def gymnax_pendulum():
    return gpu_envs.make(
        "gymnax/Pendulum-v1", num_envs=N, device="cpu", env_params={"max_steps_in_episode": PENDULUM_LIMIT}
    )


def _actions(env, rng: np.random.Generator) -> np.ndarray:
    spec = env.single_action_spec
    if spec.dtype.is_floating_point:
        return rng.uniform(-2.0, 2.0, size=(N, T, *spec.shape)).astype(np.float32)
    return rng.integers(0, 2, size=(N, T))


def _batched(env, actions: np.ndarray, seed: int = SEED) -> dict:
    """Transitions of ``env`` driven by ``actions`` [N, T, ...] through step_and_maybe_reset."""
    td = env.reset(seed=seed)
    out = []
    for t in range(actions.shape[1]):
        td["action"] = torch.as_tensor(actions[:, t]).to(env.action_spec.dtype)
        td, root = env.step_and_maybe_reset(td)
        td["root"] = root["observation"]
        out.append(td.clone())
        td = root
    traj = torch.stack(out, dim=1)
    return {
        "observation": traj["observation"].numpy(),
        "next_observation": traj["next", "observation"].numpy(),
        "reward": traj["next", "reward"][..., 0].numpy(),
        "terminated": traj["next", "terminated"][..., 0].numpy(),
        "truncated": traj["next", "truncated"][..., 0].numpy(),
        "final_obs_missing": traj["next", "final_obs_missing"][..., 0].numpy(),
        "root": traj["root"].numpy(),
    }


def _stack(rows: list[dict]) -> dict:
    return {k: np.stack([np.stack(r[k]) for r in rows]) for k in rows[0]}


def _record(rec: dict, obs, nxt, reward, term, trunc, root) -> None:
    for key, value in (
        ("observation", obs),
        ("next_observation", nxt),
        ("reward", reward),
        ("terminated", term),
        ("truncated", trunc),
        ("root", root),
    ):
        rec[key].append(np.asarray(value))
    rec["final_obs_missing"].append(False)


def _new_record() -> dict:
    return {
        k: []
        for k in ("observation", "next_observation", "reward", "terminated", "truncated", "final_obs_missing", "root")
    }


def funcenv_reference(single_cls, actions: np.ndarray, limit: int, seed: int = SEED) -> dict:
    """gymnasium's single FunctionalJaxEnv per row, same keys, reset by hand, time limit by hand."""
    rows = []
    for i in range(actions.shape[0]):
        env = single_cls()
        env.rng = jax.random.fold_in(jax.random.PRNGKey(seed), i)
        obs, _ = env.reset()
        rec, t = _new_record(), 0
        for step in range(actions.shape[1]):
            action = actions[i, step]
            nxt, reward, term, _, _ = env.step(int(action) if action.ndim == 0 else jax.numpy.asarray(action))
            t += 1
            trunc = t >= limit
            root = nxt
            if term or trunc:
                root, _ = env.reset()
                t = 0
            _record(rec, obs, nxt, reward, term, trunc, root)
            obs = root
        rows.append(rec)
    return _stack(rows)


def gymnax_reference(env, params, actions: np.ndarray, seed: int = SEED) -> dict:
    """One gymnax env per row: step_env, is_truncated and reset_env called by hand with the same keys."""
    step_env = jax.jit(env.step_env)
    reset_env = jax.jit(env.reset_env)
    is_truncated = jax.jit(env.is_truncated)
    split = jax.jit(jax.random.split)
    rows = []
    for i in range(actions.shape[0]):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), i)
        key, sub = split(key)
        obs, state = reset_env(sub, params)
        rec = _new_record()
        for step in range(actions.shape[1]):
            key, sub = split(key)
            k_step, k_reset = split(sub)
            action = jax.numpy.asarray(actions[i, step], dtype=jax.numpy.int32 if actions.dtype.kind == "i" else None)
            nxt, nstate, reward, term, _ = step_env(k_step, state, action, params)
            trunc = bool(is_truncated(nstate, params))
            term = bool(term)
            root, state = reset_env(k_reset, params) if term or trunc else (nxt, nstate)
            _record(rec, obs, nxt, reward, term, trunc, root)
            obs = root
        rows.append(rec)
    return _stack(rows)


def _assert_same(got: dict, want: dict) -> None:
    for key, expected in want.items():
        have = got[key]
        assert have.shape == expected.shape, (key, have.shape, expected.shape)
        if have.dtype.kind == "f":
            np.testing.assert_allclose(have, expected.astype(have.dtype), rtol=1e-5, atol=1e-6, err_msg=key)
        else:
            np.testing.assert_array_equal(have, expected.astype(have.dtype), err_msg=key)


# ------------------------------------------------------------------------ oracles
@pytest.mark.slow
@pytest.mark.parametrize(
    ("fixture", "single_cls", "limit"),
    [("phys2d_cartpole", CartPoleJaxEnv, CARTPOLE_LIMIT), ("phys2d_pendulum", PendulumJaxEnv, PENDULUM_LIMIT)],
)
def test_functional_jax_env_matches_single_env_reference(request, fixture, single_cls, limit):
    env = request.getfixturevalue(fixture)
    actions = _actions(env, np.random.default_rng(1))
    got = _batched(env, actions)
    want = funcenv_reference(single_cls, actions, limit)
    _assert_same(got, want)
    assert want["truncated"].any(), "the run covered time-limit truncations"
    if fixture == "phys2d_cartpole":
        assert want["terminated"].any(), "the run covered terminations"


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["gymnax_cartpole", "gymnax_pendulum"])
def test_gymnax_env_matches_hand_stepped_reference(request, fixture):
    env = request.getfixturevalue(fixture)
    core = env.backend.core
    actions = _actions(env, np.random.default_rng(2))
    got = _batched(env, actions)
    want = gymnax_reference(core.env, core.params, actions)
    _assert_same(got, want)
    assert want["truncated"].any()
    if fixture == "gymnax_cartpole":
        assert want["terminated"].any()


def test_gymnax_info_entries_are_exposed(gymnax_cartpole):
    assert "discount" in gymnax_cartpole.info_spec
    td = gymnax_cartpole.reset(seed=0)
    td["action"] = torch.zeros(N, dtype=torch.int64)
    td, _ = gymnax_cartpole.step_and_maybe_reset(td)
    assert td["next", "discount"].shape == (N,)
    # gymnax's own bookkeeping keys are consumed, not duplicated under "next"
    next_keys = list(td["next"].keys())
    assert "final_observation" not in next_keys and "truncated" in next_keys


@pytest.mark.slow
def test_gymnax_log_wrapper_episode_stats():
    from gymnax.wrappers.purerl import LogWrapper

    env, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=8)
    benv = gpu_envs.wrap((LogWrapper(env), params), num_envs=2, seed=0)
    traj = benv.rollout(20, policy=lambda td: td.set("action", torch.ones(2, dtype=torch.int64)))
    done = traj["next", "done"][..., 0]
    assert done.any()
    np.testing.assert_array_equal(traj["next", "returned_episode"].numpy(), done.numpy())
    lengths = traj["next", "returned_episode_lengths"][done]
    assert (lengths >= 1).all() and (lengths <= 8).all()


# --------------------------------------------------------------- seeding and resets
def test_seeding_is_reproducible_and_row_wise(phys2d_pendulum):
    actions = _actions(phys2d_pendulum, np.random.default_rng(3))[:, :12]
    a = _batched(phys2d_pendulum, actions, seed=7)
    b = _batched(phys2d_pendulum, actions, seed=7)
    c = _batched(phys2d_pendulum, actions, seed=8)
    np.testing.assert_array_equal(a["next_observation"], b["next_observation"])
    assert not np.allclose(a["observation"][:, 0], c["observation"][:, 0])
    # row i's key chain is fold_in(PRNGKey(seed), i): rows differ from each other
    assert len({tuple(row) for row in a["observation"][:, 0]}) == N


def test_partial_reset_touches_only_masked_rows(phys2d_pendulum):
    env = phys2d_pendulum
    td = env.reset(seed=11)
    for _ in range(3):
        td["action"] = torch.zeros(N, 1)
        td, td = env.step_and_maybe_reset(td)
    before = td["observation"].clone()
    mask = torch.tensor([True, False, True, False])
    root = env.reset(seed=5, td=td.set("_reset", mask.view(N, 1)))
    fresh = env.backend.reset(seed=5)  # a full reset with the same seed: rows 0 and 2 must match it
    torch.testing.assert_close(root["observation"][mask], fresh["observation"][mask], rtol=0, atol=0)
    torch.testing.assert_close(root["observation"][~mask], before[~mask], rtol=0, atol=0)


def test_partial_reset_restarts_the_time_limit(phys2d_pendulum):
    env = phys2d_pendulum
    td = env.reset(seed=0)
    for _ in range(PENDULUM_LIMIT - 2):
        td["action"] = torch.zeros(N, 1)
        td, td = env.step_and_maybe_reset(td)
    td = env.reset(td=td.set("_reset", torch.tensor([True, False, False, False]).view(N, 1)))
    truncated_at = []
    for _ in range(PENDULUM_LIMIT):
        td["action"] = torch.zeros(N, 1)
        td, root = env.step_and_maybe_reset(td)
        truncated_at.append(td["next", "truncated"][:, 0].clone())
        td = root
    steps = torch.stack(truncated_at, 1)  # [N, T]
    assert steps[1:, 1].all() and not steps[0, :-1].any() and steps[0, -1]


# ---------------------------------------------------------------- copies and syncs
def test_outputs_share_jax_memory_and_are_never_rewritten(phys2d_pendulum):
    env = phys2d_pendulum
    backend: JaxBackend = env.backend
    seen = {}
    original = backend._step

    def spy(carry, action):
        seen["action"] = action
        carry, packed = original(carry, action)
        seen["packed"] = packed
        return carry, packed

    backend._step = spy
    try:
        env.reset(seed=0)
        action = torch.full((N, 1), 0.5)
        raw = backend.step(action)
        # on the CPU the action goes in as a numpy view of the tensor's own memory
        assert seen["action"].__array_interface__["data"][0] == action.data_ptr()
        tensors = [raw.obs["observation"], raw.final_obs["observation"], raw.reward, raw.terminated, raw.truncated]
        buffers = {b.unsafe_buffer_pointer() for b in seen["packed"]}
        assert len(buffers) == 2, "one buffer per dtype: float32 and bool"
        for t in tensors:  # every output is a view of a buffer JAX wrote: no copy on the way
            assert t.untyped_storage().data_ptr() in buffers
        kept = [t.clone() for t in tensors]
        backend.step(action)
        for t, k in zip(tensors, kept, strict=True):
            assert torch.equal(t, k), "a later step rewrote a returned buffer"
    finally:
        backend._step = original


@pytest.mark.parametrize("fixture", ["phys2d_cartpole", "gymnax_cartpole", "gymnax_pendulum"])
def test_step_and_rollout_never_sync(request, fixture):
    env = request.getfixturevalue(fixture)
    td = env.reset(seed=0)
    td["action"] = env.action_spec.rand(generator=env.generator)
    td, td = env.step_and_maybe_reset(td)  # the first step validates (allowed to sync)
    ended = torch.zeros(())
    with no_sync():
        for _ in range(100):
            td["action"] = env.action_spec.rand(generator=env.generator)
            td, root = env.step_and_maybe_reset(td)
            ended += td["next", "done"].sum()
            td = root
        traj = env.rollout(20, reset=False)
    assert traj.batch_size == torch.Size([N, 20])
    assert ended.item() > 0, "the guarded steps covered auto-resets"


@pytest.mark.parametrize("fixture", ["phys2d_cartpole", "phys2d_pendulum", "gymnax_cartpole", "gymnax_pendulum"])
def test_specs_carry_the_batch_dims_and_the_torchrl_action_idiom_steps(request, fixture):
    env = request.getfixturevalue(fixture)
    assert_batched_and_single_specs_agree(env)
    assert env.action_spec.shape == env.batch_size + env.single_action_spec.shape
    assert_torchrl_action_idiom_steps(env)


# ---------------------------------------------------------- registry, detection, errors
def test_make_ids_and_detection():
    assert PLUGIN.can_make("phys2d/CartPole-v1") and PLUGIN.can_make("phys2d/Pendulum-v0")
    assert PLUGIN.can_make("gymnax/CartPole-v1") and PLUGIN.can_make("Breakout-MinAtar")
    assert not PLUGIN.can_make("CartPole-v1"), "bare ids gymnasium knows stay with gymnasium"
    assert not PLUGIN.can_make("NoSuchEnv-v0")
    ids = PLUGIN.env_ids()
    assert "phys2d/CartPole-v1" in ids and "gymnax/Breakout-MinAtar" in ids
    env, params = gymnax.make("CartPole-v1")
    assert looks_like_jax_env(env) and looks_like_jax_env((env, params))
    assert looks_like_jax_env(gym.make_vec("phys2d/CartPole-v1", num_envs=2))
    assert not looks_like_jax_env(CountingTorchVectorEnv(2))
    assert not looks_like_jax_env(gym.make("CartPole-v1"))


def test_auto_make_routes_functional_jax_ids():
    env = gpu_envs.make("phys2d/CartPole-v1", num_envs=2, device="cpu")
    assert isinstance(env.backend, JaxBackend)


@pytest.mark.slow
def test_detection_does_not_import_jax():
    code = textwrap.dedent(
        """
        import sys
        import gymnasium as gym
        from gpu_envs.backends.jax import PLUGIN
        from tests.fakes import CountingTorchVectorEnv
        assert not PLUGIN.detect(CountingTorchVectorEnv(2))
        assert not PLUGIN.detect(gym.make("CartPole-v1"))
        assert not PLUGIN.detect(object())
        assert "jax" not in sys.modules, "detect imported jax"
        sys.modules["jax"] = None  # now pretend it is not installed at all
        assert not PLUGIN.available()
        print("ok")
        """
    )
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root, env=env
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_bad_inputs_get_clear_errors():
    from gymnax.wrappers.gym import GymnaxToGymWrapper

    env, params = gymnax.make("CartPole-v1")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="num_envs"):
        gpu_envs.wrap(env, num_envs=0)
    with pytest.raises(gpu_envs.InvalidArgumentError, match="no_such_field"):
        gpu_envs.wrap(env, num_envs=2, env_params={"no_such_field": 1})
    with pytest.raises(gpu_envs.NotAnEnvError, match="Wrap the gymnax env itself"):
        gpu_envs.wrap(GymnaxToGymWrapper(env, params))
    with pytest.raises(gpu_envs.NotAnEnvError, match="single functional JAX env"):
        gpu_envs.wrap(CartPoleJaxEnv())
    wrapped = gym.wrappers.vector.RecordEpisodeStatistics(gym.make_vec("phys2d/CartPole-v1", num_envs=2))
    with pytest.raises(gpu_envs.NotAnEnvError, match="wrapper"):
        gpu_envs.wrap(wrapped)
    if not torch.cuda.is_available():  # a device this torch cannot use is refused first
        with pytest.raises(gpu_envs.InvalidArgumentError, match=r"without CUDA|no CUDA GPU"):
            gpu_envs.wrap(env, num_envs=2, device="cuda:0")
    elif not any(d.platform == "gpu" for d in jax.devices()):
        with pytest.raises(gpu_envs.DeviceMismatchError, match="JAX sees no GPU"):
            gpu_envs.wrap(env, num_envs=2, device="cuda:0")


def test_packed_layout_round_trips_mixed_dtypes():
    import jax.numpy as jnp

    from gpu_envs.backends.jax.pack import PackedLayout

    leaves = [
        jnp.array([True, False, True]),
        jnp.arange(6, dtype=jnp.uint8).reshape(3, 2),
        jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(3, 2, 2),
        jnp.array([-3, 0, 7], dtype=jnp.int16),
        jnp.array([2**31 - 1, -(2**31), 5], dtype=jnp.int32),
        jnp.array([0.25, -0.5, 1e30], dtype=jnp.float32),
    ]
    layout = PackedLayout(leaves)
    packed = jax.jit(layout.pack)(leaves)
    assert len(packed) == 5, "one flat buffer per dtype"
    out = layout.unpack([torch.from_dlpack(b) for b in packed])
    pointers = {b.unsafe_buffer_pointer() for b in packed}
    for got, want in zip(out, leaves, strict=True):
        assert got.untyped_storage().data_ptr() in pointers
        np.testing.assert_array_equal(got.numpy(), np.asarray(want))
        assert got.dtype == torch.from_numpy(np.array(want)).dtype


def test_the_registry_keeps_functional_jax_ids_from_the_gymnasium_backend():
    from gpu_envs.registry import get_plugin, may_make, owner_of

    assert owner_of("phys2d/CartPole-v1") == "jax"
    assert not may_make(get_plugin("gymnasium"), "phys2d/CartPole-v1")
    with pytest.raises(gpu_envs.UnknownEnvError, match="made by the jax backend only"):
        gpu_envs.make("phys2d/CartPole-v1", backend="gymnasium")


def test_unimportable_gymnax_is_not_offered(monkeypatch):
    import builtins

    from gpu_envs.registry import get_plugin

    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "gymnax":
            raise ImportError("No module named 'six'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken)
    with pytest.warns(UserWarning, match="gymnax is installed but cannot be imported"):
        ids = get_plugin("jax").env_ids()
    assert ids and not any(i.startswith("gymnax/") for i in ids)


@pytest.mark.skipif(
    importlib.util.find_spec("jaxmarl") is not None, reason="jaxmarl is installed: its own tier runs it"
)
def test_jaxmarl_ids_without_jaxmarl_name_its_venv():
    with pytest.raises(gpu_envs.MissingComponentError, match=r"jaxmarl.*scripts/simulator_venv.sh jaxmarl"):
        gpu_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=2)
