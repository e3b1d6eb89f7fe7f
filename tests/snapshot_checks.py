"""The oracle of per-row snapshots, shared by the backends' tests.

For an env: step it randomly, snapshot every row and some rows, continue T steps
recording every transition (the oracle: what the rows did), then

1. restore every row and replay the same actions: every key of every transition is
   bitwise the recorded one;
2. restore the snapshot of some rows INTO OTHER ROWS and replay, giving each target
   row the action its source row had: the target rows' transitions are bitwise the
   source rows' recorded ones.

T is chosen by the callers so that episodes end (and reset draws happen) inside it.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase


def run(env, actions: list) -> TensorDictBase:
    """``len(actions)`` steps from the env's current root; the transitions stacked ``[T, N]``."""
    td = env.root()
    out = []
    for action in actions:
        td["action"] = action
        td, root = env.step_and_maybe_reset(td)
        out.append(td.clone())
        td = root
    return torch.stack(out)


def assert_bitwise(got: TensorDictBase, want: TensorDictBase, what: str) -> None:
    """Every leaf equal bit for bit (NaN placeholders included)."""
    keys = sorted(want.keys(include_nested=True, leaves_only=True), key=str)
    assert sorted(got.keys(include_nested=True, leaves_only=True), key=str) == keys, what
    for key in keys:
        a, b = got.get(key), want.get(key)
        assert a.dtype == b.dtype and a.shape == b.shape, (what, key)
        if a.is_floating_point():
            same = (a == b) | (a.isnan() & b.isnan())
            assert bool(same.all()) and torch.equal(torch.signbit(a), torch.signbit(b)), (what, key)
        else:
            assert torch.equal(a, b), (what, key)


def check_snapshot_exact(env, *, warm: int, steps: int, rows=(1, 3), into=(0, 2), seed: int = 0) -> TensorDictBase:
    """Both checks of the module docstring on ``env`` (reset here); returns the recorded transitions."""
    n = env.num_envs
    gen = torch.Generator(device=env.device).manual_seed(seed)
    env.reset(seed=seed + 1)
    run(env, [env.action_spec.rand(generator=gen) for _ in range(warm)])
    everything = env.get_state()
    some = env.get_state(list(rows))
    actions = [env.action_spec.rand(generator=gen) for _ in range(steps)]
    original = run(env, actions)
    assert bool(original["next", "done"].any()), "episodes must end inside the checked steps"

    env.set_state(everything)
    assert_bitwise(run(env, actions), original, "all rows restored")

    source = list(range(n))
    for r, j in zip(rows, into, strict=True):
        source[j] = r
    env.set_state(some, rows=list(into))
    moved = run(env, [a[source] for a in actions])
    assert_bitwise(moved[:, list(into)], original[:, list(rows)], "rows restored into other rows")
    return original
