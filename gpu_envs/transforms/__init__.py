"""Transforms: small TensorDict -> TensorDict modules on the device, composable.

* :class:`TransformedEnv` stacks :class:`Transform` pieces on an env, keeping its API:
  :class:`EpisodeStats`, :class:`ObservationNorm`, :class:`RewardScale`,
  :class:`ClipReward`, :class:`ScalarizeReward` (vector rewards of multi-objective envs as
  one number), :class:`ActionRescale`, :class:`ClipAction`.
* :class:`History` turns observation keys into windows of their last K values (oldest
  first, reset-aware, the final window ending in the true final observation);
  :class:`Delay` gives each row its own action and observation latency in steps, drawn per
  episode, and :class:`Randomize` draws each row's physical constants per episode (sim-to-real);
  :class:`InitTracker` marks each episode's first root with ``"is_init"`` (recurrent policies).
* Image transforms on the device (:mod:`gpu_envs.transforms.image`, channels last or first):
  :class:`Permute`, :class:`ToFloat`, :class:`Grayscale`, :class:`Resize`, :class:`CenterCrop`,
  :class:`RandomCrop` (per-row offsets every step), :class:`Normalize`.
* :class:`EvalRows` makes K rows of the training batch evaluate the policy
  deterministically, with their own episode statistics (one simulator per process).
* :class:`RecordEpisodes` films whole episodes of chosen rows as mp4 videos (final frame
  included), every M episodes, at a cost bounded by those rows.
* (``Quarantine``, an env wrapper rather than a transform, lives in :mod:`gpu_envs.wrappers`;
  the final-observation rule every env runs in :mod:`gpu_envs.contract.final_obs`.)
* ``TransformedEnv.get_state`` / ``set_state`` snapshot rows with each transform's state
  (:mod:`gpu_envs.transforms.snapshot`; ``Transform.row_state`` names its per-row part).

Example::

    >>> import gpu_envs
    >>> from gpu_envs.transforms import EpisodeStats, ObservationNorm, TransformedEnv
    >>> stats = EpisodeStats()
    >>> env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=16, device="cpu", seed=0), stats, ObservationNorm())
    >>> traj = env.rollout(100)
    >>> summary = stats.summary()          # episodes, mean return, mean length
    >>> summary.episodes > 0
    True
"""

import warnings
from typing import Any

from gpu_envs.transforms.action import ActionRescale, ClipAction
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.delay import Delay
from gpu_envs.transforms.episode_stats import EpisodeStats, EpisodeSummary, completed_episodes
from gpu_envs.transforms.eval_rows import EvalRows
from gpu_envs.transforms.history import History
from gpu_envs.transforms.image import CenterCrop, Grayscale, Normalize, Permute, RandomCrop, Resize, ToFloat
from gpu_envs.transforms.init_tracker import InitTracker
from gpu_envs.transforms.observation_norm import ObservationNorm
from gpu_envs.transforms.randomize import Randomize
from gpu_envs.transforms.record import RecordEpisodes
from gpu_envs.transforms.reward import ClipReward, RewardScale, ScalarizeReward
from gpu_envs.transforms.transformed_env import TransformedEnv

__all__ = [
    "ActionRescale",
    "CenterCrop",
    "ClipAction",
    "ClipReward",
    "Delay",
    "EnvSpecs",
    "EpisodeStats",
    "EpisodeSummary",
    "EvalRows",
    "Grayscale",
    "History",
    "InitTracker",
    "Normalize",
    "ObservationNorm",
    "Permute",
    "RandomCrop",
    "Randomize",
    "RecordEpisodes",
    "Resize",
    "RewardScale",
    "ScalarizeReward",
    "ToFloat",
    "Transform",
    "TransformedEnv",
    "completed_episodes",
]


# names that lived here before (kept one release): where they are now
_MOVED = {
    "FinalObsTransform": ("gpu_envs.contract.final_obs", "FinalObsCache"),
    "Quarantine": ("gpu_envs.wrappers", "Quarantine"),
    "QuarantineLimitError": ("gpu_envs.wrappers", "QuarantineLimitError"),
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'gpu_envs.transforms' has no attribute {name!r}")
    module, new = _MOVED[name]
    warnings.warn(
        f"gpu_envs.transforms.{name} moved: import {new} from {module}; the old place goes away in the next release.",
        DeprecationWarning,
        stacklevel=2,
    )
    if module == "gpu_envs.wrappers":
        import gpu_envs.wrappers  # at call time: the wrappers sit above this layer

        return getattr(gpu_envs.wrappers, new)
    from gpu_envs.contract import final_obs

    return getattr(final_obs, new)
