"""``ReplayBuffer``: transitions of ``N`` envs kept on the device, sampled uniformly with exact n-step targets.

Storage is one ring of ``H = capacity // N`` steps per env (``[N, H, ...]`` per entry):
``extend`` writes whole columns (one per step, every env at once) with at most two
slice copies, and keeps the steps of each env in time order, which is what an n-step
target needs. Nothing in ``extend`` or ``sample`` waits for the device: the write
position and the fill level follow from the shapes alone, sampling indices are drawn on
the device, and gathers use integer indices.

Continuity: each extend is taken to continue the previous one (``collect()`` resumes the
env where it stopped). Where it does not -- the first observation of a row differs from
that row's last stored next observation (after ``env.reset()``, or data of other envs) --
the stored step is marked as a new start, and no n-step window runs across it.

Example::

    rb = ReplayBuffer(1_000_000, device="cuda")
    for iteration in range(1000):
        rb.extend(collect(env, policy, steps=1))         # [N, 1] (a single step's [N] works too)
        batch = rb.sample(4096, n_step=3, gamma=0.99, generator=g)
        target = batch["next", "reward"] + batch["next", "discount"] * q_target(batch["next", "observation"])
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError
from gpu_envs.contract.keys import NEXT
from gpu_envs.replay.layout import Key, Layout
from gpu_envs.replay.n_step import discounted_sum, included_steps

__all__ = ["ReplayBuffer"]

STARTS_NEW = ("_starts_new",)  # [N, H] bool: this step does not continue the previous stored one


class ReplayBuffer:
    """A uniform replay buffer of env transitions on one device, with n-step sampling.

    Args:
        capacity: the most transitions kept; the buffer holds ``capacity // N`` steps of
            each of the ``N`` envs (``N`` from the first :meth:`extend`), the oldest
            overwritten first.
        device: where the transitions live; default: the device of the first extend.

    :meth:`sample` returns a TensorDict ``[batch_size]`` with the start step's root
    entries (``"observation"`` or the observation groups, ``"action"``, anything else the
    policy recorded) and under ``"next"``: the observation keys of the step ``n`` later
    (or the true final observation where the episode ended within ``n`` steps),
    ``"reward"`` (discounted sum of the rewards up to there), ``"terminated"``,
    ``"truncated"``, ``"done"`` (of the last step taken), ``"discount"`` (``gamma ** steps
    taken``, 0 where terminated) and the last step's other ``"next"`` entries
    (``"final_obs_missing"``, infos), and ``"steps"`` (how many were taken, ``[B, 1]``).
    ``target = reward + discount * Q(next)``.
    """

    def __init__(self, capacity: int, device: torch.device | str | None = None) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise InvalidArgumentError(f"capacity must be an int >= 1 (transitions), got {capacity!r}.")
        self.capacity = capacity
        self.device = None if device is None else torch.device(device)
        self.num_envs: int | None = None
        self.steps_per_env: int | None = None  # H
        self._layout: Layout | None = None
        self._storage: dict[Key, torch.Tensor] = {}
        self._cursor = 0  # the column the next step goes to
        self._written = 0  # steps written per env, ever
        self._offsets: dict[int, torch.Tensor] = {}  # arange(n) per n_step, on the device

    # ------------------------------------------------------------------ size
    def __len__(self) -> int:
        """Transitions stored (every env's)."""
        return 0 if self.num_envs is None else self.num_envs * self._filled

    @property
    def _filled(self) -> int:
        return min(self._written, self.steps_per_env or 0)

    def __repr__(self) -> str:
        return f"ReplayBuffer({len(self)}/{self.capacity} transitions, num_envs={self.num_envs}, device={self.device})"

    # ------------------------------------------------------------------ writing
    def extend(self, data: TensorDictBase) -> None:
        """Append ``data``: ``[N, T]`` (``collect()``'s trajectory) or one step's ``[N]`` transitions.

        The first call fixes ``N``, the entries and their shapes; later calls must match.
        No host-device synchronisation.
        """
        if not isinstance(data, TensorDictBase):
            raise InvalidArgumentError(f"extend takes a TensorDict of transitions ([N] or [N, T]), got {type(data)}.")
        dims = data.batch_dims
        if dims not in (1, 2):
            raise InvalidArgumentError(
                f"extend takes [N] (one step) or [N, T] (collect()'s layout) transitions; got batch size "
                f"{tuple(data.batch_size)}. Reshape it to [num_envs, steps] first."
            )
        if self._layout is None:
            self._allocate(data, dims)
        else:
            if data.batch_size[0] != self.num_envs:
                raise InvalidArgumentError(
                    f"this buffer holds {self.num_envs} envs (from its first extend); got {data.batch_size[0]} rows."
                )
            self._layout.check(data, dims)
        steps = 1 if dims == 1 else data.batch_size[1]
        column = (lambda v: v.unsqueeze(1)) if dims == 1 else (lambda v: v)
        values = {key: column(data.get(key)) for key in self._layout.leaves}
        if not self._layout.has_done:
            values[(NEXT, "done")] = values[(NEXT, "terminated")] | values[(NEXT, "truncated")]
        values[STARTS_NEW] = self._starts_new(values, steps)
        self._write(values, steps)

    def _allocate(self, data: TensorDictBase, dims: int) -> None:
        n = data.batch_size[0]
        horizon = self.capacity // n
        if horizon < 1:
            raise InvalidArgumentError(
                f"capacity={self.capacity} holds less than one step of {n} envs; give at least {n} "
                "(a buffer keeps capacity // num_envs steps of every env)."
            )
        self._layout = Layout.of(data, dims)
        self.num_envs, self.steps_per_env = n, horizon
        self.device = data.device if self.device is None else self.device
        if self.device is None:
            self.device = data.get(self._layout.observation_keys[0]).device
        for key, (shape, dtype) in self._layout.leaves.items():
            self._storage[key] = torch.empty((n, horizon, *shape), dtype=dtype, device=self.device)
        if not self._layout.has_done:
            self._storage[(NEXT, "done")] = torch.empty((n, horizon, 1), dtype=torch.bool, device=self.device)
        self._storage[STARTS_NEW] = torch.empty((n, horizon), dtype=torch.bool, device=self.device)

    def _starts_new(self, values: dict[Key, torch.Tensor], steps: int) -> torch.Tensor:
        """``[N, T]`` bool: the first column starts anew unless it continues the last stored step (device-side)."""
        flags = torch.zeros((self.num_envs, steps), dtype=torch.bool, device=self.device)
        if self._written == 0:
            flags[:, 0] = True
            return flags
        last = (self._cursor - 1) % self.steps_per_env
        same = ~self._storage[(NEXT, "done")][:, last].reshape(self.num_envs)
        for key in self._layout.observation_keys:
            first = values[key][:, 0].to(self.device).reshape(self.num_envs, -1)
            arrived = self._storage[(NEXT, *key)][:, last].reshape(self.num_envs, -1)
            same = same & (first == arrived).all(dim=1)
        flags[:, 0] = ~same
        return flags

    def _write(self, values: dict[Key, torch.Tensor], steps: int) -> None:
        horizon = self.steps_per_env
        skip = max(steps - horizon, 0)  # more steps than the ring holds: the oldest ones never land
        start = (self._cursor + skip) % horizon
        count = steps - skip
        first = min(count, horizon - start)
        for key, value in values.items():
            target = self._storage[key]
            target[:, start : start + first].copy_(value[:, skip : skip + first], non_blocking=True)
            if first < count:  # wraps around
                target[:, : count - first].copy_(value[:, skip + first :], non_blocking=True)
        self._cursor = (self._cursor + steps) % horizon
        self._written += steps

    # ------------------------------------------------------------------ reading
    def sample(
        self, batch_size: int, n_step: int = 1, gamma: float = 0.99, generator: torch.Generator | None = None
    ) -> TensorDict:
        """``batch_size`` transitions drawn uniformly (with replacement), with ``n_step`` targets (class doc).

        ``generator`` (a ``torch.Generator`` on the buffer's device) makes the draw
        reproducible. No host-device synchronisation.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}.")
        if len(self) == 0:
            raise InvalidArgumentError("the buffer is empty: extend it with transitions before sampling.")
        if generator is not None and generator.device.type != self.device.type:
            raise InvalidArgumentError(
                f"the generator lives on {generator.device}, the buffer on {self.device}: build it with "
                f"torch.Generator(device={str(self.device)!r})."
            )
        filled = self._filled
        index = torch.randint(len(self), (batch_size,), device=self.device, generator=generator)
        return self.gather(index // filled, index % filled, n_step=n_step, gamma=gamma)

    def gather(self, env: torch.Tensor, position: torch.Tensor, n_step: int = 1, gamma: float = 0.99) -> TensorDict:
        """The n-step transitions starting at ``position`` (0 = the oldest step kept) of rows ``env``.

        :meth:`sample` draws ``env`` and ``position`` uniformly; this is the deterministic
        part (tests compare it with a sequential reference).
        """
        if isinstance(n_step, bool) or not isinstance(n_step, int) or n_step < 1:
            raise InvalidArgumentError(f"n_step must be an int >= 1, got {n_step!r}.")
        if not (isinstance(gamma, (int, float)) and 0.0 <= gamma <= 1.0):
            raise InvalidArgumentError(f"gamma must be a number in [0, 1], got {gamma!r}.")
        if len(self) == 0:
            raise InvalidArgumentError("the buffer is empty: extend it with transitions before sampling.")
        horizon, filled, layout = self.steps_per_env, self._filled, self._layout
        env, position = env.to(self.device), position.to(self.device)
        offsets = self._offsets.get(n_step)
        if offsets is None:
            offsets = self._offsets[n_step] = torch.arange(n_step, device=self.device)
        ahead = position.unsqueeze(1) + offsets  # [B, n]: steps after the oldest kept one
        slots = (self._cursor - filled + ahead) % horizon
        flat = env.unsqueeze(1) * horizon + slots  # [B, n] rows of the [N * H] storage
        window = flat.reshape(-1)
        b = env.shape[0]

        def steps_of(key: Key) -> torch.Tensor:
            value = self._storage[key]
            return value.reshape(-1, *value.shape[2:]).index_select(0, window).reshape(b, n_step, *value.shape[2:])

        included = included_steps(
            steps_of((NEXT, "done")).reshape(b, n_step), steps_of(STARTS_NEW), ahead < filled
        )
        reward, taken = discounted_sum(steps_of((NEXT, "reward")), included, float(gamma))
        last = flat.gather(1, (taken - 1).unsqueeze(1)).squeeze(1)
        first = flat[:, 0]

        def at(key: Key, rows: torch.Tensor) -> torch.Tensor:
            value = self._storage[key]
            return value.reshape(-1, *value.shape[2:]).index_select(0, rows)

        out = TensorDict({}, batch_size=[b], device=self.device)
        for key in layout.leaves:
            if key[0] != NEXT:
                out.set(key, at(key, first))
            elif key != (NEXT, "reward"):
                out.set(key, at(key, last))
        if not layout.has_done:
            out.set((NEXT, "done"), at((NEXT, "done"), last))
        out.set((NEXT, "reward"), reward)
        terminated = out.get((NEXT, "terminated"))
        discount = (float(gamma) ** taken.to(reward.dtype)).reshape(b, *([1] * (terminated.dim() - 1)))
        out.set((NEXT, "discount"), torch.where(terminated, torch.zeros_like(discount), discount))
        out.set((NEXT, "steps"), taken.reshape(b, 1))
        return out

    def empty(self) -> None:
        """Forget every stored transition (the storage stays allocated)."""
        self._cursor = self._written = 0
