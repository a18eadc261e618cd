"""Generic checks over every registered constructor (timm-style): forward vs the
docstring loop, backward reaches every parameter, state_dict round trip, .to(dtype),
repr, pickle."""

import copy
import io
import pickle

import pytest
import torch

import seq2d
from seq2d import Sequential2D
from seq2d.core.reference import reference_forward
from seq2d.testing import example_input

# Small sizes for constructors whose defaults are large; other names use their defaults.
SMALL = {
    "mlp": dict(sizes=(7, 6, 5, 3)),
    "rnn": dict(input_size=4, hidden_size=5, num_layers=2),
    "truncated_rnn": dict(input_size=4, hidden_size=5, num_layers=2, k=3),
    "transformer_layer": dict(d_model=8, nhead=2, dim_feedforward=16),
    "transformer_encoder": dict(d_model=8, nhead=2, dim_feedforward=16, num_layers=2),
}
NAMES = seq2d.list_models()


def build(name, **kw):
    torch.manual_seed(0)
    return seq2d.create_model(name, **{**SMALL.get(name, {}), **kw})


def core_of(model):
    return model if isinstance(model, Sequential2D) else model.core


def run(model, x):
    out = model(*x)
    return out[0] if isinstance(out, tuple) else out


def test_registry_has_the_constructors():
    assert {"mlp", "rnn", "truncated_rnn", "from_mask"} <= set(NAMES)



@pytest.mark.parametrize("name", NAMES)
def test_core_forward_equals_docstring_loop(name):
    model = build(name, dtype=torch.float64)
    core = core_of(model)
    steps = core.steps if core.steps is not None else 3
    state = [torch.randn(2, 3, s, dtype=torch.float64) if i in core.inputs else None for i, s in enumerate(core.sizes)]
    if name.startswith("transformer"):
        state = [torch.randn(2, 5, s, dtype=torch.float64) if i in core.inputs else None for i, s in enumerate(core.sizes)]
    ours = core(state, steps)
    ref = reference_forward(core, state, steps)
    for a, b in zip(ours, ref):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_backward_reaches_every_parameter(name):
    model = build(name, dtype=torch.float64)
    x = example_input(model, dtype=torch.float64)
    y = run(model, x)
    (y * torch.randn_like(y)).sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{name}: {pname} received no gradient (disconnected block?)"
        assert p.grad.abs().sum() > 0, f"{name}: {pname} received an all-zero gradient"


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip(name):
    a = build(name)
    torch.manual_seed(123)
    b = seq2d.create_model(name, **SMALL.get(name, {}))
    x = example_input(a)
    b.load_state_dict(a.state_dict())
    # bitwise: one constructor, one configuration, the same weights: the very same kernels
    torch.testing.assert_close(run(a, x), run(b, x), rtol=0, atol=0)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b.load_state_dict(torch.load(buf, weights_only=True))
    torch.testing.assert_close(run(a, x), run(b, x), rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_to_dtype_reaches_every_parameter(name):
    model = build(name).to(torch.float64)
    assert all(t.dtype == torch.float64 for t in model.parameters())
    # every floating buffer converted; index buffers (int64, the tiled store's layout) and masks stay
    assert all(t.dtype == torch.float64 for t in model.buffers() if t.is_floating_point())
    assert all(t.dtype in (torch.bool, torch.int64) for t in model.buffers() if not t.is_floating_point())
    y = run(model, example_input(model))
    assert y.dtype == torch.float64
    assert model.num_parameters() == build(name).num_parameters()


@pytest.mark.parametrize("name", NAMES)
def test_repr_and_pickle(name):
    model = build(name)
    text = repr(model)
    assert type(model).__name__ in text
    x = example_input(model)
    clone = pickle.loads(pickle.dumps(model))  # copies of one model run the same kernels: bitwise
    torch.testing.assert_close(run(model, x), run(clone, x), rtol=0, atol=0)
    deep = copy.deepcopy(model)
    torch.testing.assert_close(run(model, x), run(deep, x), rtol=0, atol=0)
    # tied parameters stay tied in the copy
    assert deep.num_parameters() == model.num_parameters()


@pytest.mark.parametrize("name", NAMES)
def test_num_parameters_counts_unique_trainable(name):
    model = build(name)
    core = core_of(model)
    store = {id(p) for p in core.store.parameters()} if core.store is not None else set()
    # every parameter outside the linear store (biases, norms, module blocks) counts in full;
    # parameters() already de-duplicates ties
    expected = sum(p.numel() for p in model.parameters() if id(p) not in store)
    # linear blocks count their trainable entries, each tied block once
    expected += sum(int(blk.trainable_mask().sum()) for blk in {id(b): b for _, _, k, b in core.positions() if k == "linear"}.values())
    assert model.num_parameters() == expected
