"""``check_env``: a short validation of an env, reported in plain words (``gpu-envs check``).

It rolls the env out with random actions and checks what a learner relies on:

1. **specs**: every reset and step output lies inside its spec (observations, action,
   reward, done flags, info entries); ``done == terminated | truncated``; roots are
   never done.
2. **determinism**: two rollouts from ``reset(seed=s)`` are identical (NaN == NaN).
3. **final observations**: ``final_obs_missing`` is only set on rows that ended; no NaN
   anywhere except on those placeholder rows; on ended rows with a real final
   observation, the next observation differs from the post-reset root (otherwise the
   env handed back its reset observation as the final one).
4. **post-reset observations**: on ended rows the root looks like a fresh reset sample
   (inside the range of observations from a few seeded resets), and if instead the
   *final* observations do, the two were swapped. Envs whose resets depend on their
   history (curricula, counters) cannot be checked this way: that is a warning only.

Checks that synchronise freely (it is a validation, not the hot path). Every check has a
status: ``pass``, ``fail`` or ``warn`` (could not be fully checked, e.g. no episode ended).

Example::

    >>> import gpu_envs
    >>> report = check_env(gpu_envs.make("CartPole-v1", num_envs=4, device="cpu"))
    >>> report.ok
    True

``print(report.format())`` shows every check in plain words.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.keys import DONE_KEYS
from gpu_envs.contract.protocols import require_env_api
from gpu_envs.contract.specs import Composite, Spec
from gpu_envs.utils.arguments import MAX_SEED, as_int, as_seed

__all__ = ["CheckReport", "CheckResult", "check_env"]

PASS, FAIL, WARN = "pass", "fail", "warn"
_RESET_SAMPLES = 256  # fresh reset observations gathered for the post-reset check


@dataclass(frozen=True)
class CheckResult:
    """One check: ``name``, ``status`` (``"pass"``, ``"fail"`` or ``"warn"``) and a sentence."""

    name: str
    status: str
    detail: str


@dataclass
class CheckReport:
    """All checks of one env; ``ok`` is True when none failed (warnings allowed)."""

    title: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.status != FAIL for r in self.results)

    def format(self) -> str:
        """Plain text: one line per check, then a verdict."""
        lines = [self.title]
        lines += [f"  {r.status.upper():4}  {r.name}: {r.detail}" for r in self.results]
        failed = sum(r.status == FAIL for r in self.results)
        warned = sum(r.status == WARN for r in self.results)
        if failed:
            lines.append(f"{failed} of {len(self.results)} checks failed.")
        else:
            lines.append(f"All {len(self.results)} checks passed" + (f" ({warned} with warnings)." if warned else "."))
        return "\n".join(lines)


def check_env(env: Any, steps: int = 300, seed: int = 0, name: str | None = None) -> CheckReport:
    """Validate ``env`` (a BatchedEnv or TransformedEnv) with two seeded random rollouts.

    ``steps`` should cover at least one episode end per env for the final-observation
    checks (Pendulum-v1 truncates at 200). ``name`` (e.g. the env id) goes in the title.
    The env is left reset, not closed. Transforms with running state (ObservationNorm's
    statistics) make two rollouts differ by design: check the env below them.
    """
    require_env_api(env, "check_env")
    steps = as_int(steps, "steps", minimum=1)
    checked_seed = as_seed(seed)
    if checked_seed is None:
        raise InvalidArgumentError("check_env needs a seed (an int >= 0): it compares two seeded rollouts.")
    seed = checked_seed
    if seed + 1 + math.ceil(_RESET_SAMPLES / env.num_envs) > MAX_SEED:
        raise InvalidArgumentError(
            f"check_env seed={seed} is too close to the largest seed {MAX_SEED}: it also uses the next few."
        )
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentError(f"name must be a string (e.g. the env id) or None, got {type(name).__name__}.")
    backend = getattr(env, "backend", None)
    where = f"{backend.describe()} backend, " if backend is not None else ""
    title = f"check{f' {name}' if name else ''}: {where}{env.num_envs} envs on {env.device}, {steps} steps, seed {seed}"
    monitor = getattr(env, "health_monitor", None)
    # the checks below inspect every value and report; the env's own health checks would raise first
    with monitor.paused() if monitor is not None and hasattr(monitor, "paused") else contextlib.nullcontext():
        return _run_checks(env, steps, seed, title)


def _run_checks(env: Any, steps: int, seed: int, title: str) -> CheckReport:
    report = CheckReport(title)
    obs_keys = list(env.single_observation_spec.keys(include_nested=True, leaves_only=True))
    try:
        resets = [env.reset(seed=seed + 1 + i) for i in range(max(1, math.ceil(_RESET_SAMPLES / env.num_envs)))]
        env.reset(seed=seed)
        first = env.rollout(steps, reset=False)
        last_root = env.root()
    except Exception as err:  # a check reports, it does not crash
        report.results.append(
            CheckResult("rollout", FAIL, f"resetting or stepping the env raised {type(err).__name__}: {err}")
        )
        return report
    roots = _next_roots(first, last_root, obs_keys)
    report.results.append(_check_specs(env, resets[0], first, roots, obs_keys))
    report.results.append(_check_determinism(env, first, steps, seed))
    report.results.append(_check_final_obs(first, roots, obs_keys, steps))
    report.results.append(_check_post_reset(first, roots, resets, obs_keys))
    env.reset(seed=seed)
    return report


def _next(key: Any) -> tuple:
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


def _next_roots(traj: TensorDictBase, last_root: TensorDictBase, keys: list) -> dict:
    """Observations of the root after each step ``[N, T, ...]``: the next step's input."""
    return {k: torch.cat([traj.get(k)[:, 1:], last_root.get(k).unsqueeze(1)], dim=1) for k in keys}


def _where(index: int, steps: int) -> str:
    return f"env {index // steps}, step {index % steps}"


def _outside(spec: Spec, x: torch.Tensor, rows: torch.Tensor | None = None) -> str | None:
    """None if every row of ``x`` ``[N, T, *shape]`` (where ``rows``) lies in ``spec``, else why not."""
    steps = x.shape[1]
    if tuple(x.shape[2:]) != tuple(spec.shape) or x.dtype != spec.dtype:
        return f"has shape {tuple(x.shape[2:])} and dtype {x.dtype} per env; the spec says {tuple(spec.shape)}, {spec.dtype}"
    flat = x.reshape(x.shape[0] * steps, *x.shape[2:])
    keep = torch.ones(flat.shape[0], dtype=torch.bool) if rows is None else rows.reshape(-1).cpu()
    if spec.contains(flat[keep.to(flat.device)]):
        return None
    bad = [i for i in keep.nonzero().view(-1).tolist() if not spec.contains(flat[i : i + 1])]
    value = flat[bad[0]].tolist()
    return f"leaves {spec!r} on {len(bad)} of {int(keep.sum())} rows (first: {_where(bad[0], steps)}, value {value})"


def _check_specs(env: Any, reset_root: TensorDictBase, traj: TensorDictBase, roots: dict, keys: list) -> CheckResult:
    problems = []
    n = env.num_envs
    # per-env specs: the data is [N, T, *shape] and messages read best with one env's shapes
    obs_spec: Composite = env.single_observation_spec
    missing = traj.get(("next", "final_obs_missing"), None)
    real = None if missing is None else ~missing.reshape(n, -1)
    for key in keys:
        leaf = obs_spec[key]
        for name, value, rows in (
            (f"reset {key!r}", reset_root.get(key).unsqueeze(1), None),
            (f"root {key!r}", roots[key], None),
            (f"next {key!r}", traj.get(_next(key)), real),
        ):
            why = _outside(leaf, value, rows)
            if why:
                problems.append(f"{name} {why}")
    actions = env.single_action_spec
    action_leaves = actions.items(True, True) if isinstance(actions, Composite) else [("action", actions)]
    for key, leaf in action_leaves:  # (an env of agent groups: one (group, "action") entry per group)
        why = _outside(leaf, traj.get(key))
        if why:
            problems.append(f"action {why}" if key == "action" else f"action {key!r} {why}")
    why = _outside(env.single_reward_spec, traj.get(("next", "reward")))
    if why:
        problems.append(f"reward {why}")
    for key in DONE_KEYS:
        for name, value in (
            (f"reset {key!r}", reset_root.get(key).unsqueeze(1)),
            (f"next {key!r}", traj.get(("next", key))),
        ):
            why = _outside(env.single_done_spec[key], value)
            if why:
                problems.append(f"{name} {why}")
        if bool(reset_root.get(key).any()) or bool(traj.get(key).any()):
            problems.append(f"a root has {key!r} True; roots (the input of a step) must never be done")
    nxt = traj.get("next")
    if not torch.equal(nxt.get("done"), nxt.get("terminated") | nxt.get("truncated")):
        problems.append("('next', 'done') differs from terminated | truncated")
    for key, leaf in env.single_info_spec.items(include_nested=True, leaves_only=True):
        value = traj.get(_next(key), None)
        if value is None:
            problems.append(f"info entry {key!r} is in info_spec but missing from ('next', ...)")
            continue
        why = _outside(leaf, value)
        if why:
            problems.append(f"info {key!r} {why}")
    if problems:
        return CheckResult("specs", FAIL, "; ".join(problems) + ". Fix the env or its declared spaces.")
    return CheckResult(
        "specs",
        PASS,
        "reset and step outputs (observations, action, reward, done flags, info) lie inside their specs.",
    )


def _check_determinism(env: Any, first: TensorDictBase, steps: int, seed: int) -> CheckResult:
    try:
        env.reset(seed=seed)
        second = env.rollout(steps, reset=False)
    except Exception as err:
        return CheckResult("determinism", FAIL, f"the second rollout raised {type(err).__name__}: {err}")
    for key in first.keys(include_nested=True, leaves_only=True):
        a, b = first.get(key), second.get(key, None)
        if b is None or a.shape != b.shape or a.dtype != b.dtype:
            return CheckResult("determinism", FAIL, f"the two rollouts differ in the layout of {key!r}.")
        same = a == b
        if a.dtype.is_floating_point:
            same |= torch.isnan(a) & torch.isnan(b)
        if not bool(same.all()):
            rows = (~same).reshape(a.shape[0] * a.shape[1], -1).any(-1)
            index = int(rows.nonzero()[0])
            return CheckResult(
                "determinism",
                FAIL,
                f"two rollouts seeded with {seed} differ at {key!r} (first: {_where(index, a.shape[1])}, "
                f"{int(rows.sum())} rows in all). reset(seed=...) must fix every source of randomness.",
            )
    return CheckResult("determinism", PASS, f"two rollouts seeded with {seed} are identical.")


def _check_final_obs(traj: TensorDictBase, roots: dict, keys: list, steps: int) -> CheckResult:
    nxt = traj.get("next")
    done = nxt.get("done").reshape(-1)
    missing = nxt.get("final_obs_missing", None)
    missing = torch.zeros_like(done) if missing is None else missing.reshape(-1)
    problems = []
    if bool((missing & ~done).any()):
        problems.append("final_obs_missing is set on rows that did not end")
    obs_paths = [k if isinstance(k, tuple) else (k,) for k in keys]
    for key, value in traj.items(include_nested=True, leaves_only=True):
        if not value.dtype.is_floating_point:
            continue
        path = key if isinstance(key, tuple) else (key,)
        nan = torch.isnan(value).reshape(done.shape[0], -1).any(-1)
        placeholder = path[0] == "next" and path[1:] in obs_paths
        allowed = missing if placeholder else torch.zeros_like(missing)
        bad = nan & ~allowed
        if bool(bad.any()):
            problems.append(
                f"{key!r} holds NaN on {int(bad.sum())} rows that are not placeholders (first: {_where(int(bad.nonzero()[0]), steps)})"
            )
    ended = int(done.sum())
    real = done & ~missing
    same = torch.ones_like(done)
    for key in keys:
        a = traj.get(_next(key)).reshape(done.shape[0], -1)
        b = roots[key].reshape(done.shape[0], -1)
        same &= (a == b).all(-1)
    copied = real & same
    if bool(copied.any()):
        problems.append(
            f"on {int(copied.sum())} of {int(real.sum())} ended rows the next observation equals the post-reset root "
            f"(first: {_where(int(copied.nonzero()[0]), steps)}): the env seems to return its reset observation "
            "instead of the true final one (put it in info['final_obs'])"
        )
    if problems:
        return CheckResult("final observations", FAIL, "; ".join(problems) + ".")
    if ended == 0:
        return CheckResult(
            "final observations",
            WARN,
            f"no episode ended in {steps} steps, so final observations were not exercised; raise --steps.",
        )
    n_missing = int(missing.sum())
    if n_missing == ended:
        detail = (
            f"{ended} episode ends, all with placeholders flagged by final_obs_missing (the env gives no final "
            "observation); NaN appears only on those rows."
        )
    else:
        extra = f" ({n_missing} of them placeholders flagged by final_obs_missing)" if n_missing else ""
        detail = (
            f"{ended} episode ends{extra}; the final observations differ from the post-reset ones and NaN "
            "appears only on placeholder rows."
        )
    return CheckResult("final observations", PASS, detail)


def _check_post_reset(traj: TensorDictBase, roots: dict, resets: list, keys: list) -> CheckResult:
    nxt = traj.get("next")
    done = nxt.get("done").reshape(-1)
    missing = nxt.get("final_obs_missing", None)
    real = done if missing is None else done & ~missing.reshape(-1)
    count = int(real.sum())
    if count == 0:
        return CheckResult("post-reset observations", WARN, "not checked: no ended row with a real final observation.")
    root_in = torch.ones(count, dtype=torch.bool)
    final_in = torch.ones(count, dtype=torch.bool)
    for key in keys:
        fresh = torch.cat([r.get(key) for r in resets]).reshape(-1, *resets[0].get(key).shape[1:]).double().cpu()
        fresh = fresh.reshape(fresh.shape[0], -1)
        lo, hi = fresh.min(0).values, fresh.max(0).values
        margin = 0.25 * (hi - lo) + 1e-6 * (1 + torch.maximum(lo.abs(), hi.abs()))
        lo, hi = lo - margin, hi + margin
        for inside, source in ((root_in, roots[key]), (final_in, traj.get(_next(key)))):
            rows = source.reshape(done.shape[0], -1)[real.to(source.device)].double().cpu()
            inside &= ((rows >= lo) & (rows <= hi)).all(-1)
    r, q = root_in.double().mean().item(), final_in.double().mean().item()
    if r >= 0.9:
        return CheckResult(
            "post-reset observations",
            PASS,
            f"on ended rows the new root lies in the range of fresh reset observations ({r:.0%} of {count} rows).",
        )
    if q > r:
        return CheckResult(
            "post-reset observations",
            FAIL,
            f"on ended rows the next observation looks like a fresh reset ({q:.0%} of {count} rows) and the new root "
            f"does not ({r:.0%}): final and post-reset observations seem swapped.",
        )
    return CheckResult(
        "post-reset observations",
        WARN,
        f"only {r:.0%} of {count} post-reset roots lie in the range of fresh reset observations; fine if this env's "
        "reset depends on its history (curricula, counters), otherwise its auto-reset is suspect.",
    )
