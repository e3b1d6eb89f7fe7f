"""gpu_envs' image transforms against torchrl's, on the same batch of frames, one call each.

A batch of uint8 frames ``[N, 84, 84, 3]`` (N in {64, 1024}) in a TensorDict, on the CPU; each
contender maps it once per call, the same work on both sides:

* to float, channels first: ``Permute("HWC", "CHW")`` + ``ToFloat()`` vs torchrl's ``ToTensorImage``;
* grayscale of float ``[N, 3, 84, 84]`` frames: ``Grayscale(layout="CHW")`` vs torchrl's ``GrayScale``;
* resize to 42 x 42 and a 64 x 64 centre crop (gpu_envs only where torchrl's need torchvision,
  which does not import beside this torch build: the row says so).

gpu_envs' transforms are called through their ``root`` hook (what a TransformedEnv runs on a
root); torchrl's through ``transform(td)``. Time is thread CPU time (``time.thread_time``),
``torch.set_num_threads(1)``, interleaved rounds, medians; the ratio column is torchrl's time
over gpu_envs' (above 1: gpu_envs is faster).

    python benchmarks/bench_image_transforms.py --json benchmarks/results/image_transforms.json
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: our benchmarks package, not torchrl's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from tensordict import TensorDict

from benchmarks.timing import bench_result, format_table, interleave, save_json
from gpu_envs.contract.specs import Box, Composite
from gpu_envs.transforms import CenterCrop, Grayscale, Permute, Resize, ToFloat, Transform
from gpu_envs.transforms.base import EnvSpecs

SIZES = (64, 1024)


def bound(
    n: int, shape: tuple[int, ...], dtype: torch.dtype, *transforms: Transform
) -> Callable[[TensorDict], TensorDict]:
    """``transforms`` set up on an ``n``-row env of ``pixels`` frames, applied in order through ``root``."""
    specs = EnvSpecs(n, torch.device("cpu"), Composite(pixels=Box(0, 255, shape, dtype)), Box(-1, 1, (1,)),
                     Box(-1, 1, (1,)), Composite(), Composite())  # fmt: skip
    for t in transforms:
        specs = t.setup(specs)

    def apply(td: TensorDict) -> TensorDict:
        for t in transforms:
            td = t.root(td)
        return td

    return apply


def contenders(n: int) -> dict[str, dict[str, Callable[[], object]]]:
    """``{work: {"gpu_envs": call, "torchrl": call or absent}}`` on fresh copies of one batch."""
    frames = torch.randint(0, 256, (n, 84, 84, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    chw = frames.permute(0, 3, 1, 2).float() / 255
    to_float = bound(n, (84, 84, 3), torch.uint8, Permute("HWC", "CHW"), ToFloat())
    gray = bound(n, (3, 84, 84), torch.float32, Grayscale(layout="CHW"))
    resize = bound(n, (84, 84, 3), torch.uint8, Resize(size=42))
    crop = bound(n, (84, 84, 3), torch.uint8, CenterCrop(size=64))
    work: dict[str, dict[str, Callable[[], object]]] = {
        "to float, CHW": {"gpu_envs": lambda: to_float(TensorDict({"pixels": frames}, [n]))},
        "grayscale": {"gpu_envs": lambda: gray(TensorDict({"pixels": chw}, [n]))},
        "resize 42x42": {"gpu_envs": lambda: resize(TensorDict({"pixels": frames}, [n]))},
        "centre crop 64x64": {"gpu_envs": lambda: crop(TensorDict({"pixels": frames}, [n])).get("pixels").contiguous()},
    }
    if importlib.util.find_spec("torchrl") is not None:
        from torchrl.envs.transforms import GrayScale, ToTensorImage

        theirs_float = ToTensorImage(in_keys=["pixels"])
        theirs_gray = GrayScale(in_keys=["pixels"])
        work["to float, CHW"]["torchrl"] = lambda: theirs_float(TensorDict({"pixels": frames}, [n]))
        work["grayscale"]["torchrl"] = lambda: theirs_gray(TensorDict({"pixels": chw}, [n]))
        if torchvision_works():
            from torchrl.envs.transforms import CenterCrop as TheirCrop
            from torchrl.envs.transforms import Resize as TheirResize

            theirs_resize, theirs_crop = TheirResize(42, 42, in_keys=["pixels"]), TheirCrop(64, in_keys=["pixels"])
            work["resize 42x42"]["torchrl"] = lambda: theirs_resize(TensorDict({"pixels": chw}, [n]))
            work["centre crop 64x64"]["torchrl"] = lambda: theirs_crop(TensorDict({"pixels": chw}, [n]))
    return work


def torchvision_works() -> bool:
    """torchrl's Resize and CenterCrop call torchvision; PyPI's build fails to import beside some torch builds."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # ImportError, or its operator registration failing beside this torch
        return False
    return True


def check_same(n: int = 8) -> None:
    """Both sides compute the same values (to float; grayscale to float rounding) before anything is timed."""
    work = contenders(n)
    for name in ("to float, CHW", "grayscale"):
        if "torchrl" in work[name]:
            ours, theirs = work[name]["gpu_envs"]()["pixels"], work[name]["torchrl"]()["pixels"]  # type: ignore[index]
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5, msg=f"{name}: different values")


def run(quick: bool = False, sizes: tuple[int, ...] = SIZES, rounds: int | None = None) -> dict:
    torch.set_num_threads(1)
    check_same()
    rows = []
    for n in sizes:
        for name, sides in contenders(n).items():
            times = interleave(sides, steps=3 if quick else 20, rounds=rounds or (2 if quick else 11))
            row = {"work": name, "num_envs": n, "gpu_envs_us": round(times["gpu_envs"] * 1e6, 1)}
            if "torchrl" in times:
                row["torchrl_us"] = round(times["torchrl"] * 1e6, 1)
                row["ratio"] = f"{times['torchrl'] / times['gpu_envs']:.2f}x"
            else:
                row["torchrl_us"] = "not timed: torchrl's needs torchvision, which does not import here"
            rows.append(row)
    columns = [("work", "work"), ("num_envs", "N"), ("gpu_envs_us", "gpu_envs us"), ("torchrl_us", "torchrl us"),
               ("ratio", "torchrl / gpu_envs")]  # fmt: skip
    return bench_result("image transforms on uint8 [N, 84, 84, 3] frames (thread CPU time, medians)", rows, columns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = run(args.quick, tuple(args.sizes), args.rounds)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "image_transforms", "device": "cpu", "rows": result["rows"]})


if __name__ == "__main__":
    main()
