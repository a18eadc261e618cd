"""Held-input products (issue 19): when a call iterates, the product with the slots no step
writes is computed once per call and steps whose other columns are all absent multiply
nothing. Proven equal to the docstring loop (seq2d.core.reference) in float64, outputs and every
gradient, for every registered constructor and for random masks with several held slots, on
the dense and the tiled store; the work really skipped is counted with torch's FLOP counter."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import seq2d
from seq2d.core import core_of
from seq2d.core.reference import reference_forward
from seq2d.testing import autograd_nodes, ulps

D = torch.float64


def _held_model(n: int = 7, size: int = 5, held=(0, 1, 2), density: float = 0.5, seed: int = 0, bias=True, **kw):
    """A cyclic from_mask model whose slots ``held`` have empty rows (several held inputs)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, n, generator=g) < density
    for i in held:
        mask[i] = False
    rows = [i for i in range(n) if i not in held]
    for i in rows:
        mask[i, held[i % len(held)]] = True  # every row reads some input
        mask[i, i] = True  # self-loops: cyclic, iterated as a whole
    sizes = [size + (i % 3) for i in range(n)]  # unequal sizes: columns of several widths
    return seq2d.from_mask(sizes, mask, activations="tanh", bias=bias, seed=seed, inputs=list(held), steps=3,
                           dtype=D, **kw)


def _grads(model, loss):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.autograd.grad(loss, params, allow_unused=True)


def _relative_gaps(core, state, steps, hold=None) -> tuple[float, float]:
    """The largest relative difference between the model and the docstring loop: (outputs, every
    parameter's gradient of a random projection of the outputs); absent outputs must match."""
    ours = core(state, steps, hold=hold) if hold is not None else core(state, steps)
    if hold is None:
        ref = reference_forward(core, state, steps)
    else:  # the loop with the slots in ``hold`` kept: one reference step at a time
        ref = list(state)
        for _ in range(steps):
            new = reference_forward(core, ref, 1)
            ref = [ref[i] if i in hold else new[i] for i in range(core.n)]
    assert [a is None for a in ours] == [b is None for b in ref]
    w = [torch.randn_like(t) if t is not None else None for t in ours]
    loss_a = sum((a * c).sum() for a, c in zip(ours, w) if a is not None)
    loss_b = sum((b * c).sum() for b, c in zip(ref, w) if b is not None)

    def gap(a, b):
        return float((a - b).abs().max() / (b.abs().max() + 1e-300)) if a.numel() else 0.0

    out = max(gap(a, b) for a, b in zip(ours, ref) if a is not None)
    grads = 0.0
    for ga, gb in zip(_grads(core, loss_a), _grads(core, loss_b)):
        ga = torch.zeros(()) if ga is None else ga
        gb = torch.zeros_like(ga) if gb is None else gb
        grads = max(grads, gap(ga, gb) if gb.abs().max() > 0 else float(ga.abs().max()))
    return out, grads


@pytest.mark.parametrize("store", ["dense", "tiled"])
@pytest.mark.parametrize("start", ["inputs only", "some slots given"])
def test_several_held_slots_equal_the_docstring_loop(store, start):
    m = _held_model()
    if store == "tiled":
        m.to_blocksparse(16)
    state = [torch.randn(4, s, dtype=D) if i in m.inputs else None for i, s in enumerate(m.sizes)]
    if start != "inputs only":
        state[4] = torch.randn(4, m.sizes[4], dtype=D)  # a non-input slot present from the start
    for steps in (1, 2, 3, 5):
        out, grads = _relative_gaps(m, state, steps)
        assert out < 1e-12 and grads < 1e-10, (steps, out, grads)


@pytest.mark.parametrize("store", ["dense", "tiled"])
def test_hold_makes_more_slots_held_and_equals_the_loop(store):
    m = _held_model(held=(0,))
    if store == "tiled":
        m.to_blocksparse(16)
    state = [torch.randn(3, s, dtype=D) for s in m.sizes]
    out, grads = _relative_gaps(m, state, 3, hold=(2, 5))
    assert out < 1e-12 and grads < 1e-10, (out, grads)


@pytest.mark.parametrize("name", ["random", "random_mask", "rnn", "from_mask", "mlp", "truncated_rnn"])
def test_registered_constructors_equal_the_loop_with_held_products(name):
    from tests.test_registry import build

    model = build(name, dtype=D)
    core = core_of(model)
    steps = max(core.steps or 3, 2)
    state = [torch.randn(2, s, dtype=D) if i in core.inputs else None for i, s in enumerate(core.sizes)]
    out, grads = _relative_gaps(core, state, steps)
    assert out < 1e-12 and grads < 1e-10, (name, out, grads)


def test_off_switch_gives_the_same_values():
    m = _held_model()
    state = [torch.randn(4, s, dtype=D) if i in m.inputs else None for i, s in enumerate(m.sizes)]
    a = m(state, 3)
    m.use_held_products = False
    b = m(state, 3)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, **ulps(D))


def _forward_flops(model, x) -> int:
    with FlopCounterMode(display=False) as fc:
        model(x)
    return fc.get_total_flops()


def test_the_paper_model_multiplies_the_input_once_and_skips_the_empty_first_step():
    """The randomized model of the paper ([2500, 500, 200, 100, 10] at a small scale): 4 steps,
    one held input. Per sample the dense store multiplies R x C_in once and R x C_rest in steps
    2-4 only (step 1 reads zeros there), instead of 4 x R x (C_in + C_rest)."""
    sizes = [64, 32, 32, 16, 16]
    m = seq2d.randomize(seq2d.mlp(sizes), granularity="element", seed=0)
    core = core_of(m)
    B = 8
    x = torch.randn(B, sizes[0])
    on = _forward_flops(m, x)
    core.use_held_products = False
    off = _forward_flops(m, x)
    R, C_in, C_rest = sum(sizes[1:]), sizes[0], sum(sizes[1:])
    assert off == 2 * B * 4 * R * (C_in + C_rest)
    assert on == 2 * B * (R * C_in + 3 * R * C_rest)


def test_the_tiled_paper_model_multiplies_each_input_tile_once(monkeypatch):
    """The same on the tiled store: the kernel sees the input slot's stored tiles once per
    call and the other tiles in steps 2-4 only (counted through the layouts it is given)."""
    import seq2d.engines.tiled as tiled

    calls = []
    real = tiled.bsmm

    def counting(x, wp, layout, kernel):
        calls.append(layout.nnz)
        return real(x, wp, layout, kernel)

    monkeypatch.setattr(tiled, "bsmm", counting)
    sizes = [64, 32, 32, 16, 16]
    m = seq2d.randomize(seq2d.mlp(sizes), granularity="tile", seed=0, tile=16)
    core = core_of(m)
    L = core.store.matrix._layout
    T, toff = L.tile, core.store.matrix.toff
    n_in = int((L.col < toff[1]).sum())  # stored tiles in the input slot's tile-columns
    assert 0 < n_in < L.nnz
    m(torch.randn(8, sizes[0]))
    assert calls == [n_in] + [L.nnz - n_in] * 3
    calls.clear()
    core.use_held_products = False
    m(torch.randn(8, sizes[0]))
    assert calls == [L.nnz] * 4


def test_autograd_nodes_of_an_iterated_call_stay_constant_in_the_slots():
    counts = {}
    for n in (6, 48, 192):
        m = _held_model(n=n, size=3, held=(0, 1, 2), density=0.2)
        state = [torch.randn(2, s, dtype=D) if i in m.inputs else None for i, s in enumerate(m.sizes)]
        out = m(state, 3)
        counts[n] = autograd_nodes(*[t for t in out if t is not None and t.requires_grad][:1])
    assert len(set(counts.values())) == 1, counts
