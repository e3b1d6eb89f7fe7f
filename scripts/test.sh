#!/usr/bin/env bash
# Set up .venv with the test extras (pinned versions) and run every test tier:
#   1. ruff over the sources,
#   2. the main suite (Python 3.11: contract, oracles, fakes, JAX on CPU, CLI, ...), slow
#      tests included (a plain `pytest` leaves them out: see [tool.pytest.ini_options]),
#   3. the real Isaac Lab tier (Python 3.12 venv, built once in a cache folder outside
#      the clone and reused; see scripts/isaaclab_venv.sh),
#   4. the real Brax / MuJoCo Playground and ManiSkill3 tiers, each in its cached venv
#      (scripts/simulator_venv.sh brax | maniskill: built once, ~15 min each on 2 loaded cores),
#   5. the real mjlab tier (tests/mjlab/: Go1 and cartpole on MuJoCo Warp, rsl_rl training;
#      its venv is built once by scripts/simulator_venv.sh mjlab, ~7 min, 2.3 GB; the first run on
#      a machine also compiles Warp's CPU kernels into ~/.cache/warp, ~35 s idle).
# Extra arguments go to the main suite's pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup_venv.sh test,jax,torchrl,sb3,gym,mo,minigrid,plot,video,rsl_rl,skrl,rl_games,envpool,ray,puffer >/dev/null
.venv/bin/ruff check gpu_envs tests benchmarks examples scripts
.venv/bin/python -m pytest -m "slow or not slow" "$@"
isaac_venv="$(bash scripts/isaaclab_venv.sh | tail -n 1)"
"$isaac_venv/bin/python" -m pytest -m "slow or not slow" tests/isaaclab
brax_venv="$(bash scripts/simulator_venv.sh brax | tail -n 1)"
GPU_ENVS_REQUIRE_BRAX=1 PYTHONPATH="$root" "$brax_venv/bin/python" -m pytest -m "slow or not slow" tests/brax
maniskill_venv="$(bash scripts/simulator_venv.sh maniskill | tail -n 1)"
GPU_ENVS_REQUIRE_MANISKILL=1 PYTHONPATH="$root" "$maniskill_venv/bin/python" -m pytest -m "slow or not slow" tests/maniskill
mjlab_venv="$(bash scripts/simulator_venv.sh mjlab | tail -n 1)"
GPU_ENVS_REQUIRE_MJLAB=1 PYTHONPATH="$root" "$mjlab_venv/bin/python" -m pytest -m "slow or not slow" tests/mjlab
