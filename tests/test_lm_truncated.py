"""The LMs' k-truncated path with their own parameters (RNNLM.window_features), the adaptive
softmax decoder, evaluation with carried state, data lambda of LMs (tanh and LSTM) and the
training loop of experiments/stable_rnn/truncated_training.py, each against a plain reference."""

import math

import pytest
import torch
from torch import nn

import seq2d
from seq2d.errors import InvalidInput, InvalidType
from seq2d.lab.wikitext import Corpus, batchify
from seq2d.lab.lm import (RNNLM, evaluate, grad_norm_carried, grad_norm_windows, lm_data_lambda, output_nll, output_scores, train_lm,
                          weight_distance)
from seq2d.lab.lstm import LSTMProjection, lstm_contraction_bound, lstm_data_lambda, lstm_state_map, lstm_step_jacobian
from seq2d.stability import DataLambda, SpectralClip, certified_lambda, data_lambda

torch.set_num_threads(1)
F64 = torch.float64


def lm64(cell, **kw):
    torch.manual_seed(0)
    kw.setdefault("dropout", 0.0)
    return RNNLM(30, emb=5, hidden=7, layers=2, cell=cell, dtype=F64, **kw).eval()


def window_reference(lm, tokens, k, context=None):
    """The definition, one position at a time: the recurrent part from a zero state over the
    last k tokens of the stream up to t (context first)."""
    stream = tokens if context is None else torch.cat([context, tokens])
    c = 0 if context is None else context.shape[0]
    outs = []
    for t in range(c, stream.shape[0]):
        win = stream[max(0, t - k + 1):t + 1]
        y, _ = lm.rnn(lm.encoder(win))
        outs.append(y[-1])
    return torch.stack(outs)


@pytest.mark.parametrize("cell", ["tanh", "lstm"])
@pytest.mark.parametrize("k,T,c", [(1, 5, 0), (3, 6, 0), (3, 6, 2), (3, 6, 1), (4, 2, 0), (4, 2, 3), (5, 9, 7), (9, 4, 0)])
def test_window_features_equal_the_definition_and_truncated_lm(cell, k, T, c):
    lm = lm64(cell)
    g = torch.Generator().manual_seed(k * 100 + T * 10 + c)
    stream = torch.randint(0, 30, (c + T, 3), generator=g)
    ctx, tokens = (stream[:c], stream[c:]) if c else (None, stream)
    with torch.no_grad():
        got = lm.window_features(tokens, k, ctx)
        ref = window_reference(lm, tokens, k, ctx)
        cop = lm.truncated(k).features(tokens, ctx)
    assert got.shape == (T, 3, 7)
    assert torch.allclose(got, ref, atol=1e-12, rtol=0)
    assert torch.allclose(cop, ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("cell", ["tanh", "lstm"])
def test_window_features_are_differentiable_like_the_definition(cell):
    lm = lm64(cell)
    tokens = torch.randint(0, 30, (6, 2), generator=torch.Generator().manual_seed(1))
    params = [p for p in lm.rnn.parameters()]
    ga = torch.autograd.grad(lm.window_features(tokens, 3).square().sum(), params)
    gb = torch.autograd.grad(window_reference(lm, tokens, 3).square().sum(), params)
    for a, b in zip(ga, gb):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)
    # gradcheck through the window path wrt the embedded input of a small model
    x = torch.randn(5, 2, 5, dtype=F64, requires_grad=True)
    from seq2d.lab.lm.model import _windows
    assert torch.autograd.gradcheck(lambda z: _windows(lm.rnn, z, 0, 3), (x,))
    # k >= the stream's length is the recurrent model from a zero state
    with torch.no_grad():
        full, _ = lm.features(tokens)
        assert torch.allclose(lm.window_features(tokens, 6), full, atol=1e-12, rtol=0)


def test_adaptive_softmax_decoder():
    torch.manual_seed(0)
    lm = RNNLM(40, emb=6, hidden=8, layers=1, dropout=0.0, adaptive_cutoffs=[5, 20], div_value=2.0, dtype=F64).eval()
    assert isinstance(lm.decoder, nn.AdaptiveLogSoftmaxWithLoss) and "adaptive_cutoffs=[5, 20]" in repr(lm)
    tokens = torch.randint(0, 40, (4, 3))
    targets = torch.randint(0, 40, (4, 3))
    scores, _ = lm(tokens)
    assert scores.shape == (4, 3, 40)
    assert torch.allclose(scores.logsumexp(-1), torch.zeros(4, 3, dtype=F64), atol=1e-12)  # log-probabilities
    feats, _ = lm.features(tokens)
    ref = -scores.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(lm.nll(feats, targets, "none"), ref, atol=1e-12)
    assert torch.allclose(lm.nll(feats, targets), ref.sum(), atol=1e-10)
    assert torch.allclose(lm.nll(feats, targets, "mean"), ref.mean(), atol=1e-12)
    # a linear decoder: the same functions are cross-entropy of logits
    lin = nn.Linear(8, 40, dtype=F64)
    assert torch.allclose(output_nll(lin, feats, targets, "mean"),
                          nn.functional.cross_entropy(output_scores(lin, feats).reshape(-1, 40), targets.reshape(-1)))
    for bad in ([0, 5], [5, 5], [5, 40], [20, 5], [2.5]):
        with pytest.raises(ValueError, match="adaptive_cutoffs"):
            RNNLM(40, emb=6, hidden=8, adaptive_cutoffs=bad)
    with pytest.raises(ValueError, match="tie_weights"):
        RNNLM(40, emb=8, hidden=8, adaptive_cutoffs=[5], tie_weights=True)
    with pytest.raises(ValueError, match="projection of size 0"):  # 8 // 4**2 == 0
        RNNLM(40, emb=8, hidden=8, adaptive_cutoffs=[5, 20])
    with pytest.raises(ValueError, match="reduction"):
        lm.nll(feats, targets, "max")


@pytest.mark.parametrize("cell", ["tanh", "lstm"])
def test_evaluate_truncated_mode_equals_the_copied_truncated_model(cell):
    lm = lm64(cell, adaptive_cutoffs=[10])
    src = batchify(torch.randint(0, 30, (200,), generator=torch.Generator().manual_seed(2)), 4)
    for k in (1, 3, 8):
        a = evaluate(lm, src, bptt=7, k=k)
        b = evaluate(lm.truncated(k), src, bptt=7)
        assert math.isfinite(a) and abs(a - b) <= 1e-12
    # a long window is the recurrent model as long as no segment's history is longer than k
    short = src[:6]
    assert abs(evaluate(lm, short, bptt=7, k=6) - evaluate(lm, short, bptt=7)) <= 1e-12
    with pytest.raises(ValueError, match="own k"):
        evaluate(lm.truncated(3), src, k=4)


def carried_reference(lm, source, D):
    """Brute force: for every segment start t of every column, the whole column prefix from a
    zero state, x_t's gradient of each loss_{t+i} taken directly."""
    sums, counts = torch.zeros(D, dtype=F64), [0] * D
    N, B = source.shape
    for b in range(B):
        col = source[:, b]
        for t in range(0, N - 1, D):
            L = min(D, N - 1 - t)
            x = lm.encoder(col[:t + L].unsqueeze(1)).detach().requires_grad_(True)
            out, _ = lm.rnn(x)
            losses = lm.nll(out, col[1:t + L + 1].unsqueeze(1), "none")[:, 0]
            for d in range(L):
                (g,) = torch.autograd.grad(losses[t + d], x, retain_graph=True)
                sums[d] += g[t, 0].norm()
                counts[d] += 1
    return [float(sums[d] / counts[d]) for d in range(D)], counts


@pytest.mark.parametrize("cell", ["tanh", "lstm"])
def test_grad_norm_carried_equals_brute_force(cell):
    lm = lm64(cell)
    source = batchify(torch.randint(0, 30, (46,), generator=torch.Generator().manual_seed(3)), 2)  # 23 rows
    got = grad_norm_carried(lm, source, max_distance=4)
    ref, counts = carried_reference(lm, source, 5)
    assert got["segments"] == 5 and got["columns"] == 2 and got["count"] == counts
    assert max(abs(a - b) for a, b in zip(got["curve"], ref)) <= 1e-12
    assert grad_norm_carried(lm, source, max_distance=4, max_segments=2)["segments"] == 2
    with pytest.raises(ValueError, match="max_distance"):
        grad_norm_carried(lm, source, max_distance=-1)


def windows_reference(lm, source, K, stride):
    """Brute force: every column from a zero state through its target row t in one piece, the
    gradient of loss_t with respect to every input taken directly; the targets t = K, K + stride, ..."""
    N, B = source.shape
    rows = []
    for b in range(B):
        col = source[:, b]
        for t in range(K, N - 1, stride):
            x = lm.encoder(col[:t + 1].unsqueeze(1)).detach().requires_grad_(True)
            out, _ = lm.rnn(x)
            loss = lm.nll(out[t], col[t + 1:t + 2], "sum")
            (g,) = torch.autograd.grad(loss, x)
            rows.append(torch.stack([g[t - k, 0].norm() for k in range(K + 1)]))
    r = torch.stack(rows)  # (targets, K + 1)
    return r.mean(0).tolist(), r.std(0).tolist(), r.shape[0]


@pytest.mark.parametrize("cell", ["tanh", "lstm"])
@pytest.mark.parametrize("stride, chunk", [(1, 256), (3, 4), (5, 1)])
def test_grad_norm_windows_equals_brute_force(cell, stride, chunk):
    lm = lm64(cell, adaptive_cutoffs=[10])
    source = batchify(torch.randint(0, 30, (46,), generator=torch.Generator().manual_seed(3)), 2)  # 23 rows
    got = grad_norm_windows(lm, source, max_distance=6, stride=stride, chunk=chunk)
    mean, sd, n = windows_reference(lm, source, 6, stride)
    assert got["targets"] == n == 2 * len(range(6, 22, stride)) and got["first_row"] == 6 and got["rows"] == 23
    assert max(abs(a - b) for a, b in zip(got["curve"], mean)) <= 1e-12
    assert max(abs(a - b) for a, b in zip(got["sd"], sd)) <= 1e-9
    assert lm.training is False


def test_grad_norm_windows_refuses_what_it_cannot_measure():
    lm = lm64("tanh")
    source = batchify(torch.randint(0, 30, (20,), generator=torch.Generator().manual_seed(3)), 2)  # 10 rows
    assert grad_norm_windows(lm, source, max_distance=8)["targets"] == 2  # row 8 only: row 9 has no next token
    for kw, match in (({"max_distance": 9}, "N >= max_distance \\+ 2"), ({"stride": 0}, "stride"),
                      ({"max_distance": -1}, "max_distance"), ({"chunk": 0}, "chunk")):
        with pytest.raises(ValueError, match=match):
            grad_norm_windows(lm, source, **kw)

def test_lstm_step_jacobian_matches_autograd():
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 6, 1, dtype=F64)
    x, h, c = torch.randn(3, 4, dtype=F64), torch.randn(3, 6, dtype=F64), torch.randn(3, 6, dtype=F64)
    w_ih, w_hh = lstm.weight_ih_l0.detach(), lstm.weight_hh_l0.detach()
    b = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()
    h2, c2, J = lstm_step_jacobian(w_ih, w_hh, b, x, h, c)
    step = lstm_state_map(lstm, 0)
    for n in range(3):
        def f(s, n=n):
            cc, hh = step(s[6:], s[:6], x[n])
            return torch.cat([hh, cc])
        ref = torch.func.jacrev(f)(torch.cat([h[n], c[n]]).detach())
        assert torch.allclose(J[n], ref, atol=1e-12)
        cc, hh = step(c[n], h[n], x[n])
        assert torch.allclose(h2[n], hh) and torch.allclose(c2[n], cc)


def test_lstm_data_lambda_is_below_the_certificate_on_a_projected_lstm():
    torch.manual_seed(0)
    lstm = nn.LSTM(5, 8, 2, dtype=F64).eval()
    LSTMProjection(lstm).project()
    cert = lstm_contraction_bound(lstm, 1.0)
    xs = torch.rand(30, 4, 5, dtype=F64) * 2 - 1  # |x|_inf <= 1
    r = lstm_data_lambda(lstm, xs)
    assert isinstance(r, DataLambda) and len(r["cores"]) == 2 and r["cores"][0]["per_step"].shape == (30, 4)
    assert cert < 1 and 0 < r["max_inf"] <= cert + 1e-12
    # the spectral norm is an exact matrix norm: check one step against torch's
    w = [getattr(lstm, n).detach() for n in ("weight_ih_l0", "weight_hh_l0")]
    b = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()
    _, _, J = lstm_step_jacobian(*w, b, xs[0], torch.zeros(4, 8, dtype=F64), torch.zeros(4, 8, dtype=F64))
    assert abs(float(torch.linalg.matrix_norm(J, ord=2).max()) - float(r["cores"][0]["per_step"][0].max())) <= 1e-12
    with pytest.raises(InvalidInput, match="shape"):
        lstm_data_lambda(lstm, torch.zeros(3, 2, 4))
    # the library's data_lambda measures Sequential2D models only: an nn.LSTM is refused, naming where it is measured
    with pytest.raises(InvalidType, match="seq2d.lab.lstm.lstm_data_lambda"):
        data_lambda(lstm, xs)
    with pytest.raises(InvalidType, match="nn.LSTM"):
        lstm_data_lambda(seq2d.rnn(5, 8), xs)


def test_lm_data_lambda_tanh_and_lstm():
    for cell in ("tanh", "lstm"):
        lm = lm64(cell)
        tokens = torch.randint(0, 30, (12, 3), generator=torch.Generator().manual_seed(4))
        r = lm_data_lambda(lm, tokens)
        assert r["max"] > 0 and len(r["cores"]) == 2
        if cell == "tanh":
            assert r["max"] <= certified_lambda(lm.rnn)["lambda"] + 1e-9
            direct = data_lambda(lm.rnn, lm.encoder(tokens).detach())
            assert abs(direct["max"] - r["max"]) <= 1e-12


def test_corpus_by_frequency(tmp_path):
    (tmp_path / "wikitext-2").mkdir()
    (tmp_path / "wikitext-2" / "train.txt").write_text("b a a c\n c c a\n")
    (tmp_path / "wikitext-2" / "valid.txt").write_text("a z\n")
    (tmp_path / "wikitext-2" / "test.txt").write_text("c b\n")
    a, f = Corpus(tmp_path), Corpus(tmp_path, order="frequency")
    # counts: a 3, c 3, <eos> 2, b 1: ties keep first appearance (a before c)
    assert f.dictionary.idx2word[:4] == ["a", "c", "<eos>", "b"]
    assert torch.bincount(f.train).tolist() == sorted(torch.bincount(f.train).tolist(), reverse=True)
    for split in ("train", "valid", "test"):  # the same words, renumbered
        wa = [a.dictionary.idx2word[i] for i in getattr(a, split)]
        wf = [f.dictionary.idx2word[i] for i in getattr(f, split)]
        assert wa == wf
    assert all(f.dictionary.word2idx[w] == i for i, w in enumerate(f.dictionary.idx2word))
    with pytest.raises(ValueError, match="order"):
        Corpus(tmp_path, order="alphabetical")


def test_train_lm_recurrent_and_truncated():
    g = torch.Generator().manual_seed(5)
    # a learnable stream: the next token is (token + 1) mod 7 most of the time
    x = [0]
    for _ in range(1999):
        x.append((x[-1] + 1) % 7 if torch.rand(1, generator=g) < 0.9 else int(torch.randint(0, 7, (1,), generator=g)))
    data = torch.tensor(x)
    train, valid = batchify(data[:1600], 8), batchify(data[1600:], 4)
    results, models = {}, {}
    for k in (None, 1, 3):
        torch.manual_seed(0)
        lm = RNNLM(7, emb=6, hidden=8, layers=1, dropout=0.0, adaptive_cutoffs=[3])
        init = RNNLM(7, emb=6, hidden=8, layers=1, dropout=0.0, adaptive_cutoffs=[3])
        init.load_state_dict(lm.state_dict())
        calls = []
        clip = SpectralClip(lm.rnn, 0.9)
        r = train_lm(lm, train, valid, epochs=2, lr=2.0, bptt=10, k=k, log=None,
                     stabilize=lambda: calls.append(clip.project()))
        results[k], models[k] = r, lm
        assert len(r["history"]) == 2 and r["diverged"] is None
        assert len(calls) == r["updates"] == 2 * 20  # 200 rows / bptt 10 = 20 batches per epoch
        assert r["best_valid_loss"] < math.log(7)  # learned something
        assert certified_lambda(lm.rnn)["lambda"] <= 0.9 + 1e-6
    # k = 1 sees only the current token: enough here; and the distance is a real distance
    d = weight_distance(models[3], models[None], reference=init)
    assert d["recurrent"] > 0 and d["all"] >= d["recurrent"] and d["recurrent_moved"] > 0
    assert weight_distance(models[3], models[3])["all"] == 0.0
    with pytest.raises(ValueError, match="different parameters"):
        weight_distance(models[3], RNNLM(7, emb=6, hidden=9, layers=1))
    with pytest.raises(ValueError, match="k must"):
        train_lm(models[3], train, valid, epochs=1, k=0)


def test_train_lm_stops_on_a_non_finite_loss_and_keeps_the_best_weights():
    torch.manual_seed(0)
    data = torch.randint(0, 7, (800,), generator=torch.Generator().manual_seed(6))
    train, valid = batchify(data[:640], 8), batchify(data[640:], 4)
    lm = RNNLM(7, emb=6, hidden=8, layers=1, dropout=0.0)
    r1 = train_lm(lm, train, valid, epochs=1, lr=1.0, bptt=10, log=None)
    good = {n: p.detach().clone() for n, p in lm.named_parameters()}
    calls = {"n": 0}
    nll = lm.nll

    def poisoned(*a, **kw):
        calls["n"] += 1
        out = nll(*a, **kw)
        return out * float("nan") if calls["n"] == 3 and lm.training else out

    lm.nll = poisoned
    r2 = train_lm(lm, train, valid, epochs=2, lr=1.0, bptt=10, log=None)
    assert r1["diverged"] is None and r1["history"]
    assert r2["diverged"] == "non-finite training loss at epoch 1, by batch 3" and r2["history"] == []
    assert r2["updates"] == 2  # the poisoned update is never applied
    # no epoch finished, so no best state: the weights are those of the two good updates, all finite
    assert all(torch.isfinite(p).all() for p in lm.parameters())
    assert any(not torch.equal(p, good[n]) for n, p in lm.named_parameters())


def test_train_lm_lr_decay_is_the_inverse_t_rule():
    data = torch.randint(0, 7, (800,), generator=torch.Generator().manual_seed(7))
    train, valid = batchify(data[:640], 8), batchify(data[640:], 4)

    def fresh():
        torch.manual_seed(0)
        return RNNLM(7, emb=6, hidden=8, layers=1, dropout=0.0)

    one = fresh()
    train_lm(one, train, valid, epochs=1, lr=1.0, bptt=10, max_batches=1, log=None)
    # T tiny: update 0 runs at lr, every later update at lr / (1 + t / T) ~ 0
    decayed = fresh()
    r = train_lm(decayed, train, valid, epochs=1, lr=1.0, bptt=10, max_batches=4, lr_decay=1e-12, log=None)
    assert r["updates"] == 4
    for p, q in zip(one.parameters(), decayed.parameters()):
        assert torch.allclose(p, q, atol=1e-9, rtol=0)
    # T large: the same as a constant rate
    a, b = fresh(), fresh()
    train_lm(a, train, valid, epochs=1, lr=1.0, bptt=10, max_batches=4, log=None)
    train_lm(b, train, valid, epochs=1, lr=1.0, bptt=10, max_batches=4, lr_decay=1e30, log=None)
    # bitwise: lr / (1 + t / 1e30) is exactly lr, so both runs take the very same updates
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="lr_decay"):
            train_lm(a, train, valid, epochs=1, lr_decay=bad, log=None)
