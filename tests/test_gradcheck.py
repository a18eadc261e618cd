"""torch.autograd.gradcheck in float64 through the fused path: masks, frozen values,
tied blocks, identity and module blocks, shared biases, sequence mode."""

import torch
from torch import nn

import seq2d
from seq2d import LinearBlock, Sequential2D


def _model(store, loop=False):
    torch.manual_seed(0)
    d = torch.float64
    tied = LinearBlock(3, 3, dtype=d)
    mask = torch.rand(3, 4) < 0.6
    frozen = torch.randn(3, 4, dtype=d) * (~mask)
    grid = {
        (1, 0): LinearBlock(4, 3, mask=mask, frozen=frozen, dtype=d),
        (2, 1): tied,
        (3, 2): tied,
        (3, 0): nn.Linear(4, 3, dtype=d),
        (2, 2): "identity",
    }
    b = nn.Parameter(torch.randn(3, dtype=d))
    return Sequential2D([4, 3, 3, 3], grid, bias=[None, b, b, True], activations=[None, "tanh", "gelu", "layernorm"],
                        steps=3, store=store, loop=loop, dtype=d)


def test_gradcheck_every_store():
    for store, loop in (("dense", False), ("dense", True), ("auto", False)):  # the stores a small model gets, the loop mode
        m = _model(store, loop)
        params = [p for p in m.parameters()]
        x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)

        def f(x, *ps):
            return m(x)

        assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-6)


def test_gradcheck_rnn_sequence_mode():
    torch.manual_seed(0)
    r = seq2d.rnn(3, 4, num_layers=2, dtype=torch.float64)
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, h: r(x, h), (x, h0), eps=1e-6, atol=1e-6)
