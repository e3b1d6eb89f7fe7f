"""The numpy-facing adapters check every step's actions on the host (issue 19).

``to_gymnasium`` and ``to_sb3`` take numpy actions; checking them there costs a
reduction over N numbers and no device sync, so every step is checked: an index outside
a ``Discrete``/``MultiDiscrete``/``Binary`` range, a NaN or inf in a float action, a
wrong count/shape or a float array for integer actions raise ``ActionError`` naming the
rows, the values and the fix -- before anything moves. Each refusal is followed by a
good step whose results must equal those of a twin env that never saw the bad call:
the env stayed exactly as it was.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.contract.errors import ActionError
from gpu_envs.interop import to_gymnasium, to_sb3
from gpu_envs.interop.conversions import HostActions
from tests.fakes import CountingTorchVectorEnv

N = 4


def adapter(kind: str, env_id: str = "CartPole-v1", **make_kwargs):
    """``to_gymnasium`` or ``to_sb3`` over a fresh seeded env, reset."""
    env = gpu_envs.make(env_id, num_envs=N, device="cpu", seed=3, **make_kwargs)
    if kind == "gymnasium":
        out = to_gymnasium(env)
        out.reset(seed=3)
    else:
        out = to_sb3(env)
        out.seed(3)
        out.reset()
    return out


def step(venv, actions):
    """One step's observations and rewards (gymnasium's 5-tuple or SB3's 4-tuple)."""
    out = venv.step(actions)
    return out[0], out[1]


def assert_refused_then_unchanged(kind: str, bad, good, match: str, env_id: str = "CartPole-v1") -> ActionError:
    """``bad`` is refused with ``match``; the next ``good`` step equals a twin's that never saw ``bad``."""
    ours, twin = adapter(kind, env_id), adapter(kind, env_id)
    step(ours, good), step(twin, good)
    with pytest.raises(ActionError, match=match) as caught:
        ours.step(bad)
    for _ in range(3):
        got, want = step(ours, good), step(twin, good)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    ours.close()
    twin.close()
    return caught.value


KINDS = ["gymnasium", "sb3"]


@pytest.mark.parametrize("kind", KINDS)
def test_out_of_range_discrete_actions_are_refused_naming_rows_and_values(kind):
    good = np.array([0, 1, 1, 0])
    # 2 would push the built-in CartPole with 90 N instead of 10 N, silently
    err = assert_refused_then_unchanged(kind, np.array([0, 2, 1, 0]), good, r"row\(s\) \[1\]")
    text = str(err)
    assert "row 1: 2" in text and "0..1" in text and "Discrete" in text and "Nothing was stepped" in text
    err = assert_refused_then_unchanged(kind, np.array([-1, 0, 1, 7]), good, r"row\(s\) \[0, 3\]")
    assert "row 0: -1" in str(err) and "row 3: 7" in str(err)
    assert f"to_{kind}" in str(err)


@pytest.mark.parametrize("kind", KINDS)
def test_non_finite_float_actions_are_refused(kind):
    good = np.zeros((N, 1), np.float32)
    for value in (np.nan, np.inf, -np.inf):
        bad = good.copy()
        bad[2, 0] = value
        err = assert_refused_then_unchanged(kind, bad, good, "non-finite", env_id="Pendulum-v1")
        assert r"row 2" in str(err) and "nan_to_num" in str(err)


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_action_count_or_shape_is_refused(kind):
    good = np.array([0, 1, 1, 0])
    err = assert_refused_then_unchanged(kind, np.array([0, 1, 1]), good, r"shape \(3,\)")
    assert "(4,)" in str(err)
    assert_refused_then_unchanged(kind, np.zeros((N, 1), np.int64), good, r"shape \(4, 1\)")


@pytest.mark.parametrize("kind", KINDS)
def test_float_actions_for_a_discrete_env_are_refused_not_truncated(kind):
    assert_refused_then_unchanged(kind, np.array([0.0, 1.7, 1.0, 0.0]), np.array([0, 1, 1, 0]), "dtype float64")


def test_large_finite_float_actions_pass():
    """Only non-finite values are refused: huge finite torques reach the env (Pendulum clips them, as gymnasium's)."""
    ours = adapter("gymnasium", "Pendulum-v1")
    twin = adapter("gymnasium", "Pendulum-v1")
    big = np.full((N, 1), np.finfo(np.float32).max, np.float32)
    np.testing.assert_array_equal(ours.step(big)[0], twin.step(np.full((N, 1), 2.0, np.float32))[0])
    ours.close()
    twin.close()


def test_accepted_actions_keep_their_values_and_take_the_spec_dtype():
    env = gpu_envs.make("CartPole-v1", num_envs=N, device="cpu")
    actions = HostActions(env, "to_gymnasium")
    for given in (np.array([0, 1, 1, 0], np.int32), [0, 1, 1, 0], np.array([False, True, True, False])):
        out = actions(given)
        assert out.dtype == torch.int64 and out.tolist() == [0, 1, 1, 0]
    shared = np.array([1, 0, 0, 1])
    assert np.shares_memory(actions(shared).numpy(), shared)  # the right dtype: no copy
    assert actions(torch.tensor([1, 0, 0, 1])).tolist() == [1, 0, 0, 1]
    with pytest.raises(ActionError, match="row 3"):
        actions(torch.tensor([1, 0, 0, 5]))  # CPU tensors are checked too (a view, no copy)


class MultiDiscreteEnv(CountingTorchVectorEnv):
    """The counting env with a MultiDiscrete([3, 5]) action (only the first element is used)."""

    def __init__(self, num_envs: int = N) -> None:
        super().__init__(num_envs)
        self.single_action_space = gym.spaces.MultiDiscrete([3, 5])

    def step(self, action):
        return super().step(action[:, 0])


def test_multi_discrete_ranges_are_checked_per_element():
    env = gpu_envs.wrap(MultiDiscreteEnv(), device="cpu")
    ours = to_gymnasium(env)
    ours.reset()
    ours.step(np.array([[2, 4], [0, 0], [1, 3], [2, 0]]))
    with pytest.raises(ActionError, match=r"row\(s\) \[1\]") as caught:
        ours.step(np.array([[2, 4], [0, 5], [1, 3], [2, 0]]))  # 5 is outside nvec 5 for element 1 only
    assert "row 1: [0, 5]" in str(caught.value) and "per element" in str(caught.value)
    with pytest.raises(ActionError, match=r"row\(s\) \[2\]"):
        ours.step(np.array([[2, 4], [0, 0], [3, 0], [2, 0]]))
    ours.close()


def test_many_bad_rows_are_summarised():
    env = gpu_envs.make("CartPole-v1", num_envs=20, device="cpu")
    actions = HostActions(env, "to_sb3")
    with pytest.raises(ActionError, match=r"and 12 more rows"):
        actions(np.full(20, 3))


@pytest.mark.parametrize("n", [5, 100])  # both ways of checking an index range: a Python list, a ufunc reduction
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8])
def test_index_ranges_are_checked_the_same_for_few_and_many_actions(n, dtype):
    actions = HostActions(gpu_envs.make("CartPole-v1", num_envs=n, device="cpu"), "to_sb3")
    good = (np.arange(n) % 2).astype(dtype)
    assert torch.equal(actions(good), torch.as_tensor(good.astype(np.int64)))
    bad_values = [2, int(np.iinfo(dtype).max)] + (
        [-1, int(np.iinfo(dtype).min)] if np.issubdtype(dtype, np.signedinteger) else []
    )
    for bad in bad_values:
        for row in (0, n - 1):
            wrong = good.copy()
            wrong[row] = bad
            with pytest.raises(ActionError, match=rf"row\(s\) \[{row}\]"):
                actions(wrong)


def test_non_contiguous_actions_are_checked_and_taken_contiguous():
    """An array of the spec's dtype and shape that is not C-contiguous (a strided view) is checked, then copied."""
    actions = HostActions(gpu_envs.make("CartPole-v1", num_envs=N, device="cpu"), "to_sb3")
    strided = np.array([0, 9, 1, 9, 1, 9, 0, 9], np.int64)[::2]
    assert not strided.flags.c_contiguous
    out = actions(strided)
    assert out.is_contiguous() and out.tolist() == [0, 1, 1, 0]
    with pytest.raises(ActionError, match=r"row\(s\) \[1\]"):
        actions(np.array([0, 9, 5, 9, 1, 9, 0, 9], np.int64)[::2])
