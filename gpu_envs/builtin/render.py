"""Batched torch renderers of the built-in envs: frames of chosen rows, drawn from their observations.

``render_cartpole(obs)`` and ``render_pendulum(obs)`` turn ``[K, obs_dim]`` observations
into ``uint8 [K, H, W, 3]`` RGB frames with a handful of tensor ops on the observations'
device (no pygame, no host round trip, no per-row Python loop). They draw what
gymnasium's ``rgb_array`` render draws (same geometry, colours and default sizes:
600 x 400 for CartPole, 500 x 500 for Pendulum; Pendulum's torque arrow left out), so a
video of a built-in env looks like one of gymnasium's.

They render from OBSERVATIONS, not from the env's state: a recorder draws exactly the
rows it records, and an episode's final frame comes from its true final observation
(the state is already reset by then). The observation determines the picture: for
CartPole it is the state, for Pendulum ``(cos th, sin th, thdot)`` gives the angle.

The built-in envs expose them as ``env.render_observations(obs, height=None, width=None)``
(the hook :class:`~gpu_envs.transforms.RecordEpisodes` looks for); a torch vector env of
your own can define the same method.

Example::

    from gpu_envs.builtin.render import render_cartpole

    obs = torch.tensor([[0.0, 0.0, 0.1, 0.0], [1.0, 0.0, -0.2, 0.0]])
    frames = render_cartpole(obs)            # uint8 [2, 400, 600, 3]
"""

from __future__ import annotations

import torch

__all__ = ["CARTPOLE_SIZE", "PENDULUM_SIZE", "render_cartpole", "render_pendulum"]

CARTPOLE_SIZE = (400, 600)  # (height, width): gymnasium's screen
PENDULUM_SIZE = (500, 500)

# gymnasium's CartPole drawing, in screen units (600 x 400, y up before its final flip)
_CART_SCREEN = (600.0, 400.0)
_X_THRESHOLD = 2.4
_CART_W, _CART_H, _POLE_W = 50.0, 30.0, 10.0
_CART_Y = 100.0  # the cart's centre line (gymnasium's "carty") and the track
_POLE_LEN = 600.0 / (2 * _X_THRESHOLD) * (2 * 0.5)  # scale * (2 * length)
_CART_COLOR, _POLE_COLOR, _AXLE_COLOR = (0, 0, 0), (202, 152, 101), (129, 132, 203)

# gymnasium's Pendulum drawing: 500 x 500, world [-2.2, 2.2]^2
_PEND_SCREEN = 500.0
_PEND_SCALE = _PEND_SCREEN / (2 * 2.2)
_ROD_COLOR, _PIVOT_COLOR = (204, 77, 77), (0, 0, 0)

_WHITE = (255, 255, 255)


def _grid(height: int, width: int, screen: tuple[float, float], device: torch.device) -> tuple:
    """Pixel centres in screen units, y up: ``X [1, 1, W]``, ``Y [1, H, 1]``, and one pixel's size."""
    sx, sy = screen[0] / width, screen[1] / height
    x = (torch.arange(width, device=device, dtype=torch.float32) + 0.5) * sx
    y = (height - 1 - torch.arange(height, device=device, dtype=torch.float32) + 0.5) * sy
    return x.view(1, 1, width), y.view(1, height, 1), max(sx, sy)


def _palette(colors: tuple[tuple[int, int, int], ...], device: torch.device) -> torch.Tensor:
    return torch.tensor(colors, dtype=torch.uint8, device=device)


def _size(height: int | None, width: int | None, default: tuple[int, int]) -> tuple[int, int]:
    h, w = default[0] if height is None else int(height), default[1] if width is None else int(width)
    if h < 1 or w < 1:
        raise ValueError(f"frame size must be positive, got height={h}, width={w}")
    return h, w


def render_cartpole(obs: torch.Tensor, height: int | None = None, width: int | None = None) -> torch.Tensor:
    """CartPole frames ``uint8 [K, H, W, 3]`` from observations ``[K, 4]`` ``(x, x_dot, theta, theta_dot)``.

    Default size 400 x 600 (gymnasium's); any other size scales the same picture. Each
    pixel gets a label (background, track or cart, pole, axle) from a few broadcast
    comparisons, then one palette lookup colours the frame.
    """
    h, w = _size(height, width, CARTPOLE_SIZE)
    obs = obs.reshape(-1, 4).to(torch.float32)
    k, dev = obs.shape[0], obs.device
    x, y, pixel = _grid(h, w, _CART_SCREEN, dev)
    scale = _CART_SCREEN[0] / (2 * _X_THRESHOLD)
    cart_x = (obs[:, 0] * scale + _CART_SCREEN[0] / 2).view(k, 1, 1)
    sin, cos = torch.sin(obs[:, 2]).view(k, 1, 1), torch.cos(obs[:, 2]).view(k, 1, 1)
    dx = x - cart_x  # [K, 1, W]
    dy = y - (_CART_Y + _CART_H / 4)  # [1, H, 1], from the axle
    track = (y >= _CART_Y - pixel / 2) & (y < _CART_Y + pixel / 2)  # one pixel high
    cart = (dx.abs() <= _CART_W / 2) & ((y - _CART_Y).abs() <= _CART_H / 2)
    # the pole: a bar of width 10 from 5 below the axle to its length above, turned by theta (right for theta > 0)
    along = dx * sin + dy * cos
    across = dx * cos - dy * sin
    half = _POLE_LEN / 2
    pole = ((along - (half - _POLE_W / 2)).abs() <= half) & (across.abs() <= _POLE_W / 2)
    axle = dx * dx + dy * dy <= (_POLE_W / 2) ** 2
    label = (track | cart).to(torch.uint8)  # 1: black
    label = torch.where(pole, 2, label)
    label = torch.where(axle, 3, label)
    return _palette((_WHITE, _CART_COLOR, _POLE_COLOR, _AXLE_COLOR), dev)[label.long()]


def render_pendulum(obs: torch.Tensor, height: int | None = None, width: int | None = None) -> torch.Tensor:
    """Pendulum frames ``uint8 [K, H, W, 3]`` from observations ``[K, 3]`` ``(cos th, sin th, thdot)``.

    Default size 500 x 500 (gymnasium's). ``th = 0`` points up; the rod turns
    counter-clockwise with ``th``, as in gymnasium.
    """
    h, w = _size(height, width, PENDULUM_SIZE)
    obs = obs.reshape(-1, 3).to(torch.float32)
    k, dev = obs.shape[0], obs.device
    x, y, _ = _grid(h, w, (_PEND_SCREEN, _PEND_SCREEN), dev)
    centre = _PEND_SCREEN / 2
    norm = torch.sqrt(obs[:, 0] ** 2 + obs[:, 1] ** 2).clamp(min=1e-12)
    cos, sin = (obs[:, 0] / norm).view(k, 1, 1), (obs[:, 1] / norm).view(k, 1, 1)
    # the rod points along th + pi/2: direction (-sin th, cos th); both ends are rounded
    dx, dy = x - centre, y - centre  # [1, 1, W], [1, H, 1]
    along = -dx * sin + dy * cos
    across = dx * cos + dy * sin
    length, half_width = 1.0 * _PEND_SCALE, 0.2 * _PEND_SCALE / 2
    rod = ((along - length / 2).abs() <= length / 2) & (across.abs() <= half_width)
    radius2 = dx * dx + dy * dy  # [1, H, W]
    tip = (along - length) ** 2 + across**2 <= half_width**2
    label = (rod | tip | (radius2 <= half_width**2)).to(torch.uint8)
    label = torch.where(radius2 <= (0.05 * _PEND_SCALE) ** 2, 2, label)
    return _palette((_WHITE, _ROD_COLOR, _PIVOT_COLOR), dev)[label.long()]
