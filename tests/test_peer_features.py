"""Features ported from the authors' library (iterativennsimple), issue 10: each against a
plain reference written out here."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import seq2d
from seq2d import LinearBlock, Sequential2D
from seq2d.reference import reference_forward

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
    assert torch.equal(blk.frozen, W0) and torch.equal(blk.mask, M)
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
    assert blk.mask is None and torch.equal(blk.frozen, W0)
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
    assert torch.equal(back.block(1, 0).frozen, W0)
    torch.testing.assert_close(back([x, None], steps=1)[1], model([x, None], steps=1)[1], rtol=0, atol=0)


def test_setting_an_offset_through_the_handle():
    model, blk = _offset_model(torch.eye(3, dtype=torch.bool), None)
    x = torch.randn(2, 3, dtype=D)
    before = model([x, None], steps=1)[1]
    blk.frozen = torch.full((3, 3), 0.5, dtype=D)
    after = model([x, None], steps=1)[1]
    torch.testing.assert_close(after - before, x.sum(-1, keepdim=True).expand(2, 3) * 0.5, rtol=0, atol=1e-12)
