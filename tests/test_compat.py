"""torch users' habits honoured (issue 18): code written for ``nn.RNN`` runs on ``seq2d.rnn``,
the values seq2d does not model are refused by name, and the errors name the caller's argument."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from torch import nn

import seq2d
from seq2d.errors import InvalidInput, InvalidType, InvalidValue

F64 = torch.float64


# ----------------------------------------------------------------------------- rnn keywords
def test_rnn_takes_every_nn_rnn_keyword_at_its_default():
    kw = dict(input_size=3, hidden_size=4, num_layers=2, nonlinearity="tanh", bias=True, batch_first=False,
              dropout=0.0, bidirectional=False, device=None, dtype=None)
    ref = nn.RNN(**kw)
    ours = seq2d.rnn(**kw, proj_size=0)  # proj_size: RNNBase's default (nn.RNN refuses the keyword itself)
    assert (ours.input_size, ours.hidden_size, ours.num_layers) == (ref.input_size, ref.hidden_size, ref.num_layers)
    # nn.RNN's positional order: input_size, hidden_size, num_layers, nonlinearity, bias, batch_first,
    # dropout, bidirectional
    m = seq2d.rnn(3, 4, 1, "relu", False, True, 0.0, False)
    assert m.nonlinearity == "relu" and m.batch_first and m.core.bias(1) is None


@pytest.mark.parametrize("kw, exc, match", [
    (dict(bidirectional=True), InvalidValue, r"rnn: bidirectional=True is not supported"),
    (dict(num_layers=2, dropout=0.5), InvalidValue, r"rnn: dropout=0.5 between the 2 layers is not supported"),
    (dict(proj_size=2), InvalidValue, r"rnn: proj_size=2 is not supported"),
    (dict(dropout=1.5), InvalidValue, r"rnn: dropout must be a number in \[0, 1\].*got 1.5"),
    (dict(dropout="0.1"), InvalidType, r"rnn: dropout must be a number"),
    (dict(bidirectional=1), InvalidType, r"rnn: bidirectional must be a bool"),
    (dict(proj_size=0.0), InvalidType, r"rnn: proj_size must be an int"),
    (dict(input_size=3.0), InvalidType, r"rnn: input_size must be a positive int, got float 3.0"),
    (dict(hidden_size="10"), InvalidType, r"rnn: hidden_size must be a positive int, got str '10'"),
    (dict(num_layers=2.0), InvalidType, r"rnn: num_layers must be a positive int, got float 2.0"),
])
def test_rnn_refuses_what_it_does_not_model_by_name(kw, exc, match):
    args = dict(input_size=3, hidden_size=4)
    args.update(kw)
    with pytest.raises(exc, match=match):
        seq2d.rnn(**args)


def test_rnn_sizes_of_the_wrong_type_are_type_errors_as_in_nn_rnn():
    for bad in (3.0, "10"):
        with pytest.raises(TypeError):
            nn.RNN(bad, 4)
        with pytest.raises(TypeError):
            seq2d.rnn(bad, 4)


def test_rnn_one_layer_dropout_warns_and_does_nothing_as_nn_rnn():
    with pytest.warns(UserWarning, match="dropout"):
        nn.RNN(3, 4, dropout=0.5)
    with pytest.warns(UserWarning, match=r"rnn: dropout=0.5 has no effect with num_layers=1"):
        m = seq2d.rnn(3, 4, dropout=0.5)
    assert isinstance(m, seq2d.RNN)


def test_from_torch_rnn_dropout_rule_matches_rnn():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        one = nn.RNN(3, 4, dropout=0.3)  # no effect in torch: converted, equal in train mode too
    x = torch.randn(5, 2, 3)
    conv = seq2d.from_torch(one).train()
    torch.testing.assert_close(conv(x)[0], one.train()(x)[0])
    with pytest.raises(InvalidValue, match=r"from_torch: nn.RNN with dropout=0.3 between its 2 layers is not supported"):
        seq2d.from_torch(nn.RNN(3, 4, num_layers=2, dropout=0.3))


# ----------------------------------------------------------------------------- hx named
def test_rnn_hx_of_another_dtype_names_hx():
    m = seq2d.rnn(3, 4, num_layers=2)
    x = torch.randn(5, 2, 3)
    with pytest.raises(InvalidType, match=r"RNN: hx must have the input's dtype torch.float32 \(shape \(2, 2, 4\)\), "
                                          r"got hx of dtype torch.float64") as e:
        m(x, hx=torch.zeros(2, 2, 4, dtype=F64))
    assert "slot" not in str(e.value)
    with pytest.raises(InvalidType, match=r"RNN: hx must have the input's dtype"):  # unbatched too
        m(x[:, 0], hx=torch.zeros(2, 4, dtype=F64))


def test_rnn_hx_on_another_device_names_hx():
    m = seq2d.rnn(3, 4)
    with pytest.raises(InvalidInput, match=r"RNN: hx must be on the input's device cpu, got hx on meta"):
        m(torch.randn(5, 2, 3), hx=torch.zeros(1, 2, 4, device="meta"))


# ----------------------------------------------------------------------------- device="cuda" without a GPU
NO_CUDA = r"device 'cuda' is not available: this machine has no CUDA device \(torch.cuda.is_available\(\) is False\); use "


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU message needs a machine without CUDA")
@pytest.mark.parametrize("what, build", [
    ("from_spec", lambda: seq2d.from_spec(seq2d.to_spec(seq2d.mlp([3, 2])), device="cuda")),
    ("mlp", lambda: seq2d.mlp([3, 2], device="cuda")),
    ("rnn", lambda: seq2d.rnn(3, 4, device="cuda")),
    ("TransformerEncoderLayer", lambda: seq2d.transformer_layer(8, 2, 16, device="cuda")),
    ("RNNLM", lambda: __import__("seq2d.lab.lm", fromlist=["RNNLM"]).RNNLM(10, 4, 4, 1, device="cuda")),
    ("build_model", lambda: __import__("seq2d.train", fromlist=["build_model"]).build_model(
        __import__("seq2d.train", fromlist=["TrainConfig"]).TrainConfig(sizes=[4, 2]), device="cuda")),
])
def test_cuda_without_a_gpu_is_one_seq2d_error(what, build):
    with pytest.raises(InvalidValue, match=rf"^{what}: {NO_CUDA}device='cpu' or device=None"):
        build()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU message needs a machine without CUDA")
def test_train_config_device_cuda_without_a_gpu_says_cpu_or_auto(tmp_path):
    from seq2d.train import TrainConfig, Trainer, build_model, load_data

    cfg = TrainConfig(data="synthetic", sizes=[16, 4], device="cuda", out_dir=str(tmp_path))  # a config may travel
    match = rf"^config field 'device': {NO_CUDA}device = 'cpu' or 'auto'"
    with pytest.raises(InvalidValue, match=match):
        load_data(cfg)
    data = load_data(TrainConfig(data="synthetic", sizes=[16, 4]))
    with pytest.raises(InvalidValue, match=match):
        Trainer(cfg, build_model(cfg), data)


def test_rnn_reads_like_nn_rnn_and_names_the_input_dtype():
    m, ref = seq2d.rnn(3, 4, 2, bias=False), nn.RNN(3, 4, 2, bias=False)
    for name in ("input_size", "hidden_size", "num_layers", "nonlinearity", "bias", "batch_first", "dropout",
                 "bidirectional"):
        assert getattr(m, name) == getattr(ref, name), name
    assert m.proj_size == 0 and "bias=False" in repr(m)
    with pytest.raises(InvalidType, match=r"RNN: input has dtype torch.float64, but the RNN's parameters are "
                                          r"torch.float32"):
        m(torch.randn(5, 2, 3, dtype=F64))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU message needs a machine without CUDA")
def test_cli_device_cuda_without_a_gpu_is_one_line_in_flags(tmp_path, capsys):
    from seq2d.cli import main

    rc = main(["train", "--data", "synthetic", "--sizes", "16,4", "--device", "cuda", "--out-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert re.match(rf"seq2d: error: --device: {NO_CUDA}--device cpu or --device auto", err), err
