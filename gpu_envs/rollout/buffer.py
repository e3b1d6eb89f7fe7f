"""The ``[N, T]`` rollout buffer: one TensorDict on the env's device, laid out once, written in place.

:class:`RolloutBuffer` is a TensorDict ``[*env.batch_size, T]``, allocated from the
env's specs and checked against the first transition written; from then on every step
is one ``torch._foreach_copy_`` into column ``t`` (see :mod:`gpu_envs.rollout.loop`,
which fills it, and :func:`gpu_envs.rollout.collect`, which caches one per env).

The storage is time-major: each key is one ``[T, *B, ...]`` tensor and ``data`` holds its
``[*B, T, ...]`` view (``movedim``), so writing step ``t`` is one contiguous copy whatever
``T`` is (a strided ``[N, T]`` column write cost 12 ns per env-step at T=16 and 102 ns at
T=1024, issue 25), and a scan over time (GAE) reads contiguous rows. What users get is
the same ``[N, T]`` TensorDict as before, as a view: indexing, ``reshape`` and torchrl's
buffers work on it as on any tensor (``reshape``/``flatten`` of ``N`` and ``T`` copy, as
on any non-contiguous tensor); ``Tensor.view`` across ``N`` and ``T`` does not apply, use
``reshape`` or ``.contiguous()`` (a copy in ``[N, T]`` order).

Large entries of 1- or 2-byte elements (uint8 image frames, bool masks, half floats)
are copied on the CPU as 8-byte words (:func:`word_dtype`): the same bytes, 4-8x fewer
elements; wider entries keep the plain copy. On the CPU torch splits
a copy over its intra-op threads from :data:`PARALLEL_COPY_ELEMENTS` elements on,
counted in elements whatever their size, so a uint8 frame stack enters that parallel
region at 32 KiB where a float64 one would at 256 KiB; the fork/join costs little on an
idle machine but milliseconds where the cores are busy (a loaded host, EnvPool's own
worker threads): an Atari batch of 8 (``[8, 4, 84, 84]`` uint8, 226 KB) took ~24 ms per
copy with 2 threads on a busy 2-core host against ~40 us as words, and as long through
``torch._foreach_copy_``, which on the CPU is a loop of ``copy_``. Written as words,
such entries stay below the split like any float entry of their size.

Example::

    buf = RolloutBuffer(env, steps=64)
    traj = collect(env, policy, buffer=buf)      # traj is buf.data, [N, 64]
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.contract.errors import InvalidArgumentError, RolloutError
from gpu_envs.contract.keys import DONE_KEYS
from gpu_envs.contract.protocols import require_env_api
from gpu_envs.utils.arguments import as_int
from gpu_envs.utils.devices import normalize_device
from gpu_envs.utils.memory import ensure_fits
from gpu_envs.utils.tensordicts import entries, is_non_tensor
from gpu_envs.utils.torch_internals import TensorList, foreach_copy

__all__ = ["PARALLEL_COPY_ELEMENTS", "RolloutBuffer", "check_steps", "leaf_keys", "word_dtype"]

# torch's CPU grain size (at::internal::GRAIN_SIZE): a copy of at least this many elements
# is split over the intra-op threads
PARALLEL_COPY_ELEMENTS = 32768
_WORDS = (torch.int64, torch.int32, torch.int16)


def word_dtype(event_shape: torch.Size, dtype: torch.dtype) -> torch.dtype | None:
    """The widest integer dtype (8, 4 or 2 bytes) wider than ``dtype`` that one env's entry is a whole number of.

    None where no wider word fits (an 8-byte dtype, or an odd number of bytes per env).

    Example: ``word_dtype(torch.Size([4, 84, 84]), torch.uint8)`` is ``torch.int64``.
    """
    if not len(event_shape):
        return None
    size = event_shape.numel() * dtype.itemsize
    return next((w for w in _WORDS if w.itemsize > dtype.itemsize and size % w.itemsize == 0), None)


def _as_words(value: torch.Tensor, batch_dims: int, word: torch.dtype) -> torch.Tensor:
    """``value`` ``[*B, *event]`` as ``[*B, words]`` of dtype ``word``: a view, or a copy where none exists."""
    flat = value.flatten(batch_dims)  # a view when the event dims are contiguous (they are, from an env)
    try:
        return flat.view(word)
    except RuntimeError:  # a storage offset that is not a whole word: a fresh copy is aligned
        return flat.clone().view(word)


def check_steps(steps: Any) -> int:
    """``steps`` as an int >= 1 (numpy ints accepted), else a clear :class:`InvalidArgumentError`."""
    return as_int(steps, "steps", minimum=1)


def _key(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _node(td: TensorDictBase, path: tuple) -> Any:
    """The entries (``.get(name, None)``) of the sub-TensorDict at ``path``, or None if there is none."""
    node: Any = td
    for part in path:
        node = entries(node).get(part, None)
        if not isinstance(node, TensorDictBase):
            return None
    return entries(node)


def _is_leaf(cls: type) -> bool:
    """TensorDict leaves, non-tensor data included (so that it is refused, not silently skipped)."""
    return not issubclass(cls, TensorDictBase) or is_non_tensor(cls)


def leaf_keys(td: TensorDictBase) -> set[tuple]:
    """Every leaf key of ``td`` as a tuple, non-tensor entries included."""
    return {_key(k) for k in td.keys(include_nested=True, leaves_only=True, is_leaf=_is_leaf)}


def _spec_layout(env: Any) -> dict:
    """Key -> (per-env shape, dtype) of a transition, as far as the env's per-env specs tell.

    Reads the ``single_*_spec`` (no batch dims); the buffer adds ``[*B, T]`` in front.
    """
    layout: dict = {}

    def leaves(spec: Any) -> list:
        items = getattr(spec, "items", None)
        if not callable(items):
            return []
        pairs: Any = items(True, True)  # (key, spec) pairs of a Composite
        return list(pairs)

    try:
        obs = [(_key(k), s.shape, s.dtype) for k, s in leaves(env.single_observation_spec)]
        for key, shape, dtype in obs:
            layout[key] = (shape, dtype)
        for name in DONE_KEYS:
            layout[(name,)] = (torch.Size([1]), torch.bool)
        action = env.single_action_spec
        if getattr(action, "dtype", None) is not None:
            layout[("action",)] = (action.shape, action.dtype)
        for k, s in leaves(action):  # agent groups: one (group, "action") entry per group
            layout[_key(k)] = (s.shape, s.dtype)
        for key, shape, dtype in obs:
            layout[("next", *key)] = (shape, dtype)
        reward = env.single_reward_spec
        layout[("next", "reward")] = (reward.shape, reward.dtype)
        for name in (*DONE_KEYS, "final_obs_missing"):
            layout[("next", name)] = (torch.Size([1]), torch.bool)
        for k, s in leaves(getattr(env, "single_info_spec", None)):
            layout[("next", *_key(k))] = (s.shape, s.dtype)
    except (AttributeError, TypeError):
        pass  # an env with partial specs: the first transition fills in the rest
    return layout


class RolloutBuffer:
    """A TensorDict ``[*env.batch_size, steps]`` on ``env.device``, written in place.

    It is allocated up front from the env's specs (observations, action, reward, done
    flags, ``final_obs_missing``, info entries, under torchrl's keys) and checked
    against the first transition written: keys the policy (or a transform) adds, such
    as ``"sample_log_prob"``, get their storage then, once; spec keys the transitions do
    not have are dropped. From then on every step is one in-place copy per key, and a
    transition whose keys, shapes or dtypes differ raises :class:`RolloutError`.

    Attributes:
        data: the TensorDict ``[*B, T]`` (``B = env.batch_size``); ``collect`` returns it.
        steps: ``T``.

    Example::

        buf = RolloutBuffer(env, steps=128)
        traj = collect(env, policy, buffer=buf)      # traj is buf.data
    """

    def __init__(self, env: Any, steps: int) -> None:
        require_env_api(env, "RolloutBuffer")
        self.steps = check_steps(steps)
        self.batch_size = torch.Size(env.batch_size)
        self.device = normalize_device(env.device)
        self._nb = len(self.batch_size)
        layout = _spec_layout(env)
        per_step = (
            sum(max(shape.numel(), 1) * dtype.itemsize for shape, dtype in layout.values()) * self.batch_size.numel()
        )
        ensure_fits(
            per_step * self.steps,
            self.device,
            f"a rollout of steps={self.steps} for {self.batch_size.numel()} envs",
            "Collect fewer steps per call (or fewer envs); call collect() repeatedly to go on.",
        )
        self.data = TensorDict({}, batch_size=(*self.batch_size, self.steps), device=self.device)
        for key, (shape, dtype) in layout.items():
            self.data.set(key, self._alloc(shape, dtype))
        self._layout: list[tuple[Any, torch.Size, torch.dtype]] | None = None
        self._parents: list[tuple] = []
        self._where: list[tuple[int, str]] = []
        self._metadata: list[tuple[torch.Size, torch.dtype]] = []
        self._columns: list[list[torch.Tensor]] = []
        self._words: list[tuple[int, torch.dtype]] = []  # (layout index, word dtype) of the entries copied as words
        self._word_columns: list[list[torch.Tensor]] = []  # _columns, those entries as words
        # collect()'s own cached buffers re-lay themselves out when a new policy writes other keys
        self.relayout = False

    def _alloc(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """Time-major storage ``[T, *B, *shape]``, handed out as its ``[*B, T, *shape]`` view (class docstring)."""
        storage = torch.zeros((self.steps, *self.batch_size, *shape), dtype=dtype, device=self.device)
        return storage.movedim(0, self._nb)

    @property
    def bound(self) -> bool:
        """True once the layout is fixed by a first transition."""
        return self._layout is not None

    def check_compatible(self, env: Any) -> None:
        """Refuse an env whose batch size or device differ from this buffer's (not ``gpu_envs.check_env``: no env check)."""
        if torch.Size(env.batch_size) != self.batch_size or normalize_device(env.device) != self.device:
            raise InvalidArgumentError(
                f"this RolloutBuffer holds [{', '.join(map(str, self.batch_size))}, {self.steps}] on {self.device}, "
                f"but the env has batch size {tuple(env.batch_size)} on {env.device}; build it with RolloutBuffer(env, steps)."
            )

    def write(self, t: int, td: TensorDictBase, *, check_keys: bool = False) -> None:
        """Copy transition ``td`` (batch ``[*B]``) into column ``t``; no allocation.

        ``check_keys`` also verifies that ``td`` has no key the buffer lacks (done on
        the first and the last step of each collection, so that an entry written from
        step k on is refused rather than dropped; the other steps check only the bound
        keys, which costs nothing extra).
        """
        if self._layout is None:
            self._bind(td)
        elif check_keys:
            self.check_keys(td, t)
        nodes = [_node(td, path) for path in self._parents]
        try:  # the usual step: every entry there with the bound shape and dtype, in one comparison
            sources = [nodes[parent].get(name, None) for parent, name in self._where]
            usual = not check_keys and [(value.shape, value.dtype) for value in sources] == self._metadata
        except AttributeError:  # a sub-TensorDict or an entry missing (None)
            usual = False
        if not usual:
            sources = self._checked_sources(nodes, check_devices=check_keys)
        self.write_values(t, sources)

    def write_values(self, t: int, values: TensorList) -> None:
        """Copy ``values`` (one tensor per key of :attr:`keys`, in that order, shapes and dtypes as laid out) into column ``t``.

        What :meth:`write` does once it has the transition's tensors, for a loop that
        has them without a TensorDict (nothing is checked here). One
        ``torch._foreach_copy_``; large entries of narrow elements go as words (module
        docstring).
        """
        if self._words:
            values = list(values)
            for i, word in self._words:
                values[i] = _as_words(values[i], self._nb, word)
        foreach_copy(self._word_columns[t], values)

    def _checked_sources(self, nodes: list, check_devices: bool) -> list[torch.Tensor]:
        """The entries to copy, each checked against the layout (the error names the first that differs)."""
        sources = []
        for (key, shape, dtype), (parent, name) in zip(self._layout, self._where, strict=True):  # type: ignore[arg-type]
            node = nodes[parent]
            value = None if node is None else node.get(name, None)
            if not isinstance(value, torch.Tensor) or value.shape != shape or value.dtype != dtype:
                raise self._mismatch(key, value, shape, dtype)
            if check_devices and value.device != self.device:
                raise RolloutError(
                    f"transition entry {key!r} is on {value.device}; the buffer (and env) are on {self.device}."
                )
            sources.append(value)
        return sources

    def check_keys(self, td: TensorDictBase, t: int = 0) -> None:
        """Refuse a transition (of step ``t``) with keys the bound layout lacks: they would be dropped.

        Non-tensor entries count as keys (so they are refused, not skipped). With
        :attr:`relayout` (collect's own cached buffer, eager), the first step of a
        collection whose keys differ re-lays the buffer out for them instead.
        """
        keys = leaf_keys(td)
        bound = {_key(k) for k in self.keys}
        if keys == bound:
            return
        if t == 0 and self.relayout:
            self._bind(td)  # a policy with other keys than the last one
            return
        extra = keys - bound
        if extra and t == 0:
            raise RolloutError(
                f"the transition has keys {sorted(extra)} that this RolloutBuffer was not laid out for (its layout "
                "comes from the first transition it received). Use a new RolloutBuffer (or buffer=None) for this policy/env."
            )
        if extra:
            raise RolloutError(
                f"the transition of step {t} has keys {sorted(extra)} that the first step of this collection did not "
                "have: the policy (or a transform) wrote them only from some step on. Every step must write the same "
                "keys; write them on every step (e.g. zeros where there is nothing to say)."
            )

    @property
    def keys(self) -> list:
        """The transition keys stored, in layout order (empty until :attr:`bound`)."""
        return [key for key, _, _ in self._layout or ()]

    def slots_of(self, key: Any) -> list[torch.Tensor] | None:
        """``key``'s slot at every step: the very ``[*B, ...]`` views :meth:`write_values` copies into; or None.

        Slot ``t`` is column ``t`` of the key's time-major storage, contiguous; every slot
        of a key has the same shape, dtype and strides. A step that already wrote a value
        into its slot makes that copy a no-op (torch skips a copy of a tensor onto its own
        memory): what a random-action collection uses to have the built-in envs' native
        step write its outputs, and the action spec its draws, in place
        (:func:`gpu_envs.rollout.loop.output_slots`, :func:`~gpu_envs.rollout.loop.action_slots`).
        None for a key the buffer does not hold, or before its layout is bound.
        """
        wanted = _key(key)
        index = next((i for i, (bound, _, _) in enumerate(self._layout or ()) if _key(bound) == wanted), None)
        if index is None:
            return None
        return [columns[index] for columns in self._columns]

    def storage(self) -> list[torch.Tensor]:
        """The ``[*B, T, ...]`` tensor of every key of :attr:`keys`, in that order."""
        return [self.data.get(key) for key in self.keys]

    def _mismatch(self, key: Any, value: Any, shape: torch.Size, dtype: torch.dtype) -> RolloutError:
        got = (
            "nothing"
            if value is None
            else (f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__)
        )
        return RolloutError(
            f"transition entry {key!r} is {got}, but this RolloutBuffer was laid out for {tuple(shape)} {dtype} by the first "
            "transition it received. Every step must produce the same keys, shapes and dtypes; use a new RolloutBuffer "
            "(or buffer=None) if the policy changed."
        )

    def _bind(self, td: TensorDictBase) -> None:
        nb, layout = self._nb, []
        for key in td.keys(include_nested=True, leaves_only=True, is_leaf=_is_leaf):
            value = td.get(key)
            if not isinstance(value, torch.Tensor) or is_non_tensor(type(value)):
                kind = (
                    type(getattr(value, "data", value)).__name__ if is_non_tensor(type(value)) else type(value).__name__
                )
                raise RolloutError(
                    f"transition entry {key!r} holds a {kind}; a RolloutBuffer stores tensors only. "
                    "Keep non-tensor data out of the TensorDict the policy returns."
                )
            if value.shape[:nb] != self.batch_size or value.device != self.device:
                raise RolloutError(
                    f"transition entry {key!r} has shape {tuple(value.shape)} on {value.device}; expected leading dims "
                    f"{tuple(self.batch_size)} on {self.device} (the env's batch size and device)."
                )
            have = self.data.get(key, None)
            want = (*self.batch_size, self.steps, *value.shape[nb:])
            if not isinstance(have, torch.Tensor) or have.shape != want or have.dtype != value.dtype:
                self.data.set(key, self._alloc(value.shape[nb:], value.dtype))
            layout.append((key, value.shape, value.dtype))
        wanted = {_key(k) for k, _, _ in layout}
        for key in list(self.data.keys(include_nested=True, leaves_only=True)):
            if _key(key) not in wanted:
                self.data.del_(key)
        self._layout = layout
        self._metadata = [(shape, dtype) for _, shape, dtype in layout]
        # each key as (index of its parent TensorDict, leaf name): one walk per parent per write
        self._parents = sorted({_key(key)[:-1] for key, _, _ in layout}, key=len)
        self._where = [(self._parents.index(_key(key)[:-1]), _key(key)[-1]) for key, _, _ in layout]
        self._columns = [[x.select(nb, t) for x in self.storage()] for t in range(self.steps)]
        self._words = []
        if self.device.type == "cpu":
            for i, (_, shape, dtype) in enumerate(layout):
                narrow = dtype.itemsize <= 2 and shape.numel() >= PARALLEL_COPY_ELEMENTS
                word = word_dtype(shape[nb:], dtype) if narrow else None
                if word is not None:
                    self._words.append((i, word))
        self._word_columns = self._columns
        if self._words:
            self._word_columns = [list(columns) for columns in self._columns]
            for columns in self._word_columns:
                for i, word in self._words:
                    columns[i] = _as_words(columns[i], nb, word)  # the buffer's own layout: always a view

    def __repr__(self) -> str:
        state = f"{len(self._layout)} keys" if self._layout is not None else "not yet written"
        return f"RolloutBuffer(batch={tuple(self.batch_size)}, steps={self.steps}, device={self.device}, {state})"
