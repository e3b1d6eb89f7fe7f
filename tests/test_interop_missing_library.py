"""An adapter whose library is not installed says which pip extra installs it."""

from __future__ import annotations

import sys

import pytest

import gpu_envs
import gpu_envs.interop


@pytest.mark.parametrize(
    ("function", "module", "library", "extra"),
    [
        ("to_torchrl", "gpu_envs.interop.torchrl", "torchrl", "torchrl"),
        ("to_rsl_rl", "gpu_envs.interop.rsl_rl", "rsl_rl", "rsl-rl"),
        ("to_skrl", "gpu_envs.interop.skrl", "skrl", "skrl"),
        ("to_rl_games", "gpu_envs.interop.rl_games", "rl_games", "rl-games"),
    ],
)
def test_missing_library_error_names_the_extra(monkeypatch, function, module, library, extra):
    # the library and every submodule of it already imported become unimportable
    for name in [m for m in sys.modules if m == library or m.startswith(library + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, library, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.delitem(vars(gpu_envs.interop), function, raising=False)  # the package caches what it loaded
    with pytest.raises(
        gpu_envs.contract.errors.MissingComponentError, match=rf'pip install "\.\[{extra}\]" in the gpu_envs clone'
    ):
        getattr(gpu_envs.interop, function)
