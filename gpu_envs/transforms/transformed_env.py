"""``TransformedEnv``: an env plus a chain of transforms, with the SAME API as ``BatchedEnv``.

``TransformedEnv(env, t1, t2, t3)`` stacks the transforms on ``env`` like nested
wrappers: ``t1`` sits next to the env, ``t3`` next to the learner. Outputs (step
results, roots, specs) flow up through ``t1, t2, t3``; the action flows down through
``t3.inv, t2.inv, t1.inv``. So ``TransformedEnv(env, EpisodeStats(), RewardScale(0.1))``
records the env's raw returns and hands the learner scaled rewards.

Because the API is BatchedEnv's (``reset``, ``step``, ``step_and_maybe_reset``,
``root``, ``rollout``, the specs, ``num_envs``, ``device``, ``batch_size``,
``generator``, ``close``), anything written against an env (``gpu_envs.rollout.collect``,
a training loop, another ``TransformedEnv``) accepts a transformed one unchanged.

Where a transform rewrites the action (``ActionRescale``, ``ClipAction``), the env
steps a shallow copy of the TensorDict: the returned ``td["action"]`` stays the
policy's own output, which is what a learner needs for log-probabilities.

Example::

    >>> import gpu_envs
    >>> from gpu_envs.transforms import ActionRescale, EpisodeStats, ObservationNorm, TransformedEnv
    >>> env = TransformedEnv(
    ...     gpu_envs.make("Pendulum-v1", num_envs=16, device="cpu", seed=0),   # or device="cuda"
    ...     EpisodeStats(), ObservationNorm(), ActionRescale(),
    ... )
    >>> traj = env.rollout(64)                 # actions sampled from Box(-1, 1)
    >>> traj.batch_size
    torch.Size([16, 64])
    >>> env.transforms[0].summary().episodes   # Pendulum's episodes last 200 steps
    0
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import ActionError, InvalidArgumentError, ResetNeededError
from gpu_envs.contract.protocols import require_env_api
from gpu_envs.contract.specs.env_specs import BatchedSpecs
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.transforms.snapshot import get_transformed_state, set_transformed_state
from gpu_envs.utils.arguments import check_td
from gpu_envs.utils.call_guard import CallGuard
from gpu_envs.utils.call_site import SILENT_UNPACK_SIZES, refuse_unpacking, unpacked_into
from gpu_envs.utils.live_state import DatedState, check_state, check_values, copy_into, prefixed, under
from gpu_envs.utils.tensordicts import get_entry, set_entry, shallow_copy


def env_seed(env: Any) -> int | None:
    """The seed of ``env``'s generator (``initial_seed()``, a host integer: no sync), or None without one."""
    generator = getattr(env, "generator", None)
    return generator.initial_seed() if isinstance(generator, torch.Generator) else None


class TransformedEnv(BatchedSpecs):
    """``env`` seen through ``transforms`` (first = closest to the env).

    Args:
        env: a :class:`~gpu_envs.BatchedEnv` or another ``TransformedEnv``.
        *transforms: :class:`Transform` instances, each used by this env only.

    The specs are the env's, as changed by each transform's ``setup``: per env as
    ``single_*_spec`` and batched (torchrl's convention) as ``*_spec``, like BatchedEnv's.
    Attributes not defined here (``backend``, ``is_closed``...) are read from ``env``.
    """

    def __init__(self, env: Any, *transforms: Transform) -> None:
        require_env_api(env, "TransformedEnv", fix=" Build one with gpu_envs.make() or gpu_envs.wrap() first.")
        for t in transforms:
            if not isinstance(t, Transform):
                raise InvalidArgumentError(
                    f"TransformedEnv expects Transform instances, got {type(t).__name__}; "
                    "pass e.g. EpisodeStats() (an instance, not the class)."
                )
        self.env = env
        self.transforms: list[Transform] = list(transforms)
        specs = EnvSpecs(
            num_envs=env.num_envs,
            device=env.device,
            observation_spec=env.single_observation_spec,
            action_spec=env.single_action_spec,
            reward_spec=env.single_reward_spec,
            done_spec=env.single_done_spec,
            info_spec=env.single_info_spec,
            seed=env_seed(env),
        )
        for t in self.transforms:
            t.attach(env)
        for t in self.transforms:
            specs = t.setup(specs)
        health = getattr(env, "check_health", None)
        for t in self.transforms:
            t.check_health = cast("Callable[[], None]", health) if callable(health) else None
        self._set_specs(specs.observation_spec, specs.action_spec, specs.reward_spec, specs.done_spec, specs.info_spec)
        self._inverting = [t for t in reversed(self.transforms) if type(t).inv is not Transform.inv]
        self._all_rows = torch.ones(env.num_envs, 1, dtype=torch.bool, device=env.device)
        self._needs_reset = True
        # the call in progress; still marked after one that did not finish (an exception or Ctrl-C
        # escaped it): the transforms' state may then disagree with the env's, until a full reset
        self._guard = CallGuard("this TransformedEnv")
        self.caches: dict[str, Any] = {}  # per-env state of the layers above (collect's buffers); not the inner env's
        self._seed = specs.seed  # the env's seed the transforms last heard of (reseed)
        # the env's reset_count when the transforms last saw a reset (None: the env does not count them)
        self._seen_resets: int | None = getattr(env, "reset_count", None)

    # ------------------------------------------------------------- properties
    @property
    def num_envs(self) -> int:
        return self.env.num_envs

    @property
    def device(self) -> torch.device:
        return self.env.device

    @property
    def batch_size(self) -> torch.Size:
        return self.env.batch_size

    @property
    def needs_reset(self) -> bool:
        """True until this env's first ``reset()`` (the transforms' state starts there)."""
        return self._needs_reset

    @property
    def interrupted(self) -> str | None:
        """The call that did not finish (``"step"``...), here or in the env below; ``None`` when consistent."""
        return self._guard.pending or getattr(self.env, "interrupted", None)

    @property
    def generator(self) -> torch.Generator:
        """The env's generator (seeded by ``reset(seed=...)``), used for random actions."""
        return self.env.generator

    def transition_values(self, keys: list) -> None:
        """None: transforms rewrite transitions, so a collection writes them from TensorDicts.

        (Defined here so that the inner env's :meth:`BatchedEnv.transition_values`, which
        would skip the transforms, is never forwarded.)
        """
        return None

    @property
    def collection_vouched(self) -> bool:
        """False: a collection's buffer holds what the transforms wrote, which no simulator checked.

        (Defined here so that the inner env's :attr:`BatchedEnv.collection_vouched` is never forwarded.)
        """
        return False

    def __getattr__(self, name: str) -> Any:
        # only called for names not found normally: read them from the wrapped env
        if name.startswith("_") or "env" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.env, name)

    # ------------------------------------------------------------------- API
    def reset(self, seed: int | None = None, td: TensorDictBase | None = None) -> TensorDictBase:
        """Reset every row (or the rows of ``td["_reset"]``) and return the transformed root.

        After an interrupted call, every row is reset (a mask is not enough to make the
        transforms' state consistent again).
        """
        guard = self._guard
        full = self._needs_reset or guard.pending is not None
        previous = guard.pending
        guard.start("reset")
        try:
            root = self.env.reset(seed=seed, td=None if full else td)
        except BaseException:
            if not getattr(self.env, "interrupted", None):  # refused before the env moved: nothing changed
                guard.pending = previous
            raise
        mask = None if full or td is None else td.get("_reset", None)
        mask = self._all_rows if mask is None else mask.view(self.num_envs, 1)
        seeded = env_seed(self.env)
        if seeded is not None and seeded != self._seed:
            for t in self.transforms:
                t.reseed(seeded)
            self._seed = seeded
        for t in self.transforms:
            root = t.reset(root, mask)
        self._needs_reset = False
        self._seen_resets = getattr(self.env, "reset_count", None)
        guard.finish()
        return root

    def _inner_reset(self) -> None:
        """The env below was reset directly (``tenv.env.reset()``, a collection on it): restart the transforms' rows.

        Noticed by comparing the env's ``reset_count`` (a host integer) on every call, as
        if this env's own ``reset`` had reset those rows: ``EpisodeStats`` then does not
        count the steps before the reset into the next episode. One missed reset restarts
        the rows it reset; several restart every row.
        """
        count, seen = self.env.reset_count, self._seen_resets
        rows = self.env.last_reset_rows if seen is not None and count == seen + 1 else None
        mask = self._all_rows if rows is None else rows
        root = self.env.root()
        for t in self.transforms:
            root = t.reset(root, mask)
        self._seen_resets = count

    def root(self) -> TensorDictBase:
        """The current root TensorDict, through every transform's ``root``."""
        if self._guard.pending is not None:
            self._refuse("root")
        seen = self._seen_resets
        if seen is not None and self.env.reset_count != seen and not self._needs_reset:
            self._inner_reset()
        root = self.env.root()
        for t in self.transforms:
            root = t.root(root)
        return root

    def step(self, td: TensorDictBase) -> TensorDictBase:
        """Step with ``td["action"]`` (rewritten by the action transforms); returns ``td``."""
        if self.num_envs in SILENT_UNPACK_SIZES and not torch.compiler.is_compiling():
            refuse_unpacking(self.num_envs, unpacked_into(1))
        if self._needs_reset or self._guard.pending is not None:
            self._refuse("step")
        seen = self._seen_resets
        if seen is not None and self.env.reset_count != seen:
            self._inner_reset()
        out = self._inner_call("step", self.env.step, self._inverse(td, "step"))
        td = self._forward(td, out)
        self._guard.finish()
        return td

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then return ``(td, td_root)`` with both passed through the transforms."""
        if self._needs_reset or self._guard.pending is not None:
            self._refuse("step_and_maybe_reset")
        seen = self._seen_resets
        if seen is not None and self.env.reset_count != seen:
            self._inner_reset()
        inner = self._inverse(td, "step_and_maybe_reset")
        out, root = self._inner_call("step_and_maybe_reset", self.env.step_and_maybe_reset, inner)
        td = self._forward(td, out)
        for t in self.transforms:
            root = t.root(root)
        self._guard.finish()
        return td, root

    def _inner_call(self, call: str, fn: Callable[[TensorDictBase], Any], inner: TensorDictBase) -> Any:
        """``fn(inner)`` with ``call`` pending: left pending (refusing later calls) only if the env was interrupted."""
        self._guard.start(call)
        try:
            return fn(inner)
        except BaseException:
            if not getattr(self.env, "interrupted", None):  # refused before the env moved: nothing changed
                self._guard.finish()
            raise

    def rollout(self, steps: int, policy: Callable | None = None, *, reset: bool = True) -> TensorDictBase:
        """Run ``steps`` steps and return the transitions stacked as ``[N, T]``.

        Same contract as :meth:`gpu_envs.BatchedEnv.rollout`: ``policy=None`` samples
        :attr:`action_spec` (the transformed one) with :attr:`generator`, and
        ``reset=False`` continues from the current root.
        """
        from gpu_envs.rollout.loop import rollout  # at call time: transforms sit below rollout/

        return rollout(self, steps, policy, reset=reset)

    # ----------------------------------------------------------------- state
    def live_state(self) -> dict[str, torch.Tensor]:
        """Live state tensors (see :mod:`gpu_envs.utils.live_state`): the env's under ``"env."``,
        each transform's :meth:`~Transform.live_state` under ``"transforms.<i>."``."""
        inner = self.env.live_state()
        state = prefixed("env", inner)
        for i, t in enumerate(self.transforms):
            state.update(prefixed(f"transforms.{i}", t.live_state()))
        return DatedState(state, getattr(inner, "date", None))  # the env's date: it refuses a stale one

    def load_live_state(self, state: dict[str, torch.Tensor]) -> None:
        """Take the values of a :meth:`live_state` (copied into the env's and transforms' tensors)."""
        check_state(state, "TransformedEnv")
        for i, t in enumerate(self.transforms):  # all checked before anything is loaded
            check_values(t.live_state(), under(f"transforms.{i}", state), type(t).__name__)
        inner = under("env", state)
        date = getattr(state, "date", None)
        self.env.load_live_state(inner if date is None else DatedState(inner, date))
        for i, t in enumerate(self.transforms):
            copy_into(t.live_state(), under(f"transforms.{i}", state), type(t).__name__)
        self._needs_reset = False

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Deprecated name of :meth:`live_state` (goes away in the next release)."""
        warnings.warn(
            f"{type(self).__name__}.state_dict() was renamed live_state() (live tensors; a snapshot of rows is "
            "get_state()); the old name goes away in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.live_state()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Deprecated name of :meth:`load_live_state` (goes away in the next release)."""
        warnings.warn(
            f"{type(self).__name__}.load_state_dict() was renamed load_live_state(); the old name goes away in the "
            "next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        self.load_live_state(state)

    def get_state(self, rows: Any = None) -> TensorDictBase:
        """A snapshot of ``rows`` (``None``: all): the env's and each transform's state (:mod:`gpu_envs.transforms.snapshot`)."""
        if self._needs_reset or self._guard.pending is not None:
            self._refuse("get_state")
        return get_transformed_state(self, rows)

    def set_state(self, state: TensorDictBase, rows: Any = None) -> None:
        """Restore a :meth:`get_state` into ``rows``; statistics shared by all rows only when ``rows`` is None."""
        if self._needs_reset or self._guard.pending is not None:
            self._refuse("set_state")
        set_transformed_state(self, state, rows)

    # --------------------------------------------------------------- helpers
    def _refuse(self, call: str) -> None:
        if self._guard.pending is not None:
            self._guard.refuse(call, "its transforms' state may disagree with the env's")
        raise ResetNeededError(f"{call}() was called before reset() on this TransformedEnv: call env.reset() first.")

    def _inverse(self, td: TensorDictBase, call: str) -> TensorDictBase:
        check_td(td, call)
        if not self._inverting:
            return td
        if td.get("action", None) is None:
            raise ActionError(
                f'td has no "action" entry: set td["action"] (e.g. env.action_spec.rand()) before {call}().'
            )
        inner = shallow_copy(td)  # the caller's td keeps the policy's action
        for t in self._inverting:
            inner = t.inv(inner)
        return inner

    def _forward(self, td: TensorDictBase, out: TensorDictBase) -> TensorDictBase:
        if out is not td:
            set_entry(td, "next", get_entry(out, "next"))
        for t in self.transforms:
            td = t.step(td)
        return td

    def check_health(self) -> None:
        """The env's :meth:`~gpu_envs.BatchedEnv.check_health`: raise the bad values it flagged (one sync)."""
        check = getattr(self.env, "check_health", None)
        if callable(check):
            check()

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the wrapped env (closing twice is harmless)."""
        self.env.close()

    def __enter__(self) -> TransformedEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        chain = ", ".join(repr(t) for t in self.transforms)
        return f"TransformedEnv({self.env!r}, transforms=[{chain}])"
