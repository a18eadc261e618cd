"""The spy plot of the linear part: :func:`spy` and the images behind it, :func:`spy_image`
(how to read it: the docstring of :mod:`seq2d.plot`)."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.colors import LinearSegmentedColormap, PowerNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..errors import InvalidValue
from ..core import core_of
from .common import _check_path, _model_name, _new_axes, _pct, _save

SPY_DOWNSAMPLE_ABOVE = 2000  # N above which spy() pools the mask (never plot millions of points)

SPY_COLOR = "#08306b"
FROZEN_COLOR = "#807dba"
IDENTITY_COLOR = "#2ca02c"
MODULE_COLOR = "#e6550d"


def _pool_into(img: np.ndarray, mask: torch.Tensor, r0: int, c0: int, f: int) -> None:
    """OR the bool ``mask`` placed at (r0, c0) into ``img``, block-max pooled by ``f``."""
    h, w = mask.shape
    if f == 1:
        img[r0:r0 + h, c0:c0 + w] |= mask.numpy()
        return
    pr, pc = r0 % f, c0 % f
    H, W = -(-(pr + h) // f), -(-(pc + w) // f)
    pad = torch.zeros(H * f, W * f, dtype=torch.bool)
    pad[pr:pr + h, pc:pc + w] = mask
    pooled = pad.view(H, f, W, f).any(dim=3).any(dim=1).numpy()
    img[r0 // f:r0 // f + H, c0 // f:c0 // f + W] |= pooled


def _tie_keys(core) -> dict[tuple[int, int], int]:
    """Tie group of every linear position that shares its weight with another one, numbered
    in order of first appearance (as :func:`seq2d.graph.to_networkx` does); the tiles of a
    block-sparse model are tied when they are views of the same engine group."""
    key = {}
    for i, j, kind, blk in core.positions():
        if kind == "linear":
            g = getattr(blk, "group", None)
            key[(i, j)] = ("group", g) if core.engine is not None and g is not None else ("obj", id(blk))
    uses: dict = {}
    for k in key.values():
        uses[k] = uses.get(k, 0) + 1
    ids: dict = {}
    return {p: ids.setdefault(k, len(ids)) for p, k in key.items() if uses[k] > 1}


_CHUNK = 1 << 22  # entries per chunk of tiles or rows: bounds the temporary memory


def _spy_tiles(core, f: int, train: np.ndarray, frozen: np.ndarray, counts: np.ndarray) -> None:
    """Fill the images from the stored tiles of the block-sparse engine (never a dense block)."""
    e = core.engine
    T = e.tile
    toff = torch.tensor(e.toff)
    off = torch.tensor(core.offsets)
    rows, cols, data = e.pos_row.cpu().long(), e.pos_col.cpu().long(), e.pos_data.cpu().long()
    si = torch.searchsorted(toff, rows, right=True) - 1  # slot of each stored tile's rows
    sj = torch.searchsorted(toff, cols, right=True) - 1
    r0 = off[si] + (rows - toff[si]) * T
    c0 = off[sj] + (cols - toff[sj]) * T
    rend, cend = off[si + 1], off[sj + 1]
    tmask = None if e.tmask is None else e.tmask.detach().cpu()
    fz_all = None if e.frozen is None else e.frozen.detach().cpu()
    ar = torch.arange(T)
    step = max(1, _CHUNK // (T * T))
    cnt = torch.zeros(core.n, core.n, dtype=torch.long)
    for s in range(0, len(rows), step):
        sl = slice(s, s + step)
        d = data[sl]
        k = len(d)
        valid = ((r0[sl, None] + ar) < rend[sl, None])[:, :, None] & ((c0[sl, None] + ar) < cend[sl, None])[:, None, :]
        tm = (tmask[d].transpose(1, 2) if tmask is not None else torch.ones(k, T, T, dtype=torch.bool)) & valid
        fz = None
        if fz_all is not None:
            fz = (fz_all[d].transpose(1, 2) != 0) & ~tm & valid
        both = tm if fz is None else tm | fz
        cnt.index_put_((si[sl], sj[sl]), both.sum(dim=(1, 2)), accumulate=True)
        for img, m in ((train, tm), (frozen, fz)):
            if m is None:
                continue
            t, a, b = m.nonzero(as_tuple=True)
            img[((r0[sl][t] + a) // f).numpy(), ((c0[sl][t] + b) // f).numpy()] = True
    counts += cnt.numpy()


@torch.no_grad()
def _spy_data(core, max_size: int) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
        raise InvalidValue(f"max_size must be a positive int, got {max_size!r}")
    off = core.offsets
    N = off[-1]
    f = 1 if N <= SPY_DOWNSAMPLE_ABOVE else -(-N // max_size)
    M = -(-N // f)
    train = np.zeros((M, M), dtype=bool)
    frozen = np.zeros((M, M), dtype=bool)
    counts = np.zeros((core.n, core.n), dtype=np.int64)  # stored entries per block
    if core.engine is not None:
        _spy_tiles(core, f, train, frozen, counts)
        return train, frozen, f, counts
    for i, j, kind, blk in core.positions():
        if kind != "linear":
            continue
        tm = blk.trainable_mask().detach().to("cpu", torch.bool)
        fz = None if blk.frozen is None else (blk.frozen.detach().cpu() != 0) & ~tm
        _pool_into(train, tm, off[i], off[j], f)
        counts[i, j] = int(tm.sum())
        if fz is not None:
            _pool_into(frozen, fz, off[i], off[j], f)
            counts[i, j] += int(fz.sum())
    return train, frozen, f, counts


def spy_image(model, max_size: int = 1000) -> tuple[np.ndarray, np.ndarray, int]:
    """The stored entries of the linear part as images: ``(trainable, frozen, f)``.

    ``trainable`` and ``frozen`` are bool arrays of shape ``(ceil(N/f), ceil(N/f))``, rows =
    outputs; ``frozen`` marks non-zero fixed entries that are not trainable. ``f = 1`` (the
    exact ``N x N`` mask) when ``N <= SPY_DOWNSAMPLE_ABOVE``, else the smallest factor that
    gives at most ``max_size`` pixels a side; a pixel is then set when any entry of its
    ``f x f`` cell is (block-max pooling). Memory stays proportional to the largest dense
    block, or to a chunk of stored tiles for a block-sparse model.
    """
    train, frozen, f, _ = _spy_data(core_of(model), max_size)
    return train, frozen, f


def _alpha_cmap(color: str) -> LinearSegmentedColormap:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return LinearSegmentedColormap.from_list("a", [(r, g, b, 0.0), (r, g, b, 1.0)])


def _slot_ticks(off, sizes, length_pt: float, fontsize: float, vertical: bool):
    """Tick positions and labels at slot centres, thinned so labels do not overlap."""
    N = off[-1]
    ticks, labels = [], []
    last = -1e9
    for k, s in enumerate(sizes):
        centre = off[k] + s / 2
        label = f"{k}\n{s}" if not vertical else f"{k}: {s}"
        need = (fontsize * 2.4) if not vertical else fontsize * 1.3
        if not vertical:
            need = max(need, 0.62 * fontsize * max(len(str(k)), len(str(s))) + 3)
        at = centre / N * length_pt
        if at - last >= need:
            ticks.append(centre)
            labels.append(label)
            last = at
    return ticks, labels


def spy(model, ax=None, path=None, annotate: bool = True, *, max_size: int = 1000, title: str | None = None,
        legend: bool = True, dpi: float = 100) -> Figure:
    """Spy plot of the linear part of ``model`` (see the module docstring).

    Args:
        model: a Sequential2D (dense or block-sparse), or a wrapper with ``.core``.
        ax: Axes to draw into (default: a new figure).
        path: save the figure here (``.png`` or ``.svg``; anything else is a ValueError).
        annotate: write each non-empty block's density (``I`` for identity, the class name
            for a module) in the block when it is large enough for the text.
        max_size: the pooled image's side when ``N > SPY_DOWNSAMPLE_ABOVE``.
        title, legend, dpi: as for :func:`draw_graph`.

    Returns:
        The Figure (``ax.figure`` when ``ax`` was given).
    """
    out = _check_path(path)
    core = core_of(model)
    train, frozen, f, counts = _spy_data(core, max_size)
    ties = _tie_keys(core)
    off, sizes, N = core.offsets, core.sizes, core.offsets[-1]
    own = ax is None
    if own:
        fig, ax = _new_axes((7.0, 7.4))
    else:
        fig = ax.figure
    M = train.shape[0]
    extent = (0, M * f, M * f, 0)
    # density shading: the image is averaged when drawn smaller than N x N, and the power norm
    # keeps a sparse pattern visible instead of fading it to white
    common = dict(extent=extent, interpolation="antialiased", interpolation_stage="data", aspect="equal", zorder=1)
    ax.imshow(train.astype(np.float32), cmap=_alpha_cmap(SPY_COLOR), norm=PowerNorm(0.5, vmin=0, vmax=1), **common)
    if frozen.any():
        ax.imshow(frozen.astype(np.float32), cmap=_alpha_cmap(FROZEN_COLOR), norm=PowerNorm(0.5, vmin=0, vmax=1), **common)
    kinds: set[str] = set()
    for i, j, kind, blk in core.positions():
        kinds.add(kind)
        r0, c0 = off[i], off[j]
        if kind == "identity":
            ax.add_line(Line2D([c0, c0 + sizes[j]], [r0, r0 + sizes[i]], color=IDENTITY_COLOR, linewidth=1.6, zorder=3))
        elif kind == "module":
            ax.add_patch(Rectangle((c0, r0), sizes[j], sizes[i], fill=False, hatch="////", edgecolor=MODULE_COLOR,
                                   linewidth=0.9, zorder=3))
    for o in off[1:-1]:
        ax.axhline(o, color="#999999", linewidth=0.5, zorder=2)
        ax.axvline(o, color="#999999", linewidth=0.5, zorder=2)
    ax.set_xlim(0, N)
    ax.set_ylim(N, 0)

    # axes length in points (for label thinning and block annotations)
    bbox = ax.get_position()
    fw, fh = fig.get_size_inches()
    side = min(bbox.width * fw, bbox.height * fh) * 72
    fs = 7
    xt, xl = _slot_ticks(off, sizes, side, fs, vertical=False)
    yt, yl = _slot_ticks(off, sizes, side, fs, vertical=True)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xticks(xt, xl, fontsize=fs)
    ax.set_yticks(yt, yl, fontsize=fs)
    ax.tick_params(length=0)
    ax.set_xlabel("input slot j (columns): index, size", fontsize=8)
    ax.set_ylabel("output slot i (rows): index: size", fontsize=8)

    if annotate:
        for i, j, kind, blk in core.positions():
            if kind == "identity":
                text = "I"
            elif kind == "module":
                text = type(blk).__name__
            else:
                text = _pct(counts[i, j] / (sizes[i] * sizes[j])) + (f" t{ties[(i, j)]}" if (i, j) in ties else "")
            w_pt, h_pt = sizes[j] / N * side, sizes[i] / N * side
            size = min(8.0, max(5.0, h_pt / 2.2))
            if w_pt < 0.62 * size * len(text) + 2 or h_pt < size * 1.25:
                text = text.replace(" ", "\n")  # narrow but tall: one word a line
                size = 6.0
                lines = text.split("\n")
                if w_pt < 0.62 * size * max(map(len, lines)) + 2 or h_pt < size * 1.25 * len(lines):
                    continue  # too small to hold the text
            ax.text(off[j] + sizes[j] / 2, off[i] + sizes[i] / 2, text, ha="center", va="center", fontsize=size,
                    zorder=4, bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85))

    stored = int(counts.sum())
    t = f"{_model_name(model)}: linear part, N = {N:,}, {stored:,} stored entries ({_pct(stored / (N * N))})"
    if core.engine is not None:
        e = core.engine
        t += f"\nblock-sparse: tile {e.tile}, {e.nnz_tiles:,} stored tiles ({_pct(e.density)} of all tiles)"
    if f > 1:
        t += f"\nshown {M} x {M}: {f} x {f} block-max pooled"
    ax.set_title(title if title is not None else t, fontsize=9, pad=10)
    if legend:
        handles = [Patch(facecolor=SPY_COLOR, label="stored (trainable)")]
        if frozen.any():
            handles.append(Patch(facecolor=FROZEN_COLOR, label="frozen (fixed, non-zero)"))
        if "identity" in kinds:
            handles.append(Line2D([], [], color=IDENTITY_COLOR, linewidth=1.6, label="identity block"))
        if "module" in kinds:
            handles.append(Patch(facecolor="white", edgecolor=MODULE_COLOR, hatch="////", label="module block"))
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=len(handles), fontsize=7,
                  frameon=False)
    _save(fig, out, dpi)
    return fig
