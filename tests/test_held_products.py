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


@pytest.mark.parametrize("name", ["random_model", "random_mask", "rnn", "from_mask", "mlp", "truncated_rnn"])
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
    import seq2d.stores.tiled as tiled

    calls = []
    real = tiled.bsmm

    def counting(x, wp, layout, kernel):
        calls.append(layout.nnz)
        return real(x, wp, layout, kernel)

    monkeypatch.setattr(tiled, "bsmm", counting)
    sizes = [64, 32, 32, 16, 16]
    m = seq2d.randomize(seq2d.mlp(sizes), granularity="tile", seed=3, tile=16)
    core = core_of(m)
    L = core.store.matrix._layout
    T, toff = L.tile, core.store.matrix.toff
    n_in = int((L.col < toff[1]).sum())  # stored tiles in the input slot's tile-columns
    assert 0 < n_in < L.nnz
    # the tensor call reads the output slot alone: its last steps compute only the rows it
    # depends on (Step.demand_schedule; this draw: all rows, all rows, 3 of 4, the output), each
    # step its rows' stored tiles outside the input's columns (see the output-demand tests below)
    sched = core._step().demand_schedule(core._all_rows_t, 4, core.outputs)
    assert [len(r) for r in sched] == [4, 4, 3, 1]

    def rest_tiles(rows):
        in_rows = torch.zeros(L.Mt, dtype=torch.bool)
        for i in rows:
            in_rows[toff[i]:toff[i + 1]] = True
        return int((in_rows[L.row] & (L.col >= toff[1])).sum())

    m(torch.randn(8, sizes[0]))
    assert calls == [n_in] + [rest_tiles(r) for r in sched[1:]]
    calls.clear()
    core.use_output_demand = False
    m(torch.randn(8, sizes[0]))
    assert calls == [n_in] + [L.nnz - n_in] * 3
    calls.clear()
    core.use_held_products = False
    m(torch.randn(8, sizes[0]))
    assert calls == [L.nnz] * 4


# ---------------------------------------------------------------- output demand (the tensor call)
def _tensor_call_gaps(core, x, steps) -> tuple[float, float]:
    """The tensor call (outputs only) against the docstring loop's output slots: the largest
    relative differences of the outputs and of every parameter's gradient."""
    ours = core(x, steps)
    state = core.split_inputs(x)
    ref_state = reference_forward(core, state, steps)
    like = next(t for t in ref_state if t is not None)
    ref = torch.cat([ref_state[o] if ref_state[o] is not None else like.new_zeros(*like.shape[:-1], core.sizes[o])
                     for o in core.outputs], dim=-1)
    w = torch.randn_like(ours)

    def gap(a, b):
        return float((a - b).abs().max() / (b.abs().max() + 1e-300)) if a.numel() else 0.0

    grads = 0.0
    for ga, gb in zip(_grads(core, (ours * w).sum()), _grads(core, (ref * w).sum())):
        ga = torch.zeros(()) if ga is None else ga
        gb = torch.zeros_like(ga) if gb is None else gb
        grads = max(grads, gap(ga, gb) if gb.abs().max() > 0 else float(ga.abs().max()))
    return gap(ours, ref), grads


@pytest.mark.parametrize("outputs", [None, [4], [3, 6], [5]])
@pytest.mark.parametrize("density", [0.2, 0.5])
def test_tensor_call_on_the_tiled_store_equals_the_loop(outputs, density):
    """The tiled store's tensor call leaves out, in its last steps, the rows the outputs do not
    read (Step.demand_schedule): equal to the loop's outputs in float64, with every gradient,
    for 1 to 5 steps; the schedule really leaves rows out for some of them."""
    m = _held_model(density=density, outputs=outputs).to_blocksparse(16)
    x = torch.randn(3, sum(m.sizes[i] for i in m.inputs), dtype=D)
    pruned = 0
    for steps in (1, 2, 3, 5):
        out, grads = _tensor_call_gaps(m, x, steps)
        assert out < 1e-12 and grads < 1e-10, (steps, out, grads)
        sched = m._step().demand_schedule(m._all_rows_t, steps, m.outputs)
        assert len(sched) == steps and sched[-1] == tuple(i for i in m._all_rows_t if i in m.outputs)
        pruned += sum(len(m._all_rows_t) - len(r) for r in sched)
    assert pruned > 0


def test_the_tiled_paper_model_tensor_call_equals_the_loop():
    sizes = [64, 32, 32, 16, 16]
    for granularity_seed in range(3):
        m = seq2d.randomize(seq2d.mlp(sizes), granularity="tile", seed=granularity_seed, tile=16).to(D)
        out, grads = _tensor_call_gaps(m, torch.randn(5, sizes[0], dtype=D), 4)
        assert out < 1e-12 and grads < 1e-10, (granularity_seed, out, grads)


def test_output_demand_keeps_rows_with_module_blocks_or_other_activations():
    """A row with a module block (it may hold state or draw random numbers) or an activation that
    is not a known elementwise one is computed at every step, whatever the outputs read."""
    calls = []

    class Counting(torch.nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.lin = torch.nn.Linear(n_in, n_out, dtype=D)

        def forward(self, x):
            calls.append(1)
            return torch.tanh(self.lin(x))

    base = _held_model(held=(0,), outputs=[6])
    upd = base._all_rows_t
    plain = base.to_blocksparse(16)._step().demand_schedule(upd, 3, (6,))
    assert plain[-1] == (6,) and 3 not in plain[-1] and 5 not in plain[-1]
    base = _held_model(held=(0,), outputs=[6])
    grid = {(i, j): blk for i, j, _, blk in base.positions()}
    grid[(5, 0)] = Counting(base.sizes[0], base.sizes[5])
    acts = ["identity"] + ["tanh"] * (base.n - 1)
    acts[3] = "layernorm"
    m = seq2d.Sequential2D(base.sizes, grid, activations=acts, inputs=[0], outputs=[6], steps=3, dtype=D)
    m.to_blocksparse(16)
    for sched in (m._step().demand_schedule(upd, 3, (6,)), m._step().demand_schedule(upd, 1, (6,))):
        assert all(3 in r and 5 in r for r in sched) and 4 not in sched[-1], sched
    m(torch.randn(2, m.sizes[0], dtype=D), 3)
    assert len(calls) == 3
    out, grads = _tensor_call_gaps(m, torch.randn(2, m.sizes[0], dtype=D), 3)
    assert out < 1e-12 and grads < 1e-10, (out, grads)


def test_output_demand_off_switch_and_the_dense_store_compute_every_row():
    m = _held_model(outputs=[5])
    assert not m.store.partial_rows  # the dense store: a box costs all its rows anyway
    x = torch.randn(3, sum(m.sizes[i] for i in m.inputs), dtype=D)
    t = m.to_blocksparse(16)
    a = t(x, 3)
    t.use_output_demand = False
    b = t(x, 3)
    torch.testing.assert_close(a, b, **ulps(D))


def test_autograd_nodes_of_an_iterated_call_stay_constant_in_the_slots():
    counts = {}
    for n in (6, 48, 192):
        m = _held_model(n=n, size=3, held=(0, 1, 2), density=0.2)
        state = [torch.randn(2, s, dtype=D) if i in m.inputs else None for i, s in enumerate(m.sizes)]
        out = m(state, 3)
        counts[n] = autograd_nodes(*[t for t in out if t is not None and t.requires_grad][:1])
    assert len(set(counts.values())) == 1, counts


@pytest.mark.parametrize("tied", [False, True])
def test_tiled_held_split_with_masks_frozen_values_and_tied_blocks_equals_the_loop(tied):
    """The tiled store's held/rest split gathers both parts from the data with the mask and the
    frozen values applied (one Function, seq2d/stores/tiled.py ``_MaskedSplit``); with tied
    blocks it takes the per-position tiles instead. Both against the loop, float64, every
    gradient, list and tensor calls."""
    g = torch.Generator().manual_seed(5)
    sizes = [20, 12, 18, 12]
    grid = {}
    shared = seq2d.LinearBlock(sizes[1], sizes[1], mask=torch.rand(12, 12, generator=g) < 0.6, dtype=D)
    for i, j in [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (3, 2), (3, 0)]:
        fr = torch.randn(sizes[i], sizes[j], generator=g, dtype=D) * (torch.rand(sizes[i], sizes[j], generator=g) < 0.2)
        grid[(i, j)] = seq2d.LinearBlock(sizes[j], sizes[i], mask=torch.rand(sizes[i], sizes[j], generator=g) < 0.7,
                                         frozen=fr, dtype=D)
    if tied:
        grid[(1, 1)] = grid[(3, 1)] = shared  # one weight at two positions
    m = seq2d.Sequential2D(sizes, grid, activations="tanh", bias=True, inputs=[0], steps=3, dtype=D)
    m.to_blocksparse(16)
    assert m.store.matrix.frozen is not None and m.store.matrix.tmask is not None
    assert m.store.matrix.position_is_data == (not tied)
    state = [torch.randn(4, sizes[0], dtype=D), None, None, None]
    for steps in (1, 2, 3):
        out, grads = _relative_gaps(m, state, steps)
        assert out < 1e-12 and grads < 1e-10, (steps, out, grads)
    out, grads = _tensor_call_gaps(m, state[0], 3)
    assert out < 1e-12 and grads < 1e-10, (out, grads)
    # the gathered mask and frozen values follow in-place edits and replaced tensors
    mat = m.store.matrix
    with torch.no_grad():
        mat.frozen.mul_(-0.5)
    mat.tmask = mat.tmask & (torch.rand(mat.tmask.shape, generator=g) < 0.8)
    for steps in (2, 3):
        out, grads = _relative_gaps(m, state, steps)
        assert out < 1e-12 and grads < 1e-10, ("after edits", steps, out, grads)
