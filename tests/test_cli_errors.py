"""The CLI's error policy (seq2d/errors.py, docs/errors.md): a user's mistake in a flag or a
named file prints one ``seq2d: error:`` line naming the place (flag, path, key, line) and
exits with status 2, no traceback; Ctrl-C exits with 130; anything else is a bug: the
traceback, the command line and the bug line, status 1."""

import pathlib
import subprocess
import sys

import pytest
import torch

import seq2d.cli as cli
from seq2d.cli import BUG_LINE, main
from seq2d.errors import InvalidValue, MissingFile

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The files the cases name, written into tmp_path (the working folder of every case).
FILES = {
    "bad.toml": "steps = 3\nslots = [{size = 4}, {size = 3\n",  # unclosed inline table at line 2
    "bad.json": '{"slots": [{"size": 4},, ]}',
    "list.json": "[1, 2]\n",
    "unknown.toml": "slots = [{size = 4}, {size = 3}]\nblocks = [{row = 1, col = 0}]\nbogus = 1\n",
    "badkind.toml": 'slots = [{size = 4}, {size = 3}]\nblocks = [{row = 1, col = 0, kind = "nope"}]\n',
    "badsize.toml": "slots = [{size = -1}, {size = 3}]\n",
    "badrow.toml": "slots = [{size = 4}, {size = 3}]\nblocks = [{row = 5, col = 0}]\n",
    "badtype.json": '{"slots": [{"size": 2}, {"size": "x"}]}',
    "badmask.toml": 'slots = [{size = 2}, {size = 2}]\nblocks = [{row = 1, col = 0, kind = "mask", indices = [[5, 5]]}]\n',
    "empty.toml": "",
    "notes": "hello\n",  # a text file without suffix: read as a TOML spec
    "file": "hello\n",  # docs/errors.md: -o file/out.png
    "binary.toml": b"\xff\xfe\x00bad",
    "broken.pt": b"PK\x03\x04junk",
    "empty.pt": b"",
    "badcfg.toml": "epochs = \n",  # invalid value at line 1, column 10
    "unkcfg.toml": "epochs = 1\nbogus = 2\n",
    "typecfg.toml": 'epochs = "x"\n',
    "tablecfg.toml": "[opt]\nlr = 1\n",
    "devicecfg.toml": 'device = "nope"\n',
    "negcfg.toml": "epochs = -1\n",
    "modelcfg.toml": 'model = "nope:1"\ndata = "synthetic"\nepochs = 0\n',
}
FOLDERS = ["somedir", "adir.png", "m-graph.png"]

# (id, argv, what the one error line must name); "{tmp}" is the test's tmp_path
CASES = [
    # show: presets, names, key=value, spec files
    ("show-unknown-preset", ["show", "nope:1,2"], ["Unknown preset 'nope'"]),
    ("show-unknown-name", ["show", "nope"], ["Unknown model 'nope'"]),
    ("show-missing-toml", ["show", "missing.toml"], ["MODEL", "spec file 'missing.toml' does not exist"]),
    ("show-missing-json", ["show", "missing.json"], ["MODEL", "'missing.json' does not exist"]),
    ("show-missing-in-folder", ["show", "runs/x/model.toml"], ["'runs/x/model.toml' does not exist"]),
    ("show-missing-checkpoint", ["show", "model.pt"], ["checkpoint file 'model.pt' does not exist"]),
    ("show-folder", ["show", "somedir"], ["MODEL", "'somedir' is a folder"]),
    ("show-checkpoint-file", ["show", "broken.pt"], ["'broken.pt' is a checkpoint", "seq2d stability"]),
    ("show-toml-syntax", ["show", "bad.toml"], ["spec file 'bad.toml'", "not valid TOML", "line 2, column 31"]),
    ("show-json-syntax", ["show", "bad.json"], ["spec file 'bad.json'", "not valid JSON", "line 1, column 24"]),
    ("show-json-top-level-list", ["show", "list.json"], ["'list.json'", "top level", "list"]),
    ("show-spec-unknown-key", ["show", "unknown.toml"], ["'unknown.toml'", "unknown key 'bogus'"]),
    ("show-spec-bad-kind", ["show", "badkind.toml"], ["'badkind.toml'", "blocks[0].kind", "'nope'"]),
    ("show-spec-bad-size", ["show", "badsize.toml"], ["'badsize.toml'", "slots[0].size"]),
    ("show-spec-bad-row", ["show", "badrow.toml"], ["blocks[0].row", "got 5"]),
    ("show-spec-json-bad-type", ["show", "badtype.json"], ["'badtype.json'", "slots[1].size"]),
    ("show-spec-mask-outside", ["show", "badmask.toml"], ["blocks[0].indices[0]", "[5, 5]"]),
    ("show-spec-empty", ["show", "empty.toml"], ["'empty.toml'", "'slots'"]),
    ("show-spec-not-utf8", ["show", "binary.toml"], ["'binary.toml'", "not UTF-8", "0xff"]),
    ("show-text-file-as-spec", ["show", "notes"], ["spec file 'notes'", "not valid TOML", "line 1"]),
    ("show-kv-with-preset", ["show", "mlp:4,3", "act=tanh"], ["key=value", "'mlp:4,3'"]),
    ("show-kv-without-equals", ["show", "mlp", "sizes"], ["key=value", "'sizes'"]),
    ("show-unknown-kwarg", ["show", "mlp", "bogus=1"], ["constructor 'mlp'", "'bogus'", "sizes="]),
    ("show-missing-kwarg", ["show", "transformer_encoder", "d_model=8", "nhead=2"], ["'transformer_encoder'", "'num_layers'"]),
    ("show-preset-bad-int", ["show", "mlp:4,x"], ["preset 'mlp'", "'x'"]),
    ("show-preset-too-few", ["show", "rnn:8"], ["preset 'rnn'", "2 positional"]),
    ("show-preset-bad-bool", ["show", "mlp:4,3,bias=maybe"], ["preset 'mlp'", "bias", "'maybe'"]),
    ("show-preset-unknown-key", ["show", "mlp:4,3,zz=1"], ["preset 'mlp'", "'zz'"]),
    ("show-preset-heads", ["show", "transformer_layer:7,2,16"], ["d_model (7)", "nhead (2)"]),
    ("show-preset-density", ["show", "random_mask:10,5,density=2"], ["density", "2.0"]),
    ("show-no-model", ["show"], ["model", "seq2d show --help"]),
    # draw: -o, --tile, --dpi, --kind
    ("draw-pdf", ["draw", "mlp:4,3", "-o", "x.pdf"], ["-o", "'.pdf'", ".png, .svg"]),
    ("draw-no-suffix", ["draw", "mlp:4,3", "-o", "x"], ["-o", "without suffix"]),
    ("draw-tile-0", ["draw", "mlp:4,3", "-o", "x.png", "--tile", "0"], ["--tile", "16, 32, 64, 128", "got 0"]),
    ("draw-tile-7", ["draw", "mlp:4,3", "-o", "x.png", "--tile", "7"], ["--tile", "got 7"]),
    ("draw-tile-negative", ["draw", "mlp:4,3", "-o", "x.png", "--tile", "-16"], ["--tile", "got -16"]),
    ("draw-tile-not-int", ["draw", "mlp:4,3", "-o", "x.png", "--tile", "x"], ["--tile", "'x'", "seq2d draw --help"]),
    ("draw-missing-folder", ["draw", "mlp:4,3", "-o", "{tmp}/no/dir/out.png"],
     ["-o", "the folder '{tmp}/no/dir' does not exist"]),
    ("draw-missing-folder-relative", ["draw", "mlp:4,3", "-o", "nodir/out.svg"], ["-o", "the folder 'nodir' does not exist"]),
    ("draw-parent-is-file", ["draw", "mlp:4,3", "-o", "notes/out.png"], ["-o", "'notes' is a file, not a folder"]),
    ("draw-deep-parent-is-file", ["draw", "mlp:4,3", "-o", "notes/a/b.png"], ["-o", "'notes' is a file"]),
    ("draw-output-is-folder", ["draw", "mlp:4,3", "-o", "adir.png"], ["-o", "'adir.png' is a folder"]),
    ("draw-both-output-is-folder", ["draw", "mlp:4,3", "-o", "m.png", "--kind", "both"], ["-o", "'m-graph.png' is a folder"]),
    ("draw-dpi-0", ["draw", "mlp:4,3", "-o", "x.png", "--dpi", "0"], ["--dpi", "got 0"]),
    ("draw-dpi-negative", ["draw", "mlp:4,3", "-o", "x.png", "--dpi", "-5"], ["--dpi", "got -5"]),
    ("draw-dpi-nan", ["draw", "mlp:4,3", "-o", "x.png", "--dpi", "nan"], ["--dpi", "nan"]),
    ("draw-kind-bad", ["draw", "mlp:4,3", "-o", "x.png", "--kind", "pie"], ["--kind", "'pie'"]),
    ("draw-no-output", ["draw", "mlp:4,3"], ["-o/--output"]),
    ("draw-bad-spec", ["draw", "bad.toml", "-o", "x.png"], ["'bad.toml'", "line 2, column 31"]),
    ("draw-missing-spec", ["draw", "missing.toml", "-o", "x.png"], ["'missing.toml' does not exist"]),
    # stability: checkpoints, run folders, flags
    ("stability-missing-checkpoint", ["stability", "missing.pt"], ["MODEL", "checkpoint file 'missing.pt' does not exist"]),
    ("stability-missing-folder", ["stability", "runs/missing/"], ["'runs/missing/' does not exist"]),
    ("stability-folder-without-checkpoint", ["stability", "somedir"], ["'somedir'", "checkpoint.pt"]),
    ("stability-broken-checkpoint", ["stability", "broken.pt"], ["checkpoint 'broken.pt'", "corrupt"]),
    ("stability-empty-checkpoint", ["stability", "empty.pt"], ["checkpoint 'empty.pt'", "0 bytes"]),
    ("stability-plain-state-dict", ["stability", "plain.pt"], ["checkpoint 'plain.pt'", "state_dict"]),
    ("stability-eps-0", ["stability", "rnn:3,4", "--eps", "0"], ["--eps", "got 0"]),
    ("stability-eps-nan", ["stability", "rnn:3,4", "--eps", "nan"], ["--eps", "nan"]),
    ("stability-eps-inf", ["stability", "rnn:3,4", "--eps", "inf"], ["--eps", "inf"]),
    ("stability-eps-not-a-number", ["stability", "rnn:3,4", "--eps", "small"], ["--eps", "'small'"]),
    ("stability-input-bound-0", ["stability", "rnn:3,4", "--input-bound", "0"], ["--input-bound", "got 0"]),
    ("stability-input-bound-inf", ["stability", "rnn:3,4", "--input-bound", "inf"], ["--input-bound", "inf"]),
    ("stability-data-steps-0", ["stability", "rnn:3,4", "--data-steps", "0"], ["--data-steps", "got 0"]),
    ("stability-batch-0", ["stability", "rnn:3,4", "--batch", "0"], ["--batch", "got 0"]),
    ("stability-iters-0", ["stability", "rnn:3,4", "--iters", "0"], ["--iters", "got 0"]),
    ("stability-unknown-preset", ["stability", "nope:1"], ["Unknown preset 'nope'"]),
    ("stability-missing-spec", ["stability", "missing.toml"], ["spec file 'missing.toml' does not exist"]),
    ("stability-spec-syntax", ["stability", "bad.toml"], ["'bad.toml'", "line 2, column 31"]),
    # equivalence
    ("equivalence-seeds-0", ["equivalence", "--seeds", "0"], ["--seeds", "got 0"]),
    ("equivalence-seeds-negative", ["equivalence", "--seeds", "-1"], ["--seeds", "got -1"]),
    ("equivalence-seeds-not-int", ["equivalence", "--seeds", "x"], ["--seeds", "'x'"]),
    ("equivalence-extra-argument", ["equivalence", "extra"], ["unrecognized arguments: extra"]),
    # train: config files and flags
    ("train-missing-config", ["train", "missing.toml"], ["config file 'missing.toml' does not exist"]),
    ("train-missing-config-flag", ["train", "--config", "missing.toml"], ["config file 'missing.toml' does not exist"]),
    ("train-toml-syntax", ["train", "badcfg.toml"], ["config file 'badcfg.toml'", "not valid TOML", "line 1, column 10"]),
    ("train-unknown-key", ["train", "unkcfg.toml"], ["unkcfg.toml", "unknown key 'bogus'"]),
    ("train-table", ["train", "tablecfg.toml"], ["tablecfg.toml", "'opt' is a table"]),
    ("train-config-is-folder", ["train", "somedir"], ["config file 'somedir' is a folder"]),
    ("train-config-not-utf8", ["train", "binary.toml"], ["config file 'binary.toml'", "not UTF-8"]),
    ("train-two-configs", ["train", "a.toml", "--config", "b.toml"], ["'a.toml'", "--config 'b.toml'"]),
    ("train-set-unknown-key", ["train", "--set", "nokey=1"], ["unknown key 'nokey'"]),
    ("train-set-no-equals", ["train", "--set", "epochs"], ["'epochs'", "key=value"]),
    ("train-bad-choice", ["train", "devicecfg.toml"], ["config field 'device'", "'nope'"]),
    ("train-negative-epochs", ["train", "negcfg.toml"], ["config field 'epochs'", "-1"]),
    ("train-bad-model", ["train", "modelcfg.toml"], ["Unknown preset 'nope'"]),
    ("train-unknown-flag", ["train", "--epoch", "3"], ["--epoch", "seq2d train --help"]),
    ("train-set-bad-type", ["train", "--set", "epochs=x"], ["'epochs'", "'x'"]),
    ("train-wrong-type-in-file", ["train", "typecfg.toml"], ["config field 'epochs'", "'x'"]),
    ("train-wrong-type-flag", ["train", "--epochs", "x"], ["config field 'epochs'", "'x'"]),
    # mnist: flags
    ("mnist-unknown-model", ["mnist", "--models", "nope"], ["Unknown model 'nope'"]),
    ("mnist-model-misspelt", ["mnist", "--models", "random_elemnt"], ["did you mean 'random_element'?"]),
    ("mnist-model-old-spelling", ["mnist", "--models", "random-element"], ["'random-element' is now called 'random_element'"]),
    ("mnist-epochs-not-int", ["mnist", "--epochs", "x"], ["--epochs", "'x'"]),
    ("mnist-data-choice", ["mnist", "--data", "nope"], ["--data", "'nope'"]),
    ("mnist-num-threads", ["mnist", "--num-threads", "x"], ["--num-threads", "'x'"]),
    ("mnist-device", ["mnist", "--device", "nope"], ["config field 'device'", "'nope'"]),
    ("mnist-epochs-negative", ["mnist", "--epochs", "-1"], ["config field 'epochs'", "-1"]),
    ("mnist-steps-negative", ["mnist", "--steps", "-1"], ["config field 'steps'", "-1"]),
    ("mnist-max-updates-0", ["mnist", "--max-updates", "0"], ["config field 'max_updates'", "got 0"]),
    ("mnist-max-steps-old-flag", ["mnist", "--max-steps", "2"], ["'--max-steps' is now called '--max-updates'"]),
    ("train-max-steps-old-flag", ["train", "--max-steps", "2"], ["'--max-steps' is now called '--max-updates'"]),
    ("mnist-unknown-flag", ["mnist", "--model", "mlp"], ["--model"]),
    ("mnist-seeds-not-ints", ["mnist", "--seeds", "a,b"], ["--seeds", "'a'"]),
    # the top level
    ("unknown-subcommand", ["nosuch"], ["'nosuch'"]),
    ("no-subcommand", [], ["required", "seq2d --help"]),
]

# Plain (non-seq2d) exceptions raised for user input by code this change does not own: they
# print as internal errors until the owner raises a Seq2DError there (see docs/errors.md).


def _params():
    for cid, argv, names in CASES:
        yield pytest.param(argv, names, id=cid)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for name, content in FILES.items():
        p = tmp_path / name
        p.write_bytes(content) if isinstance(content, bytes) else p.write_text(content)
    for name in FOLDERS:
        (tmp_path / name).mkdir()
    torch.save({"a": torch.zeros(2)}, tmp_path / "plain.pt")  # a state_dict, not a seq2d checkpoint
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv, names", list(_params()))
def test_user_error_is_one_line_naming_the_place(argv, names, workdir, capsys):
    tmp = str(workdir)
    before = sorted(p.name for p in workdir.rglob("*"))
    argv = [a.replace("{tmp}", tmp) for a in argv]
    rc, _, err = _run(argv, capsys)
    assert "Traceback" not in err and BUG_LINE not in err, err
    lines = [line for line in err.splitlines() if line.startswith("seq2d: error:")]
    assert rc == 2, err
    assert len(lines) == 1, err
    for name in names:
        assert name.replace("{tmp}", tmp) in lines[0], (name, lines[0])
    if argv and argv[0] in ("show", "draw", "stability", "equivalence"):  # nothing written, no folder made
        assert sorted(p.name for p in workdir.rglob("*")) == before


def test_enough_cases_across_subcommands():
    assert len(CASES) >= 50 and len({c[0] for c in CASES}) == len(CASES)
    assert {c[1][0] for c in CASES if c[1]} >= {"show", "draw", "stability", "equivalence", "train", "mnist"}


# ---------------------------------------------------------------------- not the user's fault
@pytest.mark.parametrize("exc", [RuntimeError("boom"), TypeError("boom"), ValueError("boom"), OSError(5, "boom"),
                                 KeyError("boom"), ZeroDivisionError("boom")])
def test_internal_error_shows_the_traceback_and_the_bug_line(exc, monkeypatch, capsys):
    def broken(args):
        raise exc

    monkeypatch.setattr(cli, "_cmd_show", broken)
    rc, out, err = _run(["show", "mlp:4,3"], capsys)
    assert rc == 1
    lines = err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert any(line.startswith(type(exc).__name__) and "boom" in line for line in lines), err
    assert "in broken" in err  # the frame that raised
    assert lines[-2] == "seq2d: command line: seq2d show mlp:4,3"
    assert lines[-1] == BUG_LINE == "seq2d: internal error (a bug; please report it with the command line above)"
    assert not any(line.startswith("seq2d: error:") for line in lines)


@pytest.mark.parametrize("exc", [InvalidValue("--x is bad"), MissingFile("file 'f' does not exist")])
def test_seq2d_errors_raised_anywhere_are_user_errors(exc, monkeypatch, capsys):
    def raising(args):
        raise exc

    monkeypatch.setattr(cli, "_cmd_models", raising)
    rc, _, err = _run(["models"], capsys)
    assert rc == 2 and err == f"seq2d: error: {exc}\n"


def test_checkpoint_error_is_a_user_error(monkeypatch, capsys):
    from seq2d.train.checkpoint import CheckpointError

    def raising(args):
        raise CheckpointError("'run/checkpoint.pt' is truncated")

    monkeypatch.setattr(cli, "_cmd_models", raising)
    rc, _, err = _run(["models"], capsys)
    assert rc == 2 and err == "seq2d: error: 'run/checkpoint.pt' is truncated\n"


def test_keyboard_interrupt_is_one_line_and_130(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_cmd_models", interrupted)
    rc, _, err = _run(["models"], capsys)
    assert rc == 130 and err == "seq2d: interrupted\n"


# ---------------------------------------------------------------------- the outputs of issue 11
def test_top_level_help_has_one_example_per_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    examples = out.split("examples", 1)[1]
    sub = next(a for a in cli.build_parser()._actions if a.dest == "cmd")
    assert len(sub.choices) == 7
    for name in sub.choices:
        assert f"\n  seq2d {name}" in examples, name
    assert "seq2d: error:" in out and "docs/errors.md" in out


def test_equivalence_prints_what_is_compared_and_the_tolerances(monkeypatch, capsys):
    import seq2d.equivalence as eq

    monkeypatch.setattr(eq, "CASES", eq.CASES[:2])
    rc, out, _ = _run(["equivalence"], capsys)
    lines = out.splitlines()
    assert rc == 0
    assert lines[0].startswith("every seq2d constructor vs its torch.nn reference") and "2 cases, 1 seed each" in lines[0]
    assert lines[1].startswith("tolerance: float32 1e-05, float64 1e-10 (seq2d.equivalence.TOLERANCE)")
    assert lines[2].split() == ["case", "float32", "float64"] and len(lines) == 5


def test_stability_prints_no_future_warning():
    """torch.func.jvp's first use calls the deprecated torch.jit.script inside torch: silenced there."""
    res = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-m", "seq2d.cli", "stability", "rnn:3,4",
                          "--data-steps", "3", "--batch", "1", "--iters", "2"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "FutureWarning" not in res.stderr and "jit" not in res.stderr
    assert "data lambda (max over cores)" in res.stdout


def test_docs_errors_md_quotes_what_the_cli_prints(workdir, capsys):
    """Every `seq2d ...` -> `seq2d: error: ...` example of docs/errors.md, run: the same line."""
    import re
    import shlex

    text = (ROOT / "docs" / "errors.md").read_text()
    examples = re.findall(r"`(seq2d [^`]+)` → (``?)(seq2d: error: .*?)\2(?=;| \|)", text)
    assert len(examples) >= 10
    for cmd, _, message in examples:
        rc, _, err = _run(shlex.split(cmd)[1:], capsys)
        assert rc == 2 and err.splitlines()[-1] == message, (cmd, err)


def test_plot_functions_refuse_a_missing_folder_too(tmp_path):
    import seq2d
    from seq2d.plot import draw_graph, spy

    for fn in (draw_graph, spy):
        with pytest.raises(FileNotFoundError, match="^path: cannot write .*: the folder '.*/no' does not exist"):
            fn(seq2d.mlp([4, 3]), path=tmp_path / "no" / "x.png")
    assert not (tmp_path / "no").exists()


def test_train_refuses_a_model_whose_output_never_sees_the_input(tmp_path, capsys):
    """Issue 31: `seq2d train --steps 1` on a 3-slot MLP trained a constant predictor to the end
    and exited 0; now it is refused before training, one error line in the command line's terms
    (the flags that fix it), exit 2, nothing written."""
    argv = ["train", "--data", "synthetic", "--sizes", "16,8,4", "--steps", "1", "--epochs", "1", "--quiet",
            "--out-dir", str(tmp_path / "run"), "--num-threads", "1"]
    rc, out, err = _run(argv, capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("seq2d: error: refusing to train a model whose output cannot see its input (steps=1 is smaller "
                          "than the distance from the input slots [0] to output slot 2 (2 blocks)"), err
    assert "--steps 2" in err and "--allow-constant-output" in err and "allow_constant_output=True" not in err
    assert not (tmp_path / "run").exists()


def test_train_says_when_the_output_never_sees_the_input(tmp_path, capsys):
    """Issue 18: a run whose output cannot depend on its input (too few steps), trained on
    purpose (--allow-constant-output, issue 31), is a ``seq2d: warning:`` line on stderr, also with
    --quiet; the API's UserWarning, in CLI form."""
    argv = ["train", "--data", "synthetic", "--sizes", "16,8,4", "--steps", "1", "--epochs", "1", "--quiet",
            "--out-dir", str(tmp_path / "run"), "--num-threads", "1", "--allow-constant-output"]
    rc, _, err = _run(argv, capsys)
    assert rc == 0
    lines = [line for line in err.splitlines() if line.startswith("seq2d: warning:")]
    assert lines == ["seq2d: warning: steps=1 is smaller than the distance from the input slots [0] to output slot 2 "
                     "(2 blocks): after 1 step(s) the output cannot depend on the input; it needs steps >= 2"], err
    assert "UserWarning" not in err
    rc, _, err = _run(argv[:6] + ["2"] + argv[7:-5] + ["--out-dir", str(tmp_path / "ok"), "--num-threads", "1"], capsys)
    assert rc == 0 and "warning" not in err


def test_train_twice_reuses_a_complete_run_and_speaks_in_flags(tmp_path, capsys):
    """Issue 18: README's `seq2d train experiments/mnist_sparsity/configs/mlp.toml --data subset --epochs 4`
    run a second time reuses the complete run (as `seq2d mnist` does) instead of failing; a partial or
    different run is refused in the command line's terms (flags, never keyword arguments)."""
    out = str(tmp_path / "mlp")
    argv = ["train", str(ROOT / "experiments/mnist_sparsity/configs/mlp.toml"), "--data", "subset", "--epochs", "1",
            "--out-dir", out, "--num-threads", "1", "--quiet"]
    rc, first, _ = _run(argv, capsys)
    assert rc == 0 and first.startswith("final test accuracy")
    rc, again, err = _run(argv, capsys)
    assert rc == 0, err
    lines = again.splitlines()
    assert lines[0].startswith(f"reusing the complete run in {out} (same config, hash ") and \
        lines[0].endswith("nothing to train; --overwrite trains it again")
    assert lines[1] == first.splitlines()[0]  # the same summary line
    rc, _, err = _run(argv + ["--lr", "0.5"], capsys)  # another config: refused, in flags
    assert rc == 2 and err.startswith("seq2d: error: ") and "its config differs: lr 0.001 -> 0.5" in err
    assert "add --resume to continue that run, --overwrite to start afresh, or choose another --out-dir/--name" in err
    assert "resume=True" not in err and "overwrite=True" not in err
    rc, _, err = _run(argv + ["--lr", "0.5", "--resume"], capsys)
    assert rc == 2 and "pass --allow-changed lr." in err and "allow_changed=" not in err
