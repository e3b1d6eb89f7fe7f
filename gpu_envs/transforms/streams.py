"""Per-row random streams for transforms: one 32-bit linear congruential state per row and lane.

A transform that draws per row (``Delay``'s delays and holds, ``Randomize``'s constants)
keeps ``[N, lanes]`` int64 states, advances them in place with one multiply-add and mask
(exact in int64: the multiplier is below ``2^31``), and uses their top bits. Cheap enough
for every step, sync-free, and traced by ``torch.compile`` like any other op. The starts
are hashed from the seed, a salt (one per transform kind) and each row's index
(:class:`~gpu_envs.builtin.counter_rng.CounterRNG`), so a row's stream depends on nothing
else and never touches the env's own generator. Statistical quality: that of an LCG's
high bits, meant for simulation parameters and delays, not for cryptography.

Example::

    >>> import torch
    >>> from gpu_envs.transforms.streams import next_state_, seeded_states, unit_uniform
    >>> s = seeded_states(4, 2, torch.device("cpu"), seed=0, salt=1)
    >>> u = unit_uniform(next_state_(s))          # [4, 2] in [0, 1)
    >>> bool(((u >= 0) & (u < 1)).all())
    True
"""

from __future__ import annotations

import torch

from gpu_envs.builtin.counter_rng import CounterRNG

__all__ = ["next_state_", "seeded_states", "top16", "unit_uniform"]

# Numerical Recipes' 32-bit LCG: x -> (A x + C) mod 2^32
_A, _C, _MASK32 = 1664525, 1013904223, 0xFFFFFFFF


def seeded_states(num_envs: int, lanes: int, device: torch.device, seed: int | None, salt: int) -> torch.Tensor:
    """``[num_envs, lanes]`` int64 stream starts in ``[0, 2^32)``, hashed from ``(seed ^ salt, row index)``."""
    key = (0 if seed is None else int(seed)) ^ salt
    return CounterRNG(num_envs, lanes, device, key).bits()


def next_state_(state: torch.Tensor) -> torch.Tensor:
    """Advance every stream of ``state`` one step, in place; returns ``state``."""
    return state.mul_(_A).add_(_C).bitwise_and_(_MASK32)


def top16(state: torch.Tensor) -> torch.Tensor:
    """The top 16 bits of each state: a draw in ``[0, 2^16)`` (int64)."""
    return state >> 16


def unit_uniform(state: torch.Tensor) -> torch.Tensor:
    """The top 24 bits of each state as float32 in ``[0, 1)``."""
    return (state >> 8).to(torch.float32) * (2.0**-24)
