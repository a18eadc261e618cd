r"""How many CPU threads to give torch: what the machine offers *now*.

torch (OpenMP) defaults to one thread per core. When another process keeps a core busy,
a thread that shares that core is descheduled for whole time slices, and every parallel
region waits for it at its barrier: on a 2-core machine with one busy core an MLP epoch
ran 30 times slower with 2 threads than with 1. ``auto`` therefore looks at the cores
that are idle right now::

    available_cores()        # e.g. 1.02: idle cores over a 0.2 s window (this process counted as idle)
    auto_threads()           # e.g. 1: the rule below
    resolve_threads("auto")  # None -> None (leave torch), 3 -> 3, "auto" -> auto_threads()

**The rule of** :func:`auto_threads`: sample ``/proc/stat`` twice ``sample_s`` apart and add
up, over the CPUs this process may run on (``os.sched_getaffinity``), the fraction of each
that was idle (idle + iowait), plus this process's own CPU use in the window (its own
threads are not competition). Then ``n = floor(available + 0.25)`` (a core counts when at
least 75 % of it is free; sampling noise is about 0.05 core), clamped to
``1 <= n <= limit``, where ``limit`` is the smallest of the affinity count, the cgroup CPU
quota (``/sys/fs/cgroup/cpu.max``, containers) and the caller's ``limit`` (the trainer
passes torch's current thread count, so ``auto`` only ever *lowers* torch's default).
With ``share=k`` (k processes of one job on this machine, e.g. torchrun ranks) the
available cores are divided by k first. Without ``/proc/stat`` (not Linux) the available
cores are the limit, i.e. ``auto`` keeps torch's default.

The choice is made once, at the start of a run; load that appears later is not followed,
except by the block-sparse CPU kernels, which ask a :class:`LoadFollower` before every pass.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator

from .errors import InvalidType, InvalidValue

__all__ = ["AUTO", "cpu_limit", "available_cores", "auto_threads", "resolve_threads", "threads_arg", "read_proc_stat",
           "LoadFollower", "follow_load_threads", "threads_at_most"]

AUTO = "auto"
# A core counts as available when at least 1 - SLACK of it was idle in the sample window.
SLACK = 0.25


def _affinity() -> set[int]:
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))
    return set(cpus) or {0}


def _cgroup_quota() -> float | None:
    """CPUs allowed by the cgroup (v2 ``cpu.max``, v1 ``cfs_quota/cfs_period``), None when unlimited."""
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int(open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read())
        period = int(open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def cpu_limit() -> int:
    """The most threads this process can run at once: its affinity count, capped by the
    cgroup CPU quota (rounded down, at least 1)."""
    n = len(_affinity())
    q = _cgroup_quota()
    if q is not None:
        n = min(n, max(1, math.floor(q)))
    return max(1, n)


def read_proc_stat() -> dict[int, tuple[int, int]] | None:
    """Per CPU: (idle, total) jiffies since boot from ``/proc/stat``; None where it cannot
    be read. Idle is idle + iowait; total adds user, nice, system, irq, softirq and steal
    (time the hypervisor gave to someone else is not available to us)."""
    try:
        with open("/proc/stat") as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        parts = line.split()
        try:
            cpu = int(parts[0][3:])
            v = [int(x) for x in parts[1:9]]
        except ValueError:
            continue
        v += [0] * (8 - len(v))
        out[cpu] = (v[3] + v[4], sum(v))
    return out or None


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def available_cores(sample_s: float = 0.2, *, include_self: bool = True,
                    reader: Callable[[], dict | None] | None = None) -> float:
    """How many cores are idle now: the summed idle fraction, over the CPUs in this
    process's affinity, of ``/proc/stat`` across a ``sample_s`` window (plus, with
    ``include_self``, this process's own CPU use in that window), at most :func:`cpu_limit`.
    Without ``/proc/stat``: :func:`cpu_limit` (``os.cpu_count()`` where affinity is unknown).
    ``reader`` replaces :func:`read_proc_stat` (tests)."""
    if not isinstance(sample_s, (int, float)) or isinstance(sample_s, bool) or not sample_s >= 0:
        raise InvalidValue(f"sample_s: expected a number of seconds >= 0, got {sample_s!r}")
    reader = reader or read_proc_stat
    limit = cpu_limit()
    cpus = _affinity()
    s0, own0, t0 = reader(), _own_cpu_seconds(), time.monotonic()
    if s0 is None:
        return float(limit)
    if sample_s:
        time.sleep(sample_s)
    s1, own1, t1 = reader(), _own_cpu_seconds(), time.monotonic()
    if s1 is None:
        return float(limit)
    idle = _idle_cores(cpus, (s0, own0, t0), (s1, own1, t1), include_self)
    return float(limit) if idle is None else min(idle, float(limit))


def _idle_cores(cpus, a, b, include_self: bool = True) -> float | None:
    """Idle cores between samples ``a`` and ``b`` = (proc_stat, own CPU seconds, time)."""
    (s0, own0, t0), (s1, own1, t1) = a, b
    seen = [c for c in cpus if c in s0 and c in s1]
    if not seen:
        return None
    idle = 0.0
    for c in seen:
        di, dt = s1[c][0] - s0[c][0], s1[c][1] - s0[c][1]
        idle += min(max(di / dt, 0.0), 1.0) if dt > 0 else 1.0  # no ticks counted: nothing ran there
    if include_self and t1 > t0:
        idle += max(own1 - own0, 0.0) / (t1 - t0)
    return idle


class LoadFollower:
    """Cores available *now*, followed while a program runs (no sleeping).

    :func:`auto_threads` decides once, at the start of a run. The block-sparse CPU kernels
    issue hundreds of small GEMMs per pass, each an OpenMP parallel region, and collapse
    when a core is taken by another process part-way through a run (docs/performance.md,
    "CPU kernel under contention"), so they ask :meth:`threads` before every pass: at most
    every ``interval`` seconds it reads ``/proc/stat`` and this process's CPU time, and the
    idle cores since the previous reading (this process counted as idle, as in
    :func:`available_cores`) give ``floor(available + SLACK)``, at most the threads asked
    for. A window longer than ``max_window`` (the program was doing something else) only
    starts a new window; until a window has been measured the answer is the request.
    Costs one read of ``/proc/stat`` per ``interval`` (about 50 us)."""

    def __init__(self, interval: float = 0.1, max_window: float = 2.0, *,
                 reader: Callable[[], dict | None] | None = None, clock: Callable[[], float] = time.monotonic,
                 own: Callable[[], float] | None = None):
        self.interval, self.max_window = interval, max_window
        self._reader, self._clock, self._own = reader or read_proc_stat, clock, own or _own_cpu_seconds
        self._last = None          # (proc_stat, own seconds, time) of the window start
        self.available: float | None = None  # idle cores over the last measured window

    def _sample(self):
        return self._reader(), self._own(), self._clock()

    def update(self) -> float | None:
        now = self._clock()
        if self._last is not None and now - self._last[2] < self.interval:
            return self.available
        cur = self._sample()
        if cur[0] is None:
            return self.available
        if self._last is not None and cur[2] - self._last[2] <= self.max_window:
            idle = _idle_cores(_affinity(), self._last, cur)
            if idle is not None:
                self.available = idle
        self._last = cur
        return self.available

    def threads(self, want: int) -> int:
        """How many of ``want`` threads to use now (1 <= result <= want)."""
        if want <= 1:
            return max(want, 1)
        avail = self.update()
        if avail is None:
            return want
        return max(1, min(want, math.floor(avail + SLACK)))


_FOLLOWER = LoadFollower()


def follow_load_threads(want: int) -> int:
    """The block-sparse CPU kernels' thread count: :meth:`LoadFollower.threads` of a process
    wide follower; ``want`` unchanged when ``SEQ2D_FOLLOW_LOAD=0``."""
    if os.environ.get("SEQ2D_FOLLOW_LOAD", "1") == "0":
        return want
    return _FOLLOWER.threads(want)


@contextlib.contextmanager
def threads_at_most(n: int) -> Iterator[int]:
    """torch's thread count lowered to at most ``n`` inside the block (yields the count used);
    torch's setting is restored on exit. For work too small to gain from threads, which a thread
    descheduled by another process's load can only slow down (module docstring)."""
    import torch

    before = torch.get_num_threads()
    k = max(1, min(n, before))
    if k == before:
        yield k
        return
    torch.set_num_threads(k)
    try:
        yield k
    finally:
        torch.set_num_threads(before)


def auto_threads(sample_s: float = 0.2, *, limit: int | None = None, share: int = 1,
                 available: float | None = None, reader: Callable[[], dict | None] | None = None) -> int:
    """The thread count for ``"auto"``: ``floor(available / share + 0.25)`` clamped to
    ``[1, min(cpu_limit(), limit)]`` (see the module docstring). ``available`` skips the
    measurement (default: :func:`available_cores` over ``sample_s``)."""
    for name, v in (("limit", limit), ("share", share)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise InvalidValue(f"auto_threads: {name} must be a positive int, got {v!r}")
    cap = cpu_limit() if limit is None else min(cpu_limit(), limit)
    if available is None:
        available = available_cores(sample_s, reader=reader)
    n = math.floor(available / share + SLACK)
    return max(1, min(n, cap))


def resolve_threads(value, *, sample_s: float = 0.2, limit: int | None = None, share: int = 1) -> int | None:
    """``None`` -> None (leave torch's setting), a positive int (or its decimal string) -> it,
    ``"auto"`` -> :func:`auto_threads`. Anything else raises TypeError (wrong type) or
    ValueError (bad value), naming what was expected and what arrived."""
    expected = "expected a positive int, 'auto' or None"
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidType(f"num_threads: {expected}, got bool {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise InvalidValue(f"num_threads: {expected}, got {value}")
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text == AUTO:
            return auto_threads(sample_s, limit=limit, share=share)
        if text.isdigit() and int(text) >= 1:
            return int(text)
        raise InvalidValue(f"num_threads: {expected}, got the string {value!r}")
    raise InvalidType(f"num_threads: {expected}, got {type(value).__name__} {value!r}")


def threads_arg(text: str) -> int | str:
    """argparse ``type=`` for ``--num-threads``: a positive int or ``"auto"`` (resolved later)."""
    t = text.strip().lower()
    if t == AUTO:
        return AUTO
    if t.isdigit() and int(t) >= 1:
        return int(t)
    raise argparse.ArgumentTypeError(f"expected a positive int or 'auto', got {text!r}")
