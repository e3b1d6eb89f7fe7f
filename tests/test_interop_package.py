"""``gpu_envs.interop``: lazy per-library modules, and a clear error when a library is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

import gpu_envs.interop
from gpu_envs.contract.errors import MissingComponentError
from gpu_envs.interop.libraries import require


def _hide(monkeypatch, library: str, adapter_module: str, name: str) -> None:
    """Make ``library`` unimportable and forget the adapter, as on a machine without it."""
    for module in [m for m in sys.modules if m == library or m.startswith(library + ".")]:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, library, None)
    monkeypatch.delitem(sys.modules, adapter_module, raising=False)
    monkeypatch.delitem(vars(gpu_envs.interop), name, raising=False)


def test_missing_stable_baselines3_names_the_extra(monkeypatch):
    _hide(monkeypatch, "stable_baselines3", "gpu_envs.interop.sb3", "to_sb3")
    with pytest.raises(
        MissingComponentError, match=r'to_sb3 needs stable-baselines3.*pip install "\.\[sb3\]" in the gpu_envs clone'
    ):
        from gpu_envs.interop import to_sb3  # noqa: F401
    # the other adapters are unaffected
    from gpu_envs.interop import to_gymnasium

    assert callable(to_gymnasium)


def test_require_explains_what_to_install():
    with pytest.raises(MissingComponentError) as err:
        require("no_such_library_xyz.sub", package="no-such-library", extra="nolib", consumer="to_nolib")
    text = str(err.value)
    assert "gpu_envs.interop.to_nolib needs no-such-library" in text
    assert 'pip install ".[nolib]" in the gpu_envs clone' in text and "pip install no-such-library" in text
    assert isinstance(err.value, RuntimeError) and isinstance(err.value.__cause__, ImportError)
    assert require("json", package="json", extra="none", consumer="x") is sys.modules["json"]


def test_public_names_and_unknown_attributes():
    assert set(gpu_envs.interop.__all__) == {
        "to_gymnasium",
        "to_sb3",
        "to_torchrl",
        "to_rsl_rl",
        "to_skrl",
        "to_rl_games",
    }
    assert set(gpu_envs.interop.__all__) <= set(dir(gpu_envs.interop))
    with pytest.raises(AttributeError, match="to_nothing"):
        gpu_envs.interop.to_nothing  # noqa: B018


@pytest.mark.slow
def test_importing_the_package_imports_no_training_library():
    code = (
        "import sys, gpu_envs.interop\n"
        "libraries = ['stable_baselines3', 'torchrl', 'rsl_rl', 'skrl', 'rl_games']\n"
        "print([m for m in libraries if m in sys.modules])\n"
        "from gpu_envs.interop import to_gymnasium\n"
        "print([m for m in libraries if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "[]"]


@pytest.mark.slow
def test_bench_interop_measures_each_library_against_its_own_env():
    from benchmarks import bench_interop

    result = bench_interop.run(quick=True, sizes=(8,), rounds=1)
    by_library = {row["library"]: row for row in result["rows"]}
    assert set(by_library) == {"gymnasium", "stable-baselines3", "torchrl"}
    assert (
        by_library["gymnasium"]["gymnasium_sync_steps_per_s"] > 0
        and by_library["gymnasium"]["gpu_envs_steps_per_s"] > 0
    )
    assert by_library["stable-baselines3"]["sb3_dummy_steps_per_s"] > 0
    torchrl_rows = [row for row in result["rows"] if row["library"] == "torchrl"]
    assert [row["N"] for row in torchrl_rows] == [64, 4096]  # issue 9's sizes, whatever the gymnasium rows' N
    assert all(row["torchrl_gymwrapper_steps_per_s"] > 0 and row["gpu_envs_steps_per_s"] > 0 for row in torchrl_rows)
    assert all(row["speedup"].endswith("x") for row in result["rows"])
