"""What the package metadata and the install instructions promise: they work from a clone (gpu-envs is not on
PyPI), extras are spelled as pip normalises them, and the MIT license the metadata declares ships with it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 685 (what pip compares)


def test_extras_are_spelled_as_pip_normalises_them():
    """``[rsl_rl]`` / ``[rl_games]`` silently installed nothing with Python 3.11's bundled pip (the metadata said
    ``rsl-rl`` / ``rl-games``)."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert all(name == normalized(name) for name in extras), sorted(extras)
    assert {"rsl-rl", "rl-games"} <= set(extras)


def test_every_extra_named_in_messages_docs_and_scripts_exists():
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    named: dict[str, set[str]] = {}
    for path in tracked:
        if not path.endswith((".py", ".md", ".sh")) or "third_party" in path or path == "tests/test_packaging.py":
            continue
        text = (ROOT / path).read_text(errors="replace")
        assert "gpu-envs[" not in text, f"{path}: install from the clone (pip install '.[extra]'), not from PyPI"
        for group in re.findall(r"""pip install (?:-e )?["']\.\[([^\]]+)\]["']""", text):
            for extra in group.split(","):
                named.setdefault(extra, set()).add(path)
        for group in re.findall(r"extra=\"([^\"]+)\"", text):
            named.setdefault(group, set()).add(path)
    unknown = {
        extra: sorted(paths)
        for extra, paths in named.items()
        if extra not in extras and extra not in ("nolib", "none", "{extra}")
    }
    assert not unknown, f"extras named but not in pyproject.toml: {unknown}"
    setup = (ROOT / "scripts" / "test.sh").read_text()
    listed = re.search(r"setup_venv\.sh ([\w,-]+)", setup).group(1).split(",")
    assert set(listed) <= extras, set(listed) - extras


def test_the_mit_license_the_metadata_declares_is_there():
    assert PYPROJECT["project"]["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text
