"""Batched, on-device data augmentation for image batches: random perspective and random erasing.

Both follow torchvision's semantics (``RandomPerspective`` and ``RandomErasing``), but draw the
random parameters for a whole batch at once from a given ``torch.Generator`` and apply them with
tensor ops on the data's device: no Python loop over images, no worker processes, no host
synchronisation.

:class:`Augment` applies random perspective first, then random erasing (the usual order of a
torchvision pipeline, where ``RandomPerspective`` acts on the image and ``RandomErasing``
follows ``Normalize``).  Inputs are ``(B, C, H, W)`` or flattened ``(B, H*W)`` square images
(``C = 1``); the output has the input's shape and dtype.  With both probabilities 0 the input
itself is returned (no copy, no random numbers drawn).

Values: the inputs are normally *normalised* MNIST pixels (see :mod:`seq2d.data.mnist`), so

* the perspective warp fills the area outside the source image with ``perspective_fill``,
  default :data:`BLACK` ``= (0 - 0.1307) / 0.3081``, the normalised value of a black pixel, so
  borders look black as with torchvision's ``RandomPerspective(fill=0)`` applied before
  ``ToTensor``/``Normalize``.  The fill is exact bilinear interpolation with a constant border:
  ``grid_sample(x - fill, zeros padding) + fill``.  (torchvision's tensor ``perspective`` blends
  the fill with ``img * mask + (1 - mask) * fill``, which weights the partially-outside border
  pixels slightly differently; with ``fill = 0`` both are identical.)  Pass ``0.0`` for
  un-normalised inputs;
* erasing writes ``erasing_value`` (default 0.0, i.e. the mean grey in normalised space, the
  same as torchvision's ``RandomErasing(value=0)`` after ``Normalize``).

Random-number streams: the parameters are drawn on the generator's device (or the data's device
when ``generator`` is None, from the default generator) and moved to the data's device.  The
same generator state gives the same output; a CPU and a CUDA generator give different draws.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

from ..errors import InvalidType, InvalidValue
from .mnist import BLACK

__all__ = ["Augment", "BLACK", "erase", "erasing_params", "perspective", "perspective_coeffs", "perspective_params"]


def _rng_device(generator: torch.Generator | None, device: torch.device) -> torch.device:
    return generator.device if generator is not None else device


# --------------------------------------------------------------------------- random erasing


def erasing_params(
    batch: int,
    height: int,
    width: int,
    *,
    p: float,
    scale: tuple[float, float] = (0.02, 0.33),
    ratio: tuple[float, float] = (0.3, 3.3),
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, torch.Tensor]:
    """Per-image rectangles of ``torchvision.transforms.RandomErasing``, for a batch.

    For each image: applied with probability ``p``; up to 10 attempts draw an area
    ``H*W*U(scale)`` and an aspect ratio ``exp(U(log ratio))``, ``h = round(sqrt(area*r))``,
    ``w = round(sqrt(area/r))``; the first attempt with ``h < H`` and ``w < W`` wins (none: the
    image is left alone, as torchvision does); the corner is uniform over valid positions.
    Returns int64 tensors ``top, left, h, w`` and the bool ``apply`` (all ``(batch,)``) on
    ``device``.
    """
    dev = torch.device(device)
    gdev = _rng_device(generator, dev)
    attempts = 10
    u = torch.rand(batch, 3, attempts, generator=generator, device=gdev, dtype=torch.float64)
    coin = torch.rand(batch, generator=generator, device=gdev)
    pos = torch.rand(batch, 2, generator=generator, device=gdev, dtype=torch.float64)
    area = height * width * (scale[0] + (scale[1] - scale[0]) * u[:, 0])
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(lo + (hi - lo) * u[:, 1])
    hs = torch.round(torch.sqrt(area * aspect)).long()
    ws = torch.round(torch.sqrt(area / aspect)).long()
    valid = (hs < height) & (ws < width)
    first = valid.to(torch.int8).argmax(dim=1, keepdim=True)  # first valid attempt (0 if none)
    h = hs.gather(1, first).squeeze(1)
    w = ws.gather(1, first).squeeze(1)
    ok = valid.any(dim=1)
    h = torch.where(ok, h, torch.zeros_like(h))
    w = torch.where(ok, w, torch.zeros_like(w))
    top = torch.floor(pos[:, 0] * (height - h + 1)).long().clamp_(min=0).minimum(height - h)
    left = torch.floor(pos[:, 1] * (width - w + 1)).long().clamp_(min=0).minimum(width - w)
    apply = (coin < p) & ok
    out = {"top": top, "left": left, "h": h, "w": w, "apply": apply}
    return {k: v.to(dev, non_blocking=True) for k, v in out.items()}


def erase(x: torch.Tensor, params: dict[str, torch.Tensor], value: float = 0.0) -> torch.Tensor:
    """Write ``value`` into one rectangle per image of ``x`` ``(B, C, H, W)`` where ``apply``."""
    H, W = x.shape[-2:]
    rows = torch.arange(H, device=x.device)
    cols = torch.arange(W, device=x.device)
    top, left, h, w, apply = (params[k] for k in ("top", "left", "h", "w", "apply"))
    rmask = (rows >= top[:, None]) & (rows < (top + h)[:, None])
    cmask = (cols >= left[:, None]) & (cols < (left + w)[:, None])
    mask = rmask[:, :, None] & cmask[:, None, :] & apply[:, None, None]
    return x.masked_fill(mask[:, None], value)


# --------------------------------------------------------------------------- random perspective


def perspective_params(
    batch: int,
    height: int,
    width: int,
    *,
    p: float,
    distortion_scale: float = 0.5,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-image end points of ``torchvision.transforms.RandomPerspective.get_params``, batched.

    Returns ``endpoints`` int64 ``(batch, 4, 2)`` (x, y of top-left, top-right, bottom-right,
    bottom-left; each corner moved inwards by up to ``int(distortion_scale * (W // 2))``
    horizontally and ``int(distortion_scale * (H // 2))`` vertically) and ``apply`` bool
    ``(batch,)`` (probability ``p``), on ``device``.
    """
    dev = torch.device(device)
    gdev = _rng_device(generator, dev)
    dw = int(distortion_scale * (width // 2))
    dh = int(distortion_scale * (height // 2))
    coin = torch.rand(batch, generator=generator, device=gdev)

    def draw(lo: int, hi: int) -> torch.Tensor:
        return torch.randint(lo, hi, (batch,), generator=generator, device=gdev)

    near_x = lambda: draw(0, dw + 1)  # noqa: E731
    far_x = lambda: draw(width - dw - 1, width)  # noqa: E731
    near_y = lambda: draw(0, dh + 1)  # noqa: E731
    far_y = lambda: draw(height - dh - 1, height)  # noqa: E731
    tl = torch.stack([near_x(), near_y()], -1)
    tr = torch.stack([far_x(), near_y()], -1)
    br = torch.stack([far_x(), far_y()], -1)
    bl = torch.stack([near_x(), far_y()], -1)
    end = torch.stack([tl, tr, br, bl], 1)
    return end.to(dev, non_blocking=True), (coin < p).to(dev, non_blocking=True)


def _startpoints(height: int, width: int, **kw) -> torch.Tensor:
    return torch.tensor([[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]], **kw)


# Constant tensors built from Python lists (``torch.tensor(...)``) are made on the host; on a GPU
# each would be a host-to-device copy per batch, so they are made once per (size, device) and
# reused. They are read only (never written in place), so sharing them is safe.
@lru_cache(maxsize=64)
def _cached_startpoints(height: int, width: int, device: torch.device) -> torch.Tensor:
    return _startpoints(height, width, dtype=torch.float64, device=device)


@lru_cache(maxsize=16)
def _identity_coeffs(device: torch.device) -> torch.Tensor:
    return torch.tensor([1, 0, 0, 0, 1, 0, 0, 0], dtype=torch.float64, device=device)


def perspective_coeffs(startpoints: torch.Tensor, endpoints: torch.Tensor) -> torch.Tensor:
    """Batched coefficients ``(a, b, c, d, e, f, g, h)`` mapping output to input pixels.

    ``(x, y) -> ((a x + b y + c) / (g x + h y + 1), (d x + e y + f) / (g x + h y + 1))`` maps each
    end point to its start point, exactly as ``torchvision.transforms.functional
    ._get_perspective_coeffs`` (which solves the same 8x8 system by least squares, one image at a
    time).  ``startpoints`` ``(4, 2)`` or ``(B, 4, 2)``, ``endpoints`` ``(B, 4, 2)``; solved in
    float64 with one batched ``torch.linalg.solve_ex``.  Singular systems (three collinear
    corners, possible only for ``distortion_scale`` near 1) get the identity.  Returns
    ``(B, 8)`` float64.
    """
    dt = torch.float64
    e = endpoints.to(dt)
    s = startpoints.to(device=e.device, dtype=dt).expand_as(e)
    px, py, sx, sy = e[..., 0], e[..., 1], s[..., 0], s[..., 1]
    one, zero = torch.ones_like(px), torch.zeros_like(px)
    rows_x = torch.stack([px, py, one, zero, zero, zero, -sx * px, -sx * py], -1)
    rows_y = torch.stack([zero, zero, zero, px, py, one, -sy * px, -sy * py], -1)
    A = torch.stack([rows_x, rows_y], 2).reshape(e.shape[0], 8, 8)
    b = torch.stack([sx, sy], -1).reshape(e.shape[0], 8)
    sol, info = torch.linalg.solve_ex(A, b)
    ident = _identity_coeffs(e.device)
    bad = (info != 0) | ~torch.isfinite(sol).all(-1)
    return torch.where(bad[:, None], ident, sol)


def perspective(
    x: torch.Tensor,
    endpoints: torch.Tensor,
    apply: torch.Tensor | None = None,
    *,
    fill: float = BLACK,
) -> torch.Tensor:
    """Warp each image of ``x`` ``(B, C, H, W)`` so its corners go to ``endpoints`` ``(B, 4, 2)``.

    torchvision's ``perspective`` geometry (pixel centres at ``i + 0.5``, ``align_corners=False``),
    bilinear, area outside the source filled with ``fill`` (exactly, see the module docstring).
    Images with ``apply`` False are returned unchanged (bit for bit).
    """
    B, C, H, W = x.shape
    work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    start = _cached_startpoints(H, W, endpoints.device)  # built once per size and device
    coeffs = perspective_coeffs(start, endpoints).to(device=x.device, dtype=work)
    c = [coeffs[:, k, None, None] for k in range(8)]
    xs = (torch.arange(W, device=x.device, dtype=work) + 0.5)[None, None, :]
    ys = (torch.arange(H, device=x.device, dtype=work) + 0.5)[None, :, None]
    den = c[6] * xs + c[7] * ys + 1.0
    gx = (c[0] * xs + c[1] * ys + c[2]) / (0.5 * W) / den - 1.0
    gy = (c[3] * xs + c[4] * ys + c[5]) / (0.5 * H) / den - 1.0
    grid = torch.stack([gx, gy], -1)
    # A pixel whose projective denominator is <= 0 maps to the far side of the horizon (on tiny
    # images with strong distortion): outside the source, so it gets ``fill`` (NaN otherwise).
    # For every warp with den > 0 everywhere (all the MNIST sizes tested) this changes nothing.
    # Applied unconditionally: testing ``outside.any()`` first would be a host sync per batch.
    outside = ~((den > 0) & torch.isfinite(grid).all(-1))
    grid = grid.masked_fill(outside[..., None], 2.0)
    xin = x.to(work)
    out = F.grid_sample(xin - fill, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + fill
    out = out.to(x.dtype)
    if apply is not None:
        out = torch.where(apply[:, None, None, None], out, x)
    return out


# --------------------------------------------------------------------------- the transform


class Augment:
    """Random perspective then random erasing, batched on the device.

    ``aug(x, generator)`` -> augmented copy of ``x`` (or ``x`` itself when both probabilities are
    0).  ``x``: floating point ``(B, C, H, W)`` or flattened ``(B, H*W)`` (square images,
    ``C = 1``).  See the module docstring for semantics and fill values.
    """

    def __init__(
        self,
        erasing_p: float = 0.0,
        perspective_p: float = 0.0,
        perspective_scale: float = 0.5,
        erasing_scale: tuple[float, float] = (0.02, 0.33),
        erasing_ratio: tuple[float, float] = (0.3, 3.3),
        erasing_value: float = 0.0,
        perspective_fill: float = BLACK,
    ):
        for name, v in (("erasing_p", erasing_p), ("perspective_p", perspective_p), ("perspective_scale", perspective_scale)):
            if not 0.0 <= v <= 1.0:
                raise InvalidValue(f"{name} must be in [0, 1], got {v}")
        lo, hi = erasing_scale
        if not 0.0 <= lo <= hi <= 1.0:
            raise InvalidValue(f"erasing_scale must satisfy 0 <= lo <= hi <= 1, got {erasing_scale}")
        rlo, rhi = erasing_ratio
        if not 0.0 < rlo <= rhi:
            raise InvalidValue(f"erasing_ratio must satisfy 0 < lo <= hi, got {erasing_ratio}")
        self.erasing_p = float(erasing_p)
        self.perspective_p = float(perspective_p)
        self.perspective_scale = float(perspective_scale)
        self.erasing_scale = (float(lo), float(hi))
        self.erasing_ratio = (float(rlo), float(rhi))
        self.erasing_value = float(erasing_value)
        self.perspective_fill = float(perspective_fill)

    @property
    def enabled(self) -> bool:
        return self.erasing_p > 0 or self.perspective_p > 0

    def __repr__(self) -> str:
        return (
            f"Augment(erasing_p={self.erasing_p}, perspective_p={self.perspective_p}, "
            f"perspective_scale={self.perspective_scale}, erasing_scale={self.erasing_scale}, "
            f"erasing_ratio={self.erasing_ratio}, erasing_value={self.erasing_value}, "
            f"perspective_fill={self.perspective_fill:.6g})"
        )

    def __call__(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        if not self.enabled:
            return x
        shape = x.shape
        if x.dim() == 2:
            side = math.isqrt(x.shape[1])
            if side * side != x.shape[1]:
                raise InvalidValue(f"flattened input of width {x.shape[1]} is not a square image")
            x = x.view(x.shape[0], 1, side, side) if x.is_contiguous() else x.reshape(x.shape[0], 1, side, side)
        elif x.dim() != 4:
            raise InvalidValue(f"expected (B, C, H, W) or (B, H*W), got shape {tuple(shape)}")
        if not x.is_floating_point():
            raise InvalidType(f"expected a floating-point tensor, got {x.dtype}")
        B, _, H, W = x.shape
        if self.perspective_p > 0:
            end, apply = perspective_params(
                B, H, W, p=self.perspective_p, distortion_scale=self.perspective_scale, generator=generator, device=x.device
            )
            x = perspective(x, end, apply, fill=self.perspective_fill)
        if self.erasing_p > 0:
            params = erasing_params(
                B, H, W, p=self.erasing_p, scale=self.erasing_scale, ratio=self.erasing_ratio, generator=generator, device=x.device
            )
            x = erase(x, params, self.erasing_value)
        return x.reshape(shape)
