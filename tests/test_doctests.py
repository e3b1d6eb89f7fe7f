"""Every ``>>>`` example in a ``gpu_envs`` docstring runs, as part of the normal ``pytest``.

A docstring example is a promise to a reader; run, it cannot drift from the code. Each
module holding a ``>>>`` line is one test: its doctests run with the module's globals
(``ELLIPSIS`` and ``NORMALIZE_WHITESPACE`` on), on the CPU, in well under a second.

An example that needs an optional library (an extra: sb3, torchrl, ...) imports it in
its first lines; it is skipped only where that library is not installed (CI installs the
extras, so there it runs), and fails like any other where the library is there.

``Example::`` blocks that are not doctests are sketches a reader adapts (a GPU, a real
simulator, a training run, names they bring): :data:`SKETCHES` lists the modules that
still hold one, so that a new example is written as a doctest, or added there knowingly.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpu_envs"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_with_doctests() -> list[str]:
    """Modules whose source holds a ``>>>`` line (found as text: nothing is imported to collect)."""
    return [
        module_name(path)
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "__main__.py" and re.search(r"^\s*>>> ", path.read_text(), re.MULTILINE)
    ]


def absent_library(error: BaseException | None) -> str | None:
    """The optional library whose absence caused ``error`` (its cause chain searched), if it is not installed."""
    while error is not None:
        if isinstance(error, ModuleNotFoundError) and error.name:
            library = error.name.split(".")[0]
            return library if importlib.util.find_spec(library) is None else None
        error = error.__cause__ or error.__context__
    return None


class _Runner(doctest.DocTestRunner):
    """A DocTestRunner that remembers the libraries an example found missing, and the report."""

    def __init__(self) -> None:
        super().__init__(optionflags=FLAGS, verbose=False)
        self.missing: set[str] = set()

    def report_unexpected_exception(self, out, test, example, exc_info) -> None:
        if (library := absent_library(exc_info[1])) is not None:
            self.missing.add(library)
        super().report_unexpected_exception(out, test, example, exc_info)


@pytest.mark.parametrize("name", modules_with_doctests())
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except Exception as err:  # a module needing its optional library at import (interop.torchrl: MissingComponentError)
        if (library := absent_library(err)) is None:
            raise
        pytest.skip(f"{name} needs {library}, not installed here")
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(module) if t.examples]
    assert tests, f"{name} has a '>>>' line but no doctest was found in it (is it inside a docstring?)"
    runner, report = _Runner(), []
    for test in tests:
        runner.run(test, out=report.append)
    if runner.missing and runner.failures:
        pytest.skip(f"{name}'s examples need {', '.join(sorted(runner.missing))}, not installed here")
    assert not runner.failures, "".join(report)


# Modules that still hold an ``Example::`` block without ``>>>``: sketches that need a GPU, a
# real simulator, a training run or objects the reader brings. Write new examples as doctests.
SKETCHES = {
    "benchmarks.image_envs",
    "benchmarks.timing",
    "gpu_envs.__main__",
    "gpu_envs.backends.base",
    "gpu_envs.backends.common",
    "gpu_envs.backends.envpool",
    "gpu_envs.backends.foreign",
    "gpu_envs.backends.gymnasium_envs",
    "gpu_envs.backends.gymnasium_envs.backend",
    "gpu_envs.backends.gymnasium_envs.info",
    "gpu_envs.backends.gymnasium_envs.internals",
    "gpu_envs.backends.gymnasium_envs.plugin",
    "gpu_envs.backends.gymnasium_envs.reaper",
    "gpu_envs.backends.gymnasium_envs.row_resets",
    "gpu_envs.backends.gymnasium_envs.snapshot",
    "gpu_envs.backends.gymnasium_envs.spaces",
    "gpu_envs.backends.gymnasium_envs.vector",
    "gpu_envs.backends.gymnasium_envs.workers",
    "gpu_envs.backends.gymnasium_envs.wrappers",
    "gpu_envs.backends.inbound",
    "gpu_envs.backends.isaaclab",
    "gpu_envs.backends.jax",
    "gpu_envs.backends.jax.backend",
    "gpu_envs.backends.jax.brax",
    "gpu_envs.backends.jax.brax_core",
    "gpu_envs.backends.jax.cores",
    "gpu_envs.backends.jax.pack",
    "gpu_envs.backends.jax.plugin",
    "gpu_envs.backends.layout",
    "gpu_envs.backends.legacy_gym",
    "gpu_envs.backends.maniskill",
    "gpu_envs.backends.minigrid",
    "gpu_envs.backends.mjlab",
    "gpu_envs.backends.mo_gymnasium",
    "gpu_envs.backends.ray",
    "gpu_envs.backends.ray.cluster",
    "gpu_envs.backends.ray.plugin",
    "gpu_envs.backends.reuse",
    "gpu_envs.backends.rsl_rl_vec",  # a legged_gym / Genesis task of the user's (tests/test_inbound_rsl_rl_vec.py runs a fake)
    "gpu_envs.backends.sb3",
    "gpu_envs.backends.torch_envs",
    "gpu_envs.builtin",
    "gpu_envs.builtin.cartpole",
    "gpu_envs.builtin.counter_rng",
    "gpu_envs.builtin.draw_pool",
    "gpu_envs.builtin.gymnasium_ids",
    "gpu_envs.builtin.pendulum",
    "gpu_envs.builtin.render",
    "gpu_envs.check",
    "gpu_envs.cli.bench_plot",
    "gpu_envs.contract.final_obs",
    "gpu_envs.contract.protocols",
    "gpu_envs.contract.specs.env_specs",
    "gpu_envs.core.step_path",
    "gpu_envs.core.step_validation",
    "gpu_envs.distributed",
    "gpu_envs.factory",
    "gpu_envs.interop.conversions",
    "gpu_envs.interop.libraries",
    "gpu_envs.interop.rl_games",
    "gpu_envs.interop.rsl_rl",
    "gpu_envs.interop.sb3",
    "gpu_envs.interop.skrl",
    "gpu_envs.interop.time_outs",
    "gpu_envs.interop.torchrl",
    "gpu_envs.registry",
    "gpu_envs.replay.buffer",
    "gpu_envs.replay.layout",
    "gpu_envs.replay.n_step",
    "gpu_envs.rollout",
    "gpu_envs.rollout.buffer",
    "gpu_envs.rollout.cache",
    "gpu_envs.rollout.compiled",
    "gpu_envs.rollout.cudagraph",
    "gpu_envs.rollout.loop",
    "gpu_envs.transforms.episode_stats",
    "gpu_envs.transforms.eval_rows",
    "gpu_envs.transforms.reward",
    "gpu_envs.utils.arrays",
    "gpu_envs.utils.capture",
    "gpu_envs.utils.devices",
    "gpu_envs.utils.memory",
    "gpu_envs.utils.video",
    "gpu_envs.utils.watchdog",
    "gpu_envs.wrappers.quarantine",
}


def sketch_modules() -> set[str]:
    """Modules (of gpu_envs and benchmarks) holding an ``Example::`` block with no ``>>>`` line in it."""
    found = set()
    for tree in ("gpu_envs", "benchmarks"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            lines = path.read_text().splitlines()
            for i, line in enumerate(lines):
                if line.strip() != "Example::":
                    continue
                indent = len(line) - len(line.lstrip())
                block = []
                for following in lines[i + 1 :]:
                    if following.strip() and len(following) - len(following.lstrip()) <= indent:
                        break
                    block.append(following)
                if not any(b.lstrip().startswith(">>> ") for b in block):
                    found.add(module_name(path))
    return found


def test_new_examples_are_doctests():
    found = sketch_modules()
    new, stale = sorted(found - SKETCHES), sorted(SKETCHES - found)
    assert not new, f"write these modules' Example:: blocks as '>>>' doctests (or list them in SKETCHES): {new}"
    assert not stale, f"these modules' examples are doctests now: drop them from SKETCHES: {stale}"
