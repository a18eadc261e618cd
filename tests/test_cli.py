"""The `seq2d` command line: help of every subcommand, `draw` for every preset, `show`,
spec files, presets and their errors (exit status 2), and the docs it feeds."""

import pathlib
import re
import subprocess
import sys

import pytest

import seq2d
from seq2d.cli import main
from seq2d.cli_text import show_text
from seq2d.models.presets import PRESETS, build_preset

PLOT_PRESETS = {
    "mlp": "mlp:64,32,10",
    "rnn": "rnn:8,16,layers=2",
    "truncated-rnn": "truncated_rnn:8,16,k=3,layers=2",
    "transformer": "transformer_layer:16,2,32,norm_first=1",
    "encoder": "transformer_encoder:16,2,32,layers=2",
    "random": "random_mask:40,30,10,density=0.2",
    "blocksparse-random": "random_tiles:64,32,32,density=0.3,tile=16",
}

# a cyclic spec with a tie, an identity, a diagonal and a frozen block (see seq2d/spec.py)
SPEC = """
steps = 3
slots = [{size = 16}, {size = 16, activation = "relu", bias = true}, {size = 16, activation = "tanh"},
         {size = 4, bias = true}]
blocks = [
  {row = 1, col = 0, kind = "random", density = 0.25},
  {row = 2, col = 1, kind = "mask", indices = [[0, 1], [1, 2], [2, 3]], tie = "shared"},
  {row = 1, col = 2, tie = "shared"},
  {row = 2, col = 0, kind = "identity"},
  {row = 2, col = 2, kind = "diagonal"},
  {row = 3, col = 0, kind = "exact", n = 5, trainable = false},
]
"""

ROOT = pathlib.Path(__file__).resolve().parents[1]
SUBCOMMANDS = ["models", "show", "draw", "equivalence"]


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("cmd", [None] + SUBCOMMANDS)
def test_help_of_every_subcommand(cmd, capsys):
    argv = ([cmd] if cmd else []) + ["--help"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: seq2d{' ' + cmd if cmd else ''}")
    if cmd in ("show", "draw"):
        assert "examples:" in out and "truncated_rnn:INPUT,HIDDEN,k=K" in out


@pytest.mark.parametrize("name", list(PLOT_PRESETS))
def test_draw_every_preset(name, tmp_path, capsys):
    out = tmp_path / f"{name}.png"
    rc, stdout, _ = _run(capsys, "draw", PLOT_PRESETS[name], "-o", str(out), "--dpi", "40")
    assert rc == 0 and stdout.strip() == f"wrote {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 1024


def test_draw_both_writes_two_files_and_tile_converts(tmp_path, capsys):
    rc, stdout, _ = _run(capsys, "draw", "mlp:40,24,10", "-o", str(tmp_path / "m.svg"), "--kind", "both", "--tile", "16")
    assert rc == 0
    for kind in ("graph", "spy"):
        p = tmp_path / f"m-{kind}.svg"
        assert f"wrote {p}" in stdout and b"<svg" in p.read_bytes()[:2000]
    assert not (tmp_path / "m.svg").exists()


def test_draw_registered_name_with_key_values(tmp_path, capsys):
    out = tmp_path / "s.png"
    rc, _, _ = _run(capsys, "draw", "mlp", "sizes=6,4,2", "-o", str(out), "--kind", "spy", "--dpi", "40")
    assert rc == 0 and out.stat().st_size > 1024


def test_show_preset_prints_grid_blocks_counts_and_graph_facts(capsys):
    rc, out, _ = _run(capsys, "show", "truncated_rnn:8,16,k=3")
    assert rc == 0
    assert out.startswith("TruncatedRNN (core: Sequential2D)\nSequential2D: 6 slots, N = 72, steps = 3, depth = 3, "
                          "trainable parameters = 400")
    assert re.search(r"^ 4    16\s+\. W0  \. W1  \.  \.   tanh \+b$", out, re.M)  # the grid
    assert re.search(r"F\[4\]\[3\]\s+linear\s+16 x 16\s+256\s+100%\s+256  1$", out, re.M)  # block table, tie 1
    assert re.search(r"linear blocks .*\s384$", out, re.M)
    assert re.search(r"slot biases\s+16$", out, re.M)
    assert re.search(r"total trainable .*\s400$", out, re.M)
    assert "acyclic: yes; depth = 3; steps = 3" in out
    assert "recurrent cores: none" in out and "memory: 3 steps" in out


def test_show_cyclic_model(capsys):
    rc, out, _ = _run(capsys, "show", "rnn:4,8,layers=2")
    assert rc == 0
    assert "acyclic: no" in out and "recurrent cores: {1}, {2}" in out and "memory: none" in out


def test_show_registered_name_with_key_values_still_works(capsys):
    rc, out, _ = _run(capsys, "show", "mlp", "sizes=4,3", "activation=tanh")
    assert rc == 0 and out.startswith("Sequential2D\nSequential2D: 2 slots, N = 7") and "trainable parameters = 15" in out
    rc, out, _ = _run(capsys, "show", "rnn")  # a registered name alone: its defaults
    assert rc == 0 and out.startswith("RNN (core: Sequential2D)")


def test_models_lists_the_registry(capsys):
    rc, out, _ = _run(capsys, "models")
    assert rc == 0 and out.split() == seq2d.list_models()


def test_spec_file(tmp_path, capsys):
    spec = tmp_path / "model.toml"
    spec.write_text(SPEC)
    rc, out, _ = _run(capsys, "show", str(spec))
    assert rc == 0
    assert "F[3][0]   linear" in out and "recurrent cores: {1, 2}" in out
    assert re.search(r"F\[1\]\[2\]\s+linear\s+16 x 16\s+3\s+1.17%\s+3  0$", out, re.M)  # tied with F[2][1]
    rc, _, _ = _run(capsys, "draw", str(spec), "-o", str(tmp_path / "spec.png"), "--kind", "both", "--dpi", "40")
    assert rc == 0 and (tmp_path / "spec-graph.png").exists() and (tmp_path / "spec-spy.png").exists()


@pytest.mark.parametrize("argv, message", [
    (["show", "nope:1,2"], "Unknown preset 'nope'. Select from 'mlp', 'rnn'"),
    (["show", "nope"], "Unknown model 'nope'"),
    (["draw", "mlp:4,3,act=relu,zz=1", "-o", "x.png"], "unknown key 'zz'. Select from 'act', 'bias'"),
    (["draw", "mlp:4,3", "-o", "x.pdf"], r"use one of .png, .svg"),
    (["show", "missing.toml"], "spec file 'missing.toml' does not exist"),
    (["show", "mlp:4,3", "act=tanh"], "key=value arguments go with a registered constructor name"),
    (["show", "mlp", "sizes"], "expected key=value"),
    (["draw", "mlp:4,3", "-o", "x.png", "--tile", "7"], "tile must be one of"),
])
def test_errors_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = _run(capsys, *argv)
    assert rc == 2
    assert err.startswith("seq2d: error: ") and message in err, err
    assert not list(tmp_path.iterdir())


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["draw", "mlp:4,3"])  # no -o
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize("text, n, params", [
    ("mlp:4,3,act=tanh,bias=0", 2, 12),
    ("rnn:3,5,layers=2,nonlinearity=relu", 3, 2 * 5 + 3 * 5 + 2 * 25 + 5 * 5),
    ("truncated_rnn:3,5,k=4", 8, 3 * 5 + 25 + 5),
    ("transformer_layer:8,2,16", 6, None),
    ("transformer_encoder:8,2,16,layers=3,final_norm=1", 1 + 3 * 5 + 1, None),
    ("random_mask:20,10,5,density=1", 3, 15 * 35 + 15),
    ("random_tiles:32,32,density=1,tile=16", 2, 32 * 64 + 32),
])
def test_presets_build_what_they_say(text, n, params):
    model = build_preset(text)
    core = getattr(model, "core", model)
    assert core.n == n
    if params is not None:
        assert model.num_parameters() == params
    assert build_preset(text).num_parameters() == model.num_parameters()


def test_random_preset_is_seeded():
    a, b, c = (build_preset(f"random_mask:20,10,density=0.3,seed={s}") for s in (1, 1, 2))
    assert (a.linear_weight() == b.linear_weight()).all()  # one seeded build, twice: bitwise
    assert (a.linear_weight() != c.linear_weight()).any()


def test_preset_errors_name_the_choices():
    with pytest.raises(ValueError, match="Select from " + ", ".join(repr(k) for k in PRESETS)):
        build_preset("mpl:4,3")
    with pytest.raises(ValueError, match="needs arguments"):
        build_preset("mlp")
    with pytest.raises(ValueError, match="missing required key"):
        build_preset("truncated_rnn:4,8")
    with pytest.raises(ValueError, match="takes 3 positional ints, got 2"):
        build_preset("transformer_layer:8,2")
    with pytest.raises(ValueError, match="boolean"):
        build_preset("transformer_layer:8,2,16,norm_first=maybe")
    with pytest.raises(TypeError):
        build_preset(3)


@pytest.mark.parametrize("old, new", [("truncated-rnn:4,8,k=2", "did you mean 'truncated_rnn'"),
                                      ("masked-random:4,3", "did you mean 'random_mask'"),
                                      ("blocksparse-random:32,32", "did you mean 'random_tiles'"),
                                      ("transformer:8,2,16", "did you mean 'transformer_layer', or 'transformer_encoder'"),
                                      ("from_mask:3", "'from_mask' has no preset string")])
def test_one_spelling_per_model(capsys, old, new):
    """A preset is NAME:ARGS for a registered NAME (the one names table); the spellings of
    earlier versions build nothing and name their successor."""
    with pytest.raises(ValueError, match=new):
        build_preset(old)
    rc, _, err = _run(capsys, "show", old)
    assert rc == 2 and new in err, err


def test_console_script(tmp_path):
    exe = pathlib.Path(sys.executable).parent / "seq2d"
    res = subprocess.run([str(exe), "show", "mlp:4,3,2"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "trainable parameters = 23" in res.stdout  # 4*3+3 + 3*2+2
    res = subprocess.run([str(exe), "show", "nope:1"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("seq2d: error: Unknown preset 'nope'")


def test_graphs_md_quotes_the_current_show_output():
    """docs/graphs.md is written by docs/make_gallery.py; rerun it when this fails."""
    text = (ROOT / "docs" / "graphs.md").read_text()
    block = text.split("## `seq2d show mlp:784,256,128,10`", 1)[1]
    quoted = re.search(r"```\n(.*?)\n```", block, re.S).group(1)
    assert quoted == show_text(build_preset("mlp:784,256,128,10"))
    for png in re.findall(r"\]\((gallery/[^)]+\.png)\)", text):
        assert (ROOT / "docs" / png).is_file(), png


# ---------------------------------------------------------------------------- start-up (issue 22 item 7)
_HEAVY = ("torch", "numpy", "matplotlib", "networkx", "torchvision", "scipy", "triton", "torch._dynamo",
          "seq2d.train.trainer", "seq2d.lab")  # seq2d.lab: any of the experiments' machinery


def _modules_after(code: str) -> set[str]:
    """The heavy modules a fresh interpreter holds after running ``code`` (a subprocess: this one
    has imported everything already)."""
    probe = code + f"\nimport sys; print(' '.join(m for m in {_HEAVY!r} if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return set(res.stdout.split())


def test_help_imports_neither_torch_nor_the_plotting_and_training_stack():
    # what makes `seq2d --help` start at once: no torch, matplotlib, networkx, torchvision, scipy, trainer
    code = ("import contextlib, io, seq2d.cli\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    seq2d.cli.main(['--help'])")
    assert _modules_after(code) == set()
    assert _modules_after("import seq2d, seq2d.errors") == set()


def test_show_imports_torch_and_networkx_only():
    # show builds a model (torch) and states graph facts (networkx); nothing for pictures, training or statistics
    code = ("import contextlib, io, seq2d.cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert seq2d.cli.main(['show', 'mlp:784,256,10']) == 0")
    loaded = _modules_after(code)
    assert loaded.isdisjoint({"matplotlib", "torchvision", "scipy", "seq2d.train.trainer", "seq2d.lab"})
    assert {"torch", "networkx"} <= loaded


def test_building_models_loads_triton_only_when_a_triton_kernel_is_asked_for():
    # the Triton kernels import torch._dynamo and triton (seconds per process): seq2d.sparse.kernels registers
    # them lazily. (A tiled model's first CPU forward imports torch._dynamo anyway: torch's custom-op dispatch
    # does, in torch._compile, not seq2d.)
    step = ("import torch, seq2d\n"
            "seq2d.create_model('random_tiles', sizes=[64, 64, 10], density=0.5, tile=16)\n"
            "m = seq2d.mlp([64, 32, 10])\n"
            "m(torch.randn(4, 64))[-1].sum().backward()\n"
            "from seq2d.sparse import available_kernels, get_kernel\n"
            "assert {'triton', 'triton_v2'} <= set(available_kernels())\n")
    assert _modules_after(step).isdisjoint({"triton", "torch._dynamo"})
    loaded = _modules_after(step + "assert get_kernel('triton').name == 'triton'")
    assert {"triton", "torch._dynamo"} <= loaded


def test_every_public_name_imports_from_the_lazy_package():
    code = ("import seq2d\n"
            "for name in seq2d.__all__:\n"
            "    exec(f'from seq2d import {name}')\n"
            "    assert getattr(seq2d, name) is not None and name in dir(seq2d), name\n"
            "from seq2d import graph, mlp, Sequential2D\n"
            "assert isinstance(mlp([3, 2]), Sequential2D) and graph.__name__ == 'seq2d.graph'")
    assert "torch" in _modules_after(code)
    with pytest.raises(AttributeError, match="has no attribute 'constructors'"):
        seq2d.constructors  # noqa: B018 - no moved-name shim (0.1.0): a plain AttributeError


def test_the_type_checking_imports_of_seq2d_are_its_table_of_public_names():
    # seq2d/__init__.py: _EXPORTS is the one table (lazy imports, __all__, dir); the static imports
    # for type checkers repeat it, and a name added to one only fails here
    import ast

    tree = ast.parse(pathlib.Path(seq2d.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    static: dict[str, set] = {}
    for node in block.body:
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if module == ".":  # `from . import graph`: a submodule
                static.setdefault("submodules", set()).add(alias.name)
            else:
                static.setdefault(module, set()).add(alias.name)
    table = {module: set(names) for module, names in seq2d._EXPORTS.items()}
    assert static == {**table, "submodules": set(seq2d._SUBMODULES)}
    assert set(seq2d.__all__) == set(seq2d._WHERE) | {"available_stores"}


@pytest.mark.parametrize("command", ["models", "show", "draw", "equivalence", "stability", "mnist", "train"])
def test_a_parser_built_for_one_command_equals_the_full_one_for_that_command(command):
    from seq2d.cli import _COMMANDS, build_parser

    def sub(parser, name):
        return next(a for a in parser._actions if a.dest == "cmd").choices[name]

    full, one, none = build_parser(), build_parser(only=command), build_parser(only="")
    assert sub(one, command).format_help() == sub(full, command).format_help()
    assert one.format_help() == full.format_help() == none.format_help()  # the top level lists every command
    assert list(_COMMANDS) == list(next(a for a in full._actions if a.dest == "cmd").choices)


def test_one_training_entry_point(tmp_path, capsys):
    """`seq2d train` and `python -m seq2d.train` share one parser (seq2d.train.command): the same
    arguments, defaults and help; both --help texts and `seq2d show --help` list the registered
    model names, the one table of them."""
    from seq2d.cli import build_parser
    from seq2d.train.__main__ import build_parser as module_parser
    from seq2d.train.__main__ import main as module_main

    train = next(a for a in build_parser("train")._actions if a.dest == "cmd").choices["train"]
    module = module_parser()

    def arguments(parser):
        return [(a.dest, tuple(a.option_strings), a.default, a.help) for a in parser._actions]

    assert arguments(train) == arguments(module)
    assert train.format_help().split("\n\n", 1)[1] == module.format_help().split("\n\n", 1)[1]  # past the usage
    names = re.sub(r"\s+", " ", module.format_help())
    assert ", ".join(seq2d.list_models()) in names
    with pytest.raises(SystemExit):
        main(["show", "--help"])
    assert ", ".join(seq2d.list_models()) in re.sub(r"\s+", " ", capsys.readouterr().out)
    argv = ["--data", "synthetic", "--sizes", "16", "8", "4", "--epochs", "1", "--quiet", "--num-threads", "1"]
    assert main(["train", *argv, "--out-dir", str(tmp_path / "a")]) == 0
    cli_out = capsys.readouterr().out
    assert module_main([*argv, "--out-dir", str(tmp_path / "b")]) == 0
    module_out = capsys.readouterr().out
    def same(text):  # the epoch time differs from run to run
        return re.sub(r"[0-9.]+ s/epoch", "s/epoch", text).replace(str(tmp_path / "b"), str(tmp_path / "a"))

    assert cli_out.startswith("final test accuracy") and same(module_out) == same(cli_out)
    assert module_main([*argv, "--out-dir", str(tmp_path / "c"), "--allow-changed", "lr"]) == 2
    assert "seq2d train: error: --allow-changed only applies when resuming" in capsys.readouterr().err


def test_show_without_a_model_names_only_the_model_as_required(capsys):
    with pytest.raises(SystemExit) as e:
        main(["show"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "required: model (see `seq2d show --help`)" in err and "kwargs" not in err.splitlines()[-1]
    for command in ("draw", "stability"):
        with pytest.raises(SystemExit):
            main([command])
        assert "kwargs" not in capsys.readouterr().err.splitlines()[-1]


def test_draw_for_a_paper_with_slot_labels(tmp_path, capsys):
    out = tmp_path / "fig.png"
    assert main(["draw", "mlp:784,256,10", "-o", str(out), "--kind", "both", "--style", "paper",
                 "--slot-labels", "x,h,y", "--min-slot", "0.05"]) == 0
    assert (tmp_path / "fig-graph.png").stat().st_size > 1024 and (tmp_path / "fig-spy.png").stat().st_size > 1024
    capsys.readouterr()
    assert main(["draw", "mlp:784,256,10", "-o", str(out), "--slot-labels", "x,y"]) == 2
    assert "--slot-labels: expected 3 comma-separated names (one per slot), got 2" in capsys.readouterr().err
    assert main(["draw", "mlp:784,256,10", "-o", str(out), "--kind", "spy", "--min-slot", "0.6"]) == 2
    assert "--min-slot must be a fraction in [0, 0.5)" in capsys.readouterr().err


@pytest.mark.parametrize("stop_at", [12, 3], ids=["after-a-checkpoint", "before-any-checkpoint"])
def test_ctrl_c_in_seq2d_train_names_the_command_that_continues(stop_at, tmp_path, capsys, monkeypatch):
    """Issue 31: Ctrl-C said only `seq2d: interrupted`. A callback raises KeyboardInterrupt at update
    12 (epoch 2 of 8 updates each: epoch 1's checkpoint is on disk) or update 3 (no checkpoint yet); the
    line names the exact command, and that command, run as printed, finishes the run."""
    import json
    import shlex

    from seq2d.train import trainer

    class Stop:
        def on_update_end(self, t, update):
            if update == stop_at:
                raise KeyboardInterrupt

    real = trainer.run
    monkeypatch.setattr(trainer, "run", lambda cfg, **kw: real(cfg, callbacks=[Stop()], **kw))
    out = tmp_path / "run"
    argv = ["train", "--data", "synthetic", "--sizes", "16", "8", "4", "--epochs", "2", "--quiet", "--num-threads", "1",
            "--out-dir", str(out)]
    assert main(argv) == 130
    (line,) = capsys.readouterr().err.strip().splitlines()
    if stop_at == 12:
        assert line == f"seq2d: interrupted; its last checkpoint is in {out}; continue with: seq2d {shlex.join(argv)} --resume"
    else:
        assert line == f"seq2d: interrupted; no checkpoint was written yet in {out}; start again with: seq2d {shlex.join(argv)}"
    monkeypatch.undo()
    command = shlex.split(line.split(" with: ", 1)[1])
    assert command[0] == "seq2d" and main(command[1:]) == 0
    assert "final test accuracy" in capsys.readouterr().out
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
