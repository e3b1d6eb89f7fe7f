"""``BatchedEnv`` and the one step path it runs (see ``docs/ARCHITECTURE.md``).

Import the class from :mod:`gpu_envs` (``gpu_envs.BatchedEnv``) or from
:mod:`gpu_envs.core.env`; this package imports nothing itself.
"""
