"""The fused linear seam: every linear block of F as one operator over the concatenated state.

``Sequential2D`` never multiplies linear blocks itself. Each step it hands the
current slot values to :func:`fused_linear`, which returns, for every row that
holds linear blocks, ``sum_j W_ij x_j`` over the present (non-``None``) input
slots. How that product is computed is a *backend*:

========  ====================================================================
name      what it does
========  ====================================================================
``loop``  one ``F.linear`` per block (the docstring loop; slow, obviously right)
``dense`` gathers the masked blocks into one dense (rows x cols) matrix over the
          rows that hold linear blocks and the present columns, and does one
          matmul. The plain reference every fast backend is tested against.
========  ====================================================================

Backends are functions ``fn(op: FusedLinear, xs, cache=None) -> list[Tensor | None]``
registered with :func:`register_backend`. ``cache`` is a dict that lives for one
``Sequential2D.forward`` call: a backend may keep what does not change between the steps
of one forward there (the dense backend keeps its assembled weight, so a 4-step forward
assembles it once and autograd accumulates its gradient over the steps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .blocks import LinearBlock

__all__ = ["FusedLinear", "register_backend", "available_backends", "fused_linear"]

BackendFn = Callable[..., list[Tensor | None]]  # fn(op, xs, cache=None)
_BACKENDS: dict[str, BackendFn] = {}


def register_backend(name: str, fn: BackendFn | None = None):
    """Register a fused-linear backend under ``name`` (usable as a decorator)."""

    def deco(f: BackendFn) -> BackendFn:
        _BACKENDS[name] = f
        return f

    return deco(fn) if fn is not None else deco


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


def get_backend(name: str) -> BackendFn:
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"Unknown backend {name!r}. Select from " + ", ".join(repr(k) for k in available_backends())
        ) from None


class FusedLinear:
    """Static description of the linear part of F: block positions and slot offsets.

    Built once per model (and rebuilt when the grid changes); holds no tensors of its
    own, only references to the ``LinearBlock`` modules, so ``.to()``/``load_state_dict``
    on the model are seen here.

    Attributes:
        sizes: slot sizes.
        offsets: start of each slot in the concatenated state (len n + 1).
        entries: ``(i, j, block)`` for every linear position, rows then columns.
        rows: sorted slots that receive at least one linear block.
        cols: sorted slots read by at least one linear block.
    """

    def __init__(self, sizes: Sequence[int], entries: Sequence[tuple[int, int, LinearBlock]]):
        self.sizes = tuple(sizes)
        off = [0]
        for s in self.sizes:
            off.append(off[-1] + s)
        self.offsets = tuple(off)
        self.entries = sorted(entries, key=lambda e: (e[0], e[1]))
        self.rows = sorted({i for i, _, _ in self.entries})
        self.cols = sorted({j for _, j, _ in self.entries})

    @property
    def n(self) -> int:
        return len(self.sizes)

    def __len__(self) -> int:
        return len(self.entries)

    def dense_weight(self, rows: Sequence[int] | None = None, cols: Sequence[int] | None = None) -> Tensor:
        """The effective weights of ``rows`` x ``cols`` as one dense matrix (differentiable)."""
        rows = self.rows if rows is None else rows
        cols = self.cols if cols is None else cols
        rpos = {i: k for k, i in enumerate(rows)}
        cpos = {j: k for k, j in enumerate(cols)}
        roff = [0]
        for i in rows:
            roff.append(roff[-1] + self.sizes[i])
        coff = [0]
        for j in cols:
            coff.append(coff[-1] + self.sizes[j])
        ref = self.entries[0][2].weight
        w = torch.zeros(roff[-1], coff[-1], dtype=ref.dtype, device=ref.device)
        for i, j, blk in self.entries:
            if i in rpos and j in cpos:
                r, c = rpos[i], cpos[j]
                w[roff[r] : roff[r + 1], coff[c] : coff[c + 1]] = blk.effective_weight()
        return w

    def restrict(self, rows: Sequence[int]) -> FusedLinear:
        """The operator over the linear blocks of ``rows`` only (cached per row set)."""
        key = tuple(sorted(rows))
        cache = self.__dict__.setdefault("_restricted", {})
        if key not in cache:
            keep = set(key)
            cache[key] = FusedLinear(self.sizes, [e for e in self.entries if e[0] in keep])
        return cache[key]

    def __call__(self, xs: Sequence[Tensor | None], backend: str = "dense", cache: dict | None = None) -> list[Tensor | None]:
        return get_backend(backend)(self, xs, cache)


def fused_linear(op: FusedLinear, xs: Sequence[Tensor | None], backend: str = "dense",
                 cache: dict | None = None) -> list[Tensor | None]:
    """``out[i] = sum_j W_ij x_j`` over linear blocks with present inputs; ``None`` where no term."""
    return op(xs, backend, cache)


@register_backend("loop")
def _loop_backend(op: FusedLinear, xs: Sequence[Tensor | None], cache: dict | None = None) -> list[Tensor | None]:
    out: list[Tensor | None] = [None] * op.n
    for i, j, blk in op.entries:
        x = xs[j]
        if x is None:
            continue
        y = blk(x)
        out[i] = y if out[i] is None else out[i] + y
    return out


@register_backend("dense")
def _dense_backend(op: FusedLinear, xs: Sequence[Tensor | None], cache: dict | None = None) -> list[Tensor | None]:
    out: list[Tensor | None] = [None] * op.n
    cols = [j for j in op.cols if xs[j] is not None]
    if not cols:
        return out
    colset = set(cols)
    rows = sorted({i for i, j, _ in op.entries if j in colset})
    key = ("dense", tuple(rows), tuple(cols))
    w = cache.get(key) if cache is not None else None
    if w is None:
        w = op.dense_weight(rows, cols)  # (R, C)
        if cache is not None:
            cache[key] = w
    x = xs[cols[0]] if len(cols) == 1 else torch.cat([xs[j] for j in cols], dim=-1)  # (*batch, C)
    y = F.linear(x, w)  # (*batch, R)
    parts = y.split([op.sizes[i] for i in rows], dim=-1)
    for i, p in zip(rows, parts):
        out[i] = p
    return out
