""":class:`RayBackend`: W Ray actors step their shares of N envs in parallel; one batch on the device.

Per step the driver

1. copies the action once to the host (the tensor's own memory on the CPU; a reused,
   pinned buffer from CUDA) and sends each worker its rows;
2. waits (``step_timeout``) for every worker's answer: numpy arrays of its rows, with
   the true final observations and info entries read by the gymnasium backend inside
   the worker (:mod:`.worker`);
3. writes each worker's arrays straight into their rows of ONE staging buffer
   (:class:`gpu_envs.utils.arrays.HostStaging` with :class:`~gpu_envs.utils.arrays.RowBlocks`,
   the fields named by a :class:`~gpu_envs.backends.layout.StepLayout`) and
   moves it with one transfer (a fresh array per field on a CPU target).

Rows are in worker order: worker ``w`` steps rows ``[start_w, stop_w)``, so global env
``i`` is always the same env, seeded with ``s + i`` by ``reset(seed=s)`` (plus the
backend's ``env_index_offset``). Partial resets send each worker its rows of the mask
(workers without a masked row are not called).

Failures, all as :class:`~gpu_envs.contract.errors.BackendError`:

* an env raising inside a worker: the env's own traceback, and the env must be reset
  (the other workers stepped: the batch is half-stepped);
* a worker process that died (killed, out of memory, its node lost): named with its
  rows, pid and host; the env cannot be used any more and every worker is stopped;
* no answer within ``step_timeout`` seconds: the workers that did not answer are
  named; they are stopped (they may hang), and the env with them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, cast

import numpy as np
import torch

from gpu_envs.backends.base import Backend, Capabilities, RawStep
from gpu_envs.backends.gymnasium_envs.info import InfoSpec
from gpu_envs.backends.layout import Field, StepLayout
from gpu_envs.backends.ray import cluster
from gpu_envs.backends.ray.worker import StepResult
from gpu_envs.contract.errors import (
    BackendError,
    ClosedEnvError,
    InvalidArgumentError,
    StepTimeoutError,
    UnsupportedSpaceError,
)
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Composite, Spec, numpy_dtype
from gpu_envs.utils.arguments import as_int
from gpu_envs.utils.arrays import HostStaging, RowBlocks
from gpu_envs.utils.call_guard import CallGuard
from gpu_envs.utils.devices import default_device, normalize_device

DEFAULT_STEP_TIMEOUT = 60.0  # seconds a step/reset may take before the workers are declared hung
DEFAULT_START_TIMEOUT = 180.0  # seconds to place the actors and build their envs


def split_rows(num_envs: int, num_workers: int) -> list[int]:
    """How many envs each worker runs: as even as possible, the first ones one more."""
    num_workers = as_int(num_workers, "num_workers", minimum=1)
    if num_workers > num_envs:
        raise InvalidArgumentError(
            f"num_workers={num_workers} is more than num_envs={num_envs}: every worker needs at least one env."
        )
    base, extra = divmod(num_envs, num_workers)
    return [base + (i < extra) for i in range(num_workers)]


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidArgumentError(f"{name} must be a number of seconds > 0, got {value!r}.")
    return float(value)


def _field(n: int, spec: Spec, what: str) -> Field:
    """``((n, *shape), dtype)`` of a leaf spec (a leaf always has a dtype: only a Composite has none)."""
    dtype = spec.dtype
    if dtype is None:
        raise UnsupportedSpaceError(f"the Ray workers' {what} has no single dtype ({spec!r}).")
    return (n, *spec.shape), dtype


@dataclass(frozen=True)
class RayOptions:
    """How the Ray backend uses Ray (every ``make(backend="ray")`` / ``wrap_ray`` takes these keywords).

    Attributes:
        step_timeout: seconds every worker has to answer a step or reset (default 60).
        start_timeout: seconds to place the actors and build their envs (default 180).
        cpus_per_worker: Ray CPU slots each actor reserves (default 1).
        address: the Ray cluster to join (``None``: the one this process uses, or
            ``RAY_ADDRESS``, else a new local one started for these envs).
        ray_init_kwargs: extra ``ray.init`` arguments when the envs initialise Ray.
    """

    step_timeout: float = DEFAULT_STEP_TIMEOUT
    start_timeout: float = DEFAULT_START_TIMEOUT
    cpus_per_worker: float = 1.0
    address: str | None = None
    ray_init_kwargs: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_timeout", _positive("step_timeout", self.step_timeout))
        object.__setattr__(self, "start_timeout", _positive("start_timeout", self.start_timeout))
        cpus = self.cpus_per_worker
        if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or cpus < 0:
            raise InvalidArgumentError(f"cpus_per_worker must be a number >= 0, got {cpus!r}.")

    @classmethod
    def take(cls, kwargs: dict[str, Any]) -> RayOptions:
        """The options among ``kwargs``, removed from it (the rest is for the envs)."""
        return cls(**{f.name: kwargs.pop(f.name) for f in fields(cls) if f.name in kwargs})


class RayBackend(Backend):
    """Backend over W Ray actors, each a gymnasium vector env of its share (see the module doc).

    Args:
        builders: one picklable callable per worker, run inside its actor, returning a
            CPU :class:`~gpu_envs.backends.gymnasium_envs.GymnasiumBackend` of its envs.
        sizes: how many envs each builder builds (rows, in order).
        device: target device; ``None`` means :func:`gpu_envs.utils.devices.default_device`.
        options: timeouts, CPUs per worker and the cluster (:class:`RayOptions`).
    """

    name = "ray"
    capabilities = Capabilities(
        # each worker runs the gymnasium backend (SAME_STEP SyncVectorEnvs by make, any mode by wrap_ray)
        final_obs=(FinalObsKind.SIMULATOR, FinalObsKind.WRAPPER_RESET),
        trusted_outputs=True,  # every tensor comes out of its own staging, laid out from the specs
        partial_reset=True,
    )
    # None: packed staging buffer + one transfer off the CPU; tests set True to run that path on the CPU
    staging_packed: bool | None = None

    def __init__(
        self,
        builders: Sequence[Callable[[], Any]],
        sizes: Sequence[int],
        device: torch.device | str | None = None,
        options: RayOptions | None = None,
    ) -> None:
        options = options or RayOptions()
        self.step_timeout = options.step_timeout
        self.device = normalize_device(device if device is not None else default_device())
        self.num_envs = n = int(sum(sizes))
        self._closed = False
        self._broken: str | None = None
        # a step or reset that did not finish (a failing worker, Ctrl-C): the other workers stepped,
        # and only a full reset makes the batch consistent again
        self._guard = CallGuard("this Ray env")
        self._owned = cluster.connect(options.address, options.ray_init_kwargs)
        try:
            self.workers, facts = cluster.start_workers(
                builders, sizes, cpus_per_worker=float(options.cpus_per_worker), start_timeout=options.start_timeout
            )
        except BaseException:
            cluster.release(self._owned)
            raise
        try:  # nothing below may leave the actors (and a Ray started for them) running
            self._set_up(facts, n)
        except BaseException:
            self.close()
            raise

    def _set_up(self, facts: list[dict], n: int) -> None:
        """Specs, staging buffers and bookkeeping from the workers' facts (all the same kind of env)."""
        self._ray = cluster.import_ray()
        first = facts[0]
        self._keys = list(first["keys"])
        self._inner = first["describe"]
        for w, f in zip(self.workers, facts, strict=True):
            if f["keys"] != self._keys or repr(f["observation_spec"]) != repr(first["observation_spec"]):
                raise BackendError(
                    f"Ray worker {w.index} built envs with observation spec {f['observation_spec']!r}, worker 0 "
                    f"with {first['observation_spec']!r}: every worker must build the same kind of env."
                )
        self.observation_spec: Composite = first["observation_spec"].to(self.device)
        self.action_spec = first["action_spec"].to(self.device)
        self.reward_spec = None if first["reward_spec"] is None else first["reward_spec"].to(self.device)
        self.info_spec = InfoSpec({}, device=self.device)
        self._obs_fields = [_field(n, self.observation_spec[k], f"observation {k!r}") for k in self._keys]
        self._reset_stage = HostStaging(self._obs_fields, self.device, self.staging_packed)
        self._stage: HostStaging | None = None
        self._info_keys: list = []
        self._last_obs: list[list[np.ndarray]] = [[] for _ in self.workers]  # each worker's latest obs rows
        self._zeros: dict = {}
        shape, dtype = (n, *self.action_spec.shape), self.action_spec.dtype
        self._action_host = None
        if self.device.type != "cpu":
            self._action_host = torch.empty(shape, dtype=dtype, pin_memory=self.device.type == "cuda")

    def describe(self) -> str:
        return f"ray({len(self.workers)} workers x {self._inner})"

    # ------------------------------------------------------------------ calls
    def check_usable(self) -> None:
        if self._closed:
            raise ClosedEnvError(
                "this Ray env was closed; build a new one with gpu_envs.make() or gpu_envs.wrap_ray()."
            )
        if self._broken is not None:
            raise BackendError(f"{self.describe()} cannot be used any more: {self._broken} Build a new env.")

    def _gather(self, what: str, calls: list[tuple[cluster.Worker, Any]]) -> list[Any]:
        """Wait for every call (``step_timeout``); the answers in order, or a clear error."""
        ray = self._ray
        refs = [ref for _, ref in calls]
        deadline = time.monotonic() + self.step_timeout
        try:
            return ray.get(refs, timeout=self.step_timeout)  # the usual case: one call
        except Exception:
            pass  # a worker failed or is late: find out which, below
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))
        failures, answers = [], []
        for w, ref in calls:
            if ref in pending:
                continue
            try:
                answers.append(ray.get(ref))
            except ray.exceptions.RayTaskError as err:
                failures.append(f"{w.label()}: its env raised in {what}:\n{cluster.explain(err)}")
            except ray.exceptions.RayActorError as err:
                w.alive = False
                detail = cluster.explain(err).splitlines()[0]
                self._broken = f"Ray {w.label()} died ({detail})."
                failures.append(self._broken)
        if pending:
            late = [w for w, ref in calls if ref in pending]
            names = ", ".join(w.label() for w in late)
            self._broken = (
                f"no answer to {what} within step_timeout={self.step_timeout:g} s from Ray {names} "
                "(an env that hangs, or one slower than step_timeout: raise it for slow envs)."
            )
            failures.insert(0, self._broken)
        if failures:
            if self._broken is not None:
                cluster.stop_workers(self.workers, graceful=False)  # hung or lost: nothing to keep
                error = StepTimeoutError if pending else BackendError  # a timeout is a BackendError too
                raise error(
                    f"{self.describe()} failed: {' '.join(failures)} Every worker was stopped; build a new env."
                )
            raise BackendError(  # the caller's guard stays marked: the batch is half-stepped
                f"{self.describe()}: "
                + "\n".join(failures)
                + "\nThe other workers stepped: call env.reset() before stepping again."
            )
        return answers

    # ------------------------------------------------------------------ reset
    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        self.check_usable()
        seed = None if seed is None else int(seed)
        if mask is None:
            calls = [(w, w.actor.reset.remote(seed, None)) for w in self.workers]
        else:
            rows = mask.detach().to("cpu", torch.bool).numpy().reshape(self.num_envs)
            if not rows.all():
                self._guard.check("a partial reset")  # a half-stepped batch needs every row reset
            calls = [
                (w, w.actor.reset.remote(seed, None if rows.all() else rows[w.start : w.stop]))
                for w in self.workers
                if rows[w.start : w.stop].any()
            ]
            if not calls and self._last_obs[0]:
                return self._publish_obs()
        self._guard.start("reset")
        answers = self._gather("reset", calls)
        for (w, _), obs in zip(calls, answers, strict=True):
            self._last_obs[w.index] = obs
        self._guard.finish()
        return self._publish_obs()

    def _publish_obs(self) -> ObsDict:
        blocks = [RowBlocks(self._last_obs[w.index][k] for w in self.workers) for k in range(len(self._keys))]
        # every value is a RowBlocks (none skipped): publish gives a tensor for each key
        return cast(ObsDict, dict(zip(self._keys, self._reset_stage.publish(blocks), strict=True)))

    # ------------------------------------------------------------------- step
    def step(self, action: torch.Tensor) -> RawStep:
        if self._closed or self._broken is not None or self._guard.pending is not None:
            self.check_usable()
            self._guard.refuse("step", f"the workers of {self.describe()} may be half-stepped")
        self._guard.start("step")
        if self._action_host is None:
            host = action.detach().numpy()
        else:
            self._action_host.copy_(action.detach())  # blocking: the workers need the values now
            host = self._action_host.numpy()
        calls = [(w, w.actor.step.remote(host[w.start : w.stop])) for w in self.workers]
        results: list[StepResult] = self._gather("step", calls)
        stage = self._stage
        if stage is None:
            stage = self._build_step_stage()
        for w, r in zip(self.workers, results, strict=True):
            self._last_obs[w.index] = r.obs
        k = len(self._keys)
        final, final_mask = self._final_blocks(results)
        layout = self._step_layout
        values = layout.pack(
            [RowBlocks(r.obs[i] for r in results) for i in range(k)],
            RowBlocks(r.reward for r in results),
            RowBlocks(r.terminated for r in results),
            RowBlocks(r.truncated for r in results),
            RowBlocks(r.done for r in results),
            final,
            final_mask,
            [
                RowBlocks(self._info_rows(w, r.info, key) for w, r in zip(self.workers, results, strict=True))
                for key in self._info_keys
            ],
        )
        raw = layout.unpack(stage.publish(values), obs_are_final=final is None)
        self._guard.finish()
        return raw

    def _final_blocks(self, results: list[StepResult]) -> tuple[list | None, RowBlocks | None]:
        """The batch's final observations and mask from the workers' (the gymnasium backends' RawSteps).

        ``(None, None)`` when every worker's observations are its final ones (no row
        ended anywhere); else one block per worker -- its final observations, or its
        observations where they are the final ones -- and a mask only where some worker
        gave one (a vector env that withholds final observations).
        """
        if all(r.final_obs is None for r in results):
            return None, None
        k = len(self._keys)
        blocks = [r.obs if r.final_obs is None else r.final_obs for r in results]
        final = [RowBlocks(b[i] for b in blocks) for i in range(k)]
        if all(r.final_mask is None for r in results):
            return final, None
        masks = [np.ones(len(r.done), bool) if r.final_mask is None else r.final_mask for r in results]
        return final, RowBlocks(masks)

    def _info_rows(self, w: cluster.Worker, info: dict, key: Any) -> np.ndarray:
        value = info.get(key)
        if value is not None:
            return value
        zeros = self._zeros.get((w.index, key))
        if zeros is None:  # a key this worker did not discover: 0 on its rows, as for absent entries
            leaf = self.info_spec[key]
            zeros = self._zeros[(w.index, key)] = np.zeros((w.stop - w.start, *leaf.shape), numpy_dtype(leaf.dtype))
        return zeros

    def _build_step_stage(self) -> HostStaging:
        """Fields of every step, once: the union of the info entries the workers discovered."""
        specs = self._ray.get([w.actor.info_spec.remote() for w in self.workers], timeout=self.step_timeout)
        for spec in specs:
            for key in spec.keys(True, True):
                leaf = spec[key].to(self.device)
                if key in self._info_keys:
                    if repr(self.info_spec[key]) != repr(leaf):
                        raise BackendError(
                            f"the Ray workers report info entry {key!r} differently ({self.info_spec[key]!r} vs {leaf!r}); "
                            "declare it with info_spec= so every worker reads it the same way."
                        )
                    continue
                self.info_spec[key] = leaf
                self._info_keys.append(key)
        n = self.num_envs
        reward_shape = (n, 1) if self.reward_spec is None else (n, *self.reward_spec.shape)
        # obs, reward, flags, final obs, final-obs mask, info (RawStep's fields): one buffer
        self._step_layout = StepLayout(
            dict(zip(self._keys, self._obs_fields, strict=True)),
            n,
            reward_shape=reward_shape,
            final_mask=(n,),
            info={key: _field(n, self.info_spec[key], f"info entry {key!r}") for key in self._info_keys},
        )
        self._stage = HostStaging(self._step_layout.fields, self.device, self.staging_packed)
        return self._stage

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close every worker's envs, kill the actors, and stop a local Ray started for them."""
        if self._closed:
            return
        self._closed = True
        try:
            cluster.stop_workers(self.workers)
        finally:
            cluster.release(self._owned)
