"""Replay throughput: gpu_envs' ReplayBuffer vs torchrl's TensorDictReplayBuffer + MultiStepTransform.

One off-policy iteration = ``extend`` with the newest transitions of ``N`` envs, then
``sample`` a batch with 3-step targets (gamma 0.99). Both buffers get the same stream of
Pendulum-v1 transitions (collected beforehand, so env stepping is not timed), the same
capacity (in transitions) and the same batch size:

* torchrl: ``TensorDictReplayBuffer(storage=LazyTensorStorage(capacity, ndim=...),
  transform=MultiStepTransform(3, 0.99), batch_size=B)``, the documented way to get
  n-step targets from a replay buffer (the transform keeps the last steps and rewrites
  rewards and next observations at extend time);
* gpu_envs: ``ReplayBuffer(capacity)``; ``sample(B, n_step=3, gamma=0.99)`` builds the
  targets at sample time.

Two layouts: FastTD3-style one step per iteration (``[N, 1]``; torchrl with ``ndim=1``) and
``collect``'s ``[N, 16]`` (torchrl with ``ndim=2``, its layout for trajectories). Timed
as the other benchmarks are: thread CPU time on one torch thread, contenders interleaved,
medians (benchmarks/timing.py). The target is gpu_envs >= 2x torchrl.

Run::

    python -m benchmarks.bench_replay
    python -m benchmarks.bench_replay --quick --json benchmarks/results/replay.json
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterator

import torch

import gpu_envs
from benchmarks.timing import format_table, interleave, save_json
from gpu_envs.replay import ReplayBuffer
from gpu_envs.rollout import collect

N_STEP, GAMMA, CAPACITY = 3, 0.99, 200_000
# (num_envs, steps per extend, batch size)
CASES = [(256, 1, 1024), (4096, 1, 8192), (256, 16, 4096), (4096, 16, 8192)]
QUICK_CASES = [(64, 1, 256), (64, 16, 256)]


def stream(num_envs: int, steps: int, count: int) -> Iterator:
    """An endless cycle of ``count`` consecutive ``[N, steps]`` Pendulum-v1 trajectories."""
    env = gpu_envs.make("Pendulum-v1", num_envs=num_envs, device="cpu", seed=0)
    chunks = [collect(env, None, steps=steps).clone() for _ in range(count)]
    while True:
        yield from chunks


def gpu_envs_iteration(num_envs: int, steps: int, batch: int) -> Callable[[], object]:
    rb, data = ReplayBuffer(CAPACITY), stream(num_envs, steps, 8)
    generator = torch.Generator().manual_seed(0)
    for _ in range(4):
        rb.extend(next(data))

    def iteration() -> object:
        rb.extend(next(data))
        return rb.sample(batch, n_step=N_STEP, gamma=GAMMA, generator=generator)

    return iteration


def torchrl_iteration(num_envs: int, steps: int, batch: int) -> Callable[[], object]:
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.envs import MultiStepTransform

    logging.getLogger("torchrl").setLevel(logging.WARNING)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(CAPACITY, ndim=1 if steps == 1 else 2),
        transform=MultiStepTransform(N_STEP, GAMMA),
        batch_size=batch,
    )
    data = stream(num_envs, steps, 8)
    for _ in range(4):
        rb.extend(next(data))

    def iteration() -> object:
        rb.extend(next(data))
        return rb.sample()

    return iteration


def run(quick: bool = False) -> dict:
    torch.set_num_threads(1)
    rows = []
    for num_envs, steps, batch in QUICK_CASES if quick else CASES:
        contenders = {
            "gpu_envs": gpu_envs_iteration(num_envs, steps, batch),
            "torchrl": torchrl_iteration(num_envs, steps, batch),
        }
        times = interleave(contenders, steps=5 if quick else 20, rounds=3 if quick else 11)
        ratio = times["torchrl"] / times["gpu_envs"]
        rows.append(
            {
                "case": f"N={num_envs} extend [N, {steps}] + sample {batch}",
                "gpu_envs_us": round(times["gpu_envs"] * 1e6),
                "torchrl_us": round(times["torchrl"] * 1e6),
                "speedup": f"{ratio:.2f}x",
                "target": "met" if ratio >= 2 else "NOT met",
            }
        )
    return {
        "title": f"replay iteration (extend + {N_STEP}-step sample), capacity {CAPACITY}, cpu, 1 thread",
        "rows": rows,
    }


COLUMNS = [
    ("case", "case"),
    ("gpu_envs_us", "gpu_envs us"),
    ("torchrl_us", "torchrl us"),
    ("speedup", "torchrl / gpu_envs"),
    ("target", ">= 2x"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small cases, few rounds")
    parser.add_argument("--json", default=None, help="where to save the numbers")
    args = parser.parse_args()
    result = run(args.quick)
    print(format_table(result["title"], result["rows"], COLUMNS))
    save_json(args.json, {"benchmark": "replay", "device": "cpu", **result})


if __name__ == "__main__":
    main()
