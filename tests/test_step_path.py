"""The one step path (:mod:`gpu_envs.core.step_path`) gives the same transitions in every variant.

Every variant of its parts is compared with another, key by key:

* the built-in envs' ``raw_step`` (a RawStep, no swap) against their plain
  gymnasium-shaped ``step``;
* a backend's direct step (``Backend.direct_step``, what the path calls after the
  first step: :class:`DirectStep`) against its ``step`` (:class:`BackendStep`);
* outputs checked on every step (:class:`WatchedStep`, untrusted backends) against
  outputs trusted after the first step;
* random-action collections written straight into the buffer (``StepPath.values``)
  against the TensorDict path, for one observation, observation groups and nested keys;
* every collection -- random actions fused or through TensorDicts, a policy, compiled,
  an (emulated) CUDA graph -- against the others;
* TensorDicts built directly against tensordict's public constructor.

And the path keeps the contract: a subclass overriding ``step`` is stepped through it;
a step interrupted by an exception leaves the env marked until ``reset()``; the first
step validates the one RawStep shape; refused calls leave the env as it was.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import gpu_envs
import gpu_envs.utils.tensordicts as tds
from gpu_envs.backends.base import RawStep
from gpu_envs.backends.torch_envs import TorchVectorBackend, raw_step_of
from gpu_envs.builtin import CartPoleEnv, PendulumEnv, native
from gpu_envs.contract.keys import TRANSITION_KEYS, transition_keys
from gpu_envs.core.advances import BackendStep, DirectStep, FirstStep, WatchedStep
from gpu_envs.core.env import BatchedEnv
from gpu_envs.rollout import RolloutBuffer, collect
from gpu_envs.rollout.cache import collect_cache
from gpu_envs.rollout.cudagraph import GraphCollector
from gpu_envs.rollout.loop import fused_writer
from gpu_envs.transforms import RewardScale, TransformedEnv
from tests.fakes import CountingTorchVectorEnv
from tests.graph_emulation import EmulatedGraphs


def _plain(cls):
    """The same env class without ``raw_step``: the backend uses the plain ``step``."""

    class Plain(cls):
        raw_step = None

    return Plain


def _assert_same(a: TensorDict, b: TensorDict) -> None:
    keys_a = set(a.keys(include_nested=True, leaves_only=True))
    assert keys_a == set(b.keys(include_nested=True, leaves_only=True))
    for key in keys_a:
        x, y = a.get(key), b.get(key)
        assert x.shape == y.shape and x.dtype == y.dtype, key
        assert torch.equal(x.isnan(), y.isnan()) if x.is_floating_point() else True, key
        assert torch.equal(x.nan_to_num(123.0), y.nan_to_num(123.0)) if x.is_floating_point() else torch.equal(x, y), (
            key
        )


@pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
@pytest.mark.parametrize("expose_final_obs", [True, False])
@pytest.mark.parametrize("n", [3, 600])  # 600: CartPole's whole-row views
def test_raw_step_equals_plain_step(cls, expose_final_obs, n):
    fast = gpu_envs.wrap(cls(n, seed=3, expose_final_obs=expose_final_obs))
    slow = gpu_envs.wrap(_plain(cls)(n, seed=3, expose_final_obs=expose_final_obs))
    assert raw_step_of(fast.backend.env) is not None and raw_step_of(slow.backend.env) is None
    a, b = fast.rollout(250), slow.rollout(250)  # CartPole and Pendulum episodes end within it
    assert a["next", "done"].any()
    _assert_same(a, b)
    _assert_same(fast.root(), slow.root())


def _through_step(env):
    """``env`` whose backend hands no direct step: every step goes through the backend's ``step``."""
    env.backend.capabilities = env.backend.capabilities.replace(direct_step=False)
    env._path.bind()
    return env


def _watched(env):
    """``env`` whose backend's outputs are compared with the specs on every step."""
    env.backend.capabilities = env.backend.capabilities.replace(trusted_outputs=False)
    env._path.bind()
    return env


def _steps(env, steps):
    """``steps`` transitions through ``step`` (odd steps) and ``step_and_maybe_reset`` (even ones)."""
    td, out = env.reset(), []
    for t in range(steps):
        td["action"] = env.action_spec.rand(generator=env.generator)
        if t % 2:
            out.append(env.step(td).clone())
            td = env.root()
        else:
            td, root = env.step_and_maybe_reset(td)
            out.append(td.clone())
            td = root
    return out, td


# CartPole's random episodes end within 60 steps, Pendulum's at 200; 600 rows: the
# placeholder fill's whole-row views (CartPole's 16-byte rows)
@pytest.mark.parametrize(
    ("env_id", "n", "steps"), [("CartPole-v1", 3, 60), ("CartPole-v1", 600, 60), ("Pendulum-v1", 3, 210)]
)
@pytest.mark.parametrize("expose_final_obs", [True, False])
@pytest.mark.parametrize("variant", [_through_step, _watched])
def test_the_direct_step_equals_the_backend_step_and_watched_outputs(env_id, n, steps, expose_final_obs, variant):
    make = lambda: gpu_envs.make(env_id, num_envs=n, seed=5, expose_final_obs=expose_final_obs)  # noqa: E731
    direct, other = make(), variant(make())
    a, root_a = _steps(direct, steps)
    b, root_b = _steps(other, steps)
    stepper = direct._path.stepper
    assert isinstance(stepper, DirectStep) and stepper.step == direct.backend.env.raw_step  # the env's, straight
    if variant is _through_step:
        assert isinstance(other._path.stepper, BackendStep) and other._path.stepper.backend is other.backend
    else:
        assert isinstance(other._path.stepper, WatchedStep)
    assert any(bool(td["next", "done"].any()) for td in a)
    for x, y in zip(a, b, strict=True):
        _assert_same(x, y)
    _assert_same(root_a, root_b)
    _assert_same(direct.root(), other.root())
    assert direct.live_state().keys() == other.live_state().keys()


def test_the_parts_are_bound_after_the_first_step_and_when_validate_actions_changes():
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    path = env._path
    env.reset()
    assert isinstance(path.stepper, FirstStep) and path.check_values is not None  # Discrete values: first step
    _steps(env, 1)  # the first step validates through the backend's step, then binds the later steps' parts
    assert isinstance(path.stepper, DirectStep) and path.check_values is None
    env.validate_actions = True  # every step checks the action's values
    assert path.check_values is not None
    td = env.root().set("action", torch.full((4,), 2))
    with pytest.raises(gpu_envs.ActionError, match="outside"):
        env.step(td)
    env.validate_actions = False
    assert path.check_values is None
    counting = gpu_envs.wrap(CountingTorchVectorEnv(4))  # a user env: no raw_step, outputs watched
    _steps(counting, 3)
    assert isinstance(counting._path.stepper, WatchedStep)


class CountingBackend(TorchVectorBackend):
    """Counts the calls of ``step`` and of the direct step it hands out."""

    def __init__(self, direct: bool) -> None:
        super().__init__(CartPoleEnv(4, seed=0))
        self.capabilities = self.capabilities.replace(direct_step=direct)
        self.calls = {"step": 0, "direct": 0}

    def step(self, action):
        self.calls["step"] += 1
        return super().step(action)

    def direct_step(self):
        stepper = super().direct_step()

        def counted(action):
            self.calls["direct"] += 1
            return stepper(action)

        return counted


@pytest.mark.parametrize("direct", [True, False])
def test_the_env_reads_what_a_backend_can_do_from_its_declaration(direct):
    env = BatchedEnv(CountingBackend(direct))
    _steps(env, 5)
    calls = env.backend.calls
    # the first step is always the backend's step (validated); the later ones its direct step when declared
    assert calls == ({"step": 1, "direct": 4} if direct else {"step": 5, "direct": 0})


def test_the_path_refuses_what_the_contract_refuses():
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    _, td = _steps(env, 2)
    for bad in (torch.zeros(4), torch.zeros(4, 1, dtype=torch.int64), None):
        td = env.root()
        if bad is not None:
            td["action"] = bad
        for call in (env.step, env.step_and_maybe_reset):
            with pytest.raises(gpu_envs.ActionError):
                call(td)
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"step_and_maybe_reset\(\) takes the TensorDict"):
        env.step_and_maybe_reset({"action": torch.zeros(4, dtype=torch.int64)})
    td = env.root().set("action", torch.zeros(4, dtype=torch.int64))
    env.step_and_maybe_reset(td)  # refused calls left the env usable
    env.close()
    with pytest.raises(gpu_envs.ClosedEnvError):
        env.step_and_maybe_reset(td)


def test_an_interrupted_direct_step_marks_the_env_until_a_reset(monkeypatch):
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    _, td = _steps(env, 2)
    td["action"] = torch.zeros(4, dtype=torch.int64)

    def boom(action):
        raise KeyboardInterrupt

    monkeypatch.setattr(env.backend.env, "_advance", lambda action, columns: boom(action))
    with pytest.raises(KeyboardInterrupt):
        env.step_and_maybe_reset(td)
    monkeypatch.undo()
    assert env.interrupted
    for call in (env.step, env.step_and_maybe_reset):
        with pytest.raises(gpu_envs.InterruptedStepError, match="interrupted mid-step"):
            call(td)
    td = env.reset().set("action", torch.zeros(4, dtype=torch.int64))
    assert not env.interrupted
    assert env.step_and_maybe_reset(td)[1]["observation"].shape == (4, 4)
    assert isinstance(env._path.stepper, DirectStep)


def test_transitions_are_not_rewritten_later():
    env = gpu_envs.make("CartPole-v1", num_envs=8, seed=0)
    td = env.reset()
    kept = []
    for _ in range(60):
        td["action"] = env.action_spec.rand(generator=env.generator)
        td, root = env.step_and_maybe_reset(td)
        kept.append((td, td.clone(), root, root.clone()))
        td = root
    for td, copy, root, root_copy in kept:
        _assert_same(td.select(*copy.keys(True, True)), copy)  # the next step sets action/next on a root
        _assert_same(root.select(*root_copy.keys(True, True)), root_copy)


class OverridingCartPole(CartPoleEnv):
    """A user subclass changing what a step returns: doubled rewards."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward * 2, terminated, truncated, info


def test_a_subclass_overriding_step_is_stepped_through_it():
    env = gpu_envs.wrap(OverridingCartPole(4, seed=0))
    assert raw_step_of(env.backend.env) is None
    traj = env.rollout(5)
    assert torch.equal(traj["next", "reward"], torch.full((4, 5, 1), 2.0))
    raw = CartPoleEnv(4, seed=0)
    raw.step = raw.step  # an instance attribute replacing step: plain path too
    assert raw_step_of(raw) is None
    assert raw_step_of(CartPoleEnv(4)) is not None


def test_direct_tensordicts_equal_the_public_constructor():
    obs, done = torch.randn(5, 4), torch.zeros(5, 1, dtype=torch.bool)
    batch, device = torch.Size([5]), torch.device("cpu")
    direct = tds._direct({"observation": obs, "done": done, "group": {"x": obs}}, batch, device)
    public = TensorDict({"observation": obs, "done": done, "group": {"x": obs}}, batch_size=batch, device=device)
    assert direct["observation"] is obs and direct["group", "x"] is obs
    assert direct.batch_size == public.batch_size and direct.device == public.device
    assert (direct == public).all()
    assert direct.clone()["done"].shape == (5, 1)
    direct["new"] = obs  # an ordinary TensorDict afterwards
    assert set(direct.keys()) == {"observation", "done", "group", "new"}


@pytest.mark.parametrize("direct", [True, False])
def test_set_entry_stores_like_set_and_a_locked_tensordict_refuses(monkeypatch, direct):
    monkeypatch.setattr(tds, "DIRECT", direct)
    obs = torch.randn(5, 4)
    td = TensorDict({"observation": obs}, batch_size=[5])
    sub = TensorDict({"reward": torch.ones(5, 1)}, batch_size=[5])
    tds.set_entry(td, "next", sub)
    tds.set_entry(td, "action", obs[:, 0])
    assert td["next"] is sub and td["action"] is not None and td["next", "reward"].shape == (5, 1)
    assert set(td.keys(True, True)) == {"observation", "action", ("next", "reward")}
    td.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        tds.set_entry(td, "other", obs)
    assert td.get("other", None) is None


@pytest.mark.parametrize("direct", [True, False])
def test_set_entry_on_a_consolidated_tensordict_leaves_it_to_tensordict(monkeypatch, direct):
    """An unpickled consolidated TensorDict (unlocked, one storage) learns that a new entry is not in that storage."""
    monkeypatch.setattr(tds, "DIRECT", direct)
    consolidated = TensorDict({"observation": torch.randn(5, 4)}, batch_size=[5]).consolidate()
    td = pickle.loads(pickle.dumps(consolidated))
    assert not td.is_locked
    tds.set_entry(td, "action", torch.zeros(5))
    assert torch.equal(td["action"], torch.zeros(5))
    assert torch.equal(td.clone()["action"], torch.zeros(5))  # a clone (of the consolidated storage) has it too


@pytest.mark.parametrize(
    ("installed", "direct"),
    [
        ("0.14.3", True),
        ("0.14.0", True),
        ("0.15.3", True),
        ("0.16.0", False),
        ("0.9.2", False),
        ("nonsense", False),
        (None, False),
    ],
)
def test_direct_construction_only_on_known_tensordict_versions(installed, direct):
    assert tds.direct_supported(installed) is direct


@pytest.mark.parametrize("final_obs", ["info", "masked", "none"])
def test_public_tensordict_path_gives_the_same_transitions(monkeypatch, final_obs):
    """What a user on another tensordict version gets: the same data, built the public way."""
    fast = gpu_envs.wrap(CountingTorchVectorEnv(6, final_obs=final_obs)).rollout(20)
    monkeypatch.setattr(tds, "DIRECT", False)
    env = gpu_envs.wrap(CountingTorchVectorEnv(6, final_obs=final_obs))
    slow = env.rollout(20)
    _assert_same(fast, slow)
    nested = gpu_envs.make("CartPole-v1", num_envs=4, seed=1).rollout(30)
    monkeypatch.setattr(tds, "DIRECT", True)
    _assert_same(nested, gpu_envs.make("CartPole-v1", num_envs=4, seed=1).rollout(30))


class ExplodingEnv(CountingTorchVectorEnv):
    """Raises in its third step (a simulator fault, or a KeyboardInterrupt)."""

    def __init__(self, *args, error: BaseException, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls, self.error = 0, error

    def step(self, action):
        self.calls += 1
        if self.calls == 3:
            raise self.error
        return super().step(action)


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_an_interrupted_step_marks_the_env_until_a_reset(error):
    env = gpu_envs.wrap(ExplodingEnv(4, error=error))
    td = env.reset()
    for _ in range(2):
        td["action"] = torch.zeros(4, dtype=torch.int64)
        td, td = env.step_and_maybe_reset(td)
    td["action"] = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(type(error)):
        env.step(td)
    for call in (env.step, env.step_and_maybe_reset):
        with pytest.raises(gpu_envs.InterruptedStepError, match="interrupted mid-step"):
            call(td)
    # a partial reset cannot repair a half-stepped env: it resets every row
    root = env.reset(td=TensorDict({"_reset": torch.zeros(4, 1, dtype=torch.bool)}, [4]))
    assert torch.equal(root["observation"][:, 2], torch.zeros(4))  # step counters restarted
    td = root.set("action", torch.zeros(4, dtype=torch.int64))
    assert env.step(td)["next", "observation"].shape == (4, 3)


def test_a_bad_action_does_not_mark_the_env():
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    td = env.reset()
    td["action"] = torch.zeros(4, dtype=torch.float32)
    with pytest.raises(gpu_envs.ActionError):
        env.step(td)
    td["action"] = torch.zeros(4, dtype=torch.int64)
    env.step(td)


class LayoutBackend(TorchVectorBackend):
    """Returns the RawStep layout with one entry of the wrong shape (flat [N] instead of [N, 1])."""

    capabilities = TorchVectorBackend.capabilities.replace(direct_step=False)  # its step is never bypassed

    def __init__(self, bad: str) -> None:
        super().__init__(CountingTorchVectorEnv(4))
        self.bad = bad

    def step(self, action):
        raw = super().step(action)
        fields = raw._asdict()
        fields[self.bad] = fields[self.bad].view(4)
        return RawStep(**fields)


@pytest.mark.parametrize("bad", ["reward", "done", "truncated"])
def test_the_raw_step_shape_is_checked_on_the_first_step(bad):
    env = BatchedEnv(LayoutBackend(bad))
    td = env.reset()
    td["action"] = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(gpu_envs.BackendError, match=rf"{bad} .*shape \(4, 1\)"):
        env.step(td)


class GroupedCounting(CountingTorchVectorEnv):
    """The counting env with observation groups and a nested one: {"policy", "extra": {"step"}}."""

    def __init__(self, num_envs: int) -> None:
        import gymnasium as gym

        super().__init__(num_envs, final_obs="masked")
        box = self.single_observation_space
        step = gym.spaces.Box(-(2**20), 2**20, (1,), box.dtype)
        self.single_observation_space = gym.spaces.Dict({"policy": box, "extra": gym.spaces.Dict({"step": step})})

    def _group(self, obs):
        return {"policy": obs, "extra": {"step": obs[:, 2:]}}

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return self._group(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info["final_obs"] = self._group(info["final_obs"])
        return self._group(obs), reward, terminated, truncated, info


def _no_fusing(env):
    env.transition_values = lambda keys: None  # the TensorDict path, every step
    return env


_COLLECTED_ENVS = {
    "cartpole": lambda n, expose: gpu_envs.make("CartPole-v1", num_envs=n, seed=2, expose_final_obs=expose),
    "pendulum": lambda n, expose: gpu_envs.make("Pendulum-v1", num_envs=n, seed=2, expose_final_obs=expose),
    "counting": lambda n, expose: gpu_envs.wrap(CountingTorchVectorEnv(n, final_obs="masked" if expose else "none")),
    "grouped": lambda n, expose: gpu_envs.wrap(GroupedCounting(n)),
}


@pytest.mark.parametrize("expose_final_obs", [True, False])
@pytest.mark.parametrize(
    ("env_name", "n"), [("cartpole", 3), ("cartpole", 600), ("pendulum", 4), ("counting", 5), ("grouped", 5)]
)
def test_random_action_collections_written_without_tensordicts_equal_the_tensordict_path(env_name, n, expose_final_obs):
    """collect(policy=None) copies each step's tensors straight into the buffer (StepPath.values).

    The built-in envs' native CPU step also writes into two reused output sets meanwhile
    (``StepPath.reusing_outputs``); the TensorDict path allocates every step.
    """
    make = _COLLECTED_ENVS[env_name]
    fused, plain = make(n, expose_final_obs), _no_fusing(make(n, expose_final_obs))
    for steps in (40, 40, 3, 1):  # episodes carry across calls; T <= 2 has no middle steps
        a, b = collect(fused, steps=steps).clone(), collect(plain, steps=steps).clone()
        _assert_same(a, b)
        _assert_same(fused.root(), plain.root())
    assert fused.transition_values(collect_cache(fused).buffers[40].keys) is not None
    assert torch.equal(fused.generator.get_state(), plain.generator.get_state())  # the same draws
    for name, value in fused.live_state().items():
        assert torch.equal(value.nan_to_num(7.0), plain.live_state()[name].nan_to_num(7.0)), name


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_what_was_handed_out_is_not_rewritten_by_a_later_collection_reusing_outputs(env_id):
    """The reused output sets live only inside a random-action collection's middle steps.

    Trajectories, roots and hand-written transitions from before stay as they were
    through later collections and steps, and the env's steps outside a collection
    allocate again.
    """
    env = gpu_envs.make(env_id, num_envs=6, seed=0)
    assert env.backend.reuse_outputs(True) is native.available()  # the built-in CPU step can; off again below
    assert env.backend.reuse_outputs(False) is False
    kept = []
    for steps in (9, 2, 7, 12):
        traj = collect(env, steps=steps)
        root = env.root()
        td = root.clone()
        td["action"] = env.action_spec.rand(generator=env.generator)
        td, after = env.step_and_maybe_reset(td)
        kept += [(x, x.clone()) for x in (traj, root, td, after)]
    for _ in range(3):
        collect(env, steps=16)
    for x, copy in kept:
        _assert_same(x.select(*copy.keys(True, True)), copy)
    counting = gpu_envs.wrap(CountingTorchVectorEnv(3))
    assert counting.backend.reuse_outputs(True) is False  # a user's env: every step's tensors are its own


def test_only_envs_that_step_as_batched_env_does_are_collected_without_tensordicts():
    keys = list(TRANSITION_KEYS)
    assert transition_keys(["observation"]) == TRANSITION_KEYS
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    collect(env, steps=4)
    buffer = collect_cache(env).buffers[4]
    assert fused_writer(env, buffer) is not None
    assert env.transition_values(keys[::-1]) is not None  # any order of the same keys
    assert env.transition_values(keys[:-1]) is None and env.transition_values([*keys, "sample_log_prob"]) is None
    transformed = TransformedEnv(env, RewardScale(0.5))  # transforms rewrite transitions: not forwarded
    assert fused_writer(transformed, buffer) is None
    assert fused_writer(env, RolloutBuffer(env, 4)) is None  # a buffer not laid out yet
    watched = gpu_envs.make("CartPole-v1", num_envs=4, seed=0, watchdog_s=60)
    collect(watched, steps=4)
    assert watched.transition_values(keys) is None  # the watchdog watches step_and_maybe_reset
    watched.close()
    fresh = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    fresh.reset()
    assert fresh.transition_values(keys) is None  # before the first (validated) step
    with_info = gpu_envs.make("CartPole-v1", num_envs=4, backend="gymnasium", seed=0)
    with_info.reset()
    _steps(with_info, 1)
    assert with_info.transition_values(transition_keys(["observation"])) is not None  # no info entries
    with_info.close()


def test_an_interrupted_collection_without_tensordicts_marks_the_env(monkeypatch):
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    collect(env, steps=8)
    calls = {"n": 0}
    advance = env.backend.env._advance

    def flaky(action, columns):
        calls["n"] += 1
        if calls["n"] == 4:  # a middle step of the collection
            raise KeyboardInterrupt
        return advance(action, columns)

    monkeypatch.setattr(env.backend.env, "_advance", flaky)
    with pytest.raises(KeyboardInterrupt):
        collect(env, steps=8)
    assert env.interrupted
    with pytest.raises(gpu_envs.InterruptedStepError):
        collect(env, steps=8, buffer=RolloutBuffer(env, 8))
    env.reset()
    assert collect(env, steps=8)["next", "observation"].isfinite().all()


# ------------------------------------------------ every collection, the same transitions
def _random_policy(env):
    """A policy drawing what collect's random actions draw (the same sampler, the same generator)."""
    sample = env.action_spec.sampler(generator=env.generator)

    def policy(td):
        td.set("action", sample())
        return td

    return policy


def _collections(make, variant, calls=3, steps=12):
    env = make()
    env.reset(seed=3)
    if variant == "graph":
        collector = GraphCollector(env, None, RolloutBuffer(env, steps), api=EmulatedGraphs())
        runs = [collector.collect().clone() for _ in range(calls)]
    elif variant == "policy":
        policy = _random_policy(env)
        runs = [collect(env, policy, steps=steps).clone() for _ in range(calls)]
    else:
        kwargs = {"compile": True} if variant == "compiled" else {}
        env = _no_fusing(env) if variant == "tensordicts" else env
        runs = [collect(env, steps=steps, **kwargs).clone() for _ in range(calls)]
    return torch.cat(runs, dim=1), env.root()


@pytest.mark.slow
@pytest.mark.parametrize("env_name", ["counting", "cartpole"])
@pytest.mark.parametrize("variant", ["tensordicts", "policy", "compiled", "graph"])
def test_every_collection_gives_the_same_transitions(env_name, variant):
    """Random actions written straight into the buffer, through TensorDicts, by a policy, compiled, graph-replayed."""
    make = {
        "counting": lambda: gpu_envs.wrap(CountingTorchVectorEnv(6, final_obs="masked")),
        "cartpole": lambda: gpu_envs.make("CartPole-v1", num_envs=16, seed=5),
    }[env_name]
    fused, fused_root = _collections(make, "fused")
    other, other_root = _collections(make, variant)
    if variant == "policy":  # the policy's collection has no other keys
        assert set(other.keys(True, True)) == set(fused.keys(True, True))
    assert fused["next", "done"].any()
    if env_name == "cartpole" and variant in ("compiled", "graph"):  # compiled float physics: equal to rounding
        for key in fused.keys(True, True):
            torch.testing.assert_close(fused[key], other[key], rtol=1e-5, atol=1e-5, equal_nan=True, msg=str(key))
        return
    _assert_same(fused, other)
    _assert_same(fused_root, other_root)


def _route(env) -> str:
    """The bound advance after the first step, as docs/ARCHITECTURE.md's route table names it."""
    _steps(env, 2)
    stepper = env._path.stepper
    if isinstance(stepper, WatchedStep):
        return f"WatchedStep({type(stepper.inner).__name__})"
    return type(stepper).__name__


def test_the_steady_state_routes_are_the_ones_the_architecture_page_draws():
    from tests.isaac_fakes import FakeIsaacDirectEnv

    routes = {
        "built-in CartPole / Pendulum (`torch`)": _route(gpu_envs.make("CartPole-v1", num_envs=4, seed=0)),
        "your torch vector env (`torch`), ManiSkill3": _route(gpu_envs.wrap(CountingTorchVectorEnv(4))),
        "gymnasium, Ray, EnvPool, JAX (trusted, staged or packed)": _route(
            gpu_envs.make("CartPole-v1", num_envs=4, backend="gymnasium", seed=0)
        ),
        "Isaac Lab, mjlab (the simulator's own tensors)": _route(gpu_envs.wrap(FakeIsaacDirectEnv(4))),
    }
    page = (Path(__file__).resolve().parent.parent / "docs" / "ARCHITECTURE.md").read_text()
    for kind, route in routes.items():
        assert f"| {kind} | `{route}` |" in page, (kind, route)


# ------------------------------------------------- step_and_reset's steady form
def _general_only(env):
    """``env`` whose path never takes ``step_and_reset``'s steady form: every step through ``general_step_and_reset``."""
    path = env._path
    bind = path.bind

    def bind_general() -> None:
        bind()
        path.steady = False

    path.bind = bind_general
    path.steady = False
    return env


def _counted_general(env):
    """``env`` with a count of the steps that went through ``general_step_and_reset`` (``env.general_steps``)."""
    path = env._path
    general = path.general_step_and_reset
    env.general_steps = 0

    def counted(td):
        env.general_steps += 1
        return general(td)

    path.general_step_and_reset = counted
    return env


def _loop(env, steps):
    """``steps`` transitions through ``step_and_maybe_reset``, fed its root, or a copy of ``td["next"]``, or ``env.step``'s.

    Every fifth step is the torchrl loop (``td = env.step(td)["next"]``); after every fifth
    ``step_and_maybe_reset`` the next input is a fresh TensorDict over ``td["next"]``'s
    tensors (torchrl's ``step_mdp``): both continue from the cached root.
    """
    td, out = env.reset(), []
    for t in range(steps):
        td["action"] = env.action_spec.rand(generator=env.generator)
        if t % 5 == 3:
            td = env.step(td)
            out.append(td.clone())
            td = td["next"]  # the next step_and_maybe_reset continues from the cached root (torchrl's way)
        elif t % 5 == 1:
            td, _ = env.step_and_maybe_reset(td)
            out.append(td.clone())
            td = TensorDict(dict(td["next"].items()), batch_size=td.batch_size)
        else:
            td, root = env.step_and_maybe_reset(td)
            out.append(td.clone())
            td = root
    return out, td


def _isaac(**kwargs):
    from tests.isaac_fakes import FakeIsaacDirectEnv

    return gpu_envs.wrap(FakeIsaacDirectEnv(4, state=True, **kwargs))  # two observation keys: policy, critic


def _validating(env):
    env.validate_actions = True
    return env


STEADY_CASES = {  # (make, whether the steady form serves it)
    "CartPole, final obs": (lambda: gpu_envs.make("CartPole-v1", num_envs=3, seed=5), True),
    "CartPole, placeholders": (lambda: gpu_envs.make("CartPole-v1", num_envs=3, seed=5, expose_final_obs=False), True),
    "CartPole x600, placeholders as rows": (
        lambda: gpu_envs.make("CartPole-v1", num_envs=600, seed=5, expose_final_obs=False),
        True,
    ),
    "Pendulum, checks off": (lambda: gpu_envs.make("Pendulum-v1", num_envs=3, seed=5, health_checks=False), True),
    "torch env, masked final obs": (lambda: gpu_envs.wrap(CountingTorchVectorEnv(6, final_obs="masked")), True),
    "torch env, no final obs": (lambda: gpu_envs.wrap(CountingTorchVectorEnv(6, final_obs="none")), True),
    "two observation keys, placeholders": (_isaac, True),
    "two observation keys, final obs": (lambda: _isaac(compute_final_obs=True), True),
    "gymnasium, final mask": (lambda: gpu_envs.make("CartPole-v1", num_envs=3, backend="gymnasium", seed=5), True),
    "checks on every step": (lambda: gpu_envs.make("CartPole-v1", num_envs=3, seed=5, health_checks="step"), False),
    "action values checked": (lambda: _validating(gpu_envs.make("CartPole-v1", num_envs=3, seed=5)), False),
}


@pytest.mark.parametrize("case", list(STEADY_CASES))
def test_the_steady_step_and_reset_equals_the_general_one(case):
    make, steady = STEADY_CASES[case]
    fast, general = _counted_general(make()), _general_only(make())
    steps = 220 if "Pendulum" in case else 60  # episodes end within them
    a, root_a = _loop(fast, steps)
    b, root_b = _loop(general, steps)
    assert fast._path.steady is steady and general._path.steady is False
    # the first step (validated) and, without the steady form, every step_and_maybe_reset went the general way
    assert fast.general_steps == (1 if steady else 48)
    assert any(bool(td["next", "done"].any()) for td in a)
    for x, y in zip(a, b, strict=True):
        _assert_same(x, y)
    _assert_same(root_a, root_b)
    _assert_same(fast.root(), general.root())
    monitors = fast.health_monitor, general.health_monitor
    if monitors[0] is not None and monitors[1] is not None:  # the same steps counted clean or kept to look at
        assert monitors[0].vouched_steps == monitors[1].vouched_steps
        assert monitors[0].unvouched_steps == monitors[1].unvouched_steps


@pytest.mark.parametrize("general", [False, True])
def test_the_steady_step_and_reset_refuses_what_the_general_one_refuses(general):
    env = gpu_envs.make("CartPole-v1", num_envs=4, seed=0)
    env = _general_only(env) if general else env
    td = env.reset()
    td["action"] = torch.zeros(4, dtype=torch.long)
    _, root = env.step_and_maybe_reset(td)
    assert env._path.steady is not general
    before = env.root()["observation"].clone()
    td["action"] = torch.zeros(4, dtype=torch.long)
    with pytest.raises(gpu_envs.StaleInputError, match="earlier root"):  # the root of the step before
        env.step_and_maybe_reset(td)
    root["action"] = torch.zeros(4, dtype=torch.float32)
    with pytest.raises(gpu_envs.ActionError, match="dtype"):
        env.step_and_maybe_reset(root)
    # on another device (a TensorDict of no device holds it): refused by the device check, before anything moves
    meta = TensorDict(
        {"observation": root["observation"], "action": torch.zeros(4, dtype=torch.long, device="meta")}, [4]
    )
    with pytest.raises(gpu_envs.ActionError, match="on meta"):
        env.step_and_maybe_reset(meta)
    assert torch.equal(env.root()["observation"], before)  # nothing moved
    root["action"] = torch.zeros(4, dtype=torch.long)
    root.lock_()
    with pytest.raises(RuntimeError, match="locked"):  # tensordict's own refusal, after the step: the env is marked
        env.step_and_maybe_reset(root)
    with pytest.raises(gpu_envs.InterruptedStepError, match="interrupted mid-step"):
        env.step_and_maybe_reset(meta)  # any input: the guard refuses it first
    env.reset()
    td = env.root().set("action", torch.ones(4, dtype=torch.long))
    _, root = env.step_and_maybe_reset(td)  # usable again after the reset
    assert root["observation"].shape == (4, 4)
