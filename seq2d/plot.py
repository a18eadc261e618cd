"""Pictures of a Sequential2D: the block graph (:func:`draw_graph`) and the mask of its
linear part (:func:`spy`).

Both accept a :class:`~seq2d.Sequential2D` or a wrapper with a ``.core`` (RNN,
TruncatedRNN, transformer layers), draw into ``ax`` when given (else into a new figure),
save to ``path`` when given (``.png`` or ``.svg``) and return the Figure.

New figures are plain :class:`matplotlib.figure.Figure` objects on the Agg canvas, never
registered with ``pyplot``: nothing needs closing, no window opens, and the global
matplotlib backend is left alone. A figure the caller passed in (through ``ax``) is only
drawn into and saved, never closed.

Reading the pictures:

- **graph**: one node per slot, one arrow ``j -> i`` per block ``F[i][j]``. Columns are
  the depth (longest path from the held slots); a held input slot is drawn one column
  before its first reader (so the inputs of a truncated RNN line up with their time
  steps). A recurrent core (a strongly connected component) occupies consecutive columns
  (shortest distance from the inputs inside it), later slots follow it, and its edges
  that point back or stay in a column, self-loops included, are red and curved. Edges that
  skip columns arc above. Node area grows with the slot size (log scale by default),
  colour = role; edge width grows with the block's trainable parameters (log scale), style =
  kind (linear solid, identity dashed, module dotted), tied blocks share a colour.
- **spy**: the ``N x N`` matrix of the linear blocks, rows = outputs at the top. A dark
  entry is *stored* (trainable, or frozen and non-zero: the support of
  ``model.linear_weight()``, counting entries whose current value happens to be zero);
  identity blocks are green diagonals, module blocks hatched rectangles, each non-empty
  block is labelled with its density when it is big enough to hold the text. Above
  ``N = 2000`` the mask is block-max pooled to at most ``max_size x max_size`` pixels.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import networkx as nx
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LinearSegmentedColormap, PowerNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Patch, Rectangle
from matplotlib.path import Path as MPath

from .graph import _core, to_networkx

__all__ = ["draw_graph", "spy", "graph_layout", "spy_image", "SAVE_FORMATS", "SPY_DOWNSAMPLE_ABOVE"]

SAVE_FORMATS = (".png", ".svg")
SPY_DOWNSAMPLE_ABOVE = 2000  # N above which spy() pools the mask (never plot millions of points)

ROLE_COLORS = {"input": "#9ecae1", "hidden": "#e0e0e0", "output": "#fdae6b"}
KIND_STYLE = {  # kind -> (colour, linestyle)
    "linear": ("#3a3a3a", "-"),
    "identity": ("#3a3a3a", (0, (4, 2.5))),
    "module": ("#6a3d9a", (0, (1, 1.4))),
}
RECURRENT_COLOR = "#d62728"
# tie groups: tab10 without red (recurrent edges) and grey (plain edges)
TIE_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]
SPY_COLOR = "#08306b"
FROZEN_COLOR = "#807dba"
IDENTITY_COLOR = "#2ca02c"
MODULE_COLOR = "#e6550d"


# ---------------------------------------------------------------------------- shared helpers
def _check_path(path) -> Path | None:
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    p = Path(path)
    if p.suffix.lower() not in SAVE_FORMATS:
        raise ValueError(f"cannot save a figure as {p.suffix or 'a file without suffix'!r} ({p.name}); "
                         f"use one of {', '.join(SAVE_FORMATS)}")
    return p


def _new_axes(figsize) -> tuple[Figure, object]:
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)  # the Agg canvas: no screen, no pyplot registry
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig: Figure, path: Path | None, dpi: float) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi, bbox_inches="tight", facecolor="white")


def _model_name(model) -> str:
    return type(model).__name__


def _fmt_count(x: int) -> str:
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.3g}{unit}"
    return str(x)


def _pct(d: float) -> str:
    if d >= 0.995:
        return "100%"
    if d >= 0.1:
        return f"{100 * d:.0f}%"
    if d >= 0.01:
        return f"{100 * d:.1f}%"
    return f"{100 * d:.2g}%"


# ---------------------------------------------------------------------------- layout
def _pav(b: list[float]) -> list[float]:
    """Isotonic (non-decreasing) least-squares fit of ``b`` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight]
    for v in b:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2 = blocks.pop()
            m1, w1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    out: list[float] = []
    for m, w in blocks:
        out += [m] * int(w)
    return out


ROW_GAP = 1.3  # vertical distance between the slots of one column (columns are 1 apart)


def _place_column(nodes: list[int], want: dict[int, float], gap: float = ROW_GAP) -> dict[int, float]:
    """y positions at least ``gap`` apart, in the order of ``want`` (ties: slot index), as close
    as possible (least squares) to ``want``."""
    order = sorted(nodes, key=lambda v: (-want[v], v))  # top (large y) first
    # y_k = -(z_k + k * gap) with z non-decreasing keeps a spacing of >= gap going down
    z = _pav([-want[v] - k * gap for k, v in enumerate(order)])
    return {v: -(z[k] + k * gap) for k, v in enumerate(order)}


def _columns(g: nx.DiGraph, inputs) -> dict[int, int]:
    """Column of every slot: longest path over the condensation (each recurrent core as one
    unit, its slots in consecutive columns in order of distance from the inputs), then held
    sources moved next to their first reader. For an acyclic graph this is the depth
    (except for those sources)."""
    comps = [set(c) for c in nx.strongly_connected_components(g)]
    comp_of = {v: k for k, c in enumerate(comps) for v in c}
    dist: dict[int, int | None] = {v: None for v in g}
    for src in inputs:
        for v, d in nx.single_source_shortest_path_length(g, src).items():
            dist[v] = d if dist[v] is None else min(dist[v], d)
    offset: dict[int, int] = {}
    width: dict[int, int] = {}
    for k, c in enumerate(comps):
        # a recurrent core is laid out left to right, one slot per column, in order of
        # distance from the inputs (then slot index): edges against that order close cycles
        order = sorted(c, key=lambda v: (dist[v] is None, dist[v] or 0, v))
        for r, v in enumerate(order):
            offset[v] = r
        width[k] = len(c)
    cg = nx.condensation(g, scc=comps)
    xc: dict[int, int] = {}
    for k in nx.topological_sort(cg):
        xc[k] = max((xc[p] + width[p] for p in cg.predecessors(k)), default=0)
    x = {v: xc[comp_of[v]] + offset[v] for v in g}
    for v in g:
        succ = [s for s in g.successors(v) if s != v]
        if g.in_degree(v) == 0 and succ:
            x[v] = max(0, min(x[s] for s in succ) - 1)
    return x


def graph_layout(model, graph: nx.DiGraph | None = None) -> dict[int, tuple[float, float]]:
    """``{slot: (x, y)}`` as :func:`draw_graph` places the slots (x = column, see the module
    docstring; y spreads the slots of a column ``ROW_GAP`` apart, ordered to shorten the
    edges). ``graph``: the model's :func:`~seq2d.graph.to_networkx`, if already at hand."""
    core = _core(model)
    g = to_networkx(core) if graph is None else graph
    x = _columns(g, core.inputs)
    cols: dict[int, list[int]] = {}
    for v in sorted(g):
        cols.setdefault(x[v], []).append(v)
    y: dict[int, float] = {}
    for c, vs in cols.items():  # start: slot order, top to bottom, centred
        for r, v in enumerate(vs):
            y[v] = ((len(vs) - 1) / 2 - r) * ROW_GAP
    keys = sorted(cols)
    for sweep in range(6):  # barycentre sweeps, alternately from the left and from the right
        forward = sweep % 2 == 0
        for c in (keys if forward else reversed(keys)):
            vs = cols[c]
            if len(vs) == 1 and sweep < 5:
                continue  # lone slots follow their neighbours only in the last sweep
            want = {}
            for v in vs:
                nb = [u for u in (g.predecessors(v) if forward else g.successors(v)) if x[u] != c]
                if not nb:
                    nb = [u for u in nx.all_neighbors(g, v) if x[u] != c]
                want[v] = float(np.mean([y[u] for u in nb])) if nb else y[v]
            y.update(_place_column(vs, want))
    y0 = np.mean(list(y.values())) if y else 0.0
    return {v: (float(x[v]), float(y[v] - y0)) for v in g}


# ---------------------------------------------------------------------------- graph drawing
def _radii(g: nx.DiGraph, scale: str) -> dict[int, float]:
    if scale not in ("log", "sqrt"):
        raise ValueError(f"Unknown size_scale {scale!r}. Select from 'log' or 'sqrt'.")
    f = (lambda s: math.log(s + 1)) if scale == "log" else math.sqrt
    vals = {v: f(d["size"]) for v, d in g.nodes(data=True)}
    hi = max(vals.values())
    rmin, rmax = 0.1, 0.27
    # relative to the largest slot (not stretched min..max): slots of 8 and 16 look alike
    return {v: max(rmin, rmax * s / hi) for v, s in vals.items()}


def _self_loop(c: tuple[float, float], r: float) -> MPath:
    cx, cy = c
    a, b = math.radians(60), math.radians(120)
    A = (cx + r * math.cos(a), cy + r * math.sin(a))
    B = (cx + r * math.cos(b), cy + r * math.sin(b))
    h = 0.28 + 0.6 * r
    return MPath([A, (A[0] + 0.45 * h, A[1] + h), (B[0] - 0.45 * h, B[1] + h), B],
                 [MPath.MOVETO, MPath.CURVE4, MPath.CURVE4, MPath.CURVE4])


def draw_graph(model, ax=None, path=None, *, size_scale: str = "log", title: str | None = None,
               legend: bool = True, dpi: float = 100) -> Figure:
    """Draw the block graph of ``model`` (see the module docstring for how to read it).

    Args:
        model: a Sequential2D, or a wrapper with a ``.core`` Sequential2D.
        ax: matplotlib Axes to draw into (default: a new figure sized to the graph).
        path: save the figure here (``.png`` or ``.svg``; anything else is a ValueError).
        size_scale: node area from the slot size, ``"log"`` or ``"sqrt"``.
        title: default ``"<Model>: n slots, steps, depth, trainable parameters"``.
        legend: draw the legend (roles, edge kinds, recurrent edges, tie groups).
        dpi: resolution of a saved PNG.

    Returns:
        The Figure (``ax.figure`` when ``ax`` was given).
    """
    out = _check_path(path)
    core = _core(model)
    g = to_networkx(core)
    pos = graph_layout(core, g)
    rad = _radii(g, size_scale)
    cores = [c for c in nx.strongly_connected_components(g) if len(c) > 1 or g.has_edge(next(iter(c)), next(iter(c)))]
    core_of = {v: k for k, c in enumerate(cores) for v in c}

    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    own = ax is None
    if own:
        w = min(22.0, max(5.5, 1.35 * (max(xs) - min(xs)) + 2.2))
        h = min(16.0, max(3.2, 1.35 * (max(ys) - min(ys)) + 2.4))
        fig, ax = _new_axes((w, h))
    else:
        fig = ax.figure

    # bounds grow with loops and arcs
    bx = [min(xs) - 0.6, max(xs) + 0.6]
    by = [min(ys) - 0.75, max(ys) + 0.5]

    def grow(px, py):
        bx[0], bx[1] = min(bx[0], px - 0.2), max(bx[1], px + 0.2)
        by[0], by[1] = min(by[0], py - 0.2), max(by[1], py + 0.2)

    # recurrent cores with more than one slot: a shaded box behind them
    for c in cores:
        if len(c) < 2:
            continue
        cx = [pos[v][0] for v in c]
        cy = [pos[v][1] for v in c]
        pad = 0.45
        ax.add_patch(FancyBboxPatch((min(cx) - pad, min(cy) - pad - 0.25), max(cx) - min(cx) + 2 * pad,
                                    max(cy) - min(cy) + 2 * pad + 0.55, boxstyle="round,pad=0.02,rounding_size=0.15",
                                    facecolor=RECURRENT_COLOR, alpha=0.06, edgecolor=RECURRENT_COLOR,
                                    linestyle=(0, (3, 2)), linewidth=0.8, zorder=0))
        ax.text(min(cx) - pad + 0.05, max(cy) + pad + 0.22, "recurrent core", color=RECURRENT_COLOR,
                fontsize=7, va="top", ha="left", zorder=1)
        grow(max(cx) + pad, max(cy) + pad + 0.3)

    circles = {}
    for v, d in g.nodes(data=True):
        c = Circle(pos[v], rad[v], facecolor=ROLE_COLORS[d["role"]], edgecolor="#333333",
                   linewidth=1.6 if d["bias"] else 0.9, zorder=3)
        ax.add_patch(c)
        circles[v] = c

    params = [d["params"] for _, _, d in g.edges(data=True) if d["kind"] != "identity"]
    pmax = max(params, default=0)
    lmax = math.log1p(pmax) if pmax > 0 else 1.0
    tie_info: dict[int, tuple[int, int]] = {}  # tie -> (params, positions)
    kinds_seen: set[str] = set()
    any_recurrent = False
    for u, v, d in g.edges(data=True):
        kind = d["kind"]
        kinds_seen.add(kind)
        color, ls = KIND_STYLE[kind]
        if kind == "identity":
            lw = 1.2
        elif kind == "module":
            lw = 2.4 + 1.6 * math.log1p(d["params"]) / lmax
        else:
            lw = 0.7 + 2.6 * math.log1p(d["params"]) / lmax
        recurrent = u in core_of and core_of.get(v) == core_of[u] and pos[u][0] >= pos[v][0]
        if recurrent:
            color, any_recurrent = RECURRENT_COLOR, True
        if d["tie"] is not None:
            color = TIE_COLORS[d["tie"] % len(TIE_COLORS)]
            p, k = tie_info.get(d["tie"], (d["params"], 0))
            tie_info[d["tie"]] = (p, k + 1)
        style = dict(arrowstyle="-|>", mutation_scale=11, linewidth=lw, linestyle=ls, color=color, zorder=2)
        if u == v:
            path_ = _self_loop(pos[u], rad[u])
            arrow = FancyArrowPatch(path=path_, **style)
            for px, py in path_.vertices:
                grow(px, py)
        else:
            (x1, y1), (x2, y2) = pos[u], pos[v]
            span = x2 - x1
            if recurrent:
                rc = -0.5
            elif span > 1 or span <= 0 or (span == 1 and _blocked(pos, u, v, rad)):
                rc = -0.22 if span > 0 else 0.3
            else:
                rc = 0.0
            if rc:
                mx, my = (x1 + x2) / 2, (y1 + y2) / 2
                grow(mx + rc / 2 * (y2 - y1), my - rc / 2 * (x2 - x1))
            arrow = FancyArrowPatch(pos[u], pos[v], patchA=circles[u], patchB=circles[v], shrinkA=1, shrinkB=1,
                                    connectionstyle=f"arc3,rad={rc}", **style)
            if kind == "module":
                blk = core.block(v, u)
                mx, my = (x1 + x2) / 2, (y1 + y2) / 2 - rc / 2 * (x2 - x1)
                ax.text(mx, my + 0.12, type(blk).__name__, fontsize=6, style="italic", color=KIND_STYLE["module"][0],
                        ha="center", va="bottom", zorder=4)
        ax.add_patch(arrow)

    for v, d in g.nodes(data=True):
        x, y = pos[v]
        ax.text(x, y - rad[v] - 0.04, f"{v}: {d['size']}\n{d['activation']}", ha="center", va="top",
                fontsize=7, zorder=5, linespacing=1.05,
                bbox=dict(boxstyle="round,pad=0.12", facecolor="white", edgecolor="none", alpha=0.8))

    ax.set_xlim(*bx)
    ax.set_ylim(*by)
    ax.set_aspect("equal")
    ax.axis("off")
    depth = core.depth if core.depth is not None else "cyclic"
    ax.set_title(title if title is not None else
                 f"{_model_name(model)}: {core.n} slots, steps = {core.steps}, depth = {depth}, "
                 f"{core.num_parameters():,} trainable parameters", fontsize=10)
    if legend:
        handles = [Patch(facecolor=ROLE_COLORS[r], edgecolor="#333333", label=f"{r} slot")
                   for r in ("input", "hidden", "output") if any(d["role"] == r for _, d in g.nodes(data=True))]
        for kind in ("linear", "identity", "module"):
            if kind in kinds_seen:
                c, ls = KIND_STYLE[kind]
                handles.append(Line2D([], [], color=c, linestyle=ls, linewidth=2.4 if kind == "module" else 1.6,
                                      label={"linear": "linear (width ~ log params)", "identity": "identity",
                                             "module": "module"}[kind]))
        if any_recurrent:
            handles.append(Line2D([], [], color=RECURRENT_COLOR, linewidth=1.6, label="back edge / self-loop (closes a cycle)"))
        for t, (p, k) in sorted(tie_info.items()):
            handles.append(Line2D([], [], color=TIE_COLORS[t % len(TIE_COLORS)], linewidth=2,
                                  label=f"tie group {t}: {_fmt_count(p)} params at {k} positions"))
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(handles)),
                  fontsize=7, frameon=False, handlelength=2.6)
    _save(fig, out, dpi)
    return fig


def _blocked(pos, u, v, rad) -> bool:
    """True when the straight segment u -> v passes through another slot's circle."""
    (x1, y1), (x2, y2) = pos[u], pos[v]
    dx, dy = x2 - x1, y2 - y1
    L2 = dx * dx + dy * dy
    for w, (x, y) in pos.items():
        if w in (u, v):
            continue
        t = ((x - x1) * dx + (y - y1) * dy) / L2
        if 0 < t < 1 and math.hypot(x1 + t * dx - x, y1 + t * dy - y) < rad[w] + 0.05:
            return True
    return False


# ---------------------------------------------------------------------------- spy
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
        raise ValueError(f"max_size must be a positive int, got {max_size!r}")
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
    train, frozen, f, _ = _spy_data(_core(model), max_size)
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
    core = _core(model)
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
