"""The Triton kernels of ``kernel="triton_v2"`` (launched by :mod:`.triton_v2`).

Two kernels, both reading every dense operand through TMA tensor descriptors
(``tl.make_tensor_descriptor``: out-of-range batch rows read as zeros and are not written):

=====================  ======================================  ==========================================
kernel                 work item (grid)                        computes
=====================  ======================================  ==========================================
``_gather_gemm``       (output tile-column o, batch block j),   ``out[bb, o] = sum_e a[bb, idx e] @ W_e``,
(forward and dX)       a persistent loop over the items         e in ``seg[o]:seg[o+1]``; forward:
                       (grid = min(items, programs))            ``W_e = wp[e]``; dX: ``W_e = wp[pos e].T``
``_sdd_grouped``       (group of <= G same-row stored tiles,    ``dw[p] = sum_b x[b, col p].T @ dy[b, row p]``
(dW)                   batch split s), one program each          for the G tiles of a group: one dy chunk
                                                                loaded per batch chunk serves all G
=====================  ======================================  ==========================================

Forward and dX are one "row-gather GEMM": for the forward an output tile-column is a tile-row
``r`` of W (``seg = row_ptr``, ``idx = col``), for dX a tile-column ``c`` of W (``seg =
col_ptr``, ``idx = row[t_pos]`` precomputed, ``pos = t_pos``), so each step makes one index
load that the next load depends on, never two chained ones. Each tile is walked in
``BLOCK_K``-wide slices (``T // BLOCK_K`` steps per tile), which keeps a pipeline stage small
enough for three buffers at ``BLOCK_B = 256``. Items are ordered band by band: a band is
``GROUP_B`` batch blocks x every output column (longest columns first, ``order``), so the
programs running at one time share a band of ``a`` in L2.

dW's batch split (``SPLIT``) writes fp32 partials into a workspace; the program that finishes
a group's last split (an atomic counter per group, reset by that program) sums the partials
in split order and writes the tile: deterministic, one launch.

The rules of the v1 kernels hold (:mod:`.triton_v1`): only builtins of ``triton.language``
(``tl.full``, not ``tl.zeros``; no ``@jit`` helpers), so the kernels run under
``TRITON_INTERPRET=1`` too; ``UPCAST`` makes bf16 dots exact there. Index metadata is int32:
the launcher checks that every coordinate fits.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _gather_gemm_kernel(
    a_ptr, wp_ptr, out_ptr,  # a (B, n_in*T), wp (P, T, T) as (P*T, T), out (B, n_out*T); last strides 1
    seg_ptr, idx_ptr, pos_ptr, order_ptr,  # int32: (n_out+1,), (P,), (P,) (dX only), (n_out,)
    B, n_in, n_out, n_pos, stride_ab, stride_ob,
    B_KEY, TPR_KEY,  # autotune keys only (batch as a power of two, mean tiles per output column)
    T: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_B: tl.constexpr,
    TRANS_W: tl.constexpr, UPCAST: tl.constexpr,
):
    KSTEPS: tl.constexpr = T // BLOCK_K
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    n_bblocks = (B + BLOCK_B - 1) // BLOCK_B
    n_work = n_out * n_bblocks
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[B, n_in * T], strides=[stride_ab, 1],
                                       block_shape=[BLOCK_B, BLOCK_K])
    if TRANS_W:  # a slice of wp[p] over its out dimension, transposed after the load
        w_desc = tl.make_tensor_descriptor(wp_ptr, shape=[n_pos * T, T], strides=[T, 1], block_shape=[T, BLOCK_K])
    else:  # a slice of wp[p] over its in dimension
        w_desc = tl.make_tensor_descriptor(wp_ptr, shape=[n_pos * T, T], strides=[T, 1], block_shape=[BLOCK_K, T])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[B, n_out * T], strides=[stride_ob, 1],
                                       block_shape=[BLOCK_B, T])
    band_size = GROUP_B * n_out
    for w in range(pid, n_work, n_prog):
        band = w // band_size
        first_j = band * GROUP_B
        gb = tl.minimum(n_bblocks - first_j, GROUP_B)  # the last band may be narrower
        local = w - band * band_size
        o = tl.load(order_ptr + local // gb)
        b0 = (first_j + local % gb) * BLOCK_B
        start = tl.load(seg_ptr + o)
        end = tl.load(seg_ptr + o + 1)
        acc = tl.full((BLOCK_B, T), 0.0, tl.float32)  # an empty column stays 0 and is written
        for i in range(start * KSTEPS, end * KSTEPS):
            e = i // KSTEPS
            k = (i % KSTEPS) * BLOCK_K
            c = tl.load(idx_ptr + e)
            a = a_desc.load([b0, c * T + k])  # (BLOCK_B, BLOCK_K)
            if TRANS_W:
                p = tl.load(pos_ptr + e)  # independent of c: one dependent load per step
                w_t = tl.trans(w_desc.load([p * T, k]))  # (BLOCK_K, T): wp[p][:, k:k+BK].T
            else:
                w_t = w_desc.load([e * T + k, 0])  # (BLOCK_K, T): wp[e][k:k+BK, :]
            if UPCAST:
                a = a.to(tl.float32)
                w_t = w_t.to(tl.float32)
            acc = tl.dot(a, w_t, acc)
        o_desc.store([b0, o * T], acc.to(out_ptr.dtype.element_ty))


@triton.jit
def _sdd_grouped_kernel(
    x_ptr, dy_ptr, out_ptr,  # x (B, Kt*T), dy (B, Mt*T), out (P, T, T) as (P*T, T)
    ws_ptr, count_ptr,  # SPLIT only: fp32 partials (S, n_groups, G, T, T), int32 counters (n_groups,), zero
    gstart_ptr, gcount_ptr, row_ptr, col_ptr,  # int32: group -> first position, tiles in it; position -> row, col
    B, Kt, Mt, n_pos, n_groups, rows_per_split, stride_xb, stride_db,
    B_KEY, TPR_KEY,
    T: tl.constexpr, BLOCK_B: tl.constexpr, G: tl.constexpr, SPLIT: tl.constexpr, UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    item = pid % n_groups  # the splits of one group are n_groups programs apart; neighbours share rows
    s = pid // n_groups
    n_split = tl.num_programs(0) // n_groups
    p0 = tl.load(gstart_ptr + item)
    cnt = tl.load(gcount_ptr + item)
    r = tl.load(row_ptr + p0)
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[B, Kt * T], strides=[stride_xb, 1], block_shape=[BLOCK_B, T])
    d_desc = tl.make_tensor_descriptor(dy_ptr, shape=[B, Mt * T], strides=[stride_db, 1], block_shape=[BLOCK_B, T])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[n_pos * T, T], strides=[T, 1], block_shape=[T, T])
    # a partial group repeats its last tile (loaded and multiplied, never stored)
    c0 = tl.load(col_ptr + p0) * T
    acc0 = tl.full((T, T), 0.0, tl.float32)
    if G >= 2:
        c1 = tl.load(col_ptr + p0 + tl.minimum(1, cnt - 1)) * T
        acc1 = tl.full((T, T), 0.0, tl.float32)
    if G >= 4:
        c2 = tl.load(col_ptr + p0 + tl.minimum(2, cnt - 1)) * T
        c3 = tl.load(col_ptr + p0 + tl.minimum(3, cnt - 1)) * T
        acc2 = tl.full((T, T), 0.0, tl.float32)
        acc3 = tl.full((T, T), 0.0, tl.float32)
    lo = s * rows_per_split  # a multiple of BLOCK_B: no chunk crosses into the next split
    hi = tl.minimum(B, lo + rows_per_split)
    for b0 in range(lo, hi, BLOCK_B):
        g = d_desc.load([b0, r * T])  # (BLOCK_B, T), shared by the G tiles
        x0 = tl.trans(x_desc.load([b0, c0]))  # (T, BLOCK_B)
        if UPCAST:
            g = g.to(tl.float32)
            x0 = x0.to(tl.float32)
        acc0 = tl.dot(x0, g, acc0)
        if G >= 2:
            x1 = tl.trans(x_desc.load([b0, c1]))
            if UPCAST:
                x1 = x1.to(tl.float32)
            acc1 = tl.dot(x1, g, acc1)
        if G >= 4:
            x2 = tl.trans(x_desc.load([b0, c2]))
            x3 = tl.trans(x_desc.load([b0, c3]))
            if UPCAST:
                x2 = x2.to(tl.float32)
                x3 = x3.to(tl.float32)
            acc2 = tl.dot(x2, g, acc2)
            acc3 = tl.dot(x3, g, acc3)
    dt = out_ptr.dtype.element_ty
    if SPLIT:
        offs = tl.arange(0, T)
        tile = offs[:, None] * T + offs[None, :]
        TT: tl.constexpr = T * T
        ng64 = tl.cast(n_groups, tl.int64)  # int64 workspace offsets (tl.cast: n_groups may be a constexpr int)
        slot = (s * ng64 + item) * G  # this program's partials
        tl.store(ws_ptr + slot * TT + tile, acc0)
        if G >= 2:
            tl.store(ws_ptr + (slot + 1) * TT + tile, acc1)
        if G >= 4:
            tl.store(ws_ptr + (slot + 2) * TT + tile, acc2)
            tl.store(ws_ptr + (slot + 3) * TT + tile, acc3)
        tl.debug_barrier()  # every thread's partial is written before the count says so
        done = tl.atomic_add(count_ptr + item, 1, sem="acq_rel", scope="gpu")
        if done == n_split - 1:  # the last split of this group: sum all in split order
            tl.debug_barrier()
            acc0 = tl.full((T, T), 0.0, tl.float32)
            if G >= 2:
                acc1 = tl.full((T, T), 0.0, tl.float32)
            if G >= 4:
                acc2 = tl.full((T, T), 0.0, tl.float32)
                acc3 = tl.full((T, T), 0.0, tl.float32)
            for q in range(0, n_split):
                base = (q * ng64 + item) * G
                acc0 += tl.load(ws_ptr + base * TT + tile, cache_modifier=".cg")
                if G >= 2:
                    acc1 += tl.load(ws_ptr + (base + 1) * TT + tile, cache_modifier=".cg")
                if G >= 4:
                    acc2 += tl.load(ws_ptr + (base + 2) * TT + tile, cache_modifier=".cg")
                    acc3 += tl.load(ws_ptr + (base + 3) * TT + tile, cache_modifier=".cg")
            tl.atomic_xchg(count_ptr + item, 0)  # ready for the next launch
            o_desc.store([p0 * T, 0], acc0.to(dt))
            if G >= 2:
                if cnt > 1:
                    o_desc.store([(p0 + 1) * T, 0], acc1.to(dt))
            if G >= 4:
                if cnt > 2:
                    o_desc.store([(p0 + 2) * T, 0], acc2.to(dt))
                if cnt > 3:
                    o_desc.store([(p0 + 3) * T, 0], acc3.to(dt))
    else:
        o_desc.store([p0 * T, 0], acc0.to(dt))
        if G >= 2:
            if cnt > 1:
                o_desc.store([(p0 + 1) * T, 0], acc1.to(dt))
        if G >= 4:
            if cnt > 2:
                o_desc.store([(p0 + 2) * T, 0], acc2.to(dt))
            if cnt > 3:
                o_desc.store([(p0 + 3) * T, 0], acc3.to(dt))
