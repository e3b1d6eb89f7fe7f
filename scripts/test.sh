#!/usr/bin/env bash
# Set up .venv with the test extras (pinned versions) and run every test tier:
#   1. ruff over the sources (lint, then `ruff format --check`), basedpyright over gpu_envs/ (types: scripts/type_check.sh, 0 errors),
#   2. the main suite (Python 3.11: contract, oracles, fakes, JAX on CPU, CLI, ...), slow
#      tests included (a plain `pytest` leaves them out: see [tool.pytest.ini_options]),
#   3. the real Isaac Lab tier (Python 3.12 venv, built once in a cache folder outside
#      the clone and reused; see scripts/isaaclab_venv.sh),
#   4. the real Brax / MuJoCo Playground and ManiSkill3 tiers, each in its cached venv
#      (scripts/simulator_venv.sh brax | maniskill: built once, ~15 min each on 2 loaded cores,
#      in the background while the main suite runs),
#   5. the real mjlab tier (tests/mjlab/: Go1 and cartpole on MuJoCo Warp, rsl_rl training of cartpole and Go1,
#      and examples/mujoco_warp_cartpole.py, a SimulatorEnv on MuJoCo Warp itself;
#      its venv is built once by scripts/simulator_venv.sh mjlab, ~7 min, 2.3 GB; the first run on
#      a machine also compiles Warp's CPU kernels into ~/.cache/warp, ~35 s idle),
#   6. the Newton tier (tests/newton/: examples/newton_pendulum.py, a SimulatorEnv on Newton 1.8.0, against
#      Newton stepped by hand; its venv is built once by scripts/simulator_venv.sh newton, ~1 GB),
#      and the JaxMARL tier (tests/jaxmarl/: MPE envs as agent groups against JaxMARL 0.2.0 driven by hand;
#      its venv, built once by scripts/simulator_venv.sh jaxmarl, ~2 min and 1.8 GB, has gymnasium 1.3.0 for gymnax),
#      and the Genesis tier (tests/genesis/: examples/genesis_cartpole.py, a SimulatorEnv on Genesis 1.4.5's CPU
#      backend, against Genesis stepped by hand, and a Go2 task in rsl_rl's VecEnv style through the rsl_rl_vec
#      backend; its venv is built once by scripts/simulator_venv.sh genesis, ~2.5 min and 4.1 GB; the first run on
#      a machine also compiles Genesis' kernels into ~/.cache/quadrants: the tier takes ~3.3 min cold, ~45 s warm),
#   7. the tensordict tier: the TensorDict-heavy tests against the NEWEST tensordict release a fresh
#      install resolves (scripts/tensordict_newest.sh; the main suite runs CI's pinned one).
# Extra arguments go to the main suite's pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup_venv.sh test,jax,torchrl,sb3,gym,mo,minigrid,plot,video,rsl-rl,skrl,rl-games,envpool,ray,puffer,vmas,pettingzoo >/dev/null

# The simulator venvs are found in their cache, or built there on a fresh machine (mostly
# downloads and unpacking, 5-15 min each), by ONE background job while ruff and the main
# suite run; each tier then waits for its own venv (logs: $logs/<tier>.err).
logs="$(mktemp -d)"
(
    bash scripts/isaaclab_venv.sh > "$logs/isaaclab.out" 2> "$logs/isaaclab.err"
    touch "$logs/isaaclab.done"
    for sim in brax maniskill mjlab newton jaxmarl genesis; do
        bash scripts/simulator_venv.sh "$sim" > "$logs/$sim.out" 2> "$logs/$sim.err"
        touch "$logs/$sim.done"
    done
) &
builder=$!
trap 'kill "$builder" 2>/dev/null || true' EXIT
trap 'exit 130' INT  # a stopped run stops its builder too (the EXIT trap runs)
trap 'exit 143' TERM

venv_of() {  # the venv of tier $1 once it is built; its build log and a failure otherwise
    local deadline=$((SECONDS + 3600))
    until [ -e "$logs/$1.done" ]; do
        if ! kill -0 "$builder" 2>/dev/null || [ "$SECONDS" -gt "$deadline" ]; then
            [ -e "$logs/$1.done" ] && break
            echo "the $1 venv could not be built; the end of its log ($logs/$1.err):" >&2
            tail -n 40 "$logs/$1.err" >&2 || true
            return 1
        fi
        sleep 5
    done
    tail -n 1 "$logs/$1.out"
}

# Every tier runs, whatever the ones before it did: a failing tier (or a venv that could not
# be built) is noted, and the failures are listed together at the end (exit status 1).
failed=()
run_tier() {  # run_tier NAME COMMAND...: run one tier's COMMAND; a failure is noted, never fatal
    local status=0
    echo "=== tier $1" >&2
    "${@:2}" || status=$?
    if [ "$status" -ne 0 ]; then
        failed+=("$1 (exit $status)")
    fi
}
no_venv() {  # no_venv NAME: note that tier NAME's venv could not be built (its tier is skipped)
    failed+=("$1 (its venv could not be built)")
}

run_tier ruff .venv/bin/ruff check gpu_envs tests benchmarks examples scripts
run_tier format .venv/bin/ruff format --check gpu_envs tests benchmarks examples scripts
run_tier types bash scripts/type_check.sh  # basedpyright; the error count may only go down (scripts/type_errors_baseline.txt)
run_tier main .venv/bin/python -m pytest -m "slow or not slow" "$@"
run_tier tensordict-newest bash scripts/tensordict_newest.sh
isaac_venv="$(venv_of isaaclab)" || no_venv isaaclab
[ -z "$isaac_venv" ] || run_tier isaaclab "$isaac_venv/bin/python" -m pytest -m "slow or not slow" tests/isaaclab
brax_venv="$(venv_of brax)" || no_venv brax
[ -z "$brax_venv" ] || run_tier brax env GPU_ENVS_REQUIRE_BRAX=1 PYTHONPATH="$root" "$brax_venv/bin/python" -m pytest -m "slow or not slow" tests/brax
maniskill_venv="$(venv_of maniskill)" || no_venv maniskill
[ -z "$maniskill_venv" ] || run_tier maniskill env GPU_ENVS_REQUIRE_MANISKILL=1 PYTHONPATH="$root" "$maniskill_venv/bin/python" -m pytest -m "slow or not slow" tests/maniskill
mjlab_venv="$(venv_of mjlab)" || no_venv mjlab
[ -z "$mjlab_venv" ] || run_tier mjlab env GPU_ENVS_REQUIRE_MJLAB=1 PYTHONPATH="$root" "$mjlab_venv/bin/python" -m pytest -m "slow or not slow" tests/mjlab
newton_venv="$(venv_of newton)" || no_venv newton
[ -z "$newton_venv" ] || run_tier newton env GPU_ENVS_REQUIRE_NEWTON=1 PYTHONPATH="$root" "$newton_venv/bin/python" -m pytest -m "slow or not slow" tests/newton
jaxmarl_venv="$(venv_of jaxmarl)" || no_venv jaxmarl
[ -z "$jaxmarl_venv" ] || run_tier jaxmarl env GPU_ENVS_REQUIRE_JAXMARL=1 PYTHONPATH="$root" "$jaxmarl_venv/bin/python" -m pytest -m "slow or not slow" tests/jaxmarl
genesis_venv="$(venv_of genesis)" || no_venv genesis
[ -z "$genesis_venv" ] || run_tier genesis env GPU_ENVS_REQUIRE_GENESIS=1 PYTHONPATH="$root" "$genesis_venv/bin/python" -m pytest -m "slow or not slow" tests/genesis

if [ "${#failed[@]}" -gt 0 ]; then
    echo "scripts/test.sh: ${#failed[@]} tier(s) failed:" >&2
    printf '  %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "scripts/test.sh: every tier passed" >&2
