"""WikiText corpus, the word-level LMs (seq2d.lab.lm) and the quick WikiText experiment."""

import importlib.util
import json
import math
import os
from pathlib import Path

import pytest
import torch
from torch import nn

import seq2d
from seq2d.lab.wikitext import EOS, UNK, Corpus, batchify, get_batch, wikitext_root
from seq2d.lab.lm import RNNLM, evaluate, evaluate_truncated, grad_norm_vs_distance

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


def write_corpus(root: Path, n_lines=(60, 12, 12), words=40, seed=0) -> Path:
    """A tiny synthetic corpus under ``root/wikitext-2``: lines of random words ``w0 .. w{words-1}``;
    valid/test also use a word train never sees."""
    g = torch.Generator().manual_seed(seed)
    d = root / "wikitext-2"
    d.mkdir(parents=True)
    for split, n in zip(("train", "valid", "test"), n_lines):
        lines = []
        for i in range(n):
            k = int(torch.randint(0, 12, (1,), generator=g))
            ws = [f"w{int(t)}" for t in torch.randint(0, words, (k,), generator=g)]
            if split != "train" and i == 0:
                ws.append("never_in_train")
            lines.append(" ".join(ws))
        (d / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def test_corpus_on_a_tiny_corpus(tmp_path, monkeypatch):
    (tmp_path / "wikitext-2").mkdir()
    (tmp_path / "wikitext-2" / "train.txt").write_text(" = A = \n\n a b <unk> a \n")
    (tmp_path / "wikitext-2" / "valid.txt").write_text("a z\n")
    (tmp_path / "wikitext-2" / "test.txt").write_text("b\n")
    c = Corpus(tmp_path)
    d = c.dictionary
    assert d.idx2word == ["=", "A", EOS, "a", "b", UNK]  # train only, in order of appearance
    assert [d.idx2word[i] for i in c.train] == ["=", "A", "=", EOS, EOS, "a", "b", UNK, "a", EOS]  # one <eos> per line
    assert [d.idx2word[i] for i in c.valid] == ["a", UNK, EOS]  # unseen words -> <unk>
    assert [d.idx2word[i] for i in c.test] == ["b", EOS]
    assert c.vocab_size == 6 and c.train.dtype == torch.int64
    # a slice of the training tokens; the vocabulary is then the slice's (+ <unk> for the rest)
    s = Corpus(tmp_path, limit_tokens=4)
    assert [s.dictionary.idx2word[i] for i in s.train] == ["=", "A", "=", EOS]
    assert [s.dictionary.idx2word[i] for i in s.valid] == [UNK, UNK, EOS]
    # the root from $SEQ2D_DATA, and clear errors otherwise
    monkeypatch.setenv("SEQ2D_DATA", str(tmp_path))
    assert Corpus().vocab_size == 6
    assert wikitext_root(tmp_path / "wikitext-2") == tmp_path / "wikitext-2"  # the folder itself also works
    with pytest.raises(FileNotFoundError, match="--data-root"):
        Corpus(tmp_path / "nowhere")
    monkeypatch.delenv("SEQ2D_DATA")
    with pytest.raises(FileNotFoundError, match="SEQ2D_DATA"):
        Corpus()
    with pytest.raises(ValueError, match="limit_tokens"):
        Corpus(tmp_path, limit_tokens=0)


def test_batchify_and_get_batch():
    data = torch.arange(23)
    b = batchify(data, 4)  # 5 rows, remainder dropped; column j is a contiguous stretch
    assert b.shape == (5, 4) and torch.equal(b[:, 1], torch.arange(5, 10))
    x, y = get_batch(b, 0, 3)
    assert torch.equal(x, b[:3]) and torch.equal(y, b[1:4])
    x, y = get_batch(b, 3, 3)  # the last segment is shorter
    assert x.shape == (1, 4) and torch.equal(y, b[4:5])
    with pytest.raises(ValueError, match="too few"):
        batchify(torch.arange(5), 4)


def _real_root():
    root = os.environ.get("SEQ2D_DATA")
    if not root or not (Path(root) / "wikitext-2" / "train.txt").is_file():
        where = f"SEQ2D_DATA={root} has no wikitext-2/train.txt" if root else "SEQ2D_DATA is unset"
        pytest.skip(f"needs WikiText-2, {where}: run `SEQ2D_DATA=DIR python -m pytest` with "
                    "DIR/wikitext-2/{train,valid,test}.txt (.ci/run: DIR=../shared/data)")
    return root


def test_real_wikitext2_vocabulary():
    c = Corpus(_real_root())
    assert c.vocab_size == 33_278
    assert (c.train.numel(), c.valid.numel(), c.test.numel()) == (2_088_628, 217_646, 245_569)


def torch_rnn_lm(lm: RNNLM) -> tuple[nn.RNN, ...]:
    """An nn.RNN with the Sequential2D LM's recurrent weights (slot bias -> bias_ih, bias_hh = 0)."""
    ref = nn.RNN(lm.emb, lm.hidden, lm.layers, dropout=lm.dropout if lm.layers > 1 else 0.0)
    with torch.no_grad():
        for l, (wih, whh, b) in enumerate(lm.recurrent_layers()):
            getattr(ref, f"weight_ih_l{l}").copy_(wih)
            getattr(ref, f"weight_hh_l{l}").copy_(whh)
            getattr(ref, f"bias_ih_l{l}").copy_(b)
            getattr(ref, f"bias_hh_l{l}").zero_()
    return ref


@pytest.mark.parametrize("layers", [1, 3])
def test_sequential2d_tanh_lm_equals_nn_rnn_lm_in_eval_mode(layers):
    torch.manual_seed(0)
    lm = RNNLM(50, emb=8, hidden=12, layers=layers, dropout=0.3, cell="tanh")
    assert isinstance(lm.rnn, seq2d.RNN) and isinstance(lm.rnn.core, seq2d.Sequential2D)
    if layers > 1:  # inter-layer dropout is a module block of the grid
        assert "M" in lm.rnn.core.grid()
        assert lm.rnn.core.delays() == tuple([0] + list(range(layers)))  # pipelining unchanged
    ref = torch_rnn_lm(lm)
    lm.eval(), ref.eval()
    tokens = torch.randint(0, 50, (9, 4))
    h0 = torch.randn(layers, 4, 12)
    with torch.no_grad():
        logits, h = lm(tokens, h0)
        out, h_ref = ref(lm.encoder(tokens), h0)
        ref_logits = lm.decoder(out)
    assert logits.shape == (9, 4, 50)
    assert float((logits - ref_logits).abs().max()) <= 1e-5
    assert float((h - h_ref).abs().max()) <= 1e-5
    # training mode: the dropout block is live (two calls differ) when there is one
    lm.train()
    a, _ = lm(tokens)
    b, _ = lm(tokens)
    assert not torch.equal(a, b)


@pytest.mark.parametrize("cell", ["tanh", "lstm"])
def test_truncated_lm(cell):
    torch.manual_seed(0)
    lm = RNNLM(40, emb=6, hidden=8, layers=2, dropout=0.2, cell=cell).eval()
    T, B = 7, 3
    tokens = torch.randint(0, 40, (T, B))
    with torch.no_grad():
        full, _ = lm(tokens, lm.init_hidden(B))
        for k in (T, T + 3):  # k >= T: the truncation is the full model from a zero state
            tm = lm.truncated(k).eval()
            assert float((tm(tokens) - full).abs().max()) <= 1e-5
        tm = lm.truncated(3).eval()
        y = tm(tokens)
        assert float((y - full).abs().max()) > 1e-4  # it does forget
        # position t sees exactly x_{t-2} .. x_t, from a zero state
        win, _ = lm(tokens[2:5], lm.init_hidden(B))
        assert float((y[4] - win[-1]).abs().max()) <= 1e-5
        # a segment with its k - 1 tokens of context equals the same positions of one long call
        assert float((tm(tokens[4:], tokens[:4]) - y[4:]).abs().max()) <= 1e-5
    # weights are copied, not shared
    assert all(p.data_ptr() != q.data_ptr() for p in tm.parameters() for q in lm.parameters())


@pytest.mark.parametrize("cell", ["tanh", "lstm"])
def test_evaluate_helpers_and_gradient_curve(cell):
    torch.manual_seed(0)
    lm = RNNLM(30, emb=6, hidden=8, layers=2, dropout=0.0, cell=cell)
    data = torch.randint(0, 30, (80,))
    src = batchify(data, 8)  # 10 rows
    full = evaluate(lm, src, bptt=4)
    assert math.isfinite(full) and full > 0
    # a truncation as long as the stream equals the full model (hidden carried from zero)
    assert evaluate_truncated(lm.truncated(src.shape[0]), src, bptt=4) == pytest.approx(full, rel=1e-5)
    assert evaluate_truncated(lm.truncated(2), src, bptt=4) != pytest.approx(full, rel=1e-5)
    curve = grad_norm_vs_distance(lm, data, max_distance=6, n_seqs=4, burn_in=3)
    assert len(curve) == 7 and all(c >= 0 for c in curve) and curve[0] > 0
    assert lm.training  # mode restored


def test_errors():
    with pytest.raises(ValueError, match="Unknown cell 'gru'"):
        RNNLM(10, cell="gru")
    with pytest.raises(ValueError, match="tie_weights"):
        RNNLM(10, emb=4, hidden=6, tie_weights=True)
    with pytest.raises(ValueError, match="k must be"):
        RNNLM(10, emb=4, hidden=4).truncated(0)


def _load_experiment():
    return _load("wikitext")


def test_quick_experiment_runs_and_writes_results(tmp_path):
    exp = _load_experiment()
    root = write_corpus(tmp_path / "data", n_lines=(400, 60, 60))
    out = tmp_path / "out"
    doc = tmp_path / "docs" / "stability.md"
    doc.parent.mkdir()
    doc.write_text("# Results\n\nother section\n")
    res = exp.main(["--quick", "--out", str(out), "--data-root", str(root), "--tokens", "2000", "--eval-tokens", "400",
                    "--emb", "8", "--hidden", "8", "--ks", "2,5", "--grad-distance", "5", "--grad-seqs", "2",
                    "--threads", "1", "--doc", str(doc)])
    saved = json.loads((out / "results.json").read_text())
    for key in ("mode", "command", "config", "env", "corpus", "models", "grad_curve", "stabilizers", "paper"):
        assert key in saved, key
    assert saved["mode"] == "quick" and saved["corpus"]["train_tokens"] == 2000
    assert set(saved["models"]) == {"tanh-unstable", "tanh-stable", "lstm-unstable", "lstm-stable"}
    for name, r in saved["models"].items():
        assert set(r["truncated"]) == {"2", "5"} and r["test_ppl"] > 1, name
        assert len(saved["grad_curve"][name]) == 6
        carried = saved["grad_curve_carried"][name]
        assert len(carried["curve"]) == 6 and carried["segments"] >= 1 and carried["curve"][0] > 0
        lam = r["data_lambda"]
        assert 0 < lam["mean"] <= lam["max"]
        if name.startswith("lstm"):
            assert lam["max_inf"] > 0
        elif name == "tanh-stable":  # data lambda never exceeds the certificate
            assert lam["max"] <= r["certified_lambda"] + 1e-6
    assert saved["models"]["tanh-stable"]["certified_lambda"] <= 0.99 * (1 + 1e-6)
    assert saved["models"]["lstm-stable"]["certified_lambda"] < 1
    assert (out / "results.md").read_text().count("|") > 20
    assert (out / "grad_norm_vs_distance.png").stat().st_size > 0 and (out / "truncation.png").is_file()
    text = doc.read_text()
    assert text.startswith("# Results\n\nother section\n") and "<!-- wikitext:begin -->" in text
    assert "Quick mode, CPU" in text
    # --from-json: the same section from the JSON alone; several files (one per model) merge
    doc2 = tmp_path / "docs2" / "stability.md"
    exp.main(["--from-json", str(out / "results.json"), "--out", str(tmp_path / "out2"), "--doc", str(doc2)])
    assert doc2.read_text().split("<!-- wikitext:begin -->")[1] == text.split("<!-- wikitext:begin -->")[1]
    parts = []
    for i, names in enumerate((["tanh-unstable", "tanh-stable"], ["lstm-unstable", "lstm-stable"])):
        part = dict(saved, models={n: saved["models"][n] for n in names},
                    grad_curve={n: saved["grad_curve"][n] for n in names},
                    grad_curve_carried={n: saved["grad_curve_carried"][n] for n in names})
        parts.append(tmp_path / f"part{i}.json")
        parts[-1].write_text(json.dumps(part))
    merged = exp.main(["--from-json", *map(str, parts), "--out", str(tmp_path / "out3")])
    assert set(merged["models"]) == set(saved["models"]) and len(merged["commands"]) == 2
    with pytest.raises(SystemExit, match="more than one file"):
        exp.main(["--from-json", str(parts[0]), str(parts[0]), "--out", str(tmp_path / "out4")])
    # rewriting replaces the section, leaving the rest alone
    exp.write_doc(doc, "<!-- wikitext:begin -->\nnew\n<!-- wikitext:end -->")
    assert doc.read_text() == "# Results\n\nother section\n\n<!-- wikitext:begin -->\nnew\n<!-- wikitext:end -->\n"
    assert res["models"]["lstm-stable"]["stable"] is True


def test_the_page_names_where_each_recorded_stabilizer_lives_now(tmp_path):
    """A results JSON keeps a stabilizer's description as its run wrote it (the committed quick run:
    ``seq2d.lstm.LSTMProjection``, two moves ago); the page renders it through the experiment's MOVED
    table, so the committed page is what its JSON renders and every class path on it imports."""
    import importlib
    import re

    exp = _load_experiment()
    doc = tmp_path / "stability.md"
    exp.main(["--from-json", str(ROOT / "docs" / "results" / "stability" / "wikitext_quick.json"),
              "--out", str(tmp_path / "out"), "--doc", str(doc)])

    def stable_models(text):
        return next(line for line in text.splitlines() if line.startswith("Stable models: "))

    line = stable_models(doc.read_text())
    assert line == stable_models((ROOT / "docs" / "results" / "stability.md").read_text())
    recorded = [exp._current_names(f"{old}{cls}(...)") for old in ("seq2d.lstm.", "seq2d.stability.")
                for cls in ("LSTMProjection", "AuthorLSTMNormalization")]
    paths = re.findall(r"\bseq2d(?:\.\w+)+", " ".join([line, *recorded]))
    assert "seq2d.lab.lstm.LSTMProjection" in paths and "seq2d.lab.lstm.AuthorLSTMNormalization" in paths
    for path in paths:
        module, name = path.rsplit(".", 1)
        assert hasattr(importlib.import_module(module), name), f"{path} (on the page) does not import"


def test_quick_experiment_author_lstm_projection_flag(tmp_path):
    """--lstm-projection author: the author's normalisation as described in the audit of issue 12
    (not checked against the author's code) is applied after every step; default stays 'ours'."""
    exp = _load_experiment()
    assert exp.build_parser().parse_args([]).lstm_projection == "ours"
    root = write_corpus(tmp_path / "data", n_lines=(400, 60, 60))
    out = tmp_path / "out"
    res = exp.main(["--quick", "--out", str(out), "--data-root", str(root), "--tokens", "2000", "--eval-tokens", "400",
                    "--emb", "8", "--hidden", "8", "--ks", "2", "--grad-distance", "3", "--grad-seqs", "2",
                    "--threads", "1", "--models", "lstm-stable", "--lstm-projection", "author"])
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["lstm_projection"] == "author"
    assert "AuthorLSTMNormalization" in saved["stabilizers"]["lstm-stable"]
    assert "audit of issue 12" in saved["stabilizers"]["lstm-stable"]
    r = res["models"]["lstm-stable"]
    assert r["test_ppl"] > 1 and r["certified_lambda"] is not None
    assert set(saved["models"]) == {"lstm-stable"}
    # the stabilizer the flag builds: columns of weight_hh_l0's gate blocks at the constants, layer 1 untouched
    model = RNNLM(50, emb=8, hidden=8, layers=2, dropout=0.0, cell="lstm")
    w1 = model.rnn.weight_hh_l1.detach().clone()
    args = exp.build_parser().parse_args(["--lstm-projection", "author"])
    project, desc = exp.make_stabilizer(model, args)
    project()
    c = {"i": 0.395, "f": 0.155, "g": 0.099, "o": 0.395}
    for j, k in enumerate("ifgo"):
        cols = model.rnn.weight_hh_l0.detach()[j * 8:(j + 1) * 8].abs().sum(0)
        assert torch.allclose(cols, torch.full_like(cols, c[k]), atol=1e-6, rtol=0), k
    assert torch.equal(model.rnn.weight_hh_l1.detach(), w1)
    args = exp.build_parser().parse_args(["--lstm-projection", "author", "--author-all-layers"])
    exp.make_stabilizer(model, args)[0]()
    cols = model.rnn.weight_hh_l1.detach()[:8].abs().sum(0)
    assert torch.allclose(cols, torch.full_like(cols, 0.395), atol=1e-6, rtol=0)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"stable_rnn_{name}", ROOT / "experiments" / "stable_rnn" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_truncated_training_quick_runs_and_writes_results(tmp_path):
    exp = _load("truncated_training")
    root = write_corpus(tmp_path / "data", n_lines=(400, 60, 60))
    out = tmp_path / "out"
    doc = tmp_path / "docs" / "stability.md"
    doc.parent.mkdir()
    doc.write_text("# Results\n\nother section\n")
    res = exp.main(["--quick", "--out", str(out), "--data-root", str(root), "--tokens", "2000", "--eval-tokens", "400",
                    "--emb", "8", "--hidden", "16", "--cutoffs", "10,20", "--ks", "2,3", "--grad-distance", "4",
                    "--max-batches", "4", "--lambda-rows", "5", "--threads", "1", "--doc", str(doc)])
    saved = json.loads((out / "results.json").read_text())
    assert set(saved["runs"]) == {"unstable", "stable"}
    for tag, run in saved["runs"].items():
        models = run["models"]
        assert list(models) == ["recurrent", "recurrent, init perturbed", "k=2", "k=3"]
        rec = models["recurrent"]
        assert set(rec["test_ppl_truncated_at"]) == {"2", "3"} and len(rec["grad_carried"]["curve"]) == 5
        assert rec["distance"]["recurrent"] == 0 and rec["distance"]["recurrent_moved"] > 0
        for name in ("recurrent, init perturbed", "k=2", "k=3"):
            m = models[name]
            assert m["updates"] == rec["updates"] == 3 and m["distance"]["recurrent"] > 0 and m["test_ppl_recurrent"] > 1
            assert m["data_lambda"]["max"] > 0
        assert models["k=2"]["test_ppl_truncated"] > 1
        if tag == "stable":
            assert all(m["certified_lambda"] <= 0.99 * (1 + 1e-6) for m in models.values())
    assert saved["config"]["cutoffs"] == [10, 20]
    assert res["runs"]["stable"]["stable"] is True
    for f in ("truncated_ppl.png", "weight_distance.png", "grad_carried.png", "results.md"):
        assert (out / f).stat().st_size > 0, f
    text = doc.read_text()
    assert text.startswith("# Results\n\nother section\n") and "<!-- truncated-training:begin -->" in text
    assert "Quick mode" in text and (doc.parent / "stability" / "truncated_training_weight_distance.png").is_file()
    # --from-json writes the same section again from the JSON alone (nothing retrained)
    doc2 = tmp_path / "docs2" / "stability.md"
    exp.main(["--from-json", str(out / "results.json"), "--out", str(tmp_path / "out2"), "--doc", str(doc2)])
    assert doc2.read_text().split("<!-- truncated-training:begin -->")[1] == text.split("<!-- truncated-training:begin -->")[1]
