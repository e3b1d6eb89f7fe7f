"""Plain reference loops over mjlab itself, to compare gpu_envs' transitions with, key by key.

* :func:`mjlab_auto_reset` steps an mjlab env as mjlab ships it (``auto_reset=True``):
  its observations are the post-reset ones on rows that ended, and the final ones are lost.
* :func:`mjlab_manual_reset` follows mjlab's documented ``auto_reset=False`` flow
  (``ManagerBasedRlEnvCfg.auto_reset``): ``step`` returns the observation each episode
  ended in, then the caller resets the ended rows with ``reset(env_ids=...)`` and acts on
  their fresh observations; rows that did not end keep the one ``step`` returned.
* :func:`gpu_envs_steps` records a gpu_envs env driven with the same actions.

Every record is a list of per-step dicts of cloned tensors: ``obs`` (the observation the
step returned: final where an episode ended, for mjlab's manual flow and gpu_envs;
post-reset for mjlab's auto-reset), ``root`` (what the next step acts on), ``reward``,
``terminated``, ``truncated`` (all ``[N]``).

mjlab draws its random numbers (reset events, observation noise, command resampling)
from the process-wide generators that ``reset(seed=...)`` seeds, so two envs built from
the same config and seed, started with the same ``reset(seed=...)``, one after the
other, see the same numbers as long as they draw them in the same order.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.mjlab.tasks import quiet


def _groups(obs: dict) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in obs.items()}


def mjlab_auto_reset(raw: Any, actions: list[torch.Tensor], seed: int) -> list[dict]:
    """mjlab's own stepping: ended rows are reset inside ``step``."""
    assert raw.cfg.auto_reset
    with quiet():
        raw.reset(seed=seed)
    record = []
    for action in actions:
        with quiet():
            obs, reward, terminated, truncated, _ = raw.step(action)
        groups = _groups(obs)
        record.append(
            {
                "obs": groups,
                "root": groups,
                "reward": reward.clone(),
                "terminated": terminated.clone(),
                "truncated": truncated.clone(),
            }
        )
    return record


def mjlab_manual_reset(raw: Any, actions: list[torch.Tensor], seed: int) -> list[dict]:
    """mjlab's ``auto_reset=False`` flow, written out plainly."""
    raw.cfg.auto_reset = False
    with quiet():
        obs, _ = raw.reset(seed=seed)
    record = []
    for action in actions:
        with quiet():
            obs, reward, terminated, truncated, _ = raw.step(action)
        final = _groups(obs)
        done = terminated | truncated
        root = final
        if done.any():
            with quiet():
                fresh, _ = raw.reset(env_ids=done.nonzero().view(-1))
            root = {name: torch.where(done.view(-1, 1), fresh[name], final[name]) for name in final}
        record.append(
            {
                "obs": final,
                "root": root,
                "reward": reward.clone(),
                "terminated": terminated.clone(),
                "truncated": truncated.clone(),
            }
        )
    return record


def gpu_envs_steps(env: Any, actions: list[torch.Tensor], seed: int) -> list[dict]:
    """The same through a gpu_envs env (``step_and_maybe_reset``)."""
    names = list(env.single_observation_spec.keys())
    with quiet():
        td = env.reset(seed=seed)
    record = []
    for action in actions:
        td["action"] = action
        with quiet():
            td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        assert not nxt["final_obs_missing"].any(), "gpu_envs gave a placeholder instead of mjlab's final observation"
        record.append(
            {
                "obs": {name: nxt[name] for name in names},
                "root": {name: root[name] for name in names},
                "reward": nxt["reward"].view(-1),
                "terminated": nxt["terminated"].view(-1),
                "truncated": nxt["truncated"].view(-1),
            }
        )
        td = root
    return record


def first_difference(a: list[dict], b: list[dict], steps: int, keys: tuple[str, ...]) -> str | None:
    """Where records ``a`` and ``b`` first differ (bit for bit) within ``steps`` steps, or None."""
    for t in range(steps):
        for key in keys:
            x, y = a[t][key], b[t][key]
            if isinstance(x, dict):
                for name in x:
                    if not torch.equal(x[name], y[name]):
                        return f"step {t}, {key}[{name!r}]: max difference {(x[name] - y[name]).abs().max().item()}"
            elif not torch.equal(x, y):
                return f"step {t}, {key}: {x.tolist()} vs {y.tolist()}"
    return None


def first_end(record: list[dict]) -> int:
    """The first step at which some row ended (len(record) if none did)."""
    for t, step in enumerate(record):
        if (step["terminated"] | step["truncated"]).any():
            return t
    return len(record)
