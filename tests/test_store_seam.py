"""The store seam (issue 21 item 2): callers use only what seq2d.stores.Store declares and
ask for capabilities, never a store's class or kind, so a new store lives in seq2d/stores
alone. Proven with a tiny store written here: one Parameter per linear block, a product that
loops over them; a model running on it equals the docstring loop."""

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import seq2d
from seq2d.stores import Store
from seq2d.core.reference import reference_forward

ROOT = Path(__file__).resolve().parents[1]
D = torch.float64


class BlockListStore(Store):
    """The smallest store: one Parameter per linear grid position, one box of all rows."""

    kind = "test-blocklist"
    label = "block-list (test)"

    def __init__(self, sizes, entries):
        super().__init__(sizes)
        self.entries = [(i, j) for i, j, _ in entries]
        self.w = nn.ParameterList([nn.Parameter(b.effective_weight().detach().clone()) for _, _, b in entries])
        self.rows = tuple(sorted({i for i, _ in self.entries}))
        self.boxes = [self.rows]
        self.box_of_row = {i: 0 for i in self.rows}
        self._roff, r = {}, 0
        for i in self.rows:
            self._roff[i] = r
            r += self.sizes[i]

    def product(self, x, boxes, cache=None, bias=None, present=None):
        off = self.offsets
        rows = {i: None for i in self.rows}
        for (i, j), w in zip(self.entries, self.w):
            y = F.linear(x.read(off[j], off[j + 1]), w)
            rows[i] = y if rows[i] is None else rows[i] + y
        return {0: torch.cat([rows[i] for i in self.rows], dim=-1)}

    def row_source(self, i, box=None):
        return 0, self._roff[i]

    def num_trainable(self):
        return sum(w.numel() for w in self.w)

    def dense_weight(self):
        N = self.offsets[-1]
        W = self.w[0].new_zeros(N, N)
        for (i, j), w in zip(self.entries, self.w):
            W[self.offsets[i]:self.offsets[i + 1], self.offsets[j]:self.offsets[j + 1]] = w
        return W


def _model():
    g = torch.Generator().manual_seed(0)
    n = 5
    mask = torch.rand(n, n, generator=g) < 0.5
    mask[0] = False
    mask[1:, 0] = True
    mask[1:, 1:] |= torch.eye(n - 1, dtype=torch.bool)
    return seq2d.from_mask([3, 4, 2, 5, 3], mask, activations="tanh", bias=True, seed=0, steps=3, dtype=D)


@pytest.mark.parametrize("steps", [1, 3])
def test_a_new_store_written_outside_the_core_runs_a_model(steps):
    m = _model()
    x = [torch.randn(2, 3, dtype=D)] + [None] * 4
    want = m(x, steps)
    entries = [(i, j, b) for i, j, k, b in m.positions() if k == "linear"]
    m.store = BlockListStore(m.sizes, entries)
    m._grid_changed()  # plans were compiled for the old store
    got = m(x, steps)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # gradients reach the new store's parameters; the sequence path names the store when it falls back
    sum(t.sum() for t in got if t is not None).backward()
    assert all(w.grad is not None for w in m.store.w)


def test_no_caller_asks_a_store_for_its_class_or_kind():
    # ``store.kind`` may be shown ("the tiled store"), never compared
    pattern = re.compile(r"isinstance\([^)]*(DenseStore|TiledStore|Store)\b|store\.kind\s*(==|!=|\bin\b|\bnot\b)")
    bad = []
    for path in (ROOT / "seq2d").rglob("*.py"):
        if "stores" in path.relative_to(ROOT / "seq2d").parts:
            continue
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                bad.append(f"{path.relative_to(ROOT)}:{k}: {line.strip()}")
    assert not bad, "\n".join(bad)


class _BlockListBlock(seq2d.LinearBlock):
    store_kind = BlockListStore.kind  # held by the store above, once it is registered


def test_a_registered_store_is_built_for_the_blocks_that_name_it():
    """seq2d/stores/registry.py: Sequential2D builds the store its linear blocks name
    (``store_kind``), looked up in the registry, never by the blocks' class."""
    from seq2d.stores.registry import STORE_CLASSES, register_store
    from seq2d.errors import InvalidValue

    sizes = [3, 4, 2]

    def grid(cls):
        torch.manual_seed(0)
        return {(1, 0): cls(3, 4, dtype=D), (2, 1): cls(4, 2, dtype=D), (1, 1): cls(4, 4, dtype=D)}

    class Registered(BlockListStore):
        @classmethod
        def from_blocks(cls, sizes, entries, levels, *, loop=False):
            return cls(sizes, entries)

    with pytest.raises(InvalidValue, match="no store is registered for linear blocks of store_kind 'test-blocklist'"):
        seq2d.Sequential2D(sizes, grid(_BlockListBlock), activations="tanh", steps=3)
    register_store(Registered)
    try:
        m = seq2d.Sequential2D(sizes, grid(_BlockListBlock), activations="tanh", steps=3)
        assert type(m.store) is Registered and m.store.kind == "test-blocklist"
        want = seq2d.Sequential2D(sizes, grid(seq2d.LinearBlock), activations="tanh", steps=3)
        assert want.store.kind == "dense"
        x = [torch.randn(2, 3, dtype=D), None, None]
        for a, b in zip(m(x), reference_forward(want, x, 3)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
        mixed = {**grid(seq2d.LinearBlock), (2, 1): _BlockListBlock(4, 2, dtype=D)}
        with pytest.raises(InvalidValue, match=r"live in one store, got blocks \[\(1, 0\), \(1, 1\)\] by the dense "
                                               r"store; blocks \[\(2, 1\)\] by the test-blocklist store"):
            seq2d.Sequential2D(sizes, mixed, activations="tanh", steps=3)
    finally:
        STORE_CLASSES.pop(Registered.kind)
