"""The LSTM projection (seq2d.lab.lstm.projection): a true projection, and the certified contraction holds."""

import copy
import math

import pytest
import torch
from torch import nn

from seq2d.lab.lm import RNNLM, clip_embedding_
from seq2d.lab.lstm import (
    GATES,
    PAPER_GATE_BOUNDS,
    AuthorLSTMNormalization,
    LSTMProjection,
    lstm_certificate,
    lstm_contraction_bound,
    lstm_contraction_sup,
    lstm_state_map,
    make_lstm_stabilizer,
)

torch.set_num_threads(1)


def big_lstm(input_size=6, hidden=10, layers=2, scale=1.0, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    m = nn.LSTM(input_size, hidden, layers).to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-scale, scale)
    return m


def rows_l1(w):
    return w.abs().sum(1)


def state_dict_copy(m):
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def gate(t, k, H):
    j = GATES.index(k)
    return t[j * H:(j + 1) * H]


def test_state_map_is_torch_lstm_step():
    m = big_lstm(scale=0.5)
    B, H = 5, m.hidden_size
    x = torch.randn(1, B, m.input_size, dtype=torch.float64)
    h0 = torch.randn(2, B, H, dtype=torch.float64)
    c0 = torch.randn(2, B, H, dtype=torch.float64)
    out, (h1, c1) = m(x, (h0, c0))
    c, h = lstm_state_map(m, 0)(c0[0], h0[0], x[0])
    torch.testing.assert_close((c, h), (c1[0], h1[0]))
    c, h = lstm_state_map(m, 1)(c0[1], h0[1], h1[0])  # layer 2 reads layer 1's new h
    torch.testing.assert_close((c, h), (c1[1], h1[1]))
    with pytest.raises(ValueError, match="layer"):
        lstm_state_map(m, 2)


def test_feasible_weights_are_left_bit_for_bit():
    m = big_lstm(scale=0.004)  # every row l1 <= 10 * 0.004 = 0.04, far inside every bound
    with torch.no_grad():
        for l in range(2):
            for name in ("bias_ih", "bias_hh"):
                gate(getattr(m, f"{name}_l{l}"), "f", 10).sub_(0.01)  # forget bias < 0
    before = state_dict_copy(m)
    emb = nn.Embedding(7, 6)
    with torch.no_grad():
        emb.weight.uniform_(-0.9, 0.9)
    emb_before = emb.weight.detach().clone()
    counts = LSTMProjection(m, embedding=emb).project()
    assert counts == {"rows": 0, "biases": 0, "embedding": 0}
    for k, v in m.state_dict().items():  # untouched: bitwise
        assert torch.equal(v, before[k]), k
    assert torch.equal(emb.weight, emb_before)


def test_only_offending_rows_move_to_exactly_the_bound():
    m = big_lstm(scale=0.3)
    H = m.hidden_size
    before = state_dict_copy(m)
    emb = nn.Embedding(9, 6)
    with torch.no_grad():
        emb.weight.uniform_(-2, 2)
    emb_before = emb.weight.detach().clone()
    LSTMProjection(m, embedding=emb).project()
    for l in range(2):
        whh0, whh = before[f"weight_hh_l{l}"], getattr(m, f"weight_hh_l{l}").detach()
        blocks = [(gate(whh0, k, H), gate(whh, k, H), b) for k, b in PAPER_GATE_BOUNDS.items()]
        wih0, wih = before[f"weight_ih_l{l}"], getattr(m, f"weight_ih_l{l}").detach()
        blocks.append((gate(wih0, "f", H), gate(wih, "f", H), 0.25))
        for k in ("i", "g", "o"):  # unconstrained input blocks: untouched
            assert torch.equal(gate(wih0, k, H), gate(wih, k, H))
        n_over = 0
        for old, new, bound in blocks:
            over = rows_l1(old) > bound
            n_over += int(over.sum())
            torch.testing.assert_close(rows_l1(new[over]), torch.full((int(over.sum()),), bound, dtype=new.dtype))
            assert torch.equal(new[~over], old[~over])  # rows within the bound: untouched, bitwise
            # scaled, not reshaped: every moved row is a positive multiple of the old one
            ratio = new[over] / old[over]
            torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio))
            assert bool((ratio > 0).all())
        assert n_over > 0
        # forget biases: the sum b_ih + b_hh is lowered to 0 where it was positive, else untouched
        for name in ("bias_ih", "bias_hh"):
            for k in ("i", "g", "o"):
                assert torch.equal(gate(before[f"{name}_l{l}"], k, H), gate(getattr(m, f"{name}_l{l}"), k, H))
        s0 = gate(before[f"bias_ih_l{l}"], "f", H) + gate(before[f"bias_hh_l{l}"], "f", H)
        s = gate(m.get_parameter(f"bias_ih_l{l}"), "f", H) + gate(m.get_parameter(f"bias_hh_l{l}"), "f", H)
        pos = s0 > 0
        assert bool(pos.any()) and bool((~pos).any())
        torch.testing.assert_close(s[pos], torch.zeros_like(s[pos]), atol=1e-12, rtol=0)
        assert torch.equal(s[~pos], s0[~pos])  # untouched: bitwise
    assert torch.equal(emb.weight, emb_before.clamp(-1, 1))  # clamping is exact: bitwise


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_projection_is_idempotent(dtype):
    m = big_lstm(scale=1.0, dtype=dtype)
    proj = LSTMProjection(m)
    first = proj.project()
    assert first["rows"] > 0 and first["biases"] > 0
    after_one = state_dict_copy(m)
    assert proj() == {"rows": 0, "biases": 0, "embedding": 0}
    for k, v in m.state_dict().items():  # nothing left to move: bitwise unchanged
        assert torch.equal(v, after_one[k]), k


def test_paper_constants_certify_lambda_0_9933():
    m = big_lstm(scale=1.0)
    LSTMProjection(m).project()
    cert = lstm_certificate(m, 1.0)
    for c in cert:
        assert c["lambda_f"] == pytest.approx(1 / (1 + math.exp(-0.405)), rel=1e-9)  # sigmoid(0.155 + 0.25) = 0.600
        assert c["c_bound"] == pytest.approx(1 / (1 - c["lambda_f"]), rel=1e-12)
        # each of the four terms is about (1 - lambda_f) / 4 = 0.1
        for term in (c["w_f"] * c["c_bound"] / 4, c["w_i"] / 4, c["w_g"], c["w_o"] / 4):
            assert 0.096 < term < 0.1
    assert lstm_contraction_bound(m, 1.0) == pytest.approx(0.99324, abs=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_projected_state_map_is_contractive_on_bounded_inputs(seed):
    m = big_lstm(input_size=6, hidden=16, layers=2, scale=1.0, seed=seed)
    LSTMProjection(m).project()
    B = 1.0
    lam = lstm_contraction_bound(m, B)
    assert lam < 1
    gen = torch.Generator().manual_seed(seed)

    def box(n, d, r):
        return (torch.rand(n, d, generator=gen, dtype=torch.float64) * 2 - 1) * r

    H, n = m.hidden_size, 4000
    for layer, cert in enumerate(lstm_certificate(m, B)):
        step = lstm_state_map(m, layer)
        C, d_in = cert["c_bound"], m.input_size if layer == 0 else H
        worst = 0.0
        for spread in (1.0, 1e-2, 1e-5):  # far-apart pairs and nearly equal ones (the local Lipschitz constant)
            c, h, x = box(n, H, C), box(n, H, 1.0), box(n, d_in, cert["input_bound"])
            c2 = (c + box(n, H, spread * C)).clamp(-C, C)
            h2 = (h + box(n, H, spread)).clamp(-1, 1)
            with torch.no_grad():
                a, b = step(c, h, x), step(c2, h2, x)
            num = torch.maximum((a[0] - b[0]).abs().amax(1), (a[1] - b[1]).abs().amax(1))
            den = torch.maximum((c - c2).abs().amax(1), (h - h2).abs().amax(1))
            worst = max(worst, float((num / den).max()))
            # the box |c| <= C, |h| <= 1 is invariant
            assert float(a[0].abs().max()) <= C and float(a[1].abs().max()) <= 1
        assert worst < 1 and worst <= cert["lambda"], (layer, worst, cert["lambda"])


def test_unprojected_large_lstm_is_not_certified():
    assert lstm_contraction_bound(big_lstm(scale=1.0), 1.0) >= 1
    torch.manual_seed(0)
    default = nn.LSTM(8, 64, 2).double()  # torch's init U(-1/8, 1/8): row l1 norms about 4
    lam = lstm_contraction_bound(default, 1.0)
    assert math.isfinite(lam) and lam > 1
    LSTMProjection(default).project()
    assert lstm_contraction_bound(default, 1.0) < 1


def test_trainer_callback_and_model_with_embedding():
    lm = RNNLM(30, emb=6, hidden=10, layers=2, dropout=0.0, cell="lstm")
    with torch.no_grad():
        lm.encoder.weight.uniform_(-3, 3)
        for p in lm.rnn.parameters():
            p.uniform_(-1, 1)
    proj = LSTMProjection(lm, embedding=lm.encoder)
    assert proj.lstms == [lm.rnn]
    proj.on_update_end(None, 1)
    assert float(lm.encoder.weight.detach().abs().max()) <= 1
    assert proj.certified_lambda() < 1
    assert lstm_contraction_bound(lm.rnn, float(lm.encoder.weight.detach().abs().max())) < 1


def test_errors():
    m = big_lstm()
    with pytest.raises(ValueError, match="Unknown gate 'z'"):
        LSTMProjection(m, gate_bounds={"z": 0.1})
    with pytest.raises(ValueError, match="Unknown norm"):
        LSTMProjection(m, norm="2")
    with pytest.raises(TypeError, match="no nn.LSTM"):
        LSTMProjection(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="proj_size"):
        LSTMProjection(nn.LSTM(3, 4, proj_size=2))
    with pytest.raises(ValueError, match="bidirectional"):
        lstm_contraction_bound(nn.LSTM(3, 4, bidirectional=True))
    with pytest.raises(ValueError, match="forget_input_bound"):
        LSTMProjection(m, forget_input_bound=-1)


# ---------------------------------------------------------------------- the author's normalisation
# (as described in the audit of issue 12; not checked against the author's code)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_author_normalization_sets_column_norms_of_layer_0(dtype):
    torch.manual_seed(3)
    m = nn.LSTM(7, 9, 2).to(dtype)  # torch's default init
    H = m.hidden_size
    before = state_dict_copy(m)
    counts = AuthorLSTMNormalization(m).project()
    assert counts == {"columns": 4 * H + 7, "embedding": 0}
    whh, wih = m.weight_hh_l0.detach().double(), m.weight_ih_l0.detach().double()
    for k in GATES:
        torch.testing.assert_close(gate(whh, k, H).abs().sum(0), torch.full((H,), PAPER_GATE_BOUNDS[k], dtype=torch.float64),
                                   atol=1e-6, rtol=0)
    torch.testing.assert_close(gate(wih, "f", H).abs().sum(0), torch.full((7,), 0.25, dtype=torch.float64), atol=1e-6, rtol=0)
    after = m.state_dict()
    for k in GATES:  # the other gates' input blocks are untouched
        if k != "f":
            assert torch.equal(gate(after["weight_ih_l0"], k, H), gate(before["weight_ih_l0"], k, H)), k
    for name, v in after.items():  # biases and layer 1 are untouched (default layers=(0,))
        if name not in ("weight_hh_l0", "weight_ih_l0"):
            assert torch.equal(v, before[name]), name
    # columns keep their direction (a rescaling, not a projection)
    ratio = m.weight_hh_l0.detach()[:H] / before["weight_hh_l0"][:H]
    torch.testing.assert_close(ratio, ratio[:1].expand_as(ratio))


def test_author_normalization_layers_embedding_and_interface():
    lm = RNNLM(30, emb=6, hidden=10, layers=2, dropout=0.0, cell="lstm")
    with torch.no_grad():
        lm.encoder.weight.uniform_(-3, 3)
    norm = make_lstm_stabilizer(lm, "author", embedding=lm.encoder, layers=None)
    assert isinstance(norm, AuthorLSTMNormalization) and norm.layers == (0, 1)
    norm.on_update_end(None, 1)
    assert float(lm.encoder.weight.detach().abs().max()) <= 1
    H = 10
    for l in (0, 1):
        w = getattr(lm.rnn, f"weight_hh_l{l}").detach()
        for k in GATES:
            torch.testing.assert_close(gate(w, k, H).abs().sum(0), torch.full((H,), PAPER_GATE_BOUNDS[k]), atol=1e-6, rtol=0)
    assert math.isfinite(norm.certified_lambda())  # reported, not guaranteed < 1
    assert isinstance(make_lstm_stabilizer(lm, "ours"), LSTMProjection)
    assert "audit of issue 12" in norm.describe() and "our variant" in make_lstm_stabilizer(lm, "ours").describe()
    with pytest.raises(ValueError, match="Unknown method"):
        make_lstm_stabilizer(lm, "paper")
    with pytest.raises(ValueError, match="layers"):
        AuthorLSTMNormalization(lm, layers=(2,))
    with pytest.raises(ValueError, match="Unknown gate"):
        AuthorLSTMNormalization(lm, gate_scales={"z": 1.0})


def test_clip_embedding():
    lm = RNNLM(20, emb=5, hidden=4, cell="lstm")
    with torch.no_grad():
        lm.encoder.weight.copy_(torch.linspace(-3, 3, 100).reshape(20, 5))
    w0 = lm.encoder.weight.detach().clone()
    n = clip_embedding_(lm, 1.0)
    assert n == int((w0.abs() > 1).sum()) > 0
    torch.testing.assert_close(lm.encoder.weight.detach(), w0.clamp(-1, 1), rtol=0, atol=0)  # clamping is exact
    assert clip_embedding_(lm.encoder, 1.0) == 0  # idempotent
    t = torch.tensor([-2.0, 0.5, 2.0])
    assert clip_embedding_(t, 0.5) == 2 and t.tolist() == [-0.5, 0.5, 0.5]
    with pytest.raises(ValueError, match="bound"):
        clip_embedding_(t, -1.0)
    with pytest.raises(TypeError):
        clip_embedding_([1.0], 1.0)


# ---------------------------------------------------------------------- the sup by optimisation
def _sampled_ratio(m, layer, cert, seed, n=2000):
    gen = torch.Generator().manual_seed(seed)

    def box(n, d, r):
        return (torch.rand(n, d, generator=gen, dtype=torch.float64) * 2 - 1) * r

    H, step = m.hidden_size, lstm_state_map(m, layer)
    C, d_in = cert["c_bound"], m.input_size if layer == 0 else H
    worst = 0.0
    for spread in (1.0, 1e-2, 1e-5):
        c, h, x = box(n, H, C), box(n, H, 1.0), box(n, d_in, cert["input_bound"])
        c2, h2 = (c + box(n, H, spread * C)).clamp(-C, C), (h + box(n, H, spread)).clamp(-1, 1)
        with torch.no_grad():
            a, b = step(c, h, x), step(c2, h2, x)
        num = torch.maximum((a[0] - b[0]).abs().amax(1), (a[1] - b[1]).abs().amax(1))
        den = torch.maximum((c - c2).abs().amax(1), (h - h2).abs().amax(1))
        worst = max(worst, float((num / den).max()))
    return worst


def test_contraction_sup_between_sampling_and_certificate():
    m = big_lstm(input_size=3, hidden=5, layers=2, scale=1.0, seed=0)
    LSTMProjection(m).project()
    res = lstm_contraction_sup(m, 1.0, restarts=4, steps=60, seed=0)
    assert [r["layer"] for r in res["per_layer"]] == [0, 1] and res["sup"] == max(r["sup"] for r in res["per_layer"])
    for cert, r in zip(lstm_certificate(m, 1.0), res["per_layer"]):
        sampled = _sampled_ratio(m, r["layer"], cert, seed=0)
        assert sampled <= r["sup"] <= cert["lambda"], (sampled, r["sup"], cert["lambda"])
        # the maximiser lies in the box, and the value is the Jacobian's inf-norm there
        assert float(r["c"].abs().max()) <= cert["c_bound"] * (1 + 1e-12) and float(r["h"].abs().max()) <= 1
        step = lstm_state_map(m, r["layer"])
        H = m.hidden_size
        J = torch.autograd.functional.jacobian(lambda s: torch.cat(step(s[:H], s[H:], r["x"])), torch.cat([r["c"], r["h"]]))
        assert float(J.abs().sum(1).max()) == pytest.approx(r["sup"], rel=1e-9)
    one = lstm_contraction_sup(m, 1.0, layer=1, restarts=2, steps=5, seed=1)
    assert one["layer"] == 1 and len(one["per_layer"]) == 1
    with pytest.raises(ValueError, match="restarts"):
        lstm_contraction_sup(m, 1.0, restarts=0)


@pytest.mark.parametrize("cls", ["LSTMProjection", "AuthorLSTMNormalization"])
def test_projection_without_counts_is_identical_and_reads_nothing_on_the_host(cls):
    """project(counts=False) (what on_update_end and the WikiText loop use) gives bit-identical
    weights and never reads a value on the host: it runs on the meta device, where any read
    (int(), .item(), bool()) raises, as a GPU sync would cost."""
    import seq2d.lab.lstm as L

    torch.manual_seed(0)
    a = nn.LSTM(6, 8, 2)
    emb_a = nn.Embedding(20, 6)
    with torch.no_grad():
        for p in list(a.parameters()) + [emb_a.weight]:
            p.mul_(4)  # well outside every bound
    b, emb_b = copy.deepcopy(a), copy.deepcopy(emb_a)
    getattr(L, cls)(a, embedding=emb_a).project()
    assert getattr(L, cls)(b, embedding=emb_b).project(counts=False) is None
    for p, q in zip(list(a.parameters()) + [emb_a.weight], list(b.parameters()) + [emb_b.weight]):
        assert torch.equal(p, q)  # the same ops (a multiply by exactly 1 where nothing moves): bitwise
    meta = nn.LSTM(6, 8, 2, device="meta")
    getattr(L, cls)(meta, embedding=nn.Embedding(20, 6, device="meta")).on_update_end(None, 1)
