"""make/wrap: every bad argument is refused before anything is built, with a gpu_envs error naming it.

One test per kind of misuse (issue 10): wrong types, numpy scalars, bools as ints,
floats as ints, negative/huge values, devices this torch cannot use, unknown keyword
arguments, missing optional libraries, env objects with broken attributes. Each checks
the error type, that the message names the cause (and the fix), and that nothing was
built or left behind.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import gpu_envs
import gpu_envs.builtin
import gpu_envs.contract.specs
from tests.fakes import CountingTorchVectorEnv


def _refused(error, *words, call):
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, gpu_envs.GpuEnvsError)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    return info.value


# ----------------------------------------------------------------- ints and seeds


def test_numpy_integers_are_accepted_wherever_ints_are():
    env = gpu_envs.make("CartPole-v1", num_envs=np.int64(3), device="cpu", seed=np.uint32(7))
    again = gpu_envs.make("CartPole-v1", num_envs=3, device="cpu", seed=7)
    assert env.num_envs == 3 and type(env.num_envs) is int
    torch.testing.assert_close(env.reset()["observation"], again.reset()["observation"])


@pytest.mark.parametrize("value", [True, 2.0, 2.9, "4", None, 0, -1])
def test_num_envs_must_be_a_positive_int(value):
    _refused(
        gpu_envs.InvalidArgumentError,
        "num_envs",
        repr(value) if not isinstance(value, float) else str(value),
        call=lambda: gpu_envs.make("CartPole-v1", num_envs=value, device="cpu"),
    )


@pytest.mark.parametrize("seed", [-1, -(2**63), 2**63, 1.7, True, "0"])
@pytest.mark.parametrize("backend", ["torch", "gymnasium"])
def test_seeds_follow_one_rule_on_every_backend(seed, backend):
    err = _refused(
        gpu_envs.InvalidArgumentError,
        "seed",
        call=lambda: gpu_envs.make("CartPole-v1", device="cpu", backend=backend, seed=seed),
    )
    assert "[0, 2**63 - 1]" in str(err)


def test_largest_seed_is_accepted():
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", seed=2**63 - 1)
    assert env.reset()["observation"].shape == (2, 4)


# --------------------------------------------------------------------- devices


@pytest.mark.parametrize("device", ["banana", "cuda:-1", 1.5, True, object()])
def test_a_device_torch_does_not_know_is_named(device):
    _refused(gpu_envs.InvalidArgumentError, "device", call=lambda: gpu_envs.make("CartPole-v1", device=device))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a CPU-only torch; a CUDA machine has the device")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 1), 0])
def test_cuda_on_a_cpu_only_torch_says_so_and_how_to_fix_it(device):
    err = _refused(
        gpu_envs.InvalidArgumentError,
        "without CUDA",
        "device='cpu'",
        call=lambda: gpu_envs.make("CartPole-v1", device=device),
    )
    assert not isinstance(err, AssertionError)  # not torch's "Torch not compiled with CUDA enabled"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: checks a GPU index past the last one")
def test_a_cuda_index_past_the_last_gpu_is_refused():
    index = torch.cuda.device_count()
    _refused(
        gpu_envs.InvalidArgumentError,
        f"cuda:{index}",
        "visible",
        call=lambda: gpu_envs.make("CartPole-v1", device=f"cuda:{index}"),
    )


def test_wrap_checks_the_device_too():
    _refused(
        gpu_envs.InvalidArgumentError, "banana", call=lambda: gpu_envs.wrap(CountingTorchVectorEnv(2), device="banana")
    )


# ---------------------------------------------------------------- sizes and memory


@pytest.mark.parametrize(
    ("backend", "kwargs"),
    [("torch", {}), ("gymnasium", {}), ("gymnasium", {"vectorization": "async"}), ("jax", {})],
)
def test_num_envs_that_cannot_fit_is_refused_before_building(backend, kwargs):
    # 10**12 envs: the torch env would ask the allocator for terabytes, gymnasium would build
    # envs (and processes) until memory runs out; both must be refused up front, at once.
    env_id = "phys2d/CartPole-v1" if backend == "jax" else "CartPole-v1"
    if backend == "jax":
        pytest.importorskip("jax")
    err = _refused(
        gpu_envs.InvalidArgumentError,
        "num_envs=1000000000000",
        "available",
        "fewer envs",
        call=lambda: gpu_envs.make(env_id, num_envs=10**12, device="cpu", backend=backend, **kwargs),
    )
    assert "bytes" not in str(err) or "TiB" in str(err)


def test_async_workers_beyond_the_file_descriptor_limit_are_refused(monkeypatch):
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda which: (64, 64))
    _refused(
        gpu_envs.InvalidArgumentError,
        "file descriptors",
        "ulimit -n",
        call=lambda: gpu_envs.make(
            "CartPole-v1", num_envs=40, device="cpu", backend="gymnasium", vectorization="async"
        ),
    )


# --------------------------------------------------------------- keyword arguments


def test_make_lists_the_accepted_keywords_of_an_unknown_one():
    err = _refused(
        gpu_envs.InvalidArgumentError,
        "'max_steps'",
        "max_episode_steps",
        "expose_final_obs",
        "validate",
        call=lambda: gpu_envs.make("CartPole-v1", device="cpu", max_steps=10),
    )
    assert not isinstance(err, TypeError)


def test_wrap_takes_a_seed_like_make_and_refuses_unknown_keywords():
    first = gpu_envs.wrap(CountingTorchVectorEnv(2), seed=0)
    assert first.reset()["observation"].shape == (2, 3)
    _refused(
        gpu_envs.InvalidArgumentError,
        "'sed'",
        "copy_buffers",
        call=lambda: gpu_envs.wrap(CountingTorchVectorEnv(2), sed=0),
    )
    seeded = [gpu_envs.wrap(gym.make("CartPole-v1"), device="cpu", seed=3).reset()["observation"] for _ in range(2)]
    torch.testing.assert_close(seeded[0], seeded[1])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"missing_obs_value": "x"}, ["missing_obs_value", "'x'"]),
        ({"missing_obs_value": True}, ["missing_obs_value", "True"]),
        ({"validate_actions": 1}, ["validate_actions", "True or False"]),
        ({"validate_actions": "yes"}, ["validate_actions"]),
        ({"watchdog_s": 0}, ["watchdog_s", "> 0"]),
        ({"watchdog_s": "10"}, ["watchdog_s"]),
    ],
)
def test_batched_env_options_are_checked_before_building(kwargs, words):
    _refused(gpu_envs.InvalidArgumentError, *words, call=lambda: gpu_envs.make("CartPole-v1", device="cpu", **kwargs))


def test_a_placeholder_the_observation_dtype_cannot_hold_is_refused_and_nothing_leaks():
    inner = CountingTorchVectorEnv(2, obs_dtype=torch.int64)
    _refused(
        gpu_envs.InvalidArgumentError,
        "missing_obs_value=nan",
        "int64",
        call=lambda: gpu_envs.wrap(inner, missing_obs_value=float("nan")),
    )
    _refused(gpu_envs.InvalidArgumentError, "2.5", call=lambda: gpu_envs.wrap(inner, missing_obs_value=2.5))
    env = gpu_envs.wrap(inner, missing_obs_value=-1)  # the refused wraps released the env
    assert env.reset()["observation"].dtype == torch.int64


def test_a_float_placeholder_that_would_overflow_to_inf_is_refused():
    make = lambda value: gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", missing_obs_value=value)  # noqa: E731
    _refused(gpu_envs.InvalidArgumentError, "1e+40", "float32", "inf", call=lambda: make(1e40))
    for value in (float("inf"), -3e38, float("nan")):  # asked for explicitly, or representable
        make(value).close()


@pytest.mark.parametrize("backend", [None, 3, ["torch"]])
def test_backend_must_be_a_name(backend):
    _refused(gpu_envs.InvalidArgumentError, "backend", call=lambda: gpu_envs.make("CartPole-v1", backend=backend))


@pytest.mark.parametrize("env_id", [42, None, "", gym.make("CartPole-v1")])
def test_make_wants_an_id_string(env_id):
    _refused(gpu_envs.InvalidArgumentError, "env_id", call=lambda: gpu_envs.make(env_id))


# --------------------------------------------------------------- missing libraries


def test_a_backend_whose_library_is_missing_names_the_extra(monkeypatch):
    from gpu_envs.backends.jax import PLUGIN

    monkeypatch.setattr(type(PLUGIN), "available", lambda self: False)
    _refused(
        gpu_envs.MissingComponentError,
        "backend='jax'",
        "pip install '.[jax]' in the gpu_envs clone",
        call=lambda: gpu_envs.make("CartPole-v1", backend="jax"),
    )
    _refused(
        gpu_envs.MissingComponentError,
        "gymnax/Breakout-MinAtar",
        "pip install '.[jax]'",
        call=lambda: gpu_envs.make("gymnax/Breakout-MinAtar"),
    )
    _refused(
        gpu_envs.MissingComponentError,
        "backend='jax'",
        "pip install '.[jax]' in the gpu_envs clone",  # wrap, as make
        call=lambda: gpu_envs.wrap(gym.make("CartPole-v1"), backend="jax"),
    )


def test_an_id_listed_by_gymnasium_that_needs_jax_names_the_extra(monkeypatch):
    from gpu_envs.backends.jax import PLUGIN

    monkeypatch.setattr(type(PLUGIN), "available", lambda self: False)
    for name in [m for m in sys.modules if m == "jax" or m.startswith(("jax.", "gymnasium.envs.phys2d"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` now fails as if it were not installed
    err = _refused(
        gpu_envs.MissingComponentError,
        "'jax'",
        "pip install '.[jax]' in the gpu_envs clone",
        call=lambda: gpu_envs.make("phys2d/CartPole-v1", num_envs=2, device="cpu"),
    )
    assert not isinstance(err, ModuleNotFoundError)


# --------------------------------------------------------------------- env objects


class _Sized(CountingTorchVectorEnv):
    def __init__(self, num_envs):
        super().__init__(2)
        self.num_envs = num_envs


@pytest.mark.parametrize("num_envs", [0, -1, 2.9, True, "2"])
def test_wrap_refuses_a_batch_size_make_would_refuse(num_envs):
    _refused(gpu_envs.InvalidArgumentError, "num_envs", call=lambda: gpu_envs.wrap(_Sized(num_envs)))


def test_wrap_accepts_a_numpy_batch_size():
    assert gpu_envs.wrap(_Sized(np.int32(2))).num_envs == 2


def test_wrapping_a_batched_env_again_is_refused():
    env = gpu_envs.make("CartPole-v1", num_envs=2, device="cpu")
    _refused(gpu_envs.NotAnEnvError, "already has the BatchedEnv API", call=lambda: gpu_envs.wrap(env))


@pytest.mark.slow
def test_jax_seeds_above_2_32_are_not_folded_onto_small_ones():
    pytest.importorskip("jax")
    obs = {}
    for seed in (0, 5, 2**32, 2**32 + 5):
        env = gpu_envs.make("phys2d/CartPole-v1", num_envs=2, device="cpu")
        obs[seed] = env.reset(seed=seed)["observation"]
    assert not torch.equal(obs[0], obs[2**32]) and not torch.equal(obs[5], obs[2**32 + 5])
    again = gpu_envs.make("phys2d/CartPole-v1", num_envs=2, device="cpu").reset(seed=2**32 + 5)["observation"]
    assert torch.equal(again, obs[2**32 + 5])


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [({"frame_skip": 0}, "frame_skip"), ({"frame_skip": 2.0}, "frame_skip"), ({"from_pixels": 1}, "from_pixels")],
)
def test_single_gymnasium_env_options_are_checked(kwargs, word):
    with pytest.raises(gpu_envs.InvalidArgumentError, match=word):
        gpu_envs.wrap(gym.make("CartPole-v1"), device="cpu", **kwargs)


@pytest.mark.parametrize(
    ("call", "word"),
    [
        (lambda: gpu_envs.contract.specs.Box(-1, 1, (-1,)), "shape"),
        (lambda: gpu_envs.contract.specs.Box(-1, 1, (2.5,)), "shape"),
        (lambda: gpu_envs.contract.specs.Box(-1, 1, (2,), device="banana"), "banana"),
        (lambda: gpu_envs.make("CartPole-v1", num_envs=2, device="cpu").action_spec.rand(generator="x"), "generator"),
    ],
)
def test_specs_refuse_bad_shapes_devices_and_generators(call, word):
    with pytest.raises(gpu_envs.SpecError, match=word):
        call()


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"vector_kwargs": {"autoreset_mode": "bogus"}}, "bogus"),
        ({"vector_kwargs": "x"}, "vector_kwargs"),
        ({"wrappers": "x"}, "wrappers"),
        # "0: no worker processes" contradicts async workers: it used to build them anyway, uncapped
        ({"vectorization": "async", "num_workers": 0}, "num_workers=0"),
    ],
)
def test_gymnasium_make_options_are_checked(kwargs, word):
    with pytest.raises(gpu_envs.InvalidArgumentError, match=word):
        gpu_envs.make("CartPole-v1", device="cpu", backend="gymnasium", **kwargs)


@pytest.mark.slow
def test_jax_backend_options_are_checked():
    pytest.importorskip("jax")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="expose_info"):
        gpu_envs.make("phys2d/CartPole-v1", num_envs=2, device="cpu", expose_info="x")
    gymnax = pytest.importorskip("gymnax")
    assert gpu_envs.wrap(gymnax.make("CartPole-v1"), num_envs=np.int64(2), device="cpu").num_envs == 2


@pytest.mark.parametrize(
    ("call", "word"),
    [
        (lambda: gpu_envs.builtin.CartPoleEnv(2, seed=-1), "seed=-1"),
        (lambda: gpu_envs.builtin.PendulumEnv(2).reset(seed=-1), "seed=-1"),
        (lambda: gym.make_vec("gpu_envs/CartPole-v1", num_envs=2).reset(seed=-1), "seed=-1"),
        (lambda: gpu_envs.builtin.CartPoleEnv(2, max_episode_steps=2.5), "max_episode_steps"),
        (lambda: gpu_envs.make("CartPole-v1", device="cpu", max_episode_steps=2.5), "max_episode_steps"),
        (lambda: gpu_envs.builtin.CartPoleEnv(2, expose_final_obs="no"), "expose_final_obs"),
        (lambda: gpu_envs.builtin.CartPoleEnv(True), "num_envs"),
    ],
)
def test_built_in_envs_used_directly_follow_the_same_rules(call, word):
    with pytest.raises(gpu_envs.InvalidArgumentError, match=word):
        call()


@pytest.mark.parametrize("step_timeout", [0, -1, "5", True])
def test_a_bad_step_timeout_is_refused_before_any_worker_starts(step_timeout, monkeypatch):
    monkeypatch.setattr(gym, "make_vec", lambda *a, **k: pytest.fail("envs were built before step_timeout was checked"))
    with pytest.raises(gpu_envs.InvalidArgumentError, match="step_timeout"):
        gpu_envs.make(
            "CartPole-v1",
            num_envs=2,
            device="cpu",
            backend="gymnasium",
            vectorization="async",
            step_timeout=step_timeout,
        )


def test_step_timeout_on_a_sync_env_is_refused_before_building(monkeypatch):
    monkeypatch.setattr(gym, "make_vec", lambda *a, **k: pytest.fail("envs were built before step_timeout was checked"))
    with pytest.raises(gpu_envs.InvalidArgumentError, match="watchdog_s"):
        gpu_envs.make("CartPole-v1", num_envs=2, device="cpu", backend="gymnasium", step_timeout=5)


def test_interop_actions_of_the_wrong_batch_are_named():
    from gpu_envs.interop import to_gymnasium

    envs = to_gymnasium(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu"))
    envs.reset(seed=0)
    with pytest.raises(gpu_envs.ActionError, match=r"shape \(3,\).*\(4,\)"):
        envs.step(np.zeros(3, dtype=np.int64))
    envs.step(np.zeros(4, dtype=np.int64))  # nothing was touched


def test_rsl_rl_and_skrl_actions_of_the_wrong_batch_are_named():
    # both reshape the library's action layout to the env's; a wrong count used to fail inside that reshape
    pytest.importorskip("rsl_rl")
    pytest.importorskip("skrl")
    from gpu_envs.interop import to_rsl_rl, to_skrl

    rsl = to_rsl_rl(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0))
    with pytest.raises(gpu_envs.ActionError, match=r"shape \(3, 1\) \(3 values\).*\(4, 1\) \(4 values"):
        rsl.step(torch.zeros(3, 1))
    _, reward, _, _ = rsl.step(np.zeros((4, 1), dtype=np.float32))  # numpy actions are converted, like torch ones
    assert reward.shape == (4,)

    skrl_env = to_skrl(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0))
    skrl_env.reset()
    with pytest.raises(gpu_envs.ActionError, match=r"shape \(3, 1\) \(3 values\).*\(4,\) \(4 values"):
        skrl_env.step(torch.zeros(3, 1, dtype=torch.int64))
    _, reward, _, _, _ = skrl_env.step(torch.zeros(4, 1, dtype=torch.int64))  # skrl's [N, 1] column still works
    assert reward.shape == (4, 1)
