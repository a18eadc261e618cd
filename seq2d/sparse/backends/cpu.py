"""CPU backend: GEMMs on strided views of the stored tiles, no weight copies.

Two strategies behind one backend (``CPUBackend(strategy=...)``):

``runs`` (default)
    Positions are grouped into *runs*: maximal sequences of stored tiles in one tile-row
    with consecutive tile-columns. A run from column ``c0`` of length ``k`` is one GEMM on
    strided views, accumulated in place (BLAS ``beta = 1``)::

        y[:, r]           += x[:, c0:c0+k] @ panel          panel = wp[a:b].view(k*T, T)
        dW panel           = x[:, c0:c0+k].T @ dy[:, r]     (written in place)
        dx[:, c0:c0+k]    += dy[:, r] @ panel.T

    Nothing is gathered or copied; the cost is one GEMM call per run.
``gather``
    One GEMM per tile-row over the gathered input tiles ``X_r`` (B, k*T) (forward, dW) and
    one per tile-column over gathered ``dy`` tiles with a transposed copy of the stored
    tiles (dX). Fewer, larger GEMMs, paid for with B*P*T gathered values per pass.

``panel_r = wp[a:b].view(k*T, T)`` is contiguous thanks to the transposed tile storage.
Which strategy wins depends on density, batch and the machine's memory bandwidth;
``benchmarks/blocksparse.py`` measures both side by side (docs/performance.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..layout import BlockSparseLayout
from .base import KernelBackend, register_kernel


def _plan(layout: BlockSparseLayout) -> dict:
    """Index plans cached on the layout (built once, never in a backward pass)."""
    cache = layout.__dict__.get("_cpu_plan")
    if cache is not None:
        return cache
    row, col = layout.row.tolist(), layout.col.tolist()
    runs = []  # (row, first col, a, b)
    p, P = 0, len(row)
    while p < P:
        q = p + 1
        while q < P and row[q] == row[p] and col[q] == col[q - 1] + 1:
            q += 1
        runs.append((row[p], col[p], p, q))
        p = q

    def groups(ptr, idx, n):
        out = []
        for r in range(n):
            a, b = ptr[r], ptr[r + 1]
            contiguous = b > a and idx[b - 1] - idx[a] == b - a - 1
            out.append((a, b, idx[a] if contiguous else -1))
        return out

    t_row = layout.row[layout.t_pos]
    cache = {
        "runs": runs,
        "rows": groups(layout.row_ptr.tolist(), col, layout.Mt),
        "cols": groups(layout.col_ptr.tolist(), t_row.tolist(), layout.Kt),
        "t_row": t_row,
        "empty_rows": [r for r in range(layout.Mt) if layout.row_ptr[r] == layout.row_ptr[r + 1]],
    }
    layout.__dict__["_cpu_plan"] = cache
    return cache


def _gather(tiles: Tensor, flat: Tensor, idx: Tensor, a: int, b: int, c0: int, T: int) -> Tensor:
    """(B, k*T): the tiles ``idx[a:b]`` of ``flat`` (B, n*T); a strided view for a contiguous run."""
    if c0 >= 0:
        return flat[:, c0 * T : (c0 + b - a) * T]
    return tiles.index_select(1, idx[a:b]).view(flat.shape[0], (b - a) * T)


class CPUBackend(KernelBackend):
    """Block-sparse product on the CPU for float32/float64 (see the module docstring)."""

    def __init__(self, strategy: str = "runs", name: str = "cpu"):
        if strategy not in ("runs", "gather"):
            raise ValueError(f"Unknown CPU strategy {strategy!r}. Select from 'runs' or 'gather'.")
        self.strategy = strategy
        self.name = name

    def supports(self, device, dtype) -> bool:
        return torch.device(device).type == "cpu" and dtype in (torch.float32, torch.float64)

    # ------------------------------------------------------------------ forward
    def dds_t(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        B, T = x.shape[0], layout.tile
        plan = _plan(layout)
        if self.strategy == "runs":
            y = x.new_zeros(B, layout.Mt * T)
            for r, c0, a, b in plan["runs"]:
                y[:, r * T : (r + 1) * T].addmm_(x[:, c0 * T : (c0 + b - a) * T], wp[a:b].view((b - a) * T, T))
            return y
        x = x.contiguous()
        xt = x.view(B, layout.Kt, T)
        y = x.new_empty(B, layout.Mt, T)
        for r, (a, b, c0) in enumerate(plan["rows"]):
            if a == b:
                y[:, r].zero_()
            else:
                torch.mm(_gather(xt, x, layout.col, a, b, c0, T), wp[a:b].view((b - a) * T, T), out=y[:, r])
        return y.view(B, layout.Mt * T)

    # ------------------------------------------------------------------ backward
    def backward(self, dy, x, wp, layout, need_dx, need_dw):
        if self.strategy == "gather":
            return super().backward(dy, x, wp, layout, need_dx, need_dw)
        B, T = dy.shape[0], layout.tile
        dx = dy.new_zeros(B, layout.Kt * T) if need_dx else None
        dw = torch.empty_like(wp) if need_dw else None
        for r, c0, a, b in _plan(layout)["runs"]:
            k = b - a
            dyr = dy[:, r * T : (r + 1) * T]
            if need_dw:
                torch.mm(x[:, c0 * T : (c0 + k) * T].T, dyr, out=dw[a:b].view(k * T, T))
            if need_dx:
                dx[:, c0 * T : (c0 + k) * T].addmm_(dyr, wp[a:b].view(k * T, T).T)
        return dx, dw

    def dds(self, dy: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        if self.strategy == "runs":
            return self.backward(dy, None, wp, layout, True, False)[0]
        B, T = dy.shape[0], layout.tile
        plan = _plan(layout)
        dy = dy.contiguous()
        dyt = dy.view(B, layout.Mt, T)
        wt = wp.index_select(0, layout.t_pos).transpose(1, 2).contiguous()  # (P, T_out, T_in), column order
        dx = dy.new_empty(B, layout.Kt, T)
        for c, (a, b, r0) in enumerate(plan["cols"]):
            if a == b:
                dx[:, c].zero_()
            else:
                torch.mm(_gather(dyt, dy, plan["t_row"], a, b, r0, T), wt[a:b].view((b - a) * T, T), out=dx[:, c])
        return dx.view(B, layout.Kt * T)

    def sdd_t(self, dy: Tensor, x: Tensor, layout: BlockSparseLayout) -> Tensor:
        B, T = x.shape[0], layout.tile
        if self.strategy == "runs":
            return self.backward(dy, x, x.new_empty(layout.nnz, T, T), layout, False, True)[1]
        x = x.contiguous()
        xt = x.view(B, layout.Kt, T)
        dyt = dy.reshape(B, layout.Mt, T)
        dw = x.new_empty(layout.nnz, T, T)
        for r, (a, b, c0) in enumerate(_plan(layout)["rows"]):
            if a < b:
                torch.mm(_gather(xt, x, layout.col, a, b, c0, T).T, dyt[:, r], out=dw[a:b].view((b - a) * T, T))
        return dw


register_kernel(CPUBackend("runs", "cpu"))
register_kernel(CPUBackend("gather", "cpu_gather"))
