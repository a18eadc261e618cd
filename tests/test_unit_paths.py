"""seq2d.graph.unit_mask / unit_paths against a brute-force reference: the step written out as a
dense N x N product in float64 and differentiated with autograd. Tanh models, generic weights on
the model's pattern, the biases set to zero and the state started from zero: an entry is then
non-zero exactly when the input reaches it, and the mixed derivative d/dp (d output / d input) is
non-zero exactly when the parameter p lies on an input-output walk."""

import pytest
import torch

from seq2d import randomize
from seq2d.core import core_of
from seq2d.graph import distances, unit_mask, unit_paths
from seq2d.models.feedforward import from_mask, mlp

SIZES = [6, 5, 4, 3]


def _dense(core):
    """The effective N x N weight, the biases (N,), the updated-row mask and the slot offsets."""
    off = [0]
    for s in core.sizes:
        off.append(off[-1] + s)
    N = off[-1]
    W = torch.zeros(N, N, dtype=torch.float64)
    b = torch.zeros(N, dtype=torch.float64)
    for i, j, kind, blk in core.positions():
        assert kind == "linear"
        W[off[i]:off[i + 1], off[j]:off[j + 1]] += blk.effective_weight().detach().double()
    for i in range(core.n):
        if core.bias(i) is not None:
            b[off[i]:off[i + 1]] = core.bias(i).detach().double()
    upd = torch.zeros(N, dtype=torch.bool)
    held = set(core.held()) | set(core.inputs)
    for i in range(core.n):
        if i not in held:
            upd[off[i]:off[i + 1]] = True
    return W, b, upd, off


def _simulate(core, W, b, upd, x0, steps):
    off = [0]
    for s in core.sizes:
        off.append(off[-1] + s)
    x = x0
    for _ in range(steps):
        pre = x @ W.T + b
        new = torch.cat([core.acts[i](pre[:, off[i]:off[i + 1]]) for i in range(core.n)], dim=1)
        x = torch.where(upd, new, x)
    return x


def _brute(core, steps, seed):
    """(weights on a walk, biases on a walk, does the output depend on the input) by autograd."""
    W, b, upd, off = _dense(core)
    g = torch.Generator().manual_seed(seed)
    M = unit_mask(core)
    W = (W + 0.5 * torch.randn(W.shape, generator=g, dtype=torch.float64)) * M  # generic values on the pattern
    W.requires_grad_(True)
    has_bias = b != 0  # the model's biases (drawn non-zero), evaluated at zero: then only the
    b = torch.zeros_like(b).requires_grad_(True)  # input makes a state entry non-zero
    x0 = torch.zeros(1, off[-1], dtype=torch.float64)
    inp = torch.randn(1, core.sizes[0], generator=g, dtype=torch.float64).requires_grad_(True)
    x0 = torch.cat([inp, x0[:, core.sizes[0]:]], dim=1)
    o0, o1 = off[core.outputs[0]], off[core.outputs[0] + 1]
    proj = torch.randn(o1 - o0, generator=g, dtype=torch.float64)
    out = _simulate(core, W, b, upd, x0, steps)[0, o0:o1] @ proj
    (gx,) = torch.autograd.grad(out, inp, retain_graph=True)
    # d/dp of d(out)/d(input) . v: non-zero iff p lies on an input-output walk (a mixed derivative)
    v = torch.randn(inp.shape, generator=g, dtype=torch.float64)
    gin = torch.autograd.grad(out, inp, create_graph=True)[0]
    (gw,) = torch.autograd.grad((gin * v).sum(), (W,), allow_unused=True)
    gw = torch.zeros_like(W) if gw is None else gw
    return (gw != 0) & M, has_bias, bool((gx != 0).any())


def test_unit_mask_of_an_mlp_is_its_sub_diagonal_blocks():
    m = mlp(SIZES)
    M = unit_mask(m)
    ref = torch.zeros_like(M)
    off = [0, 6, 11, 15, 18]
    for k in range(3):
        ref[off[k + 1]:off[k + 2], off[k]:off[k + 1]] = True
    assert torch.equal(M, ref)
    u = unit_paths(m)
    assert u["path_length"] == 3 and u["fraction"] == 1.0 and u["on_path"] == m.num_parameters()


def test_unit_mask_of_an_element_mask_is_that_mask():
    g = torch.Generator().manual_seed(3)
    N = sum(SIZES)
    mask = torch.rand(N, N, generator=g) < 0.3
    mask[:SIZES[0]] = False
    m = from_mask(SIZES, mask, inputs=[0], steps=3, seed=0)
    assert torch.equal(unit_mask(m), mask)


@pytest.mark.parametrize("granularity", ["element", "block"])
@pytest.mark.parametrize("params", [12, 30, 80])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unit_paths_match_autograd(granularity, params, bias, seed):
    tmpl = mlp(SIZES, activation="tanh")
    if bias and params <= 12:
        params += 12  # room for the biases (3 slots, 12 units)
    model = randomize(tmpl, granularity, seed=seed, params=params, bias=bias, dtype=torch.float64)
    core = core_of(model)
    assert model.num_parameters() == params
    seen = set()
    for steps in range(1, 6):
        u = unit_paths(core, steps)
        w, b, depends = _brute(core, steps, seed)
        assert torch.equal(u["on_path_weights"], w), (steps, u["on_path_weights"].sum(), w.sum())
        # a bias is on a walk where its unit is, i.e. where a weight on a walk enters its unit
        assert torch.equal(u["on_path_biases"], b & w.any(dim=1))
        assert depends == (u["path_length"] is not None and u["path_length"] <= steps)
        assert u["on_path"] == int(w.sum()) + int((b & w.any(dim=1)).sum())
        assert u["weights"] + u["biases"] == params
        seen.add(u["on_path"])
    assert len(seen) > 1 or u["path_length"] is None or u["path_length"] == 1  # the step count matters


def test_unit_paths_with_biases_count_biases_on_the_walk():
    # MLP with biases: every bias lies on the walk at the MLP's depth, none of the last two at depth 1
    m = mlp(SIZES)
    assert unit_paths(m, 3)["on_path"] == m.num_parameters()
    u1 = unit_paths(m, 1)
    assert u1["path_length"] == 3 and u1["on_path"] == 0 and u1["fraction"] == 0.0


def test_simulation_matches_the_model():
    model = randomize(mlp(SIZES, activation="tanh"), "element", seed=4, params=40, bias=False, dtype=torch.float64)
    core = core_of(model)
    W, b, upd, off = _dense(core)
    x0 = torch.zeros(2, off[-1], dtype=torch.float64)
    x0[:, :SIZES[0]] = torch.randn(2, SIZES[0], dtype=torch.float64)
    ref = _simulate(core, W, b, upd, x0, 3)
    got = core.forward_flat(x0, 3)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_slot_distance_is_at_most_the_unit_path_length():
    for seed in range(5):
        model = randomize(mlp(SIZES), "element", seed=seed, params=25)
        u = unit_paths(model)
        d = distances(model)[core_of(model).outputs[0]]
        if u["path_length"] is not None:
            assert d is not None and d <= u["path_length"]


def test_unit_paths_rejects_bad_steps():
    with pytest.raises(ValueError, match="steps must be a positive int"):
        unit_paths(mlp(SIZES), 0)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_randomize_params_is_checked(bad):
    with pytest.raises(ValueError, match="params must be a positive int"):
        randomize(mlp(SIZES), params=bad)


@pytest.mark.parametrize("granularity", ["element", "tile", "block"])
def test_randomize_params_places_that_count_over_the_template_matrix(granularity):
    wide = mlp([6, 20, 10, 3])
    small = mlp(SIZES)
    m = randomize(wide, granularity, seed=0, params=small.num_parameters(), tile=16)
    assert m.num_parameters() == small.num_parameters()
    assert list(core_of(m).sizes) == [6, 20, 10, 3]
