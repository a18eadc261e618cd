"""Features ported from the authors' library (iterativennsimple), issue 10: each against a
plain reference written out here."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import seq2d
from seq2d import LinearBlock, Sequential2D
from seq2d.core.reference import reference_forward
from seq2d.testing import ulps

D = torch.float64


# ---------------------------------------------------------------- frozen offsets under trainable entries
def _offset_model(mask, frozen):
    blk = LinearBlock(3, 3, mask=mask, frozen=frozen, dtype=D)
    return Sequential2D([3, 3], {(1, 0): blk}, bias=False, activations=None, dtype=D), blk


def test_offset_under_trainable_entries_is_w0_plus_u_times_m():
    """W = W0 + U * M with W0 nonzero where M is 1 (their test: mask=eye, frozen=randn)."""
    g = torch.Generator().manual_seed(0)
    M = torch.eye(3, dtype=torch.bool)
    W0 = torch.randn(3, 3, generator=g, dtype=D)
    model, blk = _offset_model(M, W0)
    assert torch.equal(blk.frozen, W0) and torch.equal(blk.mask, M)  # values copied through: bitwise
    U = blk.weight.detach().clone()
    x = torch.randn(5, 3, generator=g, dtype=D)
    y = model([x, None], steps=1)[1]
    torch.testing.assert_close(y, F.linear(x, W0 + U * M), rtol=0, atol=1e-12)
    torch.testing.assert_close(y, reference_forward(model, [x, None], 1)[1], rtol=0, atol=1e-12)
    y.square().sum().backward()
    assert torch.all(blk.grad[~M] == 0) and bool((blk.grad[M] != 0).all())
    # counted: 3 trainable entries (the mask), the offsets are buffers
    assert blk.num_trainable() == 3 and model.num_parameters() == 3
    assert blk.num_stored() == 9  # the 3 trainable entries + 6 nonzero frozen entries off the mask


def test_offset_without_mask_and_on_the_tiled_store():
    g = torch.Generator().manual_seed(1)
    W0 = torch.randn(3, 3, generator=g, dtype=D)
    blk = LinearBlock(3, 3, frozen=W0, dtype=D)  # all trainable, plus a fixed offset
    assert blk.mask is None and torch.equal(blk.frozen, W0)  # a value copied through: bitwise
    model = Sequential2D([3, 3], {(1, 0): blk}, bias=False, activations=None, dtype=D)
    x = torch.randn(4, 3, generator=g, dtype=D)
    U = blk.weight.detach().clone()
    torch.testing.assert_close(model([x, None], steps=1)[1], F.linear(x, W0 + U), rtol=0, atol=1e-12)
    assert model.num_parameters() == 9
    tiled = copy.deepcopy(model).to_blocksparse(tile=16)
    torch.testing.assert_close(tiled([x, None], steps=1)[1], F.linear(x, W0 + U), rtol=0, atol=1e-12)


def test_offset_survives_the_spec_round_trip():
    M = torch.eye(3, dtype=torch.bool)
    W0 = torch.arange(9, dtype=D).view(3, 3) + 1
    model, blk = _offset_model(M, W0)
    spec = seq2d.to_spec(model, weights=True)
    back = seq2d.from_spec(spec, dtype=D)
    x = torch.randn(2, 3, dtype=D)
    assert torch.equal(back.block(1, 0).frozen, W0)  # a value copied through the spec: bitwise
    # two models built apart (by hand, from the spec): their outputs agree to a few ulps
    torch.testing.assert_close(back([x, None], steps=1)[1], model([x, None], steps=1)[1], **ulps(D))


def test_setting_an_offset_through_the_handle():
    model, blk = _offset_model(torch.eye(3, dtype=torch.bool), None)
    x = torch.randn(2, 3, dtype=D)
    before = model([x, None], steps=1)[1]
    blk.frozen = torch.full((3, 3), 0.5, dtype=D)
    after = model([x, None], steps=1)[1]
    torch.testing.assert_close(after - before, x.sum(-1, keepdim=True).expand(2, 3) * 0.5, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- a module block's own trainable count
class _MaskedModule(torch.nn.Module):
    """A custom module block with a masked weight (as in their test suite): 3 of 12 entries trainable."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 4, dtype=D))
        self.register_buffer("mask", torch.zeros(3, 4, dtype=torch.bool))
        self.mask[0, :3] = True

    def forward(self, x):
        return F.linear(x, self.weight * self.mask)

    def num_trainable(self) -> int:
        return int(self.mask.sum())


def test_module_block_reports_its_own_trainable_count():
    blk = _MaskedModule()
    model = Sequential2D([4, 3], {(1, 0): blk}, bias=False, activations=None, dtype=D)
    assert model.num_parameters() == 3  # not 12
    # the same module at two positions is counted once; the slot bias adds its entries
    shared = Sequential2D([4, 3, 3], {(1, 0): blk, (2, 0): blk}, bias=[False, False, True], activations=None, dtype=D)
    assert shared.num_parameters() == 3 + 3
    # a module without the hook counts its parameters that require grad
    plain = Sequential2D([4, 3], {(1, 0): torch.nn.Linear(4, 3, dtype=D)}, bias=False, activations=None, dtype=D)
    assert plain.num_parameters() == 15


def test_nested_sequential2d_counts_through_its_own_num_parameters():
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[2:, :2] = True  # slot 0 -> slot 1, 4 of the 2x2 block... all 4 entries of F[1][0]
    inner = seq2d.from_mask([2, 2], mask, bias=False, dtype=D)
    elem = torch.zeros(2, 2, dtype=torch.bool)
    elem[0, 0] = True
    inner.block(1, 0).mask = elem  # 1 trainable entry of 4
    assert inner.num_parameters() == 1
    outer = Sequential2D([2, 2], {(1, 0): inner}, bias=False, activations=None, dtype=D)
    assert outer.num_parameters() == 1


# ---------------------------------------------------------------- per-block biases
def test_block_bias_equals_nn_linear_and_is_added_only_for_present_inputs():
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 4, dtype=D)
    torch.manual_seed(0)
    blk = LinearBlock(3, 4, bias=True, dtype=D)
    assert torch.equal(blk.weight, ref.weight) and torch.equal(blk.bias, ref.bias)  # nn.Linear's init, same draws: bitwise
    other = LinearBlock(2, 4, bias=True, dtype=D)
    model = Sequential2D([3, 2, 4], {(2, 0): blk, (2, 1): other}, bias=[False, False, True], activations=None,
                         steps=1, dtype=D)
    x0, x1 = torch.randn(5, 3, dtype=D), torch.randn(5, 2, dtype=D)
    b2 = model.bias(2)
    both = model([x0, x1, None])[2]
    torch.testing.assert_close(both, ref(x0) + F.linear(x1, other.weight, other.bias) + b2, rtol=0, atol=1e-12)
    only0 = model([x0, None, None])[2]  # slot 1 absent: its block, bias included, adds nothing
    torch.testing.assert_close(only0, ref(x0) + b2, rtol=0, atol=1e-12)
    for state in ([x0, x1, None], [x0, None, None], [None, x1, None]):
        torch.testing.assert_close(model(state)[2], reference_forward(model, state, 1)[2], rtol=0, atol=1e-12)
    # counted once each; gradients reach them
    assert model.num_parameters() == 12 + 4 + 8 + 4 + 4
    model([x0, x1, None])[2].sum().backward()
    torch.testing.assert_close(blk.bias.grad, torch.full((4,), 5.0, dtype=D))


def test_block_bias_tied_across_positions_and_on_the_tiled_store():
    blk = LinearBlock(4, 4, bias=True, dtype=D)
    model = Sequential2D([4, 4, 4], {(1, 0): blk, (2, 1): blk}, bias=False, activations="tanh", dtype=D)
    x = torch.randn(3, 4, dtype=D)
    y = model([x, None, None])
    torch.testing.assert_close(y[2], reference_forward(model, [x, None, None], model.steps)[2], rtol=0, atol=1e-12)
    assert model.num_parameters() == 16 + 4  # the tied block (weight and bias) once
    tiled = copy.deepcopy(model).to_blocksparse(tile=16)
    torch.testing.assert_close(tiled([x, None, None])[2], y[2], rtol=0, atol=1e-12)
    assert tiled.num_parameters() == model.num_parameters()
    # sequence mode falls back to the step loop (named) and still equals it
    from seq2d.core.sequence import unsupported_reason

    assert "own bias" in unsupported_reason(model)


def test_block_bias_gradcheck_and_constant_node_count():
    from seq2d.testing import autograd_nodes

    def build(n):  # a chain closed into a cycle (one store box: the step is one product)
        blocks = {(i, i - 1): LinearBlock(2, 2, bias=True, dtype=D) for i in range(1, n)}
        blocks[(1, n - 1)] = LinearBlock(2, 2, bias=True, dtype=D)
        return Sequential2D([2] * n, blocks, bias=False, activations="tanh", dtype=D, steps=1)

    m = build(3)
    x = torch.randn(2, 2, dtype=D, requires_grad=True)
    params = [p for p in m.parameters()]
    assert torch.autograd.gradcheck(lambda x, *ps: m([x, None, None])[1], (x, *params))
    counts = []
    for n in (4, 16, 64):
        m = build(n)
        out = m.step([torch.randn(2, 2, dtype=D)] * n)
        counts.append(autograd_nodes(*[o for o in out[1:]], ops_only=True))
    assert counts[0] == counts[1] == counts[2], counts


def test_block_bias_in_specs_round_trip_and_toml():
    spec = {
        "seed": 3,
        "slots": [{"size": 3, "role": "input"}, {"size": 4, "activation": "tanh", "bias": True}],
        "blocks": [{"row": 1, "col": 0, "kind": "random", "density": 0.5, "bias": True},
                   {"row": 1, "col": 1, "kind": "dense", "bias": True, "bias_value": [0.5, -0.5, 1.0, 0.0],
                    "frozen": [[1.0, 0.0, 0.0, 0.0]] * 4}],  # a dense trainable block with a fixed offset
        "steps": 2,
    }
    model = seq2d.from_spec(spec, dtype=D)
    b10, b11 = model.block(1, 0), model.block(1, 1)
    assert b10.bias is not None and b10.bias.shape == (4,)
    assert b11.bias.tolist() == [0.5, -0.5, 1.0, 0.0] and b11.mask is None and b11.frozen is not None
    assert seq2d.from_spec(spec, dtype=D).block(1, 0).bias.tolist() == b10.bias.tolist()  # seeded
    back = seq2d.from_spec(seq2d.to_spec(model, weights=True), dtype=D)
    x = torch.randn(2, 3, dtype=D)
    torch.testing.assert_close(back([x, None])[1], model([x, None])[1], **ulps(D))  # built apart: a few ulps
    assert seq2d.to_spec(model)["blocks"][0]["bias"] is True
    with pytest.raises(ValueError, match=r"blocks\[0\]: 'bias_value' needs bias = true"):
        seq2d.from_spec({**spec, "blocks": [{"row": 1, "col": 0, "bias_value": [0.0] * 4}]})
    with pytest.raises(ValueError, match=r"blocks\[0\]\.bias_value: expected 4 numbers"):
        seq2d.from_spec({**spec, "blocks": [{"row": 1, "col": 0, "bias": True, "bias_value": [0.0] * 3}]})
