"""The docker/ recipes, checked statically (CI has no docker daemon and no image registry).

* every pinned version (``ARG <PKG>_VERSION=...``, ``pkg==x.y``) matches
  ``constraints-ci.txt`` or a pin in ``pyproject.toml``;
* the Python of each base image satisfies ``requires-python`` (and the Isaac Lab image
  uses the Python the Isaac Lab tier is built with);
* every path a ``COPY`` takes exists in the build context (the repository root) and is
  not excluded by ``.dockerignore``;
* every command the images and docker/README.md run is real: ``gpu-envs`` and
  ``python -m gpu_envs.cli`` lines parse with the CLI's own argparse parser, scripts
  exist (and the PPO example's flags parse with its own parser), pytest targets exist.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest
import tomllib
from packaging.specifiers import SpecifierSet

from gpu_envs.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DOCKERFILES = sorted(DOCKER.glob("Dockerfile.*"))
PIN = re.compile(r"(?<![\w.\-])([A-Za-z0-9][A-Za-z0-9_.\-]*)(?:\[[^\]]*\])?==([0-9][^\s\"',;)]*)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_versions() -> dict[str, str]:
    """``constraints-ci.txt`` and every ``==`` pin of pyproject.toml's dependencies."""
    pins = {}
    for line in (ROOT / "constraints-ci.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_norm(name)] = version.strip()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"]) + [
        r for extra in project["optional-dependencies"].values() for r in extra
    ]
    for requirement in requirements:
        for name, version in PIN.findall(requirement):
            pins.setdefault(_norm(name), version)
    return pins


def instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile: comments dropped, continuations joined."""
    out, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def build_args(path: Path) -> dict[str, str]:
    args = {}
    for word, rest in instructions(path):
        if word == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            args[name.strip()] = value.strip().strip('"')
    return args


def substituted(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), text)


def commands(path: Path) -> list[list[str]]:
    """Every command the image runs: RUN (split at ``&&``), CMD and ENTRYPOINT, as argv lists."""
    args, out = build_args(path), []
    for word, rest in instructions(path):
        if word in ("CMD", "ENTRYPOINT"):
            out.append(json.loads(rest) if rest.startswith("[") else shlex.split(rest))
        elif word == "RUN":
            out.extend(shlex.split(part) for part in substituted(rest, args).split("&&"))
    return out


def readme_commands() -> list[list[str]]:
    """The shell commands of docker/README.md's code blocks (continuations joined), as argv lists."""
    text = (DOCKER / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(shlex.split(line))
    return out


def _after(argv: list[str], *markers: str) -> list[str] | None:
    """The arguments following the first of ``markers`` in ``argv`` (None if absent)."""
    for i, word in enumerate(argv):
        if word in markers:
            return argv[i + 1 :]
        if word == "-m" and i + 1 < len(argv) and argv[i + 1] in markers:
            return argv[i + 2 :]
    return None


def check_command(argv: list[str]) -> int:
    """Assert one command line's gpu_envs parts are real; returns how many parts were checked."""
    checked = 0
    cli_args = _after(argv, "gpu-envs", "gpu_envs.cli")
    if cli_args is not None:
        try:
            build_parser().parse_args(cli_args)
        except SystemExit as exc:
            pytest.fail(f"not a valid gpu-envs command: {shlex.join(argv)} (argparse exit {exc.code})")
        checked += 1
    for i, word in enumerate(argv):
        if word.endswith(".py") and not word.startswith("/"):
            assert (ROOT / word).is_file(), f"{shlex.join(argv)}: {word} does not exist"
            checked += 1
            if word == "examples/ppo_cartpole.py":
                spec = importlib.util.spec_from_file_location("ppo_example", ROOT / word)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                try:
                    module.parse_args([a for a in argv[i + 1 :]])
                except SystemExit as exc:
                    pytest.fail(f"examples/ppo_cartpole.py rejects {argv[i + 1 :]} (exit {exc.code})")
    pytest_args = _after(argv, "pytest")
    if pytest_args is not None:
        targets = [a for a in pytest_args if not a.startswith("-")]
        for target in targets:
            assert (ROOT / target).exists(), f"{shlex.join(argv)}: pytest target {target} does not exist"
        checked += 1
    return checked


def test_there_are_three_images():
    assert [p.name for p in DOCKERFILES] == ["Dockerfile.cpu", "Dockerfile.cuda", "Dockerfile.isaaclab"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_pinned_versions_match_the_project_pins(path):
    pins, args = pinned_versions(), build_args(path)
    seen = 0
    for name, value in args.items():
        if name.endswith("_VERSION"):
            package = _norm(name[: -len("_VERSION")])
            assert pins.get(package) == value, (
                f"{path.name}: ARG {name}={value}, but the project pins {package}=={pins.get(package)}"
            )
            seen += 1
    for argv in commands(path):
        for name, version in PIN.findall(" ".join(argv)):
            assert pins.get(_norm(name)) == version, f"{path.name}: {name}=={version} vs {pins.get(_norm(name))}"
            seen += 1
    assert seen, f"{path.name} pins nothing: it should pin torch or isaaclab"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_base_image_python_fits_the_project(path):
    requires = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    bases = [rest.split()[0] for word, rest in instructions(path) if word == "FROM"]
    assert len(bases) == 1 and bases[0].startswith("python:"), bases
    version = re.match(r"python:(\d+\.\d+)", bases[0]).group(1)
    assert version in requires
    if path.name == "Dockerfile.isaaclab":  # the Python the Isaac Lab tier is built with
        tag = re.search(r"^PY_TAG=py(\d)(\d+)$", (ROOT / "scripts" / "isaaclab_venv.sh").read_text(), re.M)
        assert version == f"{tag.group(1)}.{tag.group(2)}"


def _ignored(relative: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(relative, p) or fnmatch.fnmatch(relative, p.rstrip("/") + "/*") for p in patterns)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copied_paths_exist_in_the_build_context(path):
    ignore = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copies = [shlex.split(rest) for word, rest in instructions(path) if word == "COPY"]
    assert copies
    for argv in copies:
        sources = [a for a in argv[:-1] if not a.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"{path.name}: COPY {source}: no such path in the repository"
            assert not _ignored(source, ignore), f"{path.name}: COPY {source} is excluded by .dockerignore"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_commands_of_the_images_are_real(path):
    argvs = commands(path)
    assert sum(check_command(argv) for argv in argvs) >= 1, f"{path.name} runs no gpu_envs command"
    copied = {shlex.split(rest)[0] for word, rest in instructions(path) if word == "COPY"}
    for argv in argvs:  # a script the image runs is in the image
        for word in argv:
            if word.endswith(".py") or word.startswith("tests/"):
                assert any(word == c or word.startswith(c.rstrip("/") + "/") for c in copied), (path.name, word)


def test_readme_commands_are_real():
    argvs = readme_commands()
    checked = sum(check_command(argv) for argv in argvs)
    assert checked >= 5, f"docker/README.md: only {checked} gpu_envs commands found"
    images = {p.name.split(".", 1)[1] for p in DOCKERFILES}
    for argv in argvs:
        if argv[:2] == ["docker", "build"]:
            dockerfile = argv[argv.index("-f") + 1]
            assert (ROOT / dockerfile).is_file() and argv[-1] == ".", shlex.join(argv)
        elif argv[:2] == ["docker", "run"]:
            tag = next(a for a in argv if a.startswith("gpu-envs:"))
            assert tag.split(":", 1)[1] in images, shlex.join(argv)
    two_node = [argv for argv in argvs if "--nnodes=2" in argv]
    assert {argv[argv.index(next(a for a in argv if a.startswith("--node_rank")))] for argv in two_node} == {
        "--node_rank=0",
        "--node_rank=1",
    }, "a two-node torchrun launch, one line per node"
