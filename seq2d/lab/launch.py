r"""Where the runs of a sweep execute: one seam for ``seq2d mnist``,
``experiments/mnist_sparsity/run.py`` and ``experiments/param_budget/run.py``.

A :class:`Launcher` takes the runs still to train (each (model, seed) one task) and returns their
results in the order of the tasks, a :class:`~seq2d.lab.launch.JobFailure` in place of a run that
failed. The results themselves live in the run folders (``summary.json``, written by the run), so
a finished run is never redone by a later call, whichever launcher ran it. Three kinds:

- ``local`` (the default): processes on this machine, :func:`seq2d.lab.launch.run_jobs` with
  ``jobs`` workers (one job, or one run: in this process, one after the other).
- ``slurm``: each run one task of a SLURM job array, submitted through ``submitit`` (an optional
  extra: ``pip install -e ".[slurm]"``) with the partition, time, memory, cores and GPUs given;
  ``jobs`` an int caps the tasks running at once (``--array=0-N%jobs``). This process waits for
  the array, then merges; interrupted, it leaves the jobs running (``scancel`` stops them) and a
  new call reuses what finished and resumes the rest from their checkpoints.
- ``submitit-local``: ``submitit``'s local executor, the same code path as ``slurm`` (pickled
  task, a fresh ``python -m submitit.core._submit`` process, result read back from its folder)
  on this machine, at most ``jobs`` at once; for trying a sweep before sending it to a cluster.

``submitit`` is imported only by the last two, so the CLI starts without it.
:func:`add_launcher_args` and :func:`launcher_from_args` give the fronts the same flags::

    seq2d mnist --full --launcher slurm --partition cpu --time 12:00:00 --mem 4G --cpus-per-task 1

**Local worker processes** (the ``local`` launcher, ``--jobs N``). :func:`run_jobs` hands ``fn(*args)`` for each task to a
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
it), and the worker ends; the parent raises ``KeyboardInterrupt``. A worker acts on its first
SIGTERM only: the pool sends another when a worker has ended, and it must not interrupt the
recording of the run. A worker whose parent vanished (SIGKILL) stops itself the same way within a second.
"""

from __future__ import annotations

import dataclasses
import io
import math
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..errors import InvalidType, InvalidValue, Seq2DError
from ..threads import threads_arg

__all__ = ["KINDS", "INSTALL_HINT", "Launcher", "SubmititMissing", "require_submitit", "parse_time", "parse_mem",
           "add_launcher_args", "launcher_from_args", "launcher_summary", "JobFailure", "JobsFailedError",
           "available_memory", "resolve_jobs", "jobs_arg", "run_jobs", "worker_log"]

KINDS = ("local", "slurm", "submitit-local")
INSTALL_HINT = 'pip install -e ".[slurm]" (or pip install submitit)'
# the scheduler options of add_launcher_args: flag -> (attribute, the submitit parameter it sets)
_SLURM_FLAGS = {"--partition": "partition", "--time": "time", "--mem": "mem", "--cpus-per-task": "cpus_per_task",
                "--gpus-per-node": "gpus_per_node", "--account": "account"}


class SubmititMissing(Seq2DError, ImportError):
    """``--launcher slurm`` / ``submitit-local`` was asked for, but ``submitit`` is not installed."""


def require_submitit(what: str = "--launcher slurm"):
    """The ``submitit`` module; :class:`SubmititMissing` naming the extra when it is absent."""
    try:
        import submitit
    except ImportError as e:
        raise SubmititMissing(f"{what} needs the submitit package, an optional extra of seq2d: {INSTALL_HINT}. "
                              f"The import said: {e}") from None
    return submitit


def parse_time(text: str | int) -> int:
    """A SLURM time limit in minutes: ``90`` (minutes), ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
    ``D-HH:MM`` or ``D-HH:MM:SS`` (seconds rounded up to a minute)."""
    s = str(text).strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", s)
    if not m:
        raise InvalidValue(f"--time: expected minutes or [D-]HH:MM[:SS] such as 90 or 12:00:00, got {text!r}")
    d, a, b, c = (int(x) if x is not None else None for x in m.groups())
    if d is None:
        parts = [a] if b is None else [0, a, b] if c is None else [a, b, c]
        if len(parts) == 1:
            minutes, seconds = a, 0
        else:  # MM:SS or HH:MM:SS
            minutes, seconds = parts[0] * 60 + parts[1], parts[2]
    else:  # D-HH, D-HH:MM, D-HH:MM:SS
        minutes, seconds = d * 1440 + a * 60 + (b or 0), c or 0
    minutes += -(-seconds // 60)
    if minutes < 1:
        raise InvalidValue(f"--time: expected at least one minute, got {text!r}")
    return minutes


def parse_mem(text: str | float) -> float:
    """Memory per job in GB (submitit's ``mem_gb``): ``4``, ``4G``, ``4GB``, ``500M``, ``1T``."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)B?", str(text).strip().upper())
    if not m or float(m.group(1)) <= 0:
        raise InvalidValue(f"--mem: expected a size such as 4G, 500M or 4 (GB), got {text!r}")
    return float(m.group(1)) * {"K": 2 ** -20, "M": 2 ** -10, "G": 1, "T": 1024, "": 1}[m.group(2)]


@dataclasses.dataclass(frozen=True)
class Launcher:
    """Where runs execute (see the module docstring). ``jobs``: runs at once (local: worker
    processes, an int or ``"auto"``; slurm: the array's ``%`` limit, ``"auto"`` none;
    submitit-local: processes at once, ``"auto"`` as for local). ``partition``, ``time`` (minutes),
    ``mem_gb``, ``cpus_per_task``, ``gpus_per_node``, ``account``: the scheduler's resources per job
    (slurm; only time, cores and GPUs mean something to submitit-local). ``folder``: where submitit
    keeps its pickles and each job's log (default: ``<sweep folder>/submitit``)."""

    kind: str = "local"
    jobs: int | str = 1
    partition: str | None = None
    time: int | None = None
    mem_gb: float | None = None
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    account: str | None = None
    folder: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InvalidValue(f"launcher: expected one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def submitit(self) -> bool:
        return self.kind != "local"

    def parameters(self, tasks: int) -> dict:
        """The keyword arguments of ``submitit.AutoExecutor.update_parameters`` for ``tasks`` runs."""
        out: dict = {"name": "seq2d"}
        if self.time is not None:
            out["timeout_min"] = self.time
        if self.mem_gb is not None:
            out["mem_gb"] = self.mem_gb
        if self.cpus_per_task is not None:
            out["cpus_per_task"] = self.cpus_per_task
        if self.gpus_per_node is not None:
            out["gpus_per_node"] = self.gpus_per_node
        if self.partition is not None:
            out["slurm_partition"] = self.partition
        if self.account is not None:
            out["slurm_account"] = self.account
        if self.kind == "slurm":
            out["slurm_array_parallelism"] = self.jobs if isinstance(self.jobs, int) else max(1, tasks)
        return out

    def executor(self, folder: str | Path, tasks: int):
        """The configured ``submitit.AutoExecutor`` (``slurm``: needs ``srun``/``sbatch`` on the PATH)."""
        submitit = require_submitit(f"--launcher {self.kind}")
        try:
            ex = submitit.AutoExecutor(folder=str(self.folder or folder),
                                       cluster="slurm" if self.kind == "slurm" else "local")
        except RuntimeError as e:  # submitit found no srun
            raise InvalidValue(f"--launcher slurm: no SLURM here ({e}); run on the cluster's login node, or try the "
                               "sweep on this machine with --launcher submitit-local") from None
        ex.update_parameters(**self.parameters(tasks))
        return ex

    def run(self, fn: Callable, tasks: Sequence[tuple], *, tags: Sequence[str], folder: str | Path,
            threads: int = 1, memory: int | None = None, log: Callable[[str], object] = print,
            inline: Callable | None = None, wait: bool = True) -> list:
        """``[fn(*task) for task in tasks]`` where this launcher runs them; a failed task gives a
        :class:`~seq2d.lab.launch.JobFailure` (logged). ``local``: :func:`~seq2d.lab.launch.resolve_jobs`
        workers of ``threads`` threads (``memory``: bytes one task needs); one worker runs ``inline``
        (default ``fn``) here, the first error raised. ``folder``: the sweep's output folder.
        ``wait=False`` (submitit kinds): submit and return the submitit jobs."""

        if len(tags) != len(tasks):
            raise InvalidValue(f"Launcher.run: {len(tasks)} tasks but {len(tags)} tags")
        if not self.submitit:
            n = resolve_jobs(self.jobs, len(tasks), threads=threads, memory=memory)
            if n == 1:
                return [(inline or fn)(*task) for task in tasks]
            log(f"{len(tasks)} run(s) to train in {n} parallel worker processes, each starting with {threads} torch "
                "thread(s); their lines are tagged [model seed k]")
            return run_jobs(fn, tasks, tags=tags, jobs=n, threads=threads, log=log)
        folder = Path(self.folder or Path(folder) / "submitit")
        ex = self.executor(folder, len(tasks))
        calls = [(_job, fn, tag, tuple(task)) for task, tag in zip(tasks, tags)]
        if self.kind == "slurm":
            with ex.batch():  # one job array, each run one task of it
                jobs = [ex.submit(*c) for c in calls]
            log(f"{len(jobs)} run(s) submitted to SLURM as job array {jobs[0].job_id.split('_')[0]}"
                f" ({self.jobs if isinstance(self.jobs, int) else 'no limit on the'} at once); logs in {folder}")
            if not wait:
                return jobs
            return self._collect(jobs, tags, log)
        # submitit-local: at most `jobs` processes at once
        limit = resolve_jobs(self.jobs, len(tasks), threads=max(threads, self.cpus_per_task or 1), memory=memory)
        log(f"{len(tasks)} run(s) to train through submitit's local executor, {limit} at once; logs in {folder}")
        results: list = [None] * len(tasks)
        running: dict[int, object] = {}
        pending = list(range(len(tasks)))
        jobs = []
        try:
            while pending or running:
                while pending and len(running) < limit:
                    k = pending.pop(0)
                    running[k] = ex.submit(*calls[k])
                    jobs.append(running[k])
                    log(f"{tags[k]} submitted as job {running[k].job_id} (its log: {running[k].paths.stdout})")
                for k in [k for k, j in running.items() if j.done()]:
                    results[k] = self._collect([running.pop(k)], [tags[k]], log)[0]
                time.sleep(0.2)
        except KeyboardInterrupt:
            log(f"interrupted: cancelling {len(running)} job(s); interrupted runs resume from their checkpoints")
            for j in running.values():
                j.cancel(check=False)
            raise
        return results

    @staticmethod
    def _collect(jobs: Sequence, tags: Sequence[str], log: Callable[[str], object]) -> list:
        """The results of submitit ``jobs`` in order (waiting for each); a job that failed or was
        killed gives a :class:`~seq2d.lab.launch.JobFailure`, logged."""

        out = []
        try:
            for job, tag in zip(jobs, tags):
                try:
                    status, value = job.result()
                except Exception as e:  # the job died (killed, timed out, out of memory) or did not unpickle
                    status, value = "error", JobFailure(
                        tag, type(e).__name__, f"job {job.job_id} ended without a result ({str(e).strip()[-2000:]}); "
                        f"its log: {job.paths.stdout}; a new call resumes the run from its last checkpoint", "", True)
                if status == "error":
                    log(value.line())
                    if not value.user_error and value.traceback:
                        log(value.traceback.rstrip("\n"))
                else:
                    log(f"{tag} finished (job {job.job_id})")
                out.append(value)
        except KeyboardInterrupt:
            log("interrupted: the submitted jobs keep running on the cluster (scancel stops them); a new call "
                "reuses the runs that finished and resumes the others from their checkpoints")
            raise
        return out


def _job(fn: Callable, tag: str, args: tuple):
    """What a submitit job runs: ``("ok", fn(*args))``, or ``("error", JobFailure)`` when it raised
    (so the parent knows a user's error from a bug, as with local workers)."""

    try:
        return "ok", fn(*args)
    except Exception as e:
        return "error", JobFailure(tag, type(e).__name__, str(e), traceback.format_exc(), isinstance(e, Seq2DError))


def add_launcher_args(p) -> None:
    """The launcher flags (besides ``--jobs``, which each front has already) on argparse parser ``p``."""
    g = p.add_argument_group("where the runs execute (seq2d.lab.launch)")
    g.add_argument("--launcher", choices=KINDS, default="local",
                   help="local (default): processes on this machine (--jobs of them); slurm: each (model, seed) one "
                        "task of a SLURM job array through submitit (--jobs N: at most N at once); submitit-local: "
                        f"the same code path on this machine. slurm and submitit-local need {INSTALL_HINT}")
    g.add_argument("--partition", default=None, help="SLURM partition of the jobs (--launcher slurm)")
    g.add_argument("--time", default=None, metavar="MIN|[D-]HH:MM:SS",
                   help="time limit per job (default: submitit's, 5 min): minutes or [D-]HH:MM[:SS]")
    g.add_argument("--mem", default=None, metavar="SIZE", help="memory per job, e.g. 4G or 500M")
    g.add_argument("--cpus-per-task", dest="cpus_per_task", type=int, default=None, help="cores per job")
    g.add_argument("--gpus-per-node", dest="gpus_per_node", type=int, default=None, help="GPUs per job")
    g.add_argument("--account", default=None, help="SLURM account to charge (--launcher slurm)")


def launcher_from_args(args, error: Callable[[str], object] | None = None) -> Launcher:
    """The :class:`Launcher` of parsed flags (:func:`add_launcher_args` and ``--jobs``); checks
    that submitit imports when it is needed, and refuses scheduler options with ``--launcher
    local``. ``error`` (e.g. ``parser.error``) reports a problem instead of raising it."""
    try:
        kind = getattr(args, "launcher", "local") or "local"
        given = [flag for flag, attr in _SLURM_FLAGS.items() if getattr(args, attr, None) is not None]
        if kind == "local" and given:
            raise InvalidValue(f"{', '.join(given)}: scheduler options need --launcher slurm (or submitit-local); "
                               "got the default --launcher local")
        if kind == "submitit-local" and ({"--partition", "--account"} & set(given)):
            raise InvalidValue("--partition / --account: only --launcher slurm has them; got --launcher submitit-local")
        if kind != "local":
            require_submitit(f"--launcher {kind}")
        return Launcher(kind, jobs=getattr(args, "jobs", 1),
                        partition=getattr(args, "partition", None),
                        time=parse_time(args.time) if getattr(args, "time", None) is not None else None,
                        mem_gb=parse_mem(args.mem) if getattr(args, "mem", None) is not None else None,
                        cpus_per_task=getattr(args, "cpus_per_task", None),
                        gpus_per_node=getattr(args, "gpus_per_node", None), account=getattr(args, "account", None))
    except Seq2DError as e:
        if error is None:
            raise
        error(str(e))
        raise


def launcher_summary(launcher: Launcher | None) -> Mapping:
    """What a results file records about the launcher (kind and resources; nothing for local)."""
    if launcher is None or not launcher.submitit:
        return {}
    return {k: v for k, v in dataclasses.asdict(launcher).items() if v is not None and k != "folder"}


# ---------------------------------------------------------------------- local worker processes
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
_STOPPING = False  # set by the first SIGTERM (_stop)


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
    global _STOPPING
    if _STOPPING:  # a second SIGTERM (the pool stops the other workers when one has ended) must not
        return     # interrupt the first one's way out: the trainer recording the run as interrupted
    _STOPPING = True
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

