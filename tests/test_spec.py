"""seq2d.spec: from_spec / to_spec / load_spec / save_spec.

Built models are checked against hand-built Sequential2Ds and plain torch.nn (outputs),
trainable counts are checked exactly per block kind, round trips are checked on
structure and (with weights) bitwise, and every rejected input names its place.
"""

import copy
import json
import math
import pathlib
import re
import tomllib

import pytest
import torch
from torch import nn

from seq2d.activations import activation_name
from seq2d.blocks import Identity, LinearBlock
from seq2d.core import Sequential2D
from seq2d.spec import from_spec, load_spec, save_spec, to_spec
import seq2d.spec as spec_module
from seq2d.testing import ulps


# ---------------------------------------------------------------------- helpers
def mlp_spec(**top):
    """4 -> 8 (relu, bias) -> 3 (bias), dense."""
    spec = {
        "slots": [
            {"size": 4, "role": "input"},
            {"size": 8, "activation": "relu", "bias": True, "role": "hidden"},
            {"size": 3, "bias": True, "role": "output"},
        ],
        "blocks": [
            {"row": 1, "col": 0, "kind": "dense"},
            {"row": 2, "col": 1},  # kind defaults to dense
        ],
    }
    spec.update(top)
    return spec


MLP_TOML = """
name = "mlp"
[[slots]]
size = 4
role = "input"

[[slots]]
size = 8
activation = "relu"
bias = true
role = "hidden"

[[slots]]
size = 3
bias = true
role = "output"

[[blocks]]
row = 1
col = 0
kind = "dense"

[[blocks]]
row = 2
col = 1
"""


def one_block(kind_keys: dict, rows: int = 6, cols: int = 10, bias: bool = False, **top) -> dict:
    """Slot 0 (size cols) -> slot 1 (size rows) through one block F[1][0]."""
    return {
        "slots": [{"size": cols}, {"size": rows, "bias": bias}],
        "blocks": [{"row": 1, "col": 0, **kind_keys}],
        **top,
    }


def structure(m: Sequential2D) -> dict:
    """Everything to_spec promises to keep without weights."""
    ties: dict[int, int] = {}
    blocks = []
    for i, j, kind, blk in m.positions():
        if kind == "linear":
            tie = ties.setdefault(id(blk), len(ties))
            frozen = None if blk.frozen is None else (blk.frozen != 0).tolist()
            blocks.append((i, j, kind, tie, blk.trainable_mask().tolist(), frozen))
        else:
            blocks.append((i, j, kind))
    return {
        "sizes": m.sizes,
        "inputs": m.inputs,
        "outputs": m.outputs,
        "steps": m.steps,
        "store": m._store_arg,
        "loop": m.loop,
        "acts": [activation_name(a) for a in m.acts],
        "bias": [m.bias(i) is not None for i in range(m.n)],
        "blocks": blocks,
        "num_parameters": m.num_parameters(),
    }


def state_equal(a: nn.Module, b: nn.Module) -> bool:
    """Bitwise: the values are copied (or drawn by the same seeded code), not computed two ways."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(
        (sa[k] is None and sb[k] is None) or (sa[k] is not None and sb[k] is not None and torch.equal(sa[k], sb[k]))
        for k in sa
    )


def rich_model(dtype=torch.float32) -> Sequential2D:
    """Masks, a fully frozen and a partly frozen block, a zero block, a tie (cycle),
    identity, diagonal, biases, every kind of activation, non-default inputs/outputs."""
    g = torch.Generator().manual_seed(123)
    kw = {"dtype": dtype}
    tied = LinearBlock(6, 6, mask=torch.rand(6, 6, generator=g) < 0.5, **kw)
    part_mask = torch.rand(4, 6, generator=g) < 0.5
    part_frozen = torch.where(part_mask, 0.0, torch.randn(4, 6, generator=g, dtype=dtype))
    part_frozen[0, :] = torch.where(part_mask[0], 0.0, 0.0)  # some frozen entries exactly zero
    blocks = {
        (1, 0): LinearBlock(5, 6, **kw),
        (2, 1): tied,
        (1, 2): tied,
        (2, 2): LinearBlock(6, 6, mask=torch.eye(6, dtype=torch.bool), **kw),
        (3, 2): LinearBlock(6, 4, mask=part_mask, frozen=part_frozen, **kw),
        (3, 0): LinearBlock(5, 4, mask=torch.zeros(4, 5, dtype=torch.bool), frozen=torch.randn(4, 5, generator=g, dtype=dtype), **kw),
        (4, 3): "identity",
        (4, 0): LinearBlock(5, 4, mask=torch.zeros(4, 5, dtype=torch.bool), **kw),  # a zero block
    }
    m = Sequential2D(
        [5, 6, 6, 4, 4],
        blocks,
        bias=[False, True, False, True, True],
        activations=[None, "gelu_tanh", "layernorm", "sigmoid", "tanh"],
        inputs=[0],
        outputs=[4, 3],
        steps=3,
        dtype=dtype,
    )
    with torch.no_grad():  # values no constructor default would give
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=dtype) * 0.1)
        for _, _, kind, blk in m.positions():
            if kind == "linear":
                blk.apply_mask_()
    return m


def doc_example_spec() -> dict:
    """The TOML example of docs/spec.md (the user guide of seq2d.spec)."""
    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "spec.md").read_text(encoding="utf-8")
    (toml,) = re.findall(r"^```toml\n(.*?)^```$", text, re.S | re.M)
    return tomllib.loads(toml)


# ---------------------------------------------------------------------- building
@pytest.mark.parametrize("source", ["dict", "toml_path", "toml_str"])
def test_mlp_matches_hand_built(source, tmp_path):
    if source == "dict":
        model = from_spec(mlp_spec())
    else:
        path = tmp_path / "mlp.toml"
        path.write_text(MLP_TOML)
        model = from_spec(path if source == "toml_path" else str(path))
    assert state_equal(model, from_spec(mlp_spec()))  # TOML and dict give the same model

    hand = Sequential2D(
        [4, 8, 3],
        {(1, 0): LinearBlock(4, 8), (2, 1): LinearBlock(8, 3)},
        bias=True,
        activations=[None, "relu", None],
    )
    hand.load_state_dict(model.state_dict())  # strict: same parameters and buffers
    assert (hand.sizes, hand.inputs, hand.outputs, hand.steps) == (model.sizes, model.inputs, model.outputs, model.steps)
    assert [type(a) for a in hand.acts] == [type(a) for a in model.acts]

    ref = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    with torch.no_grad():
        ref[0].weight.copy_(model.block(1, 0).weight)
        ref[0].bias.copy_(model.bias(1))
        ref[2].weight.copy_(model.block(2, 1).weight)
        ref[2].bias.copy_(model.bias(2))
    x = torch.randn(7, 4)
    torch.testing.assert_close(model(x), hand(x), **ulps(torch.float32))  # two models built apart: a few ulps
    torch.testing.assert_close(model(x), ref(x), rtol=1e-6, atol=1e-6)
    assert model.num_parameters() == 4 * 8 + 8 + 8 * 3 + 3


def test_doc_example_builds():
    spec = doc_example_spec()
    model = from_spec(spec)
    assert model.num_parameters() == 115  # the count stated in the docstring
    assert model.block(2, 1) is model.block(1, 2)
    assert isinstance(model.block(2, 0), Identity)
    assert model.steps == 3 and model.inputs == (0,) and model.outputs == (3,)
    assert model(torch.randn(2, 16)).shape == (2, 4)


# expected trainable count of the block F[1][0] (rows x cols); biases added in the test
KIND_CASES = [
    ("dense", {"kind": "dense"}, (6, 10), 60),
    ("diagonal", {"kind": "diagonal"}, (6, 6), 6),
    ("identity", {"kind": "identity"}, (6, 6), 0),
    ("random", {"kind": "random", "density": 0.25}, (6, 10), 15),
    ("random_round", {"kind": "random", "density": 0.33}, (6, 10), round(0.33 * 60)),
    ("random_full", {"kind": "random", "density": 1.0}, (6, 10), 60),
    ("exact", {"kind": "exact", "n": 7}, (6, 10), 7),
    ("exact_zero", {"kind": "exact", "n": 0}, (6, 10), 0),
    ("per_row", {"kind": "per_row", "n": 3}, (6, 10), 18),
    ("mask", {"kind": "mask", "mask": [[1, 0, True], [0, 0, False]]}, (2, 3), 2),
    ("indices", {"kind": "mask", "indices": [[0, 0], [1, 2], [3, 1]]}, (4, 3), 3),
]


@pytest.mark.parametrize("name,keys,shape,expected", KIND_CASES, ids=[c[0] for c in KIND_CASES])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_trainable_count_is_exact(name, keys, shape, expected, bias):
    rows, cols = shape
    for seed in (0, 1, 2):
        model = from_spec(one_block(keys, rows, cols, bias=bias, seed=seed))
        assert model.num_parameters() == expected + (rows if bias else 0)
        blk = model.block(1, 0)
        if isinstance(blk, LinearBlock):
            assert int(blk.trainable_mask().sum()) == expected
            # entries off the pattern are exactly zero; entries on it drawn from a continuous init
            w = blk.effective_weight().detach()
            assert torch.equal(w != 0, blk.trainable_mask())


def test_mask_and_indices_place_exactly():
    m = from_spec(one_block({"kind": "mask", "indices": [[0, 2], [2, 1]]}, 3, 3))
    assert m.block(1, 0).trainable_mask().tolist() == [[False, False, True], [False, False, False], [False, True, False]]
    m = from_spec(one_block({"kind": "mask", "mask": [[0, 1], [True, False]]}, 2, 2))
    assert m.block(1, 0).trainable_mask().tolist() == [[False, True], [True, False]]
    m = from_spec(one_block({"kind": "diagonal"}, 4, 4))
    assert torch.equal(m.block(1, 0).trainable_mask(), torch.eye(4, dtype=torch.bool))


@pytest.mark.parametrize("n", [0, 1, 4, 9])
def test_per_row_gives_n_in_every_row(n):
    for seed in range(3):
        mask = from_spec(one_block({"kind": "per_row", "n": n}, 12, 9, seed=seed)).block(1, 0).trainable_mask()
        assert mask.sum(dim=1).tolist() == [n] * 12
    if 0 < n < 9:  # rows are drawn independently: not all the same
        assert len({tuple(r) for r in mask.tolist()}) > 1


def test_random_is_uniform_over_positions():
    # 400 models x 3 entries of 4 x 5 = 20 positions: each position should be hit ~60 times
    hits = torch.zeros(4, 5)
    for seed in range(400):
        hits += from_spec(one_block({"kind": "exact", "n": 3}, 4, 5, seed=seed)).block(1, 0).trainable_mask()
    assert hits.sum() == 1200
    assert hits.min() > 30 and hits.max() < 95


def test_frozen_block_is_fixed_but_used():
    spec = one_block({"kind": "exact", "n": 5, "trainable": False, "init": {"kind": "normal", "std": 1.0}}, 6, 10)
    model = from_spec(spec)
    blk = model.block(1, 0)
    assert model.num_parameters() == 0
    assert blk.num_trainable() == 0
    assert int((blk.frozen != 0).sum()) == 5  # the pattern holds the fixed values
    x = torch.randn(3, 10)
    y = model(x)
    assert y.abs().sum() > 0
    torch.testing.assert_close(y, x @ blk.frozen.T)
    y.pow(2).sum().backward()
    assert not blk.frozen.requires_grad
    assert blk.grad is None or torch.count_nonzero(blk.grad) == 0


def test_partly_frozen_block_from_spec():
    frozen = [[0.0, 0.0, 2.0], [0.5, 0.0, 0.0]]
    spec = one_block({"kind": "mask", "indices": [[0, 0], [1, 1]], "frozen": frozen}, 2, 3)
    model = from_spec(spec)
    blk = model.block(1, 0)
    assert model.num_parameters() == 2
    assert blk.frozen.tolist() == frozen
    x = torch.randn(4, 3)
    model(x).sum().backward()
    assert torch.equal(blk.grad != 0, blk.trainable_mask())


def test_given_weights_are_loaded_exactly():
    w = [[0.1, 0.0], [0.0, -1e-30]]
    spec = one_block({"kind": "diagonal", "weight": w}, 2, 2)
    for dtype in (torch.float32, torch.float64):
        blk = from_spec(spec, dtype=dtype).block(1, 0)
        assert blk.weight.dtype == dtype
        assert torch.equal(blk.weight, torch.tensor(w, dtype=torch.float64).to(dtype))  # copied through: bitwise
    spec = {
        "slots": [{"size": 2}, {"size": 3, "bias": True, "bias_value": [1.0, -2.0, 0.25]}],
        "blocks": [{"row": 1, "col": 0, "kind": "exact", "n": 6, "trainable": False, "frozen": [[1.0, 2.0]] * 3}],
    }
    model = from_spec(spec)
    assert model.bias(1).tolist() == [1.0, -2.0, 0.25]
    assert model.block(1, 0).frozen.tolist() == [[1.0, 2.0]] * 3


# ---------------------------------------------------------------------- init
def test_init_constant_is_exact():
    blk = from_spec(one_block({"kind": "random", "density": 0.5, "init": {"kind": "constant", "value": 0.5}}, 8, 8)).block(1, 0)
    w = blk.effective_weight().detach()
    mask = blk.trainable_mask()
    assert torch.all(w[mask] == 0.5) and torch.all(w[~mask] == 0)
    frozen = from_spec(one_block({"kind": "dense", "trainable": False, "init": {"kind": "constant", "value": -3}}, 2, 2)).block(1, 0)
    assert frozen.frozen.tolist() == [[-3.0, -3.0], [-3.0, -3.0]]


def test_init_normal_statistics():
    w = from_spec(one_block({"init": {"kind": "normal", "mean": 0.5, "std": 0.01}}, 200, 200)).block(1, 0).weight.detach()
    # 40000 samples: the sample mean is within 5 standard errors, the std within 3%
    assert abs(w.mean().item() - 0.5) < 5 * 0.01 / 200
    assert abs(w.std().item() - 0.01) < 0.0003
    w0 = from_spec(one_block({"init": {"kind": "normal", "std": 2.0}}, 100, 100)).block(1, 0).weight.detach()
    assert abs(w0.mean().item()) < 5 * 2.0 / 100  # mean defaults to 0


def test_init_uniform_and_default_bounds():
    w = from_spec(one_block({"init": {"kind": "uniform", "a": -0.1, "b": 0.3}}, 100, 100)).block(1, 0).weight.detach()
    assert w.min() >= -0.1 and w.max() <= 0.3
    assert w.min() < -0.09 and w.max() > 0.29  # fills the range
    assert abs(w.mean().item() - 0.1) < 0.01
    for init in ("default", {"kind": "default"}):
        w = from_spec(one_block({"init": init}, 50, 64)).block(1, 0).weight.detach()
        bound = 1 / math.sqrt(64)
        assert w.abs().max() <= bound and w.abs().max() > 0.95 * bound


def test_default_bias_init_bound():
    model = from_spec(one_block({}, 100, 25, bias=True))
    b = model.bias(1).detach()
    assert b.abs().max() <= 1 / math.sqrt(25) and b.abs().max() > 0.8 / math.sqrt(25)


# ---------------------------------------------------------------------- seeds
def seeded_spec(seed):
    return {
        "seed": seed,
        "slots": [{"size": 10}, {"size": 8, "bias": True}, {"size": 6}],
        "blocks": [
            {"row": 1, "col": 0, "kind": "random", "density": 0.3},
            {"row": 2, "col": 1, "kind": "per_row", "n": 2, "init": {"kind": "normal", "std": 0.1}},
            {"row": 2, "col": 0, "kind": "exact", "n": 4, "trainable": False},
        ],
    }


def test_same_seed_same_model_different_seed_different_masks():
    a, b = from_spec(seeded_spec(7)), from_spec(seeded_spec(7))
    assert state_equal(a, b)
    c = from_spec(seeded_spec(8))
    for pos in [(1, 0), (2, 1)]:
        assert not torch.equal(a.block(*pos).mask, c.block(*pos).mask)
    assert not torch.equal(a.block(2, 0).frozen != 0, c.block(2, 0).frozen != 0)
    assert from_spec(mlp_spec()).num_parameters() == from_spec(mlp_spec(seed=3)).num_parameters()


def test_building_leaves_global_rng_alone():
    before = torch.get_rng_state()
    from_spec(seeded_spec(1))
    assert torch.equal(before, torch.get_rng_state())


def test_dtype_values_drawn_in_float64():
    m32 = from_spec(seeded_spec(5), dtype=torch.float32)
    m64 = from_spec(seeded_spec(5), dtype=torch.float64)
    for (k, v32), v64 in zip(m32.state_dict().items(), m64.state_dict().values()):
        assert v32.dtype == (torch.bool if v64.dtype == torch.bool else torch.float32), k
        assert torch.equal(v32, v64.to(v32.dtype)), k  # the same float64 draws, one rounding: bitwise


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_gives_same_values():
    cpu = from_spec(seeded_spec(2))
    gpu = from_spec(seeded_spec(2), device="cuda")
    assert all(t.device.type == "cuda" for t in gpu.state_dict().values())
    assert state_equal(cpu, gpu.cpu())


# ---------------------------------------------------------------------- ties
def test_tie_shares_one_block():
    spec = {
        "slots": [{"size": 5}, {"size": 5, "activation": "tanh"}, {"size": 5, "activation": "tanh"}],
        "blocks": [
            {"row": 1, "col": 0, "kind": "random", "density": 0.4, "tie": "w"},
            {"row": 2, "col": 1, "tie": "w"},
            {"row": 2, "col": 0, "tie": "w", "kind": "random", "density": 0.4},  # repeating is allowed
        ],
    }
    model = from_spec(spec)
    assert model.block(1, 0) is model.block(2, 1) is model.block(2, 0)
    assert model.num_parameters() == 10  # round(0.4 * 25), counted once
    assert "w0" in model.grid()
    model(torch.randn(2, 5)).sum().backward()
    assert model.block(1, 0).grad is not None


def test_tie_does_not_shift_later_random_draws():
    base = seeded_spec(3)
    tied = copy.deepcopy(base)
    tied["slots"].append({"size": 8})
    tied["blocks"].insert(1, {"row": 3, "col": 0, "tie": "t"})
    tied["blocks"][0]["tie"] = "t"
    a, b = from_spec(base), from_spec(tied)
    for pos in [(1, 0), (2, 1), (2, 0)]:
        assert torch.equal(a.block(*pos).effective_weight(), b.block(*pos).effective_weight())  # same seeded draws


# ---------------------------------------------------------------------- round trips
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_round_trip_structure(dtype):
    m = rich_model(dtype)
    spec = to_spec(m)
    json.dumps(spec, allow_nan=False)  # plain data
    m2 = from_spec(spec, dtype=dtype)
    assert structure(m2) == structure(m)
    assert to_spec(m2) == spec  # idempotent
    assert m2.block(2, 1) is m2.block(1, 2)
    assert isinstance(m2.block(4, 3), Identity)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_round_trip_weights_bitwise(dtype):
    m = rich_model(dtype)
    spec = to_spec(m, weights=True)
    m2 = from_spec(spec, dtype=dtype)
    assert state_equal(m, m2)
    assert structure(m2) == structure(m)
    x = torch.randn(9, 5, dtype=dtype)
    torch.testing.assert_close(m(x), m2(x), **ulps(dtype))  # the weights are bitwise; two models built apart
    # and the spec of the copy is the same spec
    assert to_spec(m2, weights=True) == spec


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_round_trip_through_file(tmp_path, suffix):
    m = rich_model()
    path = tmp_path / f"model{suffix}"
    save_spec(to_spec(m, weights=True), path)
    loaded = load_spec(path)
    assert loaded == to_spec(m, weights=True)
    for source in (path, str(path)):
        m2 = from_spec(source)
        x = torch.randn(3, 5)
        torch.testing.assert_close(m(x), m2(x), **ulps(torch.float32))  # two models built apart: a few ulps
    if suffix == ".toml":
        text = path.read_text()
        assert text.count("[[blocks]]") == 8 and text.count("[[slots]]") == 5
        # a 2-D list is written one row per line: the 4 x 6 frozen block takes 6 lines
        assert re.search(r"frozen = \[\n(    \[[^\n]*\],\n){4}\]\n", text)


def test_toml_keeps_special_floats(tmp_path):
    weight = [[float("inf"), -0.0], [1e-300, -1.5e300]]
    spec = one_block({"weight": weight}, 2, 2, bias=True)
    spec["slots"][1]["bias_value"] = [float("-inf"), 5e-324]
    path = tmp_path / "special.toml"
    save_spec(spec, path)
    assert load_spec(path) == spec
    m = from_spec(path, dtype=torch.float64)
    assert torch.equal(m.block(1, 0).weight, torch.tensor(weight, dtype=torch.float64))  # copied through: bitwise
    assert torch.equal(torch.signbit(m.block(1, 0).weight), torch.tensor([[False, True], [False, True]]))
    assert m.bias(1).tolist() == [float("-inf"), 5e-324]


def test_round_trip_of_spec_built_model_and_toml_text(tmp_path):
    model = from_spec(doc_example_spec())
    path = tmp_path / "doc.toml"
    save_spec(to_spec(model), path)
    again = from_spec(path)
    assert structure(again) == structure(model)


def test_to_spec_keeps_role_free_lists_and_store():
    m = Sequential2D([3, 3, 3], {(1, 0): "identity", (2, 1): LinearBlock(3, 3), (0, 2): LinearBlock(3, 3)},
                     inputs=[0], outputs=[0, 2], steps=2, store="dense", loop=True)
    spec = to_spec(m)
    assert spec["inputs"] == [0] and spec["outputs"] == [0, 2] and spec["loop"] is True and "store" not in spec
    assert all("role" not in s for s in spec["slots"])
    assert structure(from_spec(spec)) == structure(m)
    acyclic = Sequential2D([2, 2], {(1, 0): LinearBlock(2, 2)})
    spec = to_spec(acyclic)
    assert [s["role"] for s in spec["slots"]] == ["input", "output"] and spec["steps"] == 1


def test_spec_file_with_the_old_backend_key_loads(tmp_path):
    """A spec file written before ``backend`` became ``store`` loads, the old key read as the new one,
    and its old value 'loop' as the dense store's loop mode (seq2d/renames.py OLD_NAMES)."""
    path = tmp_path / "old.toml"
    path.write_text('backend = "loop"\nslots = [{size = 3}, {size = 2}]\nblocks = [{row = 1, col = 0, kind = "dense"}]\n')
    m = from_spec(path)
    assert m.loop and m.store.kind == "dense" and to_spec(m)["loop"] is True and "backend" not in to_spec(m)
    path.write_text('store = "loop"\nslots = [{size = 3}, {size = 2}]\nblocks = [{row = 1, col = 0, kind = "dense"}]\n')
    assert from_spec(path).loop


def test_to_spec_rejects_module_blocks_and_unnamed_activations():
    m = Sequential2D([3, 4], {(1, 0): nn.Linear(3, 4)})
    with pytest.raises(TypeError, match=r"F\[1\]\[0\] is a Linear module"):
        to_spec(m)
    m = Sequential2D([3, 3], {(1, 0): "identity"}, activations=[None, nn.Softplus()])
    with pytest.raises(TypeError, match=r"slot 1 has activation Softplus"):
        to_spec(m)
    shared = nn.Parameter(torch.zeros(3))
    m = Sequential2D([3, 3, 3], {(1, 0): "identity", (2, 0): "identity"}, bias=[False, shared, shared])
    with pytest.raises(ValueError, match=r"slots 1 and 2 share one bias"):
        to_spec(m)
    with pytest.raises(TypeError, match=r"expected a Sequential2D"):
        to_spec(nn.Linear(2, 2))


# ---------------------------------------------------------------------- errors
def _set(path, value):
    """A mutation of mlp_spec(): set spec[path...] = value (DELETE removes the key)."""

    def f(spec):
        d = spec
        for k in path[:-1]:
            d = d[k]
        if value is DELETE:
            del d[path[-1]]
        else:
            d[path[-1]] = value
        return spec

    return f


DELETE = object()
B0 = ("blocks", 0)

ERROR_CASES = [
    # unknown keys: name the key, the place and the valid keys
    ("top_key", _set(("slot",), []), ValueError, r"spec: unknown key 'slot' \(did you mean 'slots'\?\)\. Valid keys: 'slots'"),
    ("slot_key", _set(("slots", 1, "sise"), 3), ValueError, r"slots\[1\]: unknown key 'sise'.*Valid keys: 'size'"),
    ("block_key", _set((*B0, "densty"), 0.5), ValueError, r"blocks\[0\]: unknown key 'densty'.*Valid keys: 'row'"),
    ("init_key", _set((*B0, "init"), {"kind": "normal", "std": 1.0, "sd": 1.0}), ValueError, r"blocks\[0\]\.init.*unknown key 'sd'.*'mean', 'std'"),
    ("key_of_other_kind", _set((*B0, "density"), 0.5), ValueError, r"blocks\[0\]: key 'density' does not apply to kind 'dense' \(it belongs to kind 'random'\)"),
    ("identity_takes_no_init", lambda s: _set((*B0, "init"), "default")(_set((*B0, "kind"), "identity")(_set(("slots", 1, "size"), 4)(s))), ValueError, r"blocks\[0\]: key 'init' does not apply to kind 'identity'"),
    ("missing_slots", _set(("slots",), DELETE), ValueError, r"spec: missing required key 'slots'"),
    ("missing_size", _set(("slots", 0, "size"), DELETE), ValueError, r"slots\[0\]: missing required key 'size'"),
    ("missing_row", _set((*B0, "row"), DELETE), ValueError, r"blocks\[0\]: missing required key 'row'"),
    # types
    ("spec_type", lambda s: [s], TypeError, r"spec: expected a dict"),
    ("slots_type", _set(("slots",), {"size": 3}), TypeError, r"slots: expected a list"),
    ("slots_empty", _set(("slots",), []), ValueError, r"slots: expected at least one slot"),
    ("blocks_type", _set(("blocks",), {"row": 1}), TypeError, r"blocks: expected a list"),
    ("slot_type", _set(("slots", 1), 8), TypeError, r"slots\[1\]: expected a table"),
    ("size_type", _set(("slots", 0, "size"), "4"), TypeError, r"slots\[0\]\.size: expected a positive int, got str '4'"),
    ("size_zero", _set(("slots", 0, "size"), 0), ValueError, r"slots\[0\]\.size: expected a positive int, got 0"),
    ("bias_type", _set(("slots", 1, "bias"), 1), TypeError, r"slots\[1\]\.bias: expected a bool"),
    ("none_value", _set(("steps",), None), TypeError, r"steps: expected an int >= 0, got NoneType"),
    ("steps_negative", _set(("steps",), -1), ValueError, r"steps: expected an int >= 0, got -1"),
    ("seed_negative", _set(("seed",), -1), ValueError, r"seed: expected an int in \[0, 2\*\*64\)"),
    ("seed_float", _set(("seed",), 1.5), TypeError, r"seed: expected an int"),
    ("name_type", _set(("name",), 3), TypeError, r"name: expected a str"),
    ("row_bool", _set((*B0, "row"), True), TypeError, r"blocks\[0\]\.row: expected a slot index \(an int in 0\.\.2\), got bool"),
    ("row_range", _set((*B0, "row"), 3), ValueError, r"blocks\[0\]\.row: expected a slot index \(an int in 0\.\.2\), got 3"),
    ("col_negative", _set((*B0, "col"), -1), ValueError, r"blocks\[0\]\.col: expected a slot index"),
    ("trainable_type", _set((*B0, "trainable"), "no"), TypeError, r"blocks\[0\]\.trainable: expected a bool"),
    # enums list their choices
    ("kind", _set((*B0, "kind"), "sparse"), ValueError, r"blocks\[0\]\.kind: unknown block kind 'sparse'\. Select from 'dense', 'diagonal', 'identity', 'random', 'exact', 'per_row', 'mask'"),
    ("kind_type", _set((*B0, "kind"), 1), TypeError, r"blocks\[0\]\.kind: expected block kind \(a str\): one of 'dense'"),
    ("activation", _set(("slots", 1, "activation"), "rleu"), ValueError, r"slots\[1\]\.activation: unknown activation 'rleu' \(did you mean 'relu'\?\)\. Select from 'identity', 'relu'"),
    ("role", _set(("slots", 1, "role"), "middle"), ValueError, r"slots\[1\]\.role: unknown role 'middle'\. Select from 'input', 'hidden', 'output'"),
    ("init_kind", _set((*B0, "init"), {"kind": "gaussian"}), ValueError, r"blocks\[0\]\.init\.kind: unknown init kind 'gaussian'\. Select from 'default', 'normal', 'uniform', 'constant'"),
    ("init_str", _set((*B0, "init"), "normal"), ValueError, r"blocks\[0\]\.init: expected 'default' or a table .* got 'normal'"),
    ("init_no_kind", _set((*B0, "init"), {"std": 1.0}), ValueError, r"blocks\[0\]\.init: missing required key 'kind'"),
    ("init_value_type", _set((*B0, "init"), {"kind": "constant", "value": "1"}), TypeError, r"blocks\[0\]\.init\.value: expected a number, got str"),
    ("init_missing_param", _set((*B0, "init"), {"kind": "constant"}), ValueError, r"blocks\[0\]\.init: init kind 'constant' needs 'value'"),
    ("uniform_order", _set((*B0, "init"), {"kind": "uniform", "a": 1, "b": 0}), ValueError, r"blocks\[0\]\.init: expected a <= b, got a = 1\.0, b = 0\.0"),
    ("normal_std", _set((*B0, "init"), {"kind": "normal", "std": -1}), ValueError, r"blocks\[0\]\.init\.std: expected a number >= 0"),
    ("store", _set(("store",), "fast"), ValueError, r"store: unknown store 'fast'\. Select from .*'dense'"),
    ("old_and_new_store_key", lambda s: _set(("backend",), "loop")(_set(("store",), "dense")(s)), ValueError, r"spec: 'backend' is the old name of 'store'; give 'store' only"),
    # kind parameters
    ("density_zero", _set(B0, {"row": 1, "col": 0, "kind": "random", "density": 0}), ValueError, r"blocks\[0\]\.density: expected a number in \(0, 1\], got 0"),
    ("density_big", _set(B0, {"row": 1, "col": 0, "kind": "random", "density": 1.5}), ValueError, r"blocks\[0\]\.density: expected a number in \(0, 1\], got 1\.5"),
    ("density_type", _set(B0, {"row": 1, "col": 0, "kind": "random", "density": "0.5"}), TypeError, r"blocks\[0\]\.density: expected a number in \(0, 1\], got str"),
    ("density_missing", _set(B0, {"row": 1, "col": 0, "kind": "random"}), ValueError, r"blocks\[0\]: kind 'random' needs 'density'"),
    ("exact_too_many", _set(B0, {"row": 1, "col": 0, "kind": "exact", "n": 33}), ValueError, r"blocks\[0\]\.n: expected an int in 0\.\.32 \(the block has 8 x 4 entries\), got 33"),
    ("per_row_too_many", _set(B0, {"row": 1, "col": 0, "kind": "per_row", "n": 5}), ValueError, r"blocks\[0\]\.n: expected an int in 0\.\.4 \(entries per row; rows have 4 entries\), got 5"),
    ("n_type", _set(B0, {"row": 1, "col": 0, "kind": "exact", "n": 2.0}), TypeError, r"blocks\[0\]\.n: expected an int"),
    ("diagonal_not_square", _set(B0, {"row": 1, "col": 0, "kind": "diagonal"}), ValueError, r"blocks\[0\]: kind 'diagonal' needs a square block, but F\[1\]\[0\] has shape \(8, 4\)"),
    ("identity_sizes", _set(B0, {"row": 1, "col": 0, "kind": "identity"}), ValueError, r"blocks\[0\]: kind 'identity' needs equal slot sizes, but F\[1\]\[0\] maps slot 0 \(size 4\) to slot 1 \(size 8\)"),
    ("duplicate_position", lambda s: (s["blocks"].append({"row": 1, "col": 0}), s)[1], ValueError, r"blocks\[2\]: position F\[1\]\[0\] .* already taken by blocks\[0\]"),
    # masks
    ("mask_rows", _set(B0, {"row": 1, "col": 0, "kind": "mask", "mask": [[1, 0, 0, 1]] * 7}), ValueError, r"blocks\[0\]\.mask: expected 8 rows .*got 7"),
    ("mask_cols", _set(B0, {"row": 1, "col": 0, "kind": "mask", "mask": [[1, 0, 0, 1]] * 7 + [[1]]}), ValueError, r"blocks\[0\]\.mask\[7\]: expected 4 entries .*got 1"),
    ("mask_value", _set(B0, {"row": 1, "col": 0, "kind": "mask", "mask": [[1, 0, 2, 1]] * 8}), TypeError, r"blocks\[0\]\.mask\[0\]\[2\]: expected 0, 1, true or false, got int 2"),
    ("mask_type", _set(B0, {"row": 1, "col": 0, "kind": "mask", "mask": "1001"}), TypeError, r"blocks\[0\]\.mask: expected a 2-D list"),
    ("indices_range", _set(B0, {"row": 1, "col": 0, "kind": "mask", "indices": [[0, 0], [8, 0]]}), ValueError, r"blocks\[0\]\.indices\[1\]: entry \[8, 0\] is outside the block of shape \(8, 4\)"),
    ("indices_twice", _set(B0, {"row": 1, "col": 0, "kind": "mask", "indices": [[0, 0], [0, 0]]}), ValueError, r"blocks\[0\]\.indices\[1\]: entry \[0, 0\] is listed twice"),
    ("indices_type", _set(B0, {"row": 1, "col": 0, "kind": "mask", "indices": [[0, 0, 1]]}), TypeError, r"blocks\[0\]\.indices\[0\]: expected an \[r, c\] pair"),
    ("mask_and_indices", _set(B0, {"row": 1, "col": 0, "kind": "mask", "indices": [], "mask": [[0] * 4] * 8}), ValueError, r"blocks\[0\]: kind 'mask' needs exactly one of 'mask'"),
    ("mask_missing", _set(B0, {"row": 1, "col": 0, "kind": "mask"}), ValueError, r"blocks\[0\]: kind 'mask' needs exactly one of 'mask' .* got neither"),
    # values
    ("weight_shape", _set((*B0, "weight"), [[0.0] * 4] * 3), ValueError, r"blocks\[0\]\.weight: expected 8 rows"),
    ("weight_entry", _set((*B0, "weight"), [[0.0] * 4] * 7 + [[0.0, 0.0, True, 0.0]]), TypeError, r"blocks\[0\]\.weight\[7\]\[2\]: expected a number, got bool"),
    ("weight_off_pattern", _set(B0, {"row": 1, "col": 0, "kind": "mask", "indices": [[0, 0]], "weight": [[1.0, 2.0, 0, 0]] + [[0.0] * 4] * 7}), ValueError, r"blocks\[0\]\.weight: expected zeros outside the 'mask' pattern, got 2\.0 at \[0, 1\]"),
    ("weight_off_random_pattern", _set(B0, {"row": 1, "col": 0, "kind": "exact", "n": 1, "weight": [[1.0] * 4] * 8}), ValueError, r"blocks\[0\]\.weight: expected zeros outside the drawn 'exact' pattern"),
    ("weight_frozen_block", _set(B0, {"row": 1, "col": 0, "trainable": False, "weight": [[0.0] * 4] * 8}), ValueError, r"blocks\[0\]: 'weight' does not apply to a block with trainable = false"),
    ("init_and_weight", _set(B0, {"row": 1, "col": 0, "init": "default", "weight": [[0.0] * 4] * 8}), ValueError, r"blocks\[0\]: give 'init' or 'weight'"),
    ("bias_value_len", _set(("slots", 1, "bias_value"), [0.0] * 3), ValueError, r"slots\[1\]\.bias_value: expected 8 numbers"),
    ("bias_value_no_bias", lambda s: _set(("slots", 1, "bias"), False)(_set(("slots", 1, "bias_value"), [0.0] * 8)(s)), ValueError, r"slots\[1\]: 'bias_value' needs bias = true"),
    ("norm_without_layernorm", _set(("slots", 1, "norm_weight"), [1.0] * 8), ValueError, r"slots\[1\]: 'norm_weight' applies to activation 'layernorm' only"),
    # held slots, roles, lists
    ("bias_on_held", _set(("slots", 0, "bias"), True), ValueError, r"slots\[0\]\.bias = true: slot 0 has no incoming blocks"),
    ("activation_on_held", _set(("slots", 0, "activation"), "tanh"), ValueError, r"slots\[0\]\.activation = 'tanh': slot 0 has no incoming blocks"),
    ("role_vs_inputs", _set(("inputs",), [1]), ValueError, r"slots\[0\]\.role = 'input' disagrees with inputs = \[1\]"),
    ("role_vs_outputs", _set(("outputs",), [1, 2]), ValueError, r"slots\[1\]\.role = 'hidden' disagrees with outputs = \[1, 2\]"),
    ("role_vs_default", lambda s: _set(("slots", 0, "role"), "hidden")(_set(("slots", 1, "role"), DELETE)(s)), ValueError, r"slots\[0\]\.role = 'hidden' disagrees with inputs = \[0\] \(the default: the held slots"),
    ("inputs_range", _set(("inputs",), [5]), ValueError, r"inputs\[0\]: expected a slot index \(an int in 0\.\.2\), got 5"),
    ("inputs_type", _set(("inputs",), 0), TypeError, r"inputs: expected a list of slot indices"),
    ("outputs_twice", _set(("outputs",), [2, 2]), ValueError, r"outputs: expected distinct slot indices, got \[2, 2\]"),
    # ties
    ("tie_shape", lambda s: (s["blocks"][0].update(tie="t"), s["blocks"][1].update(tie="t"), s)[2], ValueError, r"blocks\[1\]: tie 't' needs one shape, but blocks\[0\] is \(8, 4\) and this block \(F\[2\]\[1\]\) is \(3, 8\)"),
    ("tie_type", _set((*B0, "tie"), 1), TypeError, r"blocks\[0\]\.tie: expected a str"),
]


def _tie_conflict_spec():
    return {
        "slots": [{"size": 4}, {"size": 4}, {"size": 4}],
        "blocks": [
            {"row": 1, "col": 0, "kind": "exact", "n": 3, "tie": "a"},
            {"row": 2, "col": 1, "kind": "dense", "tie": "a"},
        ],
    }


@pytest.mark.parametrize("name,mutate,exc,match", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_bad_spec_raises_naming_the_place(name, mutate, exc, match):
    spec = mutate(mlp_spec())
    with pytest.raises(exc, match=match):
        from_spec(spec)


def test_tie_conflicts():
    with pytest.raises(ValueError, match=r"blocks\[1\]: tie 'a' is defined by blocks\[0\] with kind = 'exact', but this block gives kind = 'dense'"):
        from_spec(_tie_conflict_spec())
    spec = _tie_conflict_spec()
    spec["blocks"][1] = {"row": 2, "col": 1, "tie": "a", "n": 4}
    with pytest.raises(ValueError, match=r"blocks\[1\]: tie 'a' is defined by blocks\[0\] with n = 3, but this block gives n = 4"):
        from_spec(spec)
    spec["blocks"][1] = {"row": 2, "col": 1, "tie": "a", "kind": "identity"}
    with pytest.raises(ValueError, match=r"blocks\[1\]: tie 'a' .* kind = 'exact', but this block gives kind = 'identity'"):
        from_spec(spec)
    spec["blocks"][0] = {"row": 1, "col": 0, "kind": "identity", "tie": "a"}
    with pytest.raises(ValueError, match=r"blocks\[0\]: key 'tie' does not apply to kind 'identity'"):
        from_spec(spec)


def test_errors_do_not_mutate_and_files(tmp_path):
    spec = mlp_spec()
    before = copy.deepcopy(spec)
    from_spec(spec)
    assert spec == before
    bad = mlp_spec(steps="2")
    path = tmp_path / "bad.toml"
    with pytest.raises(TypeError, match=r"steps: expected an int >= 0, got str"):
        save_spec(bad, path)
    assert not path.exists()  # nothing written for an invalid spec
    with pytest.raises(FileNotFoundError):
        from_spec(tmp_path / "missing.toml")
    path.write_text("slots = [{size = 3}]\nblockz = []\n")
    with pytest.raises(ValueError, match=r"spec: unknown key 'blockz' \(did you mean 'blocks'\?\)"):
        from_spec(path)
