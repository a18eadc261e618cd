"""The stable-RNN experiment scripts (experiments/stable_rnn/) in quick mode: they run, write
their JSON and plots, and the numbers say what the theory says (robust checks only)."""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "stable_rnn"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"stable_rnn_{name}", ROOT / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _png(path: pathlib.Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_truncation_quick(tmp_path, capsys):
    assert _load("truncation").main(["--quick", "--out", str(tmp_path)]) == 0
    assert "slope" in capsys.readouterr().out
    doc = json.loads((tmp_path / "truncation.json").read_text())
    assert doc["mode"] == "quick" and doc["seed"] == 0 and _png(tmp_path / "truncation.png")
    rows = {r["lambda"]: r for r in doc["rows"] if r["family"] == "orthogonal"}
    assert sorted(rows) == [0.5, 0.8, 0.9, 0.99, 1.5]
    # the fitted decay rate of the gap matches log(lambda) for ||W|| = rho(W) = lambda
    assert rows[0.5]["slope"] == pytest.approx(math.log(0.5), abs=0.3)
    for lam in (0.5, 0.8, 0.9, 0.99):
        r = rows[lam]
        assert r["bound_violations"] == 0 and r["max_gap_over_bound"] <= 1  # Lemma 1 holds
        assert r["slope"] <= math.log(lam) + 0.05  # tanh' <= 1: never slower than lambda
        assert r["data_lambda_max"] <= r["certified_lambda"] * (1 + 1e-9)
        assert len(r["gap_max"]) == len(r["bound"]) == len(r["ks"]) == doc["config"]["k_max"]
    # lambda = 1.5: no bound, and the gap does not decay
    assert rows[1.5]["bound"] is None and rows[1.5]["slope"] > -0.1


def test_gradient_gaps_quick(tmp_path, capsys):
    assert _load("gradient_gaps").main(["--quick", "--out", str(tmp_path)]) == 0
    assert "grad gap" in capsys.readouterr().out
    doc = json.loads((tmp_path / "gradient_gaps.json").read_text())
    assert doc["mode"] == "quick" and doc["seed"] == 0 and _png(tmp_path / "gradient_gaps.png")
    ks, gg = doc["ks"], doc["gradient_gap"]
    assert len(gg) == len(ks) and ks == doc["config"]["ks"]
    assert doc["certified_lambda_init"] <= doc["config"]["lam"] + 1e-9
    # (a) the gradient gap at the shared start shrinks geometrically in k
    assert gg[-1] < 1e-4 * gg[0] and doc["gradient_gap_slope"] < 0.5 * math.log(doc["config"]["lam"])
    # every weight is differentiated: the recurrent weights' gap at k = 1 is not zero
    assert all(doc["gradient_gap_by_parameter"][0][w] > 0 for w in ("W_ih", "W_hh", "b"))
    # (b) so does the weight gap after N projected steps, for both step rules
    for rule in ("alpha/t", "constant"):
        r = doc["rules"][rule]
        assert len(r["weight_gap"]) == len(ks)
        assert r["weight_gap"][-1] < 1e-4 * r["weight_gap"][0] and r["slope"] < 0
        assert r["final_certified_lambda"] <= doc["config"]["lam"] + 1e-9  # the projection held
        assert math.isfinite(r["full_final_loss"]) and r["full_final_loss"] < doc["initial_loss"]
    # the constant step moves the weights further, and the two models apart more
    assert doc["rules"]["constant"]["weight_gap"][0] > doc["rules"]["alpha/t"]["weight_gap"][0]
    # (c) --quick's default steps list: the weight gap after each N, for the sweep's k, both rules
    sw = doc["steps_sweep"]
    Ns = sw["steps_list"]
    assert len(Ns) >= 2 and all(a < b for a, b in zip(Ns, Ns[1:])) and Ns[-1] == doc["config"]["steps"]
    assert sw["ks"] == [2, 5, 10] and 2 in ks and set(sw["rules"]) == {"alpha/t", "constant"}
    for rule, rr in sw["rules"].items():
        assert len(rr["full_loss"]) == len(Ns) and all(math.isfinite(v) for v in rr["full_loss"])
        for k in sw["ks"]:
            r = rr["by_k"][str(k)]
            assert len(r["weight_gap"]) == len(Ns) and len(r["local_loglog_slopes"]) == len(Ns) - 1
            assert all(math.isfinite(v) and v > 0 for v in r["weight_gap"]) and math.isfinite(r["loglog_slope"])
            # trained once to max N (= the k-table's N): the last gap is the k-table's gap, where k is in both
            if k in ks:
                assert r["weight_gap"][-1] == pytest.approx(doc["rules"][rule]["weight_gap"][ks.index(k)], rel=1e-9)


def test_gradient_gaps_differentiates_every_weight():
    """grads() returns the gradient at each of W_ih, W_hh, b, readout (the block weights are
    views of seq2d's parameter store, which torch.autograd.grad would call unused): equal to
    the gradient of the same loss written in plain torch with leaf tensors, float64."""
    import torch
    from torch import nn

    import seq2d

    mod = _load("gradient_gaps")
    torch.manual_seed(0)
    T, n, d, H, n_out = 6, 3, 2, 4, 3
    X, Y = torch.randn(T, n, d, dtype=torch.float64), torch.randn(n_out, n, dtype=torch.float64)
    rnn = seq2d.rnn(d, H, dtype=torch.float64)
    readout = nn.Linear(H, 1, dtype=torch.float64)
    full = mod.Full(rnn, readout, n_out)
    got = mod.grads(full, X, Y)
    # the reference: the RNN's recurrence with leaf copies of the same weights
    w_ih, w_hh, b, w_o, b_o = (p.detach().clone().requires_grad_(True) for p in full.params)
    h, hs = torch.zeros(n, H, dtype=torch.float64), []
    for t in range(T):
        h = torch.tanh(X[t] @ w_ih.T + h @ w_hh.T + b)
        hs.append(h)
    pred = (torch.stack(hs[-n_out:]) @ w_o.T + b_o).squeeze(-1)
    want = torch.autograd.grad(0.5 * ((pred - Y) ** 2).mean(), [w_ih, w_hh, b, w_o, b_o])
    for name, g, w in zip(mod.NAMES, got, want):
        assert float(w.abs().max()) > 0, name
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-14, msg=name)
    # the truncation's recurrent weights get theirs too (k = 3: W_hh sits at F[k+1][k])
    tr = mod.Truncated(rnn, readout, 3, n_out)
    assert all(float(g.abs().max()) > 0 for g in mod.grads(tr, X, Y))


def test_gradient_gaps_steps_list_and_doc(tmp_path):
    mod = _load("gradient_gaps")
    md = tmp_path / "doc.md"
    md.write_text("# title\n\n<!-- gaps:begin -->\nold\n<!-- gaps:end -->\n\n<!-- other:begin -->\nkeep\n<!-- other:end -->\n")
    argv = ["--quick", "--steps", "6", "--steps-list", "6,2,4", "--sweep-ks", "3", "--out", str(tmp_path / "o"), "--doc", str(md)]
    assert mod.main(argv) == 0
    doc = json.loads((tmp_path / "o" / "gradient_gaps.json").read_text())
    assert doc["steps_sweep"]["steps_list"] == [2, 4, 6] and doc["steps_sweep"]["ks"] == [3]
    text = md.read_text()
    assert "old" not in text and "keep" in text and "### Weight gap against the number of steps N" in text
    assert "Proposition 2" in text and (tmp_path / "stability" / "gradient_gaps.png").is_file()
    # Proposition 2 in the slides' form (seeds 002), our re-derivation labelled as ours; Fig. 1's caption quoted
    assert "alpha * gamma * k * lambda^k * N^(alpha*beta + 1)" in text and "(Ours, not the source's" in text
    assert "suggesting the $O(1/t)$ rate is necessary" in text and "**Fig. 1 against ours.**" in text
    # off: no sweep in the JSON
    assert mod.main(["--quick", "--steps", "3", "--steps-list", "none", "--out", str(tmp_path / "p")]) == 0
    assert json.loads((tmp_path / "p" / "gradient_gaps.json").read_text())["steps_sweep"] is None


# ----------------------------------------------------------------------------- wikitext.py quick mode
def _tiny_corpus(root: pathlib.Path, n_lines=(300, 50, 50), words=30) -> pathlib.Path:
    """A synthetic corpus under ``root/wikitext-2``, easy to learn: every line counts up from a random
    word, ``w{s} w{s+1} ...`` (mod ``words``), so a trained model ends far below the uniform guess."""
    import torch

    g = torch.Generator().manual_seed(0)
    d = root / "wikitext-2"
    d.mkdir(parents=True)
    for split, n in zip(("train", "valid", "test"), n_lines):
        lines = []
        for _ in range(n):
            s, k = (int(v) for v in torch.randint(0, words, (2,), generator=g))
            lines.append(" ".join(f"w{(s + i) % words}" for i in range(1 + k % 12)))
        (d / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


_TINY = ["--quick", "--tokens", "4000", "--eval-tokens", "300", "--emb", "8", "--hidden", "8", "--ks", "2",
         "--batch-size", "5", "--lr", "4", "--grad-distance", "3", "--grad-seqs", "2", "--lambda-tokens", "10",
         "--threads", "1"]


def _without_times(v):
    """``v`` without wall-clock fields (times, dates, the output folder in the command)."""
    if isinstance(v, dict):
        return {k: _without_times(x) for k, x in v.items()
                if not (k.endswith("time_s") or k in ("date", "command", "out", "doc"))}
    if isinstance(v, list):
        return [_without_times(x) for x in v]
    return v


def test_wikitext_conditions_build_the_models_of_the_former_table():
    """The conditions are CELL-unstable / CELL-stable over seq2d.lab.lm.CELLS (no table of their own);
    each builds, for one seed, the very model the former private table did (state dicts bitwise
    equal), so docs/results/stability.md stays reproducible."""
    import torch

    from seq2d.lab.lm import RNNLM
    from seq2d.train.datasets import seed_everything

    exp = _load("wikitext")
    former = {"tanh-unstable": ({"cell": "tanh"}, False), "tanh-stable": ({"cell": "tanh"}, True),
              "lstm-unstable": ({"cell": "lstm"}, False), "lstm-stable": ({"cell": "lstm"}, True)}
    assert exp.CONDITIONS == tuple(former)  # the same names, in the same (default --models) order
    args = exp.build_parser().parse_args(["--emb", "6", "--hidden", "5", "--layers", "2", "--dropout", "0.2"])
    for name, (kwargs, stable) in former.items():
        seed_everything(3)
        model, is_stable = exp.build_model(name, 17, args)
        seed_everything(3)
        before = RNNLM(17, args.emb, args.hidden, args.layers, args.dropout, **kwargs)
        assert is_stable is stable and model.cell == kwargs["cell"]
        a, b = model.state_dict(), before.state_dict()
        assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a), name
    with pytest.raises(SystemExit, match=r"Unknown model 'tanh-stabel' \(did you mean 'tanh-stable'\?\)"):
        exp.main(["--quick", "--models", "tanh-unstable,tanh-stabel"])


def test_wikitext_quick_mode_is_deterministic(tmp_path):
    """Two runs of the quick mode on one machine with one thread count give identical numbers. Bitwise
    equality is the right test here: the same code path runs twice on the same machine and thread count,
    so any difference would be an unseeded generator or a thread-count dependence, not rounding."""
    exp = _load("wikitext")
    root = _tiny_corpus(tmp_path / "data", n_lines=(600, 50, 50))
    argv = _TINY + ["--data-root", str(root), "--models", "tanh-unstable,lstm-stable"]
    a = exp.main(argv + ["--out", str(tmp_path / "a")])
    b = exp.main(argv + ["--out", str(tmp_path / "b")])
    ja = json.loads((tmp_path / "a" / "results.json").read_text())
    jb = json.loads((tmp_path / "b" / "results.json").read_text())
    assert _without_times(ja) == _without_times(jb)  # == on floats: bitwise
    assert a["models"]["tanh-unstable"]["test_ppl"] == b["models"]["tanh-unstable"]["test_ppl"]
    assert ja["env"]["threads"] == 1 and ja["env"]["seeded"] == "seed_everything" and ja["config"]["threads"] == 1
    assert not ja["models"]["tanh-unstable"]["diverged"]  # it learned: below the uniform guess


def test_wikitext_quick_mode_flags_a_diverged_run(tmp_path):
    """A huge learning rate makes a model diverge: flagged in results.json, results.md and the page,
    and left out of the stable-vs-unstable comparison."""
    exp = _load("wikitext")
    root = _tiny_corpus(tmp_path / "data", n_lines=(600, 50, 50))
    doc = tmp_path / "docs" / "stability.md"
    res = exp.main(_TINY + ["--data-root", str(root), "--models", "tanh-unstable,tanh-stable", "--lr", "1e7",
                            "--out", str(tmp_path / "o"), "--doc", str(doc)])
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    why = saved["models"]["tanh-unstable"]["diverged"]
    assert why and res["models"]["tanh-unstable"]["diverged"] == why
    assert "(diverged)" in (tmp_path / "o" / "results.md").read_text()
    text = doc.read_text()
    assert "tanh-unstable (diverged)" in text and "tanh RNN: not compared" in text
    assert "stable minus unstable -3.2" in text  # the blog post's difference (143.5 - 146.7) is still quoted
    assert (doc.parent / "stability" / "wikitext_quick.json").is_file()


def test_wikitext_quick_mode_saves_a_checkpoint_that_loads(tmp_path):
    """--save-checkpoints writes each model's checkpoint.pt (seq2d.train.checkpoint's format): it loads back
    with the run's optimizer updates, epochs and history, and its weights are the model's (the test loss
    they give is the one results.json reports)."""
    import argparse

    from seq2d.lab.lm import evaluate
    from seq2d.lab.wikitext import Corpus, batchify
    from seq2d.train.checkpoint import load_checkpoint

    exp = _load("wikitext")
    root = _tiny_corpus(tmp_path / "data")
    res = exp.main(_TINY + ["--data-root", str(root), "--models", "tanh-unstable", "--max-batches", "3",
                            "--out", str(tmp_path / "o"), "--save-checkpoints"])
    r = res["models"]["tanh-unstable"]
    ck = load_checkpoint(tmp_path / "o" / "tanh-unstable" / "checkpoint.pt")
    assert ck["update"] == r["updates"] == 3 and ck["epoch"] == len(r["history"]) == 1
    assert ck["metrics"]["history"] == r["history"] and ck["config"]["save_checkpoints"] is True
    model, _ = exp.build_model("tanh-unstable", res["corpus"]["vocab"], argparse.Namespace(**res["config"]))
    model.load_state_dict(ck["model"])
    model.eval()
    corpus = Corpus(root, limit_tokens=4000, limit_eval_tokens=300, order="appearance")
    test = batchify(corpus.test, res["config"]["eval_batch_size"])
    assert evaluate(model, test, res["config"]["bptt"]) == pytest.approx(r["test_loss"], rel=1e-6)


def test_divergence_definition():
    from seq2d.lab.lm import divergence

    assert divergence(math.log(99.0), 100) is None
    assert "above the vocabulary size" in divergence(math.log(101.0), 100)
    assert divergence(None, 100) == "non-finite loss" and divergence(math.inf, 100) == "non-finite loss"
    assert divergence(float("nan"), 100) == "non-finite loss"
    assert divergence(1.0, 100, training="non-finite training loss in epoch 1").startswith("training stopped")
    with pytest.raises(ValueError):
        divergence(1.0, 0)


def test_vanishing_distance():
    from seq2d.lab.lm import VANISH_FRACTION, vanishing_distance

    assert VANISH_FRACTION == 1e-2
    assert vanishing_distance([1.0, 0.5, 0.02, 0.009, 0.001]) == 3
    assert vanishing_distance([1.0, 0.5, 0.2]) is None and vanishing_distance([]) is None
    assert vanishing_distance([1.0, 0.5, 0.2], fraction=0.3) == 2


def test_stability_page_is_what_its_json_gives(tmp_path):
    """docs/results/stability.md's report.py sections (verdict, Lemma 1, gaps) are exactly what the
    committed JSON gives: regenerating them changes nothing."""
    import shutil

    docs = ROOT.parents[1] / "docs" / "results"
    shutil.copytree(docs / "stability", tmp_path / "stability")
    page = tmp_path / "stability.md"
    shutil.copy(docs / "stability.md", page)
    assert _load("report").main(["--runs", str(tmp_path / "stability"), "--doc", str(page)]) == 0
    text = page.read_text()
    assert text == (docs / "stability.md").read_text()
    verdict = text.split("<!-- verdict:begin -->")[1].split("<!-- verdict:end -->")[0]
    assert "What holds at this scale" in verdict and "What does not hold" in verdict
    assert text.index("<!-- verdict:begin -->") < text.index("<!-- wikitext:begin -->")  # at the top


def test_stability_notes_numbers_are_what_their_json_gives(tmp_path):
    """docs/stability.md's generated sections (verdict, the LSTM certificate's numbers) are what the
    committed JSON gives, and the JSON's certificate is the library's."""
    import shutil

    from seq2d.lab.lstm import LSTMProjection, lstm_contraction_bound

    docs = ROOT.parents[1] / "docs"
    page = tmp_path / "docs" / "stability.md"
    page.parent.mkdir()
    shutil.copy(docs / "stability.md", page)
    js = docs / "results" / "stability" / "lstm_certificate.json"
    assert _load("lstm_certificate").main(["--from-json", str(js), "--doc", str(page)]) == 0
    assert page.read_text() == (docs / "stability.md").read_text()
    res = json.loads(js.read_text())
    m = _load("lstm_certificate").uniform_lstm(6, 10, 2, seed=0)
    LSTMProjection(m).project()
    assert res["published"]["lambda"] == pytest.approx(lstm_contraction_bound(m, 1.0), rel=1e-12)
    for c in res["conservative"]:  # sampling <= maximiser <= certificate, per layer
        assert all(a <= b <= d for a, b, d in zip(c["sampled"], c["sup"], c["certificate"]))


def test_lstm_certificate_quick(tmp_path):
    mod = _load("lstm_certificate")
    page = tmp_path / "docs" / "stability.md"
    page.parent.mkdir()
    page.write_text("# Stable recurrent models\n\nby hand\n")
    assert mod.main(["--quick", "--out", str(tmp_path / "o"), "--doc", str(page)]) == 0
    res = json.loads((tmp_path / "o" / "lstm_certificate.json").read_text())
    assert res["mode"] == "quick" and res["published"]["lambda"] < 1 < res["published"]["lambda_dropout_inputs"]
    assert res["author"]["layer0"]["lambda"] > 1
    for c in res["conservative"]:
        assert all(a <= b <= d for a, b, d in zip(c["sampled"], c["sup"], c["certificate"]))
    text = page.read_text()
    assert "by hand" in text and "## Verdict" in text and "### The numbers (computed)" in text
    assert (tmp_path / "docs" / "results" / "stability" / "lstm_certificate.json").is_file()


# ----------------------------------------------------------------------------- gap_sweep.py (issue 20, item 2)
def test_gap_sweep_quick_trains_every_weight_and_writes_its_section(tmp_path):
    """Quick mode: the batched models equal seq2d.rnn / truncated_rnn, every weight trains (the recurrent ones
    included), alpha is chosen from the grid for both rules, and the page section is what the JSON gives."""
    mod = _load("gap_sweep")
    page = tmp_path / "docs" / "stability.md"
    page.parent.mkdir()
    page.write_text("# Stable recurrent models: results\n")
    assert mod.main(["--quick", "--out", str(tmp_path / "o"), "--doc", str(page)]) == 0
    doc = json.loads((tmp_path / "o" / "gap_sweep.json").read_text())
    cfg = doc["config"]
    assert doc["check"] < 1e-9 and _png(tmp_path / "o" / "gap_sweep.png")
    for lam in cfg["lams"]:
        sel = doc["selection"][str(lam)]
        for rule in ("alpha/t", "constant"):  # the grid: the configured alphas and the rule's extensions
            assert str(sel["alpha"][rule]) in sel["grid"][rule]
            assert set(sel["grid"][rule]) >= {str(a) for a in cfg["alphas"][rule]}
    for lam, rule, a in doc["extended"]:  # each extension doubles or halves an edge of the configured grid
        assert a in (2 * max(cfg["alphas"][rule]), min(cfg["alphas"][rule]) / 2)
    # every seed at each chosen alpha and at its fallback (the next smaller alpha of the grid)
    assert len(doc["configs"]) == len(cfg["seeds"]) * len(cfg["lams"]) * 4
    for c in doc["configs"]:
        assert not c["diverged"] and c["moved_recurrent"] > 1e-3 and c["full_loss"][-1] < c["initial_loss"]
        assert len(c["weight_gap"]) == len(cfg["steps_list"]) and all(g > 0 for g in c["weight_gap"])
        assert c["beta_hat_start"] > 0 and c["slope"] is not None
    rows = doc["summary"]
    assert len(rows) == 2 * len(cfg["lams"]) and all(r["seeds"] == cfg["seeds"] for r in rows)
    text = page.read_text()
    assert "<!-- gap-sweep:begin -->" in text and "N^(alpha*beta + 1)" in text
    # again from the JSON next to the page: the same section
    again = tmp_path / "docs2" / "stability.md"
    again.parent.mkdir()
    again.write_text("# Stable recurrent models: results\n")
    assert mod.main(["--from-json", str(page.parent / "stability" / "gap_sweep.json"), "--out", str(tmp_path / "o2"),
                     "--doc", str(again)]) == 0
    sec = lambda t: t.split("<!-- gap-sweep:begin -->")[1].split("<!-- gap-sweep:end -->")[0]  # noqa: E731
    assert sec(again.read_text()) == sec(text)


def test_truncated_training_seeds_controls_and_noise_floor(tmp_path):
    """--seeds / --controls: one run per (setting, seed), several controls each, the noise-floor table on the
    page; --parts: a rerun reads the saved runs back (the same numbers, nothing retrained)."""
    exp = _load("truncated_training")
    root = _tiny_corpus(tmp_path / "data")
    doc = tmp_path / "docs" / "stability.md"
    doc.parent.mkdir()
    doc.write_text("# Results\n")
    argv = ["--quick", "--data-root", str(root), "--tokens", "2000", "--eval-tokens", "300", "--emb", "8",
            "--hidden", "8", "--cutoffs", "", "--ks", "2", "--grad-distance", "3", "--max-batches", "3",
            "--lambda-rows", "4", "--threads", "1", "--seeds", "3,4", "--controls", "3", "--parts",
            "--section", "truncated-training-seeds"]
    res = exp.main(argv + ["--out", str(tmp_path / "o"), "--doc", str(doc)])
    assert list(res["runs"]) == ["unstable, seed 3", "stable, seed 3", "unstable, seed 4", "stable, seed 4"]
    for name, run in res["runs"].items():
        assert run["seed"] == int(name[-1])
        ctl = [n for n in run["models"] if n.startswith("recurrent, init perturbed")]
        assert ctl == ["recurrent, init perturbed", "recurrent, init perturbed #2", "recurrent, init perturbed #3"]
        dist = {run["models"][n]["distance"]["all"] for n in ctl}
        assert len(dist) == 3 and min(dist) > 0  # three different perturbations
    a, b = res["runs"]["stable, seed 3"]["models"], res["runs"]["stable, seed 4"]["models"]
    assert a["recurrent"]["test_ppl_recurrent"] != b["recurrent"]["test_ppl_recurrent"]  # seeds differ
    rows = _load("report_seeds").noise_floor(res)
    assert [r["setting"] for r in rows] == ["unstable", "stable"]
    assert all(len(r["controls"]) == 6 and len(r["by_k"]["2"]["diff"]) == 2 for r in rows)
    text = doc.read_text()
    assert "Against the noise floor" in text and (doc.parent / "stability" / "truncated_training_seeds_noise_floor.png").is_file()
    assert len(list((tmp_path / "o" / "parts").glob("*.json"))) == 4
    again = exp.main(argv + ["--out", str(tmp_path / "o")])
    assert _without_times(again["runs"]) == _without_times(res["runs"])


# ----------------------------------------------------------------------------- prop2_tests.py (issue 34, item 3)
def test_rate_fit_recovers_a_known_lambda_and_each_test_can_fail():
    """Synthetic gaps gamma k lambda^k (noise 5 %): the fit recovers log lambda and both tests hold; a gap decaying as
    sqrt(lambda)^k falsifies the bound reading, one decaying as lambda^(2k) keeps the bound and falsifies the rate."""
    import random

    p2 = _load("prop2_tests")
    rng = random.Random(0)
    ks = list(range(1, 16))

    def slopes(rate, n=5):
        return [p2.rate_fit(ks, [3.0 * k * rate ** k * math.exp(rng.gauss(0, 0.05)) for k in ks]).estimate
                for _ in range(n)]

    for lam in (0.5, 0.8, 0.95):
        f = p2.rate_fit(ks, [3.0 * k * lam ** k * math.exp(rng.gauss(0, 0.05)) for k in ks])
        assert f.estimate == pytest.approx(math.log(lam), abs=0.03) and f.contains(math.log(lam))
        ll = [math.log(lam)] * 5
        same, slow, fast = (p2.rate_test(slopes(r), ll) for r in (lam, lam ** 0.5, lam ** 2))
        assert same["bound_ok"] and same["rate_ok"]
        assert not slow["bound_ok"] and not slow["rate_ok"]
        assert fast["bound_ok"] and not fast["rate_ok"]
    ll = [math.log(lam) for lam in (0.5, 0.65, 0.8, 0.95) for _ in range(5)]
    assert p2.slope_on_log_lambda([x + rng.gauss(0, 0.01) for x in ll], ll)["one_inside"]
    assert not p2.slope_on_log_lambda([2 * x + rng.gauss(0, 0.01) for x in ll], ll)["one_inside"]


def test_step_sums_matched_ratio_and_the_decision():
    p2 = _load("prop2_tests")
    Ns = [1, 2, 3, 5, 10, 30, 100]
    assert p2.step_sums(Ns, "alpha/t", 2.0) == pytest.approx([2 * sum(1 / t for t in range(1, n + 1)) for n in Ns])
    assert p2.step_sums(Ns, "constant", 0.01) == pytest.approx([0.01 * n for n in Ns])
    xa, xb = [1, 2, 4, 8, 16], [0.5, 1.5, 3, 6, 12, 24]
    r = p2.matched_log_ratio(xa, [2 * x ** 0.7 for x in xa], xb, [6 * x ** 0.7 for x in xb])  # exact in log-log
    assert r["mean"] == pytest.approx(math.log(3)) and r["range"] == [1, 16] and r["at_max"] == pytest.approx(math.log(3))
    assert p2.matched_log_ratio([1, 2], [1, 1], [3, 4], [1, 1]) is None  # no common range
    m = math.log(2)
    assert p2.classify_ratio(-0.1, 0.2) == "same within the factor"
    assert p2.classify_ratio(m + 0.1, m + 0.5) == "constant larger by more than the factor"
    assert p2.classify_ratio(-2.0, m - 0.1) == "constant not larger by the factor"
    assert p2.classify_ratio(0.0, 1.0) == "undecided"


def _fake_sweep(scale_constant: float) -> dict:
    """A gap_sweep.py JSON whose gap is one function of the cumulative step for both rules, times ``scale_constant``
    for the constant step (2 % noise per seed)."""
    import random

    p2 = _load("prop2_tests")
    rng = random.Random(1)
    N = [1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
    alpha = {"alpha/t": 1.0, "constant": 0.004}
    configs = []
    for seed in range(5):
        for rule in ("alpha/t", "constant"):
            S = p2.step_sums(N, rule, alpha[rule])
            k = math.exp(rng.gauss(0, 0.02)) * (scale_constant if rule == "constant" else 1.0)
            configs.append({"seed": seed, "lam": 0.8, "rule": rule, "alpha": alpha[rule], "diverged": False,
                            "curve": {"N": N, "gap": [k * 0.01 * s ** 0.8 for s in S], "moved": [0.3 * s for s in S]}})
    return {"config": {"lams": [0.8]}, "selection": {"0.8": {"alpha": alpha}}, "configs": configs}


def test_s_clock_tells_a_schedule_effect_from_a_larger_gap():
    p2 = _load("prop2_tests")
    same = p2.s_clock(_fake_sweep(1.0))[0]
    assert same["vs_S"]["outcome"] == "same within the factor" and abs(same["vs_S"]["mean"]) < 0.05
    assert same["vs_moved"]["outcome"] == "same within the factor"
    larger = p2.s_clock(_fake_sweep(4.0))[0]
    assert larger["vs_S"]["outcome"] == "constant larger by more than the factor"
    assert larger["vs_S"]["mean"] == pytest.approx(math.log(4), abs=0.05)


def test_prop2_tests_quick_writes_its_section_and_regenerates_it(tmp_path):
    """Quick mode end to end (gap_sweep.py's quick JSON for the cumulative-step tests): the predictions come before
    the numbers on the page, and --from-json writes the same section again."""
    gs, p2 = _load("gap_sweep"), _load("prop2_tests")
    page = tmp_path / "docs" / "stability.md"
    page.parent.mkdir()
    page.write_text("# Stable recurrent models: results\n")
    assert gs.main(["--quick", "--out", str(tmp_path / "o"), "--doc", str(page)]) == 0
    sweep = str(page.parent / "stability" / "gap_sweep.json")
    assert p2.main(["--quick", "--gap-sweep", sweep, "--out", str(tmp_path / "o"), "--doc", str(page)]) == 0
    doc = json.loads((tmp_path / "o" / "prop2_tests.json").read_text())
    assert {r["family"] for r in doc["lemma2"]} == {"projected", "orthogonal"}
    assert all(len(r["gap"]) == len(doc["config"]["ks"]) and min(r["gap"]) > 0 for r in doc["lemma2"])
    ortho = [r for r in doc["lemma2"] if r["family"] == "orthogonal"]
    assert all(r["norm"] == pytest.approx(r["lam"]) and r["radius"] == pytest.approx(r["lam"]) for r in ortho)
    assert all(not r["diverged"] and r["moved"][-1] > 0 for r in doc["prop2_k"])
    text = page.read_text()
    sec = lambda t: t.split("<!-- prop2-tests:begin -->")[1].split("<!-- prop2-tests:end -->")[0]  # noqa: E731
    body = sec(text)
    assert body.index("The predictions (stated before the runs)") < body.index("### Outcomes") < body.index("b (seeds)")
    for p in p2.PREDICTIONS:
        assert f"| {p['id']} |" in body
    again = tmp_path / "docs2" / "stability.md"
    again.parent.mkdir()
    again.write_text("# Stable recurrent models: results\n")
    assert p2.main(["--from-json", str(page.parent / "stability" / "prop2_tests.json"), "--gap-sweep", sweep,
                    "--out", str(tmp_path / "o2"), "--doc", str(again)]) == 0
    assert sec(again.read_text()) == body


def test_the_committed_stability_sections_regenerate_from_their_json(tmp_path):
    """docs/results/stability.md: the sections of issue 34 item 3 (prop2-tests, gap-sweep, the truncated-training
    sections, the verdict) come out byte-identical from the committed JSON through the scripts' --from-json modes."""
    import shutil

    repo = ROOT.parents[1]
    page = tmp_path / "docs" / "results" / "stability.md"
    shutil.copytree(repo / "docs" / "results" / "stability", page.parent / "stability")
    shutil.copy(repo / "docs" / "results" / "stability.md", page)
    before = page.read_text()
    assets = page.parent / "stability"
    out = str(tmp_path / "o")
    assert _load("gap_sweep").main(["--from-json", str(assets / "gap_sweep.json"), "--out", out, "--doc", str(page)]) == 0
    assert _load("prop2_tests").main(["--from-json", str(assets / "prop2_tests.json"), "--gap-sweep",
                                      str(assets / "gap_sweep.json"), "--out", out, "--doc", str(page)]) == 0
    tt = _load("truncated_training")
    for name in ("truncated_training", "truncated_training_decay", "truncated_training_seeds"):
        tt.main(["--from-json", str(assets / f"{name}.json"), "--out", str(tmp_path / name), "--doc", str(page)])
    assert page.read_text() == before, "rerun the --from-json commands of docs/results/stability.md and commit the page"
