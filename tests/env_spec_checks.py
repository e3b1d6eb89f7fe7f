"""What every env's specs promise a torchrl user (shared by the backend test files).

``env.*_spec`` carry the batch dims (``shape == env.batch_size + single.shape``), the
per-env ``env.single_*_spec`` are the same specs without them, and the torchrl idiom
``td["action"] = env.action_spec.rand()`` steps the env with a whole batch.
"""

from __future__ import annotations

from typing import Any

import torch

DONE_KEYS = ("done", "terminated", "truncated")


def assert_batched_and_single_specs_agree(env: Any) -> None:
    """Each batched spec is its single spec expanded to ``env.batch_size``, leaf by leaf."""
    batch = env.batch_size
    for name in ("observation", "action", "reward", "done", "info"):
        batched, single = getattr(env, f"{name}_spec"), getattr(env, f"single_{name}_spec")
        assert single.batch_shape == (), (name, single)
        assert batched.batch_shape == batch and batched.shape == batch + single.shape, (name, batched)
        assert batched.unbatched() == single, name
        for key, leaf in batched.items(True, True) if hasattr(batched, "items") else []:
            assert leaf.shape == batch + single[key].shape, (name, key)
            assert leaf.dtype == single[key].dtype and leaf.device == env.device, (name, key)
    assert env.observation_spec.shape == env.done_spec.shape == env.info_spec.shape == batch


def assert_torchrl_action_idiom_steps(env: Any, steps: int = 3) -> None:
    """``td["action"] = env.action_spec.rand()`` (and ``zero()``) steps the env; outputs lie in the specs."""
    obs_keys = list(env.single_observation_spec.keys(True, True))
    td = env.reset(seed=0)
    assert env.observation_spec.contains(td.select(*obs_keys)) and env.done_spec.contains(td.select(*DONE_KEYS))
    draws = [env.action_spec.zero()] + [env.action_spec.rand(generator=env.generator) for _ in range(steps - 1)]
    for action in draws:
        assert action.shape == env.action_spec.shape and action.device == env.device
        assert env.action_spec.contains(action)
        td["action"] = action  # a whole batch: no "batch dimension mismatch"
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        assert env.reward_spec.contains(nxt["reward"]) and env.done_spec.contains(nxt.select(*DONE_KEYS))
        assert env.info_spec.contains(nxt)
        assert env.observation_spec.contains(root.select(*obs_keys))
        td = root
    torch.manual_seed(0)
    td["action"] = env.action_spec.rand()  # the global RNG works too
    env.step(td)
