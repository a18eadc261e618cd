"""The compact layout of masked boxes (seq2d/stores/compact.py, issue 35 item 6): ``parameters()``
and every optimizer's state hold the trained entries only, the product equals the masked dense
box's, and state saved with the dense box (before this layout) loads.

The old-layout fixture (tests/fixtures/dense_box/) was written by the seq2d of commit 6ba30f2
(tests/fixtures/dense_box/make.py says how)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import seq2d
from seq2d import LinearBlock, Sequential2D
from seq2d.core import core_of
from seq2d.models import build_preset, random_model
from seq2d.train import TrainConfig, Trainer, build_model, synthetic_data
from seq2d.train.checkpoint import load_checkpoint

D = torch.float64
FIX = Path(__file__).resolve().parent / "fixtures" / "dense_box"


def numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------- what parameters() counts
@pytest.mark.parametrize("build", [
    lambda: random_model([64, 32, 16, 10], granularity="element"),
    lambda: random_model([64, 32, 16, 10], granularity="element", region="feedforward"),
    lambda: random_model([64, 32, 16, 10], granularity="block"),
    lambda: build_preset("mlp:64,32,16,10"),
    lambda: build_preset("random_model:64,32,16,10"),
    lambda: seq2d.from_mask([6, 5, 4], torch.tensor([[0, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=torch.bool)),
], ids=["random_element", "random_element_feedforward", "random_block", "mlp", "random-preset", "cyclic-from-mask"])
def test_parameters_count_the_trained_entries(build):
    model = build()
    assert numel(model) == model.num_parameters()


def test_the_paper_models_count():
    """The issue's numbers: the paper's MNIST models (50x50 inputs) hold the MLP's 1,371,810
    entries; the random_tile store keeps whole tiles (padding: docs/concepts.md)."""
    sizes = [2500, 500, 200, 100, 10]
    elem = random_model(sizes, granularity="element")
    assert numel(elem) == elem.num_parameters() == 1_371_810
    tile = random_model(sizes, granularity="tile")
    assert tile.num_parameters() == 1_371_810
    m = core_of(tile, "test").store.matrix
    assert numel(tile) == m.data.numel() + 810 > 1_371_810  # whole 64 x 64 tiles + the slot biases


def test_an_optimizer_holds_the_trained_entries_only():
    model = random_model([64, 32, 16, 10], granularity="element")
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 64)).square().sum().backward()
    opt.step()
    moments = sum(st["exp_avg"].numel() + st["exp_avg_sq"].numel() for st in opt.state.values())
    assert moments == 2 * model.num_parameters()


# ---------------------------------------------------------------------- the product equals the masked dense box
def _dense_loop(model, W: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The model's iteration written with the N x N effective weight ``W`` (the old layout's
    product): inputs held, every other slot ``act(W x + b)``, ``model.steps`` times."""
    off = model.offsets
    s = torch.zeros(x.shape[0], off[-1], dtype=x.dtype)
    s[:, off[0]:off[1]] = x
    b = torch.cat([model.bias(i) if model.bias(i) is not None else torch.zeros(model.sizes[i], dtype=x.dtype)
                   for i in range(model.n)])
    for _ in range(model.steps):
        pre = s @ W.T + b
        s = torch.cat([s[:, off[i]:off[i + 1]] if i in model.inputs else model.acts[i](pre[:, off[i]:off[i + 1]])
                       for i in range(model.n)], dim=1)
    return s[:, off[-2]:off[-1]]


@pytest.mark.parametrize("frozen", [False, True])
def test_forward_and_gradients_equal_the_masked_dense_box(frozen):
    model = random_model([12, 8, 6, 4], granularity="element", seed=3, dtype=D)
    store = model.store
    assert store.is_compact(0) and store.weight[0].dim() == 1
    if frozen:  # fixed values at masked entries and offsets under trained ones
        blk = model.block(1, 0)
        blk.frozen = torch.randn(blk.shape, dtype=D)
    x = torch.randn(5, 12, dtype=D)
    W = store.dense_weight().detach().requires_grad_()
    ref = _dense_loop(model, W, x)
    out = model(x)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(out)
    out.backward(g)
    ref.backward(g)
    # the compact gradient is the dense gradient at the trained entries (in the box's row-major order)
    box = store.boxes[0]
    rows = torch.cat([torch.arange(model.offsets[i], model.offsets[i + 1]) for i in box.rows])
    cols = torch.cat([torch.arange(model.offsets[j], model.offsets[j + 1]) for j in box.cols])
    dense_grad = W.grad[rows][:, cols]
    mask = store.mask_0
    torch.testing.assert_close(store.weight[0].grad, dense_grad[mask], rtol=1e-12, atol=1e-12)
    assert store.weight[0].grad.numel() == int(mask.sum()) == model.num_parameters() - model.slot_bias.bias.numel()


def test_ties_and_frozen_blocks_with_a_compact_box():
    """A tied block (a box position reading another's region) and a block with requires_grad
    False (all fixed values) in a masked box: product equal to the docstring loop, counts exact."""
    torch.manual_seed(0)
    a, b = LinearBlock(4, 3, dtype=D), LinearBlock(3, 3, dtype=D)
    fixed = LinearBlock(3, 3, dtype=D)
    fixed.weight.requires_grad_(False)
    m = Sequential2D([4, 3, 3], {(1, 0): a, (2, 1): b, (1, 1): b, (2, 2): fixed}, bias=True, steps=3, dtype=D)
    assert m.store.is_compact(0)
    assert numel(m) == m.num_parameters() == 12 + 9 + 6
    x = torch.randn(2, 4, dtype=D)
    from seq2d.core.reference import reference_forward

    ref = reference_forward(m, [x, None, None], 3)[2]
    out = m([x, None, None])[2]
    torch.testing.assert_close(out, ref)


# ---------------------------------------------------------------------- handles into a compact box
def test_handles_write_through_and_mask_edits_relayout():
    model = random_model([12, 8, 6, 4], granularity="element", seed=1, dtype=D)
    off = model.offsets
    blk = model.block(1, 0)
    mask = blk.mask.clone()
    before = model.store.dense_weight()[off[1]:off[2], :12].clone()
    with torch.no_grad():
        blk.weight.mul_(2)                      # in place on the handle's weight
        blk.weight[0, :] = 7.0                  # __setitem__
        blk.weight[:, 1].zero_()                # through a view of it
    want = torch.where(mask, before * 2, torch.zeros_like(before))
    want[0] = torch.where(mask[0], 7.0, 0.0)
    want[:, 1] = 0
    torch.testing.assert_close(model.store.dense_weight()[off[1]:off[2], :12], want)
    torch.testing.assert_close(blk.weight, want)
    # a mask edit in place changes the stored entries: the Parameter is resized, the same object
    W = model.store.weight[0]
    n = model.num_parameters()
    dropped = int(blk.mask[:, :3].sum())
    view = blk.mask
    view[:, :3] = False
    assert model.store.weight[0] is W and numel(model) == model.num_parameters() == n - dropped
    view[0, 3:] = view[0, 3:]                    # a second edit through the same view: laid out again, no change
    assert numel(model) == model.num_parameters() == n - dropped
    assert not blk.weight[:, :3].any() and torch.equal(blk.weight[:, 3:], want[:, 3:])
    blk.mask = None                              # every entry trainable: newly trained entries start at 0
    assert torch.equal(blk.weight[:, 3:], want[:, 3:]) and not blk.weight[:, :3].any()
    assert numel(model) == model.num_parameters()
    # gradients read (and written) through the handle
    model(torch.randn(3, 12, dtype=D)).sum().backward()
    assert blk.weight.grad is not None and blk.weight.grad.abs().sum() > 0
    blk.weight.grad.zero_()
    assert not blk.grad.any()


# ---------------------------------------------------------------------- state saved with the dense box
def test_a_state_dict_saved_with_the_dense_box_loads():
    old = torch.load(FIX / "state_dict.pt", weights_only=True)
    assert old["state"]["store.weight.0"].dim() == 2  # the old layout: the whole box
    model = random_model([6, 5, 4, 3], granularity="element", seed=1, dtype=D)
    model.load_state_dict(old["state"])
    torch.testing.assert_close(model(old["x"]), old["y"], rtol=1e-12, atol=1e-12)
    m = old["state"]["store.mask_0"]
    assert torch.equal(model.store.weight[0].detach(), old["state"]["store.weight.0"][m])
    # into a model with another mask: it takes the state's mask, as a masked box always did
    other = random_model([6, 5, 4, 3], granularity="element", seed=2, dtype=D)
    other.load_state_dict(old["state"])
    torch.testing.assert_close(other(old["x"]), old["y"], rtol=1e-12, atol=1e-12)
    assert torch.equal(other.store.mask_0, m)


def test_a_checkpoint_saved_with_the_dense_box_resumes_as_it_would_have(tmp_path):
    """Resuming the fixture's one-epoch run (checkpoint with the dense box and Adam's moments over
    it) for a second epoch reaches the weights the old code reached in two straight epochs."""
    shutil.copytree(FIX / "run", tmp_path / "run")
    ck = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert ck["model"]["store.weight.0"].dim() == 2 and ck["optimizer"]["state"][1]["exp_avg"].dim() == 2
    cfg = TrainConfig(model="random_model", granularity="element", sizes=[16, 8, 8, 4], data="synthetic", epochs=2,
                      batch_size=32, lr=1e-2, out_dir=str(tmp_path / "run"), num_threads=1, quiet=True)
    trainer = Trainer(cfg, build_model(cfg), synthetic_data(16, 4, n_train=128, n_test=64))
    trainer.fit(resume=True)
    assert trainer.updates == 8
    want = torch.load(FIX / "after_two_epochs.pt", weights_only=True)
    core = core_of(trainer.model, "test")
    torch.testing.assert_close(core.store.dense_weight(), want["dense_weight"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(core.slot_bias.bias.detach(), want["slot_bias"], rtol=1e-5, atol=1e-6)
    moments = sum(st["exp_avg"].numel() for st in trainer.optimizer.state.values())
    assert moments == trainer.model.num_parameters()


def test_blocks_of_a_compact_box_stay_trainable_in_a_new_model():
    """Handles bound to a compact box, reused to build another Sequential2D (as seq2d.lab.lm's
    multi-layer tanh RNN does to wrap its inter-layer blocks in dropout), keep their values and
    stay trainable: the store asks the handle's store, not its weight (a copy made under no_grad)."""
    torch.manual_seed(0)
    mask = torch.tensor([[0, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
    old = seq2d.from_mask([3, 4, 4, 4], mask, dtype=D)
    blocks = {(i, j): blk for i, j, _, blk in old.positions()}
    new = Sequential2D(old.sizes, blocks, bias=[None] + [old.bias(i) for i in (1, 2, 3)],
                       activations=[None, "tanh", "tanh", "tanh"], inputs=[0], outputs=[3], dtype=D)
    assert numel(new) == numel(old) == new.num_parameters() == 4 * 3 + 5 * 16 + 3 * 4
    assert torch.equal(new.linear_weight(), old.linear_weight())
    assert all(p.requires_grad for p in new.parameters())
