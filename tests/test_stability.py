"""seq2d.stability: certified and data-dependent lambda, the spectral projection, Lemma 1.

References are plain computations: torch.linalg SVDs, the explicit state Jacobian
``diag(1 - h_t^2) W_hh`` of a tanh RNN, and the measured gap between an RNN and its
k-truncation (seq2d.truncated_rnn) on random bounded inputs.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import seq2d
from seq2d import LinearBlock, Sequential2D
from seq2d.cli import main
from seq2d.stability import (
    SpectralClip,
    certified_lambda,
    data_lambda,
    lemma1_bound,
    project_spectral_,
    recurrent_matrix,
    rnn_constants,
    spectral_norm,
    spectral_norm_bound,
    stacked_lemma1_bound,
    stacked_truncation_length,
    truncation_length,
)

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """These problems are tiny (8 x 8 Jacobians): a second intra-op thread only adds
    synchronisation, which on a loaded machine costs up to 100x (measured)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _norm(W) -> float:
    return float(torch.linalg.matrix_norm(W.detach().to(F64), ord=2))


def _scaled_rnn(d, H, lams, *, seed, nonlinearity="tanh", dtype=F64):
    """A seq2d RNN whose layer-l W_hh has spectral norm lams[l-1]."""
    torch.manual_seed(seed)
    r = seq2d.rnn(d, H, num_layers=len(lams), nonlinearity=nonlinearity, dtype=dtype)
    with torch.no_grad():
        for l, lam in enumerate(lams, start=1):
            W = r.core.block(l, l).weight
            W.mul_(lam / _norm(W))
    return r


def _bounded_inputs(T, B, d, bound, g):
    """x_t with ||x_t|| <= bound (random radius; a quarter of them exactly at the bound)."""
    x = torch.randn(T, B, d, generator=g, dtype=F64)
    r = torch.rand(T, B, 1, generator=g, dtype=F64)
    r[r > 0.75] = 1.0
    return x / x.norm(dim=-1, keepdim=True) * r * bound


# ---------------------------------------------------------------------- spectral norms
@pytest.mark.parametrize("shape", [(7, 7), (30, 12), (5, 40)])
def test_spectral_norm_matches_svd(shape):
    g = torch.Generator().manual_seed(1)
    W = torch.randn(shape, generator=g, dtype=F64)
    exact = float(torch.linalg.svdvals(W)[0])
    assert spectral_norm(W) == pytest.approx(exact, rel=1e-12)
    # power iteration: a lower bound that converges to the exact value
    est = spectral_norm(W, exact_below=0, iters=5000, tol=1e-14, generator=torch.Generator().manual_seed(0))
    assert est <= exact * (1 + 1e-12) and est == pytest.approx(exact, rel=1e-6)
    # certified: exact (svd), or the rigorous cap >= ||W||_2
    assert spectral_norm_bound(W) == (pytest.approx(exact, rel=1e-12), "svd")
    cap, how = spectral_norm_bound(W, exact_below=0)
    assert how in ("holder", "frobenius") and cap >= exact


def test_spectral_norm_errors_and_zero():
    assert spectral_norm(torch.zeros(3, 3)) == 0.0
    assert spectral_norm(torch.zeros(3, 3), exact_below=0) == 0.0
    with pytest.raises(ValueError, match="2-D"):
        spectral_norm(torch.zeros(3))
    with pytest.raises(TypeError):
        spectral_norm([[1.0]])


# ---------------------------------------------------------------------- certified lambda
@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_certified_lambda_of_an_rnn_is_the_norm_of_w_hh(nonlinearity):
    r = seq2d.rnn(5, 9, nonlinearity=nonlinearity)
    c = certified_lambda(r)
    norm = _norm(r.core.block(1, 1).weight)
    assert [x["slots"] for x in c["cores"]] == [[1]]
    assert c["cores"][0]["lipschitz_act"] == 1.0 and c["cores"][0]["norm_method"] == "svd"
    assert c["lambda"] == pytest.approx(norm, rel=1e-12) and c["stable"] == (norm < 1) and c["memory"] is None
    assert certified_lambda(r.core) == c  # the core itself, or the wrapper


def test_certified_lambda_multi_layer_is_per_layer():
    r = _scaled_rnn(4, 6, [0.3, 0.7, 1.2], seed=0)
    c = certified_lambda(r)
    assert [x["slots"] for x in c["cores"]] == [[1], [2], [3]]
    assert [x["lambda"] for x in c["cores"]] == pytest.approx([0.3, 0.7, 1.2], rel=1e-12)
    assert c["lambda"] == pytest.approx(1.2) and c["stable"] is False


def test_certified_lambda_of_an_acyclic_model_is_zero():
    c = certified_lambda(seq2d.mlp([6, 5, 4]))
    assert c == {"cores": [], "lambda": 0.0, "stable": True, "memory": 2}
    assert certified_lambda(seq2d.truncated_rnn(seq2d.rnn(3, 4), 3))["lambda"] == 0.0


def test_certified_lambda_multi_slot_core_with_identity_and_sigmoid():
    """Core {1, 2}: F[1][2] linear, F[2][1] identity, F[2][2] linear. The core matrix is
    the model's linear weight on those slots plus the identity block; L_act = max(1, 0.25)."""
    torch.manual_seed(0)
    m = Sequential2D([3, 4, 4], {(1, 0): LinearBlock(3, 4), (1, 2): LinearBlock(4, 4), (2, 1): "identity",
                                 (2, 2): LinearBlock(4, 4)},
                     activations=[None, "sigmoid", "tanh"], steps=3, dtype=F64)
    idx = torch.arange(3, 11)
    expect = m.linear_weight().detach()[idx][:, idx].clone()
    expect[4:, :4] += torch.eye(4, dtype=F64)
    W = recurrent_matrix(m, {1, 2})
    assert torch.equal(W, expect)  # bitwise: the same entries gathered, plus exact 1s for the identity block
    c = certified_lambda(m)
    assert c["cores"][0]["slots"] == [1, 2] and c["cores"][0]["lipschitz_act"] == 1.0
    assert c["lambda"] == pytest.approx(_norm(expect), rel=1e-12)


def test_module_block_in_a_core_is_not_certifiable():
    m = Sequential2D([3, 4], {(1, 0): LinearBlock(3, 4), (1, 1): nn.Linear(4, 4)}, activations=[None, "tanh"], steps=2)
    with pytest.raises(ValueError, match=r"F\[1\]\[1\] is a module \(Linear\).*cannot be certified"):
        certified_lambda(m)
    with pytest.raises(ValueError, match="module"):
        SpectralClip(m, 0.9)


def test_unknown_activation_lipschitz_gives_no_certificate():
    m = Sequential2D([3, 4], {(1, 0): LinearBlock(3, 4), (1, 1): LinearBlock(4, 4)}, activations=[None, "layernorm"], steps=2)
    c = certified_lambda(m)
    assert c["cores"][0]["lipschitz_act"] is None and c["lambda"] is None and c["stable"] is None
    with pytest.raises(ValueError, match="Lipschitz"):
        SpectralClip(m, 0.9)


# ---------------------------------------------------------------------- projection
def test_spectral_clip_bounds_changes_only_large_singular_values_and_is_idempotent():
    r = _scaled_rnn(4, 12, [2.5, 0.6], seed=3)
    s0 = [torch.linalg.svdvals(r.core.block(l, l).weight.detach()) for l in (1, 2)]
    clip = SpectralClip(r, 0.9)
    rep = clip(r)
    assert [x["projected"] for x in rep] == [True, False]
    for l, s_before in zip((1, 2), s0):
        s_after = torch.linalg.svdvals(r.core.block(l, l).weight.detach())
        assert float(s_after[0]) <= 0.9 + 1e-9
        below = s_before <= 0.9
        assert torch.allclose(s_after[below], s_before[below], rtol=0, atol=1e-10)  # below the bound: unchanged
        assert torch.allclose(s_after[~below], torch.full_like(s_after[~below], 0.9), atol=1e-9)  # above: at the bound
    assert certified_lambda(r)["lambda"] <= 0.9 + 1e-9
    before = [p.detach().clone() for p in r.parameters()]
    wih = r.core.block(1, 0).weight.detach().clone()
    rep2 = clip.project()
    assert not any(x["projected"] for x in rep2)
    assert max(float((a - b.detach()).abs().max()) for a, b in zip(before, r.parameters())) <= 1e-12
    # W_ih and the biases are never touched (bitwise)
    assert torch.equal(wih, r.core.block(1, 0).weight)


def test_spectral_clip_float32_stays_within_the_bound():
    r = _scaled_rnn(3, 32, [3.0], seed=4, dtype=torch.float32)
    SpectralClip(r, 0.95).project()
    assert _norm(r.core.block(1, 1).weight) <= 0.95 + 1e-9
    s = r.core.block(1, 1).weight.detach().clone()
    SpectralClip(r, 0.95).project()
    assert torch.equal(s, r.core.block(1, 1).weight)  # already within the bound: left bitwise unchanged


def test_spectral_clip_divides_by_the_activation_lipschitz_constant():
    torch.manual_seed(0)
    m = Sequential2D([2, 5], {(1, 0): LinearBlock(2, 5), (1, 1): LinearBlock(5, 5)}, activations=[None, "sigmoid"],
                     steps=1, dtype=F64)
    with torch.no_grad():
        m.block(1, 1).weight.mul_(10.0 / _norm(m.block(1, 1).weight))
    rep = SpectralClip(m, 0.5).project()
    assert rep[0]["bound"] == pytest.approx(2.0)  # 0.5 / 0.25
    assert certified_lambda(m)["lambda"] <= 0.5 + 1e-9


def test_project_spectral_function():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(6, 9, generator=g, dtype=F64)
    s = torch.linalg.svdvals(W)
    bound = float(s[2])
    out = project_spectral_(W, bound)
    assert out is W
    s2 = torch.linalg.svdvals(W)
    assert float(s2[0]) <= bound + 1e-12 and torch.allclose(s2[3:], s[3:], atol=1e-12)
    W2 = W.clone()
    project_spectral_(W, bound)
    assert torch.equal(W, W2)  # idempotent: left bitwise unchanged
    with pytest.raises(ValueError, match="positive"):
        project_spectral_(W, 0.0)


def test_spectral_clip_refuses_blocks_it_cannot_write():
    torch.manual_seed(0)
    mask = torch.rand(4, 4) < 0.5
    masked = Sequential2D([3, 4], {(1, 0): LinearBlock(3, 4), (1, 1): LinearBlock(4, 4, mask=mask)},
                          activations=[None, "tanh"], steps=1)
    with pytest.raises(NotImplementedError, match=r"F\[1\]\[1\] \(masked"):
        SpectralClip(masked, 0.5)
    # mode="scale" keeps the mask (masked entries stay exactly zero)
    with torch.no_grad():
        masked.block(1, 1).weight.mul_(5)
    SpectralClip(masked, 0.5, mode="scale").project()
    assert certified_lambda(masked)["lambda"] <= 0.5 + 1e-6
    assert bool((masked.block(1, 1).effective_weight()[~mask] == 0).all())

    ident = Sequential2D([4, 4], {(1, 0): "identity", (1, 1): "identity"}, activations=[None, "tanh"], steps=1)
    with pytest.raises(NotImplementedError, match=r"F\[1\]\[1\] \(identity"):
        SpectralClip(ident, 0.5)

    ring = Sequential2D([3, 4, 4], {(1, 0): LinearBlock(3, 4), (2, 1): LinearBlock(4, 4), (1, 2): LinearBlock(4, 4)},
                        activations=[None, "tanh", "tanh"], steps=2)
    with pytest.raises(NotImplementedError, match=r"F\[1\]\[1\], F\[2\]\[2\] \(absent"):
        SpectralClip(ring, 0.5)
    SpectralClip(ring, 0.5, mode="scale")  # fine: scaling keeps the zeros

    tied = LinearBlock(4, 4)
    two = Sequential2D([3, 4, 4], {(1, 0): LinearBlock(3, 4), (1, 1): tied, (2, 1): LinearBlock(4, 4), (2, 2): tied},
                       activations=[None, "tanh", "tanh"], steps=2)
    with pytest.raises(NotImplementedError, match="tied"):
        SpectralClip(two, 0.5)
    with pytest.raises(ValueError, match="mode"):
        SpectralClip(seq2d.rnn(2, 3), 0.5, mode="nuclear")
    with pytest.raises(ValueError, match="lam"):
        SpectralClip(seq2d.rnn(2, 3), -1.0)


class _LambdaWatch:
    """Records the certified lambda after every optimizer step (runs after SpectralClip)."""

    def __init__(self, model):
        self.model, self.lams = model, []

    def on_update_end(self, trainer, update):
        self.lams.append(certified_lambda(self.model)["lambda"])


def _sequence_task(n=96, T=10, d=3, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, T, d, generator=g)
    R = torch.randn(d, classes, generator=g)
    y = (X[:, -3:].sum(1) @ R).argmax(-1)
    return {"train": (X, y), "test": (X[:32], y[:32])}


def _last_step_loss(out, y):
    logits = 3.0 * out[0][:, -1, :]  # output (B, T, H) of a batch_first RNN; H = classes
    return F.cross_entropy(logits, y, reduction="sum"), (logits.argmax(-1) == y).sum()


def test_training_with_the_callback_keeps_lambda_bounded(tmp_path, capsys):
    from seq2d.train import TrainConfig
    from seq2d.train.trainer import Trainer, build_model

    cfg = TrainConfig(model="rnn:3,4", epochs=2, batch_size=16, lr=0.05, device="cpu", num_threads=1, quiet=True,
                      out_dir=str(tmp_path / "run"), seed=0)
    model = build_model(cfg)
    model.batch_first = True  # the trainer indexes samples along dim 0
    w0 = model.core.block(1, 1).weight.detach().clone()
    assert certified_lambda(model)["lambda"] > 0.5  # the initialisation is outside the constraint
    clip, watch = SpectralClip(model, 0.5), _LambdaWatch(model)
    summary = Trainer(cfg, model, _sequence_task(), callbacks=[clip, watch], criterion=_last_step_loss).fit()
    assert summary["updates"] == len(watch.lams) == 12
    assert max(watch.lams) <= 0.5 + 1e-6  # float32 weights: the projection leaves a margin of a few eps
    assert not torch.equal(w0, model.core.block(1, 1).weight)
    assert math.isfinite(summary["final_test_loss"])
    # the CLI rebuilds the model from the checkpoint's config and reports the same lambda
    rc = main(["stability", str(tmp_path / "run" / "checkpoint.pt"), "--data-steps", "12", "--batch", "2"])
    out = capsys.readouterr().out
    assert rc == 0 and "checkpoint" in out
    line = next(s for s in out.splitlines() if s.startswith("certified lambda (max over cores)"))
    assert float(line.split(":")[1].split()[0]) == pytest.approx(watch.lams[-1], rel=1e-5)
    assert "k for eps=0.001: " in out and "no guarantee" not in out


# ---------------------------------------------------------------------- data lambda
def test_data_lambda_matches_the_explicit_jacobian():
    r = _scaled_rnn(3, 5, [0.9], seed=5)
    g = torch.Generator().manual_seed(0)
    xs = 2.0 * torch.randn(15, 4, 3, generator=g, dtype=F64)
    d = data_lambda(r, xs, iters=200)
    W, U, b = r.core.block(1, 1).weight, r.core.block(1, 0).weight, r.core.bias(1)
    h = torch.zeros(4, 5, dtype=F64)
    expect = []
    with torch.no_grad():
        for t in range(15):
            h = torch.tanh(h @ W.T + xs[t] @ U.T + b)
            expect.append(torch.linalg.matrix_norm((1 - h ** 2)[:, :, None] * W[None], ord=2))
    expect = torch.stack(expect)
    per = d["cores"][0]["per_step"]
    assert per.shape == (15, 4) and d["cores"][0]["steps"] == list(range(15))
    assert torch.allclose(per, expect, rtol=1e-6, atol=1e-9)
    assert d["max"] == pytest.approx(float(expect.max()), rel=1e-6)
    assert d["cores"][0]["mean"] == pytest.approx(float(expect.mean()), rel=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_data_lambda_never_exceeds_the_certified_lambda(seed):
    torch.manual_seed(seed)
    layers = 1 + seed % 2
    r = seq2d.rnn(4, 8, num_layers=layers, nonlinearity="tanh" if seed < 2 else "relu", dtype=F64)
    xs = torch.randn(12, 3, 4, dtype=F64)
    d, c = data_lambda(r, xs, iters=10), certified_lambda(r)
    assert [x["slots"] for x in d["cores"]] == [x["slots"] for x in c["cores"]] == [[l] for l in range(1, layers + 1)]
    for dc, cc in zip(d["cores"], c["cores"]):
        assert 0 < dc["max"] <= cc["lambda"] * (1 + 1e-12)
        assert dc["mean"] <= dc["max"]
    assert d["max"] == max(x["max"] for x in d["cores"])
    if layers == 2:  # layer 2 sits at pipeline delay 1: measured at steps 1 .. T
        assert d["cores"][1]["steps"] == list(range(1, 13))


def test_data_lambda_of_an_acyclic_model_and_bad_input():
    assert data_lambda(seq2d.mlp([3, 2]), torch.randn(4, 2, 3)) == {"cores": [], "max": 0.0, "mean": 0.0}
    with pytest.raises(RuntimeError, match="time first"):
        data_lambda(seq2d.rnn(3, 4), torch.randn(4, 2, 5))



def _closed_form_cases():
    """Models whose cores have a closed-form Jacobian: RNNs (tanh, relu, multi-layer, pipelined),
    a two-slot core with an identity block and a sigmoid slot, masked and frozen entries, an
    identity slot, a float32 RNN."""
    torch.manual_seed(0)
    lin = lambda i, o, **kw: LinearBlock(i, o, dtype=F64, **kw)  # noqa: E731
    two = Sequential2D([3, 4, 4], {(1, 0): lin(3, 4), (1, 2): lin(4, 4), (2, 1): "identity", (2, 2): lin(4, 4)},
                       activations=[None, "sigmoid", "tanh"], steps=3, dtype=F64)
    masked = lin(5, 5, mask=torch.rand(5, 5) < 0.6)
    masked.frozen = torch.where(masked.mask, 0.0, 0.3 * torch.randn(5, 5, dtype=F64))
    frozen = Sequential2D([2, 5, 5], {(1, 0): lin(2, 5), (1, 1): masked, (2, 1): lin(5, 5), (2, 2): lin(5, 5)},
                          activations=[None, "relu", None], steps=3, dtype=F64)
    return {"tanh": (_scaled_rnn(3, 6, [0.9], seed=1), 3), "relu-2": (_scaled_rnn(3, 6, [1.1, 0.8], seed=2,
                                                                                    nonlinearity="relu"), 3),
            "tanh-3": (seq2d.rnn(3, 6, num_layers=3, dtype=F64), 3), "identity-sigmoid": (two, 3),
            "masked-frozen-identity": (frozen, 2), "float32": (seq2d.rnn(3, 6, num_layers=2), 3)}


@pytest.mark.parametrize("case", ["tanh", "relu-2", "tanh-3", "identity-sigmoid", "masked-frozen-identity", "float32"])
def test_data_lambda_closed_form_equals_the_autograd_path(case):
    """The fast path (J = diag(act'(a)) W_rec applied in closed form, every step's power iteration
    batched) equals the old one (torch.func jvp/vjp through the model's step, step by step): the
    same start vectors, the same iteration, so the same numbers up to rounding."""
    model, d = _closed_form_cases()[case]
    dtype = next(model.parameters()).dtype
    xs = 1.5 * torch.randn(9, 4, d, generator=torch.Generator().manual_seed(3), dtype=F64).to(dtype)
    slow = data_lambda(model, xs, iters=15, generator=torch.Generator().manual_seed(1), method="autograd")
    fast = data_lambda(model, xs, iters=15, generator=torch.Generator().manual_seed(1), method="closed")
    auto = data_lambda(model, xs, iters=15, generator=torch.Generator().manual_seed(1))
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == F64 else dict(rtol=1e-5, atol=1e-6)
    assert len(fast["cores"]) == len(slow["cores"]) >= 1
    for a, b, c in zip(slow["cores"], fast["cores"], auto["cores"]):
        assert a["slots"] == b["slots"] and a["steps"] == b["steps"] and a["per_step"].shape == b["per_step"].shape
        torch.testing.assert_close(b["per_step"], a["per_step"], **tol)
        assert torch.equal(c["per_step"], b["per_step"])  # auto takes the closed form here
    assert fast["max"] == pytest.approx(slow["max"], rel=tol["rtol"] * 10)


def test_data_lambda_falls_back_to_autograd_for_a_module_core():
    m = Sequential2D([3, 4], {(1, 0): LinearBlock(3, 4), (1, 1): nn.Linear(4, 4)}, activations=[None, "tanh"], steps=2,
                     dtype=F64)
    xs = torch.randn(5, 2, 3, dtype=F64)
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    assert torch.equal(data_lambda(m, xs, generator=g())["cores"][0]["per_step"],
                       data_lambda(m, xs, generator=g(), method="autograd")["cores"][0]["per_step"])
    with pytest.raises(ValueError, match=r"method='closed': core \[1\] has a module block"):
        data_lambda(m, xs, method="closed")
    with pytest.raises(ValueError, match="method: unknown value 'fast'"):
        data_lambda(m, xs, method="fast")


def test_data_lambda_result_prints_short_and_keeps_the_tensors():
    """The result used to print its (steps, B) tensors (a 50 x 4 tensor filled the screen): now one
    line per core (max, mean, quantiles, the tensor's shape); the tensors stay, as dict entries
    (read as before) and attributes."""
    r = seq2d.rnn(4, 8, num_layers=2, dtype=F64)
    d = data_lambda(r, torch.randn(50, 4, 4, dtype=F64))
    text = repr(d)
    assert len(text.splitlines()) == 3 and len(text) < 400, text
    assert text.startswith(f"DataLambda(max={d['max']:.4f}, mean={d['mean']:.4f}, q05/q50/q95=")
    assert "core [1]: max=" in text and "per_step (50 steps, 4 sequences)" in text and "tensor" not in text
    assert d.max == d["max"] and d.cores[1].per_step is d["cores"][1]["per_step"] and d.cores[1].steps == list(range(1, 51))
    with pytest.raises(ValueError, match="2 recurrent cores"):
        d.per_step
    one = data_lambda(seq2d.rnn(4, 8, dtype=F64), torch.randn(6, 2, 4, dtype=F64))
    assert one.per_step.shape == (6, 2) and one.per_step is one["cores"][0]["per_step"]
    with pytest.raises(AttributeError, match="no entry 'maximum'"):
        one.maximum
    assert repr(data_lambda(seq2d.mlp([3, 2]), torch.randn(4, 2, 3))) == "DataLambda(max=0.0000, mean=0.0000, no recurrent core)"

# ---------------------------------------------------------------------- Lemma 1
def _gap(r, xs, k) -> Tensor:
    """||h_T - h_T^k|| per sequence: the full RNN vs its k-truncation on the last k inputs."""
    T, B, d = xs.shape
    with torch.no_grad():
        full = r(xs)[0][-1]
        window = xs[T - k:].permute(1, 0, 2).reshape(B, k * d)  # oldest first
        trunc = seq2d.truncated_rnn(r, k).core(window)
    return (full - trunc).norm(dim=-1)



def test_lemma1_bound_is_never_violated_on_random_stable_rnns():
    g = torch.Generator().manual_seed(2024)
    worst = 0.0
    for case in range(30):
        lam = float(0.2 + 0.78 * torch.rand((), generator=g))
        d, H = int(torch.randint(2, 6, (), generator=g)), int(torch.randint(3, 12, (), generator=g))
        k = int(torch.randint(1, 16, (), generator=g))
        T = k + int(torch.randint(1, 30, (), generator=g))
        B_x = float(0.2 + 3 * torch.rand((), generator=g))
        r = _scaled_rnn(d, H, [lam], seed=case)
        c = rnn_constants(r)
        assert c["lam"] == pytest.approx(lam, rel=1e-12)
        xs = _bounded_inputs(T, 6, d, B_x, g)
        gap = float(_gap(r, xs, k).max())
        bound = lemma1_bound(k=k, input_bound=B_x, **c)
        assert gap <= bound, (case, lam, k, T, B_x, gap, bound)
        # without the tanh state cap the bound is larger, never smaller
        assert lemma1_bound(c["lam"], k, input_bound=B_x, lipschitz_x=c["lipschitz_x"], f0=c["f0"]) >= bound
        worst = max(worst, gap / bound)
    assert 0 < worst <= 1


def test_stacked_bound_is_never_violated_on_two_layer_rnns():
    g = torch.Generator().manual_seed(7)
    for case in range(8):
        lams = [float(0.3 + 0.6 * torch.rand((), generator=g)) for _ in range(2)]
        k = int(torch.randint(1, 12, (), generator=g))
        r = _scaled_rnn(3, 6, lams, seed=100 + case)
        layers = [rnn_constants(r, 1), rnn_constants(r, 2)]
        xs = _bounded_inputs(k + 10, 5, 3, 1.5, g)
        assert float(_gap(r, xs, k).max()) <= stacked_lemma1_bound(layers, k, input_bound=1.5)
    # one layer: the stacked recursion is Lemma 1
    c = rnn_constants(r, 1)
    for k in (0, 1, 5, 20):
        assert stacked_lemma1_bound([c], k, input_bound=1.5) == pytest.approx(lemma1_bound(k=k, input_bound=1.5, **c))


def test_truncation_length_meets_eps_and_is_minimal():
    g = torch.Generator().manual_seed(11)
    for case, (lam, eps) in enumerate([(0.5, 1e-3), (0.8, 1e-4), (0.9, 1e-2), (0.95, 1e-6)]):
        r = _scaled_rnn(3, 6, [lam], seed=case)
        c = rnn_constants(r)
        k = truncation_length(eps=eps, input_bound=1.0, **c)
        assert lemma1_bound(k=k, input_bound=1.0, **c) <= eps
        assert k == 1 or lemma1_bound(k=k - 1, input_bound=1.0, **c) > eps
        xs = _bounded_inputs(k + 20, 4, 3, 1.0, g)
        assert float(_gap(r, xs, k).max()) <= eps
        assert stacked_truncation_length([c], eps, input_bound=1.0) == k
    # the closed form of the paper: k >= log_{1/lam}(L_x B_x / ((1 - lam) eps)) when f0 = 0
    k = truncation_length(0.9, 1e-3, input_bound=2.0, lipschitz_x=0.5)
    assert k == math.ceil(math.log(0.5 * 2.0 / (0.1 * 1e-3)) / math.log(1 / 0.9))
    r2 = _scaled_rnn(3, 6, [0.7, 0.8], seed=9)
    layers = [rnn_constants(r2, 1), rnn_constants(r2, 2)]
    k2 = stacked_truncation_length(layers, 1e-3, input_bound=1.0)
    assert stacked_lemma1_bound(layers, k2, input_bound=1.0) <= 1e-3 < stacked_lemma1_bound(layers, k2 - 1, input_bound=1.0)


def test_no_guarantee_for_lambda_at_least_one():
    for fn in (lambda: lemma1_bound(1.0, 3, input_bound=1, lipschitz_x=1),
               lambda: truncation_length(1.5, 1e-3, input_bound=1, lipschitz_x=1),
               lambda: stacked_truncation_length([{"lam": 0.5, "lipschitz_x": 1}, {"lam": 1.01, "lipschitz_x": 1}], 1e-3,
                                                 input_bound=1)):
        with pytest.raises(ValueError, match="no guarantee"):
            fn()
    with pytest.raises(ValueError, match="eps"):
        truncation_length(0.5, 0.0, input_bound=1, lipschitz_x=1)


def test_rnn_constants_of_torch_rnn():
    torch.manual_seed(0)
    ref = nn.RNN(3, 5, num_layers=2, dtype=F64)
    c = rnn_constants(ref, 2)
    assert c["lam"] == pytest.approx(_norm(ref.weight_hh_l1), rel=1e-12)
    assert c["lipschitz_x"] == pytest.approx(_norm(ref.weight_ih_l1), rel=1e-12)
    assert c["f0"] == pytest.approx(float(torch.tanh(ref.bias_ih_l1 + ref.bias_hh_l1).detach().norm()), rel=1e-12)
    assert c["state_bound"] == pytest.approx(math.sqrt(5))
    with pytest.raises(ValueError, match="layer"):
        rnn_constants(ref, 3)
    with pytest.raises(TypeError):
        rnn_constants(seq2d.mlp([2, 3]))


# ---------------------------------------------------------------------- CLI
def test_cli_stability_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["stability", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: seq2d stability") and "--input-bound" in out and "examples:" in out


def test_cli_stability_on_presets(capsys):
    rc = main(["stability", "rnn:3,6,layers=2", "--data-steps", "10", "--batch", "2", "--iters", "5"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "core {1}" in out and "core {2}" in out and "certified lambda (max over cores)" in out
    assert "data lambda (max over cores)" in out and "k for eps=0.001:" in out
    # the same seed gives the same report
    main(["stability", "rnn:3,6,layers=2", "--data-steps", "10", "--batch", "2", "--iters", "5"])
    assert capsys.readouterr().out == out

    rc = main(["stability", "truncated_rnn:3,4,k=3"])
    out = capsys.readouterr().out
    assert rc == 0 and "n/a" in out and "after 3 step(s)" in out

    rc = main(["stability", "rnn:3,6", "--eps", "0"])
    assert rc == 2 and "--eps" in capsys.readouterr().err


def test_cli_stability_rejects_a_broken_checkpoint(tmp_path, capsys):
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    rc = main(["stability", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot load the model of checkpoint" in err


def test_cli_stability_says_no_guarantee(capsys, tmp_path):
    from seq2d.train import TrainConfig
    from seq2d.train.checkpoint import save_checkpoint
    from seq2d.train.trainer import build_model

    cfg = TrainConfig(model="rnn:3,5", out_dir=str(tmp_path))
    model = build_model(cfg)
    with torch.no_grad():
        model.core.block(1, 1).weight.mul_(1.5 / _norm(model.core.block(1, 1).weight))
    save_checkpoint(tmp_path / "checkpoint.pt", model=model, optimizer=None, epoch=0, update=0, config=cfg)
    rc = main(["stability", str(tmp_path), "--data-steps", "8", "--batch", "2", "--iters", "5"])
    out = capsys.readouterr().out
    assert rc == 0 and "no guarantee: lambda >= 1" in out and "1.5" in out
