"""``python -m gpu_envs``: the ``gpu-envs`` command line (the same as ``python -m gpu_envs.cli``).

Example::

    python -m gpu_envs rollout Pendulum-v1 --num-envs 256 --steps 200
"""

import sys

from gpu_envs.cli import main

if __name__ == "__main__":
    sys.exit(main())
