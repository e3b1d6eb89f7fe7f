"""Off-policy training on the device: a replay buffer whose n-step targets are exact.

Massively parallel off-policy learners (FastTD3 / FastSAC / PQN style) add one step of
thousands of envs per iteration and sample large batches for every update, so the buffer
must live where the learner does and never wait on it. :class:`ReplayBuffer` keeps each
env's steps in time order on the device and builds n-step targets that stop where an
episode ended: at a termination the target does not bootstrap (``discount`` 0); at a
truncation it bootstraps from the TRUE final observation, which gpu_envs records in
``("next", obs)``.

The package: :mod:`~gpu_envs.replay.buffer` (the buffer), :mod:`~gpu_envs.replay.layout`
(which entries are kept), :mod:`~gpu_envs.replay.n_step` (the targets).

Example::

    >>> import torch
    >>> import gpu_envs
    >>> from gpu_envs.replay import ReplayBuffer
    >>> from gpu_envs.rollout import collect
    >>> env = gpu_envs.make("Pendulum-v1", num_envs=8, device="cpu", seed=0)
    >>> rb = ReplayBuffer(1_000, device=env.device)
    >>> for _ in range(4):
    ...     rb.extend(collect(env, steps=1))
    >>> batch = rb.sample(64, n_step=3, gamma=0.99, generator=torch.Generator().manual_seed(0))
    >>> batch["next", "reward"].shape, batch["next", "discount"].shape
    (torch.Size([64, 1]), torch.Size([64, 1]))

    The target of a Q-learner is then ``batch["next", "reward"] + batch["next", "discount"] * q(batch["next", "observation"])``.
"""

from gpu_envs.replay.buffer import ReplayBuffer

__all__ = ["ReplayBuffer"]
