"""Sequence mode by components (seq2d/core/sequence.py) equals the reference step loop.

Every case runs ``sequence`` twice on the same float64 tensors, scheduled and inside
``schedule.step_loop()``, and compares the outputs, the final state (None pattern too) and
the gradients of one random functional of both for the inputs, the initial state and
every parameter."""

import pytest
import torch
from torch import nn

import seq2d
from seq2d.core import sequence as schedule
from seq2d.blocks import ContextModule, LinearBlock
from seq2d.core import Sequential2D
from seq2d.core.sequence import sequence_by_components, step_loop, unsupported_reason
from seq2d.core.topology import components
from seq2d.testing import grads_of

DT = torch.float64
TOL = dict(rtol=0, atol=1e-12)


def _run(fn, xs, state, params, scheduled, seed=0):
    xs = xs.detach().clone().requires_grad_()
    st = None if state is None else [None if s is None else s.detach().clone().requires_grad_() for s in state]
    if scheduled:
        ys, fin = fn(xs, st)
    else:
        with step_loop():
            ys, fin = fn(xs, st)
    g = torch.Generator().manual_seed(seed)
    loss = (ys * torch.randn(ys.shape, generator=g, dtype=DT)).sum()
    for f in fin:
        if f is not None:
            loss = loss + (f * torch.randn(f.shape, generator=g, dtype=DT)).sum()
    leaves = [xs] + [s for s in (st or []) if s is not None] + list(params)
    return ys, fin, grads_of(loss, leaves)


def assert_same(fn, xs, state=None, params=()):
    a = _run(fn, xs, state, params, True)
    b = _run(fn, xs, state, params, False)
    torch.testing.assert_close(a[0], b[0], **TOL)
    assert len(a[1]) == len(b[1])
    for k, (p, q) in enumerate(zip(a[1], b[1])):
        assert (p is None) == (q is None), f"final state slot {k}"
        if p is not None:
            torch.testing.assert_close(p, q, **TOL, msg=lambda m: f"final state slot {k}: {m}")
    for k, (p, q) in enumerate(zip(a[2], b[2])):
        if p is None or q is None:
            assert (p is None or not p.abs().any()) and (q is None or not q.abs().any()), f"gradient {k}"
        else:
            torch.testing.assert_close(p, q, **TOL, msg=lambda m: f"gradient {k}: {m}")


def _seq(model, pipeline=True):
    assert unsupported_reason(model, pipeline) is None, unsupported_reason(model, pipeline)
    return lambda xs, st: model.sequence(xs, st, pipeline=pipeline)


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("act", ["tanh", "relu"])
@pytest.mark.parametrize("h0", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_rnn_wrapper(layers, act, h0, batch_first):
    r = seq2d.rnn(3, 4, num_layers=layers, nonlinearity=act, batch_first=batch_first, dtype=DT)
    x = torch.randn(2, 6, 3, dtype=DT) if batch_first else torch.randn(6, 2, 3, dtype=DT)
    hx = torch.randn(layers, 2, 4, dtype=DT) if h0 else None
    assert unsupported_reason(r.core) is None

    def fn(xs, st):
        out, h = r(xs, st[0] if st else None)
        return out, [h]

    assert_same(fn, x, [hx] if h0 else None, r.parameters())


@pytest.mark.parametrize("pipeline", [True, False])
@pytest.mark.parametrize("T", [1, 2, 7])
def test_rnn_core_state_with_none_slots(pipeline, T):
    r = seq2d.rnn(3, 5, num_layers=3, dtype=DT)
    xs = torch.randn(T, 4, 3, dtype=DT)
    st = [None, torch.randn(4, 5, dtype=DT), None, torch.randn(4, 5, dtype=DT)]
    assert_same(_seq(r.core, pipeline), xs, st, r.parameters())
    assert_same(_seq(r.core, pipeline), xs, None, r.parameters())


def test_from_torch_rnn_and_unbatched():
    torch.manual_seed(3)
    ref = nn.RNN(4, 6, num_layers=2, dtype=DT)
    ours = seq2d.from_torch(ref)
    x = torch.randn(5, 3, 4, dtype=DT)
    assert_same(lambda xs, st: (lambda out, h: (out, [h]))(*ours(xs)), x, None, ours.parameters())
    assert_same(_seq(ours.core), torch.randn(5, 4, dtype=DT), None, ours.parameters())  # batch ()
    assert_same(_seq(ours.core), torch.randn(5, 2, 3, 4, dtype=DT), None, ours.parameters())  # batch (2, 3)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], ref(x)[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("pipeline", [True, False])
def test_truncated_rnn_core(pipeline):
    tr = seq2d.truncated_rnn(seq2d.rnn(2, 3, num_layers=2, dtype=DT), 3)
    xs = torch.randn(6, 2, 6, dtype=DT)
    assert_same(_seq(tr.core, pipeline), xs, None, tr.parameters())


def _random_mask(n, density, seed, held=()):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(n, n, generator=g) < density
    m[0] = False
    for k in range(1, n):  # a chain from the input keeps most slots reachable
        if k - 1 not in held:
            m[k, k - 1] = True
    for h in held:
        m[h] = False
    return m


def _layered_mask(n, seed, held=()):
    """Cycles only inside random groups of consecutive slots, random forward skips between groups."""
    g = torch.Generator().manual_seed(seed)
    cuts = sorted(set(torch.randint(2, n, (3,), generator=g).tolist()))
    group = [sum(k >= c for c in cuts) for k in range(n)]
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(1, n):
        for j in range(n):
            r = float(torch.rand((), generator=g))
            if (j < i and r < 0.35) or (j >= i and group[i] == group[j] and r < 0.5):
                m[i, j] = True
        m[i, i - 1] = True
    for h in held:
        m[h] = False
    return m


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("pipeline", [True, False])
def test_random_cyclic_masks(seed, pipeline):
    n = 7 if seed < 6 else 9
    held = (3,) if seed % 2 else ()
    mask = _random_mask(n, 0.3, seed, held) if seed < 4 else _layered_mask(n, seed, held)
    sizes = [2 + (k * 3 + seed) % 4 for k in range(n)]
    m = seq2d.from_mask(sizes, mask, activations="tanh", seed=seed, inputs=[0], outputs=[n - 1, n - 2], dtype=DT)
    comps = components(m._rows)
    assert sorted(i for c in comps for i in c) == sorted(m._rows)
    pos = {i: k for k, c in enumerate(comps) for i in c}
    assert all(pos[j] <= pos[i] for i in m._rows for j in m._rows[i] if j in pos)
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(5, 3, sizes[0], generator=g, dtype=DT)
    st = [None if (k % 3 == 1 or k == 0) else torch.randn(3, sizes[k], generator=g, dtype=DT) for k in range(n)]
    assert_same(_seq(m, pipeline), xs, st, m.parameters())
    assert_same(_seq(m, pipeline), xs[:1], None, m.parameters())


class _Shift(nn.Module):  # not known to be position-wise: called once per wave
    def __init__(self, a, b):
        super().__init__()
        self.lin = nn.Linear(a, b, dtype=DT)

    def forward(self, x):
        return torch.sin(self.lin(x)) + 0.5


def _mixed_model():
    """Multi-delay cycle {1, 2}, a skip 1 -> 4 across components, module and identity blocks
    between and inside components (a custom one read with a shift), a held non-input slot 5
    (also an output), an unreachable self-loop 6 without bias or input feeding slots 3 and 4
    (slot 3 reads ahead of its waves), a slot 7 fed only by the held slot, LayerNorm and
    custom activations, a LayerNorm slot 8 evaluated for all waves at once."""
    s = [3, 4, 4, 4, 4, 2, 4, 3, 5]
    L = lambda a, b: LinearBlock(s[b], s[a], dtype=DT)
    blocks = {
        (1, 0): L(1, 0), (1, 2): L(1, 2), (2, 1): L(2, 1), (2, 2): "identity",
        (3, 2): nn.Sequential(nn.Linear(4, 4, dtype=DT), nn.Tanh()), (3, 5): L(3, 5), (3, 3): _Shift(4, 4),
        (3, 6): L(3, 6), (4, 3): L(4, 3), (4, 1): "identity", (4, 6): L(4, 6), (4, 5): _Shift(2, 4),
        (4, 2): _Shift(4, 4), (4, 7): L(4, 7), (6, 6): L(6, 6), (7, 5): L(7, 5), (8, 4): L(8, 4),
    }
    acts = [None, "tanh", nn.LayerNorm(4, dtype=DT), "relu", nn.Softsign(), None, "tanh", "sigmoid",
            nn.LayerNorm(5, dtype=DT)]
    return Sequential2D(s, blocks, bias=[False, True, True, False, True, False, False, False, True], activations=acts,
                        inputs=[0], outputs=[4, 2, 5, 8], dtype=DT)


@pytest.mark.parametrize("pipeline", [True, False])
@pytest.mark.parametrize("T", [1, 2, 5])
@pytest.mark.parametrize("given", [False, True])
def test_modules_identities_held_and_multi_delay(pipeline, T, given):
    m = _mixed_model()
    assert m.delays() == (0, 0, 1, 2, 1, 0, 0, 0, 2)
    comps = components(m._rows)
    assert sorted(comps) == [(1, 2), (3,), (4,), (6,), (7,), (8,)]
    pos = {i: k for k, c in enumerate(comps) for i in c}
    assert all(pos[j] <= pos[i] for i in m._rows for j in m._rows[i] if j in pos)
    xs = torch.randn(T, 2, 3, dtype=DT)
    st = [None] * 9
    if given:
        st = [None, None, torch.randn(2, 4, dtype=DT), torch.randn(2, 4, dtype=DT), None,
              torch.randn(2, 2, dtype=DT), torch.randn(2, 4, dtype=DT), None, torch.randn(2, 5, dtype=DT)]
    assert_same(_seq(m, pipeline), xs, st, m.parameters())


@pytest.mark.parametrize("pipeline", [True, False])
def test_element_mask_and_frozen_values(pipeline):
    g = torch.Generator().manual_seed(5)
    sizes = [3, 4, 5, 4]
    N = sum(sizes)
    elem = torch.rand(N, N, generator=g) < 0.4
    elem[:3] = False  # slot 0: the input
    m = seq2d.from_mask(sizes, elem, activations="tanh", seed=5, inputs=[0], dtype=DT)
    blk = next(b for _, _, k, b in m.positions() if k == "linear" and b.mask is not None)
    blk.frozen = torch.randn(blk.shape, generator=g, dtype=DT) * (~blk.mask)
    assert blk.frozen is not None and m.store.frozen_0 is not None
    xs = torch.randn(4, 2, 3, generator=g, dtype=DT)
    assert_same(_seq(m, pipeline), xs, [None, torch.randn(2, 4, generator=g, dtype=DT), None, None], m.parameters())


def test_two_inputs_and_input_as_output():
    s = [2, 3, 4, 4]
    blocks = {(2, 0): LinearBlock(2, 4, dtype=DT), (2, 1): LinearBlock(3, 4, dtype=DT),
              (2, 2): LinearBlock(4, 4, dtype=DT), (3, 2): LinearBlock(4, 4, dtype=DT),
              (3, 1): LinearBlock(3, 4, dtype=DT)}
    m = Sequential2D(s, blocks, bias=True, activations="tanh", inputs=[0, 1], outputs=[3, 1, 2], dtype=DT)
    assert_same(_seq(m), torch.randn(4, 2, 5, dtype=DT), None, m.parameters())


def test_gradcheck_tiny_rnn():
    r = seq2d.rnn(2, 3, num_layers=2, dtype=DT)
    names = [k for k, _ in r.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in r.parameters()]
    xs = torch.randn(3, 2, 2, dtype=DT, requires_grad=True)
    h0 = torch.randn(2, 2, 3, dtype=DT, requires_grad=True)

    def f(xs, h0, *ps):
        out, h = torch.func.functional_call(r, dict(zip(names, ps)), (xs, h0))
        return out, h

    assert torch.autograd.gradcheck(f, (xs, h0, *params))


def test_fallbacks_are_named():
    r = seq2d.rnn(3, 4, num_layers=2)
    assert unsupported_reason(r.core) is None
    r.core.loop = True
    assert "loop" in unsupported_reason(r.core)
    r.core.loop = False
    assert unsupported_reason(r.core) is None
    m = seq2d.from_mask([4, 4, 4], torch.tensor([[0, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=torch.bool))
    m.to_blocksparse(tile=16)
    assert "tiled" in unsupported_reason(m)
    assert m.sequence(torch.randn(3, 2, 4))[0].shape == (3, 2, 4)  # the step loop runs

    class Ctx(ContextModule):
        def forward(self, x, **context):
            return x

    c = Sequential2D([2, 2], {(1, 0): Ctx(), (1, 1): LinearBlock(2, 2)})
    assert "context" in unsupported_reason(c)
    xs = torch.randn(3, 1, 2)
    assert sequence_by_components(c, xs, [xs[0], None], True, {}) is None
    nested = Sequential2D([2, 2], {(1, 0): seq2d.mlp([2, 2]), (1, 1): LinearBlock(2, 2)})
    assert "Sequential2D" in unsupported_reason(nested)
    d = Sequential2D([2, 2], {(1, 0): nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)), (1, 1): LinearBlock(2, 2)})
    assert "Dropout" in unsupported_reason(d)
    d.eval()
    assert unsupported_reason(d) is None
    e = Sequential2D([2, 2], {(0, 1): LinearBlock(2, 2), (1, 0): LinearBlock(2, 2)}, inputs=[0])
    assert "input slot" in unsupported_reason(e)
    with pytest.raises(TypeError, match="Sequential2D"):
        unsupported_reason(nn.Linear(2, 2))


def test_flags_force_the_step_loop():
    r = seq2d.rnn(3, 4, num_layers=2, dtype=DT)
    xs = torch.randn(4, 2, 3, dtype=DT)
    st = r.core.check_state([xs[0], None, None])
    assert sequence_by_components(r.core, xs, st, True, {}) is not None
    with step_loop():
        assert sequence_by_components(r.core, xs, st, True, {}) is None
    assert schedule.ENABLED
    r.core.use_schedule = False
    assert sequence_by_components(r.core, xs, st, True, {}) is None
