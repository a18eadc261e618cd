"""randomize: exact parameter counts, reproducibility, uniform placement, regions."""

import pytest
import torch

import seq2d
from seq2d.models.random import region_mask

TEMPLATES = {
    "mlp": lambda: seq2d.mlp([40, 30, 20, 10]),
    "mlp_nobias": lambda: seq2d.mlp([40, 30, 10], bias=False),
    "mlp_layernorm": lambda: seq2d.mlp([24, 16, 8], activation="layernorm"),
    "from_mask": lambda: seq2d.from_mask([20, 15, 15, 5], seed=0),
    "truncated_rnn": lambda: seq2d.create_model("truncated_rnn", input_size=6, hidden_size=8, k=3),
}


def trainable_mask(model):
    """(N, N) bool: trainable weight entries of a randomized model."""
    W = torch.zeros(sum(model.sizes), sum(model.sizes), dtype=torch.bool)
    off = model.offsets
    for i, j, kind, blk in model.positions():
        W[off[i]:off[i + 1], off[j]:off[j + 1]] = blk.trainable_mask()
    return W


@pytest.mark.parametrize("granularity", ["element", "tile", "block"])
@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_exact_parameter_count(template, granularity, seed):
    t = TEMPLATES[template]()
    r = seq2d.randomize(t, granularity=granularity, seed=seed, tile=16)
    assert r.num_parameters() == t.num_parameters()
    core = t if isinstance(t, seq2d.Sequential2D) else t.core
    assert r.sizes == core.sizes and r.inputs == core.inputs and r.outputs == core.outputs
    assert r.steps == core.steps
    if granularity == "tile":
        assert r.matrix is not None  # built directly block-sparse
    x = torch.randn(3, r.in_features)
    assert torch.isfinite(r(x)).all()


@pytest.mark.parametrize("granularity", ["element", "tile", "block"])
def test_same_seed_same_model_different_seed_different_mask(granularity):
    t = TEMPLATES["mlp"]()
    a = seq2d.randomize(t, granularity=granularity, seed=3, tile=16)
    b = seq2d.randomize(t, granularity=granularity, seed=3, tile=16)
    c = seq2d.randomize(t, granularity=granularity, seed=4, tile=16)
    assert torch.equal(trainable_mask(a), trainable_mask(b))
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    assert not torch.equal(trainable_mask(a), trainable_mask(c))


def test_mnist_protocol_model():
    t = seq2d.mlp([2500, 500, 200, 100, 10])
    assert t.num_parameters() == 1_371_810
    r = seq2d.randomize(t, seed=0)
    assert r.num_parameters() == 1_371_810 and r.steps == 4
    mask = trainable_mask(r)
    region_entries = 810 * 3310
    assert int(mask.sum()) == 1_371_810 - 810  # weights = total - biases
    assert abs(int(mask.sum()) / region_entries - 0.5114) < 1e-3  # the published ~0.5108 density, exactly
    assert not mask[:2500].any()  # the input row is held


def test_entries_spread_uniformly_over_the_region():
    """Each block's share of the entries matches its share of the region's area (a
    binomial check per block, 5 sigma), and every block of the region receives entries."""
    t = seq2d.mlp([60, 50, 40, 30])
    r = seq2d.randomize(t, granularity="element", seed=11)
    mask = trainable_mask(r)
    off, sizes = r.offsets, r.sizes
    reg = region_mask(r)
    W = int(mask.sum())
    area = sum(sizes[i] * sizes[j] for i, j in reg.nonzero().tolist())
    p = W / area
    for i, j in reg.nonzero().tolist():
        n = sizes[i] * sizes[j]
        got = int(mask[off[i]:off[i + 1], off[j]:off[j + 1]].sum())
        sd = (n * p * (1 - p)) ** 0.5
        assert abs(got - n * p) < 5 * sd + 1, (i, j, got, n * p)
    # also spread inside blocks: rows of the biggest block are not empty-biased
    big = mask[off[1]:off[2], off[0]:off[1]].sum(dim=1).float()
    assert big.min() > 0 and big.std() / big.mean() < 0.5


def test_regions():
    t = TEMPLATES["mlp"]()
    ff = seq2d.randomize(t, region="feedforward", seed=0)
    assert ff.depth is not None  # acyclic
    assert seq2d.graph.is_acyclic(ff)
    tm = seq2d.randomize(t, region="template", seed=0)
    assert {(i, j) for i, j, _, _ in tm.positions()} == {(1, 0), (2, 1), (3, 2)}
    assert tm.num_parameters() == t.num_parameters()  # the template's own blocks, all filled
    for g in ("element", "tile", "block"):  # no input -> output block: the prediction passes a hidden slot
        ns = seq2d.randomize(t, granularity=g, region="no-shortcut", seed=1, tile=16)
        pos = {(i, j) for i, j, _, _ in ns.positions()}
        assert (3, 0) not in pos and ns.num_parameters() == t.num_parameters(), g
        assert seq2d.models.random.region_mask(ns, "no-shortcut").sum() == 11  # 3 rows x 4 columns, less one
    with pytest.raises(ValueError, match="Unknown region 'upper'"):
        seq2d.randomize(t, region="upper")
    bad = torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="input slots"):
        seq2d.randomize(t, region=bad)
    with pytest.raises(ValueError, match="Unknown granularity 'row'"):
        seq2d.randomize(t, granularity="row")


def test_tile_granularity_really_skips_tiles():
    t = seq2d.mlp([256, 256, 64])
    r = seq2d.randomize(t, granularity="tile", tile=32, seed=0)
    eng = r.matrix
    padded_rows = (256 + 64) // 32
    allowed_tiles = padded_rows * (256 + 256 + 64) // 32
    assert eng.nnz_tiles < allowed_tiles
    # whole tiles except at most one top-up tile: stored entries - trainable < one tile
    stored = eng.nnz_tiles * 32 * 32
    assert stored - eng.num_trainable() < 32 * 32


def test_initialisation_scaled_by_actual_fan_in():
    t = seq2d.mlp([400, 200, 10])
    r = seq2d.randomize(t, seed=0)
    W = r.linear_weight().detach()
    mask = trainable_mask(r)
    off = r.offsets
    fan = mask.sum(dim=1)
    rows = torch.arange(off[1], off[-1])
    bound = fan[rows].clamp(min=1).double().rsqrt()
    assert torch.all(W[rows].abs().double() <= bound[:, None] + 1e-7)
    # the bound is nearly attained: the draws are U(-b, b), not something narrower
    assert torch.all(W[rows].abs().max(dim=1).values.double() > 0.8 * bound)


def test_empty_row_moves_its_bias_budget_to_weights():
    # a tiny template at block granularity: some seed leaves a slot with no entry
    t = seq2d.mlp([200, 3, 3, 2])
    for seed in range(20):
        r = seq2d.randomize(t, granularity="block", seed=seed)
        assert r.num_parameters() == t.num_parameters()
