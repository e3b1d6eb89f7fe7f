"""Film whole episodes of chosen rows while thousands of envs run: RecordEpisodes on the built-in envs.

Runs CartPole-v1 and Pendulum-v1 with random actions, filming env 0's first episodes
(first frame to the true final one) into mp4 files, and writes one PNG showing the
final frame of the CartPole episode next to a Pendulum frame (the picture in the
README, docs/recorded_frames.png). Needs the video extra: ``pip install '.[video]'`` in the gpu_envs clone.

    python examples/record_video.py --out videos/ --png docs/recorded_frames.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import gpu_envs
from gpu_envs.rollout import collect
from gpu_envs.transforms import RecordEpisodes, TransformedEnv


def record(env_id: str, out: Path, num_envs: int, steps: int, seed: int, **kwargs) -> list[Path]:
    """Film env 0's episodes of ``env_id`` (random actions) into ``out``; the finished videos."""
    env = gpu_envs.make(env_id, num_envs=num_envs, device=kwargs.pop("device", None), seed=seed, **kwargs)
    recorder = RecordEpisodes.for_env(env, out / f"{env_id}-row{{row}}-episode{{episode}}.mp4", rows=[0], max_videos=1)
    with TransformedEnv(env, recorder) as recorded:
        recorded.reset()
        collect(recorded, steps=steps)
    return recorder.close()


def decode(path: Path) -> np.ndarray:
    """The frames of an mp4, ``uint8 [T, H, W, 3]``."""
    import av

    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])


def write_png(path: Path, image: np.ndarray) -> Path:
    """``image`` (``uint8 [H, W, 3]``) as a PNG, with PyAV's PNG encoder (no other image library)."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w", format="image2") as container:
        stream = container.add_stream("png", rate=1)
        stream.width, stream.height, stream.pix_fmt = image.shape[1], image.shape[0], "rgb24"
        container.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")))
        container.mux(stream.encode())
    return path


def side_by_side(*images: np.ndarray, gap: int = 8) -> np.ndarray:
    """Images next to each other on white, top-aligned."""
    height = max(i.shape[0] for i in images)
    columns = []
    for i, image in enumerate(images):
        padded = np.full((height, image.shape[1], 3), 255, dtype=np.uint8)
        padded[: image.shape[0]] = image
        columns.append(padded)
        if i < len(images) - 1:
            columns.append(np.full((height, gap, 3), 200, dtype=np.uint8))
    return np.concatenate(columns, axis=1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("videos"), help="folder of the mp4 files")
    parser.add_argument(
        "--png", type=Path, default=None, help="also write the final CartPole frame and a Pendulum frame here"
    )
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--device", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cartpole = record("CartPole-v1", args.out, args.num_envs, 200, args.seed, device=args.device)
    pendulum = record("Pendulum-v1", args.out, args.num_envs, 210, args.seed, device=args.device)
    for video in cartpole + pendulum:
        print(f"wrote {video} ({len(decode(video))} frames)")
    result = {"videos": cartpole + pendulum}
    if args.png is not None:
        frames = decode(pendulum[0])
        image = side_by_side(decode(cartpole[0])[-1], frames[len(frames) // 3])
        result["png"] = write_png(args.png, image)
        print(f"wrote {args.png}")
    return result


if __name__ == "__main__":
    main()
