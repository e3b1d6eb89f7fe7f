"""n-step targets from ``n`` consecutive stored transitions, stopping where an episode ended.

For a window of ``n`` transitions following one start (``[B, n]`` tensors, step 0 = the
start), step ``k`` belongs to the n-step transition when every earlier step went on: it did
not end (``done``), the stored data continues (``starts_new`` is False: the transition was
taken from where the previous one arrived) and it exists (``in_range``: not past the
newest stored step). Then, with ``m`` the steps taken (at least 1)::

    reward   = sum_{k < m} gamma**k * r_k
    discount = gamma**m, 0 where step m-1 terminated

and the next observation is step ``m - 1``'s ``("next", obs)``: the observation ``m``
steps later, or the true final one where the episode ended (terminated or truncated)
within the window, so that ``target = reward + discount * Q(next)`` is exact. All on the
device, no host sync.

Example::

    included = included_steps(done, starts_new, in_range)
    reward, taken = discounted_sum(rewards, included, gamma=0.99)
"""

from __future__ import annotations

import torch

__all__ = ["discounted_sum", "included_steps"]


def included_steps(done: torch.Tensor, starts_new: torch.Tensor, in_range: torch.Tensor) -> torch.Tensor:
    """``[B, n]`` bool: step ``k`` is part of the window (step 0 always is)."""
    goes_on = ~done[:, :-1] & ~starts_new[:, 1:] & in_range[:, 1:]  # [B, n - 1]: step k+1 follows step k
    first = torch.ones_like(done[:, :1])
    return torch.cat([first, goes_on], dim=1).to(torch.uint8).cumprod(dim=1).bool()


def discounted_sum(rewards: torch.Tensor, included: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum_k gamma**k * r_k over the included steps, number of steps taken)`` for ``[B, n, *R]`` rewards."""
    n = rewards.shape[1]
    powers = gamma ** torch.arange(n, device=rewards.device, dtype=rewards.dtype)
    weights = (powers * included.to(rewards.dtype)).reshape(*included.shape, *([1] * (rewards.dim() - 2)))
    return (rewards * weights).sum(dim=1), included.sum(dim=1)
