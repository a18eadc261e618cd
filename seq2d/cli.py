"""The ``seq2d`` command line.

examples (one per subcommand; `seq2d COMMAND --help` has more):
  seq2d models                                     list the registered constructors
  seq2d show mlp:784,256,128,10                    block grid, per-block table, parameter counts, graph facts
  seq2d draw rnn:8,16,layers=2 -o rnn.png --kind both
                                                   pictures of the block graph and of the linear mask
  seq2d equivalence --seeds 2                      max errors of every constructor vs torch.nn
  seq2d stability rnn:8,16 --eps 1e-4              contraction constant lambda and truncation length k
  seq2d train experiments/mnist_sparsity/configs/mlp.toml --data subset --epochs 3
                                                   train one model from a TOML config
  seq2d mnist --models mlp,random_element          the MNIST sparsity experiment (quick protocol)

MODEL is a preset (``mlp:784,256,10``, ``rnn:8,16,layers=2``, ``truncated_rnn:8,16,k=4``,
``transformer_layer:64,4,128,norm_first=1``, ``random_mask:784,256,10,density=0.1``, ...; see
:mod:`seq2d.models.presets`), a path to a ``.toml``/``.json`` spec, or a registered constructor
name followed by ``key=value`` arguments (values are Python literals).

Errors (docs/errors.md): a mistake in the command line or in a named file prints one line
``seq2d: error: ...`` naming the flag, file or key, and exits with status 2; Ctrl-C exits
with 130; anything else is a bug: its traceback, then ``seq2d: internal error ...``, status 1.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import math
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .errors import InvalidValue, MissingFile, Seq2DError

# Nothing above imports torch: each command imports what it needs (matplotlib, networkx, the
# trainer, torchvision, scipy, torch itself) when it runs, so `seq2d --help` starts at once.

_FMT = argparse.RawDescriptionHelpFormatter


class _Parser(argparse.ArgumentParser):
    """argparse with seq2d's error line: the usage, then ``seq2d: error: <message> (see `seq2d
    CMD --help`)``, exit status 2. Subcommand parsers inherit the class."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"seq2d: error: {message} (see `{self.prog} --help`)\n")

    def parse_args(self, args=None, namespace=None):
        ns, extra = self.parse_known_args(args, namespace)
        if extra:  # reported by the subcommand that was given them (argparse: by the top level)
            subs = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
            parser = subs[0].choices.get(getattr(ns, "cmd", None), self) if subs else self
            parser.error("unrecognized arguments: " + " ".join(extra) + _renamed_flags(parser, extra))
        return ns


def _renamed_flags(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """``; '--max-steps' is now called '--max-updates'`` for each old flag of a renamed config field
    (seq2d.train.config.RENAMED_FIELDS) among ``extra`` whose new flag ``parser`` has."""
    from .train.config import RENAMED_FIELDS

    flag = lambda k: "--" + k.replace("_", "-")  # noqa: E731
    given = {a.split("=", 1)[0] for a in extra}
    out = ""
    for old, new in RENAMED_FIELDS.items():
        known = [flag(n) for n in new if flag(n) in parser._option_string_actions]
        if flag(old) in given and known:
            out += f"; {flag(old)!r} is now called {' or '.join(map(repr, known))}"
    return out


def _wrap(text: str) -> str:
    import textwrap

    return textwrap.fill(text, 88)


def _parse_kv(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise InvalidValue(f"expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            val = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            try:
                val = v if "," not in v else ast.literal_eval(f"({v},)")
            except (ValueError, SyntaxError):
                val = v
        out[k] = val
    return out


def _resolve(text: str, kwargs: list[str]):
    """A model from a preset, a spec path, or a registered name with key=value arguments."""
    from .models import resolve_model

    return resolve_model(text, where="MODEL", **_parse_kv(kwargs))


def _cmd_models(args) -> int:
    from .models import list_models

    for name in list_models():
        print(name)
    return 0


def _cmd_show(args) -> int:
    from .cli_text import show_text

    print(show_text(_resolve(args.model, args.kwargs)))
    return 0


def draw_paths(output: str, kind: str) -> list[tuple[str, Path]]:
    """``[(what, path)]`` that ``seq2d draw -o output --kind kind`` writes: ``out.png`` for one
    picture, ``out-graph.png`` and ``out-spy.png`` for ``both``."""
    from .plot import _check_path

    out = _check_path(output, what="-o")
    if kind == "both":
        return [(k, _check_path(out.with_name(f"{out.stem}-{k}{out.suffix}"), what="-o")) for k in ("graph", "spy")]
    return [(kind, out)]


def _cmd_draw(args) -> int:
    from .core import core_of
    from .plot import draw_graph, spy
    from .sparse.layout import TILE_SIZES

    if args.tile is not None and args.tile not in TILE_SIZES:
        raise InvalidValue(f"--tile must be one of {', '.join(map(str, TILE_SIZES))}, got {args.tile}")
    if not (math.isfinite(args.dpi) and args.dpi > 0):
        raise InvalidValue(f"--dpi must be a positive number, got {args.dpi}")
    paths = draw_paths(args.output, args.kind)  # a bad suffix or folder fails before the model is built
    model = _resolve(args.model, args.kwargs)
    core = core_of(model)
    if args.tile is not None:
        core.to_blocksparse(args.tile)
    labels = None if args.slot_labels is None else [x.strip() for x in args.slot_labels.split(",")]
    if labels is not None and len(labels) != core.n:
        raise InvalidValue(f"--slot-labels: expected {core.n} comma-separated names (one per slot), got {len(labels)}: "
                           f"{args.slot_labels!r}")
    if not 0 <= args.min_slot < 0.5:
        raise InvalidValue(f"--min-slot must be a fraction in [0, 0.5), got {args.min_slot}")
    for what, path in paths:
        if what == "graph":
            draw_graph(model, path=path, dpi=args.dpi, style=args.style, slot_labels=labels)
        else:
            spy(model, path=path, dpi=args.dpi, style=args.style, slot_labels=labels, min_slot=args.min_slot)
        print(f"wrote {path}")
    return 0


def _cmd_equivalence(args) -> int:
    from .cli_text import equivalence_table

    if args.seeds < 1:
        raise InvalidValue(f"--seeds must be a positive int, got {args.seeds}")
    ok = True
    for line, within in equivalence_table(args.seeds):
        print(line)
        ok &= within
    return 0 if ok else 1


def _stability_model(text: str, kwargs: list[str]):
    """(model, description): a checkpoint written by seq2d.train (a file, or a run folder holding
    checkpoint.pt), rebuilt from its stored config; else a preset / spec / registered name."""
    from .models.presets import CHECKPOINT_SUFFIXES, SPEC_SUFFIXES

    p = Path(text)
    if text.lower().endswith(CHECKPOINT_SUFFIXES) and not p.exists():
        raise MissingFile(f"MODEL: checkpoint file {text!r} does not exist")
    if p.is_dir():
        if not (p / "checkpoint.pt").is_file():
            raise MissingFile(f"MODEL: the folder {text!r} holds no checkpoint.pt (expected a `seq2d train` run folder)")
        p = p / "checkpoint.pt"
    if p.is_file() and p.suffix.lower() not in SPEC_SUFFIXES:
        with open(p, "rb") as f:
            zipped = f.read(4) == b"PK\x03\x04"  # torch.save's zip archive (a spec file is text)
    if p.is_file() and p.suffix.lower() not in SPEC_SUFFIXES and (zipped or p.suffix.lower() in CHECKPOINT_SUFFIXES):
        from .train.checkpoint import load_checkpoint
        from .train.config import config_from_dict
        from .train.trainer import build_model

        try:
            ckpt = load_checkpoint(p, map_location="cpu")
            cfg = config_from_dict(ckpt["config"], where=f"the config stored in {str(p)!r}")
            model = build_model(cfg)
            model.load_state_dict(ckpt["model"])
        except (Seq2DError, RuntimeError) as e:  # RuntimeError: load_state_dict's shape mismatch
            raise InvalidValue(f"cannot load the model of checkpoint {str(p)!r}: {e}") from e
        return model, f"checkpoint {p} (model {cfg.model!r}, epoch {ckpt['epoch']}, update {ckpt['update']})"
    return _resolve(text, kwargs), text


def _cmd_stability(args) -> int:
    import torch

    from .cli_text import stability_lines

    if not (args.eps > 0 and math.isfinite(args.eps)):
        raise InvalidValue(f"--eps must be a positive number, got {args.eps}")
    if not (args.input_bound > 0 and math.isfinite(args.input_bound)):
        raise InvalidValue(f"--input-bound must be a positive number, got {args.input_bound}")
    for flag, value in (("--data-steps", args.data_steps), ("--batch", args.batch), ("--iters", args.iters)):
        if value < 1:
            raise InvalidValue(f"{flag} must be a positive int, got {value}")
    with torch.random.fork_rng(devices=[]):  # a preset's random initial weights: the same on every call
        torch.manual_seed(args.seed)
        model, what = _stability_model(args.model, args.kwargs)
    for line in stability_lines(model, what, eps=args.eps, input_bound=args.input_bound, data_steps=args.data_steps,
                                batch=args.batch, iters=args.iters, seed=args.seed):
        print(line)
    return 0


_MODEL_HELP = "a preset (see below), a .toml/.json spec file, or a registered constructor name (see `seq2d models`)"


def _presets_epilog(examples: str) -> str:
    from .models import list_models
    from .models.presets import preset_help

    names = _wrap("registered models (the one table of model names; give one as NAME key=value ... or, where it "
                  "has a preset, NAME:ARGS): " + ", ".join(list_models()))
    return f"examples:\n{examples}\npresets:\n{preset_help()}\n{names}"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``seq2d`` parser. ``only``: build the full parser (arguments, epilog) of this command
    alone and list the others by their one-line help (``""``: none in full); None: all in full.

    :func:`main` passes the command on its command line: the full parsers need the presets, the
    trainer's config and the MNIST experiment, which import torch (seconds), and neither ``seq2d
    --help`` nor ``seq2d show`` needs the other commands' (tests/test_cli.py checks what ``seq2d
    --help`` imports; docs/performance.md, "CLI start-up", has the times)."""
    ap = _Parser(prog="seq2d", description="Sequential2D block networks: inspect, draw and check models.",
                 epilog=__doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[3].replace("``", "`"),
                 formatter_class=_FMT)
    sub = ap.add_subparsers(dest="cmd", required=True)  # usage: {the names of _COMMANDS, in its order}
    for name, command in _COMMANDS.items():
        if only is None or only == name:
            command.add(sub, name, command.help)
        else:
            sub.add_parser(name, help=command.help)
    return ap


def _command_of(argv: list[str]) -> str:
    """The command a command line names (its first word that is not an option), or "" when it
    names none or an unknown one (argparse then says so)."""
    for word in map(str, argv):
        if word == "--":
            break
        if not word.startswith("-"):
            return word if word in _COMMANDS else ""
    return ""


def _add_models(sub, name: str, summary: str) -> None:
    p = sub.add_parser(name, help=summary,
                       description="List the registered constructor names (usable with `seq2d show NAME key=value`).")
    p.set_defaults(fn=_cmd_models)


def _add_show(sub, name: str, summary: str) -> None:
    p = sub.add_parser(
        name, help=summary,
        description=_wrap("Print the block grid and slot table (Sequential2D.summary), one line per block (position, kind, "
                    "shape, stored entries, density, trainable parameters, tie group), the trainable parameters by "
                    "owner, and what the block graph says (acyclic, depth, recurrent cores, memory, distances)."),
        epilog=_presets_epilog("  seq2d show mlp:784,256,128,10\n  seq2d show truncated_rnn:8,16,k=4\n"
                               "  seq2d show model.toml\n  seq2d show mlp sizes=784,256,10 activation=tanh\n"),
        formatter_class=_FMT)
    p.add_argument("model", help=_MODEL_HELP)
    p.add_argument("kwargs", nargs="*", default=[], help="constructor arguments as key=value (only with a registered name)")
    p.set_defaults(fn=_cmd_show)


def _add_draw(sub, name: str, summary: str) -> None:
    p = sub.add_parser(
        name, help=summary,
        description=_wrap("Draw a model: --kind graph (the block graph: slots as nodes, blocks as edges), spy (the N x N "
                    "mask of the linear blocks) or both. With both, -o out.png writes out-graph.png and out-spy.png. "
                    "The suffix of -o (.png or .svg) picks the format."),
        epilog=_presets_epilog("  seq2d draw mlp:784,256,128,10 -o mlp.png\n"
                               "  seq2d draw rnn:8,16,layers=2 -o rnn.svg --kind both\n"
                               "  seq2d draw random_mask:784,256,10,density=0.05 -o rand.png --kind spy --tile 32\n"
                               "  seq2d draw mlp:784,256,10 -o fig.svg --kind both --style paper --slot-labels x,h,y\n"),
        formatter_class=_FMT)
    p.add_argument("model", help=_MODEL_HELP)
    p.add_argument("kwargs", nargs="*", default=[], help="constructor arguments as key=value (only with a registered name)")
    p.add_argument("-o", "--output", required=True, help="output file, .png or .svg")
    p.add_argument("--kind", choices=("graph", "spy", "both"), default="graph", help="what to draw (default: graph)")
    p.add_argument("--tile", type=int, default=None,
                   help="convert the linear blocks to the block-sparse matrix with this tile size first (16, 32, 64, 128)")
    p.add_argument("--dpi", type=float, default=100, help="PNG resolution (default: 100)")
    p.add_argument("--style", choices=("default", "paper"), default="default",
                   help="paper: fonts 1.4x, a 0.02 in margin, no generated title (default: default)")
    p.add_argument("--slot-labels", dest="slot_labels", default=None, metavar="A,B,...",
                   help="comma-separated names of the slots, one per slot, shown instead of the indices")
    p.add_argument("--min-slot", dest="min_slot", type=float, default=0.04, metavar="FRACTION",
                   help="spy: the smallest drawn width of a slot as a fraction of the side; the axes keep the true "
                        "sizes (default: 0.04; 0: to scale)")
    p.set_defaults(fn=_cmd_draw)


def _add_equivalence(sub, name: str, summary: str) -> None:
    p = sub.add_parser(name, help=summary,
                       description=_wrap("Compare every constructor with its torch.nn counterpart (float32 and float64); "
                                   "exit status 1 when an error exceeds its tolerance."))
    p.add_argument("--seeds", type=int, default=1, help="number of random seeds per case (default: 1)")
    p.set_defaults(fn=_cmd_equivalence)


def _add_stability(sub, name: str, summary: str) -> None:
    p = sub.add_parser(
        name, help=summary,
        description=_wrap("For every recurrent core (strongly connected part of the block graph): the certified bound "
                          "lambda <= L_act * ||W_rec||_2 (exact float64 SVD), the data-dependent lambda (largest state-"
                          "Jacobian norm along trajectories on random inputs with ||x_t|| <= B, by power iteration), "
                          "and for RNNs the truncation length k that Lemma 1 of Miller & Hardt (Stable Recurrent "
                          "Models) guarantees for --eps. MODEL may also be a checkpoint written by `seq2d train` (or "
                          "its run folder)."),
        epilog=_presets_epilog("  seq2d stability rnn:8,16,layers=2\n  seq2d stability rnn:8,16 --eps 1e-4 --input-bound 2\n"
                               "  seq2d stability runs/myrun/checkpoint.pt\n"),
        formatter_class=_FMT)
    p.add_argument("model", help=_MODEL_HELP + ", or a seq2d.train checkpoint (.pt) / run folder")
    p.add_argument("kwargs", nargs="*", default=[], help="constructor arguments as key=value (only with a registered name)")
    p.add_argument("--eps", type=float, default=1e-3, help="target gap ||h_t - h_t^k|| (default: 1e-3)")
    p.add_argument("--input-bound", dest="input_bound", type=float, default=1.0,
                   help="bound B on ||x_t||_2 for Lemma 1 and for the random inputs (default: 1)")
    p.add_argument("--data-steps", dest="data_steps", type=int, default=100,
                   help="length of the random input sequences for the data lambda (default: 100)")
    p.add_argument("--batch", type=int, default=8, help="number of random sequences (default: 8)")
    p.add_argument("--iters", type=int, default=20, help="power-iteration rounds per step (default: 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs and of a preset's initial weights (default: 0)")
    p.set_defaults(fn=_cmd_stability)


def _cmd_mnist(args) -> int:
    from .lab.launch import launcher_from_args
    from .lab.mnist_comparison import PROTOCOLS, compare, configs_for, protocol_config, write_results
    from .cli_text import threads_line
    from .train.config import load_config

    proto = protocol_config(args.protocol, "full" if args.full else "quick", augment_test=args.augment_test)
    if args.data:
        proto["data"] = args.data
    if args.epochs is not None:
        proto["epochs"] = args.epochs
    for key in ("steps", "device", "num_threads", "max_updates"):
        value = getattr(args, key)
        if value is not None:
            proto[key] = value
    if args.data_root:
        proto["data_root"] = args.data_root
    proto["download"] = args.download
    proto["quiet"] = args.quiet
    if args.tensorboard:
        from .train.tensorboard import require_tensorboard

        require_tensorboard("--tensorboard")  # one clear error before any run starts
        proto["tensorboard"] = args.tensorboard
    models = [m.strip() for m in (args.models or ",".join(PROTOCOLS[args.protocol].models)).split(",") if m.strip()]
    seeds = [0, 1, 2, 3, 4] if args.full else [0]
    if args.seeds:
        parts = [x.strip() for x in args.seeds.split(",")]
        bad = [x for x in parts if not x.lstrip("-").isdigit() or int(x) < 0]
        if bad:
            raise InvalidValue(f"--seeds: expected comma-separated ints >= 0 such as 0,1,2; {bad[0]!r} in {args.seeds!r} is not")
        seeds = [int(x) for x in parts]
    base = load_config(proto)
    configs = configs_for(base, models)  # the model names checked here: unknown, or an old spelling ("now called")
    launcher = launcher_from_args(args)  # submitit is imported only for --launcher slurm / submitit-local
    if base.quiet:  # else each run prints its own thread line (the count it chose): one line, never two
        print(threads_line(base.num_threads))
    rows = compare(configs, seeds, args.out, resume=not args.fresh, jobs=args.jobs,
                   vectorize_seeds=args.vectorize_seeds, launcher=launcher)
    written = write_results(rows, args.out, config=base, protocol=proto, models=models, seeds=seeds, name=args.protocol)
    print()
    print(written["text"])
    return 0


def _add_mnist(sub, name: str, summary: str) -> None:
    from .lab.launch import add_launcher_args, jobs_arg
    from .lab.mnist_comparison import MODELS, PROTOCOLS
    from .threads import threads_arg

    p = sub.add_parser(
        name, help=summary,
        description=_wrap("Train the MLP [2500, 500, 200, 100, 10] on MNIST at 50x50 and randomized Sequential2Ds with "
                          "exactly its trainable-parameter count (seq2d.randomize) over several seeds, then print the "
                          "table (mean +- std test accuracy, parameters, time per epoch, device) and each model's "
                          "difference to the MLP with its 95% interval. Default: a quick run on the bundled MNIST "
                          "subset (offline, about a minute on 2 CPU cores). --full: the paper's scale "
                          "(full MNIST, 100 epochs, batch 64, 5 seeds). --protocol picks the recipe: "
                          + "; ".join(f"{k}: {p.source}" for k, p in PROTOCOLS.items())
                          + " (docs/results/mnist.md has the table)."),
        epilog="examples:\n  seq2d mnist\n  seq2d mnist --full --data-root ~/data --download\n"
               "  seq2d mnist --protocol paper --epochs 4 --seeds 0,1,2\n"
               "  seq2d mnist --protocol ms-thesis\n"
               "  seq2d mnist --data full --epochs 5 --seeds 0,1,2 --models mlp,random_element,random_tile\n"
               "  seq2d mnist --models random_element --steps 6\n"
               "  seq2d mnist --full --jobs 2 --out runs/mnist_full   (2 runs at once, 1 torch thread each)\n"
               "  seq2d mnist --full --launcher slurm --partition cpu --time 12:00:00 --mem 4G   (a SLURM job array)",
        formatter_class=_FMT, allow_abbrev=False)
    p.add_argument("--full", action="store_true", help="the paper's scale: full MNIST, 100 epochs, 5 seeds (with any --protocol)")
    p.add_argument("--protocol", default="ours", choices=list(PROTOCOLS),
                   help="training recipe: " + "; ".join(f"{k}: {p.sets}" for k, p in PROTOCOLS.items())
                   + " (default: ours)")
    p.add_argument("--augment-test", dest="augment_test", action="store_true",
                   help="also apply the protocol's augmentation to the test set (one fixed draw per run; off by default; "
                        "only protocols with augmentation, e.g. paper)")
    p.add_argument("--models", default=None,
                   help="comma-separated models (default: the protocol's, " + "; ".join(
                       f"{k}: {','.join(p.models)}" for k, p in PROTOCOLS.items()) + "); choices: " + ", ".join(MODELS))
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: 0; with --full: 0,1,2,3,4)")
    p.add_argument("--epochs", type=int, default=None, help="override the protocol's epochs")
    p.add_argument("--data", choices=("subset", "full"), default=None, help="bundled subset or full MNIST")
    p.add_argument("--data-root", default=None, help="MNIST root (holds MNIST/raw); default $SEQ2D_DATA")
    p.add_argument("--download", action="store_true", help="download MNIST through torchvision when absent")
    p.add_argument("--steps", type=int, default=None, help="Sequential2D steps of the randomized models (default 4)")
    p.add_argument("--device", default=None, help="auto (default), cpu or cuda")
    p.add_argument("--jobs", type=jobs_arg, default="auto", metavar="INT|auto",
                   help="runs trained at once, each in its own process (seq2d.lab.launch); auto (default): as many as "
                        "cores are idle (seq2d.threads) and memory holds, at most one per run; 1: one after the "
                        "other in this process")
    add_launcher_args(p)
    p.add_argument("--vectorize-seeds", dest="vectorize_seeds", action="store_true",
                   help="train each model's seeds as one batched computation in this process (seq2d.train.vectorized; "
                        "each seed's run equals its single-seed run); models that cannot be batched (random_tile) and "
                        "runs continuing a checkpoint are trained one seed at a time, with --jobs")
    p.add_argument("--num-threads", dest="num_threads", type=threads_arg, default=1, metavar="INT|auto",
                   help="torch threads per run (default 1: small GEMMs at batch 64 gain little from more); auto: the "
                        "cores idle at the start of each run, at most its process's share (seq2d.threads)")
    p.add_argument("--max-updates", dest="max_updates", type=int, default=None,
                   help="stop each run after this many optimizer updates (a partial run; the next call continues it)")
    p.add_argument("--out", default="runs/mnist", help="output folder (default runs/mnist)")
    p.add_argument("--fresh", action="store_true", help="retrain runs that already finished in --out")
    p.add_argument("--tensorboard", default=None, metavar="DIR",
                   help="also write TensorBoard events, each run to DIR/<model>-s<seed> (runs --vectorize-seeds would "
                        "batch are trained one seed at a time; finished runs reused from --out write none: add --fresh); "
                        'needs pip install -e ".[tensorboard]"')
    p.add_argument("--quiet", action="store_true",
                   help="no per-epoch lines or progress bars (shown by default: a bar on a terminal, else a line "
                        "every 30 s, and a line per epoch; with several jobs only the line per epoch, tagged "
                        "[model seed k])")
    p.add_argument("--progress", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old scripts
    p.set_defaults(fn=_cmd_mnist)


def _add_train(sub, name: str, summary: str) -> None:
    from .train.command import add_train_arguments

    add_train_arguments(sub.add_parser(name, help=summary, formatter_class=_FMT, allow_abbrev=False))


class _Command(NamedTuple):
    help: str  # the one line `seq2d --help` lists
    add: Callable[..., None]  # add(sub, name, summary): the command's full parser (its arguments, epilog and fn)


# The one table of commands, in the order `seq2d --help` lists them: build_parser, main's choice of
# the parser to build in full and the usage line are derived from it.
_COMMANDS = {
    "models": _Command("list the registered constructors", _add_models),
    "show": _Command("print a model's block grid, per-block table, parameter counts and graph facts", _add_show),
    "draw": _Command("draw the block graph and/or the spy plot of the linear part (PNG or SVG)", _add_draw),
    "equivalence": _Command("max abs errors of every constructor vs torch.nn", _add_equivalence),
    "stability": _Command("certified and data-dependent contraction constant (lambda) and the truncation length k",
                          _add_stability),
    "mnist": _Command("the MNIST sparsity experiment: MLP vs randomized Sequential2Ds of equal parameter count",
                      _add_mnist),
    "train": _Command("train one model from a TOML config (flags override it; the same as python -m seq2d.train)",
                      _add_train),
}


BUG_LINE = "seq2d: internal error (a bug; please report it with the command line above)"


@contextlib.contextmanager
def _warning_lines():
    """seq2d's own warnings (a UserWarning raised from seq2d's code, e.g. a model whose output
    cannot see its input) as one ``seq2d: warning: <message>`` line on stderr, printed whatever
    --quiet says; any other warning as Python prints it."""
    import warnings

    package = str(Path(__file__).resolve().parent)
    shown: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserWarning) and str(Path(filename).resolve()).startswith(package):
            text = str(message)
            if text not in shown:
                shown.add(text)
                print(f"seq2d: warning: {text}", file=sys.stderr)
            return
        original(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        original = warnings.showwarning
        warnings.showwarning = show
        yield


def main(argv: list[str] | None = None) -> int:
    """Run one command; the exit status is returned (argparse's own errors and --help exit).

    The error policy (seq2d/errors.py, docs/errors.md): a :class:`~seq2d.errors.Seq2DError`
    is the user's to fix, printed as one line ``seq2d: error: <message>``, status 2 (argparse's
    errors too); Ctrl-C prints one line (``seq2d train``'s names the command that continues the
    run), status 130; any other exception is a bug in seq2d: its traceback, the command line and
    :data:`BUG_LINE`, status 1."""
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(only=_command_of(words)).parse_args(words)
        args.command_line = ["seq2d", *words]  # for the hint after Ctrl-C (seq2d train: the command that continues)
        with _warning_lines():
            return args.fn(args)
    except Seq2DError as e:
        print(f"seq2d: error: {str(e) or type(e).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a command may say how to continue (seq2d train: cli_text.interrupted_hint)
        print("seq2d: interrupted" + (f"; {e}" if str(e) else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`seq2d show X | head`): not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except Exception:
        traceback.print_exc(file=sys.stderr)
        import shlex

        words = sys.argv[1:] if argv is None else argv
        print("seq2d: command line: " + shlex.join(["seq2d", *map(str, words)]), file=sys.stderr)
        print(BUG_LINE, file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
