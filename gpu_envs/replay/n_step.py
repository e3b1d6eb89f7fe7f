"""n-step targets from ``n`` consecutive stored transitions, stopping where an episode ended.

For a window of ``n`` transitions following one start (step 0 = the start), step ``k + 1``
belongs to the n-step transition when step ``k`` did and went on: it did not end and the
stored data continues from it (``goes_on[:, k]``, which also says the step exists: not
past the newest stored one). Then, with ``m`` the steps taken (at least 1)::

    reward   = sum_{k < m} gamma**k * r_k
    discount = gamma**m, 0 where step m-1 terminated

and the next observation is step ``m - 1``'s ``("next", obs)``: the observation ``m``
steps later, or the true final one where the episode ended (terminated or truncated)
within the window, so that ``target = reward + discount * Q(next)`` is exact. All on the
device, no host sync.

Example::

    powers = 0.99 ** torch.arange(n + 1.0)
    reward, taken = window_targets(rewards, goes_on, powers)       # [B, *R], [B]
    discount = discount_table(powers, taken, terminated)           # [B, 1]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["discount_table", "window_targets"]


def window_targets(
    rewards: torch.Tensor, goes_on: torch.Tensor, powers: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum_k gamma**k * r_k over the steps taken, steps taken)`` for ``[B, n, *R]`` rewards.

    ``goes_on`` is ``[B, n - 1]`` bool (step ``k + 1`` follows step ``k``); ``powers`` holds
    ``gamma ** k`` for ``k = 0..n`` (at least the first ``n``).
    """
    b, n = rewards.shape[:2]
    alive = goes_on.to(rewards.dtype).cumprod(dim=1)  # [B, n - 1]: step k + 1 is taken
    taken = F.pad(alive, (1, 0), value=1.0)  # [B, n]
    weights = taken * powers[:n]
    # steps not taken may be slots never written (NaN garbage): zeroed, since 0 * NaN is NaN
    flat = rewards.reshape(b, n, -1).masked_fill(taken.unsqueeze(-1) == 0, 0.0)
    summed = torch.bmm(weights.unsqueeze(1), flat).reshape(b, *rewards.shape[2:])
    return summed, alive.sum(dim=1).long() + 1


def discount_table(powers: torch.Tensor, taken: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
    """``gamma ** taken`` as ``[B, 1]``, 0 where ``terminated`` (``[B, 1]`` bool)."""
    discount = powers.index_select(0, taken).unsqueeze(1)
    return torch.where(terminated, torch.zeros_like(discount), discount)
