"""Transforms: small TensorDict -> TensorDict modules on the device, composable.

* :class:`FinalObsTransform` (the final-observation rule that every ``BatchedEnv`` runs,
  as a module that also caches the next root; it lives below the env in
  :mod:`gpu_envs.contract.final_obs` and is re-exported here): true final observations.
* :class:`TransformedEnv` stacks :class:`Transform` pieces on an env, keeping its API:
  :class:`EpisodeStats`, :class:`ObservationNorm`, :class:`RewardScale`,
  :class:`ClipReward`, :class:`ScalarizeReward` (vector rewards of multi-objective envs as
  one number), :class:`ActionRescale`, :class:`ClipAction`.
* :class:`EvalRows` makes K rows of the training batch evaluate the policy
  deterministically, with their own episode statistics (one simulator per process).
* :class:`RecordEpisodes` films whole episodes of chosen rows as mp4 videos (final frame
  included), every M episodes, at a cost bounded by those rows.
* :class:`Quarantine` wraps an env so that rows whose observation or reward is not finite
  are ended, reset and counted, sync-free, and the run goes on.
* ``TransformedEnv.get_state`` / ``set_state`` snapshot rows with each transform's state
  (:mod:`gpu_envs.transforms.snapshot`; ``Transform.row_state`` names its per-row part).

Example::

    from gpu_envs.transforms import EpisodeStats, ObservationNorm, TransformedEnv

    stats = EpisodeStats()
    env = TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=1024), stats, ObservationNorm())
    env.rollout(200)
    print(stats.summary())
"""

from gpu_envs.contract.final_obs import FinalObsTransform
from gpu_envs.transforms.action import ActionRescale, ClipAction
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.episode_stats import EpisodeStats, EpisodeSummary, completed_episodes
from gpu_envs.transforms.eval_rows import EvalRows
from gpu_envs.transforms.observation_norm import ObservationNorm
from gpu_envs.transforms.quarantine import Quarantine, QuarantineLimitError
from gpu_envs.transforms.record import RecordEpisodes
from gpu_envs.transforms.reward import ClipReward, RewardScale, ScalarizeReward
from gpu_envs.transforms.transformed_env import TransformedEnv

__all__ = [
    "ActionRescale",
    "ClipAction",
    "ClipReward",
    "EnvSpecs",
    "EpisodeStats",
    "EpisodeSummary",
    "EvalRows",
    "FinalObsTransform",
    "ObservationNorm",
    "Quarantine",
    "QuarantineLimitError",
    "RecordEpisodes",
    "RewardScale",
    "ScalarizeReward",
    "Transform",
    "TransformedEnv",
    "completed_episodes",
]
