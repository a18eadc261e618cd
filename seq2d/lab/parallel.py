r"""Independent runs in parallel worker processes: ``seq2d mnist --jobs N``.

:func:`run_jobs` hands ``fn(*args)`` for each task to a
:class:`concurrent.futures.ProcessPoolExecutor` of ``jobs`` *spawned* workers (a fresh
interpreter each: no torch threads or locks inherited through ``fork``) and returns the
results in the order of the tasks, whatever order they finish in::

    results = run_jobs(train_one, [(cfg_a,), (cfg_b,), (cfg_c,)], tags=["[a]", "[b]", "[c]"],
                       jobs=2, threads=1, log=print)
    # results[k] is train_one(cfg_k)'s return value, or a JobFailure

**The cores are split between the workers**: each starts with ``torch.set_num_threads(threads)``
(so a run's ``num_threads = "auto"`` picks at most its share; an int is used as is).
:func:`resolve_jobs` gives ``"auto"``: as many workers as idle cores
(:func:`seq2d.threads.available_cores`) divided by the threads per job, as many as the
available memory holds (given what one task needs), at most one per task.

**Output.** A worker's ``sys.stdout`` and ``sys.stderr`` are replaced by a writer that sends
each complete line, prefixed with the task's tag, through a queue to the parent, where one
thread hands it to ``log``: lines of different jobs never interleave within a line, and the
parent's ``log`` (``print``, a list's ``append`` in tests) sees them all. Progress bars are
off in a worker (its stderr is not a terminal) and the 30 s heartbeat lines too, so a run
prints one line per epoch. :func:`worker_log` sends a line as it is (already tagged).

**Failures.** An exception in a task is caught in the worker and comes back as a
:class:`JobFailure` (type name, message, traceback text, whether it is a
:class:`~seq2d.errors.Seq2DError`); the parent logs it and the other tasks go on. A worker
that dies (killed, out of memory) breaks the pool (``concurrent.futures`` stops the other
workers with SIGTERM, see below): every task not finished yet is reported failed, and a new
call resumes those runs from their checkpoints.

**Ctrl-C** (or SIGTERM) in the parent (the workers ignore SIGINT, so one Ctrl-C is handled
once): pending tasks are cancelled, every worker gets SIGTERM, which raises
``KeyboardInterrupt`` inside a running task, so its trainer records the run as interrupted and
releases its folder's lock on the way out (its last checkpoint stays; the next call resumes
it), and the worker ends; the parent raises ``KeyboardInterrupt``. A
worker whose parent vanished (SIGKILL) stops itself the same way within a second.
"""

from __future__ import annotations

import dataclasses
import io
import math
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from ..errors import InvalidType, InvalidValue, Seq2DError
from ..threads import threads_arg

__all__ = ["JobFailure", "JobsFailedError", "available_memory", "resolve_jobs", "jobs_arg", "run_jobs", "worker_log"]

AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class JobFailure:
    """What came back from a task that raised (or whose worker died)."""

    tag: str
    type: str
    message: str
    traceback: str
    user_error: bool  # a Seq2DError (the user's to fix), not a bug

    def line(self) -> str:
        return f"{self.tag} failed: {self.type}: {self.message}"


class JobsFailedError(Seq2DError, RuntimeError):
    """Some parallel runs failed with errors that are the user's to fix (each logged as it
    happened; the other runs finished, unless a worker died). ``failures``: their :class:`JobFailure`\\ s."""

    def __init__(self, message: str, *, failures: Sequence[JobFailure] = ()):
        super().__init__(message)
        self.failures = list(failures)


# --jobs takes what --num-threads takes: a positive int or "auto" (one rule, in seq2d.threads)
jobs_arg = threads_arg


def available_memory() -> int | None:
    """Bytes of memory available now (``MemAvailable`` of ``/proc/meminfo``); None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def resolve_jobs(jobs: int | str, tasks: int, *, threads: int = 1, available: float | None = None,
                 memory: int | None = None, available_bytes: int | None = None) -> int:
    """How many worker processes for ``tasks`` tasks of ``threads`` torch threads each.

    ``jobs`` an int: it, at most ``tasks``. ``"auto"``: ``floor(available / threads + 0.25)``
    (the rule of :func:`seq2d.threads.auto_threads`; ``available`` defaults to
    :func:`seq2d.threads.available_cores`), clamped to ``[1, cpu_limit() // threads]``, at most
    ``available_bytes // memory`` when ``memory`` (the bytes one task needs) is given
    (``available_bytes`` defaults to :func:`available_memory`; unknown: no limit), and at most
    ``tasks``. Never less than 1 (0 tasks: 1)."""
    from ..threads import SLACK, available_cores, cpu_limit

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InvalidValue(f"threads: expected a positive int, got {threads!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, (int, str)):
        raise InvalidType(f"jobs: expected a positive int or 'auto', got {type(jobs).__name__} {jobs!r}")
    if isinstance(jobs, str):
        if jobs.strip().lower() != AUTO:
            raise InvalidValue(f"jobs: expected a positive int or 'auto', got {jobs!r}")
        avail = available_cores() if available is None else available
        n = min(math.floor(avail / threads + SLACK), max(1, cpu_limit() // threads))
        if memory:
            free = available_memory() if available_bytes is None else available_bytes
            if free is not None:
                n = min(n, free // memory)
    elif jobs < 1:
        raise InvalidValue(f"jobs: expected a positive int or 'auto', got {jobs}")
    else:
        n = jobs
    return max(1, min(n, tasks))


# ---------------------------------------------------------------------------- the worker side
_QUEUE = None  # the worker's queue to the parent (set by _init_worker)
_TAG = ""      # the tag of the task the worker runs now


def worker_log(line: str) -> None:
    """Send ``line`` to the parent's ``log`` as it is (in a worker); else print it."""
    if _QUEUE is None:
        print(line, flush=True)
    else:
        _QUEUE.put(("line", line))


class _LineWriter(io.TextIOBase):
    """A text stream that sends each complete line, prefixed with the current tag, to the parent."""

    def __init__(self) -> None:
        self._buf = ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        self._buf += s
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            line = line.rstrip("\r")
            if line.strip():
                _QUEUE.put(("line", f"{_TAG} {line}" if _TAG else line))
        return len(s)

    def flush(self) -> None:
        pass


def _stop(signum, frame):
    if _TAG:  # in a task: the trainer records the run as interrupted and releases its folder
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)  # idle: just end


def _watch_parent(parent: int) -> None:
    """Stop this worker (as SIGTERM does) when its parent is gone (killed without a chance to stop
    us); end it for good if that takes longer than a minute."""
    import time

    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60.0)
    os._exit(1)


def _init_worker(queue, threads: int) -> None:
    global _QUEUE
    _QUEUE = queue
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us with SIGTERM
    signal.signal(signal.SIGTERM, _stop)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), name="seq2d-watch-parent", daemon=True).start()
    sys.stdout = sys.stderr = _LineWriter()
    try:  # one line per epoch: no timed heartbeat lines between them
        from ..train import loop

        loop.HEARTBEAT_S = math.inf
    except ImportError:
        pass
    import torch

    torch.set_num_threads(threads)
    queue.put(("pid", os.getpid()))


def _call(fn, tag: str, args: tuple):
    global _TAG
    _TAG = tag
    try:
        return "ok", fn(*args)
    except Exception as e:  # reported to the parent; the other tasks go on
        return "error", JobFailure(tag, type(e).__name__, str(e), traceback.format_exc(), isinstance(e, Seq2DError))
    except KeyboardInterrupt:  # SIGTERM (_stop): the run has released its folder on the way here; end now
        _QUEUE.close()
        _QUEUE.join_thread()  # the lines sent so far reach the parent
        os._exit(128 + signal.SIGTERM)
    finally:
        _TAG = ""


# ---------------------------------------------------------------------------- the parent side
def run_jobs(fn: Callable, tasks: Sequence[tuple], *, tags: Sequence[str], jobs: int, threads: int = 1,
             log: Callable[[str], object] = print) -> list:
    """``[fn(*task) for task in tasks]`` in ``jobs`` spawned worker processes (see the module
    docstring); a task that raised gives a :class:`JobFailure` in its place (logged with its
    traceback when it is a bug). ``fn`` must be importable (a module-level function) and its
    arguments and result picklable. ``threads``: torch threads each worker starts with."""
    if len(tags) != len(tasks):
        raise InvalidValue(f"run_jobs: {len(tasks)} tasks but {len(tags)} tags")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    pids: set[int] = set()

    def relay():
        while True:
            msg = queue.get()
            if msg is None:
                return
            kind, value = msg
            if kind == "pid":
                pids.add(value)
            else:
                log(value)

    reader = threading.Thread(target=relay, name="seq2d-job-log", daemon=True)
    reader.start()
    results: list = [None] * len(tasks)
    # SIGTERM to the parent (`kill PID`) stops the workers as Ctrl-C does, instead of orphaning them
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, _interrupt)
    ex = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker, initargs=(queue, threads))
    try:
        futures = {ex.submit(_call, fn, tag, tuple(task)): k for k, (task, tag) in enumerate(zip(tasks, tags))}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                k = futures[f]
                try:
                    status, value = f.result()
                except BrokenProcessPool as e:  # a worker died: the pool stops every unfinished task
                    status, value = "error", JobFailure(
                        tags[k], type(e).__name__, "a worker process died (killed, or out of memory?) and the pool "
                        "stopped the runs not finished yet; their last checkpoints stay, a new call resumes them",
                        "", True)
                except Exception as e:  # the result did not unpickle
                    status, value = "error", JobFailure(tags[k], type(e).__name__, str(e) or repr(e), "", False)
                if status == "error":
                    log(value.line())
                    if not value.user_error and value.traceback:
                        log(value.traceback.rstrip("\n"))
                results[k] = value
    except KeyboardInterrupt:
        log(f"interrupted: stopping {len(pids)} worker process(es); interrupted runs resume from their checkpoints")
        for pid in sorted(pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:  # already gone
                pass
        ex.shutdown(wait=True, cancel_futures=True)  # a second Ctrl-C stops waiting
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
        queue.put(None)
        reader.join(timeout=10)
        queue.close()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    return results


def _interrupt(signum, frame):
    raise KeyboardInterrupt

