"""The models that wrap one Sequential2D (seq2d.models.wrapper.CoreModel: seq2d.RNN, TruncatedRNN,
the transformer layer and encoder) answer the model methods a Sequential2D answers, and their
parameter counts against torch's (issue 31)."""

import pytest
import torch
from torch import nn

import seq2d
from seq2d.core import Sequential2D

DT = torch.float64


def _rnn():
    torch.manual_seed(0)
    m = seq2d.from_torch(nn.RNN(5, 16, num_layers=2, dtype=DT))
    return m, (torch.randn(7, 3, 5, dtype=DT),), lambda out: out[0]


def _truncated():
    torch.manual_seed(1)
    m = seq2d.truncated_rnn(nn.RNN(5, 16, dtype=DT), 3)
    return m, (torch.randn(7, 3, 5, dtype=DT),), lambda out: out


def _layer():
    torch.manual_seed(2)
    m = seq2d.from_torch(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, dtype=DT)).eval()
    return m, (torch.randn(3, 5, 16, dtype=DT),), lambda out: out


def _encoder():
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, dtype=DT)
    m = seq2d.from_torch(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)).eval()
    return m, (torch.randn(3, 5, 16, dtype=DT),), lambda out: out


WRAPPERS = {"RNN": _rnn, "TruncatedRNN": _truncated, "TransformerEncoderLayer": _layer, "TransformerEncoder": _encoder}


@pytest.mark.parametrize("kind", list(WRAPPERS))
def test_wrapper_answers_the_model_methods(kind):
    """``from_torch(nn.RNN(...)).to_blocksparse()`` used to raise AttributeError (it lived on
    ``.core`` only): every wrapper now answers to_blocksparse, summary, grid, num_parameters and
    store as its core does, and is called as before after to_blocksparse."""
    model, args, out = WRAPPERS[kind]()
    assert type(model).__name__ == kind and isinstance(model.core, Sequential2D)
    with torch.no_grad():
        before = out(model(*args)).clone()
    n = model.num_parameters()
    assert n == model.core.num_parameters() > 0
    text = model.summary()
    assert text.splitlines()[0].startswith(f"{kind}(") and text.endswith(model.core.summary())
    assert model.grid() == model.core.grid() and "W" in model.grid()
    assert model.store.kind == "dense"
    assert model.to_blocksparse(16) is model  # in place, returns the model (as Sequential2D's does)
    assert model.store.kind == model.core.store.kind == "tiled"
    assert "T" in model.grid() and model.num_parameters() == n
    with torch.no_grad():
        after = out(model(*args))
    torch.testing.assert_close(after, before, rtol=0, atol=1e-12)


@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_rnn_count_differs_from_torch_by_the_merged_biases(layers, bias):
    """nn.RNN's bias_ih and bias_hh are one slot bias in seq2d: the count is torch's minus exactly
    num_layers * hidden_size (one of the two biases per layer), and equal without biases."""
    ref = nn.RNN(16, 32, num_layers=layers, bias=bias)
    ours = seq2d.from_torch(ref)
    torch_count = sum(p.numel() for p in ref.parameters())
    merged = layers * 32 if bias else 0
    assert torch_count - ours.num_parameters() == merged


def test_docs_quote_the_rnn_counts():
    """The counts docs/concepts.md quotes for nn.RNN(16, 32) are the ones computed here."""
    from pathlib import Path

    ref = nn.RNN(16, 32)
    ours, theirs = seq2d.from_torch(ref).num_parameters(), sum(p.numel() for p in ref.parameters())
    text = (Path(__file__).resolve().parents[1] / "docs" / "concepts.md").read_text()
    assert f"`nn.RNN(16, 32)`: {ours:,} against torch's {theirs:,}" in text


def test_truncated_rnn_is_one_function_of_a_given_or_a_fresh_rnn():
    """``seq2d.truncated_rnn`` (the registry entry and the preset too) truncates the RNN it is given,
    or, given none, a fresh ``seq2d.rnn`` built from the size keywords: the same weights as that
    rnn under the same seed, and the same outputs as truncating it by hand; an rnn together with
    size keywords is refused (which sizes would be meant?)."""
    torch.manual_seed(4)
    fresh = seq2d.truncated_rnn(k=3, input_size=5, hidden_size=6, num_layers=2, dtype=DT)
    torch.manual_seed(4)
    by_hand = seq2d.truncated_rnn(seq2d.rnn(5, 6, 2, dtype=DT), 3)
    x = torch.randn(7, 2, 5, dtype=DT)
    assert isinstance(fresh, seq2d.TruncatedRNN) and (fresh.k, fresh.num_layers, fresh.hidden_size) == (3, 2, 6)
    assert torch.equal(fresh(x), by_hand(x))  # one path against itself: the same computation, bitwise
    assert type(seq2d.create_model("truncated_rnn", input_size=5, hidden_size=6, k=3)) is seq2d.TruncatedRNN
    with pytest.raises(ValueError, match="hidden_size given with an rnn"):
        seq2d.truncated_rnn(nn.RNN(5, 16), 3, hidden_size=8)
    with pytest.raises(ValueError, match="k must be a positive int"):
        seq2d.truncated_rnn(k=0)
