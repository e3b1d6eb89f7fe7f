"""Videos written on a background thread: frames streamed into mp4 files, and TensorBoard GIFs.

The recorder (:class:`~gpu_envs.transforms.RecordEpisodes`) decides what is filmed; this
module only writes. :class:`VideoWriter` takes messages on a bounded queue (a full queue
makes the caller wait: no frame is dropped), keeps one open :class:`~gpu_envs.utils.video.Mp4Stream`
per episode, and raises an encoding error at the caller's next call.

Example (PyAV installed: the ``[video]`` extra):

>>> import tempfile
>>> from pathlib import Path
>>> import numpy as np
>>> from gpu_envs.utils.video_writer import VideoWriter
>>> done: list = []
>>> writer = VideoWriter(fps=10, tensorboard=None, done=done, owner="MyRecorder")
>>> video = writer.begin(Path(tempfile.mkdtemp()) / "episode.mp4", "episodes/row0", 0)
>>> for _ in range(3):
...     writer.frame(video, np.zeros((16, 16, 3), np.uint8))
>>> writer.end(video)
>>> writer.close()                # waits for the file
>>> [path.name for path in done]
['episode.mp4']
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from gpu_envs.contract.errors import BackendError, InvalidArgumentError
from gpu_envs.utils.video import Mp4Stream, add_gif_summary

__all__ = ["VideoWriter"]

_GIF_SIDE = 160  # TensorBoard GIFs are downscaled to this longer side (their frames are kept until the end)


class VideoWriter:
    """A background thread streaming frames into mp4 files (one open file per recorded episode).

    Args:
        fps: frames per second of every video.
        tensorboard: None, a ``SummaryWriter`` or a log folder (each finished video also
            goes there as an animated image).
        done: the list each finished video's path is appended to.
        owner: named in errors ("RecordEpisodes could not write a video: ...").
    """

    def __init__(self, fps: float, tensorboard: Any, done: list[Path], owner: str) -> None:
        self.fps, self.done, self.owner = fps, done, owner
        self.board = _board(tensorboard, owner)
        self.queue: queue.Queue = queue.Queue(maxsize=256)  # full: the caller waits (frames are not dropped)
        self.error: BaseException | None = None
        self.ids = 0
        self.thread: threading.Thread | None = None

    def _raise_error(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise BackendError(f"{self.owner} could not write a video: {type(error).__name__}: {error}") from error

    def _put(self, message: tuple) -> None:
        self._raise_error()
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name=f"gpu_envs-{self.owner}", daemon=True)
            self.thread.start()
        self.queue.put(message)

    def begin(self, path: Path, tag: str, step: int) -> int:
        self.ids += 1
        self._put(("begin", self.ids, path, tag, step))
        return self.ids

    def frame(self, video: int, image: np.ndarray) -> None:
        self._put(("frame", video, np.array(image)))  # a copy: the ring slot is reused

    def end(self, video: int) -> None:
        self._put(("end", video))

    def abort(self, video: int) -> None:
        self._put(("abort", video))

    def wait(self) -> None:
        if self.thread is not None:
            self.queue.join()
        self._raise_error()

    def close(self) -> None:
        self.wait()
        if self.thread is not None:
            self.queue.put(("stop",))
            self.thread.join(timeout=60)
            self.thread = None

    def _run(self) -> None:
        open_: dict[int, _Video] = {}
        while True:
            message = self.queue.get()
            try:
                kind = message[0]
                if kind == "stop":
                    for video in open_.values():
                        video.abort()
                    return
                if kind == "begin":
                    _, video, path, tag, step = message
                    open_[video] = _Video(path, self.fps, tag, step, self.board is not None)
                elif kind == "frame":
                    if message[1] in open_:
                        open_[message[1]].add(message[2])
                elif kind == "end":
                    video = open_.pop(message[1], None)
                    if video is not None:
                        self.done.append(video.finish(self.board))
                elif kind == "abort":
                    video = open_.pop(message[1], None)
                    if video is not None:
                        video.abort()
            except BaseException as err:  # raised to the caller at its next call
                self.error = err
                for video in open_.values():
                    with contextlib.suppress(Exception):
                        video.abort()
                open_.clear()
            finally:
                self.queue.task_done()


def _board(tensorboard: Any, owner: str) -> Any:
    if tensorboard is None:
        return None
    if isinstance(tensorboard, (str, os.PathLike)):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            warnings.warn(
                f"{owner}(tensorboard=...) needs TensorBoard (pip install tensorboard); videos go to mp4 only.",
                stacklevel=3,
            )
            return None
        return SummaryWriter(os.fspath(tensorboard))
    if not hasattr(tensorboard, "file_writer") and not hasattr(tensorboard, "_get_file_writer"):
        raise InvalidArgumentError(
            f"tensorboard must be a torch.utils.tensorboard.SummaryWriter or a log folder, got {type(tensorboard).__name__}."
        )
    return tensorboard


class _Video:
    """One episode's mp4 being written (and its TensorBoard GIF frames, when a board is given)."""

    def __init__(self, path: Path, fps: float, tag: str, step: int, keep_for_gif: bool) -> None:
        self.mp4 = Mp4Stream(path, fps)
        self.fps, self.tag, self.step = fps, tag, step
        self.gif: list[np.ndarray] | None = [] if keep_for_gif else None

    def add(self, image: np.ndarray) -> None:
        self.mp4.add(image)
        if self.gif is not None:
            step = max(1, -(-max(image.shape[:2]) // _GIF_SIDE))
            self.gif.append(image[::step, ::step])

    def finish(self, board: Any) -> Path:
        path = self.mp4.finish()
        if board is not None and self.gif:
            add_gif_summary(board, self.tag, np.stack(self.gif), self.step, self.fps)
            board.flush()
        return path

    def abort(self) -> None:
        self.mp4.abort()
