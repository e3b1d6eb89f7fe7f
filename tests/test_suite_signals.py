"""The suite's Ctrl-C tests pass when the suite is started with SIGINT ignored, and never hang.

A process started with SIGINT ignored (``nohup``-style launchers, a background job of a
shell script, some CI runners) inherits the ignored disposition, and Python then installs
no handler: a test that sends SIGINT and waits for ``KeyboardInterrupt`` would wait
forever. So every test that sends SIGINT

* is marked ``sigint``,
* installs Python's handler itself: the ``python_sigint`` fixture (tests/conftest.py)
  when it signals this process, ``PYTHON_WITH_SIGINT`` (tests/with_sigint.py) for a
  Python subprocess it signals,
* and bounds its waits (``Lines.wait_for``, ``proc.wait(timeout=...)``, a deadline on
  the loop that waits for the interrupt).

The first test checks the first two rules from the source; the second reruns every
``sigint`` test in a pytest started with SIGINT ignored, under a deadline.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import run_tree

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _uses(node: ast.AST, name: str) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name)
        for n in ast.walk(node)
    )


def _marked(function: ast.FunctionDef, module_marks: set[str]) -> set[str]:
    marks = set(module_marks)
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Attribute)
            and target.value.attr == "mark"
        ):
            marks.add(target.attr)
    return marks


def _module_marks(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute) and n.attr != "mark"}
    return set()


def _reach(function: ast.FunctionDef, helpers: dict[str, ast.FunctionDef]) -> list[ast.FunctionDef]:
    """``function`` and the module-level functions it calls, transitively."""
    seen, todo = {function.name: function}, [function]
    while todo:
        for node in ast.walk(todo.pop()):
            if isinstance(node, ast.Name) and node.id in helpers and node.id not in seen:
                seen[node.id] = helpers[node.id]
                todo.append(helpers[node.id])
    return list(seen.values())


def signal_tests() -> dict[str, dict[str, list[str]]]:
    """``{test file: {test name: [problems]}}`` for every test that sends SIGINT."""
    found: dict[str, dict[str, list[str]]] = {}
    for path in sorted(TESTS.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        helpers = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        module_marks = _module_marks(tree)
        for name, function in helpers.items():
            if not name.startswith("test_"):
                continue
            body = _reach(function, helpers)
            if not any(_uses(f, "SIGINT") for f in body):
                continue
            problems = found.setdefault(path.name, {}).setdefault(name, [])
            if "sigint" not in _marked(function, module_marks):
                problems.append(f"{name}: not marked @pytest.mark.sigint")
            signals_itself = any(_uses(f, "pthread_kill") or _uses(f, "getpid") for f in body)
            if signals_itself and "python_sigint" not in {a.arg for a in function.args.args}:
                problems.append(f"{name}: signals this process without the python_sigint fixture")
            if any(_uses(f, "Popen") for f in body) and not any(_uses(f, "PYTHON_WITH_SIGINT") for f in body):
                problems.append(f"{name}: signals a subprocess not started through PYTHON_WITH_SIGINT")
    return found


def test_every_test_that_sends_sigint_is_marked_and_installs_pythons_handler():
    found = signal_tests()
    # the files known to send SIGINT: a rename or a lost test shows up here
    assert {"test_robustness_interrupts.py", "test_robustness_cli.py", "test_robustness_async.py"} <= set(found)
    problems = [
        f"{file}::{problem}" for file, tests in found.items() for listed in tests.values() for problem in listed
    ]
    assert not problems, "\n".join(problems)


_IGNORING_SIGINT = """
import signal, sys
import pytest
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a nohup-style launcher or a script's background job leaves it
assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_the_signal_tests_pass_when_the_suite_runs_with_sigint_ignored():
    found = signal_tests()
    files = [str(TESTS / name) for name in found]
    args = ["-q", "-m", "sigint", "-p", "no:cacheprovider", "-o", "addopts=", *files]
    # run_tree: on its deadline the whole tree (CLI children, async workers) is ended, and the test fails
    out = run_tree([sys.executable, "-c", _IGNORING_SIGINT, *args], timeout=1200, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    summary = re.search(r"(\d+) passed(.*) in [\d.]+s", out.stdout)
    assert summary, out.stdout[-2000:]
    assert int(summary.group(1)) >= sum(len(tests) for tests in found.values()), summary.group(0)
    assert "failed" not in summary.group(2) and "skipped" not in summary.group(2), summary.group(0)


@pytest.mark.slow
def test_stress_run_starts_the_command_ignoring_sigint_beside_busy_cores_and_ends_them():
    probe = (
        "import os, signal; from tests.processes import descendants; "
        "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, len(descendants(os.getppid())))"
    )
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "stress_run.py"),
        "--busy",
        "2",
        "--ignore-sigint",
        "--timeout",
        "120",
    ]
    out = run_tree([*cmd, "--", sys.executable, "-c", probe], timeout=180, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    ignored, below = out.stdout.split()
    assert ignored == "True" and int(below) == 3  # two spinners and the command itself
    timed_out = run_tree(
        [*cmd[:-1], "1", "--", sys.executable, "-c", "import time; time.sleep(600)"], timeout=180, cwd=ROOT
    )
    assert timed_out.returncode == 124 and "ran past --timeout" in timed_out.stderr
