"""The final-observation rule's numpy form is the torch form's rule, and each backend declares its kind.

* ``final_obs_numpy`` (what the gymnasium backend, and so every Ray worker, runs before
  anything becomes a tensor) turns an env's final observations -- batched, or
  gymnasium's per-row object array, valid on some rows -- into a RawStep's
  ``final_obs``/``final_mask``; feeding those to the torch form gives exactly what the
  torch form gives on the env's own values (the placeholders filled once, by it);
* the step layout packs and unpacks a step's fields by name, through the packed
  staging buffer and the fresh arrays of the CPU path alike, and its bound publisher
  (what the gymnasium backend steps with) gives the same RawStep, sharing exactly the
  arrays given away;
* every registered backend declares its kind of final observation, and
  ``docs/ARCHITECTURE.md``'s backend table says the same.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from gpu_envs import registry
from gpu_envs.backends.base import Backend, RawStep
from gpu_envs.backends.layout import StepLayout
from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.final_obs import FinalObsKind, FinalObsRule, final_obs_numpy
from gpu_envs.contract.specs import Box, Composite
from gpu_envs.utils.arrays import HostStaging

ROOT = Path(__file__).resolve().parent.parent


def _torch_rule(obs, done, final, mask):
    rule = FinalObsRule(Composite({"observation": Box(-1e9, 1e9, obs.shape[1:], torch.float32)}), len(obs))
    done_t = torch.from_numpy(done).view(-1, 1)
    final_t = None if final is None else {"observation": torch.from_numpy(final)}
    mask_t = None if mask is None else torch.from_numpy(mask)
    next_obs, missing = rule({"observation": torch.from_numpy(obs)}, done_t, final_t, mask_t)
    return next_obs["observation"], missing


def _assert_same(a, b):
    assert torch.equal(a[0].nan_to_num(-7.0), b[0].nan_to_num(-7.0)) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("kind", ["batched", "object_rows", "object_entries", "every_end"])
def test_the_numpy_form_gives_what_the_torch_form_gives(seed, kind):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    final = rng.normal(size=(n, 3)).astype(np.float32) + 100
    done = rng.random(n) < 0.5
    rows = (rng.random(n) < 0.7) & done if kind != "every_end" else done.copy()
    # what the env means: final observations valid on `rows` (ended rows elsewhere: missing)
    want = _torch_rule(obs, done, final, rows)
    if kind == "batched":
        got_final, got_mask = final_obs_numpy([obs], done, [final], rows)
    else:
        entries = np.empty(n, dtype=object)
        for i in np.flatnonzero(rows):
            entries[i] = final[i]
        given = None if kind == "object_entries" else rows
        got_final, got_mask = final_obs_numpy([obs], done, entries, given, every_end=kind == "every_end")
    assert got_final[0] is not obs  # fresh arrays, given away
    if rows.sum() == done.sum():
        assert got_mask is None  # every ended row has one: valid on every row
    _assert_same(_torch_rule(obs, done, got_final[0], got_mask), want)


def test_the_numpy_form_of_a_next_step_env_copies_its_step_observations():
    obs = np.arange(8, dtype=np.float32).reshape(4, 2)
    final, mask = final_obs_numpy([obs], np.array([True, False, False, True]), None)
    assert mask is None and np.array_equal(final[0], obs) and final[0] is not obs


@pytest.mark.parametrize("packed", [True, False])
def test_the_step_layout_packs_and_unpacks_by_name(packed):
    n = 3
    layout = StepLayout(
        {"a": ((n, 2), torch.float32), ("g", "b"): ((n,), torch.int64)},
        n,
        final_mask=(n,),
        info={"x": ((n,), torch.float64)},
    )
    stage = HostStaging(layout.fields, "cpu", packed=packed)
    obs = [np.ones((n, 2), np.float32), np.arange(n)]
    flags = [np.zeros((n, 1), bool), np.ones((n, 1), bool), np.ones((n, 1), bool)]
    values = layout.pack(
        obs, np.full((n, 1), 2.0), *flags, [o + 10 for o in obs], np.array([True, False, True]), [np.full(n, 0.5)]
    )
    raw = layout.unpack(stage.publish(values))
    assert isinstance(raw, RawStep) and list(raw.obs) == ["a", ("g", "b")]
    assert torch.equal(raw.final_obs[("g", "b")], torch.arange(n) + 10) and raw.reward.dtype == torch.float32
    assert torch.equal(raw.final_mask, torch.tensor([True, False, True])) and torch.equal(
        raw.truncated, torch.ones(n, 1, dtype=torch.bool)
    )
    assert torch.equal(raw.info["x"], torch.full((n,), 0.5, dtype=torch.float64))
    # a step without final observations: None, or the observations themselves
    values = layout.pack(obs, np.zeros((n, 1)), *flags, None, None, [np.zeros(n)])
    assert layout.unpack(stage.publish(values)).final_obs is None
    shared = layout.unpack(stage.publish(values), obs_are_final=True)
    assert shared.final_obs is shared.obs and shared.final_mask is None


def _layout_values(layout, n, rng, lone):
    obs = [rng.normal(size=(n, 2)).astype(np.float32)] + ([] if lone else [rng.integers(0, 9, n)])
    flags = [rng.random((n, 1)) < 0.5 for _ in range(3)]
    final = [o + 10 for o in obs]
    return obs, rng.normal(size=(n, 1)), flags, final, rng.random(n) < 0.5, [rng.normal(size=n)]


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("lone", [True, False])
@pytest.mark.parametrize("with_final", [True, False])
def test_the_bound_publisher_gives_what_pack_publish_unpack_give(packed, lone, with_final):
    n, rng = 4, np.random.default_rng(3)
    obs_fields = (
        {"a": ((n, 2), torch.float32)} if lone else {"a": ((n, 2), torch.float32), ("g", "b"): ((n,), torch.int64)}
    )
    layout = StepLayout(obs_fields, n, final_mask=(n,), info={"x": ((n,), torch.float32)})
    stage = HostStaging(layout.fields, "cpu", packed=packed)
    k = len(obs_fields)
    # given away: the flags and the final observations (fresh arrays in their fields' dtypes)
    owned = [False] * k + [False, True, True, True] + [True] * k + [False, False]
    publish = layout.publisher(stage, owned)
    for _ in range(3):
        obs, reward, flags, final, mask, info = _layout_values(layout, n, rng, lone)
        final, mask = (final, mask) if with_final else (None, None)
        want = layout.unpack(stage.publish(layout.pack(obs, reward, *flags, final, mask, info), owned), not with_final)
        got = publish(obs, reward, *flags, final, mask, info, not with_final)
        assert isinstance(got, RawStep) and list(got.obs) == list(want.obs) and list(got.info) == ["x"]
        for a, b in zip(got, want, strict=True):
            if isinstance(a, dict):
                assert list(a) == list(b) and all(
                    torch.equal(a[key], b[key]) and a[key].dtype == b[key].dtype for key in a
                )
            else:
                assert (a is None) == (b is None) and (a is None or (torch.equal(a, b) and a.dtype == b.dtype))
        assert (got.final_obs is got.obs) == (not with_final) and got.reward.dtype == torch.float32
        if not packed:  # the CPU path shares what was given away, copies the rest
            assert np.shares_memory(got.terminated.numpy(), flags[0]) and np.shares_memory(got.done.numpy(), flags[2])
            assert not np.shares_memory(got.obs["a"].numpy(), obs[0]) and not np.shares_memory(
                got.info["x"].numpy(), info[0]
            )
            if with_final:
                assert np.shares_memory(got.final_obs["a"].numpy(), final[0])


def test_a_publisher_refuses_a_stage_of_other_fields_or_owned_flags():
    layout = StepLayout({"a": ((3, 2), torch.float32)}, 3)
    with pytest.raises(InvalidArgumentError, match="fields"):
        layout.publisher(HostStaging([((3, 2), torch.float32)], "cpu"))
    with pytest.raises(InvalidArgumentError, match="owned"):
        layout.publisher(HostStaging(layout.fields, "cpu"), [True])


# ------------------------------------------------------------------ declarations
def _backend_classes(name: str) -> list[type]:
    """The Backend subclasses a registered backend's module defines (or, failing that, uses)."""
    module = importlib.import_module(registry._MODULES[name])
    found = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Backend) and v is not Backend]
    own = [cls for cls in found if cls.__module__.startswith(module.__name__)]
    return own or found


def _kinds(declared) -> set[FinalObsKind]:
    declared = declared if isinstance(declared, tuple) else (declared,)
    return {FinalObsKind(kind) for kind in declared}


def _docs_table() -> dict[str, set[FinalObsKind]]:
    """``backend -> kinds`` from docs/ARCHITECTURE.md's backend table."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("## Backends", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([a-z_0-9]+)`", cells[0]) if len(cells) >= 3 else None
        if match:
            rows[match.group(1)] = {FinalObsKind(kind.strip()) for kind in cells[1].split(";")}
    return rows


def test_every_registered_backend_declares_its_final_observations_and_the_docs_agree():
    table = _docs_table()
    for name in registry._MODULES:
        if importlib.util.find_spec(registry._MODULES[name]) is None:
            continue
        if not getattr(registry.get_plugin(name), "makes_backends", True):
            continue  # the foreign entry recognises envs only to refuse them
        classes = _backend_classes(name)
        assert classes, f"no Backend subclass found for backend {name!r}"
        declared = set()
        for cls in classes:
            kind = cls.capabilities.final_obs
            assert kind is not None, f"{cls.__name__} declares no capabilities.final_obs"
            declared |= _kinds(kind)
        assert name in table, f"docs/ARCHITECTURE.md's backend table has no row for `{name}`"
        assert table[name] == declared, (name, table[name], declared)
