"""Frames to video files: mp4 (H.264) with PyAV, and animated GIF summaries for TensorBoard.

PyAV (``pip install '.[video]'`` in the gpu_envs clone) encodes in-process with the FFmpeg it bundles;
nothing is spawned. Frames are ``uint8 [T, H, W, 3]`` RGB (a torch tensor on any device,
or a numpy array); an odd height or width is padded by one edge pixel, which the
``yuv420p`` H.264 profile every player reads requires. TensorBoard is optional: a GIF is
written as an image summary, which TensorBoard's Images tab plays (what
``SummaryWriter.add_video`` does, without its moviepy dependency).

Example::

    write_mp4("episode.mp4", frames, fps=50)
    add_gif_summary(writer, "episodes/row0", frames, step=10, fps=50)
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from gpu_envs.contract.errors import InvalidArgumentError, MissingComponentError

__all__ = ["VIDEO_EXTRA", "Mp4Stream", "add_gif_summary", "gif_bytes", "require_av", "to_frames", "write_mp4"]

VIDEO_EXTRA = "pip install '.[video]' in the gpu_envs clone"


def require_av() -> Any:
    """The ``av`` module, or a clear error naming the install."""
    try:
        import av
    except ModuleNotFoundError as err:
        raise MissingComponentError(f"writing videos needs PyAV, which is not installed: {VIDEO_EXTRA}.") from err
    return av


def to_frames(frames: Any) -> np.ndarray:
    """``uint8 [T, H, W, 3]`` numpy frames, even-sized (edge-padded), from a tensor or an array."""
    if hasattr(frames, "detach"):
        frames = frames.detach().cpu().numpy()
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or frames.shape[0] < 1:
        raise InvalidArgumentError(
            f"video frames must be uint8 [T, H, W, 3] RGB with T >= 1, got {frames.dtype} {tuple(frames.shape)}."
        )
    pad_h, pad_w = frames.shape[1] % 2, frames.shape[2] % 2
    if pad_h or pad_w:
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    return np.ascontiguousarray(frames)


def _codec(av: Any) -> str:
    for name in ("libx264", "h264", "mpeg4"):
        try:
            av.codec.Codec(name, "w")
        except Exception:
            continue
        return name
    raise MissingComponentError(f"this PyAV build has no H.264 or MPEG-4 encoder; reinstall it: {VIDEO_EXTRA}.")


class Mp4Stream:
    """An mp4 written frame by frame (memory does not grow with the video), under ``path + ".partial"``
    until :meth:`finish` renames it, so an unfinished video never looks like a finished one.

    Example::

        video = Mp4Stream("episode.mp4", fps=50)
        for frame in frames:          # uint8 [H, W, 3] each, all the same size
            video.add(frame)
        video.finish()                # or video.abort(): no file left behind
    """

    def __init__(self, path: str | Path, fps: float) -> None:
        if not fps > 0:
            raise InvalidArgumentError(f"fps must be > 0, got {fps!r}.")
        self.av = require_av()
        self.path, self.fps = Path(path), fps
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.container: Any = None
        self.stream: Any = None
        self.frames = 0

    def add(self, image: Any) -> None:
        """Encode one ``uint8 [H, W, 3]`` frame."""
        image = to_frames(np.asarray(image)[None])[0]
        av = self.av
        if self.container is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.container = av.open(str(self.partial), mode="w", format="mp4")
            self.stream = self.container.add_stream(_codec(av), rate=round(self.fps))
            self.stream.width, self.stream.height = image.shape[1], image.shape[0]
            self.stream.pix_fmt = "yuv420p"
        elif (image.shape[1], image.shape[0]) != (self.stream.width, self.stream.height):
            raise InvalidArgumentError(
                f"frame {self.frames} is {image.shape[1]} x {image.shape[0]}, the video {self.stream.width} x {self.stream.height}."
            )
        self.container.mux(self.stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        self.frames += 1

    def finish(self) -> Path:
        """Flush the encoder, close the file and give it its name; returns the path."""
        if self.container is None:
            raise InvalidArgumentError(f"no frame was added to {self.path}.")
        self.container.mux(self.stream.encode())
        self.container.close()
        os.replace(self.partial, self.path)
        return self.path

    def abort(self) -> None:
        """Close and delete the unfinished file."""
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.partial)


def write_mp4(path: str | Path, frames: Any, fps: float) -> Path:
    """Encode ``frames`` (``uint8 [T, H, W, 3]``) as an H.264 mp4 at ``fps`` frames per second; returns the path."""
    data = to_frames(frames)
    video = Mp4Stream(path, fps)
    try:
        for image in data:
            video.add(image)
        return video.finish()
    except BaseException:
        video.abort()
        raise


def gif_bytes(frames: Any, fps: float) -> bytes:
    """``frames`` as an animated GIF (looping), for a TensorBoard image summary."""
    av = require_av()
    data = to_frames(frames)
    out = io.BytesIO()
    with av.open(out, mode="w", format="gif", options={"loop": "0"}) as container:
        stream = container.add_stream("gif", rate=max(1, round(fps)))
        stream.width, stream.height = data.shape[2], data.shape[1]
        stream.pix_fmt = "rgb8"
        for image in data:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    return out.getvalue()


def add_gif_summary(writer: Any, tag: str, frames: Any, step: int, fps: float) -> None:
    """Add ``frames`` to a ``torch.utils.tensorboard.SummaryWriter`` as an animated image under ``tag``."""
    # protobuf builds Summary at import time: the checker cannot see it in the generated module
    from tensorboard.compat.proto.summary_pb2 import Summary  # pyright: ignore[reportAttributeAccessIssue]

    data = to_frames(frames)
    image = Summary.Image(
        height=data.shape[1], width=data.shape[2], colorspace=3, encoded_image_string=gif_bytes(data, fps)
    )
    writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
