"""``Randomize``: per-row domain randomization, each row's physical constants drawn again at each of its episodes.

``Randomize({"masspole": (0.05, 0.5), "length": (0.3, 1.0)})`` draws, for every row at the
start of each of its episodes (a full reset, a masked ``reset(td)`` with ``"_reset"``, or the
auto-reset after an end), each named constant uniformly from ``[lo, hi)`` and hands them to
the simulator's ``set_params(rows=mask, **values)`` (a bool ``[N]`` mask and ``[N]`` values:
no host sync). The built-in envs implement it (:mod:`gpu_envs.builtin.params`: CartPole's
``gravity``, ``masscart``, ``masspole``, ``length``, ``force_mag``; Pendulum's ``m``, ``l``,
``g``, ``max_torque``, gymnasium's names); a torch env of yours takes part by implementing the
same method (and, for snapshots, keeping the values in its ``get_state``/``set_state``).

The constants of an episode hold for all of it: a row's new values are written at its new
episode's first root, before its first step. Draws come from per-row streams seeded from the
env's seed (:mod:`gpu_envs.transforms.streams`): the same in every run with that seed,
independent of the other rows and of the env's own generator; ``get_state`` /
``set_state`` snapshot them (and the simulator snapshots the constants themselves).

Example::

    >>> import gpu_envs
    >>> from gpu_envs.transforms import Randomize, TransformedEnv
    >>> env = TransformedEnv(gpu_envs.make("Pendulum-v1", num_envs=4, device="cpu", seed=0),
    ...                      Randomize({"m": (0.5, 2.0), "l": (0.8, 1.2)}))
    >>> root = env.reset()
    >>> masses = env.backend.env.params["m"]        # one mass per row, for this episode
    >>> bool(((masses >= 0.5) & (masses < 2.0)).all())
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.keys import read
from gpu_envs.transforms.streams import next_state_, seeded_states, unit_uniform
from gpu_envs.utils.arguments import as_number

__all__ = ["Randomize"]

_SALT = 0x7A11D0  # keys Randomize's streams apart from the other transforms' (same seed)


def simulator_with_params(env: Any) -> Any:
    """The object below ``env`` that has ``set_params``: ``env`` itself, or the simulator its backend drives."""
    for candidate in (env, getattr(getattr(env, "backend", None), "env", None)):
        if candidate is not None and callable(getattr(candidate, "set_params", None)):
            return candidate
    raise InvalidArgumentError(
        f"Randomize needs a simulator with set_params(rows=mask, **values); {type(env).__name__} has none (the "
        "built-in envs do). Implement set_params on your torch env (gpu_envs.builtin.params describes it), or "
        "randomize inside the simulator (Isaac Lab's and mjlab's event managers, Brax's randomization_fn)."
    )


class Randomize(Transform):
    """Each row's named physical constants drawn from ``ranges`` at each of its episodes (module docstring).

    Args:
        ranges: ``{name: (lo, hi)}``, ``0 < lo <= hi``, finite; values in ``[lo, hi)``
            (``lo`` itself where ``lo == hi``).
    """

    def __init__(self, ranges: dict[str, tuple[float, float]]) -> None:
        super().__init__()
        if not isinstance(ranges, dict) or not ranges:
            raise InvalidArgumentError(
                f"Randomize takes {{name: (lo, hi)}} of at least one parameter, got {ranges!r} (no parameter to draw)."
            )
        self.ranges: dict[str, tuple[float, float]] = {}
        for name, bounds in ranges.items():
            if not isinstance(name, str) or not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
                raise InvalidArgumentError(f"Randomize ranges[{name!r}] must be a pair (lo, hi), got {bounds!r}.")
            lo = as_number(bounds[0], f"Randomize {name} lo", allow_inf=False)
            hi = as_number(bounds[1], f"Randomize {name} hi", allow_inf=False)
            if not (lo > 0 and math.isfinite(hi)):
                raise InvalidArgumentError(f"Randomize {name}: physical constants must be positive, got lo = {lo}.")
            if lo > hi:
                raise InvalidArgumentError(f"Randomize {name}: (lo, hi) = {bounds!r}; pass lo <= hi.")
            self.ranges[name] = (lo, hi)
        self._set_params: Callable[..., None] | None = None

    def attach(self, env: Any) -> None:
        sim = simulator_with_params(env)
        known = getattr(sim, "param_defaults", None)
        if isinstance(known, dict):
            unknown = sorted(set(self.ranges) - set(known))
            if unknown:
                raise InvalidArgumentError(
                    f"Randomize: unknown parameter(s) {unknown} for {type(sim).__name__}; its parameters are "
                    f"{list(known)}."
                )
        self._set_params = sim.set_params

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        n, dev = specs.num_envs, specs.device
        lows = torch.tensor([lo for lo, _ in self.ranges.values()], dtype=torch.float32, device=dev)
        highs = torch.tensor([hi for _, hi in self.ranges.values()], dtype=torch.float32, device=dev)
        self._low, self._width = lows, highs - lows
        # the largest float32 below each hi (lo where lo == hi): draws stay in [lo, hi); fixed, so built once
        high = self._low + self._width
        self._high_below = torch.maximum(torch.nextafter(high, torch.zeros_like(high)), self._low)
        self._draws = torch.zeros(n, len(self.ranges), dtype=torch.int64, device=dev)
        self._restart = torch.zeros(n, 1, dtype=torch.bool, device=dev)  # ended last step: draw at the root
        self.reseed(specs.seed)
        self.row_state = ("draws", "restart")
        return specs

    def reseed(self, seed: int | None) -> None:
        self._draws.copy_(seeded_states(self.num_envs, len(self.ranges), self.device, seed, _SALT))

    def step(self, td: TensorDictBase) -> TensorDictBase:
        self._restart.copy_(read(td, "done", nxt=True))
        return td

    def root(self, td: TensorDictBase) -> TensorDictBase:
        # the rows whose episodes start here draw their constants, once (the flag is cleared)
        restart = self._restart
        if self._set_params is None:
            raise InvalidArgumentError("Randomize must be part of a TransformedEnv (which attaches it to the env).")
        draws = self._draws
        draws.copy_(torch.where(restart, next_state_(draws.clone()), draws))
        values = torch.minimum(torch.addcmul(self._low, unit_uniform(draws), self._width), self._high_below)
        self._set_params(rows=restart.view(-1), **dict(zip(self.ranges, values.unbind(1), strict=True)))
        restart.zero_()
        return td

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        self._restart.logical_or_(mask.view(self.num_envs, 1))
        return self.root(td)

    def live_state(self) -> dict[str, torch.Tensor]:
        return {"draws": self._draws, "restart": self._restart}

    def __repr__(self) -> str:
        return f"Randomize({self.ranges!r})"
