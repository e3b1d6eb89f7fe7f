"""The package's imports point down its layers, never up, and no modules import each other.

Every module of ``gpu_envs`` is parsed with ``ast`` (nothing is imported), and every
import statement in it counts: module level, inside functions (lazy imports) and inside
classes. A module may import modules of its own layer or of a layer below it; the
import graph must have no cycle, even within a layer; and no module imports a private
(``_name``) from another module. The table below is the layer table of docs/ARCHITECTURE.md,
top to bottom; a new module must be placed in it (the test says so). The few imports that
point up at call time on purpose are listed in ``CALL_TIME_UPWARD``, and a test checks
that each is made inside a function.

An import of ``a.b.c`` is counted as a dependency on module ``a.b.c`` only (not on the
parent packages Python also runs): that is what the code asks for. A package's
``__init__`` re-exports its submodules, so importing a package from inside itself is a
cycle, and importing ``gpu_envs.transforms.x`` from below the transforms layer would
still be reported as an upward import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "gpu_envs"

# (layer, modules or packages in it), top to bottom: docs/ARCHITECTURE.md draws the same
# table. A name covers its submodules, except the package root ("gpu_envs": the
# re-exports), which covers itself only; the most specific name wins.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # the re-exports, make()/wrap() and the registry (which imports backends by name, at run time), the CLI, check_env,
    # the gymnasium ids
    (
        "entry points and tools",
        (
            "gpu_envs",
            "gpu_envs.__main__",
            "gpu_envs.factory",
            "gpu_envs.registry",
            "gpu_envs.cli",
            "gpu_envs.env_checker",
            "gpu_envs.check",
            "gpu_envs.gymnasium_ids",
        ),
    ),
    # to_torchrl, to_sb3, ...: another library's env type around a BatchedEnv
    ("interop", ("gpu_envs.interop",)),
    # collect() with its buffer, loop, cache, compiled and CUDA-graph paths, GAE; multi-process collection;
    # the off-policy replay buffer
    ("rollout / distributed", ("gpu_envs.rollout", "gpu_envs.distributed", "gpu_envs.replay")),
    # env wrappers that reset rows of the env they wrap (Quarantine)
    ("wrappers", ("gpu_envs.wrappers",)),
    # TensorDict -> TensorDict modules and TransformedEnv
    ("transforms", ("gpu_envs.transforms",)),
    # BatchedEnv and the one step path it runs
    ("core", ("gpu_envs.core",)),
    # one adapter per env family: the only layer that reads an env's own outputs (foreign arrays, info dicts)
    ("backends", ("gpu_envs.backends",)),
    # built-in pure-torch envs
    ("built-in envs", ("gpu_envs.builtin",)),
    # the contract every layer programs against: specs, protocols, the final-observation rule
    ("contract", ("gpu_envs.contract",)),
    # argument checks, devices, memory estimates, foreign arrays, the hang watchdog, TensorDicts, state dicts
    ("utils", ("gpu_envs.utils",)),
    # the bottom of the contract: the error hierarchy and the key names
    ("errors and keys", ("gpu_envs.contract.errors", "gpu_envs.contract.keys")),
]

# Imports that point up ON PURPOSE, each made inside a function (at call time, never when
# the module is imported): (importing module, imported module). A rollout is a method of
# every env (gymnasium's and torchrl's habit), but the loop belongs to the rollout layer.
CALL_TIME_UPWARD = {
    ("gpu_envs.core.env", "gpu_envs.rollout.loop"),
    ("gpu_envs.transforms.transformed_env", "gpu_envs.rollout.loop"),
    # the deprecated alias gpu_envs.transforms.Quarantine (one release) reads it from its new place
    ("gpu_envs.transforms", "gpu_envs.wrappers"),
}


def module_files(package_dir: Path = ROOT / PACKAGE) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` under the package."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def layer_of(module: str) -> int | None:
    """Index in LAYERS (0 = top) of the most specific entry covering ``module``."""
    best, best_len = None, -1
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            covers = module == name or (name != PACKAGE and module.startswith(name + "."))
            if covers and len(name) > best_len:
                best, best_len = index, len(name)
    return best


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, list[str], int]]:
    """``(imported gpu_envs module, names taken from it, line)`` for every import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((alias.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:  # `from package import submodule`
                    found.append((sub, [], node.lineno))
                else:
                    found.append((base, [alias.name], node.lineno))
    result = []
    for target, names, line in found:
        if target != PACKAGE and not target.startswith(PACKAGE + "."):
            continue
        while target not in modules and "." in target:  # `import a.b.c` of an attribute path
            target = target.rsplit(".", 1)[0]
        result.append((target, names, line))
    return result


def import_graph() -> tuple[dict[str, Path], dict[str, list[tuple[str, list[str], int]]]]:
    modules = module_files()
    return modules, {m: imports_of(m, p, modules) for m, p in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def upward_imports(graph: dict[str, list[tuple[str, list[str], int]]]) -> list[str]:
    problems = []
    for module, imports in graph.items():
        here = layer_of(module)
        for target, _, line in imports:
            there = layer_of(target)
            allowed = (module, target) in CALL_TIME_UPWARD
            if here is not None and there is not None and there < here and not allowed:
                problems.append(
                    f"{module} line {line} ({LAYERS[here][0]}) imports {target} ({LAYERS[there][0]}), a layer above it"
                )
    return problems


# --------------------------------------------------------------------------- tests
def test_the_upward_exceptions_are_call_time_imports():
    """Each listed exception is an import inside a function, never one at module level."""
    modules = module_files()
    for module, target in CALL_TIME_UPWARD:
        tree = ast.parse(modules[module].read_text())
        top_level = {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module} | {
            alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names
        }
        assert target not in top_level, f"{module} imports {target} at module level; import it inside the method"
        assert any(t == target for t, _, _ in imports_of(module, modules[module], modules)), (
            f"{module} no longer imports {target}: drop the exception from CALL_TIME_UPWARD"
        )


def test_docs_architecture_draws_the_same_layer_table():
    """docs/ARCHITECTURE.md's "Layers" table: the same layers, in the same order, with the same modules."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and "`" in cells[1]:
            rows.append((cells[0], tuple(part.strip().strip("`") for part in cells[1].split(","))))
    assert rows == LAYERS, "docs/ARCHITECTURE.md's layer table and LAYERS differ"


def test_the_package_root_only_re_exports_and_dir_lists_them():
    import gpu_envs

    assert dir(gpu_envs) == sorted(gpu_envs.__all__)
    for name in gpu_envs.__all__:
        assert getattr(gpu_envs, name) is not None, name
    tree = ast.parse((ROOT / PACKAGE / "__init__.py").read_text())
    defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    assert defined == ["__dir__"], f"gpu_envs/__init__.py defines {defined}: it should only re-export"


def test_every_module_is_small():
    """One concept per module: none grows past ~600 lines."""
    long = {m: n for m, path in module_files().items() if (n := len(path.read_text().splitlines())) > 620}
    assert not long, f"split these modules (lines): {long}"


def test_every_module_is_placed_in_a_layer():
    unplaced = [m for m in module_files() if layer_of(m) is None]
    assert not unplaced, f"add these modules to LAYERS in {Path(__file__).name}: {unplaced}"


def test_imports_point_down_the_layers():
    _, graph = import_graph()
    problems = upward_imports(graph)
    assert not problems, "imports must point down the layers (see LAYERS):\n" + "\n".join(problems)


def test_no_import_cycles_lazy_imports_included():
    _, graph = import_graph()
    edges = {m: {t for t, _, _ in imports if t != m} for m, imports in graph.items()}
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_private_names_imported_across_modules():
    modules, graph = import_graph()
    problems = [
        f"{modules[module].relative_to(ROOT)}:{line}: {module} imports {name} from {target}"
        for module, imports in graph.items()
        for target, names, line in imports
        for name in names
        if name.startswith("_") and not name.startswith("__") and target != module
    ]
    assert not problems, "make these public in the module that owns them, or move them:\n" + "\n".join(problems)


# ---------------------------------------------------- the checker itself catches what it should
def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / PACKAGE


@pytest.mark.parametrize(
    ("files", "upward", "cycle"),
    [
        # a lazy import of the env from a backend: up, and a cycle with env's import of the backend
        (
            {
                "gpu_envs/core/env.py": "from gpu_envs.backends.base import Backend\n",
                "gpu_envs/backends/base.py": "def f():\n    from gpu_envs.core.env import BatchedEnv\n",
            },
            True,
            True,
        ),
        # the package root from a backend (`from gpu_envs import default_device`): up, no cycle
        ({"gpu_envs/__init__.py": "", "gpu_envs/backends/torch_envs.py": "from gpu_envs import x\n"}, True, False),
        # two backends importing each other, one of them relatively: a cycle within one layer
        (
            {
                "gpu_envs/backends/a.py": "from . import b\n",
                "gpu_envs/backends/b.py": "from gpu_envs.backends.a import y\n",
            },
            False,
            True,
        ),
        # a package importing itself back from a submodule: a cycle
        (
            {
                "gpu_envs/backends/gym/__init__.py": "from gpu_envs.backends.gym.plugin import PLUGIN\n",
                "gpu_envs/backends/gym/plugin.py": "from gpu_envs.backends.gym import Backend\n",
            },
            False,
            True,
        ),
        # imports down and within a layer: fine
        (
            {
                "gpu_envs/rollout/__init__.py": "from gpu_envs.rollout.loop import run_loop\nimport gpu_envs.contract.errors\n",
                "gpu_envs/rollout/loop.py": "from gpu_envs.contract.errors import RolloutError\n",
                "gpu_envs/contract/errors.py": "",
            },
            False,
            False,
        ),
    ],
)
def test_the_checker_sees_upward_imports_and_cycles(tmp_path, files, upward, cycle):
    package = _write(tmp_path, files)
    modules = module_files(package)
    graph = {m: imports_of(m, p, modules) for m, p in modules.items()}
    problems = upward_imports(graph)
    assert bool(problems) == upward, problems
    edges = {m: {t for t, _, _ in imports if t != m} for m, imports in graph.items()}
    assert (find_cycle(edges) is not None) == cycle


# --------------------------------------------------------------- private names
# The trees whose modules may not read or write another object's private names.
PRIVATE_RULE_TREES = ("gpu_envs", "benchmarks", "examples", "scripts")

# Foreign libraries' private names gpu_envs relies on, each read in ONE function of ONE
# module (where its version is checked or its absence handled): (module, name) -> function.
FOREIGN_PRIVATE = {
    # tensordict's layout: gpu_envs.utils.tensordicts is the one module that knows it (DIRECT_VERSIONS)
    ("gpu_envs.utils.tensordicts", "_tensordict"): (
        "_direct",
        "_direct_flat",
        "get_entry",
        "entries",
        "set_entry",
        "fast_entries",
    ),
    ("gpu_envs.utils.tensordicts", "_is_locked"): ("set_entry",),
    ("gpu_envs.utils.tensordicts", "_set_str"): ("set_entry",),
    ("gpu_envs.utils.tensordicts", "_is_non_tensor"): ("is_non_tensor",),
    # torch's: gpu_envs.utils.torch_internals
    ("gpu_envs.utils.torch_internals", "_foreach_copy_"): ("<module>",),
    ("gpu_envs.utils.torch_internals", "_python_dispatch"): ("<module>",),
    ("gpu_envs.utils.torch_internals", "_get_current_dispatch_mode"): ("<module>",),
    ("gpu_envs.utils.torch_internals", "_version"): ("version_counter",),
    # sys._current_frames is documented too: the one way to see other threads' stacks (a second thread in a call)
    ("gpu_envs.utils.call_guard", "_current_frames"): ("_in_flight_elsewhere",),
    # os._exit is public (documented), underscore and all
    ("gpu_envs.backends.gymnasium_envs.workers", "_exit"): ("_die_with_parent", "watch"),
    # Isaac Lab's closed mark, Brax's config and registry (neither has a public one)
    ("gpu_envs.backends.isaaclab", "_is_closed"): ("_closed",),
    ("gpu_envs.backends.jax.brax", "_config"): ("_config_value",),
    ("gpu_envs.backends.jax.brax", "_envs"): ("_brax_names",),
    # Brax's and Playground's domain-randomization wrappers keep their batched models private
    # (_sys_v / _mjx_model_v, named in brax._RANDOMIZATION, and _in_axes): read in one function
    ("gpu_envs.backends.jax.brax", "_in_axes"): ("randomized_models",),
    # a SummaryWriter of torch.utils.tensorboard, recognised by its writer method
    ("gpu_envs.utils.video_writer", "_get_file_writer"): ("_board",),
    ("gpu_envs.utils.call_site", "_getframe"): ("unpacked_into",),  # sys._getframe: the caller's frame, cheaply
    # benchmarks: torch._dynamo's counters; ManiSkillVectorEnv's inner env, to time its own calls
    ("benchmarks.gpu_check", "_dynamo"): ("check_no_sync_loop",),
    ("benchmarks.simulator_rows", "_env"): ("maniskill_rows",),
    # MuJoCo Playground's rsl_rl wrapper lives in its private package only
    ("benchmarks.simulator_rows", "_src"): ("playground_rows",),
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(tree: ast.AST) -> set[str]:
    """Names a module defines itself: functions, classes, assigned names, attributes of self/cls, slots."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, (ast.Store, ast.Del))
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            own.add(node.attr)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            own.update(
                c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    return own


def private_reads(path: Path, module: str) -> list[tuple[int, str, str]]:
    """``(line, private name, enclosing function)`` of every read/write of another's ``_name`` in the file.

    ``self._x`` / ``cls._x`` (an object's own attributes) and names the module defines
    itself are fine; ``other._x``, ``getattr(other, "_x")`` / ``setattr`` / ``hasattr``
    and ``from m import _x`` are not, unless :data:`FOREIGN_PRIVATE` places them.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    own = _own_names(tree)
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        name = None
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            is_own_object = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not is_own_object and node.attr not in own:
                name = node.attr
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names if _is_private(a.name)]
            if names:
                name = names[0]
            elif node.module and any(_is_private(part) for part in node.module.split(".")):
                name = next(part for part in node.module.split(".") if _is_private(part))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            target = node.args[0]
            if not (isinstance(target, ast.Name) and target.id in ("self", "cls")) and node.args[1].value not in own:
                name = node.args[1].value
        if name is not None and function not in FOREIGN_PRIVATE.get((module, name), ()):
            found.append((node.lineno, name, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "<module>")
    return found


def _tree_modules() -> dict[str, Path]:
    found = {}
    for tree in PRIVATE_RULE_TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def test_no_module_reads_another_modules_private_names():
    """What one module needs of another object is a public method or protocol member, never its ``_name``."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name} (in {function})"
        for module, path in _tree_modules().items()
        for line, name, function in private_reads(path, module)
    ]
    assert not bad, (
        "private names read across modules (publish a method or protocol member, or, for a foreign library's "
        "private name, read it in one function and add it to FOREIGN_PRIVATE):\n" + "\n".join(bad)
    )


def test_every_foreign_private_name_is_still_used_where_listed():
    """FOREIGN_PRIVATE lists no stale entry: each (module, name) still occurs in that module."""
    modules = _tree_modules()
    stale = [(module, name) for module, name in FOREIGN_PRIVATE if name not in modules[module].read_text()]
    assert not stale, f"drop these from FOREIGN_PRIVATE, their modules no longer use them: {stale}"


def test_the_private_name_rule_sees_what_it_must(tmp_path):
    """The check itself: another object's private read, getattr of one and a private import are caught."""
    path = tmp_path / "m.py"
    path.write_text(
        "from x import _hidden\n"
        "class A:\n"
        "    def f(self, other):\n"
        "        self._mine = 1\n"
        "        return other._theirs, getattr(other, '_also'), self._mine\n"
    )
    assert [(name, function) for _, name, function in private_reads(path, "m")] == [
        ("_hidden", "<module>"),
        ("_theirs", "f"),
        ("_also", "f"),
    ]
