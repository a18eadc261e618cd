"""seq2d.from_iterativenn / from_iterativenn_description on the documented examples of the
authors' library, rcpaffenroth/iterativennsimple (read at commit 52bb3be, docs/porting.md).

The peer draws from numpy's global RNG, which the converter does not reproduce draw for draw.
So each example is checked twice: the structure seq2d builds (which entries are trainable,
zero or fixed), and the forward pass of the seq2d model after copying in the weights of
a plain reference of the peer's semantics written below (from our reading of their
Sequential2D.py and MaskedLinear.py), never weights taken from seq2d itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import seq2d
from seq2d import from_iterativenn, from_iterativenn_description
from seq2d.errors import InvalidValue

pytestmark = pytest.mark.filterwarnings("ignore:this Sequential2D")


# ---------------------------------------------------------------------- reference of the peer
def ref_values(code, r, c, rng):
    """The peer's initializer on every entry of a (r, c) block (MaskedLinear._getInitializer)."""
    if isinstance(code, torch.Tensor):
        return code[:r, :c].double().numpy().copy()
    if code in (0, 1):
        return np.full((r, c), float(code))
    if code.startswith("C="):
        return np.full((r, c), float(code[2:]))
    mu_sigma = (0.0, 1.0) if code == "G" else None
    if code[0] == "G":
        mu, sigma = mu_sigma or map(float, code[2:].split(","))
        return rng.standard_normal((r, c)) * sigma + mu
    lo, hi = (-1.0, 1.0) if code == "U" else map(float, code[2:].split(","))
    return rng.random_sample((r, c)) * (hi - lo) + lo


def ref_block(block_type, init, r, c, rng):
    """The peer's MaskedLinear._getBlock: the initial values of one block."""
    vals = ref_values(init, r, c, rng)
    out = np.zeros((r, c))
    if block_type == 0:
        return out
    if block_type == "W":
        return vals
    if block_type == "D":
        for k in range(min(r, c)):
            out[k, k] = vals[k, k]
    elif block_type.startswith("Row="):
        for k in range(r):
            for _ in range(int(block_type[4:])):
                v = rng.randint(0, c)
                out[k, v] = vals[k, v]
    elif block_type.startswith("R="):
        keep = rng.random_sample((r, c)) < float(block_type[2:])
        out[keep] = vals[keep]
    elif block_type.startswith("S="):
        for _ in range(int(block_type[2:])):
            u, v = rng.randint(0, r), rng.randint(0, c)
            out[u, v] = vals[u, v]
    return out


def ref_mask(block, trainable):
    if trainable == "non-zero":
        return block != 0
    return np.full(block.shape, bool(trainable))


def ref_description(outs, ins, types, inits, trains, rng):
    """MaskedLinear.from_description: weight_0 and mask of the whole matrix, per block."""
    blocks = [[ref_block(types[a][b], inits[a][b], outs[a], ins[b], rng) for b in range(len(ins))] for a in range(len(outs))]
    masks = [[ref_mask(blocks[a][b], trains[a][b]) for b in range(len(ins))] for a in range(len(outs))]
    return blocks, masks


def ref_step_vector(ins, outs, fns, z):
    """The peer's Sequential2D.forward_vector: zeros, then every block added on its output slice."""
    out = torch.zeros(z.shape[0], sum(outs), dtype=z.dtype)
    for (i, j), f in fns.items():
        out[:, sum(outs[:j]):sum(outs[:j + 1])] += f(z[:, sum(ins[:i]):sum(ins[:i + 1])])
    return out


def ref_step_list(n_out, fns, xs):
    """The peer's Sequential2D.forward_list: None inputs are skipped, None + v = v."""
    out = [None] * n_out
    for (i, j), f in fns.items():
        if xs[i] is not None:
            out[j] = f(xs[i]) if out[j] is None else out[j] + f(xs[i])
    return out


def affine(w, b=None):
    w = torch.as_tensor(w, dtype=torch.float64)
    return lambda x: x @ w.T + (0 if b is None else b)


def effective(blk):
    """The weight a seq2d LinearBlock applies: frozen + weight * mask."""
    w = blk.weight.detach() if blk.mask is None else blk.weight.detach() * blk.mask
    return w if blk.frozen is None else w + blk.frozen


def put(blk, values, mask):
    """Copy the reference's values into a seq2d block, keeping seq2d's kind of block."""
    values = torch.as_tensor(values, dtype=blk.weight.dtype)
    with torch.no_grad():
        if blk.mask is not None and not bool(blk.mask.any()):  # a fixed block
            blk.frozen.copy_(values)
            return
        if blk.mask is not None:
            blk.mask = torch.as_tensor(mask)
        blk.weight.copy_(values)


# ---------------------------------------------------------------------- MaskedLinear.from_description
# tests/test_MaskedLinear.py::test_fromDescription of the peer: every code once
OUTS, INS = [5, 7, 9], [6, 8, 10]
TYPES = [[0, "W", "D"], ["R=0.5", "S=5", "Row=3"], ["S=2", "R=0.9", "Row=1"]]
TRAIN = [[0, 1, 0], [1, 0, 1], [1, 1, 1]]


def inits():
    g = torch.Generator().manual_seed(1)
    return [[0, torch.ones(5, 8), "C=0.3"], ["G", "G=0.2,0.7", "U"], ["U=-0.5,0.5", 1, torch.randn(9, 10, generator=g)]]


def test_the_peers_from_description_example_builds_the_same_structure():
    model = from_iterativenn_description(OUTS, INS, TYPES, inits(), TRAIN, dtype=torch.float64, seed=3)
    assert list(model.sizes) == INS + OUTS and list(model.inputs) == [0, 1, 2] and list(model.outputs) == [3, 4, 5] and model.steps == 1
    blk = {(a, b): model.block(3 + a, b) for a in range(3) for b in range(3)}
    assert blk[0, 0] is None  # block type 0: zero and fixed, nothing to compute
    assert blk[0, 1].mask is None and torch.equal(effective(blk[0, 1]), torch.ones(5, 8, dtype=torch.float64))
    fixed = effective(blk[0, 2])  # D, C=0.3, not trainable: a rectangular diagonal, fixed
    assert blk[0, 2].num_trainable() == 0 and torch.equal(fixed, 0.3 * torch.eye(5, 10, dtype=torch.float64))
    for a, b in ((1, 0), (1, 2), (2, 0), (2, 1)):  # trainable = 1: every entry trains, zeros included
        assert blk[a, b].mask is None, (a, b)
    w = effective(blk[1, 0])  # R=0.5 of 42 entries
    assert 0 < int((w != 0).sum()) < 42
    assert blk[1, 1].num_trainable() == 0 and 1 <= int((effective(blk[1, 1]) != 0).sum()) <= 5  # S=5, fixed
    nz = (effective(blk[1, 2]) != 0).sum(dim=1)  # Row=3: 1..3 entries per row, U(-1, 1)
    assert bool(((nz >= 1) & (nz <= 3)).all()) and float(effective(blk[1, 2]).abs().max()) <= 1
    assert 1 <= int((effective(blk[2, 0]) != 0).sum()) <= 2  # S=2
    assert set(effective(blk[2, 1]).unique().tolist()) <= {0.0, 1.0}  # R=0.9 of ones
    t = inits()[2][2]
    w = effective(blk[2, 2])  # Row=1 of a given tensor: one entry per row, the tensor's value there
    assert bool(((w != 0).sum(dim=1) == 1).all()) and torch.equal(w[w != 0], t.double()[w != 0])
    # the peer's count (number_of_trainable_parameters): count_nonzero(mask) + the bias
    assert model.num_parameters() == sum(blk[a, b].num_trainable() for a, b in blk if blk[a, b] is not None) + 21


def test_the_peers_from_description_example_computes_the_reference_function():
    rng = np.random.RandomState(0)
    values, masks = ref_description(OUTS, INS, TYPES, inits(), TRAIN, rng)
    bias = torch.as_tensor(rng.uniform(-1 / math.sqrt(24), 1 / math.sqrt(24), 21))
    model = from_iterativenn_description(OUTS, INS, TYPES, inits(), TRAIN, dtype=torch.float64)
    for a in range(3):
        for b in range(3):
            if model.block(3 + a, b) is not None:
                put(model.block(3 + a, b), values[a][b], masks[a][b])
    with torch.no_grad():
        for a in range(3):
            model.bias(3 + a).copy_(bias[sum(OUTS[:a]):sum(OUTS[:a + 1])])
    weight_0 = torch.as_tensor(np.block(values))  # the peer's bmatrix
    x = torch.randn(4, 24, dtype=torch.float64)
    torch.testing.assert_close(model(x), x @ weight_0.T + bias)
    # and the trainable entries are the reference's mask, plus the bias
    assert model.num_parameters() == int(np.block(masks).sum()) + 21


def test_the_trainable_entries_get_the_peers_gradient():
    # the peer trains U in W = weight_0 + U * mask (U = 0 at the start): d loss / d U is the
    # gradient of W on the mask and zero off it; seq2d's trainable entries must get the same
    rng = np.random.RandomState(1)
    values, masks = ref_description(OUTS, INS, TYPES, inits(), TRAIN, rng)
    model = from_iterativenn_description(OUTS, INS, TYPES, inits(), TRAIN, bias=False, dtype=torch.float64)
    for a in range(3):
        for b in range(3):
            if model.block(3 + a, b) is not None:
                put(model.block(3 + a, b), values[a][b], masks[a][b])
    weight_0, mask = torch.as_tensor(np.block(values)), torch.as_tensor(np.block(masks)).double()
    u = torch.zeros_like(weight_0, requires_grad=True)
    x = torch.randn(6, 24, dtype=torch.float64)
    (x @ (weight_0 + u * mask).T).pow(2).sum().backward()
    model(x).pow(2).sum().backward()
    for a in range(3):
        for b in range(3):
            blk = model.block(3 + a, b)
            want = u.grad[sum(OUTS[:a]):sum(OUTS[:a + 1]), sum(INS[:b]):sum(INS[:b + 1])]
            if blk is None or blk.num_trainable() == 0:
                assert not bool(want.any()), (a, b)  # the peer trains nothing there either
                continue
            got = blk.weight.grad if blk.mask is None else blk.weight.grad * blk.mask
            torch.testing.assert_close(got, want)


def test_a_converted_description_writes_down_as_a_spec():
    model = from_iterativenn_description([5, 7], [6, 8], [["W", "R=0.5"], ["S=3", "Row=2"]],
                                         [["G", "U"], ["C=2", "G"]], [[True, "non-zero"], [False, True]],
                                         dtype=torch.float64)
    twin = seq2d.from_spec(seq2d.to_spec(model, weights=True), dtype=torch.float64)
    x = torch.randn(3, 14, dtype=torch.float64)
    assert torch.equal(twin(x), model(x)) and twin.num_parameters() == model.num_parameters()


def test_a_single_block_description_takes_ints_as_the_peer_does():
    # notebooks/advanced/3-rcp-iterated-model-fish.ipynb: D, 1, trainable, no bias: the identity
    model = from_iterativenn_description(6, 6, "D", 1, True, bias=False)
    x = torch.randn(3, 6)
    assert torch.equal(model(x), x) and model.num_parameters() == 36
    # notebooks/advanced/6-rcp-Sequential2D-training-spectra.ipynb: R=0.25, G=0.0,0.1, trainable=True
    model = from_iterativenn_description(16, 8, "R=0.25", "G=0.0,0.1", True, bias=False, seed=5)
    w = effective(model.block(1, 0))
    assert model.num_parameters() == 128 and 0 < int((w != 0).sum()) < 128  # sparse start, all entries train


def test_non_zero_trains_exactly_the_nonzero_entries():
    model = from_iterativenn_description(10, 12, "R=0.3", "G", "non-zero", bias=False, seed=2)
    blk = model.block(1, 0)
    assert torch.equal(blk.mask, effective(blk) != 0) and model.num_parameters() == int((effective(blk) != 0).sum())
    fixed = from_iterativenn_description(10, 12, "W", "U=2,3", False, bias=False)
    assert fixed.block(1, 0).num_trainable() == 0 and float(effective(fixed.block(1, 0)).min()) >= 2


# ---------------------------------------------------------------------- Sequential2D.from_config
def factory_cfg():
    # the peer's tests/test_Sequential2D.py::test_sequential2D_factory2
    return {
        "in_features_list": [784, 200, 10],
        "out_features_list": [784, 140, 50, 20],
        "block_types": [
            ["MaskedLinear", None, None, None],
            ["MaskedLinear", "Linear", "Linear", None],
            ["Linear", "MaskedLinear.from_description", None, "Linear"],
        ],
        "block_kwargs": [
            [None, None, None, None],
            [None, None, None, None],
            [None, {"block_type": "S=15", "initialization_type": "G=0.2,0.7", "trainable": True, "bias": True}, None, None],
        ],
    }


def test_factory2_has_the_peers_trainable_count_and_computes_the_reference_function():
    cfg = factory_cfg()
    model = from_iterativenn(**cfg, dtype=torch.float64)
    ins, outs = cfg["in_features_list"], cfg["out_features_list"]
    assert list(model.sizes) == ins + outs and list(model.inputs) == [0, 1, 2] and list(model.outputs) == [3, 4, 5, 6]
    # input i -> output j is seq2d's F[3 + j][i]: the transpose
    assert model.block(3 + 1, 2) is not None and model.block(3 + 2, 2) is None and model.block(2, 3 + 1) is None
    # the peer's number_of_trainable_parameters: dense (Masked)Linear blocks, S=15 with trainable=True
    # (mask all ones), each with its bias
    used = [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 3)]
    assert model.num_parameters() == sum(ins[i] * outs[j] + outs[j] for i, j in used) == 821598
    sparse = model.block(3 + 1, 2)  # S=15 of G=0.2,0.7: at most 15 entries start nonzero
    assert sparse.mask is None and 1 <= int((effective(sparse) != 0).sum()) <= 15
    rng = np.random.RandomState(0)
    fns = {}
    for i, j in used:  # the reference's own weights, copied into seq2d
        w = rng.uniform(-1, 1, (outs[j], ins[i])) / math.sqrt(ins[i])
        b = torch.as_tensor(rng.uniform(-0.1, 0.1, outs[j]))
        if (i, j) == (2, 1):
            w = ref_block("S=15", "G=0.2,0.7", outs[j], ins[i], rng)
        fns[i, j] = affine(w, b)
        blk = model.block(3 + j, i)
        put(blk, w, None)
        with torch.no_grad():
            blk.bias.copy_(b)
    z = torch.randn(5, sum(ins), dtype=torch.float64)
    torch.testing.assert_close(model(z), ref_step_vector(ins, outs, fns, z))


def test_factory1_all_none_is_zero_with_no_parameters():
    # the peer's test_sequential2D_factory1: every block None, the output is 0, nothing trains
    cfg = factory_cfg()
    cfg["block_types"] = [[None] * 4 for _ in range(3)]
    with pytest.warns(UserWarning, match="no trainable parameter"):
        model = from_iterativenn(**cfg)
    z = torch.randn(6, 994)
    assert torch.equal(model(z), torch.zeros(6, 994)) and model.num_parameters() == 0


def test_identity_blocks_preserve_the_input():
    # the peer's test_identity_block
    model = from_iterativenn([5, 10], [5, 10], [["Identity", None], [None, "Identity"]])
    z = torch.randn(8, 15)
    assert torch.equal(model(z, steps=1), z) and torch.equal(model(z, steps=4), z)


def test_module_blocks_with_partial_none_inputs():
    # the peer's test_forward_list_with_partial_none: blocks as modules, some None
    torch.manual_seed(0)
    lin = {(0, 0): nn.Linear(2, 5), (0, 1): nn.Linear(2, 6), (1, 1): nn.Linear(3, 6), (2, 0): nn.Linear(4, 5)}
    blocks = [[lin[0, 0], lin[0, 1]], [None, lin[1, 1]], [lin[2, 0], None]]
    model = from_iterativenn([2, 3, 4], [5, 6], blocks)
    xs = [torch.randn(8, 2), torch.randn(8, 3), torch.randn(8, 4)]
    out = model(torch.cat(xs, dim=1))
    expected = [lin[0, 0](xs[0]) + lin[2, 0](xs[2]), lin[0, 1](xs[0]) + lin[1, 1](xs[1])]
    torch.testing.assert_close(out, torch.cat(expected, dim=1))
    torch.testing.assert_close(out, torch.cat(ref_step_list(2, lin, xs), dim=1))


def test_notebook6_complex_config_is_one_map():
    # notebooks/6-rcp-Sequential-vs-Sequential2D.ipynb, Part 3: unequal lists, 'Linear' blocks
    cfg = {"in_features_list": [50, 100, 200, 150], "out_features_list": [100, 200, 150, 10],
           "block_types": [["Linear", "Linear", None, None], [None, "Linear", "Linear", "Linear"],
                           [None, None, "Linear", "Linear"], [None, None, None, "Linear"]]}
    model = from_iterativenn(**cfg, dtype=torch.float64, seed=1)
    ins, outs = cfg["in_features_list"], cfg["out_features_list"]
    fns = {}
    gen = torch.Generator().manual_seed(2)
    for i in range(4):
        for j in range(4):
            if cfg["block_types"][i][j] is None:
                assert model.block(4 + j, i) is None
                continue
            w = torch.randn(outs[j], ins[i], generator=gen, dtype=torch.float64) / ins[i] ** 0.5
            b = torch.randn(outs[j], generator=gen, dtype=torch.float64)
            fns[i, j] = affine(w, b)
            put(model.block(4 + j, i), w, None)
            with torch.no_grad():
                model.block(4 + j, i).bias.copy_(b)
    z = torch.randn(16, 500, dtype=torch.float64)
    out = model(z)
    assert out.shape == (16, 460)
    torch.testing.assert_close(out, ref_step_vector(ins, outs, fns, z))


# ---------------------------------------------------------------------- iteration semantics
def chain():
    """notebooks/6-rcp-Sequential-vs-Sequential2D.ipynb, Part 1 (smaller): an MLP as a 4-slot chain,
    the ReLU inside the blocks (Sequential1D(ReLU, f2)), iterated 3 times from [x, None, None, None]."""
    torch.manual_seed(0)
    f1, f2, f3 = nn.Linear(12, 8), nn.Linear(8, 8), nn.Linear(8, 3)
    mlp = nn.Sequential(f1, nn.ReLU(), f2, nn.ReLU(), f3)
    b = {(0, 1): nn.Sequential(f1), (1, 2): nn.Sequential(nn.ReLU(), f2), (2, 3): nn.Sequential(nn.ReLU(), f3)}
    blocks = [[b.get((i, j)) for j in range(4)] for i in range(4)]
    return mlp, b, blocks


@pytest.mark.parametrize("unfed", ["clear", "hold"])
def test_the_chain_equals_the_mlp_after_its_depth(unfed):
    mlp, fns, blocks = chain()
    sizes = [12, 8, 8, 3]
    model = from_iterativenn(sizes, sizes, blocks, unfed=unfed, inputs=[0], outputs=[3], steps=3)
    x = torch.randn(5, 12)
    with torch.no_grad():
        ref = [x, None, None, None]
        for _ in range(3):
            ref = ref_step_list(4, fns, ref)
        torch.testing.assert_close(ref[3], mlp(x))
        torch.testing.assert_close(model(x), mlp(x))
        torch.testing.assert_close(model([x, None, None, None], steps=3)[3], mlp(x))
        # docs/porting.md: the ReLUs moved onto slots 1 and 2, the blocks linear
        torch.testing.assert_close(seq2d.from_torch(mlp)(x), ref[3])
    assert (model.depth is None) == (unfed == "clear")  # clear: a zero self-block on slot 0


def test_clear_is_the_peers_map_for_any_number_of_steps_and_hold_keeps_the_input():
    mlp, fns, blocks = chain()
    sizes = [12, 8, 8, 3]
    clear = from_iterativenn(sizes, sizes, blocks)
    hold = from_iterativenn(sizes, sizes, blocks, unfed="hold")
    z = torch.randn(5, 31)
    with torch.no_grad():
        ref = z
        for k in range(1, 6):
            ref = ref_step_vector(sizes, sizes, fns, ref)  # the peer's map(z), iterated
            torch.testing.assert_close(clear(z, steps=k), ref)
        # seq2d's held input slot keeps x: after 3 steps the output is the MLP's, and stays there
        torch.testing.assert_close(hold(z, steps=5)[:, 28:], mlp(z[:, :12]))
        assert torch.equal(hold(z, steps=5)[:, :12], z[:, :12]) and torch.equal(clear(z, steps=1)[:, :12], torch.zeros(5, 12))


def test_notebook5_transposed_layout_with_an_identity_keeps_the_input():
    # notebooks/5-rcp-MLP.ipynb: blocks written [output][input], then transposed for Sequential2D;
    # I keeps x, so every slot is fed and seq2d's step is the peer's
    torch.manual_seed(0)
    f1 = nn.Sequential(nn.Linear(6, 4), nn.ReLU())
    f2 = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    f3 = nn.Linear(4, 2)
    rows = [["Identity", None, None, None], [f1, None, None, None], [None, f2, None, None], [None, None, f3, None]]
    blocks = [[rows[j][i] for j in range(4)] for i in range(4)]  # the notebook's transpose_blocks
    sizes = [6, 4, 4, 2]
    model = from_iterativenn(sizes, sizes, blocks)
    assert model.block(1, 0) is f1 and model.block(0, 0) is not None  # seq2d's F is the notebook's rows table
    fns = {(0, 0): lambda x: x, (0, 1): f1, (1, 2): f2, (2, 3): f3}
    z = torch.cat([torch.randn(7, 6), torch.zeros(7, 8), torch.rand(7, 2)], dim=1)
    with torch.no_grad():
        ref = z
        for _ in range(3):
            ref = ref_step_vector(sizes, sizes, fns, ref)
        torch.testing.assert_close(model(z, steps=3), ref)


# ---------------------------------------------------------------------- single blocks, errors, RNG
def test_sparse_linear_from_single_block_sums_repeated_draws_and_trains_the_stored_entries():
    kw = {"block_type": "S=40", "initialization_type": "C=1", "bias": True}
    model = from_iterativenn([3], [4], [["SparseLinear.from_singleBlock"]], [[kw]], seed=0)
    blk = model.block(1, 0)  # unequal lists: slot 0 in, slot 1 out
    w = effective(blk)
    # 40 draws of 12 entries: repeats, whose values add up (coalesced COO); the stored entries train
    assert float(w.sum()) == 40 and float(w.max()) > 1 and torch.equal(blk.mask, w != 0)
    assert torch.equal(blk.bias.detach(), torch.zeros(4))


def test_the_global_rngs_are_untouched_and_the_seed_decides():
    torch.manual_seed(7)
    np.random.seed(7)
    before = (torch.rand(1), np.random.rand())
    torch.manual_seed(7)
    np.random.seed(7)
    a = from_iterativenn(**factory_cfg(), seed=4)
    assert (torch.rand(1), np.random.rand()) == before
    b = from_iterativenn(**factory_cfg(), seed=4)
    z = torch.randn(2, 994)
    assert torch.equal(a(z), b(z))


@pytest.mark.parametrize("call, words", [
    (lambda: from_iterativenn([2], [2], [["Conv"]]), ["'Conv'", "block_types[0][0]", "'MaskedLinear.from_description'"]),
    (lambda: from_iterativenn_description([2, 3], [2], [["W"], ["X=3"]], [["G"], ["G"]], [[True], [True]]),
     ["'X=3'", "block_types[1][0]", "R=p", "Row=n"]),
    (lambda: from_iterativenn_description(2, 2, "W", "N=0,1", True), ["'N=0,1'", "block_types[0][0]", "G=mu,sigma", "C=v"]),
    (lambda: from_iterativenn_description(2, 2, "W", "G", "yes"), ["'yes'", "block_types[0][0]", "'non-zero'"]),
    (lambda: from_iterativenn_description(2, 2, 0, "G", False), ["block type 0", "initialization 0"]),
    (lambda: from_iterativenn([2], [2], [["MaskedLinear.from_description"]], [[{"block_type": "W"}]]),
     ["block_kwargs[0][0]", "'initialization_type'"]),
    (lambda: from_iterativenn([2], [3], [["Identity"]]), ["'Identity'", "block_types[0][0]", "equal sizes"]),
])
def test_unknown_codes_raise_a_typed_error_naming_the_code_the_position_and_the_valid_codes(call, words):
    with pytest.raises(InvalidValue) as e:
        call()
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_exported_from_the_package():
    assert seq2d.from_iterativenn is from_iterativenn and "from_iterativenn_description" in seq2d.__all__


def test_the_python_in_docs_porting_runs_as_written():
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "porting.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3 and "52bb3bee534cd29737cf0f8683b36c490faf6f60" in text
    for k, code in enumerate(blocks):
        exec(compile(code, f"docs/porting.md python block {k}", "exec"), {})
