"""The public contract every layer programs against: errors, key names, specs, protocols, the final-observation rule.

Nothing here knows a backend or an env class. :mod:`gpu_envs.contract.errors` (the
error hierarchy), :mod:`gpu_envs.contract.keys` (TensorDict key names),
:mod:`gpu_envs.contract.specs` (device-aware specs), :mod:`gpu_envs.contract.protocols`
(the env API as ``typing.Protocol`` s) and :mod:`gpu_envs.contract.final_obs` (which
observation a transition carries on an ended row) are imported by their full names;
this package imports nothing, so importing one of them never drags in the others.
"""
