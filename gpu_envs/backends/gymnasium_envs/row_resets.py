"""Masked resets for gymnasium's own NEXT_STEP vector envs whose ``reset`` resets every row.

gymnasium 1.x's ``gym.make_vec("CartPole-v1", n)`` builds ``CartPoleVectorEnv`` (its
``vector_entry_point``): NEXT_STEP auto-reset, and a ``reset`` that ignores
``options["reset_mask"]``. Left alone, an ended row's next ``step`` ignores its action,
draws the row's reset state and returns reward 0: a wasted step. This module does what
the EnvPool backend does with ``pool.reset(ids)``: the backend resets the ended rows right
after the step in which they ended (same call), and the env's next ``step`` steps every
row for real. The reset is the env's own next-step reset, moved forward: the same draws
from its one ``np_random`` stream (``uniform(low, high, size=(4, k))`` for the ``k`` rows,
in row order), the step counter and the pending-reset flag cleared -- so a run equals
gymnasium's own auto-reset with the wasted steps cut out, bit for bit
(``tests/test_gymnasium_oracle.py`` proves it against one-row envs reset by hand).

Only public attributes are read (``state``, ``steps``, ``prev_done``, ``low``, ``high``,
``np_random``); a class without them is not taken (:func:`row_reset` returns ``None``).

Example::

    reset_rows = row_reset(venv)                 # None: no known masked reset for this class
    obs, info = reset_rows(np.array([True, False, True, False]))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["RowReset", "row_reset"]

RowReset = Callable[[np.ndarray], tuple[Any, dict]]
_CARTPOLE_FIELDS = ("state", "steps", "prev_done", "low", "high", "np_random")


def _is_cartpole_vector_env(env: Any) -> bool:
    cls = type(env)
    return (
        cls.__name__ == "CartPoleVectorEnv"
        and cls.__module__ == "gymnasium.envs.classic_control.cartpole"
        and all(hasattr(env, name) for name in _CARTPOLE_FIELDS)
    )


def _cartpole_rows(env: Any) -> RowReset:
    def reset_rows(mask: np.ndarray) -> tuple[np.ndarray, dict]:
        # CartPoleVectorEnv.step's own "reset all environments which terminated or were truncated in the last step"
        env.state[:, mask] = env.np_random.uniform(low=env.low, high=env.high, size=(4, int(np.count_nonzero(mask))))
        env.steps[mask] = 0
        env.prev_done[mask] = False
        return env.state.T.astype(np.float32), {}

    return reset_rows


def row_reset(env: Any) -> RowReset | None:
    """A masked reset of ``env`` (the bare vector env) equal to its own next-step reset, or ``None`` if none is known."""
    if _is_cartpole_vector_env(env):
        return _cartpole_rows(env)
    return None
