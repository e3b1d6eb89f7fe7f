"""What recording episodes costs per step: RecordEpisodes on vs off, next to the floor of the work itself.

Built-in CartPole-v1 on the CPU at N in {256, 4096}, random actions, one
``step_and_maybe_reset`` per step through a ``TransformedEnv``:

* off: the TransformedEnv without a recorder;
* K=k: with ``RecordEpisodes`` filming k rows, every episode, frames 200 x 300 (and one
  row at gymnasium's full 400 x 600);
* every=10: one row, every 10th episode (the steps of the other episodes cost nothing);
* floor (K=1): the off step plus the least the same video needs: the renderer called on
  that row's next observation and the frame encoded straight into an mp4
  (``Mp4Stream``), no transform, no ring, no thread.

Each timed call is 32 steps followed by ``flush()`` (the encoder thread has caught up),
so the background encoding is charged to the recording contenders. Time is process CPU
time (all threads: the encoder's too), ``torch.set_num_threads(1)``, interleaved rounds,
medians. The recording cost does not grow with N: it is the K rows'.

    python benchmarks/bench_record.py --json benchmarks/results/record.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import gpu_envs
from benchmarks.timing import format_table, interleave, save_json
from gpu_envs.transforms import RecordEpisodes, TransformedEnv
from gpu_envs.utils.video import Mp4Stream

SIZES = (256, 4096)
CHUNK = 32  # steps per timed call, then a flush
SMALL = (200, 300)


def _stepper(env):
    td = env.reset()
    sample = env.action_spec.sampler(generator=env.generator)
    state = {"td": td}

    def step():
        state["td"]["action"] = sample()
        _, state["td"] = env.step_and_maybe_reset(state["td"])
        return state["td"]

    return step


def contenders(n: int, folder: Path) -> tuple[dict, list]:
    """The timed calls (32 steps each) and the recorders to close afterwards."""
    recorders, out = [], {}

    def recording(name, rows, size, every=1):
        env = gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=0)
        rec = RecordEpisodes.for_env(env, folder / name, rows=rows, every=every, size=size)
        recorders.append(rec)
        step = _stepper(TransformedEnv(env, rec))

        def call():
            for _ in range(CHUNK):
                step()
            rec.flush()

        return call

    plain = _stepper(TransformedEnv(gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=0)))

    def off():
        for _ in range(CHUNK):
            plain()

    out["off"] = off
    out["K=1"] = recording("k1", [0], SMALL)
    out["K=4"] = recording("k4", [0, 1, 2, 3], SMALL)
    out["K=1 every=10"] = recording("every10", [0], SMALL, every=10)
    out["K=1 400x600"] = recording("full", [0], None)

    env = gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=0)
    hook = env.backend.env.render_observations
    floor_step = _stepper(TransformedEnv(env))
    video = Mp4Stream(folder / "floor.mp4", fps=50)

    def floor():
        for _ in range(CHUNK):
            td = floor_step()
            video.add(hook(td["observation"][:1], *SMALL)[0].numpy())

    out["floor (K=1)"] = floor
    return out, [*recorders, video]


def run(quick: bool = False, sizes: tuple[int, ...] = SIZES, rounds: int | None = None) -> dict:
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            calls, closers = contenders(n, Path(tmp) / f"n{n}")
            times = interleave(calls, steps=1, rounds=rounds or (2 if quick else 7), warmup=1, timer=time.process_time)
            for closer in closers:
                closer.close() if hasattr(closer, "flush") else closer.abort()
            base = times["off"] / CHUNK
            for name, seconds in times.items():
                per_step = seconds / CHUNK
                rows.append(
                    {
                        "N": n,
                        "contender": name,
                        "us_per_step": round(per_step * 1e6, 1),
                        "added_us": "" if name == "off" else round((per_step - base) * 1e6, 1),
                        "vs_off": "" if name == "off" else f"{per_step / base:.2f}x",
                    }
                )
    columns = [
        ("N", "N"),
        ("contender", "contender"),
        ("us_per_step", "us/step"),
        ("added_us", "added us/step"),
        ("vs_off", "vs off"),
    ]
    return {
        "title": "RecordEpisodes cost per step (CPU, process CPU time incl. the encoder thread)",
        "rows": rows,
        "columns": columns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7)")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    result = run(args.quick, tuple(args.sizes), args.rounds)
    print(format_table(result["title"], result["rows"], result["columns"]))
    save_json(args.json, {"benchmark": "record", "device": "cpu", "rows": result["rows"]})


if __name__ == "__main__":
    main()
