"""The spy plot of the linear part: :func:`spy` and the images behind it, :func:`spy_image`
(how to read it: the docstring of :mod:`seq2d.plot`)."""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.colors import LinearSegmentedColormap, PowerNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..errors import InvalidValue
from ..core import core_of
from .common import _check_path, _model_name, _pct, _slot_labels, _style, new_figure, save_figure

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
    block-sparse model are tied when they are views of the same matrix group."""
    key = {}
    for i, j, kind, blk in core.positions():
        if kind == "linear":
            g = getattr(blk, "group", None)
            key[(i, j)] = ("group", g) if core.matrix is not None and g is not None else ("obj", id(blk))
    uses: dict = {}
    for k in key.values():
        uses[k] = uses.get(k, 0) + 1
    ids: dict = {}
    return {p: ids.setdefault(k, len(ids)) for p, k in key.items() if uses[k] > 1}


_CHUNK = 1 << 22  # entries per chunk of tiles or rows: bounds the temporary memory


def _spy_tiles(core, f: int, train: np.ndarray, frozen: np.ndarray, counts: np.ndarray) -> None:
    """Fill the images from the stored tiles of the block-sparse matrix (never a dense block)."""
    e = core.matrix
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
    if core.matrix is not None:
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


def _drawn_sizes(sizes, min_slot: float) -> list[float]:
    """The drawn width of each slot: its size, or ``min_slot`` of the drawn total when that is
    more (a 10-unit output slot next to 784 inputs stays visible). The small slots S solve
    ``D = sum(sizes outside S) / (1 - |S| min_slot)``; ``min_slot <= 0.5 / n`` keeps one slot at scale."""
    n = len(sizes)
    m = min(float(min_slot), 0.5 / n)
    small: set[int] = set()
    while True:
        big = sum(s for k, s in enumerate(sizes) if k not in small)
        total = big / (1.0 - len(small) * m)
        grown = {k for k, s in enumerate(sizes) if s < m * total}
        if grown == small:
            return [max(float(s), m * total) if k in small else float(s) for k, s in enumerate(sizes)]
        small = grown  # only grows (the total grows with it): at most n rounds


def _pixel_index(off, sizes, d0, widths, start: float, length: float, pixels: int, f: int) -> np.ndarray:
    """For each of ``pixels`` image pixels covering the drawn span ``[start, start + length)``:
    the pooled index (true index // f) of the entry drawn at its centre."""
    d0 = np.asarray(d0, dtype=np.float64)
    u = start + (np.arange(pixels) + 0.5) * (length / pixels)
    k = np.clip(np.searchsorted(d0, u, side="right") - 1, 0, len(sizes) - 1)
    s = np.asarray(sizes)[k]
    t = np.asarray(off[:-1])[k] + np.minimum(s - 1, np.floor((u - d0[k]) * s / np.asarray(widths)[k]).astype(np.int64))
    return t // f


def _slot_ticks(centres, labels, total: float, length_pt: float, fontsize: float, vertical: bool):
    """The ticks at the slot centres (drawn units) that fit, thinned so labels do not overlap."""
    ticks, out = [], []
    last = -1e9
    for c, label in zip(centres, labels):
        lines = label.split("\n")
        need = fontsize * (1.3 * len(lines) if vertical else 0.1) + (0 if vertical else
                                                                      0.62 * fontsize * max(map(len, lines)) + 3)
        at = c / total * length_pt
        if at - last >= need:
            ticks.append(c)
            out.append(label)
            last = at
    return ticks, out


def spy(model, ax=None, path=None, annotate: bool = True, *, max_size: int = 1000, title: str | None = None,
        legend: bool = True, dpi: float = 100, style: str = "default", slot_labels=None,
        min_slot: float = 0.04) -> Figure:
    """Spy plot of the linear part of ``model`` (see the module docstring).

    Args:
        model: a Sequential2D (dense or block-sparse), or a wrapper with ``.core``.
        ax: Axes to draw into (default: a new figure).
        path: save the figure here (``.png`` or ``.svg``; anything else is a ValueError).
        annotate: write each non-empty block's density (``I`` for identity, the class name
            for a module) in a band above its block row, never over the entries; labels that
            would overlap a neighbour are left out.
        max_size: the pooled image's side when ``N > SPY_DOWNSAMPLE_ABOVE``.
        title, legend, dpi, style, slot_labels: as for :func:`draw_graph`.
        min_slot: the smallest drawn width of a slot, as a fraction of the drawn side (default
            0.04; 0 draws every slot to scale). A widened slot's entries are drawn as wider
            cells; the axes always name the true sizes.

    Returns:
        The Figure (``ax.figure`` when ``ax`` was given).
    """
    out = _check_path(path)
    st = _style(style)
    if isinstance(min_slot, bool) or not isinstance(min_slot, (int, float)) or not 0 <= min_slot < 0.5:
        raise InvalidValue(f"min_slot must be a fraction in [0, 0.5), got {min_slot!r}")
    core = core_of(model)
    names = _slot_labels(slot_labels, core.n)
    train, frozen, f, counts = _spy_data(core, max_size)
    ties = _tie_keys(core)
    off, sizes, N = core.offsets, core.sizes, core.offsets[-1]
    own = ax is None
    if own:
        fig, ax = new_figure((7.0, 7.4))
    else:
        fig = ax.figure
    # axes side in points (label sizes and bands)
    bbox = ax.get_position()
    fw, fh = fig.get_size_inches()
    side = min(bbox.width * fw, bbox.height * fh) * 72

    widths = _drawn_sizes(sizes, min_slot)
    D = sum(widths)
    dx = [0.0]
    for w in widths:
        dx.append(dx[-1] + w)
    # block labels: one band above each block row that has blocks, its height one label line
    positions = list(core.positions())
    label_fs = st.fs(7)
    rows_with_blocks = sorted({i for i, _, _, _ in positions}) if annotate else []
    band_pt = 1.6 * label_fs
    if annotate and len(rows_with_blocks) * band_pt > 0.3 * side:
        rows_with_blocks = []  # too many block rows to give each a band: no labels
    frac = len(rows_with_blocks) * band_pt / side
    band = band_pt / side * D / (1.0 - frac) if rows_with_blocks else 0.0
    dy, y = [], 0.0  # the top of each slot's strip of rows
    for i, w in enumerate(widths):
        y += band if i in rows_with_blocks else 0.0
        dy.append(y)
        y += w
    H = y

    # the entries, one strip of rows per slot: the image is averaged when drawn smaller than its
    # pixels, and the power norm keeps a sparse pattern visible instead of fading it to white
    M = train.shape[0]
    cols = _pixel_index(off, sizes, dx[:-1], widths, 0.0, D, max(1, math.ceil(D / f)), f)
    images = [(train, SPY_COLOR)] + ([(frozen, FROZEN_COLOR)] if frozen.any() else [])
    for i in range(core.n):
        rows = _pixel_index(off, sizes, dy, widths, dy[i], widths[i], max(1, math.ceil(widths[i] / f)), f)
        rows = np.clip(rows, 0, M - 1)
        for img, color in images:
            ax.imshow(img[np.ix_(rows, cols)].astype(np.float32), cmap=_alpha_cmap(color),
                      norm=PowerNorm(0.5, vmin=0, vmax=1), extent=(0, D, dy[i] + widths[i], dy[i]),
                      interpolation="antialiased", interpolation_stage="data", aspect="equal", zorder=1)
    kinds: set[str] = set()
    for i, j, kind, blk in positions:
        kinds.add(kind)
        x0, y0 = dx[j], dy[i]
        if kind == "identity":
            ax.add_line(Line2D([x0, x0 + widths[j]], [y0, y0 + widths[i]], color=IDENTITY_COLOR, linewidth=1.6,
                               zorder=3))
        elif kind == "module":
            ax.add_patch(Rectangle((x0, y0), widths[j], widths[i], fill=False, hatch="////", edgecolor=MODULE_COLOR,
                                   linewidth=0.9, zorder=3))
    for x in dx[1:-1]:
        ax.axvline(x, color="#999999", linewidth=0.5, zorder=2)
    for i in range(core.n):
        for yy in ({dy[i], dy[i] + widths[i]} if band else ({dy[i]} if i else set())):
            ax.axhline(yy, color="#999999", linewidth=0.5, zorder=2)
    ax.set_xlim(0, D)
    ax.set_ylim(H, 0)
    ax.set_aspect("equal")

    fs = st.fs(7)
    xt, xl = _slot_ticks([dx[k] + widths[k] / 2 for k in range(core.n)], [f"{names[k]}\n{s}" for k, s in
                                                                            enumerate(sizes)], D, side * D / max(D, H),
                         fs, vertical=False)
    yt, yl = _slot_ticks([dy[k] + widths[k] / 2 for k in range(core.n)], [f"{names[k]}: {s}" for k, s in
                                                                            enumerate(sizes)], H, side * H / max(D, H),
                         fs, vertical=True)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xticks(xt, xl, fontsize=fs)
    ax.set_yticks(yt, yl, fontsize=fs)
    ax.tick_params(length=0)
    what = "index" if slot_labels is None else "label"
    ax.set_xlabel(f"input slot j (columns): {what}, size", fontsize=st.fs(8))
    ax.set_ylabel(f"output slot i (rows): {what}: size", fontsize=st.fs(8))

    if rows_with_blocks:
        ax.apply_aspect()  # the box that aspect="equal" gives, as drawn: label extents in points
        renderer = fig.canvas.get_renderer()
        placed: dict[int, list] = {}
        for i, j, kind, blk in sorted(positions, key=lambda p: (p[0], p[1])):
            if kind == "identity":
                text = "I"
            elif kind == "module":
                text = type(blk).__name__
            else:
                text = _pct(counts[i, j] / (sizes[i] * sizes[j])) + (f" t{ties[(i, j)]}" if (i, j) in ties else "")
            t = ax.text(dx[j] + widths[j] / 2, dy[i] - band / 2, text, ha="center", va="center", fontsize=label_fs,
                        zorder=4, clip_on=False)
            box = t.get_window_extent(renderer)
            block = ax.transData.transform([(dx[j], dy[i] - band), (dx[j] + widths[j], dy[i])])
            wide = box.x0 < block[:, 0].min() - 1 or box.x1 > block[:, 0].max() + 1
            if wide or any(box.overlaps(b) for b in placed.get(i, [])):
                t.remove()  # no room above its block: left out rather than drawn over a neighbour
                continue
            placed.setdefault(i, []).append(box)

    stored = int(counts.sum())
    t = f"{_model_name(model)}: linear part, N = {N:,}, {stored:,} stored entries ({_pct(stored / (N * N))})"
    if core.matrix is not None:
        e = core.matrix
        t += f"\nblock-sparse: tile {e.tile}, {e.nnz_tiles:,} stored tiles ({_pct(e.density)} of all tiles)"
    if f > 1:
        t += f"\nshown {M} x {M}: {f} x {f} block-max pooled"
    if any(w > s for w, s in zip(widths, sizes)):
        t += f"\nslots under {100 * min_slot:.0f}% of the side drawn wider (true sizes on the axes)"
    if title is None and st.auto_title:
        title = t
    if title:
        ax.set_title(title, fontsize=st.fs(9), pad=10)
    if legend:
        handles = [Patch(facecolor=SPY_COLOR, label="stored (trainable)")]
        if frozen.any():
            handles.append(Patch(facecolor=FROZEN_COLOR, label="frozen (fixed, non-zero)"))
        if "identity" in kinds:
            handles.append(Line2D([], [], color=IDENTITY_COLOR, linewidth=1.6, label="identity block"))
        if "module" in kinds:
            handles.append(Patch(facecolor="white", edgecolor=MODULE_COLOR, hatch="////", label="module block"))
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=len(handles),
                  fontsize=st.fs(7), frameon=False, borderpad=st.legend_pad)
    save_figure(fig, out, dpi, st)
    return fig
