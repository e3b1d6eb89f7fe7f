"""``python -m gpu_envs.cli``: the same as the ``gpu-envs`` console script."""

import sys

from gpu_envs.cli import main

sys.exit(main())
