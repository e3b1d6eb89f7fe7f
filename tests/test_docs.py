"""The project's docs stand on their own and say true things about where things live.

* No file of the repository points to a document outside it: every ``*.md`` it names is
  one of its own files, and no path leaves the clone (a parent folder, an absolute
  machine path). Data a test reads from outside would be listed in ``OUTSIDE_DATA``
  (none is: the Isaac Lab assets are in ``tests/isaaclab/assets``).
* Every relative markdown link in the ``*.md`` files resolves, anchors included.
* Every repository path a doc names in backticks exists.
* README's Layout lists paths that exist, and every top-level module and package of
  ``gpu_envs``.
* docs/ARCHITECTURE.md's table of foreign types outside the backends is exactly what the
  modules outside ``gpu_envs/backends/`` import.

Files are read as text; nothing is imported.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP_DIRS = ("gpu_envs", "tests", "benchmarks", "examples", "scripts", "docs", "docker")

# Paths out of the clone that a file may name, as data it reads (never a document):
# (file relative to ROOT, the path it names). Empty: everything the tests need is in the repository.
OUTSIDE_DATA: set[tuple[str, str]] = set()

# A path that leaves the clone: a parent folder of the repository, or this machine's work
# folders (spelled in two parts so that this file does not name them itself).
OUTSIDE_PATH = re.compile(r"(?:\.\./)+" + "shared|/" + "work/|/" + "root/")
MD_NAME = re.compile(r"[\w./*-]*[\w-]\.md\b")
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
MD_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def repo_files() -> list[Path]:
    """The repository's files: git's tracked and untracked-but-not-ignored ones (a walk without git)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        return sorted({ROOT / line for line in out.splitlines() if (ROOT / line).is_file()})
    except (OSError, subprocess.SubprocessError):
        skip = {".git", ".venv", "__pycache__", ".pytest_cache"}
        return sorted(p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts))


# Not scanned for references: upstream files vendored byte for byte (their own docs' names), and this
# file, whose self-test spells out the references the checks must catch.
NOT_SCANNED = ("tests/third_party/", "tests/test_docs.py")


def text_files() -> dict[Path, str]:
    found = {}
    for path in repo_files():
        if path.relative_to(ROOT).as_posix().startswith(NOT_SCANNED):
            continue
        try:
            found[path] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (images, USD crates)
    return found


def resolves(name: str, source: Path, names: set[str]) -> bool:
    """``name`` (a ``*.md`` a file mentions) is a file of the repository."""
    if "*" in name:  # a pattern (``tests/third_party/*/README.md``): some file matches it
        return any(p.is_file() for base in (source.parent, ROOT) for p in base.glob(name))
    for base in (source.parent, ROOT):  # a file there, and inside the repository (a ../ path may exist beside it)
        found = (base / name).resolve()
        if found.is_file() and found.is_relative_to(ROOT.resolve()):
            return True
    return "/" not in name and name in names  # a bare "BENCHMARKS.md" beside or inside docs/


def outside_references(files: dict[Path, str]) -> list[str]:
    names = {p.name for p in files}
    bad = []
    for path, text in files.items():
        rel = str(path.relative_to(ROOT))
        for number, line in enumerate(text.splitlines(), 1):
            line = URL.sub("", line)
            for match in OUTSIDE_PATH.finditer(line):
                tail = line[match.start() :].split()[0].strip("`'\"(),")
                if (rel, tail) not in OUTSIDE_DATA:
                    bad.append(f"{rel}:{number}: {tail} (a path outside the repository)")
            for match in MD_NAME.finditer(line):
                if not resolves(match.group(0), path, names):
                    bad.append(f"{rel}:{number}: {match.group(0)} (no such document in the repository)")
    return bad


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found, in_code = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (match := re.match(r"#+\s+(.*)", line)):
            found.add(slug(match.group(1)))
    return found


def broken_links(files: dict[Path, str]) -> list[str]:
    bad = []
    for path, text in files.items():
        if path.suffix != ".md":
            continue
        for match in MD_LINK.finditer(text):
            target = match.group(1) or match.group(2)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            rel = path.relative_to(ROOT)
            if not linked.exists() or not linked.is_relative_to(ROOT):
                bad.append(f"{rel}: [{target}] does not resolve inside the repository")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
                bad.append(f"{rel}: [{target}]: no heading '#{anchor}' in {linked.relative_to(ROOT)}")
    return bad


def named_paths(text: str) -> set[str]:
    """Repository paths a doc names in backticks (``gpu_envs/core/env.py``, ``tests/isaaclab/``)."""
    found = set()
    for code in re.findall(r"`([^`\s]+)`", text):
        path = code.rstrip(".,:;")
        if re.fullmatch(r"(?:" + "|".join(TOP_DIRS) + r")/[\w./<>-]*", path) and "<" not in path:
            found.add(path)
    return found


def layout_entries(readme: str) -> tuple[list[str], list[str]]:
    """README's Layout block: (top-level paths, entries listed under ``gpu_envs/``)."""
    section = readme.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    top, package, in_package = [], [], False
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        first_column = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        if indent == 0:
            top.append(first_column)
            in_package = first_column == "gpu_envs/"
        elif indent == 2 and in_package:
            package.extend(name.strip() for name in first_column.split(","))
    return top, package


# ------------------------------------------------------------------ foreign types
# Third-party libraries that bring no foreign data types (console output, version checks),
# and the repository's own benchmarks package (the CLI runs it).
TOOLING = {"rich", "packaging", "benchmarks"}


def foreign_imports() -> dict[str, set[str]]:
    """Module file -> the third-party libraries it imports, for every module outside gpu_envs/backends/."""
    own = {"torch", "tensordict", "gpu_envs", "__future__"} | TOOLING
    found = {}
    for path in sorted((ROOT / "gpu_envs").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[1] == "backends":
            continue
        libraries = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            libraries |= {n.split(".")[0] for n in names} - own - set(sys.stdlib_module_names)
        if libraries:
            found[rel.as_posix()] = libraries
    return found


def architecture_foreign_table() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("\n## Foreign types outside the backends", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`gpu_envs/"):
            rows[cells[0].strip("`")] = {name.strip() for name in cells[1].split(",")}
    return rows


# --------------------------------------------------------------------------- tests
def test_no_file_refers_to_a_document_outside_the_repository():
    bad = outside_references(text_files())
    assert not bad, (
        "these files point outside the repository; move what they need into docs/ (a document) or the "
        "tests (data), and point there:\n" + "\n".join(bad)
    )


def test_every_relative_markdown_link_resolves():
    bad = broken_links(text_files())
    assert not bad, "fix these links:\n" + "\n".join(bad)


def test_every_path_a_doc_names_exists():
    docs = [ROOT / "README.md", ROOT / "docker" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [
        f"{doc.relative_to(ROOT)}: `{path}`"
        for doc in docs
        for path in sorted(named_paths(doc.read_text()))
        if not (ROOT / path).exists()
    ]
    assert not missing, "these docs name paths that do not exist:\n" + "\n".join(missing)


def test_readme_layout_matches_the_tree():
    top, package = layout_entries((ROOT / "README.md").read_text())
    missing = [p for p in top if not (ROOT / p).exists()] + [
        f"gpu_envs/{p}" for p in package if not (ROOT / "gpu_envs" / p).exists()
    ]
    assert not missing, f"README's Layout lists paths that do not exist: {missing}"
    modules = {
        p.name + ("/" if p.is_dir() else "")
        for p in (ROOT / "gpu_envs").iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").is_file())
    }
    unlisted = sorted(modules - set(package))
    assert not unlisted, f"README's Layout does not list these modules and packages of gpu_envs: {unlisted}"


def test_architecture_lists_every_foreign_import_outside_the_backends():
    actual, documented = foreign_imports(), architecture_foreign_table()
    assert documented, "docs/ARCHITECTURE.md lost its 'Foreign types outside the backends' table"
    diff = [
        f"{module}: imports {sorted(actual.get(module, set()))}, the table says {sorted(documented.get(module, set()))}"
        for module in sorted(set(actual) | set(documented))
        if actual.get(module) != documented.get(module)
    ]
    assert not diff, (
        "docs/ARCHITECTURE.md's 'Foreign types outside the backends' table and the imports differ (add the "
        "module with its reason, or read the foreign type in a backend):\n" + "\n".join(diff)
    )


# ------------------------------------------------------------- the checks see what they must
def test_the_checks_see_outside_references_broken_links_and_missing_modules(tmp_path):
    doc = ROOT / "docs" / "x.md"  # a name inside the repository, never written
    files = {
        doc: "see ../" + "shared/DESIGN.md and ISAAC" + "LAB.md; [a](ARCHITECTURE.md#no-such-heading) [b](nope.md)\n"
        "[ok](ARCHITECTURE.md#layers) and DESIGN.md are fine\n"
    }
    outside = {b.split(": ", 1)[1] for b in outside_references(files)}
    assert outside == {
        "../" + "shared/DESIGN.md (a path outside the repository)",
        "../" + "shared/DESIGN.md (no such document in the repository)",
        "ISAAC" + "LAB.md (no such document in the repository)",
        "nope.md (no such document in the repository)",
    }, outside
    links = broken_links(files)
    assert len(links) == 2 and any("no-such-heading" in b for b in links) and any("nope.md" in b for b in links)
    readme = (
        "\n## Layout\n\n```\ngpu_envs/\n  core/, env.py   the core\n  rollout/   collect; distributed.py\ntests/\n```\n"
    )
    assert layout_entries(readme) == (["gpu_envs/", "tests/"], ["core/", "env.py", "rollout/"])
    assert named_paths("`gpu_envs/core/env.py`, `gpu_envs/<family>.py`, `torch`") == {"gpu_envs/core/env.py"}
