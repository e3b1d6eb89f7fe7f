"""``gpu-envs list``: the env ids each installed backend can make, then the engines that take a task of yours."""

from __future__ import annotations

import argparse
import importlib.util

from gpu_envs.cli.common import Subcommands

# physics engines without an env API: a task on them is a gpu_envs.SimulatorEnv; (name, module, recipe, its tests)
ENGINES = (
    ("MuJoCo Warp", "mujoco_warp", "examples/mujoco_warp_cartpole.py", "tests/mjlab (the mjlab venv)"),
    ("Newton", "newton", "examples/newton_pendulum.py", "tests/newton (scripts/simulator_venv.sh newton)"),
    ("Genesis", "genesis", "examples/genesis_cartpole.py", "tests/genesis (scripts/simulator_venv.sh genesis)"),
)


def add_parser(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "list",
        help="print the env ids each installed backend can make, and the engines a SimulatorEnv runs on",
        description=(
            "Print the env ids `make` accepts, per installed backend; then the physics engines without an env API "
            "on which a task is a gpu_envs.SimulatorEnv (their recipes in examples/), and rsl_rl-style VecEnvs, "
            "which gpu_envs.wrap takes as they are."
        ),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import gpu_envs

    for backend, ids in gpu_envs.available_envs().items():
        print(f"{backend} ({len(ids)}):")
        for env_id in ids:
            print(f"  {env_id}")
    print("engines without an env API (write the task as a gpu_envs.SimulatorEnv, then gpu_envs.wrap(task)):")
    for name, module, recipe, tests in ENGINES:
        installed = "installed" if importlib.util.find_spec(module) is not None else "not installed"
        print(f"  {name} ({installed}): {recipe}; tested in {tests}")
    print("rsl_rl-style VecEnvs (legged_gym, Genesis tasks): gpu_envs.wrap(env); see gpu_envs/backends/rsl_rl_vec.py")
    return 0
