"""The parameter store and the flat state (issue 9): handles into the store, no stale
caches, constant autograd work per step, the flat API, state_dict migration, compile."""

import copy

import pytest
import torch
from torch import nn

import seq2d
from seq2d import LinearBlock, Sequential2D
from seq2d.core.reference import reference_forward
from seq2d.testing import autograd_nodes

D = torch.float64


def _random_mask_model(n: int, size: int, density: float = 0.3, seed: int = 0, **kw) -> Sequential2D:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, n, generator=g) < density
    mask[0] = False  # slot 0 is the held input
    mask[1:, 0] = True  # every row reads the input (no row left empty)
    mask[1:, 1:] |= torch.eye(n - 1, dtype=torch.bool)  # self-loops: cyclic, iterated as a whole
    return seq2d.from_mask([size] * n, mask, activations="tanh", bias=True, seed=seed, steps=2, dtype=D, **kw)


# ---------------------------------------------------------------------------- cost follows the store
@pytest.mark.parametrize("call", ["step", "forward", "flat"])
def test_autograd_nodes_per_step_do_not_grow_with_slots_or_blocks(call):
    counts = {}
    for n in (4, 64, 256):
        m = _random_mask_model(n, 4)
        state = [torch.randn(3, 4, dtype=D) for _ in range(n)]
        if call == "step":
            outs = m.step(state)
        elif call == "forward":
            outs = m(state, steps=1)
        else:
            outs = [m.step_flat(torch.randn(3, m.flat_size, dtype=D))]
        counts[n] = autograd_nodes(*outs)
        nblocks = sum(1 for _ in m.positions())
        assert nblocks > n  # many more blocks than slots, and they grow with n
    assert len(set(counts.values())) == 1, counts


def test_one_parameter_per_box_and_one_bias_vector():
    m = _random_mask_model(32, 4)
    names = [k for k, _ in m.named_parameters()]
    assert names == ["slot_bias.bias", "store.weight.0"]  # cyclic model: one (R, C) box
    mlp = seq2d.mlp([7, 5, 4, 3])
    assert [tuple(p.shape) for p in mlp.store.weight] == [(5, 7), (4, 5), (3, 4)]  # a box per plan level


def test_store_results_equal_the_docstring_loop_for_every_store():
    for kw in (dict(store="dense"), dict(loop=True), dict(store="auto")):
        m = _random_mask_model(12, 3, **kw)
        state = [torch.randn(2, 3, dtype=D)] + [None] * 11
        out = m(state, steps=3)
        ref = reference_forward(m, state, 3)
        for a, b in zip(out, ref):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------- handles never go stale
def _two_block_model():
    torch.manual_seed(0)
    a, b = LinearBlock(4, 3, dtype=D), LinearBlock(3, 3, dtype=D)
    m = Sequential2D([4, 3, 3], {(1, 0): a, (2, 1): b, (2, 2): b}, activations="tanh", steps=3, dtype=D)
    return m, a, b


def _check_against_loop(m, x):
    state = m.split_inputs(x)
    out = m(state)
    ref = reference_forward(m, state, m.steps)
    for p, q in zip(out, ref):
        if p is not None:
            torch.testing.assert_close(p, q, rtol=0, atol=1e-12)
    return out


def test_mask_set_after_a_forward_is_seen_by_the_next_one():
    m, a, _ = _two_block_model()
    x = torch.randn(5, 4, dtype=D)
    before = m(x)
    mask = torch.rand(3, 4) < 0.5
    a.mask = mask
    assert torch.equal(a.mask, mask) and m.num_parameters() == int(mask.sum()) + 9
    assert torch.all(a.weight[~mask] == 0)  # the invariant is restored at once
    after = _check_against_loop(m, x)
    assert not torch.allclose(before, m(x))
    # an in-place edit of the handle's mask view is seen too (version counter)
    a.mask[0, :] = False
    _check_against_loop(m, x)
    assert torch.equal(a.effective_weight()[0], torch.zeros(4, dtype=D))
    a.mask = None  # all trainable again
    assert a.mask is None and m.num_parameters() == 12 + 9
    del after


def test_weight_and_frozen_edits_through_handles():
    m, a, b = _two_block_model()
    x = torch.randn(5, 4, dtype=D)
    with torch.no_grad():
        a.weight.mul_(2.0)  # in place on the view
        b.weight = torch.eye(3, dtype=D) * 0.5  # assignment copies into the store
    assert torch.equal(b.weight, torch.eye(3, dtype=D) * 0.5)  # copied through: bitwise
    _check_against_loop(m, x)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[:, :2] = True
    frozen = torch.zeros(3, 4, dtype=D)
    frozen[:, 2:] = 1.5
    a.mask = mask
    a.frozen = frozen
    assert torch.equal(a.frozen, frozen)
    _check_against_loop(m, x)
    m(x).sum().backward()
    assert torch.all(a.grad[~mask] == 0) and a.grad[mask].abs().sum() > 0
    a.frozen = torch.ones(3, 4, dtype=D)  # an offset under the trainable entries too
    _check_against_loop(m, x)


def test_tied_handle_gradient_is_the_sum_over_positions():
    m, _, b = _two_block_model()
    x = torch.randn(5, 4, dtype=D)
    m(x).square().sum().backward()
    g = b.grad.clone()
    # the same model with b untied (two copies) gives the two per-position gradients
    b1, b2 = LinearBlock(3, 3, dtype=D), LinearBlock(3, 3, dtype=D)
    with torch.no_grad():
        b1.weight.copy_(b.weight)
        b2.weight.copy_(b.weight)
    a2 = copy.deepcopy(m.block(1, 0))
    u = Sequential2D([4, 3, 3], {(1, 0): a2, (2, 1): b1, (2, 2): b2}, activations="tanh", steps=3, dtype=D)
    u(x).square().sum().backward()
    torch.testing.assert_close(g, b1.grad + b2.grad, rtol=0, atol=1e-12)


def test_gradients_read_through_the_handles_as_in_torch(recwarn):
    """Code written for nn.Linear reads ``layer.weight.grad`` / ``layer.bias.grad``: through a
    handle they are the store's gradient at the handle's region (not None), with no warning."""
    torch.manual_seed(0)
    a, b = LinearBlock(4, 3, dtype=D), LinearBlock(3, 3, dtype=D)
    m = Sequential2D([4, 3, 3], {(1, 0): a, (2, 1): b, (2, 2): b}, bias=True, activations="tanh", steps=3, dtype=D)
    assert m.bias_grad(1) is None and a.weight.grad is None and m.bias(1).grad is None  # before a backward
    m(torch.randn(5, 4, dtype=D)).square().sum().backward()
    for blk in (a, b):
        assert blk.weight.grad is not None
        assert torch.equal(blk.weight.grad, blk.grad)  # one region of one tensor, read twice
    full = m.slot_bias.bias.grad
    for i in (1, 2):
        o = m.slot_bias.pos[i]
        assert torch.equal(m.bias_grad(i), full[o:o + m.sizes[i]]) and m.bias_grad(i).abs().sum() > 0
        assert torch.equal(m.bias(i).grad, m.bias_grad(i))
    assert m.bias_grad(0) is None and m.bias(0) is None  # the input slot has no bias
    assert not [w for w in recwarn if "non-leaf" in str(w.message)]
    # what is computed from a handle's tensor is a plain tensor; writes into .grad reach the store
    assert type(a.weight * 2) is torch.Tensor and type(m.bias(1).detach()) is torch.Tensor
    a.weight.grad.zero_()
    assert not a.grad.any()
    with pytest.raises(ValueError, match="zero_grad"):
        a.weight.grad = None
    m.zero_grad()
    assert m.bias_grad(1) is None and a.weight.grad is None
    # an unbound block owns its Parameter: .grad is torch's own
    c = LinearBlock(2, 3, dtype=D)
    c(torch.randn(4, 2, dtype=D)).sum().backward()
    assert isinstance(c.weight, nn.Parameter) and c.weight.grad is c.grad is not None


def test_to_blocksparse_releases_the_old_handles_with_their_values():
    m, a, _ = _two_block_model()
    w = a.weight.detach().clone()
    m.to_blocksparse(16)
    assert a.store is None and isinstance(a.weight, nn.Parameter) and torch.equal(a.weight, w)


def test_store_dot_kind_says_which_store_holds_the_blocks():
    m, _, _ = _two_block_model()
    assert m.store.kind == "dense" and "store=" not in repr(m)
    m.to_blocksparse(16)
    assert m.store.kind == "tiled"  # the store changed; the constructor's request (repr, to_spec) stays
    # the models that wrap one core ask it (seq2d.models.wrapper.CoreModel)
    for wrapper in (seq2d.rnn(3, 4), seq2d.truncated_rnn(seq2d.rnn(3, 4), 2),
                    seq2d.transformer_layer(8, 2, dim_feedforward=16),
                    seq2d.transformer_encoder(8, 2, num_layers=2, dim_feedforward=16)):
        assert wrapper.store.kind == wrapper.core.store.kind == "dense", type(wrapper).__name__
        assert wrapper.num_parameters() == wrapper.core.num_parameters() > 0
    only_modules = Sequential2D([2, 2], {(1, 0): nn.Linear(2, 2)}, dtype=D)
    assert only_modules.store is None


# ---------------------------------------------------------------------------- the flat API
def test_flat_api_equals_the_list_api():
    for tiled in (False, True):
        m = _random_mask_model(6, 16)
        if tiled:
            m.to_blocksparse(16)
        x = torch.randn(3, m.flat_size, dtype=D)
        state = m.from_flat(x)
        torch.testing.assert_close(m.step_flat(x), m.to_flat(m.step(state))[0], rtol=0, atol=1e-12)
        out = m.forward_flat(x, steps=3)
        ref = m(state, steps=3)
        for i, r in enumerate(ref):
            o = m.flat_offsets[i]
            torch.testing.assert_close(out[:, o:o + m.sizes[i]], r, rtol=0, atol=1e-12)


def test_flat_api_errors_say_what_was_expected():
    m = _random_mask_model(4, 3)
    with pytest.raises(RuntimeError, match=r"\(\*batch, 12\)"):
        m.forward_flat(torch.randn(2, 11, dtype=D))
    with pytest.raises(TypeError, match="float32"):
        m.step_flat(torch.randn(2, 12))
    with pytest.raises(TypeError, match="tensor"):
        m.forward_flat([torch.randn(2, 3)])


# ---------------------------------------------------------------------------- checkpoints
def test_state_dict_from_per_block_layout_is_migrated():
    m, a, b = _two_block_model()
    old = {"blocks.1_0.weight": a.weight.detach() + 1, "blocks.2_1.weight": b.weight.detach() - 1,
           "acts.0": None}
    old.pop("acts.0")
    sd = {k: v for k, v in m.state_dict().items() if not k.startswith("store.")}
    sd.update(old)
    m.load_state_dict(sd)
    # bitwise: values copied through the migration
    torch.testing.assert_close(a.weight, old["blocks.1_0.weight"], rtol=0, atol=0)
    torch.testing.assert_close(b.weight, old["blocks.2_1.weight"], rtol=0, atol=0)
    bad = dict(sd)
    bad["blocks.1_0.weight"] = torch.zeros(2, 2, dtype=D)
    with pytest.raises(RuntimeError, match=r"blocks.1_0.weight.*\(3, 4\)"):
        m.load_state_dict(bad)


# ---------------------------------------------------------------------------- compile
def test_compiled_flat_step_with_a_fixed_mask_is_one_graph():
    m = _random_mask_model(6, 8)
    x = torch.randn(4, m.flat_size, dtype=D)
    ref = m.step_flat(x)  # the step plan is built eagerly once
    f = torch.compile(m.step_flat, fullgraph=True, backend="eager")
    y = f(x)
    torch.testing.assert_close(y, ref, rtol=0, atol=0)  # bitwise: backend="eager" runs the very same ops
    y.square().sum().backward()
    assert m.store.weight[0].grad is not None


def test_auto_picks_the_store_from_the_measured_crossover():
    from seq2d.stores import DenseStore, TiledStore, choose_store

    sparse = torch.zeros(8, 8, dtype=torch.bool)
    sparse[1:, 0] = True
    sparse[torch.arange(1, 8), torch.arange(1, 8)] = True  # 14 of 64 blocks
    assert choose_store([64] * 8, sparse.tolist()) == ("tiled", 64)
    assert choose_store([16] * 8, sparse.tolist()) == ("tiled", 16)  # tile 16 below 0.4
    half = sparse.clone()
    half[1:, 4:] = True  # 38 of the box's 56 blocks: 0.68
    assert choose_store([16] * 8, half.tolist()) == ("dense", None)
    assert choose_store([16, 32, 48, 64] * 2, sparse.tolist()) == ("tiled", 16)  # 16 pads none of them
    assert choose_store([64] * 8, torch.ones(8, 8, dtype=torch.bool).tolist()) == ("dense", None)
    m = seq2d.from_mask([64] * 8, sparse, activations="tanh", bias=True, seed=0, steps=2, store="auto", dtype=D)
    assert isinstance(m.store, TiledStore) and m.store.tile == 64
    ref = seq2d.from_mask([64] * 8, sparse, activations="tanh", bias=True, seed=0, steps=2, dtype=D)
    assert isinstance(ref.store, DenseStore)
    x = torch.randn(3, 64, dtype=D)
    torch.testing.assert_close(m(x), ref(x), rtol=0, atol=1e-12)
    assert m.num_parameters() == ref.num_parameters()


def test_auto_measures_density_against_the_dense_box_not_the_whole_matrix():
    """The randomized MNIST model's shape: every non-input row reads every column at about half
    the entries. Against the whole N x N matrix its stored tiles look sparse (the input rows are
    held), but the dense store multiplies only rows 1..n-1 x all columns, where every tile is
    stored: dense. An MLP-shaped (acyclic) grid is dense per level."""
    from seq2d.stores import choose_store

    n = 5
    region = [[i > 0 for _ in range(n)] for i in range(n)]
    assert choose_store([256, 128, 64, 64, 64], region) == ("dense", None)
    chain = [[i == j + 1 for j in range(n)] for i in range(n)]
    boxes = [([i], [i - 1]) for i in range(1, n)]
    assert choose_store([256, 128, 64, 64, 64], chain, boxes=boxes) == ("dense", None)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[1, 0] = mask[2, 1] = mask[3, 2] = True  # an MLP's grid through from_mask
    m = seq2d.from_mask([256, 128, 64, 64], mask.repeat_interleave(torch.tensor([256, 128, 64, 64]), 0)
                        .repeat_interleave(torch.tensor([256, 128, 64, 64]), 1), store="auto", dtype=D)
    assert type(m.store).__name__ == "DenseStore"


def test_store_tiled_and_the_loop_mode():
    """STORES names the stores ("dense", "tiled") and "auto"; ``store="tiled"`` takes the tile by
    auto's rule whatever the density, and the per-block loop is the dense store's mode (``loop=``)."""
    from seq2d.errors import InvalidValue

    assert seq2d.available_stores() == ["auto", "dense", "tiled"]
    dense = torch.ones(4, 4, dtype=torch.bool)  # auto keeps it dense: every tile of its box stored
    dense[0] = False  # slot 0: the input
    m = seq2d.from_mask([32] * 4, dense, activations="tanh", seed=0, steps=2, store="tiled", dtype=D)
    ref = seq2d.from_mask([32] * 4, dense, activations="tanh", seed=0, steps=2, loop=True, dtype=D)
    assert (m.store.kind, m.store.tile, ref.store.kind, ref.loop, ref.store.loop) == ("tiled", 16, "dense", True, True)
    x = torch.randn(3, 32, dtype=D)
    torch.testing.assert_close(m(x), ref(x), rtol=0, atol=1e-12)
    assert "store='tiled'" in repr(m) and "loop=True" in repr(ref)
    ref.loop = False
    assert not ref.store.loop and "loop=True" not in repr(ref)
    with pytest.raises(InvalidValue, match=r"no tile size fits slots \[4, 3, 3\]"):
        Sequential2D([4, 3, 3], {(1, 0): LinearBlock(4, 3)}, store="tiled")
    with pytest.raises(InvalidValue, match=r"store='tiled' and loop=True; the per-block loop is a mode of the dense store"):
        seq2d.from_mask([32] * 4, dense, store="tiled", loop=True)
    with pytest.raises(InvalidValue, match=r"Sequential2D got store='loop'; it is now called store='dense', loop=True"):
        seq2d.from_mask([3, 4], store="loop")


def test_old_names_in_saved_files_load():
    """seq2d/renames.py OLD_NAMES, the one table of renamed words in saved files (its store words here):
    every entry is read (state-dict keys of a tiled model saved as ``engine.*``; a config's or
    spec's ``store`` value 'loop'), and undone for the config hash."""
    from seq2d.renames import OLD_NAMES
    from seq2d.renames import migrate_store_value, old_store_value

    assert set(OLD_NAMES) == {"state_dict", "store", "model", "mnist_model", "record", "hook"}
    m, _, _ = _two_block_model()
    m.to_blocksparse(16)
    for old, new in OLD_NAMES["state_dict"].items():
        saved = {(old + k[len(new):] if k.startswith(new) else k): v.clone() for k, v in m.state_dict().items()}
        assert any(k.startswith(old) for k in saved)
        fresh = copy.deepcopy(m)
        with torch.no_grad():
            fresh.matrix.data.zero_()
        fresh.load_state_dict(saved)
        for k, v in m.state_dict().items():
            assert torch.equal(fresh.state_dict()[k], v), k
    for old, new in OLD_NAMES["store"].items():
        assert migrate_store_value({"store": old, "seed": 1}, "spec") == {**new, "seed": 1}
        assert old_store_value({**new, "seed": 1}) == {"store": old, "seed": 1}
