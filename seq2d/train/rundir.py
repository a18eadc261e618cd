r"""The run folder's bookkeeping: its lock, its record (``run.json``), its metrics files and the
clean-up of temporary files that an interrupted write left behind.

**Lock.** A run holds ``<out_dir>/run.lock`` from its start to its end. The file holds the
holder's pid, host, process start time and the time the run started; it is created
atomically (written to a temporary file, then ``os.link``\ ed to its name, which fails when
the name exists), so it is never seen half-written. A second run in the same folder is
refused with :class:`~seq2d.train.errors.RunLockedError` naming the holder's pid. A lock
whose holder is gone (the pid is dead, or now belongs to a younger process: the pid was
reused) is *stale*: the next run takes it over and says so on one warning line.

**Record.** ``run.json`` holds the effective config, its hash
(:func:`~seq2d.train.config.config_hash`), the fingerprint of the model it trains
(``model_fingerprint``, :mod:`seq2d.train.fingerprint`), the status (``running``, ``complete``,
``partial`` (stopped by max_updates), ``diverged``, ``failed``, ``interrupted``), the epoch and
the optimizer update reached (``update``), any settings changed on resume, and for a ``failed`` run
the exception that stopped it (``error``: its type and message). A run killed
outright stays ``running`` with a dead pid in the lock.

**Temporary files.** Every file of a run folder is written to ``.<name>.tmp-<pid>`` and
renamed over its name; a process killed in between leaves the temporary file. Once a run
holds the lock no other process writes there, so :meth:`RunDir.acquire` deletes them.

**Metrics.** ``metrics.jsonl`` (one JSON object per epoch) and ``metrics.csv`` (the same rows as a
table), both rewritten atomically after each epoch (:func:`write_metrics`, :func:`read_metrics`);
files written before issue 36 say ``step`` for ``update``: their readers here read it as
``update`` (:func:`seq2d.renames.migrate_record`);
and ``test_predictions.npz``, the per-example test results of the last epoch (:func:`predict`,
:func:`write_predictions`), the input of paired comparisons between runs on the same test
examples (McNemar, a bootstrap over examples: :mod:`seq2d.stats`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import InvalidValue
from ..fileio import atomic_write
from ..renames import migrate_record
from .config import TrainConfig, config_to_dict
from .identity import config_diff, config_hash, format_diff
from .errors import RunExistsError, RunLockedError, spell

__all__ = ["RunDir", "LOCK_NAME", "RECORD_NAME", "read_record", "unreadable", "is_finished_run", "run_exists_error",
           "reuse_line", "pid_alive", "process_start_time", "METRIC_COLUMNS", "PREDICTIONS_FILE", "write_metrics",
           "read_metrics", "predict", "write_predictions"]

LOCK_NAME = "run.lock"
RECORD_NAME = "run.json"
_TMP_GLOB = ".*.tmp-*"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (on this host)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def process_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), else None.
    With the pid it identifies a process: a reused pid has a later start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
        return int(text.rsplit(")", 1)[1].split()[19])  # field 22, counted after "pid (comm)"
    except (OSError, ValueError, IndexError):
        return None


def _live_suffix(name: str) -> bool:
    """Whether a ``...-<pid>`` file name ends with the pid of a live process other than this one
    (another run trying to take the lock right now: its file is not ours to delete)."""
    tail = name.rsplit("-", 1)[-1]
    return tail.isdigit() and int(tail) != os.getpid() and pid_alive(int(tail))


def read_record(run_dir: str | os.PathLike) -> dict | None:
    """``run.json`` of a run folder as a dict (None when absent or unreadable), old keys read as
    today's (``step`` as ``update``, also in its ``changes``)."""
    try:
        d = json.loads((Path(run_dir) / RECORD_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict):
        return None
    d = migrate_record(d)
    if isinstance(d.get("changes"), list):
        d["changes"] = [migrate_record(c) for c in d["changes"]]
    return d


def unreadable(path: str | os.PathLike) -> str | None:
    """Why a run file (``run.json``, ``summary.json``) that exists cannot be used: torn by a crash
    or damaged, or not a JSON object; None when it is absent or fine."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return f"torn or damaged: {type(e).__name__}: {e}"
    return None if isinstance(d, dict) else f"it holds a JSON {type(d).__name__}, not an object"


class RunDir:
    """The lock and record of one run folder (use :meth:`acquire` / :meth:`release`, or ``with``).

    ``log`` receives the warning and note lines (default: stderr)."""

    def __init__(self, path: str | os.PathLike, *, log=None) -> None:
        self.path = Path(path)
        self.lock_path = self.path / LOCK_NAME
        self.record_path = self.path / RECORD_NAME
        self.held = False
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.removed: list[str] = []  # temporary files cleaned at acquire

    # ------------------------------------------------------------------ the lock
    def _holder(self) -> dict | None:
        try:
            d = json.loads(self.lock_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return d if isinstance(d, dict) else {}

    def _stale(self, holder: dict) -> str | None:
        """Why the lock's holder is gone (None: it is alive, or unknown and so presumed alive)."""
        pid = holder.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool):
            return None
        if holder.get("host") not in (None, socket.gethostname()):
            return None  # another machine's process: cannot tell
        if not pid_alive(pid):
            return f"pid {pid} is no longer running"
        started = holder.get("proc_start")
        now = process_start_time(pid)
        if isinstance(started, int) and now is not None and now != started:
            return f"pid {pid} now belongs to another process (the holder exited and its pid was reused)"
        return None

    def acquire(self) -> "RunDir":
        """Take the lock (create the folder first), take over a stale one with a warning, then
        delete temporary files left by interrupted writes. RunLockedError when a live process holds it."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".{LOCK_NAME}.new-{os.getpid()}"
            probe.write_text("", encoding="utf-8")
            probe.unlink()
        except OSError as e:
            raise InvalidValue(f"config field 'out_dir': cannot use {str(self.path)!r} as the run folder "
                               f"({type(e).__name__}: {e.strerror or e})") from None
        me = {"pid": os.getpid(), "host": socket.gethostname(), "proc_start": process_start_time(os.getpid()),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": list(sys.argv)}
        for _ in range(20):
            if self._create(me):
                self.held = True
                self._clean_tmp()
                return self
            holder = self._holder()
            if holder is None:  # released meanwhile: try again
                continue
            if not holder:
                raise RunLockedError(
                    f"the run folder {str(self.path)!r} is locked by {str(self.lock_path)!r}, whose content is "
                    "unreadable; if no run is using this folder, delete that file", lock=self.lock_path)
            why = self._stale(holder)
            if why is None:
                pid = holder.get("pid")
                raise RunLockedError(
                    f"the run folder {str(self.path)!r} is in use: process {pid} (host {holder.get('host', '?')}, "
                    f"started {holder.get('started', '?')}) holds its lock {str(self.lock_path)!r}. Wait for it to "
                    "finish, stop it, or choose another out_dir/name", pid=pid if isinstance(pid, int) else None,
                    lock=self.lock_path)
            # stale: move it aside atomically (one taker wins the rename), then create ours
            aside = self.lock_path.with_name(f".{LOCK_NAME}.stale-{os.getpid()}")
            try:
                os.rename(self.lock_path, aside)
            except FileNotFoundError:
                continue
            aside.unlink(missing_ok=True)
            self.log(f"seq2d: warning: taking over the stale lock {str(self.lock_path)!r} of a run that "
                     f"started {holder.get('started', '?')} ({why})")
        raise RunLockedError(f"could not take the lock {str(self.lock_path)!r} (it kept changing hands)",
                             lock=self.lock_path)

    def _create(self, me: dict) -> bool:
        tmp = self.path / f".{LOCK_NAME}.new-{os.getpid()}"
        tmp.write_text(json.dumps(me), encoding="utf-8")
        try:
            os.link(tmp, self.lock_path)  # atomic, fails when the name exists
            return True
        except (FileExistsError, FileNotFoundError):  # taken, or our temporary file was cleaned away: look again
            return False
        except OSError:  # no hard links on this file system: exclusive create, then write
            try:
                fd = os.open(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(me))
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def _clean_tmp(self) -> None:
        lock_tmp = [p for p in sorted(self.path.glob(f".{LOCK_NAME}.*")) if not _live_suffix(p.name)]
        for p in sorted(self.path.glob(_TMP_GLOB)) + lock_tmp:
            try:
                p.unlink()
            except OSError:
                continue
            self.removed.append(p.name)
        if self.removed:
            self.log(f"seq2d: note: removed {len(self.removed)} temporary file(s) left in {str(self.path)!r} by an "
                     f"interrupted write: {', '.join(self.removed)}")

    def release(self) -> None:
        if self.held:
            holder = self._holder()
            if holder and holder.get("pid") == os.getpid():
                self.lock_path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> "RunDir":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    # ------------------------------------------------------------------ the record
    def write_record(self, cfg: TrainConfig, status: str, *, epoch: int, update: int, changes=(), **extra) -> None:
        """Write ``run.json`` (atomically): config, hash, status, progress, changes."""
        if status not in ("running", "complete", "partial", "diverged", "failed", "interrupted"):
            raise InvalidValue(f"run status {status!r} is not one of running, complete, partial, diverged, failed, interrupted")
        record = {"status": status, "config_hash": config_hash(cfg), "epoch": epoch, "update": update,
                  "pid": os.getpid(), "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "changes": list(changes), **extra, "config": config_to_dict(cfg)}
        atomic_write(self.record_path, json.dumps(record, indent=1, default=repr) + "\n")

    def record(self) -> dict | None:
        return read_record(self.path)


def is_finished_run(record: Mapping | None, cfg: TrainConfig) -> bool:
    """The config half of the reuse rule of ``seq2d train`` (:meth:`Trainer.fit` without
    resume/overwrite) and ``seq2d mnist``: ``record`` (a run.json) is a complete run of ``cfg``'s
    effective config (status ``complete``, equal :func:`~seq2d.train.identity.config_hash`). The
    model half (the same model, when the record has a fingerprint) is
    :func:`~seq2d.train.fingerprint.check_same_model`."""
    return bool(record) and record.get("status") == "complete" and record.get("config_hash") == config_hash(cfg)


def run_exists_error(checkpoint: Path, record: Mapping | None, cfg: TrainConfig) -> RunExistsError:
    """The refusal of a folder whose checkpoint is not a finished run of ``cfg`` (its status and
    the fields that differ), in the caller's terms (:func:`~seq2d.train.errors.spell`)."""
    diff = config_diff(record["config"], cfg) if record and isinstance(record.get("config"), dict) else {}
    same = (f"its config differs: {format_diff(diff)}" if diff else "same config") if record else "config unknown"
    return RunExistsError(
        f"{str(checkpoint)!r} exists ({describe_record(record)}; {same}): "
        + spell("pass resume=True to continue that run, overwrite=True to start afresh, or choose another out_dir/name",
                "add --resume to continue that run, --overwrite to start afresh, or choose another --out-dir/--name"))


def reuse_line(summary: Mapping) -> str:
    """What a run that was reused (``summary["reused"]``) says about it, in the caller's terms."""
    return (f"reusing the complete run in {summary['out_dir']} (same config, hash {summary['config_hash']}): nothing "
            "to train; " + spell("overwrite=True", "--overwrite") + " trains it again")


def describe_record(record: Mapping | None) -> str:
    """A short phrase for a run record (as :func:`read_record` reads it): ``"complete at update 16"``,
    ``"partial (stopped by max_updates at update 3)"``."""
    if not record:
        return "no run record (run.json)"
    status = record.get("status", "?")
    update = record.get("update", "?")
    if status == "running":  # read by the lock's holder: that run ended without recording it
        return f"killed or crashed near update {update} (it never recorded its end)"
    return f"{status} at update {update}" if status != "partial" else f"partial (stopped by max_updates at update {update})"


# ---------------------------------------------------------------------- metrics files
PREDICTIONS_FILE = "test_predictions.npz"

METRIC_COLUMNS = ("epoch", "update", "train_loss", "train_acc", "test_loss", "test_acc", "epoch_time_s", "lr", "device", "world_size",
                  "num_threads")


def write_metrics(out_dir: str | os.PathLike, rows: Sequence[Mapping]) -> None:
    """Write ``metrics.jsonl`` (one JSON object per row) and ``metrics.csv`` (the columns of
    :data:`METRIC_COLUMNS`, then any extra keys in order of appearance), each atomically."""
    out = Path(out_dir)
    cols = list(METRIC_COLUMNS)
    for r in rows:
        cols += [k for k in r if k not in cols]
    atomic_write(out / "metrics.jsonl", "".join(json.dumps(dict(r)) + "\n" for r in rows))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in cols})
    atomic_write(out / "metrics.csv", buf.getvalue())


def read_metrics(out_dir: str | os.PathLike) -> list[dict]:
    """The rows of ``metrics.jsonl`` (a row written before issue 36: its ``step`` read as ``update``)."""
    with open(Path(out_dir) / "metrics.jsonl", encoding="utf-8") as f:
        return [migrate_record(json.loads(line)) for line in f if line.strip()]


def predict(model, X, y, batch_size: int = 1000) -> dict | None:
    """Per-example results of ``model`` (in eval mode, no gradients) on ``X, y``: ``pred`` (argmax
    class), ``nll`` (cross-entropy, computed in float64) and ``target``, as CPU tensors; None when
    the output is not one row of class scores per sample (``(B, C)`` against ``(B,)`` targets)."""
    import torch
    import torch.nn.functional as F

    if y.dim() != 1:
        return None
    was_training = model.training
    model.eval()
    preds, nlls = [], []
    try:
        with torch.no_grad():
            for i in range(0, X.shape[0], batch_size):
                out = model(X[i:i + batch_size])
                if not isinstance(out, torch.Tensor) or out.dim() != 2:  # e.g. an RNN's (output, h_n)
                    return None
                preds.append(out.argmax(-1).cpu())
                nlls.append(F.cross_entropy(out.double(), y[i:i + out.shape[0]], reduction="none").cpu())
    finally:
        model.train(was_training)
    return {"pred": torch.cat(preds), "nll": torch.cat(nlls), "target": y.cpu()}


def write_predictions(out_dir: str | os.PathLike, p: Mapping | None, epoch: int) -> Path | None:
    """Write :func:`predict`'s result to ``out_dir/test_predictions.npz`` (``pred`` and ``target`` as
    int16, ``nll`` as float32, ``epoch``; a few tens of kB for MNIST's 10,000 digits); nothing
    (None) for a model that is not a classifier."""
    import numpy as np

    if p is None:
        return None
    buf = io.BytesIO()
    np.savez_compressed(buf, pred=p["pred"].numpy().astype(np.int16), target=p["target"].numpy().astype(np.int16),
                        nll=p["nll"].numpy().astype(np.float32), epoch=np.int64(epoch))
    return atomic_write(Path(out_dir) / PREDICTIONS_FILE, buf.getvalue())
