r"""TensorBoard logging of a training run: a :class:`~seq2d.train.Trainer` callback.

Set ``tensorboard = "DIR"`` in the config (``--tensorboard DIR`` on ``seq2d train``, ``seq2d
mnist`` and ``python -m seq2d.train``) and the trainer adds a :class:`TensorBoardLogger`
(:func:`config_callbacks`), which writes the event files of the run to ``DIR/<name>`` (the
config's ``name``: ``seq2d mnist`` names its runs ``<model>-s<seed>``), so that
``tensorboard --logdir DIR`` shows every run written there side by side. Or pass one yourself::

    Trainer(cfg, model, data, callbacks=[TensorBoardLogger("tb/my-run")]).fit()

What is written (``global_step`` = optimizer updates, the ``update`` column of ``metrics.jsonl``):

- per evaluated row of ``metrics.jsonl`` (each epoch, and where ``max_updates`` stopped a run),
  the scalars of :data:`SCALAR_TAGS`: ``loss/train``, ``loss/test``, ``accuracy/train``,
  ``accuracy/test``, ``lr``, ``time/epoch_s`` and ``epoch``, with the row's values, plus every
  other number in the row under its own column name (the extra metrics that callbacks
  listed before this one return from ``on_epoch_end``);
- ``grad_norm/mean`` and ``grad_norm/max``: the L2 norm of all parameter gradients after each
  optimizer update, averaged (and maxed) over the updates of the row. It is summed on the device
  after each update (a few small kernels, no host sync) and read once per row;
- once per run (at a fresh start, not on a resume): the config as text (``config``, the
  ``config.toml``) and as hparams (the HParams tab: the fields that define the run, with
  ``accuracy/test`` and ``loss/test`` as its metrics), and, when the model is a
  :class:`~seq2d.Sequential2D` (or wraps one in ``.core``), the pictures of :mod:`seq2d.plot`
  as images: ``model/graph`` (:func:`~seq2d.plot.draw_graph`) and ``model/spy``
  (:func:`~seq2d.plot.spy`, of the initial weights), cropped as ``seq2d draw`` saves them.

Loops other than the Trainer write their rows in one go with :func:`write_rows`
(``experiments/stable_rnn/truncated_training.py --tensorboard DIR``: each model's epochs, then
its certified and data lambda estimates as ``lambda/*``).

Only the main process writes (under torchrun, rank 0). A resumed run appends to the same
folder and drops the events written after its checkpoint (``purge_step``), so a row repeated
after a crash appears once. A finished run that is reused (nothing trained) writes nothing.

``tensorboard`` is an optional extra (``pip install -e ".[tensorboard]"``, docs/training.md
says why); without it a run that asks for logging stops before training with
:class:`TensorBoardMissing`, naming the extra. This module imports neither torch's writer nor
matplotlib until a logger starts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import Seq2DError
from ..renames import migrate_record

__all__ = ["TensorBoardLogger", "TensorBoardMissing", "SCALAR_TAGS", "INSTALL_HINT", "config_callbacks",
           "require_tensorboard", "log_dir", "write_rows"]

INSTALL_HINT = 'pip install -e ".[tensorboard]" (or pip install tensorboard)'

# metrics.jsonl column -> TensorBoard tag
SCALAR_TAGS = {
    "train_loss": "loss/train",
    "test_loss": "loss/test",
    "train_acc": "accuracy/train",
    "test_acc": "accuracy/test",
    "lr": "lr",
    "epoch_time_s": "time/epoch_s",
    "epoch": "epoch",
}
# the columns of seq2d.lab.lm.train_lm's rows (write_rows) -> tag
_LM_TAGS = {"valid_loss": "loss/valid", "train_ppl": "ppl/train", "valid_ppl": "ppl/valid"}
# numeric columns that describe the run, not its progress: not logged as scalars (the x axis: the
# Trainer's and train_lm's ``update``)
_NOT_SCALARS = ("update", "world_size", "num_threads", "copies")


class TensorBoardMissing(Seq2DError, ImportError):
    """TensorBoard logging was asked for, but the ``tensorboard`` package is not installed."""


def require_tensorboard(what: str = "TensorBoard logging (tensorboard = DIR, --tensorboard DIR)"):
    """The ``SummaryWriter`` class; :class:`TensorBoardMissing` naming the extra when the
    ``tensorboard`` package is absent."""
    try:
        import tensorboard  # noqa: F401  torch.utils.tensorboard needs it and says less when it is missing
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise TensorBoardMissing(f"{what} needs the tensorboard package, an optional extra of seq2d: "
                                 f"{INSTALL_HINT}. The import said: {e}") from None
    return SummaryWriter


def log_dir(config) -> Path:
    """Where a run of ``config`` writes its events: ``<config.tensorboard>/<config.name>``."""
    return Path(config.tensorboard) / config.name


def config_callbacks(config) -> tuple:
    """The callbacks a config asks for: a :class:`TensorBoardLogger` when ``tensorboard`` is set
    (checked to be importable now, before anything is trained), else none."""
    if getattr(config, "tensorboard", None) is None:
        return ()
    require_tensorboard()
    return (TensorBoardLogger(log_dir(config)),)


def write_rows(log_dir: str | os.PathLike, rows, *, final: Mapping | None = None, step_key: str = "update") -> Path:
    """Write metric ``rows`` (dicts, one per epoch, as ``metrics.jsonl`` holds them) to TensorBoard in
    one go, for training loops other than the Trainer (the stable-RNN experiments): each number of
    a row at its ``step_key`` value (the row's index + 1 without it), the trainer's columns under the
    tags of :data:`SCALAR_TAGS` (``train_lm``'s ``valid_loss``, ``*_ppl`` as ``loss/valid``,
    ``ppl/train``, ``ppl/valid``), others under their own name; then the ``final`` scalars (e.g.
    lambda estimates of the trained model) at the last row's step. A row written before issue 36
    (``step``, not ``update``) is read as today's (:func:`seq2d.renames.migrate_record`). Returns ``log_dir``."""
    SummaryWriter = require_tensorboard("writing TensorBoard events (--tensorboard DIR)")
    log_dir = Path(log_dir)
    last = 0
    with SummaryWriter(log_dir=str(log_dir)) as writer:
        for k, row in enumerate(map(migrate_record, rows)):
            last = int(row.get(step_key, k + 1))
            _add_row(writer, row, last)
        for tag, value in (final or {}).items():
            if value is not None and math.isfinite(value):
                writer.add_scalar(tag, float(value), last)
    return log_dir


def _add_row(writer, row: Mapping, step: int) -> None:
    """Every number of a metrics row as a scalar at ``step`` (not the run's descriptors)."""
    for key, value in row.items():
        if key in _NOT_SCALARS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        writer.add_scalar(SCALAR_TAGS.get(key) or _LM_TAGS.get(key, key), float(value), step)


def _hparam(value):
    if isinstance(value, bool):
        return str(value).lower()  # torch would write it as the number 0 or 1
    if value is None or isinstance(value, (int, float, str)):
        return value
    return str(value)  # lists (sizes) as text


class TensorBoardLogger:
    """A trainer callback writing a run's TensorBoard events to ``log_dir`` (see the module
    docstring). ``figures=False`` leaves out the model pictures; ``grad_norm=False`` the
    gradient norms."""

    def __init__(self, log_dir: str | os.PathLike, *, figures: bool = True, grad_norm: bool = True) -> None:
        require_tensorboard()
        self.log_dir = Path(log_dir)
        self.figures = figures
        self.grad_norm = grad_norm
        self.writer = None
        self._gsum = self._gmax = None
        self._gcount = 0

    # ------------------------------------------------------------------ hooks
    def on_train_start(self, trainer) -> None:
        if not trainer.is_main:
            return
        SummaryWriter = require_tensorboard()
        fresh = trainer.updates == 0
        self.close()
        # a resume drops what was written after its checkpoint (a row repeated after a crash shows once)
        self.writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=None if fresh else trainer.updates + 1)
        self._reset()
        if fresh:
            self._log_config(trainer)
            if self.figures:
                self._log_figures(trainer.model)
        self.writer.flush()

    def on_update_end(self, trainer, update: int) -> None:
        if self.writer is None or not self.grad_norm:
            return
        import torch

        grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
        if not grads:
            return
        norm = _total_norm(grads).detach().double()  # stays on the device: no host sync here
        if self._gsum is None:
            self._gsum, self._gmax = norm.clone(), norm.clone()
        else:
            self._gsum += norm
            torch.maximum(self._gmax, norm, out=self._gmax)
        self._gcount += 1

    def on_epoch_end(self, trainer, epoch: int, row: Mapping) -> None:
        if self.writer is None:
            return
        step = int(row.get("update", trainer.updates))
        _add_row(self.writer, row, step)
        if self._gcount:
            total, peak = (self._gsum.item(), self._gmax.item())  # one read per row
            self.writer.add_scalar("grad_norm/mean", total / self._gcount, step)
            self.writer.add_scalar("grad_norm/max", peak, step)
        self._reset()
        self.writer.flush()

    def on_train_end(self, trainer, summary: Mapping) -> None:
        if self.writer is None:
            return
        from torch.utils.tensorboard.summary import hparams

        if summary.get("complete"):
            _, _, end = hparams({}, {})
            self.writer.file_writer.add_summary(end)  # the HParams tab marks the session finished
        self.close()

    # ------------------------------------------------------------------ parts
    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def _reset(self) -> None:
        self._gsum = self._gmax = None
        self._gcount = 0

    def _log_config(self, trainer) -> None:
        from torch.utils.tensorboard.summary import hparams

        from .config import OUTPUT_FIELDS, TrainConfig, config_to_dict, config_to_toml

        cfg = trainer.config
        if not isinstance(cfg, TrainConfig):
            return
        text = config_to_toml(cfg)
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()), 0)  # a code block
        hp = {k: _hparam(v) for k, v in config_to_dict(cfg).items() if k not in OUTPUT_FIELDS}
        hp = {k: v for k, v in hp.items() if v is not None}
        experiment, start, _ = hparams(hp, {"accuracy/test": math.nan, "loss/test": math.nan})
        self.writer.file_writer.add_summary(experiment)
        self.writer.file_writer.add_summary(start)

    def _log_figures(self, model) -> None:
        from ..core import core_of
        from ..errors import InvalidType

        try:
            core_of(model)
        except InvalidType:
            return  # pictures of Sequential2Ds only
        from ..plot import draw_graph, spy

        self.writer.add_image("model/graph", _pixels(draw_graph(model)), 0, dataformats="HWC")
        self.writer.add_image("model/spy", _pixels(spy(model)), 0, dataformats="HWC")


def _pixels(fig):
    """The figure as an RGB array, cropped as seq2d saves its pictures (``add_figure`` draws the
    whole canvas, cutting what lies outside it, such as a spy plot's title lines)."""
    import io

    from matplotlib.image import imread

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", pad_inches=0.05, facecolor="white")
    buf.seek(0)
    return imread(buf, format="png")[..., :3]


def _total_norm(grads):
    """The L2 norm of all ``grads`` together, as a tensor on their device."""
    import torch

    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6: foreach, grouped by device
    if get_total_norm is not None:
        return get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach()) for g in grads]))
