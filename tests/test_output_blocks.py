"""gpu_envs.builtin.output_blocks: fresh outputs carved K steps at a time, and the built-in envs that use them.

The property that matters: a set is handed out once and nothing writes into it afterwards,
so a transition kept without ``clone()`` keeps its values while the env steps on. Checked
on the blocks themselves and on CartPole and Pendulum stepped past several blocks, against
the same envs with one allocation per output per step (K = 1).
"""

from __future__ import annotations

import pytest
import torch

import gpu_envs
from gpu_envs.builtin import native
from gpu_envs.builtin.output_blocks import BLOCK_BYTES, MAX_STEPS, OutputBlocks


def make_set(key):
    n = 8
    shape = (n, 1) if key else (n,)
    return torch.empty(n, 3), torch.empty(shape, dtype=torch.bool), None


def test_each_set_is_new_memory_of_the_layout_its_key_names():
    blocks = OutputBlocks(make_set)
    sets = [blocks.take(True) for _ in range(3 * MAX_STEPS)] + [blocks.take(False) for _ in range(5)]
    pointers = [t.data_ptr() for s in sets for t in s if t is not None]
    assert len(set(pointers)) == len(pointers), "a set was handed out twice"
    for s in sets[: 3 * MAX_STEPS]:
        assert s[0].shape == (8, 3) and s[0].dtype == torch.float32 and s[0].is_contiguous()
        assert s[1].shape == (8, 1) and s[1].dtype == torch.bool and s[2] is None
    assert all(s[1].shape == (8,) for s in sets[3 * MAX_STEPS :])


def test_k_keeps_a_block_within_its_bytes_and_is_one_for_large_sets():
    small, large = OutputBlocks(make_set), OutputBlocks(lambda key: (torch.empty(4096, 4),))
    small.take(True), large.take(True)
    one_set = 8 * 3 * 4 + 8
    assert small.steps_per_block(True) == min(MAX_STEPS, BLOCK_BYTES // one_set)
    assert large.steps_per_block(True) == 1 and small.steps_per_block(False) is None
    for _ in range(2):  # the first set (the layout's sample) and a later one
        a = large.take(True)[0]
        assert a.storage_offset() == 0 and a.untyped_storage().nbytes() == 4096 * 4 * 4  # K = 1: plain tensors


@pytest.mark.skipif(not native.available(), reason="no C compiler: the built-in envs take the pure-torch step")
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_kept_transitions_keep_their_values_while_the_env_steps_on(env_id):
    """Transitions kept WITHOUT clone over 3 blocks' worth of steps equal clones taken at the time, and equal an env
    that allocates every output every step."""
    n, steps = 4, 3 * MAX_STEPS

    def run(blocks: bool):
        env = gpu_envs.make(env_id, num_envs=n, seed=1, max_episode_steps=7)
        raw = env.backend.env
        if not blocks:
            raw._native_blocks = OutputBlocks(raw._fresh_outputs, max_steps=1)
        g = torch.Generator().manual_seed(0)
        root, kept, cloned = env.reset(), [], []
        for _ in range(steps):
            root["action"] = env.action_spec.rand(generator=g)
            td, root = env.step_and_maybe_reset(root)
            kept.append(td)
            cloned.append(td.clone())
        assert raw._native_blocks.steps_per_block(True) == (MAX_STEPS if blocks else 1)
        return kept, cloned

    kept, cloned = run(blocks=True)
    _, plain = run(blocks=False)
    for a, b, c in zip(kept, cloned, plain, strict=True):
        for key in c.keys(True, True):
            assert torch.equal(a[key], b[key]) and torch.equal(a[key], c[key]), key
