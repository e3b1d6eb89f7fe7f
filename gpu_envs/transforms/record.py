"""``RecordEpisodes``: videos of whole episodes of K chosen rows, final frame included, every M episodes.

Thousands of robots train at once; a user wants to SEE a few of them, whole episodes,
not a viewport. ``RecordEpisodes`` is a transform: put it in a
:class:`~gpu_envs.transforms.TransformedEnv` and it films rows ``rows`` (K of them)::

    env = gpu_envs.make("CartPole-v1", num_envs=4096, device="cuda")
    rec = RecordEpisodes.for_env(env, "videos/", rows=[0, 1], every=10)
    env = TransformedEnv(env, rec)
    for _ in range(iterations):
        traj = collect(env, policy, steps=64)
    rec.close()                           # the last videos finish encoding
    print(rec.videos)                      # [videos/row0-episode0.mp4, videos/row1-episode0.mp4, ...]

What it records: episode ``e`` of a chosen row (counted from 0 since the transform was
set up) when ``e % every == 0``; its frames are the first observation (the root of its
first step) and the next observation of every step, so the LAST frame is the episode's
true final observation (what ``("next", obs)`` holds on the row that ended), not the
reset one. An episode interrupted by a reset is dropped. Where a backend cannot give a
final observation (``("next", "final_obs_missing")``) the video ends one frame earlier.

Where frames come from (``render=``):

* a callable ``obs -> uint8 [B, H, W, 3]`` taking a TensorDict of B rows' observation
  keys: :meth:`RecordEpisodes.for_env` finds the built-in envs' batched torch renderer
  (``env.render_observations``, :mod:`gpu_envs.builtin.render`), which draws only the
  recorded rows, on the device; a torch vector env of yours may define the same hook;
* the name of an image observation group (``uint8 [H, W, 3]`` or ``[3, H, W]``): a
  camera, or a gymnasium env's ``rgb_array`` render through
  ``gpu_envs.make(id, backend="gymnasium", from_pixels=True, pixels_only=False)``
  (gymnasium renders every sub-env then: that cost is the simulator's);
* a backend whose simulator draws its own frames from its state
  (:class:`~gpu_envs.contract.protocols.SimulatorFrames`: VMAS): :meth:`RecordEpisodes.for_env`
  picks it; the backend draws the filmed rows that end inside ``step``, before their
  reset, so the last frame is still the true final state, and the recorder draws the
  others between steps (on the host, whatever the device);
* ``None``: the lone image observation group, if there is one.

Frames are drawn from the observations this transform sees: put it before transforms
that change observations (``ObservationNorm``), i.e. nearer the env.

Cost: K rows rendered (2K frames: the step's input and its result) and copied to the
host per step, nothing for the other rows; no host sync on the device (the copy goes to
pinned memory without blocking and is read once it has landed); encoding runs on a
background thread, streaming each frame into the mp4, so memory does not grow with the
episode. ``benchmarks/bench_record.py`` measures it. Written with PyAV as H.264 mp4
(``pip install '.[video]'`` in the gpu_envs clone); with ``tensorboard=`` (a
``torch.utils.tensorboard.SummaryWriter`` or a log folder) each video is also added
as an animated image, if TensorBoard is installed (it is not a dependency).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDictBase

from gpu_envs.contract.errors import BackendError, InvalidArgumentError
from gpu_envs.contract.protocols import SimulatorFrames
from gpu_envs.transforms.base import EnvSpecs, Transform
from gpu_envs.utils.arguments import as_int, as_size
from gpu_envs.utils.video import require_av
from gpu_envs.utils.video_writer import VideoWriter

__all__ = ["RecordEpisodes"]

Render = Callable[[TensorDictBase], torch.Tensor]
DEFAULT_FPS = 30.0
RING_SLOTS = 32  # steps whose frames may be in flight to the host before one is waited for
_DEFAULT_NAME = "row{row}-episode{episode}.mp4"


@dataclass
class _Row:
    """The host's view of one recorded row."""

    index: int
    episode: int = -1  # the episode in progress (counted from 0); -1 before the first
    starting: bool = True  # the next step starts an episode
    video: int | None = None  # the writer's id of the episode being recorded, None when not recording


@dataclass
class _Slot:
    """One step's (or reset's) data on its way to the host: ring slot ``index``."""

    kind: str  # "step" or "reset"
    index: int
    event: Any = None  # a CUDA event recorded after the copies; None on the CPU


def _image_keys(specs: EnvSpecs) -> list[Any]:
    keys = []
    for key, spec in specs.observation_spec.items(include_nested=True, leaves_only=True):
        shape = tuple(spec.shape)
        if spec.dtype == torch.uint8 and len(shape) == 3 and (shape[-1] == 3 or shape[0] == 3):
            keys.append(key)
    return keys


class RecordEpisodes(Transform):
    """Record whole episodes of chosen rows as mp4 videos (see the module docstring).

    Args:
        path: a folder (videos named ``row{row}-episode{episode}.mp4`` in it) or an
            ``.mp4`` path, which may hold ``{row}`` and ``{episode}``; a path without
            them names one video (``max_videos`` is then 1).
        rows: the rows to film (K distinct indices in ``[0, num_envs)``), default row 0.
        every: record episodes 0, M, 2M, ... of each row (M = ``every`` >= 1).
        render: where frames come from: a callable, an image observation key, a backend
            with simulator frames, or None.
        fps: frames per second of the videos (default 30; :meth:`for_env` takes the env's).
        max_videos: stop recording after this many videos (None: never stop).
        tensorboard: a ``SummaryWriter`` or a log folder; each video is also added as an
            animated image (tag ``episodes/row{row}``, step = the episode), if TensorBoard
            is installed.

    Attributes:
        videos: paths of the videos written so far (complete files).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        rows: Sequence[int] = (0,),
        every: int = 1,
        render: Render | SimulatorFrames | str | None = None,
        fps: float | None = None,
        max_videos: int | None = None,
        tensorboard: Any = None,
    ) -> None:
        super().__init__()
        self.template, max_videos = _template(path, max_videos)
        self.rows = _rows(rows)
        _check_unique_names(self.template, self.rows, max_videos)
        _check_writable(self.template)  # a folder that cannot be written fails here, not in the middle of collect
        self._ready = False  # set up (setup() completed): flush/close have something to finish
        self.every = as_int(every, "every (record every M-th episode)", minimum=1)
        simulator = isinstance(render, SimulatorFrames)
        if render is not None and not simulator and not callable(render) and not isinstance(render, (str, tuple)):
            raise InvalidArgumentError(
                "render must be a callable obs -> uint8 [B, H, W, 3], an image observation key, a backend with "
                f"simulator frames (RecordEpisodes.for_env finds it) or None, got {type(render).__name__}."
            )
        self.render = render
        self._frame_size: tuple[int, int] | None = None  # simulator frames resized to (height, width); None: as drawn
        self.fps = DEFAULT_FPS if fps is None else float(fps)
        if not self.fps > 0:
            raise InvalidArgumentError(f"fps must be > 0, got {fps!r}.")
        self.max_videos = max_videos
        self.tensorboard = tensorboard
        self.videos: list[Path] = []
        require_av()  # a missing video library fails here, not after an hour of training

    @classmethod
    def for_env(
        cls, env: Any, path: str | os.PathLike, *, size: tuple[int, int] | None = None, **kwargs: Any
    ) -> RecordEpisodes:
        """A recorder whose frames and fps suit ``env``: its built-in renderer, else its image observation.

        ``size=(height, width)`` sets the built-in renderer's frame size (default:
        gymnasium's); a simulator's frames (VMAS) are resized to it. Other arguments are
        the constructor's.
        """
        backend = getattr(env, "backend", None)
        if kwargs.get("render") is None and isinstance(backend, SimulatorFrames):
            kwargs["render"] = backend
            recorder = cls(path, **kwargs)
            recorder._frame_size = None if size is None else as_size(size, "RecordEpisodes frame", minimum=2)
            return recorder
        raw = getattr(backend, "env", None)
        hook = getattr(raw, "render_observations", None)
        if kwargs.get("render") is None and callable(hook):
            keys = list(env.single_observation_spec.keys(include_nested=True, leaves_only=True))
            lone = keys[0] if len(keys) == 1 else None
            height, width = (None, None) if size is None else size

            def render(obs: TensorDictBase) -> torch.Tensor:
                return cast("torch.Tensor", hook(obs.get(lone) if lone is not None else obs, height, width))

            kwargs["render"] = render
            fps = getattr(raw, "render_fps", None) or getattr(raw, "metadata", {}).get("render_fps")
            kwargs.setdefault("fps", fps)
        return cls(path, **kwargs)

    # ------------------------------------------------------------------ setup
    row_state = None  # episodes in progress are frames on the host: a snapshot cannot hold them

    def setup(self, specs: EnvSpecs) -> EnvSpecs:
        specs = super().setup(specs)
        bad = [r for r in self.rows if not 0 <= r < specs.num_envs]
        if bad:
            raise InvalidArgumentError(
                f"RecordEpisodes rows {bad} are not rows of this env (num_envs={specs.num_envs})."
            )
        self._obs_keys = [key for key, _ in specs.observation_spec.items(include_nested=True, leaves_only=True)]
        self._simulator = self.render if isinstance(self.render, SimulatorFrames) else None
        self._pending: dict[int, np.ndarray] = {}  # simulator frames: the first frame of each row about to be filmed
        self._frames = self._frame_source(specs)
        self._index = torch.tensor(self.rows, dtype=torch.long, device=specs.device)
        self._host = [_Row(r) for r in self.rows]
        self._slots: list[_Slot] = []
        self._next_slot = 0
        self._ring: dict[str, torch.Tensor] | None = None  # allocated at the first step (the frame size)
        self._arrays: dict[str, np.ndarray] = {}
        self._writer = VideoWriter(self.fps, self.tensorboard, self.videos, "RecordEpisodes")
        self._started = 0  # videos begun
        self._active = True
        # on the CPU the host sees each step at once and renders only what videos take; on an
        # accelerator every chosen row is rendered and its frames reach the host asynchronously
        # (a simulator draws on the host, so its frames always take the host's way)
        self._host_knows = specs.device.type == "cpu" or self._simulator is not None
        self._ready = True
        return specs

    def _frame_source(self, specs: EnvSpecs) -> Render:
        render = self.render
        if isinstance(render, SimulatorFrames):
            return self._no_observation_frames
        if callable(render):
            return render
        keys = _image_keys(specs)
        if render is None:
            if len(keys) != 1:
                found = f"image observations {keys}" if keys else "no image observation"
                raise InvalidArgumentError(
                    f"RecordEpisodes needs frames, and this env has {found}. Use RecordEpisodes.for_env(env, ...) "
                    "(built-in envs and torch envs with render_observations), pass render=<image observation key>, "
                    "or render=<callable obs -> uint8 [B, H, W, 3]>; for a gymnasium env, make it with "
                    "from_pixels=True, pixels_only=False and pass render='pixels'."
                )
            render = keys[0]
        if render not in keys:
            raise InvalidArgumentError(
                f"render={render!r} is not an image observation (uint8 [H, W, 3] or [3, H, W]) of this env; its "
                f"image observations: {keys or 'none'}."
            )
        key = render

        def frames(obs: TensorDictBase) -> torch.Tensor:
            image = obs.get(key)
            return image.permute(0, 2, 3, 1) if image.shape[-1] != 3 else image

        return frames

    @staticmethod
    def _no_observation_frames(obs: TensorDictBase) -> torch.Tensor:
        raise BackendError("RecordEpisodes draws a simulator's frames from its state, not from observations.")

    # ------------------------------------------------------------- data hooks
    def step(self, td: TensorDictBase) -> TensorDictBase:
        if not self._active:
            return td
        if self._simulator is not None:
            self._step_from_simulator(td, self._simulator)
            return td
        if self._host_knows:
            self._step_on_host(td)
            return td
        nxt = td.get("next")
        index = self._index
        obs = cast(TensorDictBase, torch.cat([td.select(*self._obs_keys)[index], nxt.select(*self._obs_keys)[index]]))
        missing = nxt.get("final_obs_missing", None)
        data = {
            "frames": self._render(obs, 2 * len(self.rows)),
            "done": nxt.get("done").reshape(-1)[index],
            "missing": torch.zeros_like(index, dtype=torch.bool) if missing is None else missing.reshape(-1)[index],
        }
        self._send("step", data)
        return td

    def _step_on_host(self, td: TensorDictBase) -> None:
        """On the CPU the host knows every row's state at once: render only the frames a video takes."""
        nxt = td.get("next")
        index = self._index
        done = nxt.get("done").reshape(-1)[index].numpy()
        missing = nxt.get("final_obs_missing", None)
        missing = np.zeros_like(done) if missing is None else missing.reshape(-1)[index].numpy()
        then = self._filmed_rows()
        first = [j for j in then if self._host[j].starting]  # (a row with a video in progress is not starting)
        roots, nexts = {}, {}
        if then:
            pick = lambda rows: torch.tensor([self.rows[j] for j in rows], dtype=torch.long)  # noqa: E731
            parts = [td.select(*self._obs_keys)[pick(first)]] if first else []
            obs = cast(TensorDictBase, torch.cat([*parts, nxt.select(*self._obs_keys)[pick(then)]]))
            frames = self._render(obs, len(first) + len(then)).numpy()
            roots = {j: frames[i] for i, j in enumerate(first)}
            nexts = {j: frames[len(first) + i] for i, j in enumerate(then)}
        self._process(roots, nexts, done, missing)

    def _step_from_simulator(self, td: TensorDictBase, simulator: SimulatorFrames) -> None:
        """The simulator's frames: ended rows' drawn in ``step`` before their reset, the others' drawn now."""
        nxt = td.get("next")
        index = self._index
        done = nxt.get("done").reshape(-1)[index].cpu().numpy()
        missing = nxt.get("final_obs_missing", None)
        missing = np.zeros_like(done) if missing is None else missing.reshape(-1)[index].cpu().numpy()
        filmed = self._filmed_rows()
        roots = {j: self._pending.pop(j) for j in filmed if self._host[j].starting and j in self._pending}
        finals = simulator.final_frames
        lost = [self.rows[j] for j in filmed if done[j] and self.rows[j] not in finals]
        if lost:
            raise BackendError(
                f"the simulator drew no final frame for the filmed rows {lost} that ended: its keep_final_frames() "
                "was not honoured (was the backend stepped by another recorder?)."
            )
        nexts = {j: self._sized(finals[self.rows[j]][None])[0].numpy() for j in filmed if done[j]}
        live = [j for j in filmed if not done[j]]
        for j, frame in zip(live, self._simulator_frames(simulator, live), strict=True):
            nexts[j] = frame
        self._process(roots, nexts, done, missing)
        self._prepare_simulator(simulator)

    def _filmed_rows(self) -> list[int]:
        """The host rows whose next step is filmed: a video in progress, or a filmed episode about to begin."""
        return [
            j for j, row in enumerate(self._host) if row.video is not None or (row.starting and self._will_record(row))
        ]

    def _simulator_frames(self, simulator: SimulatorFrames, host_rows: list[int]) -> np.ndarray:
        if not host_rows:
            return np.empty((0, 0, 0, 3), dtype=np.uint8)
        frames = simulator.render_rows([self.rows[j] for j in host_rows])
        return self._sized(self._checked(frames, len(host_rows))).numpy()

    def _sized(self, frames: torch.Tensor) -> torch.Tensor:
        if self._frame_size is None or tuple(frames.shape[1:3]) == self._frame_size:
            return frames
        pixels = frames.permute(0, 3, 1, 2).float()
        resized = torch.nn.functional.interpolate(pixels, size=self._frame_size, mode="area")
        return resized.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()

    def _prepare_simulator(self, simulator: SimulatorFrames) -> None:
        """Between steps: draw the first frame of each filmed episode about to begin, and ask for the final ones."""
        if not self._active:
            simulator.keep_final_frames([])
            return
        filmed = self._filmed_rows()
        starting = [j for j in filmed if self._host[j].starting and j not in self._pending]
        for j, frame in zip(starting, self._simulator_frames(simulator, starting), strict=True):
            self._pending[j] = frame
        simulator.keep_final_frames([self.rows[j] for j in filmed])

    def reset(self, td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        """The reset rows' episodes in progress are interrupted: not recorded (rows that just ended are not affected)."""
        if not self._active:
            return td
        reset = mask.reshape(-1)[self._index]
        if self._host_knows:
            for j, (row, was_reset) in enumerate(zip(self._host, reset.cpu().numpy(), strict=True)):
                if was_reset:
                    self._drop(row)
                    self._pending.pop(j, None)  # drawn before this reset: not the new episode's first frame
            if self._simulator is not None:
                self._prepare_simulator(self._simulator)
        elif self._ring is not None:  # before the first step every row starts afresh anyway
            self._send("reset", {"reset": reset})
        return td

    def _render(self, obs: TensorDictBase, count: int) -> torch.Tensor:
        return self._checked(self._frames(obs), count)

    @staticmethod
    def _checked(frames: torch.Tensor, count: int) -> torch.Tensor:
        if (
            not isinstance(frames, torch.Tensor)
            or frames.dtype != torch.uint8
            or frames.dim() != 4
            or frames.shape[0] != count
            or frames.shape[-1] != 3
        ):
            got = f"{frames.dtype} {tuple(frames.shape)}" if isinstance(frames, torch.Tensor) else type(frames).__name__
            raise InvalidArgumentError(
                f"RecordEpisodes' render must return uint8 [{count}, H, W, 3] frames for {count} rows, got {got}."
            )
        return frames

    # ------------------------------------------------------------ to the host
    def _send(self, kind: str, data: dict[str, torch.Tensor]) -> None:
        """Copy ``data`` into the next ring slot (without blocking on CUDA), then take in what has landed."""
        if self._ring is None:
            self._allocate(data)
        if len(self._slots) == RING_SLOTS:
            self._take(self._slots[0], wait=True)  # the host is a whole ring ahead: wait for the oldest
        slot = self._next_slot
        self._next_slot = (slot + 1) % RING_SLOTS
        cuda = self.device.type == "cuda"
        for name, value in data.items():
            cast("dict[str, torch.Tensor]", self._ring)[name][slot].copy_(value, non_blocking=cuda)  # allocated above
        event = None
        if cuda:  # recorded on the env device's stream, where the copies were queued
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.device))
        self._slots.append(_Slot(kind, slot, event))
        self._drain(wait=False)

    def _allocate(self, data: dict[str, torch.Tensor]) -> None:
        pin = self.device.type == "cuda"
        ring = {}
        shapes = {"frames": data["frames"], "done": data["done"], "missing": data["done"], "reset": data["done"]}
        for name, like in shapes.items():
            ring[name] = torch.empty((RING_SLOTS, *like.shape), dtype=like.dtype, pin_memory=pin)
        self._ring = ring
        self._arrays = {name: value.numpy() for name, value in ring.items()}  # the host reads numpy views

    def _drain(self, wait: bool) -> None:
        while self._slots and (wait or self._slots[0].event is None or self._slots[0].event.query()):
            self._take(self._slots[0], wait=wait)

    def _take(self, slot: _Slot, wait: bool) -> None:
        if slot.event is not None and wait:
            slot.event.synchronize()
        self._slots.pop(0)
        i = slot.index
        if slot.kind == "reset":
            for j, row in enumerate(self._host):
                if self._arrays["reset"][i][j]:
                    self._drop(row)
            return
        frames, k = self._arrays["frames"][i], len(self._host)
        roots = {j: frames[j] for j in range(k)}
        nexts = {j: frames[k + j] for j in range(k)}
        self._process(roots, nexts, self._arrays["done"][i], self._arrays["missing"][i])

    def _process(self, roots: dict, nexts: dict, done: np.ndarray, missing: np.ndarray) -> None:
        """One step on the host: start, continue and end each row's episode; frames go to the writer."""
        for j, row in enumerate(self._host):
            if row.starting:
                self._begin(row, roots.get(j))
            if row.video is not None and not (done[j] and missing[j]):
                self._writer.frame(row.video, nexts[j])
            if done[j]:
                if row.video is not None:
                    self._writer.end(row.video)
                    row.video = None
                row.starting = True
        if (
            self.max_videos is not None
            and self._started >= self.max_videos
            and all(r.video is None for r in self._host)
        ):
            self._active = False  # nothing more to record: no more rendering

    def _will_record(self, row: _Row) -> bool:
        """Whether the episode this (starting) row begins next is filmed."""
        budget = self.max_videos is None or self._started < self.max_videos
        return budget and (row.episode + 1) % self.every == 0

    def _begin(self, row: _Row, first: np.ndarray | None) -> None:
        record = self._will_record(row)
        row.episode += 1
        row.starting = False
        if not record:
            return
        if first is None:  # every filmed row's first frame is rendered (roots holds it)
            raise BackendError(f"RecordEpisodes has no first frame for row {row.index}'s filmed episode {row.episode}.")
        path = Path(self.template.format(row=row.index, episode=row.episode))
        row.video = self._writer.begin(path, f"episodes/row{row.index}", row.episode)
        self._started += 1
        self._writer.frame(row.video, first)

    def _drop(self, row: _Row) -> None:
        """The row was reset: its episode in progress is interrupted, not recorded."""
        if row.video is not None:
            self._writer.abort(row.video)
            self._started -= 1
            row.video = None
        if not row.starting:
            row.starting = True

    # -------------------------------------------------------------- lifecycle
    def flush(self) -> list[Path]:
        """Take in every step sent so far and wait until every ended episode's video is written; the videos."""
        self.check_bound("flush()")
        if not self._ready:  # its setup failed: nothing was recorded
            return list(self.videos)
        self._drain(wait=True)
        self._writer.wait()
        return list(self.videos)

    def close(self) -> list[Path]:
        """:meth:`flush`, then stop recording; an episode still running is not written. Returns the videos."""
        if not getattr(self, "_bound", False) or not self._ready:  # never set up, or its setup failed: nothing to stop
            return list(self.videos)
        self._drain(wait=True)
        for row in self._host:
            if row.video is not None:
                self._writer.abort(row.video)
                row.video = None
        self._active = False
        if self._simulator is not None:
            self._simulator.keep_final_frames([])  # the simulator stops drawing for this recorder
        self._writer.close()
        return list(self.videos)

    def __repr__(self) -> str:
        return f"RecordEpisodes({self.template!r}, rows={list(self.rows)}, every={self.every})"


def _template(path: Any, max_videos: int | None) -> tuple[str, int | None]:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise InvalidArgumentError(f"path must be a folder or an .mp4 path, got {path!r}.")
    if max_videos is not None:
        max_videos = as_int(max_videos, "max_videos (or None)", minimum=1)
    text = os.fspath(path)
    if not text.endswith(".mp4"):
        return os.path.join(text, _DEFAULT_NAME), max_videos
    fields = set(re.findall(r"{(\w*)}", text))
    if fields - {"row", "episode"}:
        raise InvalidArgumentError(
            f"path {text!r} may hold only the fields {{row}} and {{episode}}, got {sorted(fields)}."
        )
    if not fields:
        if max_videos not in (None, 1):
            raise InvalidArgumentError(
                f"path {text!r} names one video, but max_videos={max_videos}: put {{row}} and {{episode}} in the name, "
                "or give a folder."
            )
        return text.replace("{", "{{").replace("}", "}}"), 1
    return text, max_videos


def _check_unique_names(template: str, rows: tuple[int, ...], max_videos: int | None) -> None:
    """Refuse a name template that would give two videos one file (each would overwrite the last)."""
    fields = set(re.findall(r"{(\w*)}", template))
    if fields == set():
        return  # one named video (max_videos is 1)
    if "row" not in fields and len(rows) > 1:
        raise InvalidArgumentError(
            f"path {template!r} has no {{row}}, but {len(rows)} rows are recorded: their episodes would share file "
            "names and overwrite each other. Put {row} in the name (e.g. 'videos/row{row}-episode{episode}.mp4')."
        )
    if "episode" not in fields and max_videos != 1:
        raise InvalidArgumentError(
            f"path {template!r} has no {{episode}}, but a row may record several episodes: its videos "
            "would share a file name and overwrite each other. Put {episode} in the name, or pass max_videos=1."
        )


def _check_writable(template: str) -> None:
    """The videos' folder (its part without {row}/{episode} fields) exists or can be made, and can be written."""
    folder = Path(template).parent
    while "{" in str(folder):
        folder = folder.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InvalidArgumentError(
            f"RecordEpisodes cannot make the folder {str(folder)!r} for its videos: {err}."
        ) from err
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidArgumentError(
            f"RecordEpisodes cannot write videos into {str(folder)!r} (no write permission); choose another path."
        )


def _rows(rows: Any) -> tuple[int, ...]:
    if hasattr(rows, "__index__") and not isinstance(rows, bool) and not hasattr(rows, "__len__"):
        rows = (as_int(rows, "rows"),)  # one row (numpy integers count)
    try:
        values = tuple(cast("Iterable[Any]", rows))  # a non-iterable is refused below
    except TypeError:
        values = None
    if not values or any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) for r in values):
        raise InvalidArgumentError(f"rows must be a non-empty sequence of row indices, got {rows!r}.")
    values = tuple(int(r) for r in values)
    if len(set(values)) != len(values):
        raise InvalidArgumentError(f"rows must be distinct, got {list(values)}.")
    return values
