"""The spec key ``dense_trainable``: a sparse start, every entry trainable.

Ported from the authors' library (iterativennsimple) as a test case: their blocks with
``R=p`` and ``trainable=True`` have ALL entries trainable but only a random fraction p of
them start nonzero. In a spec the block's pattern (any kind) places the initial values
(drawn exactly as without the key, exactly 0 elsewhere) and the block is a LinearBlock
without a mask (docs/spec.md, "Block").
"""

import tomllib

import pytest
import torch

from seq2d.blocks import LinearBlock
from seq2d.spec import from_spec, load_spec, save_spec, to_spec
from seq2d.testing import ulps

D = torch.float64


def one_block(kind_keys: dict, rows: int = 20, cols: int = 30, bias: bool = False, **top) -> dict:
    """Slot 0 (size cols) -> slot 1 (size rows) through one block F[1][0]."""
    return {
        "slots": [{"size": cols}, {"size": rows, "bias": bias}],
        "blocks": [{"row": 1, "col": 0, **kind_keys}],
        **top,
    }


def state_equal(a, b) -> bool:
    """Bitwise: the values are copied (or drawn by the same seeded code), not computed two ways."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


NORMAL = {"kind": "normal", "std": 1.0}  # nonzero almost surely: the nonzeros are the pattern

KINDS = {
    "random": {"kind": "random", "density": 0.1},
    "exact": {"kind": "exact", "n": 17},
    "per_row": {"kind": "per_row", "n": 3},
    "mask": {"kind": "mask", "indices": [[0, 0], [3, 7], [19, 29]]},
    "dense": {"kind": "dense"},
}


# ---------------------------------------------------------------------- building
def test_random_density_of_nonzero_start_values_all_trainable():
    """kind = "random", density = 0.1 on a 20 x 30 block: 60 nonzero start values, 600 trainable."""
    m = from_spec(one_block({**KINDS["random"], "init": NORMAL, "dense_trainable": True}), dtype=D)
    blk = m.block(1, 0)
    assert isinstance(blk, LinearBlock)
    assert blk.mask is None and blk.frozen is None  # every entry trainable, no fixed values
    w = blk.weight.detach()
    assert int((w != 0).sum()) == round(0.1 * 20 * 30) == 60
    assert bool((w[w == 0] == 0).all())  # the others start at exactly 0
    assert blk.num_trainable() == 20 * 30


@pytest.mark.parametrize("name", list(KINDS))
def test_pattern_places_the_values_drawn_as_without_the_key(name):
    """Same seed: the start values are bitwise those of the masked block; only the mask differs."""
    for init in (NORMAL, "default"):
        keys = {**KINDS[name], "init": init}
        masked = from_spec(one_block(keys, seed=7), dtype=D).block(1, 0)
        dense = from_spec(one_block({**keys, "dense_trainable": True}, seed=7), dtype=D).block(1, 0)
        assert dense.mask is None
        # bitwise: the same seeded draws, times 0 or 1 (exact)
        assert torch.equal(dense.weight.detach(), masked.weight.detach() * masked.trainable_mask())
        if init is NORMAL:
            assert torch.equal(dense.weight.detach() != 0, masked.trainable_mask())


def test_diagonal_pattern_and_toml():
    text = """
    [[slots]]
    size = 5
    [[slots]]
    size = 5
    [[blocks]]
    row = 1
    col = 0
    kind = "diagonal"
    init = { kind = "constant", value = 0.5 }
    dense_trainable = true
    """
    blk = from_spec(tomllib.loads(text.replace("\n    ", "\n")), dtype=D).block(1, 0)
    assert blk.mask is None
    assert torch.equal(blk.weight.detach(), 0.5 * torch.eye(5, dtype=D))  # a constant placed: bitwise


def test_num_parameters_counts_every_entry():
    spec = {
        "slots": [{"size": 30}, {"size": 20, "bias": True}, {"size": 7}],
        "blocks": [
            {"row": 1, "col": 0, **KINDS["random"], "dense_trainable": True},
            {"row": 2, "col": 1, "kind": "per_row", "n": 2, "dense_trainable": True},
        ],
    }
    m = from_spec(spec)
    assert m.block(1, 0).num_trainable() == 20 * 30
    assert m.block(2, 1).num_trainable() == 7 * 20
    assert m.num_parameters() == 20 * 30 + 7 * 20 + 20  # + the bias of slot 1
    # without the key only the pattern is trainable
    for b in spec["blocks"]:
        del b["dense_trainable"]
    assert from_spec(spec).num_parameters() == 60 + 7 * 2 + 20


@pytest.mark.parametrize("loop", [False, True])
def test_every_entry_receives_gradient_and_moves(loop):
    spec = one_block({**KINDS["random"], "init": NORMAL, "dense_trainable": True}, loop=loop)
    m = from_spec(spec, dtype=D)
    blk = m.block(1, 0)
    start = blk.weight.detach().clone()
    assert int((start == 0).sum()) == 600 - 60
    x = torch.randn(8, 30, generator=torch.Generator().manual_seed(0), dtype=D)
    m([x, None], steps=1)[1].square().sum().backward()
    assert blk.grad is not None and bool((blk.grad != 0).all())  # every entry, on and off the pattern
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    opt.step()
    assert bool((blk.weight.detach() != start).all())  # the zero-start entries moved too

    # the same block without the key: off-pattern entries get no gradient and stay 0
    del spec["blocks"][0]["dense_trainable"]
    masked = from_spec(spec, dtype=D)
    masked([x, None], steps=1)[1].square().sum().backward()
    mb = masked.block(1, 0)
    assert bool((mb.grad[~mb.mask] == 0).all())


def test_weight_values_may_sit_anywhere():
    w = torch.arange(1, 601, dtype=D).view(20, 30) / 600  # nonzero everywhere
    for keys in (KINDS["random"], KINDS["exact"], KINDS["mask"]):
        m = from_spec(one_block({**keys, "dense_trainable": True, "weight": w.tolist()}), dtype=D)
        assert torch.equal(m.block(1, 0).weight.detach(), w)  # copied through: bitwise
        # without the key the same values are rejected (zeros outside the pattern)
        with pytest.raises(ValueError, match=r"blocks\[0\]\.weight: expected zeros outside the"):
            from_spec(one_block({**keys, "weight": w.tolist()}))


def test_tied_copy_follows_the_first_block():
    spec = {
        "slots": [{"size": 6}, {"size": 6}, {"size": 6}],
        "blocks": [
            {"row": 1, "col": 0, "kind": "random", "density": 0.25, "dense_trainable": True, "tie": "t"},
            {"row": 2, "col": 1, "tie": "t"},
            {"row": 0, "col": 2, "tie": "t", "dense_trainable": True},  # repeating the value is allowed
        ],
    }
    m = from_spec({**spec, "steps": 2})
    blk = m.block(1, 0)
    assert blk is m.block(2, 1) is m.block(0, 2) and blk.mask is None
    assert m.num_parameters() == 36
    spec["blocks"][2]["dense_trainable"] = False
    with pytest.raises(ValueError, match=r"blocks\[2\]: tie 't' is defined by blocks\[0\] with dense_trainable = True, but this block gives dense_trainable = False"):
        from_spec({**spec, "steps": 2})
    spec["blocks"][0]["dense_trainable"] = False  # the first block without it: a copy may not add it
    spec["blocks"][2]["dense_trainable"] = True
    with pytest.raises(ValueError, match=r"blocks\[2\]: tie 't' is defined by blocks\[0\] with dense_trainable = False, but this block gives dense_trainable = True"):
        from_spec({**spec, "steps": 2})


# ---------------------------------------------------------------------- errors
ERRORS = [
    ("not_trainable", {"kind": "random", "density": 0.1, "trainable": False, "dense_trainable": True}, ValueError,
     r"blocks\[0\]: 'dense_trainable' = true makes every entry trainable, so it needs trainable = true, got trainable = false"),
    ("type", {"kind": "random", "density": 0.1, "dense_trainable": 1}, TypeError,
     r"blocks\[0\]\.dense_trainable: expected a bool \(true or false\), got int 1"),
    ("init_and_weight", {"dense_trainable": True, "init": "default", "weight": [[0.0] * 30] * 20}, ValueError,
     r"blocks\[0\]: give 'init' or 'weight'"),
    ("typo", {"kind": "random", "density": 0.1, "dense_trainabel": True}, ValueError,
     r"blocks\[0\]: unknown key 'dense_trainabel' \(did you mean 'dense_trainable'\?\)"),
]


@pytest.mark.parametrize("name,keys,exc,match", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_dense_trainable_raises_naming_the_place(name, keys, exc, match):
    with pytest.raises(exc, match=match):
        from_spec(one_block(keys))


def test_identity_block_takes_no_dense_trainable():
    spec = one_block({"kind": "identity", "dense_trainable": True}, rows=4, cols=4)
    with pytest.raises(ValueError, match=r"blocks\[0\]: key 'dense_trainable' does not apply to kind 'identity' \(an identity block has no values\)"):
        from_spec(spec)


def test_false_is_the_default_and_allowed_on_fixed_blocks():
    keys = {"kind": "exact", "n": 5, "trainable": False}
    a = from_spec(one_block(keys))
    b = from_spec(one_block({**keys, "dense_trainable": False}))
    assert state_equal(a, b) and b.num_parameters() == 0


# ---------------------------------------------------------------------- seed
def test_same_seed_same_model_different_seed_different_start():
    spec = one_block({**KINDS["random"], "dense_trainable": True}, bias=True, seed=11)
    a, b = from_spec(spec), from_spec(spec)
    assert state_equal(a, b)
    c = from_spec({**spec, "seed": 12})
    assert not torch.equal(a.block(1, 0).weight != 0, c.block(1, 0).weight != 0)


def test_building_leaves_global_rng_alone():
    torch.manual_seed(5)
    before = torch.get_rng_state()
    from_spec(one_block({**KINDS["per_row"], "dense_trainable": True}))
    assert torch.equal(torch.get_rng_state(), before)


# ---------------------------------------------------------------------- export
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_round_trip_with_weights_is_bitwise(dtype, tmp_path):
    spec = {
        "slots": [{"size": 30, "role": "input"}, {"size": 20, "activation": "tanh", "bias": True}, {"size": 5, "role": "output"}],
        "blocks": [
            {"row": 1, "col": 0, **KINDS["random"], "dense_trainable": True},
            {"row": 2, "col": 1, "kind": "exact", "n": 10, "dense_trainable": True},
            {"row": 1, "col": 1, "kind": "diagonal", "dense_trainable": True},
        ],
        "steps": 3,
    }
    m = from_spec(spec, dtype=dtype)
    out = to_spec(m, weights=True)
    # to_spec cannot tell a dense_trainable block from a dense one: both have no mask
    assert [b["kind"] for b in out["blocks"]] == ["dense", "dense", "dense"]
    assert all("dense_trainable" not in b and "frozen" not in b for b in out["blocks"])
    w = torch.tensor(out["blocks"][0]["weight"])
    assert int((w != 0).sum()) == 60  # the sparse start is in the values
    x = torch.randn(4, 30, generator=torch.Generator().manual_seed(3), dtype=dtype)
    save_spec(out, tmp_path / "m.toml")
    for copy in (from_spec(out, dtype=dtype), from_spec(load_spec(tmp_path / "m.toml"), dtype=dtype)):
        assert state_equal(copy, m)
        assert copy.num_parameters() == m.num_parameters() == 600 + 100 + 400 + 20
        assert all(copy.block(i, j).mask is None for i, j in ((1, 0), (2, 1), (1, 1)))
        torch.testing.assert_close(copy(x), m(x), **ulps(dtype))  # the weights are bitwise; two models built apart


def test_round_trip_without_weights_keeps_the_structure():
    m = from_spec(one_block({**KINDS["random"], "dense_trainable": True}))
    out = to_spec(m)
    assert out["blocks"] == [{"row": 1, "col": 0, "kind": "dense"}]
    back = from_spec(out)
    assert back.block(1, 0).mask is None and back.num_parameters() == m.num_parameters() == 600
