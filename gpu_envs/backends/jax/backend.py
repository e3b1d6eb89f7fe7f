"""``JaxBackend``: one jitted XLA call per step, outputs back to torch in a few DLPack crossings.

The backend half of :mod:`gpu_envs.backends.jax` (read the package docstring for what
is wrapped and why): it takes a *core* from :mod:`gpu_envs.backends.jax.cores`, derives the specs
from the env's spaces, checks the observation structure once by tracing (no
compilation), jit-compiles ``init`` / ``reset`` / ``step`` and keeps the carry (per-row
keys, env state) on the JAX device matching the torch device; ``step`` donates it (the
next carry is written into its buffers). ``step`` hands the action
to JAX without a host copy (:func:`gpu_envs.utils.arrays.jax_argument`) and gets every output
back as views of a few packed buffers, one per dtype (:mod:`gpu_envs.backends.jax.pack`).

A core of agent groups (JaxMARL's, :mod:`gpu_envs.backends.jax.jaxmarl_core`) declares its
specs itself (``core.specs(device)``: a :class:`~gpu_envs.backends.jax.cores.CoreSpecs`)
instead of gymnasium spaces: the backend then sets ``group_map``, hands the core the
groups' actions as a dict ``{(group, "action"): array}`` and always passes on the info
entries the core declares (each agent's reward and flags), whatever ``expose_info`` says.

JAX is imported lazily, when a backend is built.

Example::

    from gpu_envs.backends.jax.cores import GymnaxCore
    backend = JaxBackend(GymnaxCore(env, params, num_envs=64), torch.device("cpu"), seed=0)
    raw = backend.step(torch.zeros(64, dtype=torch.int64))   # after backend.reset()
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from gpu_envs.backends.base import Backend, Capabilities, RawStep
from gpu_envs.backends.common import observation_spec_from_space
from gpu_envs.backends.jax.pack import PackedLayout
from gpu_envs.backends.layout import StepLayout
from gpu_envs.contract.errors import DeviceMismatchError, ObservationError, SnapshotError
from gpu_envs.contract.final_obs import FinalObsKind
from gpu_envs.contract.keys import ObsDict
from gpu_envs.contract.specs import Binary, Box, Composite, numpy_dtype, spec_from_gym, torch_dtype
from gpu_envs.utils.arguments import as_bool, as_seed
from gpu_envs.utils.arrays import from_torch, jax_argument, jax_dtype_for, jax_reader
from gpu_envs.utils.devices import resolve_device


def prepare_jax() -> None:
    """Before gpu_envs first imports JAX: don't let it grab 75% of the GPU torch also needs.

    JAX preallocates most of a GPU's memory at its first GPU use; next to a torch learner
    that starves one of the two. ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (only if the user
    set nothing, and only if JAX is not imported yet) makes JAX allocate on demand.
    """
    if "jax" not in sys.modules:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _jax_device(device: torch.device) -> Any:
    """The JAX device holding the same memory as torch ``device``."""
    import jax

    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type == "cuda":
        index = (
            device.index
            if device.index is not None
            else (torch.cuda.current_device() if torch.cuda.is_available() else 0)
        )
        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        if index < len(gpus):
            return gpus[index]
        raise DeviceMismatchError(
            f"device={device} was requested but JAX sees no GPU {index} (its devices: {jax.devices()}). "
            'Install a CUDA jaxlib (pip install "jax[cuda12]") or pass device="cpu"; gpu_envs does not '
            "copy JAX data through the host behind your back."
        )
    raise DeviceMismatchError(f"the JAX backend runs on cpu or cuda devices, not {device}.")


def _torch_device_of(jax_device: Any) -> torch.device:
    if jax_device.platform == "cpu":
        return torch.device("cpu")
    hardware_id = getattr(jax_device, "local_hardware_id", None)
    return torch.device("cuda", int(jax_device.id if hardware_id is None else hardware_id))


def _flatten(tree: Any, default_key: str = "observation") -> dict:
    """A JAX observation pytree -> flat dict keyed like gpu_envs specs (str / tuple keys)."""
    if not isinstance(tree, (Mapping, tuple, list)):
        return {default_key: tree}
    flat: dict = {}

    def visit(prefix: tuple, node: Any) -> None:
        items = node.items() if isinstance(node, Mapping) else ((str(i), v) for i, v in enumerate(node))
        for name, value in items:
            key = prefix + (name,)
            if isinstance(value, (Mapping, tuple, list)):
                visit(key, value)
            else:
                flat[key[0] if len(key) == 1 else key] = value

    visit((), tree)
    return flat


def _leaf_spec(shape: tuple, dtype: Any, device: torch.device) -> Any:
    dt = torch_dtype(np.dtype(dtype))
    if dt == torch.bool:
        return Binary(tuple(shape), device=device)
    return Box(-float("inf"), float("inf"), tuple(shape), dt, device)


class JaxBackend(Backend):
    """Same-step backend over a JAX core (see :mod:`gpu_envs.backends.jax.cores`).

    Args:
        core: a ``FuncEnvCore``, ``GymnaxCore``, ``BraxCore`` or ``JaxMarlCore``.
        device: torch device; JAX runs on the matching JAX device. ``None``: JAX's default.
        seed: seed of the first reset when ``reset`` gets none (random otherwise).
        expose_info: pass numeric per-env info entries (gymnax ``"discount"``,
            LogWrapper's episode stats...) under ``("next", key)``.
    """

    name = "jax"
    capabilities = Capabilities(
        # a core of gymnasium's functional envs steps without auto-reset and resets ended rows in the same
        # jitted call; gymnax's own step resets and keeps the final observation (a core says which: its
        # final_obs_kind attribute)
        final_obs=(FinalObsKind.WRAPPER_RESET, FinalObsKind.SIMULATOR),
        trusted_outputs=True,  # every tensor is a view of its own jitted step's packed output
        partial_reset=True,
        snapshot_rows=True,  # the carry holds every row's state, PRNG keys and step counts: [N, ...] leaves
    )

    def __init__(
        self, core: Any, device: torch.device | str | None = None, *, seed: int | None = None, expose_info: bool = True
    ) -> None:
        prepare_jax()
        import jax

        from gpu_envs.backends.jax.cores import row_keys

        seed = as_seed(seed)
        expose_info = as_bool(expose_info, "expose_info")
        self.core = core
        self.capabilities = self.capabilities.replace(
            final_obs=FinalObsKind(getattr(core, "final_obs_kind", FinalObsKind.WRAPPER_RESET))
        )
        self.num_envs = core.num_envs
        if device is None:
            self._jax_device = jax.devices()[0]
            self.device = _torch_device_of(self._jax_device)
        else:
            self.device = resolve_device(device)
            self._jax_device = _jax_device(self.device)
        declared = core.specs(self.device) if callable(getattr(core, "specs", None)) else None
        if declared is None:  # a single-agent core: its gymnasium spaces
            self.observation_spec = observation_spec_from_space(core.single_observation_space, self.device)
            self.action_spec = spec_from_gym(core.single_action_space, device=self.device)
            required_info = Composite(device=self.device)
            self._group_actions: dict | None = None
        else:  # a core of agent groups: its specs, a Composite action of one (group, "action") leaf per group
            self.observation_spec, self.action_spec = declared.observation, declared.action
            required_info = declared.info
            self.group_map = declared.group_map
            self._group_actions = dict(declared.action.items(include_nested=True, leaves_only=True))
        self._obs_keys = list(self.observation_spec.keys(include_nested=True, leaves_only=True))
        self._default_seed = seed
        self._read = jax_reader(self.device)
        self._carry = None
        self._all_rows = None
        self._check_structure(expose_info, required_info)

        self._seed_keys = jax.jit(lambda seed: row_keys(seed[0], self.num_envs, seed[1]))
        self._init = jax.jit(lambda keys: self._pack_obs(*core.init(keys)))
        self._reset = jax.jit(lambda carry, keys, mask: self._pack_obs(*core.reset(carry, keys, mask)))
        # the carry is donated: XLA writes the next carry into its buffers instead of allocating
        # and filling new ones (about 5% of a Brax step at N=8 on the CPU). Nothing else holds it:
        # torch only views the packed outputs and the observations, which are buffers of their own
        self._step = jax.jit(self._step_impl, donate_argnums=0)

    # ------------------------------------------------------------ structure, once
    def _check_structure(self, expose_info: bool, required_info: Composite) -> None:
        """Trace (not compile) one init and step to check observations and find info entries.

        ``required_info``: the entries the core declares (a group core's agents' rewards and
        flags), passed on whatever ``expose_info`` says; ``expose_info`` adds the core's other
        numeric per-row entries.
        """
        import jax
        import jax.numpy as jnp

        from gpu_envs.backends.jax.cores import row_keys

        keys = jax.eval_shape(lambda: row_keys(0, self.num_envs))
        carry, obs = jax.eval_shape(self.core.init, keys)
        action = self._action_struct()
        _, out = jax.eval_shape(self.core.step, carry, action)
        self._obs_dtypes = {}
        for where, tree in (("observation", obs), ("final observation", out.obs), ("final observation", out.final_obs)):
            flat = _flatten(tree)
            if sorted(map(str, flat)) != sorted(map(str, self._obs_keys)):
                raise ObservationError(
                    f"{self.describe()} returns an {where} with keys {sorted(map(str, flat))} but its observation "
                    f"space declares {sorted(map(str, self._obs_keys))}. Fix the env's observation_space."
                )
            for key, leaf in flat.items():
                spec = self.observation_spec[key]
                if tuple(leaf.shape) != (self.num_envs, *spec.shape):
                    raise ObservationError(
                        f"{self.describe()} returns {where} {key!r} of per-env shape {tuple(leaf.shape[1:])} but its "
                        f"observation space says {tuple(spec.shape)}. Fix the env's observation_space."
                    )
                self._obs_dtypes[key] = jnp.dtype(numpy_dtype(spec.dtype))
        self._info_keys = []
        info_specs = {}
        info = _flatten(out.info, "info")
        for key, spec in required_info.items(include_nested=True, leaves_only=True):
            leaf = info.get(key)
            if leaf is None or tuple(leaf.shape) != (self.num_envs, *spec.shape):
                raise ObservationError(
                    f"{self.describe()} declares the info entry {key!r} of per-env shape {tuple(spec.shape)} but its "
                    f"step hands {'none' if leaf is None else tuple(leaf.shape[1:])}; a core hands every entry it declares."
                )
            self._info_keys.append(key)
            info_specs[key] = spec
        if expose_info:
            for key, leaf in info.items():
                if key in info_specs:
                    continue
                if len(leaf.shape) >= 1 and leaf.shape[0] == self.num_envs and np.dtype(leaf.dtype).kind in "biuf":
                    self._info_keys.append(key)
                    info_specs[key] = _leaf_spec(leaf.shape[1:], leaf.dtype, self.device)
        self.info_spec = Composite(_nest(info_specs), device=self.device)
        n = self.num_envs
        # the step's outputs in RawStep's order, named once (observations, reward, flags [N, 1],
        # final observations, info): packed inside jit, found again by name on the torch side
        self._step_layout = StepLayout(
            {
                key: ((n, *self.observation_spec[key].shape), _dtype(self.observation_spec[key]))
                for key in self._obs_keys
            },
            n,
            info={key: ((n, *spec.shape), spec.dtype) for key, spec in info_specs.items()},
        )
        _, leaves = jax.eval_shape(self._leaves_impl, carry, action)
        self._layout = PackedLayout(leaves)

    def _action_struct(self) -> Any:
        """The batched action as JAX sees it: one array, or a group core's ``{(group, "action"): array}``."""
        import jax

        def struct(spec: Any) -> Any:
            dtype = np.dtype(numpy_dtype(jax_dtype_for(_dtype(spec))))
            return jax.ShapeDtypeStruct((self.num_envs, *spec.shape), dtype)

        if self._group_actions is None:
            return struct(self.action_spec)
        return {key: struct(spec) for key, spec in self._group_actions.items()}

    # ------------------------------------------------------------- traced bodies
    def _obs_leaves(self, tree: Any) -> list:
        flat = _flatten(tree)
        return [flat[k].astype(self._obs_dtypes[k]) for k in self._obs_keys]

    def _pack_obs(self, carry: Any, obs: Any) -> tuple:
        return carry, tuple(self._obs_leaves(obs))

    def _step_impl(self, carry: Any, action: Any) -> tuple:
        carry, leaves = self._leaves_impl(carry, action)
        return carry, self._layout.pack(leaves)

    def _leaves_impl(self, carry: Any, action: Any) -> tuple:
        import jax.numpy as jnp

        carry, out = self.core.step(carry, action)
        info = _flatten(out.info, "info")
        n = self.num_envs
        terminated = jnp.asarray(out.terminated, bool).reshape(n, 1)
        truncated = jnp.asarray(out.truncated, bool).reshape(n, 1)
        leaves = self._step_layout.pack(
            self._obs_leaves(out.obs),
            jnp.asarray(out.reward, jnp.float32).reshape(n, 1),
            terminated,
            truncated,
            terminated | truncated,
            self._obs_leaves(out.final_obs),  # each row's pre-reset observation: valid on every row
            None,
            [info[k] for k in self._info_keys],
        )
        return carry, tuple(leaves)

    # ----------------------------------------------------------------- host side
    def _keys_for(self, seed: int | None) -> Any:
        import jax

        if seed is None:
            if self._carry is not None:
                return self._carry[0]
            seed = self._default_seed
            if seed is None:
                seed = int(np.random.default_rng().integers(2**32))
        seed = int(seed)  # [0, 2**63): checked by BatchedEnv; the high word is folded in, never dropped
        seed_array = jax.device_put(np.array([seed % 2**32, seed // 2**32], dtype=np.uint32), self._jax_device)
        return self._seed_keys(seed_array)

    def reset(self, seed: int | None = None, mask: torch.Tensor | None = None) -> ObsDict:
        import jax

        if self._carry is not None and any(leaf.is_deleted() for leaf in jax.tree_util.tree_leaves(self._carry)):
            self._carry = None  # a step failed after donating it: start again as the first reset does
        keys = self._keys_for(seed)
        if self._carry is None:
            self._carry, obs = self._init(keys)
            if mask is not None:
                return self._to_obs(obs)
        elif mask is None:
            if self._all_rows is None:
                self._all_rows = jax.device_put(np.ones(self.num_envs, bool), self._jax_device)
            self._carry, obs = self._reset(self._carry, keys, self._all_rows)
        else:
            self._carry, obs = self._reset(self._carry, keys, from_torch(mask.reshape(self.num_envs), "jax"))
        return self._to_obs(obs)

    def step(self, action: Any) -> RawStep:
        keys = self._group_actions
        argument = jax_argument(action) if keys is None else {key: jax_argument(action[key]) for key in keys}
        self._carry, packed = self._step(self._carry, argument)
        read = self._read
        return self._step_layout.unpack(self._layout.unpack([read(buffer) for buffer in packed]))

    def _to_obs(self, leaves: tuple) -> ObsDict:
        return {key: self._read(x) for key, x in zip(self._obs_keys, leaves, strict=True)}

    # ------------------------------------------------------------ row snapshots
    def _carry_leaves(self) -> tuple[list, Any]:
        import jax

        leaves, treedef = jax.tree_util.tree_flatten(self._carry)
        for i, leaf in enumerate(leaves):
            if (
                jax.numpy.issubdtype(leaf.dtype, jax.dtypes.prng_key)  # (jax.dtypes does not export it)
                or leaf.ndim == 0
                or leaf.shape[0] != self.num_envs
            ):
                raise SnapshotError(
                    f"the carry of {self.describe()} has a leaf ({i}: {leaf.shape} {leaf.dtype}) that is not one row per "
                    f"env ([{self.num_envs}, ...] numbers), so its rows cannot be snapshot one by one."
                )
        return leaves, treedef

    def get_state(self, rows: torch.Tensor) -> TensorDict:
        """Rows of the carry (every leaf ``[N, ...]``: PRNG keys, env state, step counts), as tensors ``[k, ...]``."""
        leaves, _ = self._carry_leaves()
        index = rows.detach().cpu().numpy()
        state = {f"carry_{i}": torch.from_numpy(np.array(leaf)[index]).to(self.device) for i, leaf in enumerate(leaves)}
        return TensorDict(state, batch_size=[int(rows.shape[0])])

    def set_state(self, state: TensorDictBase, rows: torch.Tensor) -> None:
        """Write rows of a :meth:`get_state` into the carry (a new carry: ``.at[rows].set``)."""
        import jax

        leaves, treedef = self._carry_leaves()
        index = jax.device_put(rows.detach().cpu().numpy(), self._jax_device)
        new = [
            leaf.at[index].set(jax.device_put(state.get(f"carry_{i}").detach().cpu().numpy(), self._jax_device))
            for i, leaf in enumerate(leaves)
        ]
        self._carry = jax.tree_util.tree_unflatten(treedef, new)

    def describe(self) -> str:
        return f"jax({type(self.core.env).__name__})"

    def close(self) -> None:
        close = getattr(self.core.env, "close", None)  # gymnasium's vector env: its render state
        if callable(close):
            close()
        self._carry = None


def _nest(flat: dict) -> dict:
    nested: dict = {}
    for key, value in flat.items():
        parts = key if isinstance(key, tuple) else (key,)
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def _dtype(spec: Any) -> torch.dtype:
    """A leaf spec's dtype (only a Composite has none: an observation or action leaf always has one)."""
    dtype = spec.dtype
    if dtype is None:
        raise ObservationError(f"{spec!r} is not one array (no single dtype): a JAX env's leaves each have one.")
    return dtype
