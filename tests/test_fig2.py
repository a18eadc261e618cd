"""experiments/stable_rnn/fig2.py (issue 34 item 2) and the page sections report.py writes from it and from
wikitext_runs.py's collected runs (item 4): the pre-stated tests can come out every way, the script measures
the runs' own weights, their starts and a diverged control and continues where it stopped, the sections say
"pending" for what is missing and render what is there, the slides' caveats are quoted exactly, and
docs/results/stability.md regenerates byte for byte from a clean checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from test_wikitext_runs import _corpus, _tiny  # the tiny synthetic corpus and run settings
from pages import changes, snapshot  # what "the page regenerates" means (one rule for every page)

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "experiments" / "stable_rnn"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"test_fig2_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


f2 = _load("fig2")


def _entry(cond, seed, kind, D, *, K=50, bptt=35, counts=True):
    return {"condition": cond, "seed": seed, "kind": kind, "vanish_distance": D, "bptt": bptt, "counts": counts,
            "curve": [1.0] * (K + 1)}


def _record(trained, untrained=(), diverged=(), cond="tanh-unstable", **kw):
    e = [_entry(cond, s, "trained", d, **kw) for s, d in enumerate(trained)]
    e += [_entry(cond, s, "untrained", d, **kw) for s, d in enumerate(untrained)]
    e += [_entry(cond, s, "diverged", d, **kw) for s, d in enumerate(diverged)]
    return {"entries": e}


def test_the_prestated_tests_can_come_out_every_way():
    a = f2.analyse(_record([10, 11, 10], [5, 5, 6], [2, 2, 2]))
    assert a["tanh"]["verdict"] == "supported" and a["lstm"]["verdict"] == "pending"
    assert a["tanh"]["apart"]["untrained"]["outcome"] == "separated"
    # the audit's case: the diverged control's D is as short as the trained models'
    a = f2.analyse(_record([3, 2, 3], [5, 5, 6], [2, 2, 3]))["tanh"]
    assert a["vanish"]["outcome"] == "held" and a["apart"]["diverged"]["outcome"] == "not separated"
    assert a["verdict"] == "met but uninformative"
    # a seed whose gradient has not vanished within the BPTT length, or not within K > BPTT
    assert f2.analyse(_record([10, 40, 10], [5, 5, 6]))["tanh"]["verdict"] == "falsified"
    assert f2.analyse(_record([10, None, 10], [5, 5, 6]))["tanh"]["vanish"]["failing_seeds"] == [1]
    # K <= BPTT: a curve that has not fallen by K decides nothing
    a = f2.analyse(_record([8, None], [None, None], K=8))["tanh"]
    assert a["vanish"]["outcome"] == "undecided" and a["verdict"] == "undecided"
    # one seed gives no spread; a diverged trained run and a control that did not diverge do not count
    assert f2.analyse(_record([10], [5]))["tanh"]["apart"]["untrained"]["outcome"] == "undecided"
    rec = _record([10, 11, 10], [5, 5, 6], [9, 10, 11])
    rec["entries"].append(_entry("tanh-unstable", 3, "trained", 60, counts=False))
    for e in rec["entries"]:
        if e["kind"] == "diverged":
            e["counts"] = False
    a = f2.analyse(rec)["tanh"]
    assert a["vanish"]["seeds"] == [0, 1, 2] and "diverged" not in a["apart"] and a["verdict"] == "supported"
    assert f2.separation([4, 4], [4, 5])["outcome"] == "not separated"
    assert f2.separation([4, 4], [6, 6]) == {"outcome": "separated", "mean_trained": 4, "mean_control": 6, "gap": 2,
                                             "spread": 0}


def test_one_percent_distance():
    assert f2.one_percent_distance([2.0, 1.0, 0.03, 0.019]) == 3
    assert f2.one_percent_distance([2.0, 1.0]) is None
    assert f2.one_percent_distance([0.0, 0.0, 0.0]) == 0  # no gradient at any distance: a saturated model


def test_the_untrained_control_is_a_model_with_every_recurrent_weight_trainable():
    """initial_model builds each condition's model from a run config alone, the stable ones projected (a
    projection that cannot write the recurrent weights raises here), every recurrent weight a parameter."""
    wr = f2.wr
    for cond in wr.CONDITIONS:
        cell, stable = wr.wx.condition(wr.model_condition(cond))
        cfg = {"condition": cond, "seed": 0, "emb": 6, "hidden": 8, "layers": 2, "dropout": 0.2,
               "adaptive_cutoffs": [5], "div_value": 2.0, "corpus": {"vocab": 20}}
        if stable:
            cfg.update({"rnn_lambda": 0.9} if cell == "tanh" else
                       {"lstm_projection": "author" if cond == wr.AUTHOR else "ours", "embedding_clip": 1.0})
        model, stabilize, _ = wr.initial_model(cfg)
        assert (stabilize is not None) == stable
        n = sum(p.numel() for p in model.rnn.parameters() if p.requires_grad)
        assert n >= 6 * 8 + 3 * 8 * 8, f"{cond}: {n} trainable recurrent entries"  # W_ih1, W_hh1, W_ih2, W_hh2
        again, _, _ = wr.initial_model(cfg)
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_fig2_measures_the_runs_and_their_controls_and_the_page_renders_them(tmp_path, capsys):
    wr = f2.wr
    root = _corpus(tmp_path / "data", n_lines=(900, 80, 120))
    runs, out, dest = tmp_path / "runs", tmp_path / "fig2", tmp_path / "results"
    wr.main(["train", *_tiny(root), "--lr", "4", "--conditions", "tanh-unstable,lstm-unstable", "--seeds", "0,1",
             "--out", str(runs)])
    (runs / "lstm-unstable" / "lr4" / "seed0").mkdir(parents=True)  # not a main run folder: left out, said so
    (runs / "lstm-unstable" / "lr4" / "seed0" / "run.json").write_text("{}")
    argv = ["--quick", "--data-root", str(root), "--runs", str(runs), "--out", str(out), "--max-distance", "6",
            "--diverged-batches", "20"]
    rec = f2.main(argv)
    assert "not a main run folder" in capsys.readouterr().out
    kinds = sorted((e["condition"], e["seed"], e["kind"]) for e in rec["entries"])
    assert kinds == sorted([(c, s, k) for c in ("lstm-unstable", "tanh-unstable") for s in (0, 1)
                            for k in ("trained", "untrained")] + [("tanh-unstable", s, "diverged") for s in (0, 1)])
    for e in rec["entries"]:
        res = json.loads((runs / e["condition"] / f"seed{e['seed']}" / "result.json").read_text())
        assert len(e["curve"]) == 7 and e["targets"] == e["columns"] * len(range(0, e["rows"] - 7, 2))
        assert e["certified_lambda"] > 0 and e["data_lambda"]["max"] > 0
        if e["kind"] == "trained":  # the run's own final weights: the same test loss as its result.json
            assert abs(e["test_loss"] - res["test_loss"]) <= 1e-9 and e["updates"] == res["updates"] > 0
        if e["kind"] == "diverged":
            assert e["lr"] == 200.0 and e["updates"] == 20 and e["counts"] == (e["diverged"] is not None)
    assert rec["analysis"] == f2.analyse(rec) and rec["predictions"] == f2.PREDICTIONS
    assert Path(out / "fig2.json").is_file()
    # a second call continues from the kept measurements
    capsys.readouterr()
    again = f2.main(argv)
    assert capsys.readouterr().out.count("measured before, kept") == 10
    assert again["entries"] == rec["entries"]
    assert all(e["env"]["cpu_capability"] == rec["env"]["cpu_capability"] for e in rec["entries"])
    # a run folder gone (another machine, a wiped disk): its entries stay in the record, not measured again
    away = tmp_path / "away"
    (runs / "tanh-unstable" / "seed1").rename(away)
    capsys.readouterr()
    kept = f2.main(argv)
    assert capsys.readouterr().out.count("no run folder here, kept from the previous record") == 3
    assert kept["entries"] == rec["entries"] and kept["analysis"] == rec["analysis"]
    with pytest.raises(SystemExit, match="--drop-missing"):  # other settings: not comparable, not merged
        f2.main([*argv, "--max-distance", "5"])
    dropped = f2.main([*argv, "--json", str(tmp_path / "dropped.json"), "--drop-missing"])
    assert sorted({(e["condition"], e["seed"]) for e in dropped["entries"]}) == [
        ("lstm-unstable", 0), ("lstm-unstable", 1), ("tanh-unstable", 0)]
    (away).rename(runs / "tanh-unstable" / "seed1")
    # weights that do not give the run's test loss are refused
    res_path = runs / "tanh-unstable" / "seed0" / "result.json"
    res = json.loads(res_path.read_text())
    res_path.write_text(json.dumps(dict(res, test_loss=res["test_loss"] + 0.5)))
    with pytest.raises(SystemExit, match="not the run's weights or data"):
        f2.main([*argv, "--out", str(tmp_path / "other")])
    res_path.write_text(json.dumps(res))

    # the page: the collected runs in the table (the planned ones not run are pending), Fig. 2 from the record
    wr.main(["collect", "--runs", str(runs), "--dest", str(dest)])
    fig2_json = json.loads((out / "fig2.json").read_text())  # one model measured on another CPU: the page says where
    fig2_json["entries"][0]["env"] = dict(fig2_json["entries"][0]["env"], hardware="Other CPU, 1 thread(s)",
                                          cpu_capability="AVX2")
    fig2_json["entries"] = [e for e in fig2_json["entries"]  # a collected run without its Fig. 2 model: said so
                            if (e["condition"], e["seed"], e["kind"]) != ("lstm-unstable", 1, "trained")]
    (out / "fig2.json").write_text(json.dumps(fig2_json))
    report = _load("report")
    page = tmp_path / "docs" / "stability.md"
    assert report.main(["--runs", str(REPO / "docs/results/stability"), "--doc", str(page), "--wikitext-results",
                        str(dest), "--fig2", str(out / "fig2.json")]) == 0
    text = page.read_text()
    assert "| tanh-unstable | 0, 1; pending 2 |" in text and "| tanh-stable | pending (0 of 3" in text
    assert "**4 of the 13 planned runs are collected**" in text
    assert "one row in every 2 from row 6 on" in text and "Pending**" not in text
    assert "entries per machine: " in text and "Other CPU, 1 thread(s) (torch CPU capability AVX2): 1" in text
    assert "ran on more than one" not in text  # the runs themselves all ran here
    assert "Not measured: lstm-unstable/seed1 (collected" in text
    assert "| tanh-unstable | diverged | 0 |" in text and (page.parent / "stability" / "fig2_gradient_distance.png").is_file()
    # nothing collected and no record: pending, and no picture
    bare = tmp_path / "bare" / "stability.md"
    assert report.main(["--runs", str(REPO / "docs/results/stability"), "--doc", str(bare), "--wikitext-results",
                        str(tmp_path / "nothing"), "--fig2", str(tmp_path / "nothing.json")]) == 0
    text = bare.read_text()
    assert "**0 of the 13 planned runs are collected**" in text and "**Pending**" in text
    assert "F2-apart" in text and not (bare.parent / "stability" / "fig2_gradient_distance.png").exists()


def _seeds_dir() -> Path | None:
    for d in (os.environ.get("SEQ2D_SEEDS"), REPO.parent / "shared" / "seeds", Path("/work/shared/seeds")):
        if d and (Path(d) / "002_e0ce570a88c4aff3.txt").is_file():
            return Path(d)
    return None


def test_the_slides_caveats_are_quoted_exactly():
    rw = _load("report_wikitext")
    seeds = _seeds_dir()
    if seeds is None:
        pytest.skip("the source documents (shared/seeds) are not here; set SEQ2D_SEEDS")
    lines = [ln.strip() for ln in (seeds / Path(rw.SLIDES).name).read_text().splitlines()]
    for c in rw.CAVEATS:
        at = [i for i, ln in enumerate(lines) if ln == c["quote"]]
        assert at, f"{c['quote']!r} is not a line of {rw.SLIDES}"
        before = lines[max(0, at[0] - 12):at[0]]
        assert any(ln == c["slide"] for ln in before), f"{c['quote']!r} is not on the slide {c['slide']!r}"
        for on in c["on"]:
            assert any(ln.lstrip("- ") == on for ln in before), f"{c['quote']!r} does not stand next to {on!r}"
    text = rw.caveats_text()
    assert all(f'"{c["quote"]}"' in text for c in rw.CAVEATS) and rw.SLIDES in text


def _readme_commands() -> list[list[str]]:
    """The commands experiments/stable_rnn/README.md gives for regenerating the page from committed JSON."""
    text = (HERE / "README.md").read_text()
    block = text.split("The same sections again from\nthe committed JSON, nothing retrained:\n\n```\n", 1)[1].split("```", 1)[0]
    return [shlex.split(c) for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def test_the_stability_page_regenerates_byte_for_byte_from_a_clean_checkout(committed_tree):
    """Every command the README lists, run in a git-archive copy of HEAD: docs/results/stability.md and every
    file next to it come out as committed (so the page holds no number that its JSON does not give)."""
    repo = committed_tree
    cmds = _readme_commands()
    assert cmds[0][:2] == ["python", "experiments/stable_rnn/report.py"] and len(cmds) >= 7
    files = lambda: [repo / "docs/results/stability.md", *sorted((repo / "docs/results/stability").iterdir())]  # noqa: E731
    before = snapshot(files())
    env = {"PYTHONPATH": str(repo), "MPLBACKEND": "Agg", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for c in cmds:
        subprocess.run([sys.executable, *c[1:]], cwd=repo, env=env, check=True, capture_output=True)
    changed = changes(before, snapshot(files()))  # tests/pages.py: text byte for byte, pictures by its rule
    assert not changed, f"regenerating changed {changed}: run the README's commands and commit the result"
