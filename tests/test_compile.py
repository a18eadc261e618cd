"""torch.compile works on Sequential2D models (CPU, inductor)."""

import torch

import seq2d


def test_torch_compile_mlp_and_rnn():
    torch._dynamo.reset()
    mlp = seq2d.mlp([6, 8, 4])
    x = torch.randn(5, 6)
    cm = torch.compile(mlp)
    torch.testing.assert_close(cm(x), mlp(x), rtol=1e-5, atol=1e-6)
    # gradients flow through the compiled graph
    cm(x).sum().backward()
    assert all(p.grad is not None for p in mlp.parameters())

    rnn = seq2d.rnn(3, 5, num_layers=2)
    xs = torch.randn(4, 2, 3)
    cr = torch.compile(rnn)
    y, h = cr(xs)
    y_ref, h_ref = rnn(xs)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h, h_ref, rtol=1e-5, atol=1e-6)
