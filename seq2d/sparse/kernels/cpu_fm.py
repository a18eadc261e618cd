"""The feature-major paths of the CPU kernel: ``panels`` and ``fmruns``.

Both transpose the dense operand once per op to feature-major (``xT`` = ``x.T``, (Kt*T, B),
likewise ``dyT``), where the tile-column ``c`` of ``x`` is one contiguous (T, B) block and a
run of consecutive tile-columns one contiguous (k*T, B) block, and compute ``yT`` / ``dxT``
(written back batch-major once at the end).

``panels`` (small tiles, random places). One GEMM per tile-row over its gathered input
blocks, and per tile-column one gathered ``dy`` panel for both dX and dW::

    forward, per tile-row r:     yT[r]  = panel_r.T (T, k*T)  @ xT[cols of r]  (k*T, B)
    backward, per tile-column c: G      = dyT[rows of c]                        (k*T, B)
                                 dxT[c] = wc_c (T, k*T) @ G                     (T, B)
                                 dWc_c  = G @ x[:, c]      (k*T, B) @ (B, T)    (k*T, T)

``panel_r = wp[a:b].view(k*T, T)`` is the tile-row's contiguous panel of the transposed tile
storage; ``wc`` (T_in, P*T_out) holds the tiles in column order side by side (one copy per
backward), so a tile-column's tiles, ``wc[:, a*T:b*T]``, are one strided matrix; ``dWc``
(tiles of ``W`` itself, in column order) is put back into the transposed per-position storage
with one gather. A tile-row (tile-column) whose columns (rows) are consecutive is a view, no
gather. Per pass about ``B * P * T`` gathered values (as ``gather``), copied in contiguous
blocks of ``T * B`` values, from which the GEMMs read while they are in cache: the price of
few GEMM calls when a GEMM per tile (16 x 16) would be tiny.

``fmruns`` (tile 64, large batches). Nothing gathered, nothing copied but the two transposes:
one GEMM per run of consecutive stored tiles of a tile-row (forward, dW) and one per stored
tile (dX, accumulated tile-column by tile-column, so each (T, B) block of ``dxT`` is summed
in cache)::

    forward, per run:   yT[r]     (+)= panel.T (T, k*T) @ xT[c0:c0+k]    (k*T, B)
    dW, per run:        panel_dW     = xT[c0:c0+k] (k*T, B) @ dyT[r].T   (B, T)
    dX, per tile p:     dxT[c]    (+)= wp[p] (T_in, T_out) @ dyT[r]      (T, B)

The batch-major ``runs`` path does the same products on strided (B, T) slices of ``x``; at tile
64, batch 256, density 0.25 the contiguous feature-major blocks made it 1.02-1.16x faster than
``runs`` (benchmarks/tile_paths.py --cases grid; the ``cpu`` kernel's ``FMRUNS_*``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..layout import BlockSparseLayout

__all__ = ["panels_dds_t", "panels_backward", "fmruns_dds_t", "fmruns_backward"]

Scratch = Callable[[str, tuple, torch.dtype], Tensor]


def _cols(layout: BlockSparseLayout) -> dict:
    """Tile-column plan (cached on the layout): ``(c, a, b, r0, rows)`` of every non-empty
    tile-column (its positions ``t_pos[a:b]``, first row ``r0`` when its rows are consecutive,
    else -1, and its rows), ``(c, [(position, row), ...])`` of the same columns, the empty
    tile-columns, the largest column and the inverse of ``t_pos`` (position -> its place in
    column order)."""
    plan = layout.__dict__.get("_cpu_fm_plan")
    if plan is not None:
        return plan
    ptr = layout.host()["col_ptr"]
    row_of = layout.row[layout.t_pos]  # the row of every position in column order
    rows_host = row_of.tolist()
    cols, empty = [], []
    for c in range(layout.Kt):
        a, b = ptr[c], ptr[c + 1]
        if a == b:
            empty.append(c)
            continue
        r0 = rows_host[a] if rows_host[b - 1] - rows_host[a] == b - a - 1 else -1
        cols.append((c, a, b, r0, row_of[a:b]))
    t_pos = layout.t_pos.tolist()
    tiles = [(c, [(p, rows_host[q]) for q, p in zip(range(a, b), t_pos[a:b])]) for c, a, b, _, _ in cols]
    inv = torch.empty_like(layout.t_pos)
    inv[layout.t_pos] = torch.arange(layout.nnz, device=inv.device)
    plan = {"cols": cols, "empty": torch.tensor(empty, dtype=torch.long), "kmax": max((b - a for _, a, b, _, _ in cols), default=0),
            "inv": inv, "tiles": tiles}
    layout.__dict__["_cpu_fm_plan"] = plan
    return plan


def _feature_major(a: Tensor, role: str, scratch: Scratch) -> Tensor:
    """``a.T`` (n, B) contiguous, in a scratch buffer."""
    out = scratch(role, (a.shape[1], a.shape[0]), a.dtype)
    return out.copy_(a.T)


@torch.no_grad()  # out= into scratch buffers: the caller differentiates, not these ops
def panels_dds_t(x: Tensor, wp: Tensor, layout: BlockSparseLayout, rows: list, empty: Tensor, scratch: Scratch) -> Tensor:
    """``x @ W.T`` (B, Mt*T), one GEMM per non-empty tile-row; ``rows`` the ``(r, a, b, c0,
    cols)`` of every non-empty tile-row (``c0`` its first column when they are consecutive),
    ``empty`` the other tile-rows."""
    B, T = x.shape[0], layout.tile
    xT = _feature_major(x, "panels_in", scratch)
    x3 = xT.view(layout.Kt, T, B)
    yT = scratch("panels_out", (layout.Mt * T, B), x.dtype)
    if empty.numel():
        yT.view(layout.Mt, T, B).index_fill_(0, empty, 0)
    kmax = max((b - a for _, a, b, _, _ in rows), default=0)
    g = scratch("panels_gather", (kmax, T, B), x.dtype)
    w2 = wp.view(-1, T)  # the tile-row panels, stacked
    for r, a, b, c0, cols in rows:
        k = b - a
        xg = xT[c0 * T:(c0 + k) * T] if c0 >= 0 else torch.index_select(x3, 0, cols, out=g[:k]).view(k * T, B)
        torch.mm(w2[a * T:b * T].T, xg, out=yT[r * T:(r + 1) * T])
    y = x.new_empty(B, layout.Mt * T)  # fresh: yT is scratch
    return y.copy_(yT.T)


@torch.no_grad()
def panels_backward(dy: Tensor, x: Tensor | None, wp: Tensor | None, layout: BlockSparseLayout, need_dx: bool,
                    need_dw: bool, scratch: Scratch) -> tuple[Tensor | None, Tensor | None]:
    """dX (B, Kt*T) and dW (P, T, T), tile-column by tile-column over one gathered ``dy`` panel each."""
    B, T, P = dy.shape[0], layout.tile, layout.nnz
    plan = _cols(layout)
    dyT = _feature_major(dy, "panels_in", scratch)
    d3 = dyT.view(layout.Mt, T, B)
    g = scratch("panels_gather", (plan["kmax"], T, B), dy.dtype)
    if need_dx:
        # the tiles in column order, (T_in, P*T_out): column c's tiles side by side are wc[:, a*T:b*T]
        # (fresh, not scratch: weight-sized temporaries would stay allocated between calls)
        wcol = wp.index_select(0, layout.t_pos)
        wc = wp.new_empty(T, P, T).copy_(wcol.transpose(0, 1)).view(T, P * T)
        del wcol
        dxT = scratch("panels_out", (layout.Kt * T, B), dy.dtype)
        if plan["empty"].numel():
            dxT.view(layout.Kt, T, B).index_fill_(0, plan["empty"], 0)
    if need_dw:
        dwc = dy.new_empty(P * T, T)  # tiles of W itself (T_out, T_in), column order
    for c, a, b, r0, rows in plan["cols"]:
        k = b - a
        G = dyT[r0 * T:(r0 + k) * T] if r0 >= 0 else torch.index_select(d3, 0, rows, out=g[:k]).view(k * T, B)
        if need_dx:
            torch.mm(wc[:, a * T:b * T], G, out=dxT[c * T:(c + 1) * T])
        if need_dw:
            torch.mm(G, x[:, c * T:(c + 1) * T], out=dwc[a * T:b * T])
    dx = dw = None
    if need_dx:
        dx = dy.new_empty(B, layout.Kt * T).copy_(dxT.T)
    if need_dw:  # back to position order and to the transposed storage, one gather
        dw = dwc.view(P, T, T).transpose(1, 2).index_select(0, plan["inv"])
    return dx, dw


@torch.no_grad()
def fmruns_dds_t(x: Tensor, wp: Tensor, layout: BlockSparseLayout, plan: dict, scratch: Scratch) -> Tensor:
    """``x @ W.T`` (B, Mt*T), one GEMM per run; ``plan`` the ``cpu`` kernel's run plan (``runs``
    ``(r, c0, a, b)``, ``runs_beta_y``: 0 for a tile-row's first run, ``zero_rows``)."""
    B, T = x.shape[0], layout.tile
    xT = _feature_major(x, "panels_in", scratch)
    yT = scratch("panels_out", (layout.Mt * T, B), x.dtype)
    if plan["zero_rows"].numel():
        yT.view(layout.Mt, T, B).index_fill_(0, plan["zero_rows"], 0)
    w2 = wp.view(-1, T)
    for (r, c0, a, b), beta in zip(plan["runs"], plan["runs_beta_y"]):
        yT[r * T:(r + 1) * T].addmm_(w2[a * T:b * T].T, xT[c0 * T:(c0 + b - a) * T], beta=beta)
    y = x.new_empty(B, layout.Mt * T)  # fresh: yT is scratch
    return y.copy_(yT.T)


@torch.no_grad()
def fmruns_backward(dy: Tensor, x: Tensor | None, wp: Tensor | None, layout: BlockSparseLayout, need_dx: bool,
                    need_dw: bool, plan: dict, scratch: Scratch) -> tuple[Tensor | None, Tensor | None]:
    """dX (B, Kt*T) one GEMM per stored tile, tile-column by tile-column; dW (P, T, T) one GEMM per run."""
    B, T = dy.shape[0], layout.tile
    dyT = _feature_major(dy, "panels_in", scratch)
    dx = dw = None
    if need_dx:
        cols = _cols(layout)
        dxT = scratch("panels_out", (layout.Kt * T, B), dy.dtype)
        if cols["empty"].numel():
            dxT.view(layout.Kt, T, B).index_fill_(0, cols["empty"], 0)
        tiles, dyb, out = wp.unbind(0), dyT.split(T), dxT.split(T)
        for c, pr in cols["tiles"]:
            o = out[c]
            p, r = pr[0]
            torch.mm(tiles[p], dyb[r], out=o)
            for p, r in pr[1:]:
                o.addmm_(tiles[p], dyb[r])
        dx = dy.new_empty(B, layout.Kt * T).copy_(dxT.T)
    if need_dw:
        xT = _feature_major(x, "panels_in2", scratch)
        dw = x.new_empty(layout.nnz, T, T)
        d2 = dw.view(-1, T)
        for r, c0, a, b in plan["runs"]:
            torch.mm(xT[c0 * T:(c0 + b - a) * T], dyT[r * T:(r + 1) * T].T, out=d2[a * T:b * T])
    return dx, dw
