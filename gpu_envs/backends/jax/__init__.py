"""JAX envs on the learner's device: gymnasium's functional JAX envs and gymnax >= 1.0.

Two families, one backend:

* gymnasium's functional JAX vector envs -- ``gpu_envs.make("phys2d/CartPole-v1",
  num_envs=N)`` (any gymnasium id whose vector entry point is a
  ``FunctionalJaxVectorEnv``: ``phys2d/CartPole-v1``, ``phys2d/Pendulum-v0``...), or
  ``gpu_envs.wrap(gym.make_vec("phys2d/CartPole-v1", num_envs=N))``;
* gymnax environments -- ``gpu_envs.make("gymnax/Breakout-MinAtar", num_envs=N)`` (a
  bare gymnax id works too when gymnasium has no env of that name), or
  ``gpu_envs.wrap(gymnax.make("CartPole-v1"), num_envs=N)`` (the ``(env, params)``
  pair, or the env alone; gymnax's pure-RL wrappers such as ``LogWrapper`` included).
  ``env_params=`` overrides the params (an ``EnvParams`` or a dict of field overrides).

Brax / MuJoCo Playground envs (:mod:`.brax`) and JaxMARL's multi-agent envs, as envs of agent
groups (:mod:`.jaxmarl`: ``gpu_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=N)``), run
through the same backend, each with a core of its own (:mod:`.brax_core`, :mod:`.jaxmarl_core`).

Why a core per family instead of wrapping their vector env: gymnasium's
``FunctionalJaxVectorEnv`` resets NEXT_STEP style (a fake transition with a non-zero
reward after every episode end) and syncs the host to find the rows to reset; gymnax's
``step`` is already same-step. :mod:`.cores` writes each family's
step as one pure, vmapped function with same-step reset -- the true final observation on
ended rows, the post-reset one as the next root, no fake or lost step -- and this backend
jit-compiles it once (``step`` and ``reset`` are one XLA call each). The modules:
:mod:`.plugin` (detection, ``make``/``wrap``, the registry entry), :mod:`.cores` (the
pure step functions), :mod:`.backend` (jit, carry, devices, specs), :mod:`.pack`
(outputs to torch in a few DLPack crossings).

No host copies, no syncs. The action tensor goes to the jitted step as is: on CUDA
through DLPack (same memory), on the CPU as a numpy view that JAX's C++ argument path
aliases (cheaper per call than DLPack there); a Discrete action's int64 is first narrowed
to int32 on its device unless ``jax_enable_x64``. The step's outputs (observations,
final observations, reward, flags, info) are packed inside the jitted step into one
fresh flat buffer per dtype (:mod:`.pack`), which cross to torch
without a copy (DLPack; on the CPU through a numpy view of the buffer, cheaper per
call) and are split into views there. Nothing on the torch side reads a value. JAX
dispatches asynchronously; on CUDA DLPack makes torch's stream wait for JAX's (on the
CPU, reading a JAX output waits for the computation, as any CPU computation does). No
buffer is donated: every step returns a fresh one, so a transition kept from step k
never changes at step k + 1. JAX runs on the JAX device matching ``device`` (``cuda:i``
-> JAX GPU ``i``); when JAX has no such device (CPU-only jaxlib, CUDA learner) the
backend refuses rather than copy through the host. Unless you set it yourself, gpu_envs
sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` before it first imports JAX, so that JAX
does not reserve 75% of the GPU next to a torch learner.

Seeding: ``reset(seed=s)`` gives row ``i`` the key chain ``fold_in(PRNGKey(s), i)``; it
then evolves as the family's single-env wrapper evolves its key, so row ``i`` equals a
single env stepped and reset by hand with that key, whatever ``N`` is. Partial resets
(``"_reset"`` masks) are supported.

Example::

    env = gpu_envs.make("phys2d/CartPole-v1", num_envs=4096, device="cpu", seed=0)
    env = gpu_envs.wrap(gymnax.make("Pendulum-v1"), num_envs=64, seed=0)
    traj = env.rollout(100)

Detection never imports JAX: ``wrap`` looks at class and module names.
"""

from gpu_envs.backends.jax.backend import JaxBackend, prepare_jax
from gpu_envs.backends.jax.plugin import (
    GYMNAX_PREFIX,
    PLUGIN,
    JaxPlugin,
    is_functional_jax_id,
    looks_like_jax_env,
    wrap_jax,
)

__all__ = [
    "GYMNAX_PREFIX",
    "PLUGIN",
    "JaxBackend",
    "JaxPlugin",
    "is_functional_jax_id",
    "looks_like_jax_env",
    "prepare_jax",
    "wrap_jax",
]
