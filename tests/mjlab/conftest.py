"""The real mjlab tier: mjlab 1.6.0 (MuJoCo Warp on the CPU) tasks through gpu_envs.

Run it with the cached venv that ``scripts/simulator_venv.sh mjlab`` builds (once) and
prints; ``scripts/test.sh`` does, after the main suite::

    VENV=$(scripts/simulator_venv.sh mjlab | tail -n 1)
    GPU_ENVS_REQUIRE_MJLAB=1 PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -m "slow or not slow" tests/mjlab

In the main suite (no mjlab) every module here is skipped with that command as the
reason (``tests/mjlab/tasks.py``); the backend's logic is still tested there through a
fake (``tests/test_mjlab_fake.py``). The first mjlab env of a machine compiles MuJoCo
Warp's CPU kernels (about 35 s on an idle core, cached in ``~/.cache/warp``).
"""
