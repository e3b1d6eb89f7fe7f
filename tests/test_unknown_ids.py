"""An id that a package registers on import names that package: in the API (import it) and the CLI (imported for you)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpu_envs
import gpu_envs.factory as factory

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("env_id", "package"),
    [
        ("MiniGrid-Empty-5x5-v0", "minigrid"),
        ("BabyAI-GoToLocal-v0", "minigrid"),
        ("mo-mountaincar-v0", "mo_gymnasium"),
        ("ALE/Pong-v5", "ale_py"),
    ],
)
def test_the_registering_package_of_well_known_ids(env_id, package):
    assert factory.registering_package(env_id)[0] == package


def test_an_unknown_id_names_the_package_to_import_or_install(monkeypatch):
    minigrid = pytest.importorskip("minigrid")
    monkeypatch.delitem(sys.modules, "ale_py", raising=False)
    find_spec = factory.importlib.util.find_spec
    monkeypatch.setattr(
        factory.importlib.util, "find_spec", lambda name, *a: None if name == "ale_py" else find_spec(name, *a)
    )
    with pytest.raises(
        gpu_envs.UnknownEnvError,
        match=r"'ale_py' package, which is not installed: pip install 'gymnasium\[atari\]', then `import ale_py`",
    ):
        gpu_envs.make("ALE/NoSuchGame-v5", num_envs=1, device="cpu")
    monkeypatch.delitem(sys.modules, "minigrid", raising=False)  # as in a script that did not import it
    with pytest.raises(
        gpu_envs.UnknownEnvError,
        match=r"'minigrid' package \(installed here\): `import minigrid` before gpu_envs.make\(\)",
    ):
        gpu_envs.make("MiniGrid-NoSuchGrid-v0", num_envs=1, device="cpu")
    monkeypatch.setitem(sys.modules, "minigrid", minigrid)  # imported, and still no such id
    with pytest.raises(
        gpu_envs.UnknownEnvError,
        match=r"'minigrid' package, which registers ids like it, is imported and has no such id",
    ):
        gpu_envs.make("MiniGrid-NoSuchGrid-v0", num_envs=1, device="cpu")
    with pytest.raises(gpu_envs.UnknownEnvError) as err:
        gpu_envs.make("NoSuchEnv-v0", num_envs=1, device="cpu")
    assert "registered by" not in str(err.value)


_SCRIPT = """
import gpu_envs
try:
    gpu_envs.make("MiniGrid-Empty-5x5-v0", num_envs=2, device="cpu")
except gpu_envs.UnknownEnvError as err:
    print("REFUSED", "import minigrid" in str(err))
import minigrid
env = gpu_envs.make("MiniGrid-Empty-5x5-v0", num_envs=2, device="cpu")
print("MADE", env.num_envs)
"""


@pytest.mark.slow
def test_a_minigrid_id_without_import_minigrid_says_so_and_the_cli_imports_it():
    pytest.importorskip("minigrid")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env
    )
    assert out.returncode == 0, out.stderr
    assert "REFUSED True" in out.stdout and "MADE 2" in out.stdout
    cli = [
        sys.executable,
        "-m",
        "gpu_envs.cli",
        "rollout",
        "MiniGrid-Empty-5x5-v0",
        "--num-envs",
        "2",
        "--steps",
        "3",
        "--device",
        "cpu",
    ]
    out = subprocess.run(cli, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    assert "episodes finished" in out.stdout
