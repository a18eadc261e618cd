"""The execution plan (acyclic graph, steps >= depth: each slot once, level by level)
equals plain Jacobi iteration: property test on random DAGs, every constructor, and the
block-sparse matrix."""

import copy

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch import nn

import seq2d
from seq2d import LinearBlock, Sequential2D
from seq2d.core.reference import reference_forward
from seq2d.testing import example_input


@st.composite
def dags(draw):
    n = draw(st.integers(2, 7))
    sizes = draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    perm = draw(st.permutations(list(range(n))))  # slot order unrelated to topological order
    grid = {}
    for a in range(n):
        for b in range(a):  # edges only from earlier to later in `perm` order: acyclic
            if draw(st.booleans()):
                i, j = perm[a], perm[b]
                kind = draw(st.sampled_from(["linear", "masked", "identity", "module"]))
                if kind == "identity" and sizes[i] != sizes[j]:
                    kind = "linear"
                if kind == "identity":
                    grid[(i, j)] = "identity"
                elif kind == "module":
                    grid[(i, j)] = nn.Linear(sizes[j], sizes[i], dtype=torch.float64)
                else:
                    mask = (torch.rand(sizes[i], sizes[j]) < 0.5) if kind == "masked" else None
                    grid[(i, j)] = LinearBlock(sizes[j], sizes[i], mask=mask, dtype=torch.float64)
    assume(grid)  # a model without any block is refused (docs/concepts.md, "Malformed models and calls")
    rows = {i for i, _ in grid}
    acts = [draw(st.sampled_from(["tanh", "relu", "identity", "layernorm"])) if i in rows else None for i in range(n)]
    bias = [draw(st.booleans()) if i in rows else False for i in range(n)]
    model = Sequential2D(sizes, grid, bias=bias, activations=acts, dtype=torch.float64)
    extra = draw(st.integers(0, 2))
    present = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    present[perm[0]] = True
    state = [torch.randn(3, s, dtype=torch.float64) if p else None for s, p in zip(sizes, present)]
    return model, state, extra


@pytest.mark.filterwarnings("ignore:.*has no trainable parameter:UserWarning")  # identity-only DAGs: deliberate
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_plan_equals_jacobi_iteration(case):
    model, state, extra = case
    assert model.depth is not None
    steps = model.depth + extra
    ref = reference_forward(model, state, steps)
    model.use_plan = True
    planned = model(state, steps)
    model.use_plan = False
    iterated = model(state, steps)
    for a, b, c in zip(planned, iterated, ref):
        assert (a is None) == (b is None) == (c is None)
        if a is not None:
            torch.testing.assert_close(a, c, rtol=0, atol=1e-12)
            torch.testing.assert_close(b, c, rtol=0, atol=1e-12)


def _run(model, x):
    out = model(*x)
    return out[0] if isinstance(out, tuple) else out


def test_plan_equals_iteration_for_every_acyclic_constructor():
    kw = {"transformer_layer": dict(d_model=8, nhead=2, dim_feedforward=16),
          "transformer_encoder": dict(d_model=8, nhead=2, dim_feedforward=16, num_layers=2),
          "truncated_rnn": dict(num_layers=2, k=3)}
    checked = 0
    for name in seq2d.list_models():
        torch.manual_seed(0)
        model = seq2d.create_model(name, **kw.get(name, {}), dtype=torch.float64)
        core = model if isinstance(model, Sequential2D) else model.core
        if core.depth is None:
            continue
        x = example_input(model, dtype=torch.float64)
        xa = x[0].clone().requires_grad_(True)
        xb = x[0].clone().requires_grad_(True)
        core.use_plan = True
        ya = _run(model, (xa, *x[1:]))
        core.use_plan = False
        yb = _run(model, (xb, *x[1:]))
        torch.testing.assert_close(ya, yb, rtol=0, atol=1e-12)
        g = torch.randn_like(ya)
        ga = torch.autograd.grad(ya, [xa, *model.parameters()], g)
        gb = torch.autograd.grad(yb, [xb, *model.parameters()], g)
        for a, b in zip(ga, gb):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-11)
        checked += 1
    assert checked >= 5


def test_plan_with_the_block_sparse_matrix():
    torch.manual_seed(0)
    mask = torch.zeros(5, 5, dtype=torch.bool)
    mask[1, 0] = mask[2, 0] = mask[3, 1] = mask[3, 2] = mask[4, 3] = mask[4, 0] = True
    m = seq2d.from_mask([20, 17, 33, 9, 4], mask, activations="tanh", dtype=torch.float64)
    ref = copy.deepcopy(m)
    m.to_blocksparse(16, kernel="cpu")
    x = torch.randn(6, 20, dtype=torch.float64)
    torch.testing.assert_close(m(x), ref(x), rtol=0, atol=1e-12)
    m.use_plan = False
    torch.testing.assert_close(m(x), ref(x), rtol=0, atol=1e-12)


def test_plan_evaluates_each_block_once():
    calls = []

    class Probe(nn.Module):
        def forward(self, x):
            calls.append(1)
            return x

    with pytest.warns(UserWarning, match="no trainable parameter"):  # parameter-free probes: deliberate
        m = Sequential2D([3, 3, 3, 3], {(1, 0): Probe(), (2, 1): Probe(), (3, 2): Probe()})
    m(torch.randn(2, 3))
    assert len(calls) == 3  # once per block
    calls.clear()
    m.use_plan = False
    m(torch.randn(2, 3))
    assert len(calls) == 1 + 3 + 3  # step 1 skips the blocks whose input slots are still None
