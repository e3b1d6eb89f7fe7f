"""``ReplayBuffer``: transitions of ``N`` envs kept on the device, sampled uniformly with exact n-step targets.

Storage is one ring of ``H = capacity // N`` steps per env (``[N, H, ...]`` per entry):
``extend`` writes whole columns (one per step, every env at once) with one fused copy
(two where the ring wraps), and keeps the steps of each env in time order, which is what
an n-step target needs. The end flags live packed in one ``[N, H, 4]`` uint8 tensor (done,
terminated, truncated, and "ends": done, or the next stored step does not continue this
one), read as one int32 per step, so a sample gathers them with one 1-D gather. Nothing in ``extend`` or ``sample`` waits
for the device: the write position and the fill level follow from the shapes alone,
sampling indices are drawn on the device, and gathers use integer indices.

Continuity: each extend is taken to continue the previous one (``collect()`` resumes the
env where it stopped). Where it does not -- the first observation of a row differs from
that row's last stored next observation (after ``env.reset()``, or data of other envs) --
no n-step window runs across the seam.

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
from gpu_envs.contract.keys import NEXT, REWARD
from gpu_envs.replay.layout import FLAG_KEYS, Key, Layout
from gpu_envs.replay.n_step import discount_table, window_targets
from gpu_envs.utils.arguments import as_int
from gpu_envs.utils.torch_internals import foreach_copy

__all__ = ["ReplayBuffer"]

DONE, TERMINATED, TRUNCATED, ENDS = range(4)  # columns of the packed flags


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
    taken``, 0 where terminated), ``"steps"`` (how many were taken, ``[B, 1]``) and the
    last step's other ``"next"`` entries (``"final_obs_missing"``, infos).
    ``target = reward + discount * Q(next)``; ``"reward"`` and ``"discount"`` are ``[B, 1]``
    for every ``n_step`` (``[B, K]`` rewards for K objectives). Transitions of an env of
    agent groups keep every group entry; each agent's n-step reward is
    ``("next", group, "reward")`` ``[B, A, 1]`` beside its ``("next", group, "discount")``
    (the env's, one per agent), so each agent's target is
    ``batch["next", g, "reward"] + batch["next", g, "discount"] * Q_g(next)``.
    """

    def __init__(self, capacity: int, device: torch.device | str | None = None) -> None:
        self.capacity = as_int(capacity, "capacity (transitions)", minimum=1)
        self.device = None if device is None else torch.device(device)
        self.num_envs: int | None = None
        self.steps_per_env: int | None = None  # H
        self._layout: Layout | None = None
        self._storage: dict[Key, torch.Tensor] = {}  # key -> [N, H, ...], flags excluded
        self._rows: dict[Key, torch.Tensor] = {}  # the same memory as [N * H] rows (1-D for one value per step)
        self._flags: torch.Tensor | None = None  # [N, H, 4] uint8: DONE, TERMINATED, TRUNCATED, ENDS
        self._flag_words: torch.Tensor | None = None  # the flags of each step as one int32: [N * H]
        self._cursor = 0  # the column the next step goes to
        self._written = 0  # steps written per env, ever
        self._tables: dict[tuple[int, float], tuple[torch.Tensor, torch.Tensor]] = {}  # (n, gamma) -> offsets, powers

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
        if steps == 0:  # an [N, 0] trajectory: nothing to store (and no first step to continue from)
            return
        layout = self._allocated()[0]
        values = {key: data.get(key) for key in layout.leaves}
        if dims == 1:
            values = {key: value.unsqueeze(1) for key, value in values.items()}
        terminated, truncated = values.pop((NEXT, "terminated")), values.pop((NEXT, "truncated"))
        done = values.pop((NEXT, "done"), None)
        done = terminated | truncated if done is None else done
        flags = torch.cat((done, terminated, truncated, done), dim=-1)  # ENDS: done, until the next extend says more
        self._mark_seam(values)
        self._write(values, flags, steps)

    def _allocate(self, data: TensorDictBase, dims: int) -> None:
        n = data.batch_size[0]
        horizon = self.capacity // n
        if horizon < 1:
            raise InvalidArgumentError(
                f"capacity={self.capacity} holds less than one step of {n} envs; give at least {n} "
                "(a buffer keeps capacity // num_envs steps of every env)."
            )
        layout = Layout.of(data, dims)
        device = self.device or data.device or data.get(layout.observation_keys[0]).device
        self._layout, self.num_envs, self.steps_per_env, self.device = layout, n, horizon, device
        for key, (shape, dtype) in layout.leaves.items():
            if key not in FLAG_KEYS:
                self._storage[key] = storage = torch.empty((n, horizon, *shape), dtype=dtype, device=device)
                # one value per step gathers fastest as a 1-D tensor
                self._rows[key] = storage.view(-1) if shape.numel() == 1 else storage.view(n * horizon, *shape)
        self._flags = torch.zeros((n, horizon, 4), dtype=torch.uint8, device=device)
        self._flag_words = self._flags.view(torch.int32).view(-1)

    def _mark_seam(self, values: dict[Key, torch.Tensor]) -> None:
        """Where a row's new first step does not start from its last stored next observation, that step ENDS a window.

        On the device: the last stored column's ENDS flag becomes ``done | (obs != last next obs)``.
        """
        if self._written == 0:
            return
        layout, n, horizon, flags, _, _ = self._allocated()
        last = (self._cursor - 1) % horizon
        differs = None
        for key in layout.observation_keys:
            first = values[key][:, 0].to(self.device).reshape(n, -1)
            arrived = self._storage[(NEXT, *key)][:, last].reshape(n, -1)
            mismatch = (first != arrived).any(dim=1)
            differs = mismatch if differs is None else differs | mismatch
        if differs is None:  # Layout.of refuses a transition without observation keys
            raise InvalidArgumentError("the buffer's layout has no observation key to compare across extends.")
        ends = flags[:, last, ENDS]
        ends.copy_(ends | differs.to(torch.uint8))

    def _write(self, values: dict[Key, torch.Tensor], flags: torch.Tensor, steps: int) -> None:
        _, _, horizon, flags_storage, _, _ = self._allocated()
        skip = max(steps - horizon, 0)  # more steps than the ring holds: the oldest ones never land
        start = (self._cursor + skip) % horizon
        count = steps - skip
        first = min(count, horizon - start)
        targets = [self._storage[key] for key in values] + [flags_storage]
        sources = [*values.values(), flags]
        parts = [(start, skip, first)] + ([(0, skip + first, count - first)] if first < count else [])  # wraps
        for at, begin, length in parts:
            foreach_copy(
                [target[:, at : at + length] for target in targets],
                [source[:, begin : begin + length].to(self.device, non_blocking=True) for source in sources],
            )
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
        batch_size = as_int(batch_size, "batch_size", minimum=1)
        self._require_data()
        if generator is not None and not isinstance(getattr(generator, "device", None), torch.device):
            raise InvalidArgumentError(
                f"generator must be a torch.Generator (or None), got {generator!r}: for a seeded draw pass "
                f"torch.Generator(device={str(self.device)!r}).manual_seed(seed)."
            )
        device = self._allocated()[5]
        if generator is not None and generator.device.type != device.type:
            raise InvalidArgumentError(
                f"the generator lives on {generator.device}, the buffer on {self.device}: build it with "
                f"torch.Generator(device={str(self.device)!r})."
            )
        filled = self._filled
        index = torch.randint(len(self), (batch_size,), device=self.device, generator=generator)
        env = index // filled
        n_step, gamma = self._window_arguments(n_step, gamma)
        return self._gather(env, index - env * filled, n_step, gamma)

    def gather(
        self, env: torch.Tensor | int, position: torch.Tensor | int, n_step: int = 1, gamma: float = 0.99
    ) -> TensorDict:
        """The n-step transitions starting at ``position`` (0 = the oldest step kept) of rows ``env``.

        :meth:`sample` draws ``env`` and ``position`` uniformly; this is the deterministic
        part (tests compare it with a sequential reference). ``env`` and ``position`` are
        integer tensors of one shape ``[B]`` (or ints, for one transition); positions
        outside ``[0, steps stored per env)`` and rows outside ``[0, N)`` are refused, since
        they would read slots no extend wrote (one host read of their range: unlike
        :meth:`sample`, not for the hot path).

        Example::

            rb.gather(torch.tensor([0, 2]), torch.tensor([5, 0]), n_step=3, gamma=0.99)
        """
        n_step, gamma = self._window_arguments(n_step, gamma)
        self._require_data()
        num_envs = self._allocated()[1]
        env, position = self._index(env, "env", num_envs), self._index(position, "position", self._filled)
        if env.shape != position.shape:
            raise InvalidArgumentError(
                f"env and position must have the same shape [B] (one pair per transition), got "
                f"{tuple(env.shape)} and {tuple(position.shape)}."
            )
        return self._gather(env, position, n_step, gamma)

    @staticmethod
    def _window_arguments(n_step: object, gamma: object) -> tuple[int, float]:
        n_step = as_int(n_step, "n_step", minimum=1)
        if isinstance(gamma, bool) or not (isinstance(gamma, (int, float)) and 0.0 <= gamma <= 1.0):
            raise InvalidArgumentError(f"gamma must be a number in [0, 1], got {gamma!r}.")
        return n_step, float(gamma)

    def _index(self, value: torch.Tensor | int, name: str, bound: int) -> torch.Tensor:
        """``value`` as a 1-D int64 tensor on the device, every entry in ``[0, bound)`` (one host read)."""
        if not isinstance(value, torch.Tensor):
            value = torch.tensor([as_int(value, name)])
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool or value.dim() != 1:
            raise InvalidArgumentError(
                f"{name} must be a 1-D integer tensor [B] (or an int), got {value.dtype} of shape {tuple(value.shape)}."
            )
        if value.numel():
            low, high = (int(v) for v in torch.aminmax(value))
            if low < 0 or high >= bound:
                what = "steps stored per env" if name == "position" else "envs"
                raise InvalidArgumentError(
                    f"{name} must lie in [0, {bound}) ({bound} {what}), got {high if high >= bound else low}: "
                    "that slot holds no stored transition."
                )
        return value.to(self.device, torch.int64)

    def _gather(self, env: torch.Tensor, position: torch.Tensor, n_step: int, gamma: float) -> TensorDict:
        _, _, horizon, _, flag_words, _ = self._allocated()
        filled = self._filled
        offsets, powers = self._table(n_step, gamma)
        oldest = (self._cursor - filled) % horizon
        slot = (position + oldest) % horizon  # [B]
        first = env * horizon + slot  # rows of the [N * H] storage
        reward_keys = self._allocated()[0].reward_keys
        sums: dict[Key, torch.Tensor] = {}
        if n_step == 1:
            last = first
            taken = torch.ones_like(first)
            for key in reward_keys:  # [B, 1] as for n > 1 ([B, A, 1] for an agent group's)
                sums[key] = self._take(self._rows[key], first).view(-1, *self._storage[key].shape[2:])
        else:
            ahead = slot.unsqueeze(1) + offsets  # [B, n]; past the ring's end it wraps to its start:
            rows = (
                first.unsqueeze(1) + offsets - horizon * (ahead >= horizon)
                if n_step <= horizon
                else (env.unsqueeze(1) * horizon + ahead % horizon)
            )
            window = flag_words.index_select(0, rows.view(-1)).view(torch.uint8).view(*rows.shape, 4)
            goes_on = (window[:, :-1, ENDS] == 0) & (position.unsqueeze(1) + offsets[1:] < filled)
            taken = torch.ones_like(first)  # (every reward key's window takes the same steps: the env's flags)
            for key in reward_keys:
                rewards = self._take(self._rows[key], rows.view(-1)).view(*rows.shape, -1)
                summed, taken = window_targets(rewards, goes_on, powers)
                sums[key] = summed.view(-1, *self._storage[key].shape[2:])
            last = rows.gather(1, (taken - 1).unsqueeze(1)).squeeze(1)
        summed = sums[(NEXT, REWARD)]
        last_flags = flag_words.index_select(0, last).view(torch.uint8).view(-1, 4).bool()
        terminated = last_flags[:, TERMINATED : TERMINATED + 1]
        discount = discount_table(powers, taken, terminated).to(summed.dtype)
        root: dict = {}
        nxt: dict = {
            "reward": summed,
            "done": last_flags[:, DONE : DONE + 1],
            "terminated": terminated,
            "truncated": last_flags[:, TRUNCATED : TRUNCATED + 1],
            "discount": discount,
            "steps": taken.unsqueeze(1),
        }
        for key in reward_keys[1:]:  # each agent group's: its agents' sums, and the discount as [B, A, 1]
            group = nxt.setdefault(key[1], {})
            group["reward"] = sums[key]
            group["discount"] = discount.unsqueeze(1).expand(-1, sums[key].shape[1], 1)
        for key, value in self._rows.items():
            if key in sums:
                continue
            at = last if key[0] == NEXT else first
            place, path = (nxt, key[1:]) if key[0] == NEXT else (root, key)
            for name in path[:-1]:
                place = place.setdefault(name, {})
            place[path[-1]] = self._take(value, at).view(-1, *self._storage[key].shape[2:])
        root[NEXT] = nxt
        return TensorDict(root, batch_size=[env.shape[0]], device=self.device)

    def empty(self) -> None:
        """Forget every stored transition (the storage stays allocated)."""
        self._cursor = self._written = 0

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _take(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return rows.index_select(0, index)

    def _require_data(self) -> None:
        if len(self) == 0:
            raise InvalidArgumentError("the buffer is empty: extend it with transitions before sampling.")

    def _allocated(self) -> tuple[Layout, int, int, torch.Tensor, torch.Tensor, torch.device]:
        """``(layout, N, H, flags, flag words, device)``, set by the first :meth:`extend`."""
        layout, num_envs, horizon = self._layout, self.num_envs, self.steps_per_env
        flags, flag_words, device = self._flags, self._flag_words, self.device
        if (
            layout is None
            or num_envs is None
            or horizon is None
            or flags is None
            or flag_words is None
            or device is None
        ):
            raise InvalidArgumentError("the buffer is empty: extend it with transitions before sampling.")
        return layout, num_envs, horizon, flags, flag_words, device

    def _table(self, n_step: int, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``(arange(n), gamma ** arange(n + 1))`` on the device, made once per ``(n, gamma)``."""
        table = self._tables.get((n_step, gamma))
        if table is None:
            dtype = self._storage[(NEXT, REWARD)].dtype
            k = torch.arange(n_step + 1, device=self.device, dtype=torch.float64)
            powers = torch.full_like(k, gamma).pow(k).to(dtype)  # made on the device: no host copy
            table = self._tables[(n_step, gamma)] = (torch.arange(n_step, device=self.device), powers)
        return table
