"""Semantics of Sequential2D: held slots, Jacobi order, None slots, tying, masks, frozen
entries, nesting, free batch dims, sequence mode, stores."""

import copy

import pytest
import torch
from torch import nn

import seq2d
from seq2d import LinearBlock, Sequential2D
from seq2d.core.reference import reference_forward
from seq2d.testing import ulps


def chain(sizes=(3, 4, 2), bias=True, dtype=torch.float64):
    blocks = {(i + 1, i): LinearBlock(sizes[i], sizes[i + 1], dtype=dtype) for i in range(len(sizes) - 1)}
    return Sequential2D(sizes, blocks, bias=bias, activations="tanh", dtype=dtype)


def test_held_slot_equals_identity_row():
    m = chain()
    x = torch.randn(5, 3, dtype=torch.float64)
    held = m([x, None, None], steps=3)
    assert held[0] is x  # an empty row keeps its value (same object, nothing computed)
    # the paper's form: an identity block in the input row, identity activation
    grid = {(0, 0): "identity", (1, 0): m.block(1, 0), (2, 1): m.block(2, 1)}
    m2 = Sequential2D(m.sizes, grid, bias=[None, m.bias(1), m.bias(2)], activations=[None, "tanh", "tanh"],
                      inputs=[0], steps=3, dtype=torch.float64)
    out = m2([x, None, None])
    for a, b in zip(held, out):  # two paths (held slot vs identity block): equal up to rounding
        torch.testing.assert_close(a, b, **ulps(a.dtype))


def test_jacobi_update_reads_old_state():
    m = chain(bias=False)
    x = torch.randn(2, 3, dtype=torch.float64)
    one = m([x, None, None], steps=1)
    # after one step slot 2 saw the old (None = zero) slot 1, so it is act(0) = 0
    assert torch.equal(one[2], torch.zeros(2, 2, dtype=torch.float64))
    assert torch.allclose(one[1], torch.tanh(x @ m.block(1, 0).weight.T))
    two = m(one, steps=1)
    assert torch.allclose(two[2], torch.tanh(one[1] @ m.block(2, 1).weight.T))


def test_steps_zero_is_identity_and_depth_default():
    m = chain()
    x = torch.randn(2, 3, dtype=torch.float64)
    s = [x, torch.randn(2, 4, dtype=torch.float64), None]
    assert m(s, steps=0) == s
    assert m.steps == m.depth == 2


class Counting(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.lin = nn.Linear(fin, fout, dtype=torch.float64)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


def test_none_slots_are_skipped_not_multiplied():
    mod = Counting(4, 2)
    m = Sequential2D([3, 4, 2], {(1, 0): LinearBlock(3, 4, dtype=torch.float64), (2, 1): mod, (2, 0): LinearBlock(3, 2, dtype=torch.float64)},
                     bias=True, dtype=torch.float64)
    x = torch.randn(5, 3, dtype=torch.float64)
    out = m.step([x, None, None])
    assert mod.calls == 0  # slot 1 was None: its block was never called
    zero = m.step([x, torch.zeros(5, 4, dtype=torch.float64), None])
    assert mod.calls == 1
    # but None means zero: slot 2 only differs by the module's bias
    torch.testing.assert_close(zero[2] - out[2], mod.lin.bias.expand(5, 2))


def test_bias_only_row_broadcasts_to_batch():
    m = Sequential2D([3, 2], {(1, 0): LinearBlock(3, 2)}, bias=True, activations="sigmoid")
    out = m.step([torch.zeros(4, 3), None])
    assert out[1].shape == (4, 2)
    torch.testing.assert_close(out[1], torch.sigmoid(m.bias(1)).expand(4, 2))


def test_weight_tying_accumulates_gradient_and_counts_once():
    torch.manual_seed(0)
    tied = LinearBlock(4, 4, dtype=torch.float64)
    m = Sequential2D([4, 4, 4], {(1, 0): tied, (2, 1): tied}, activations="tanh", dtype=torch.float64)
    assert m.num_parameters() == 16
    x = torch.randn(3, 4, dtype=torch.float64)
    m(x).sum().backward()
    a, b = copy.deepcopy(tied), copy.deepcopy(tied)
    u = Sequential2D([4, 4, 4], {(1, 0): a, (2, 1): b}, activations="tanh", dtype=torch.float64)
    assert u.num_parameters() == 32
    u(x).sum().backward()
    torch.testing.assert_close(tied.grad, a.grad + b.grad)
    assert "W0" in m.grid()  # the grid marks the tied group


def test_masked_entries_are_zero_and_get_no_gradient():
    mask = torch.rand(5, 4) < 0.5
    blk = LinearBlock(4, 5, mask=mask, dtype=torch.float64)
    assert torch.all(blk.weight[~mask] == 0)
    assert blk.num_trainable() == int(mask.sum())
    x = torch.randn(7, 4, dtype=torch.float64)
    blk(x).pow(2).sum().backward()
    assert torch.all(blk.weight.grad[~mask] == 0)
    assert blk.weight.grad[mask].abs().sum() > 0


def test_frozen_entries_contribute_but_are_not_trained():
    mask = torch.zeros(3, 3, dtype=torch.bool)
    mask[0] = True
    frozen = torch.zeros(3, 3, dtype=torch.float64)
    frozen[1:] = torch.randn(2, 3, dtype=torch.float64)
    blk = LinearBlock(3, 3, mask=mask, frozen=frozen, dtype=torch.float64)
    m = Sequential2D([3, 3], {(1, 0): blk}, dtype=torch.float64)
    assert m.num_parameters() == 3
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    y = m(x)
    torch.testing.assert_close(y, x @ (blk.weight * mask + frozen).T)
    y.sum().backward()
    assert torch.all(blk.grad[1:] == 0)
    assert blk.frozen.grad is None and not blk.frozen.requires_grad
    assert "F" in m.grid()


def test_nested_sequential2d_block():
    inner = chain((4, 6, 3))
    outer = Sequential2D([4, 3], {(1, 0): inner}, bias=True, activations="relu", dtype=torch.float64)
    assert inner.in_features == 4 and inner.out_features == 3
    x = torch.randn(5, 4, dtype=torch.float64)
    torch.testing.assert_close(outer(x), torch.relu(inner(x) + outer.bias(1)))
    assert outer.num_parameters() == inner.num_parameters() + 3


def test_free_leading_batch_dims():
    m = chain()
    x = torch.randn(2, 7, 3, dtype=torch.float64)
    y = m(x)
    assert y.shape == (2, 7, 2)
    torch.testing.assert_close(y[1, 3], m(x[1, 3]))


@pytest.mark.parametrize("loop", [True, False])
def test_stores_equal_reference(loop):
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(10, 10, generator=g) < 0.7
    mask[0] = False
    sizes = [3, 4, 2, 5, 1, 3, 2, 2, 4, 3]
    m = seq2d.from_mask(sizes, mask, activations="tanh", seed=1, steps=4, loop=loop, dtype=torch.float64)
    x = torch.randn(6, 3, dtype=torch.float64)
    st = [x] + [None] * 9
    ours = m(st)
    ref = reference_forward(m, st, 4)
    for a, b in zip(ours, ref):
        if a is None:
            assert b is None
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_linear_weight_layout_rows_are_outputs():
    m = chain((2, 3, 1))
    W = m.linear_weight()
    assert W.shape == (6, 6)
    torch.testing.assert_close(W[2:5, 0:2], m.block(1, 0).weight)
    torch.testing.assert_close(W[5:6, 2:5], m.block(2, 1).weight)
    assert W[0:2].abs().sum() == 0  # the input row is empty


def test_sequence_plain_mode_is_refill_then_step():
    torch.manual_seed(1)
    cell = Sequential2D([3, 4], {(1, 0): LinearBlock(3, 4, dtype=torch.float64), (1, 1): LinearBlock(4, 4, dtype=torch.float64)},
                        bias=True, activations="tanh", dtype=torch.float64)
    xs = torch.randn(5, 2, 3, dtype=torch.float64)
    ys, state = cell.sequence(xs, pipeline=False)
    st = [None, None]
    for t in range(5):
        st[0] = xs[t]
        st = cell(st, steps=1)
        torch.testing.assert_close(ys[t], st[1])
    torch.testing.assert_close(state[1], st[1])


def test_sequence_pipeline_delays():
    r = seq2d.rnn(3, 4, num_layers=3)
    assert r.core.delays() == (0, 0, 1, 2)
    assert r.core.depth is None  # cyclic: no default step count
    with pytest.raises(ValueError, match="steps"):
        r.core([torch.randn(2, 3), None, None, None])


def test_summary_and_repr():
    m = seq2d.mlp([5, 4, 3])
    text = m.summary()
    assert "trainable parameters = 39" in text and "relu" in text
    assert "sizes=[5, 4, 3]" in repr(m)
    assert m.num_parameters() == sum(p.numel() for p in m.parameters())


def test_summary_ends_with_the_legend_of_the_grid_letters():
    from seq2d.gridtext import LEGEND

    text = seq2d.mlp([5, 4, 3]).summary()
    assert text.endswith(LEGEND) and "W dense linear" in LEGEND and "+b" in LEGEND


def test_the_fast_path_switches_are_one_options_object():
    """model.use_plan etc. (as tests, benchmarks and docs set them) read and write model.options;
    Sequential2D's own methods come from its own file, not from mixins (issue 36, item 5)."""
    from seq2d.core.options import Options

    assert Sequential2D.__mro__[1:] == seq2d.ContextModule.__mro__  # no mixin between them
    torch.manual_seed(0)
    m = seq2d.mlp([5, 4, 3])
    assert m.options == Options() and m.use_plan and m.use_schedule
    x = torch.randn(2, 5)
    want = m(x)
    m.use_plan = False
    m.use_held_products = False
    assert m.options == Options(use_plan=False, use_held_products=False) and "use_plan" not in m.__dict__
    assert not m.use_plan and m.use_output_demand
    torch.testing.assert_close(m(x), want)  # the step loop: the same result (within rounding)
    m.options.use_plan = True
    assert m.use_plan
    assert copy.deepcopy(m).options == m.options and copy.deepcopy(m).options is not m.options
