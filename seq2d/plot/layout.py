"""Where :func:`seq2d.plot.draw_graph` places the slots: :func:`graph_layout` (columns from
the depth over the condensation of the block graph, rows ordered by barycentre sweeps)."""

from __future__ import annotations

import networkx as nx
import numpy as np

from ..core import core_of
from ..graph import to_networkx


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
    core = core_of(model)
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
