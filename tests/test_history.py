"""History and InitTracker against a sequential reference: a Python deque (and a flag) per row.

The reference steps the same env WITHOUT the transforms, with the same actions, and keeps
for each row a ``deque(maxlen=K)`` filled with K copies of the reset observation at every
reset (full, masked, or the auto-reset after an end) and appended the next observation
after every step. Every root window and every ``("next", key)`` window of the transformed
env must equal the deque's, through auto-resets, masked resets, ``collect`` chunks, a
snapshot/restore in the middle of an episode and a compiled collection.
"""

from __future__ import annotations

from collections import deque

import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import InvalidArgumentError, SpecError
from gpu_envs.rollout import collect
from gpu_envs.transforms import EpisodeStats, History, InitTracker, ObservationNorm, TransformedEnv

pytestmark = pytest.mark.usefixtures("row_kernel_paths")  # each test on the C kernel and the torch ops

K = 3
N = 6


class Reference:
    """Per-row deques of the last K observations and per-row first-step flags, kept by hand."""

    def __init__(self, obs: torch.Tensor, k: int = K) -> None:
        self.k = k
        self.rows = [deque([o.clone()] * k, maxlen=k) for o in obs]
        self.init = [True] * len(obs)

    def window(self) -> torch.Tensor:
        return torch.stack([torch.stack(list(d)) for d in self.rows])

    def step(self, next_obs: torch.Tensor, done: torch.Tensor, root_obs: torch.Tensor) -> torch.Tensor:
        """The ("next", key) windows of a step, then the new episodes' windows where rows ended."""
        nxt = []
        for i, d in enumerate(self.rows):
            d.append(next_obs[i].clone())
            nxt.append(torch.stack(list(d)))
            self.init[i] = False
            if bool(done[i]):
                self.reset_row(i, root_obs[i])
        return torch.stack(nxt)

    def reset_row(self, i: int, obs: torch.Tensor) -> None:
        self.rows[i] = deque([obs.clone()] * self.k, maxlen=self.k)
        self.init[i] = True


def policy_from(obs: torch.Tensor) -> torch.Tensor:
    """CartPole: push towards the pole's lean (a deterministic function of the CURRENT observation)."""
    return (obs[:, 2] + 0.3 * obs[:, 3] > 0).long()


def pair(seed: int = 3, **kwargs):
    plain = gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", seed=seed, **kwargs)
    hist = History(length=K)
    tracker = InitTracker()
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", seed=seed, **kwargs), hist, tracker)
    return plain, env


def check_root(env_root, ref: Reference) -> None:
    torch.testing.assert_close(env_root["observation"], ref.window(), rtol=0, atol=0)
    assert env_root["is_init"].view(-1).tolist() == ref.init


def test_windows_follow_the_reference_through_auto_and_masked_resets():
    plain, env = pair(max_episode_steps=9)
    root_p, root = plain.reset(), env.reset()
    ref = Reference(root_p["observation"])
    check_root(root, ref)
    ended = 0
    for t in range(60):
        action = policy_from(root_p["observation"])
        root_p["action"], root["action"] = action, action.clone()
        td_p, root_p = plain.step_and_maybe_reset(root_p)
        td, root = env.step_and_maybe_reset(root)
        done = td_p["next", "done"].view(-1)
        ended += int(done.sum())
        want = ref.step(td_p["next", "observation"], done, root_p["observation"])
        torch.testing.assert_close(td["next", "observation"], want, rtol=0, atol=0)
        assert not td["next", "is_init"].any()
        # the transition's own root window is the one the policy acted on
        assert td["observation"].shape == (N, K, 4)
        check_root(root, ref)
        if t in (4, 23):  # a masked reset of some rows in the middle of their episodes
            mask = torch.tensor([True, False, False, True, False, t == 23]).view(N, 1)
            root_p = plain.reset(td=root_p.set("_reset", mask))
            root = env.reset(td=root.set("_reset", mask.clone()))
            for i in mask.view(-1).nonzero().view(-1).tolist():
                ref.reset_row(i, root_p["observation"][i])
            check_root(root, ref)
    assert ended > N  # the run went through many auto-resets (time limit 9 and falls)


def test_the_final_window_ends_in_the_true_final_observation():
    _, env = pair(max_episode_steps=5)
    root = env.reset()
    for _ in range(5):
        root["action"] = torch.zeros(N, dtype=torch.long)
        td, root = env.step_and_maybe_reset(root)
    # every row hit the time limit at step 5: its final window is its own last K observations
    assert td["next", "truncated"].all() | td["next", "terminated"].all() or td["next", "done"].all()
    final = td["next", "observation"]
    assert torch.equal(final[:, :-1], td["observation"][:, 1:])
    # the final observation is not the reset one, and the new root restarts from the reset observation
    assert not torch.equal(final[:, -1], root["observation"][:, -1])
    assert torch.equal(root["observation"], root["observation"][:, -1:].expand(N, K, 4))
    assert root["is_init"].all()


def test_collect_chunks_and_a_mid_episode_snapshot_follow_the_reference():
    plain, env = pair(max_episode_steps=11)

    def policy(td):
        td["action"] = policy_from(td["observation"][:, -1])
        return td

    env.reset()
    first = collect(env, policy, steps=13).clone()
    saved = env.get_state()
    second = collect(env, policy, steps=13).clone()
    env.set_state(saved)
    again = collect(env, policy, steps=13).clone()
    torch.testing.assert_close(again.to_dict(), second.to_dict(), rtol=0, atol=0)

    # the reference over the 26 steps
    root_p = plain.reset()
    ref = Reference(root_p["observation"])
    for traj in (first, second):
        for t in range(13):
            torch.testing.assert_close(traj[:, t]["observation"], ref.window(), rtol=0, atol=0)
            assert traj[:, t]["is_init"].view(-1).tolist() == ref.init
            root_p["action"] = policy_from(root_p["observation"])
            td_p, root_p = plain.step_and_maybe_reset(root_p)
            want = ref.step(td_p["next", "observation"], td_p["next", "done"].view(-1), root_p["observation"])
            torch.testing.assert_close(traj[:, t]["next", "observation"], want, rtol=0, atol=0)


def test_a_snapshot_of_some_rows_restores_only_their_windows():
    _, env = pair(max_episode_steps=50)
    root = env.reset()
    for _ in range(4):
        root["action"] = torch.ones(N, dtype=torch.long)
        _, root = env.step_and_maybe_reset(root)
    saved = env.get_state(rows=[1, 2])
    before = env.root()["observation"].clone()
    for _ in range(2):
        root["action"] = torch.zeros(N, dtype=torch.long)
        _, root = env.step_and_maybe_reset(root)
    moved = env.root()["observation"].clone()
    env.set_state(saved, rows=[4, 5])  # rows 1, 2's windows (and env rows) into rows 4, 5
    now = env.root()["observation"]
    assert torch.equal(now[4:6], before[1:3])
    assert torch.equal(now[:4], moved[:4])


def test_other_transforms_compose_and_images_keep_their_dtype():
    env = TransformedEnv(
        gpu_envs.make("CartPole-v1", num_envs=4, device="cpu", seed=0),
        EpisodeStats(),
        ObservationNorm(),
        History(length=2),
    )
    traj = env.rollout(20)
    assert traj["observation"].shape == (4, 20, 2, 4)
    assert env.observation_spec["observation"].shape == (4, 2, 4)
    assert env.observation_spec["observation"].contains(env.root()["observation"])
    # uint8 frames: a Box of uint8 stacked as uint8
    from gpu_envs.contract.specs import Box, Composite
    from gpu_envs.transforms.base import EnvSpecs

    hist = History(keys="pixels", length=4)
    specs = EnvSpecs(
        num_envs=2,
        device=torch.device("cpu"),
        observation_spec=Composite(pixels=Box(0, 255, (8, 8, 3), torch.uint8)),
        action_spec=Box(-1, 1, (1,)),
        reward_spec=Box(-1, 1, (1,)),
        done_spec=Composite(),
        info_spec=Composite(),
    )
    out = hist.setup(specs)
    assert out.observation_spec["pixels"].shape == (4, 8, 8, 3)
    assert out.observation_spec["pixels"].dtype == torch.uint8
    assert hist.live_state()["window_0"].dtype == torch.uint8


def test_bad_arguments_are_named():
    with pytest.raises(InvalidArgumentError, match="History length"):
        History(length=0)
    with pytest.raises(InvalidArgumentError, match="History keys"):
        History(keys=[])
    with pytest.raises(InvalidArgumentError, match="twice"):
        History(keys=["observation", "observation"])
    with pytest.raises(SpecError, match="not an observation key"):
        TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=2, device="cpu"), History(keys="pixels"))
    with pytest.raises(SpecError, match="already an observation key"):
        TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=2, device="cpu"), InitTracker(key="observation"))


@pytest.mark.slow
def test_a_compiled_collection_matches_the_eager_one():
    def build():
        return TransformedEnv(
            gpu_envs.make("CartPole-v1", num_envs=N, device="cpu", seed=5, max_episode_steps=9),
            History(length=K),
            InitTracker(),
        )

    def policy(td):
        td["action"] = policy_from(td["observation"][:, -1])
        return td

    eager, compiled = build(), build()
    eager.reset(), compiled.reset()
    want = [collect(eager, policy, steps=32).clone() for _ in range(2)]
    got = [collect(compiled, policy, steps=32, compile=True).clone() for _ in range(2)]
    for w, g in zip(want, got, strict=True):
        for key in (("observation"), ("next", "observation"), ("is_init"), ("next", "done")):
            torch.testing.assert_close(g[key], w[key], rtol=1e-5, atol=1e-5)
