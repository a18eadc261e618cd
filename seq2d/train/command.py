r"""The one training entry point: ``seq2d train`` and ``python -m seq2d.train`` (one process, or
data-parallel under torchrun) share this parser and this command.

    seq2d train run.toml --epochs 3
    python -m seq2d.train run.toml --epochs 3
    torchrun --standalone --nproc_per_node=2 -m seq2d.train --config run.toml --epochs 3

Flags: the TOML config (positional, or ``--config``), ``--set``, one per config field
(:func:`seq2d.train.config.add_config_args`), ``--resume``, ``--overwrite``,
``--allow-changed``. Errors in the config or the run directory (every
:class:`~seq2d.errors.Seq2DError`) print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import InvalidValue, Seq2DError

__all__ = ["TRAIN_DEFAULTS", "TRAIN_HELP", "add_train_arguments", "train_command", "build_parser", "main"]

#: The training command chooses torch's thread count from the idle cores unless told otherwise
#: (under torchrun the idle cores are shared by the processes of the node).
TRAIN_DEFAULTS = {"num_threads": "auto"}

TRAIN_HELP = "train one model from a TOML config (flags override it)"
_DESCRIPTION = ("Train one model from a config file; every config field also has a flag, and --set key=value "
                "overrides any field. Data-parallel: torchrun --standalone --nproc_per_node=N -m seq2d.train ...")
_EPILOG = """examples:
  seq2d train experiments/mnist_sparsity/configs/mlp.toml --data subset --epochs 4
  seq2d train experiments/mnist_sparsity/configs/mlp.toml --data-root ~/data   (full MNIST)
  seq2d train run.toml --epochs 3 --resume
  seq2d train run.toml --resume --lr 1e-4 --allow-changed lr
"""


def _models_epilog() -> str:
    """The registered model names, the one table of them (seq2d.models.registry)."""
    from ..models import list_models

    import textwrap

    names = textwrap.fill("models (--model): a registered name (seq2d.list_models(), the one table of model names): "
                          + ", ".join(list_models()) + "; or a preset NAME:ARGS (e.g. mlp:784,256,10) or a .toml/.json "
                          "spec file", 88)
    return f"{_EPILOG}\n{names}"


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The training command's arguments on ``parser``: the config file, one flag per config
    field (defaults :data:`TRAIN_DEFAULTS`), ``--resume``, ``--overwrite``, ``--allow-changed``."""
    from .config import add_config_args

    import textwrap

    parser.description = textwrap.fill(_DESCRIPTION, 88)
    parser.epilog = _models_epilog()
    parser.add_argument("config_file", nargs="?", default=None, help="the TOML config (same as --config)")
    add_config_args(parser, defaults=TRAIN_DEFAULTS)
    parser.add_argument("--resume", action="store_true", help="continue from out_dir/checkpoint.pt exactly")
    parser.add_argument("--overwrite", action="store_true", help="start afresh even if out_dir holds a checkpoint")
    parser.add_argument("--allow-changed", dest="allow_changed", metavar="FIELDS", default=None,
                        help="with --resume: let these comma-separated fields (lr, optimizer, weight_decay) differ "
                             "from the checkpoint's config; the change (old -> new, update) is recorded in the metrics "
                             "and run.json")
    parser.set_defaults(fn=train_command)
    return parser


def train_command(args: argparse.Namespace) -> int:
    """Run the training the parsed ``args`` describe and print its result line (rank 0 alone
    under torchrun); a :class:`~seq2d.errors.Seq2DError` propagates to the caller, which prints it
    (a divergence, the same on every rank, only from rank 0)."""
    from ..cli_text import train_result_line
    from .config import config_from_args
    from .errors import DivergenceError, cli_terms
    from .identity import parse_allow_changed
    from .rundir import reuse_line
    from .trainer import run

    if args.config_file:
        if args.config and args.config != args.config_file:
            raise InvalidValue(f"two config files given: {args.config_file!r} and --config {args.config!r}")
        args.config = args.config_file
    cfg = config_from_args(args, base=TRAIN_DEFAULTS)
    allow = parse_allow_changed(args.allow_changed, where="--allow-changed")
    if allow and not args.resume:
        raise InvalidValue("--allow-changed only applies when resuming: add --resume")
    first = int(os.environ.get("RANK", "0")) == 0
    try:
        with cli_terms():  # the run's errors and messages name flags (--resume), not keyword arguments
            summary = run(cfg, resume=args.resume, overwrite=args.overwrite, allow_changed=allow)
            if summary.get("reused") and cfg.quiet and first:  # else the trainer said it
                print(reuse_line(summary))
    except DivergenceError:  # every rank stops at the same update: one message is enough
        if first:
            raise
        return 2
    except KeyboardInterrupt:  # Ctrl-C: say how to continue (the caller prints "interrupted; <this>")
        if not first:
            raise
        from ..cli_text import interrupted_hint

        raise KeyboardInterrupt(interrupted_hint(cfg.run_dir(), getattr(args, "command_line", None))) from None
    if not first:
        return 0
    if summary["final_test_acc"] is None:
        print(f"no epoch was trained or evaluated (epochs = {cfg.epochs}, {summary['updates']} updates); outputs in "
              f"{summary['out_dir']}")
        return 0
    print(train_result_line(summary))
    if not summary["complete"]:
        print(f"partial run: stopped by max_updates after {summary['updates']} updates ({summary['epochs']} of "
              f"{cfg.epochs} epochs finished); the accuracy is the one where it stopped, and run.json says status "
              "'partial'. Continue it with --resume (and a larger --max-updates, or none)")
    return 0


def build_parser(prog: str = "python -m seq2d.train") -> argparse.ArgumentParser:
    """The parser of ``python -m seq2d.train``: the one ``seq2d train`` uses, under its own name."""
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False,  # "--epoch" must not silently mean "--epochs"
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_train_arguments(parser)


def main(argv: list[str] | None = None) -> int:
    """``python -m seq2d.train``: parse, train, print; a Seq2DError is one line, status 2; Ctrl-C
    one line saying how to continue, status 130."""
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(words)
    if "WORLD_SIZE" not in os.environ:  # under torchrun the launch line is not ours to rebuild
        args.command_line = ["python", "-m", "seq2d.train", *words]
    try:
        return train_command(args)
    except Seq2DError as e:
        print(f"seq2d train: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print("seq2d train: interrupted" + (f"; {e}" if str(e) else ""), file=sys.stderr)
        return 130
