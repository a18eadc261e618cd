"""The block graph picture: :func:`draw_graph` (how to read it: the docstring of
:mod:`seq2d.plot`)."""

from __future__ import annotations

import math

import networkx as nx
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Patch
from matplotlib.path import Path as MPath

from ..errors import InvalidValue
from ..core import core_of
from ..graph import to_networkx
from .common import _check_path, _fmt_count, _model_name, _slot_labels, _style, new_figure, save_figure
from .layout import graph_layout

ROLE_COLORS = {"input": "#9ecae1", "hidden": "#e0e0e0", "output": "#fdae6b"}
KIND_STYLE = {  # kind -> (colour, linestyle)
    "linear": ("#3a3a3a", "-"),
    "identity": ("#3a3a3a", (0, (4, 2.5))),
    "module": ("#6a3d9a", (0, (1, 1.4))),
}
RECURRENT_COLOR = "#d62728"
# tie groups: tab10 without red (recurrent edges) and grey (plain edges)
TIE_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]


def _radii(g: nx.DiGraph, scale: str) -> dict[int, float]:
    if scale not in ("log", "sqrt"):
        raise InvalidValue(f"Unknown size_scale {scale!r}. Select from 'log' or 'sqrt'.")
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
               legend: bool = True, dpi: float = 100, style: str = "default", slot_labels=None) -> Figure:
    """Draw the block graph of ``model`` (see the module docstring for how to read it).

    Args:
        model: a Sequential2D, or a wrapper with a ``.core`` Sequential2D.
        ax: matplotlib Axes to draw into (default: a new figure sized to the graph).
        path: save the figure here (``.png`` or ``.svg``; anything else is a ValueError).
        size_scale: node area from the slot size, ``"log"`` or ``"sqrt"``.
        title: default ``"<Model>: n slots, steps, depth, trainable parameters"`` (steps only when
            the model has a default number; none with ``style="paper"``).
        legend: draw the legend (roles, edge kinds, recurrent edges, tie groups).
        dpi: resolution of a saved PNG.
        style: ``"default"`` or ``"paper"`` (fonts 1.4x, a 0.02 in margin, no generated title;
            :data:`seq2d.plot.STYLES`).
        slot_labels: one string per slot, written instead of the slot index (``["x", "h", "y"]``).

    Returns:
        The Figure (``ax.figure`` when ``ax`` was given).
    """
    out = _check_path(path)
    st = _style(style)
    core = core_of(model)
    names = _slot_labels(slot_labels, core.n)
    g = to_networkx(core)
    pos = graph_layout(core, g)
    rad = _radii(g, size_scale)
    cores = [c for c in nx.strongly_connected_components(g) if len(c) > 1 or g.has_edge(next(iter(c)), next(iter(c)))]
    scc_of = {v: k for k, c in enumerate(cores) for v in c}

    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    own = ax is None
    if own:
        w = min(22.0, max(5.5, 1.35 * (max(xs) - min(xs)) + 2.2))
        h = min(16.0, max(3.2, 1.35 * (max(ys) - min(ys)) + 2.4))
        fig, ax = new_figure((w, h))
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
                fontsize=st.fs(7), va="top", ha="left", zorder=1)
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
        recurrent = u in scc_of and scc_of.get(v) == scc_of[u] and pos[u][0] >= pos[v][0]
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
                ax.text(mx, my + 0.12, type(blk).__name__, fontsize=st.fs(6), style="italic", color=KIND_STYLE["module"][0],
                        ha="center", va="bottom", zorder=4)
        ax.add_patch(arrow)

    for v, d in g.nodes(data=True):
        x, y = pos[v]
        ax.text(x, y - rad[v] - 0.04, f"{names[v]}: {d['size']}\n{d['activation']}", ha="center", va="top",
                fontsize=st.fs(7), zorder=5, linespacing=1.05,
                bbox=dict(boxstyle="round,pad=0.12", facecolor="white", edgecolor="none", alpha=0.8))

    ax.set_xlim(*bx)
    ax.set_ylim(*by)
    ax.set_aspect("equal")
    ax.axis("off")
    if title is None and st.auto_title:
        title = graph_title(model)
    if title:
        ax.set_title(title, fontsize=st.fs(10))
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
                  fontsize=st.fs(7), frameon=False, handlelength=2.6, borderpad=st.legend_pad)
    save_figure(fig, out, dpi, st)
    return fig


def graph_title(model) -> str:
    """``"<Model>: n slots, steps = s, depth = d, p trainable parameters"``; a model without a
    default number of steps (an RNN: one step per input) says so instead of ``steps = None``."""
    core = core_of(model)
    if core.steps is not None:
        steps = f"steps = {core.steps}"
    else:  # a wrapper (RNN) steps its core once per time step; a bare core takes steps in each call
        steps = "one step per time step" if core is not model else "steps given per call"
    depth = core.depth if core.depth is not None else "cyclic"
    return f"{_model_name(model)}: {core.n} slots, {steps}, depth = {depth}, {core.num_parameters():,} trainable parameters"


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
