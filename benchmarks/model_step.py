"""One training step (forward + backward) of random block-sparse Sequential2Ds, through the public API.

    python benchmarks/model_step.py                      # the issue-9 grid (about 5 minutes on 2 cores)
    python benchmarks/model_step.py --quick --json /tmp/x.json       # CI smoke test (< 30 s)
    python benchmarks/model_step.py --threads 1 --slots 16 --densities 0.1 --repeats 3
    python benchmarks/model_step.py --contend both       # quiet and contended rounds side by side
    python benchmarks/model_step.py --threads 1 --slots 16 --densities 0.1 --sections grid --compile  # + compiled

The setting (issue 9): ``n`` slots of equal size ``S`` with ``n * S = N`` (4096) features,
``n`` in {4, 16, 64, 256}; a random *block mask*: exactly ``round(d * n * n)`` of the
``n x n`` blocks present, ``d`` in {0.1, 0.25}, drawn uniformly (``torch.randperm`` from a
generator seeded with ``--seed``) from the ``(n - 1) * n`` positions of rows 1 .. n-1, so
row 0 is empty and slot 0 is the held input (the diagonal and every other position may be
drawn). The model is ``seq2d.from_mask([S] * n, mask, activations=--activation, bias=True,
seed=--seed, steps=1)``. The state is ``n`` random ``(B, S)`` tensors requiring grad
(B = 256, float32). One *call* of an implementation, timed:

================  ====================================================================
``default``       the model as ``from_mask`` builds it: ``out = model.step(state)``
                  (``--call forward``: ``model(state, steps=1)``), then
                  ``loss = sum_i (out[i] * w_i).sum()`` over the slots the step computes
                  (rows with at least one block: every slot the loss reads is reached),
                  ``loss.backward()``; ``w_i`` fixed random ``(B, S)``.
``tiled``         the same on ``copy.deepcopy(model).to_blocksparse(tile=min(64, S))``.
``kernel``        the kernel alone on the same layout: ``seq2d.sparse.bsmm(x, wp, layout,
                  matrix.kernel)`` with ``matrix = tiled.matrix``, ``layout = matrix.layout``,
                  ``wp = matrix.position_tiles()`` detached (a leaf requiring grad), ``x``
                  ``(B, Kt * tile)`` requiring grad; ``(y * w).sum().backward()``.
``dense``         ``nn.Linear(N, N, bias=False)`` on ``x`` ``(B, N)`` requiring grad, same loss.
``masked_dense``  ``F.linear(x, W * M)``, ``W`` an ``(N, N)`` parameter, ``M`` the element
                  mask of the block mask (what the authors' public code does), same loss.
``loss``          the loss of ``default``/``tiled`` alone: the same per-slot terms on leaf
                  ``(B, S)`` tensors requiring grad, forward and backward. The model paths
                  pay it, the kernel and dense baselines (one ``(y * w).sum()``) do not, so
                  the ``net`` ratios subtract it: ``tiled-loss/kernel`` and
                  ``default-loss/masked`` (printed next to the plain ratios, which the
                  targets are judged on).
================  ====================================================================

Gradients are set to None before every call, outside the timing. Per (threads, n, d) all
implementations are timed side by side in one process: ``--warmup`` untimed rounds (the
first call doubles as the budget check), then ``--repeats`` rounds, each running every
implementation once in a rotating order; the median per implementation is reported, every
raw time is in the JSON. Ratios: ``default/dense``, ``default/masked_dense``,
``tiled/kernel``, and ``tiled/ideal``, ``kernel/ideal`` with ideal = (stored-tile density of
the layout) x the dense median. The targets of the issue are printed next to them, never
asserted: tiled <= 1.2x kernel and <= 2x ideal; default at (n=64, d=0.1) <= 1.5x dense; no
n <= 256 where default is slower than masked_dense; contended/quiet of seq2d over that of
dense <= 1.5; seq2d RNN <= 1.2x nn.RNN.

``autograd nodes per step``, for ``default`` and ``tiled`` at every (n, d): ``loss``, the
unique nodes of one step's loss graph (walking ``loss.grad_fn`` and ``next_functions``,
AccumulateGrad leaves included; the loss itself adds 2 per slot it reads + 2); ``step``,
the nodes reachable from the outputs the loss reads; ``ops``, ``step`` without the
AccumulateGrad leaves (parameters and state). A forward-only check (no grad) gives the max
abs difference of the tiled outputs from the default outputs, and the JSON names the store
``from_mask`` chose (``default_store``; if it is already tiled, ``tiled`` converts its
``store="dense"`` twin, same weights).

Budget: an implementation whose single call takes longer than ``--budget-s`` (20 s) is
dropped from that setting and printed ``skipped (> 20s/call)``; it is also skipped at every
later setting with n and d at least as large (cost grows with the number of blocks), at
every thread count. The library paths (default, tiled) are *probed* first in a child
process, killed once its call has run for the budget, when their time predicted from
earlier settings (first-call seconds per block of the largest mask timed so far x blocks)
exceeds a quarter of the budget, or when nothing was measured yet and the mask has more
than 64 blocks (``--probe always|never`` overrides): a call that would take minutes is
never paid in full.

Shared machines: before each round the script waits (at most ``--max-wait`` s per case)
for other processes to use at most ``--max-others`` of the CPUs (from /proc/stat, minus
this process and its competing child); a disturbed round is replaced (up to half the
repeats again) and the least disturbed rounds are used; a case stops adding rounds after
``--max-case-s`` once it has 3. ``--contend``: a busy child process (a Python loop, one
core) competes for the whole timing and is killed on exit, errors included; ``--contend
both`` runs a quiet and a contended half in every round (the child stopped with SIGSTOP
for the quiet half), and reports each implementation's contended/quiet ratio and, for the
seq2d paths, that ratio over dense's.

Also timed (1 thread): sequence mode, ``seq2d.from_torch(nn.RNN(200, 200, num_layers=2))``
against the ``nn.RNN`` it copied, input (35, 20, 200), ``out, h = m(x)``, loss on out and
h, backward; and for context ``seq2d.from_torch(nn.TransformerEncoderLayer(256, 8, 1024,
dropout=0, batch_first=True))`` against the torch layer on (16, 64, 256), train mode.

``--compile [BACKEND]`` (issue 35; one ``--threads`` value, since inductor fixes the thread
count when it generates code) adds two implementations, the library paths compiled:
``default_compiled`` and ``tiled_compiled`` call ``torch.compile(f, fullgraph=True,
backend=BACKEND)`` (default ``inductor``; ``aot_eager`` traces without generating code, for
smoke tests) of ``f(state) = loss`` (the model call and the loss above), then
``.backward()`` (AOTAutograd's compiled backward). They are timed in the same interleaved
rounds as the eager paths; ratios ``default_compiled/default`` and ``tiled_compiled/tiled``.
What compiling costs up front, per setting (``compile`` in the JSON): ``cold_s``, the first
call (trace, code generation, C++ build, one step) with a cold cache: ``torch._dynamo.reset()``
at the start of the setting, a fresh empty ``TORCHINDUCTOR_CACHE_DIR`` per implementation and
inductor's in-memory caches cleared; ``warm_s``, the first call of a second process (a child,
timed after its imports and build, as the probe below) that reads the cache the cold call
wrote (``--no-compile-warm`` leaves it out); ``graphs``, the graphs Dynamo compiled for the
setting (2 expected: no recompilation during the timing, which would otherwise hide in the
medians). Before the first setting one tiny function is compiled, untimed, so the compiler's
one-time imports (``process_warmup_s``) are not charged to the first setting. The compiled
first call is outside the budget check; later calls are not. This script times the CPU; its
GPU counterpart (``benchmarks/gpu/model_step_cuda.py --compile``) compiles with
``mode="reduce-overhead"`` (CUDA graphs).

``--quick``: N=256, batch 8, n in {4, 16}, 1 repeat, 1 thread, a small RNN and layer, no
waiting (flags given explicitly still win). Results, raw times, the environment (torch,
CPU, load, date, seeds, command line, git commit) go to ``--json`` (default
``benchmarks/results/model_step-cpu-<date>.json``; ``--quick`` writes to a temporary file).
"""

from __future__ import annotations

import argparse
import atexit
import copy
import datetime
import gc
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import seq2d
import seq2d.sparse
from seq2d.envinfo import cpu_name
from seq2d.testing import autograd_nodes
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py, also when imported by path
from machine import busy_cpu_s, proc_cpu_s  # noqa: E402

# ------------------------------------------------------------------------------ defaults
IMPLS = ("default", "tiled", "kernel", "dense", "masked_dense", "loss")
LIBRARY = ("default", "tiled")  # the paths of the library under test: probed in a child when they may be slow
COMPILED = tuple(f"{k}_compiled" for k in LIBRARY)  # with --compile: the library paths under torch.compile
FULL = dict(N=4096, batch=256, slots=[4, 16, 64, 256], densities=[0.1, 0.25], threads=[1, 2], repeats=7,
            seq_repeats=25, max_wait=5.0, max_others=0.1)
QUICK = dict(N=256, batch=8, slots=[4, 16], densities=[0.1, 0.25], threads=[1], repeats=1, seq_repeats=1,
             max_wait=0.0, max_others=1.0)
SEQ = dict(full=dict(input_size=200, hidden=200, layers=2, T=35, batch=20),
           quick=dict(input_size=16, hidden=16, layers=2, T=5, batch=4))
TRF = dict(full=dict(d_model=256, nhead=8, d_ff=1024, batch=16, T=64),
           quick=dict(d_model=32, nhead=2, d_ff=64, batch=2, T=8))
PROBE_BLOCKS = 64  # with nothing measured yet, probe the library paths in a child above this many blocks
TARGETS = {"tiled/kernel": 1.2, "tiled/ideal": 2.0, "default/dense@n64d0.1": 1.5, "default/masked_dense": 1.0,
           "contention_vs_dense": 1.5, "rnn": 1.2}


# ------------------------------------------------------------------------------ the setting
def block_mask(n: int, density: float, seed: int) -> torch.Tensor:
    """Exactly round(density * n * n) blocks, uniform over rows 1..n-1 (row 0 empty: slot 0 is the held input)."""
    k = round(density * n * n)
    pool = (n - 1) * n
    if not 1 <= k <= pool:
        raise ValueError(f"density {density} with n={n} asks for {k} blocks; 1 .. {pool} are possible "
                         "(row 0 is left empty)")
    g = torch.Generator().manual_seed(seed)
    pick = torch.randperm(pool, generator=g)[:k] + n
    m = torch.zeros(n * n, dtype=torch.bool)
    m[pick] = True
    return m.view(n, n)


def which_store(model) -> str:
    """How the model holds its linear blocks ("dense", "tiled", ...; the library's own name when it has one)."""
    store = getattr(model, "store", None)
    if store is not None:
        return str(getattr(store, "kind", type(store).__name__))
    return "tiled" if getattr(model, "matrix", None) is not None else "dense"


class Impl:
    """One implementation of a case: ``step()`` is timed, ``reset()`` (clear gradients) is not."""

    def __init__(self, step, reset, **meta):
        self.step, self.reset, self.meta = step, reset, meta


def _clear(tensors):
    def reset():
        for t in tensors:
            t.grad = None
    return reset


class Setting:
    """The models, state and operands of one (N, batch, n, density) combination."""

    def __init__(self, N, batch, n, density, seed, activation="relu", call="step", build_tiled=True):
        if N % n:
            raise ValueError(f"N={N} is not a multiple of n={n}")
        self.N, self.B, self.n, self.density, self.call = N, batch, n, density, call
        self.S = S = N // n
        self.tile = min(64, S)
        self.mask = block_mask(n, density, seed)
        self.blocks = int(self.mask.sum())
        self.reached = [i for i in range(n) if bool(self.mask[i].any())]  # the slots one step computes
        args = ([S] * n, self.mask)
        kw = dict(activations=activation, bias=True, seed=seed, steps=1)
        t0 = time.perf_counter()
        self.model = seq2d.from_mask(*args, **kw)
        self.build_s = {"from_mask": time.perf_counter() - t0}
        self.default_store = which_store(self.model)
        self.tiled = self.matrix = self.layout = None
        if build_tiled:
            t0 = time.perf_counter()
            if getattr(self.model, "matrix", None) is None:
                self.tiled = copy.deepcopy(self.model).to_blocksparse(tile=self.tile)
            else:  # from_mask already chose the tiled store: convert its dense-store twin (same weights)
                self.tiled = seq2d.from_mask(*args, **kw, store="dense").to_blocksparse(tile=self.tile)
            self.build_s["to_blocksparse"] = time.perf_counter() - t0
            self.matrix = self.tiled.matrix
            self.layout = self.matrix.layout
        g = torch.Generator().manual_seed(seed + 1)
        self.state = [torch.randn(batch, S, generator=g).requires_grad_() for _ in range(n)]
        self.w = {i: torch.randn(batch, S, generator=g) for i in self.reached}
        self.gen = g

    # facts of the tiled layout
    @property
    def stored_tiles(self):
        return None if self.layout is None else int(self.layout.nnz)

    @property
    def tile_density(self):
        return None if self.layout is None else float(self.layout.density)

    def _run(self, model, state=None):
        state = self.state if state is None else state
        out = model.step(state) if self.call == "step" else model(state, steps=1)
        terms = [(out[i] * self.w[i]).sum() for i in self.reached if out[i] is not None]
        return out, torch.stack(terms).sum() if len(terms) > 1 else terms[0]

    def model_impl(self, which: str) -> Impl:
        model = self.model if which == "default" else self.tiled
        params = [p for p in model.parameters() if p.requires_grad]

        def step():
            self._run(model)[1].backward()

        return Impl(step, _clear(params + self.state))

    def compiled_impl(self, which: str, backend: str) -> Impl:
        """``which`` (default / tiled) with the model call and the loss compiled as one graph."""
        model = self.model if which == "default" else self.tiled
        params = [p for p in model.parameters() if p.requires_grad]
        loss = torch.compile(lambda state: self._run(model, state)[1], fullgraph=True, backend=backend)

        def step():
            loss(self.state).backward()

        return Impl(step, _clear(params + self.state), backend=backend)

    def kernel_impl(self) -> Impl:
        eng, L = self.matrix, self.layout
        T = L.tile
        wp = eng.position_tiles().detach().requires_grad_()
        x = torch.randn(self.B, L.Kt * T, generator=self.gen).requires_grad_()
        w = torch.randn(self.B, L.Mt * T, generator=self.gen)

        def step():
            (seq2d.sparse.bsmm(x, wp, L, eng.kernel) * w).sum().backward()

        kernel = seq2d.sparse.resolve_kernel(eng.kernel, x.device, x.dtype, L.density, L.tile).name
        return Impl(step, _clear([wp, x]), kernel=kernel)

    def dense_impl(self) -> Impl:
        lin = nn.Linear(self.N, self.N, bias=False)
        x = torch.randn(self.B, self.N, generator=self.gen).requires_grad_()
        w = torch.randn(self.B, self.N, generator=self.gen)

        def step():
            (lin(x) * w).sum().backward()

        return Impl(step, _clear([lin.weight, x]))

    def masked_dense_impl(self) -> Impl:
        S = self.S
        M = self.mask.repeat_interleave(S, 0).repeat_interleave(S, 1).float()  # (N, N) element mask
        W = nn.Parameter(torch.randn(self.N, self.N, generator=self.gen) / self.N ** 0.5)
        x = torch.randn(self.B, self.N, generator=self.gen).requires_grad_()
        w = torch.randn(self.B, self.N, generator=self.gen)

        def step():
            (F.linear(x, W * M) * w).sum().backward()

        return Impl(step, _clear([W, x]))

    def loss_impl(self) -> Impl:
        outs = {i: torch.randn(self.B, self.S, generator=self.gen).requires_grad_() for i in self.reached}

        def step():
            terms = [(outs[i] * self.w[i]).sum() for i in self.reached]
            (torch.stack(terms).sum() if len(terms) > 1 else terms[0]).backward()

        return Impl(step, _clear(list(outs.values())))

    def impl(self, name: str, backend: str = "inductor") -> Impl:
        if name in ("default", "tiled"):
            return self.model_impl(name)
        if name in COMPILED:
            return self.compiled_impl(name.removesuffix("_compiled"), backend)
        return {"kernel": self.kernel_impl, "dense": self.dense_impl, "masked_dense": self.masked_dense_impl,
                "loss": self.loss_impl}[name]()

    def nodes(self, which: str) -> dict:
        """Autograd nodes of one step: ``loss`` (the loss graph, as timed), ``step`` (reachable
        from the outputs the loss reads: the loss's own 2 per slot + 2 left out) and ``ops``
        (``step`` without the AccumulateGrad leaves of the parameters and the state)."""
        model = self.model if which == "default" else self.tiled
        out, loss = self._run(model)
        outs = [out[i] for i in self.reached if out[i] is not None]
        counts = {"loss": autograd_nodes(loss), "step": autograd_nodes(*outs),
                  "ops": autograd_nodes(*outs, ops_only=True)}
        del out, outs, loss
        return counts

    def check(self) -> float:
        """Max abs difference of the tiled step's outputs from the default step's (no grad)."""
        with torch.no_grad():
            a, _ = self._run(self.model)
            b, _ = self._run(self.tiled)
        return max(float((a[i] - b[i]).abs().max()) for i in self.reached)


# ------------------------------------------------------------------------------ the machine
def _pdeathsig():  # the busy child dies with us even if we are killed (Linux; best effort)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001
        pass


class Contender:
    """One competing busy process (one core), started for the whole timing, stopped and
    continued around the quiet halves of ``--contend both``; killed on exit."""

    def __init__(self):
        self.proc = None
        self.running = False

    def start(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None)
        self.running = True
        atexit.register(self.stop)

    def set(self, running: bool):
        if self.proc is None or running == self.running:
            return
        os.kill(self.proc.pid, signal.SIGCONT if running else signal.SIGSTOP)
        self.running = running

    def cpu_s(self) -> float:
        return proc_cpu_s(self.proc.pid) if self.proc is not None else 0.0

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            self.proc.kill()
            self.proc.wait()
        self.running = False


class Meter:
    """Share of the machine's CPUs used by *other* processes (not us, not our contender)."""

    def __init__(self, contender: Contender | None):
        self.contender = contender
        self.ncpu = os.cpu_count() or 1

    def _own(self):
        t = os.times()
        return t.user + t.system + (self.contender.cpu_s() if self.contender else 0.0)

    def start(self):
        return time.perf_counter(), busy_cpu_s(), self._own()

    def share(self, mark) -> float | None:
        wall, busy, own = mark
        wall = time.perf_counter() - wall
        others = ((busy_cpu_s() - busy) - (self._own() - own)) / (max(wall, 1e-9) * self.ncpu)
        return max(others, 0.0) if others == others else None

    def wait_quiet(self, max_others: float, until: float, window: float = 0.25) -> bool:
        while True:
            mark = self.start()
            time.sleep(window)
            s = self.share(mark)
            if s is None or s <= max_others:
                return True
            if time.perf_counter() >= until:
                return False


def loadavg() -> list[str]:
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return ["?"]


# ------------------------------------------------------------------------------ timing
def run_case(impls: dict, *, modes, repeats, warmup, budget_s, max_others, max_wait, max_case_s,
             meter: Meter, contender: Contender | None):
    """Time ``impls`` side by side: per mode (quiet / contended) the median of the used rounds.

    Returns ``(rows, rounds)``: ``rows[mode][name]`` a record (status ok / skipped / error,
    median_ms, times_ms, ...), ``rounds`` every timed round's times and other processes' share.
    """
    rows = {m: {name: {"status": "ok"} for name in impls} for m in modes}
    names = list(impls)

    def drop(name, status, **info):
        for m in modes:
            rows[m][name].update(status=status, **info)
        if name in names:
            names.remove(name)

    def once(name):
        try:
            impls[name].reset()
            t0 = time.perf_counter()
            impls[name].step()
            dt = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001  record and go on
            drop(name, "error", error=f"{type(e).__name__}: {e}")
            return None
        if dt > budget_s:
            drop(name, "skipped", reason=f"> {budget_s:g}s/call", call_s=dt)
            return None
        return dt

    for _ in range(warmup):
        for m in modes:
            if contender:
                contender.set(m == "contended")
            for name in list(names):
                once(name)
    rounds = []
    t_start = time.perf_counter()
    deadline = t_start + max_wait
    max_rounds = repeats + max(1, repeats // 2)
    while names and len(rounds) < max_rounds:
        if max_wait > 0 and max_others < 1:
            if contender:
                contender.set(modes[0] == "contended")
            meter.wait_quiet(max_others, deadline)
        k = len(rounds)
        order_modes = modes[k % len(modes):] + modes[:k % len(modes)]
        rec = {"times": {}, "others": {}}
        for m in order_modes:
            if contender:
                contender.set(m == "contended")
            mark = meter.start()
            times = {}
            j = k % max(len(names), 1)
            for name in names[j:] + names[:j]:  # rotating order
                dt = once(name)
                if dt is not None:
                    times[name] = dt
            rec["times"][m] = times
            rec["others"][m] = meter.share(mark)
        rounds.append(rec)
        shares = [rec_share(r) for r in rounds]
        if sum(1 for s in shares if s <= max_others) >= repeats:
            break
        if len(rounds) >= min(3, repeats) and time.perf_counter() - t_start > max_case_s:
            break
    if contender:
        contender.set(False)
    ranked = sorted(range(len(rounds)), key=lambda i: (rec_share(rounds[i]), i))
    used = set(ranked[:repeats])
    for i, r in enumerate(rounds):
        r["used"] = i in used
    for m in modes:
        for name, row in rows[m].items():
            ms = [r["times"][m][name] * 1e3 for r in rounds if r["used"] and name in r["times"][m]]
            if ms and row["status"] == "ok":
                row.update(median_ms=statistics.median(ms), min_ms=min(ms), times_ms=ms)
                if len(ms) >= 2:
                    q1, _, q3 = statistics.quantiles(ms, n=4)
                    row["iqr_pct"] = 100 * (q3 - q1) / statistics.median(ms)
    return rows, rounds


def rec_share(r) -> float:
    vals = [v for v in r["others"].values() if v is not None]
    return max(vals) if vals else 0.0


def med(rows: dict, name: str):
    r = rows.get(name)
    return r.get("median_ms") if r else None


def _div(a, b):
    return a / b if a is not None and b else None


def grid_ratios(rows: dict, tile_density) -> dict:
    dense = med(rows, "dense")
    ideal = tile_density * dense if dense and tile_density else None
    return {
        "default/dense": _div(med(rows, "default"), dense),
        "default/masked_dense": _div(med(rows, "default"), med(rows, "masked_dense")),
        "tiled/kernel": _div(med(rows, "tiled"), med(rows, "kernel")),
        "tiled/ideal": _div(med(rows, "tiled"), ideal),
        "kernel/ideal": _div(med(rows, "kernel"), ideal),
        "tiled-loss/kernel": _div(_sub(med(rows, "tiled"), med(rows, "loss")), med(rows, "kernel")),
        "default-loss/masked_dense": _div(_sub(med(rows, "default"), med(rows, "loss")), med(rows, "masked_dense")),
        "ideal_ms": ideal,
        **{f"{k}/{k.removesuffix('_compiled')}": _div(med(rows, k), med(rows, k.removesuffix("_compiled")))
           for k in COMPILED if k in rows},
    }


def _sub(a, b):
    return a - b if a is not None and b is not None else None


def contention_ratios(rows_by_mode: dict, names, ref="dense") -> dict:
    """contended/quiet per implementation, and for the others that ratio over ``ref``'s."""
    out = {}
    for name in names:
        out[name] = _div(med(rows_by_mode["contended"], name), med(rows_by_mode["quiet"], name))
    for name in names:
        if name != ref:
            out[f"{name}/{ref}"] = _div(out[name], out.get(ref))
    return out


# ------------------------------------------------------------------------------ compiling (--compile)
def clear_compiler_caches() -> None:
    """Inductor's in-memory caches (loaded modules and kernels): what a new process starts without."""
    try:
        from torch._inductor.utils import clear_caches
    except ImportError:  # pragma: no cover - another torch
        return
    clear_caches()


def compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compile_warmup(backend: str, cache_dir: str) -> float:
    """Seconds to compile and run a tiny function: the compiler's one-time imports and start-up,
    paid once here so that no setting is charged for them."""
    t0 = time.perf_counter()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    clear_compiler_caches()
    x = torch.randn(4, 4, requires_grad=True)
    torch.compile(lambda t: torch.relu(t * 2).sum(), fullgraph=True, backend=backend)(x).backward()
    torch._dynamo.reset()
    return time.perf_counter() - t0


def cold_first_call(impl: Impl, cache_dir: str) -> float:
    """Seconds of the first call of a compiled implementation, inductor's cache directory fresh and
    empty and its in-memory caches cleared (Dynamo is reset by the caller, once per setting)."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    clear_compiler_caches()
    impl.reset()
    t0 = time.perf_counter()
    impl.step()
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------ probing (child process)
def probe(spec: dict) -> None:
    """Child side: build the setting, say "ready", run one call of one implementation, print its time
    (for a compiled implementation with ``cache_dir``: the first call of a second process reading that cache)."""
    torch.set_num_threads(spec["threads"])
    s = Setting(spec["N"], spec["batch"], spec["n"], spec["density"], spec["seed"], spec["activation"],
                spec["call"], build_tiled=not spec["impl"].startswith("default"))
    impl = s.impl(spec["impl"], spec.get("backend", "inductor"))
    if spec.get("cache_dir"):  # a compiled implementation: the compiler's start-up first, untimed
        with tempfile.TemporaryDirectory() as d:
            compile_warmup(spec["backend"], d)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = spec["cache_dir"]
        clear_compiler_caches()
    impl.reset()
    print("ready", flush=True)
    t0 = time.perf_counter()
    impl.step()
    print(json.dumps({"call_s": time.perf_counter() - t0}), flush=True)


def run_probe(spec: dict, budget_s: float, allowance_s: float) -> tuple[bool, str, float | None]:
    """Parent side: run ``probe`` in a child; kill it ``budget_s`` after it is ready to call.
    Returns (fits in the budget, note, measured seconds or None). A probe that fails or does
    not get ready in ``allowance_s`` says nothing: (True, why, None), and the call runs here."""
    import select

    cmd = [sys.executable, str(Path(__file__).resolve()), "--probe-spec", json.dumps(spec)]
    with tempfile.TemporaryFile("w+") as err:
        # the child imports the seq2d this process runs (a checkout beside an installed copy, say)
        root = str(Path(seq2d.__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True, env=env)
        try:
            until = time.perf_counter() + allowance_s
            line = ""
            while not line.startswith("ready"):
                left = until - time.perf_counter()
                if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                    return True, f"probe not ready after {allowance_s:.0f}s", None
                line = proc.stdout.readline()
                if not line:  # exited early
                    proc.wait()
                    err.seek(0)
                    last = (err.read().strip().splitlines() or ["?"])[-1]
                    return True, f"probe failed (rc {proc.returncode}): {last[:200]}", None
            try:
                proc.wait(timeout=budget_s + 0.5)
            except subprocess.TimeoutExpired:
                return False, f"probe killed after {budget_s:g}s", None
            try:
                dt = json.loads(proc.stdout.read().strip().splitlines()[-1])["call_s"]
            except (ValueError, KeyError, IndexError):
                return True, "probe gave no time", None
            return dt <= budget_s, f"probe {dt:.1f}s", dt
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# ------------------------------------------------------------------------------ printing
def _ms(row):
    if row is None:
        return "-"
    if row.get("median_ms") is not None:
        return f"{row['median_ms']:.2f}"
    return {"skipped": "skip", "error": "err"}.get(row["status"], "n/a")


def _r(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


GRID_HEAD = (f"{'thr':>3} {'n':>4} {'S':>5} {'d':>5} {'blk':>5} {'tiles':>6} {'mode':>9} |"
             + "".join(f"{h:>10}" for h in ("default", "tiled", "kernel", "dense", "masked", "loss"))
             + " |" + "".join(f"{h:>10}" for h in ("def/dense", "def/mask", "tile/kern", "tile/idl", "kern/idl",
                                                   "net t/k", "net d/m"))
             + f" |{'others':>7}")


def print_compiled_row(rec: dict, mode: str) -> None:
    """One line per setting under --compile: compiled medians, their ratio to eager, the up-front cost."""
    rows, ratios = rec["modes"][mode]["rows"], rec["modes"][mode]["ratios"]
    cells = []
    for k in COMPILED:
        base = k.removesuffix("_compiled")
        c = rec.get("compile", {}).get(base, {})
        cost = (f"first call cold {_r(c.get('cold_s'), '.1f')} s, warm {_r(c.get('warm_s'), '.1f')} s"
                if "cold_s" in c else c.get("error", rows[k].get("reason", rows[k]["status"]))[:120])
        cells.append(f"{base} {_ms(rows[k])} ms ({_r(ratios.get(f'{k}/{base}'))}x eager; {cost})")
    backend = next((c["backend"] for c in rec.get("compile", {}).values()), "?")
    print(f"      compiled ({backend}): " + "; ".join(cells)
          + f"; graphs {sum(c.get('graphs', 0) for c in rec.get('compile', {}).values())}"
          + f" (+{rec.get('compile_graphs_timing', 0)} while timing)")
    sys.stdout.flush()


def print_grid_row(rec: dict, mode: str) -> None:
    rows, ratios = rec["modes"][mode]["rows"], rec["modes"][mode]["ratios"]
    td = rec["tile_density"]
    line = (f"{rec['threads']:>3} {rec['n']:>4} {rec['S']:>5} {rec['density']:>5g} {rec['blocks']:>5} "
            f"{_r(td * 100 if td is not None else None, '.1f') + '%':>6} {mode:>9} |"
            + "".join(f"{_ms(rows.get(k)):>10}" for k in IMPLS) + " |"
            + "".join(f"{_r(ratios[k]):>10}" for k in ("default/dense", "default/masked_dense", "tiled/kernel",
                                                       "tiled/ideal", "kernel/ideal", "tiled-loss/kernel",
                                                       "default-loss/masked_dense"))
            + f" |{_r(rec['modes'][mode]['others'] * 100 if rec['modes'][mode]['others'] is not None else None, '.0f') + '%':>7}")
    print(line)
    for k in IMPLS:
        r = rows.get(k, {})
        if r.get("status") in ("skipped", "error") and mode == list(rec["modes"])[0]:
            why = r.get("reason") or r.get("error", "")
            print(f"      {k}: {r['status']} ({why}{'; ' + r['note'] if r.get('note') else ''})"[:200])
    sys.stdout.flush()


# ------------------------------------------------------------------------------ environment
def _git(*a) -> str | None:
    try:
        res = subprocess.run(["git", *a], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
        return res.stdout.strip() if res.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _source_hash() -> str:
    h = hashlib.sha256()
    root = Path(seq2d.__file__).parent
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return " ".join(loadavg())


def environment(args) -> dict:
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "torch": torch.__version__,
        "seq2d": getattr(seq2d, "__version__", "?"),
        "seq2d_sha256": _source_hash(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--", ":(top)seq2d")),  # the library, from the repo root
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": args.threads,
        "uptime_start": _uptime(),
        "loadavg_start": loadavg(),
        "seeds": {"mask_and_model": args.seed, "data": args.seed + 1, "torch_modules": args.seed},
    }


# ------------------------------------------------------------------------------ sections
def compile_cold(args, s: Setting, live: dict, build_err: dict, cache_root: str) -> dict:
    """The first call of each compiled implementation in ``live``, cold (see the docstring); one that
    fails moves from ``live`` to ``build_err``. Returns {eager path: {backend, cold_s, cache_dir, graphs}}."""
    torch._dynamo.reset()  # the last setting's graphs go: every setting compiles from nothing
    out = {}
    for impl in COMPILED:
        if impl not in live:
            continue
        base = impl.removesuffix("_compiled")
        cache = tempfile.mkdtemp(prefix=f"{base}-n{s.n}-d{s.density:g}-", dir=cache_root)
        g0 = compiled_graphs()
        try:
            cold = cold_first_call(live[impl], cache)
        except Exception as e:  # noqa: BLE001  (record and go on: an untraceable path is a finding)
            build_err[impl] = {"status": "error", "error": f"{type(e).__name__}: {str(e)[:500]}"}
            del live[impl]
            out[base] = {"backend": args.compile, "error": build_err[impl]["error"]}
            continue
        out[base] = {"backend": args.compile, "cold_s": cold, "cache_dir": cache, "graphs": compiled_graphs() - g0}
    return out


def compile_warm(args, s: Setting, compiled: dict, threads: int) -> None:
    """Each compiled path's first call in a second process reading the cache its cold call wrote
    (``warm_s``, None with the reason in ``warm_note`` when the child gave no time)."""
    for base, c in compiled.items():
        if "cold_s" not in c:
            continue
        if not args.compile_warm:
            c["warm_note"] = "not measured (--no-compile-warm)"
            continue
        spec = {"N": s.N, "batch": s.B, "n": s.n, "density": s.density, "seed": args.seed, "activation": args.activation,
                "call": args.call, "impl": f"{base}_compiled", "threads": threads, "backend": c["backend"],
                "cache_dir": c["cache_dir"]}
        _, note, dt = run_probe(spec, budget_s=max(args.budget_s, 2 * c["cold_s"] + 30),
                                allowance_s=args.probe_ready_s or 60 + 3 * sum(s.build_s.values()))
        c["warm_s"], c["warm_note"] = dt, note
    for c in compiled.values():
        c.pop("cache_dir", None)  # a temporary directory, removed at the end of the run


def grid_section(args, meter, contender, modes, result, path) -> None:
    names = IMPLS + (COMPILED if args.compile else ())
    print(f"\n## grid: N={args.N}, batch {args.batch}, float32, fwd+bwd, median ms "
          f"(skip: > {args.budget_s:g}s/call; tiles = stored-tile density of the tiled layout)")
    print(GRID_HEAD)
    skips: list[dict] = []  # {impl, n, density, ...}: skip at n' >= n, d' >= d
    rate: dict[str, tuple[int, float]] = {}  # impl -> (blocks, first-call s/block) of the largest setting timed
    combos = sorted((n, d) for n in args.slots for d in args.densities)
    for n, d in combos:
        gc.collect()
        if contender:
            contender.set(False)
        try:
            s = Setting(args.N, args.batch, n, d, args.seed, args.activation, args.call)
        except Exception as e:  # noqa: BLE001
            print(f"    n={n} d={d:g}: setting failed: {type(e).__name__}: {e}")
            result["grid"].append({"n": n, "density": d, "error": f"{type(e).__name__}: {e}"})
            continue
        info = {"n": n, "S": s.S, "density": d, "blocks": s.blocks, "reached_slots": len(s.reached),
                "tile": s.tile, "stored_tiles": s.stored_tiles, "tile_density": s.tile_density,
                "default_store": s.default_store, "tiled_store": which_store(s.tiled) if s.tiled is not None else None,
                "build_s": s.build_s}
        nodes = {}
        for which in LIBRARY:
            try:
                nodes[which] = s.nodes(which)
            except Exception as e:  # noqa: BLE001
                nodes[which] = None
                info.setdefault("errors", {})[f"nodes_{which}"] = f"{type(e).__name__}: {e}"
        result["autograd_nodes"].append({"n": n, "density": d, "blocks": s.blocks, **nodes})
        try:
            info["check_max_abs_err"] = s.check()
        except Exception as e:  # noqa: BLE001
            info["check_max_abs_err"] = None
            info.setdefault("errors", {})["check"] = f"{type(e).__name__}: {e}"
        pre_skipped: dict[str, dict] = {}
        for impl in names:
            for sk in skips:
                if sk["impl"] == impl and n >= sk["n"] and d >= sk["density"]:
                    pre_skipped[impl] = {"status": "skipped", "reason": f"> {args.budget_s:g}s/call",
                                         "note": f"at n={sk['n']} d={sk['density']:g} threads={sk['threads']}"
                                                 + (f": {sk['note']}" if sk.get("note") else "")}
                    break
        for impl in LIBRARY:
            if impl in pre_skipped:
                continue
            predicted = rate[impl][1] * s.blocks if impl in rate else None
            need = args.probe == "always" or (args.probe == "auto" and (
                (predicted is None and s.blocks > PROBE_BLOCKS) or
                (predicted is not None and predicted > args.budget_s / 4)))
            if not need:
                continue
            spec = {"N": args.N, "batch": args.batch, "n": n, "density": d, "seed": args.seed,
                    "activation": args.activation, "call": args.call, "impl": impl, "threads": args.threads[0]}
            allowance = args.probe_ready_s or 30 + 3 * sum(s.build_s.values())  # import and build in the child
            ok, note, dt = run_probe(spec, args.budget_s, allowance)
            info.setdefault("probes", {})[impl] = {"fits": ok, "note": note, "call_s": dt,
                                                   "predicted_s": predicted}
            if not ok:
                pre_skipped[impl] = {"status": "skipped", "reason": f"> {args.budget_s:g}s/call", "note": note}
                skips.append({"impl": impl, "n": n, "density": d, "threads": args.threads[0], "note": note})
        for impl in COMPILED:  # a compiled path goes where its eager path goes
            base = impl.removesuffix("_compiled")
            if args.compile and base in pre_skipped and impl not in pre_skipped:
                pre_skipped[impl] = dict(pre_skipped[base], note=f"as {base}: " + pre_skipped[base].get("note", ""))
        impls = {}
        build_err = {}
        for impl in names:
            if impl in pre_skipped:
                continue
            try:
                impls[impl] = s.impl(impl)
            except Exception as e:  # noqa: BLE001
                build_err[impl] = {"status": "error", "error": f"{type(e).__name__}: {e}"}
        if "kernel" in impls:
            info["kernel"] = impls["kernel"].meta.get("kernel")
        for threads in args.threads:
            torch.set_num_threads(threads)
            load_before = loadavg()
            first = {}
            live = {k: v for k, v in impls.items() if not any(
                sk["impl"] == k and n >= sk["n"] and d >= sk["density"] for sk in skips)}

            # wrap the first call of the library paths: its time feeds the predictions
            def timed(name, impl):
                def step():
                    t0 = time.perf_counter()
                    impl.step()
                    first.setdefault(name, time.perf_counter() - t0)
                return Impl(step, impl.reset)

            live = {k: (timed(k, v) if k in LIBRARY else v) for k, v in live.items()}
            compiled = compile_cold(args, s, live, build_err, args.compile_cache) if args.compile else {}
            graphs0 = compiled_graphs() if compiled else 0
            rows, rounds = run_case(live, modes=modes, repeats=args.repeats, warmup=args.warmup,
                                    budget_s=args.budget_s, max_others=args.max_others, max_wait=args.max_wait,
                                    max_case_s=args.max_case_s, meter=meter, contender=contender)
            for k, t in first.items():  # the per-block slope of the largest mask extrapolates best
                rate[k] = max(rate.get(k, (0, 0.0)), (s.blocks, t / s.blocks))
            rec = {**info, "threads": threads, "loadavg_before": load_before, "loadavg_after": loadavg(),
                   "modes": {}, "rounds": [{"others": r["others"], "used": r["used"]} for r in rounds]}
            if compiled:
                rec["compile_graphs_timing"] = compiled_graphs() - graphs0  # 0 unless something recompiled
                compile_warm(args, s, compiled, threads)
                rec["compile"] = compiled
            for m in modes:
                mrows = {}
                for impl in names:
                    if impl in pre_skipped:
                        mrows[impl] = dict(pre_skipped[impl])
                    elif impl in build_err:
                        mrows[impl] = dict(build_err[impl])
                    elif impl not in live:
                        sk = next(sk for sk in skips if sk["impl"] == impl and n >= sk["n"] and d >= sk["density"])
                        mrows[impl] = {"status": "skipped", "reason": f"> {args.budget_s:g}s/call",
                                       "note": f"at n={sk['n']} d={sk['density']:g} threads={sk['threads']}"}
                    else:
                        mrows[impl] = rows[m][impl]
                shares = [r["others"].get(m) for r in rounds if r["used"] and r["others"].get(m) is not None]
                rec["modes"][m] = {"rows": mrows, "ratios": grid_ratios(mrows, s.tile_density),
                                   "others": statistics.median(shares) if shares else None}
            for impl in names:
                r = rec["modes"][modes[0]]["rows"][impl]
                if r["status"] == "skipped" and "call_s" in r and not any(
                        sk["impl"] == impl and n >= sk["n"] and d >= sk["density"] for sk in skips):
                    skips.append({"impl": impl, "n": n, "density": d, "threads": threads,
                                  "note": f"{r['call_s']:.1f}s"})
            if len(modes) == 2:
                rec["contention"] = contention_ratios({m: rec["modes"][m]["rows"] for m in modes}, IMPLS)
            result["grid"].append(rec)
            for m in modes:
                print_grid_row(rec, m)
            if compiled:
                print_compiled_row(rec, modes[0])
            path.write_text(json.dumps(result, indent=1))  # an interrupted run keeps its cases
        del s, impls
    print("\nchecks (no grad): max |tiled - default| of the step outputs per (n, d), and the store from_mask chose: "
          + ", ".join(f"n={r['n']} d={r['density']:g}: {_r(r.get('check_max_abs_err'), '.1e')} ({r.get('default_store')})"
                      for r in result["grid"] if r.get("threads") == args.threads[0]))
    print("\n## autograd nodes per step (unique nodes; loss: the loss graph as timed, leaves included; "
          "step: from the outputs the loss reads; ops: step without AccumulateGrad leaves)")
    print(f"{'n':>5} {'d':>5} {'blocks':>7} |{'default loss':>13}{'step':>7}{'ops':>7} |{'tiled loss':>11}"
          f"{'step':>7}{'ops':>7}")
    for r in result["autograd_nodes"]:
        cells = []
        for which in LIBRARY:
            c = r.get(which) or {}
            cells.append(f"{_r(c.get('loss'), 'd'):>{13 if which == 'default' else 11}}{_r(c.get('step'), 'd'):>7}"
                         f"{_r(c.get('ops'), 'd'):>7}")
        print(f"{r['n']:>5} {r['density']:>5g} {r['blocks']:>7} |" + " |".join(cells))


def _sequence_impls(cfg: dict, seed: int):
    torch.manual_seed(seed)
    ref = nn.RNN(cfg["input_size"], cfg["hidden"], num_layers=cfg["layers"])
    ours = seq2d.from_torch(ref)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(cfg["T"], cfg["batch"], cfg["input_size"], generator=g).requires_grad_()
    wo = torch.randn(cfg["T"], cfg["batch"], cfg["hidden"], generator=g)
    wh = torch.randn(cfg["layers"], cfg["batch"], cfg["hidden"], generator=g)
    with torch.no_grad():
        (o1, h1), (o2, h2) = ref(x), ours(x)
        err = max(float((o1 - o2).abs().max()), float((h1 - h2).abs().max()))

    def make(m):
        def step():
            out, h = m(x)
            ((out * wo).sum() + (h * wh).sum()).backward()
        return Impl(step, _clear(list(m.parameters()) + [x]))

    return {"nn.RNN": make(ref), "seq2d": make(ours)}, err


def _transformer_impls(cfg: dict, seed: int):
    torch.manual_seed(seed)
    ref = nn.TransformerEncoderLayer(cfg["d_model"], cfg["nhead"], cfg["d_ff"], dropout=0.0, batch_first=True)
    ours = seq2d.from_torch(ref)
    ref.train()
    ours.train()
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(cfg["batch"], cfg["T"], cfg["d_model"], generator=g).requires_grad_()
    w = torch.randn(cfg["batch"], cfg["T"], cfg["d_model"], generator=g)
    with torch.no_grad():
        err = float((ref(x) - ours(x)).abs().max())

    def make(m):
        def step():
            (m(x) * w).sum().backward()
        return Impl(step, _clear(list(m.parameters()) + [x]))

    return {"nn.TransformerEncoderLayer": make(ref), "seq2d": make(ours)}, err


def pair_section(title, key, builder, cfg, args, meter, contender, modes, result, path) -> None:
    torch.set_num_threads(1)
    print(f"\n## {title}: {cfg}, fwd+bwd, 1 thread, median ms")
    try:
        impls, err = builder(cfg, args.seed)
    except Exception as e:  # noqa: BLE001
        print(f"  failed: {type(e).__name__}: {e}")
        result[key] = {"config": cfg, "error": f"{type(e).__name__}: {e}"}
        return
    ref_name = next(iter(impls))
    rows, rounds = run_case(impls, modes=modes, repeats=args.seq_repeats, warmup=args.warmup if args.quick else max(args.warmup, 3),
                            budget_s=args.budget_s, max_others=args.max_others, max_wait=args.max_wait,
                            max_case_s=args.max_case_s, meter=meter, contender=contender)
    rec = {"config": cfg, "threads": 1, "max_abs_err": err, "modes": {},
           "rounds": [{"others": r["others"], "used": r["used"]} for r in rounds]}
    for m in modes:
        ratio = _div(med(rows[m], "seq2d"), med(rows[m], ref_name))
        rec["modes"][m] = {"rows": rows[m], "ratio": ratio}
        print(f"  {m:>9}: {ref_name} {_ms(rows[m][ref_name])} ms, seq2d {_ms(rows[m]['seq2d'])} ms, "
              f"ratio seq2d/{ref_name} {_r(ratio, '.3f')}" + (f" (target <= {TARGETS['rnn']})" if key == "sequence" else "")
              + f"; max |seq2d - torch| {err:.1e}")
    if len(modes) == 2:
        rec["contention"] = contention_ratios(rows, list(impls), ref=ref_name)
        c = rec["contention"]
        print(f"  contended/quiet: {ref_name} {_r(c[ref_name])}, seq2d {_r(c['seq2d'])}, "
              f"seq2d over {ref_name} {_r(c[f'seq2d/{ref_name}'])}")
    result[key] = rec
    path.write_text(json.dumps(result, indent=1))


# ------------------------------------------------------------------------------ targets
def evaluate_targets(result: dict, modes: list[str]) -> list[dict]:
    out = []
    grid = [r for r in result.get("grid", []) if "modes" in r]

    def where(r):
        return f"threads={r['threads']} n={r['n']} d={r['density']:g}"

    for m in modes:
        for key, limit, label, pick in [
            ("tiled/kernel", TARGETS["tiled/kernel"], "tiled <= 1.2x kernel", lambda r: True),
            ("tiled/ideal", TARGETS["tiled/ideal"], "tiled <= 2x ideal", lambda r: True),
            ("default/dense", TARGETS["default/dense@n64d0.1"], "default (n=64, d=0.1) <= 1.5x dense",
             lambda r: r["n"] == 64 and abs(r["density"] - 0.1) < 1e-9),
            ("default/masked_dense", TARGETS["default/masked_dense"], "default no slower than masked_dense (n <= 256)",
             lambda r: r["n"] <= 256),
        ]:
            vals, missing = [], []
            for r in grid:
                if not pick(r):
                    continue
                v = r["modes"][m]["ratios"][key]
                if v is None:
                    missing.append(where(r))
                else:
                    vals.append((v, where(r)))
            if not vals and not missing:
                continue
            # a skipped default (> budget) is slower than masked dense: not met
            met = sum(1 for v, _ in vals if v <= limit)
            worst = max(vals) if vals else None
            out.append({"mode": m, "target": label, "ratio": key, "limit": limit, "met": met,
                        "of": len(vals) + len(missing), "worst": worst[0] if worst else None,
                        "worst_at": worst[1] if worst else None, "not_measured": missing,
                        "ok": met == len(vals) + len(missing)})
    if len(modes) == 2:
        vals = []
        for r in grid:
            for k in ("default/dense", "tiled/dense", "kernel/dense"):
                v = r.get("contention", {}).get(k)
                if v is not None:
                    vals.append((v, f"{k.split('/')[0]} at {where(r)}"))
        if vals:
            met = sum(1 for v, _ in vals if v <= TARGETS["contention_vs_dense"])
            worst = max(vals)
            out.append({"mode": "both", "target": "contended/quiet of seq2d paths <= 1.5x dense's",
                        "limit": TARGETS["contention_vs_dense"], "met": met, "of": len(vals), "worst": worst[0],
                        "worst_at": worst[1], "ok": met == len(vals)})
    seq = result.get("sequence", {})
    for m, v in seq.get("modes", {}).items():
        if v.get("ratio") is not None:
            out.append({"mode": m, "target": "seq2d RNN <= 1.2x nn.RNN", "limit": TARGETS["rnn"], "met": int(v["ratio"] <= TARGETS["rnn"]),
                        "of": 1, "worst": v["ratio"], "worst_at": "sequence", "ok": v["ratio"] <= TARGETS["rnn"]})
    return out


def print_targets(targets: list[dict]) -> None:
    print("\n## targets (printed, not asserted)")
    for t in targets:
        extra = f"; not measured (skipped): {len(t['not_measured'])}" if t.get("not_measured") else ""
        worst = f"worst {t['worst']:.2f} at {t['worst_at']}" if t.get("worst") is not None else "no measurement"
        print(f"  [{'met' if t['ok'] else 'NOT met':>7}] {t['target']} ({t['mode']}): {t['met']}/{t['of']}, {worst}{extra}")


def print_contention(result: dict) -> None:
    print("\n## contention: contended/quiet median per implementation; seq2d paths over dense's (target <= 1.5)")
    print(f"{'thr':>3} {'n':>4} {'d':>5} |" + "".join(f"{k:>10}" for k in ("default", "tiled", "kernel", "dense", "masked"))
          + " |" + "".join(f"{k:>12}" for k in ("def/dense", "tiled/dense", "kern/dense")))
    for r in result["grid"]:
        c = r.get("contention")
        if not c:
            continue
        print(f"{r['threads']:>3} {r['n']:>4} {r['density']:>5g} |"
              + "".join(f"{_r(c.get(k)):>10}" for k in IMPLS) + " |"
              + "".join(f"{_r(c.get(k)):>12}" for k in ("default/dense", "tiled/dense", "kernel/dense")))


# ------------------------------------------------------------------------------ main
def _on_signal(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", help="torch.set_num_threads values (default 1 2)")
    ap.add_argument("--slots", type=int, nargs="+", help="numbers of slots n, N/n each (default 4 16 64 256)")
    ap.add_argument("--densities", type=float, nargs="+", help="block densities d (default 0.1 0.25)")
    ap.add_argument("--N", type=int, help="total features N = n * S (default 4096)")
    ap.add_argument("--batch", type=int, help="batch B (default 256)")
    ap.add_argument("--repeats", type=int, help="timed rounds per case, median reported (default 7)")
    ap.add_argument("--seq-repeats", type=int, help="timed rounds of the sequence and transformer cases (default 25)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1; the first call is the budget check)")
    ap.add_argument("--budget-s", type=float, default=20.0,
                    help="drop an implementation from a setting once a call takes longer (default 20)")
    ap.add_argument("--probe", choices=["auto", "always", "never"], default="auto",
                    help="probe the library paths in a child process first (default auto: when predicted slow)")
    ap.add_argument("--probe-ready-s", type=float, default=None, metavar="S",
                    help="how long a probe child may take to import and build before it is ignored (default: "
                         "30 s + 3x the build time; a loaded machine may need more)")
    ap.add_argument("--contend", nargs="?", const="on", default="off", choices=["off", "on", "both"],
                    help="a competing busy process during the timing ('--contend' = on); 'both': quiet and "
                         "contended halves in every round, ratios reported")
    ap.add_argument("--max-others", type=float,
                    help="a round where other processes used more than this share of the CPUs is replaced "
                         "(default 0.1; quick 1, never)")
    ap.add_argument("--max-wait", type=float, help="seconds per case to wait for a quiet machine (default 5; quick 0)")
    ap.add_argument("--max-case-s", type=float, default=30.0,
                    help="stop adding rounds to a case after this many seconds once it has 3 (default 30)")
    ap.add_argument("--activation", choices=["relu", "tanh"], default="relu", help="from_mask activations (default relu)")
    ap.add_argument("--call", choices=["step", "forward"], default="step",
                    help="model.step(state) (default) or model(state, steps=1)")
    ap.add_argument("--compile", nargs="?", const="inductor", default=None, metavar="BACKEND",
                    help="also time the library paths under torch.compile(fullgraph=True, backend=BACKEND) "
                         "(default inductor; aot_eager: no code generation), with the first call's cost cold and warm")
    ap.add_argument("--no-compile-warm", dest="compile_warm", action="store_false",
                    help="with --compile: leave out the warm first call (a child process reading the cache)")
    ap.add_argument("--sections", nargs="+", choices=["grid", "sequence", "transformer"],
                    default=["grid", "sequence", "transformer"], help="what to run (default all)")
    ap.add_argument("--seed", type=int, default=0, help="seed of masks, models and operands (default 0)")
    ap.add_argument("--quick", action="store_true",
                    help="CI smoke mode: N=256, batch 8, slots 4 16, 1 repeat, 1 thread, small RNN/layer, no waiting")
    ap.add_argument("--json", help="output file (default benchmarks/results/model_step-cpu-<date>.json)")
    ap.add_argument("--probe-spec", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.probe_spec:  # child of run_probe
        probe(json.loads(args.probe_spec))
        return 0
    base = QUICK if args.quick else FULL
    for k in ("N", "batch", "slots", "densities", "threads", "repeats", "seq_repeats", "max_wait", "max_others"):
        if getattr(args, k) is None:
            setattr(args, k, base[k])
    for n in args.slots:
        if args.N % n or min(64, args.N // n) not in seq2d.sparse.TILE_SIZES:
            ap.error(f"--slots {n}: N={args.N} must split into n slots of size S with min(64, S) in "
                     f"{seq2d.sparse.TILE_SIZES}")
    modes = {"off": ["quiet"], "on": ["contended"], "both": ["quiet", "contended"]}[args.contend]
    if args.compile and len(args.threads) != 1:
        ap.error(f"--compile times one thread count (inductor fixes it when it generates code); got --threads "
                 f"{' '.join(map(str, args.threads))}: give one value")

    env = environment(args)
    path = Path(args.json) if args.json else (
        Path(tempfile.gettempdir()) / f"model_step-quick-{os.getpid()}.json" if args.quick
        else Path(f"benchmarks/results/model_step-cpu-{env['date'][:10]}.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {k: getattr(args, k) for k in ("N", "batch", "slots", "densities", "threads", "repeats", "seq_repeats",
                                           "warmup", "budget_s", "probe", "contend", "max_others", "max_wait",
                                           "max_case_s", "activation", "call", "sections", "seed", "quick",
                                           "compile", "compile_warm")}
    config["sequence"] = SEQ["quick" if args.quick else "full"]
    config["transformer"] = TRF["quick" if args.quick else "full"]
    result = {"environment": env, "config": config, "modes": modes, "grid": [], "autograd_nodes": []}
    print(f"# model_step benchmark, {env['date']}: torch {env['torch']}, {env['cpu']} ({env['cpu_count']} CPUs), "
          f"threads {args.threads}, median of {args.repeats} after {args.warmup} warm-up, seed {args.seed}, "
          f"contention {args.contend}; {env['uptime_start']}")

    contender = Contender() if args.contend != "off" else None
    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, _on_signal)
        except (ValueError, OSError):  # not the main thread
            pass
    t_start = time.perf_counter()
    threads_before = torch.get_num_threads()
    cache_env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    args.compile_cache = tempfile.mkdtemp(prefix="model_step-inductor-") if args.compile else None
    try:
        if args.compile and "grid" in args.sections:
            torch.set_num_threads(args.threads[0])
            result["compile"] = {"backend": args.compile, "process_warmup_s": compile_warmup(
                args.compile, tempfile.mkdtemp(prefix="warmup-", dir=args.compile_cache))}
        if contender:
            contender.start()
            contender.set(False)
        meter = Meter(contender)
        if "grid" in args.sections:
            grid_section(args, meter, contender, modes, result, path)
            if len(modes) == 2:
                print_contention(result)
        key = "quick" if args.quick else "full"
        if "sequence" in args.sections:
            pair_section("sequence mode: seq2d.from_torch(nn.RNN) vs nn.RNN", "sequence", _sequence_impls,
                         SEQ[key], args, meter, contender, modes, result, path)
        if "transformer" in args.sections:
            pair_section("transformer layer (context): seq2d.from_torch(nn.TransformerEncoderLayer) vs torch",
                         "transformer", _transformer_impls, TRF[key], args, meter, contender, modes, result, path)
    finally:
        if contender:
            contender.stop()
        for sig, h in old.items():
            signal.signal(sig, h)
        torch.set_num_threads(threads_before)
        if args.compile_cache:
            shutil.rmtree(args.compile_cache, ignore_errors=True)
            if cache_env is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_env
    result["targets"] = evaluate_targets(result, modes)
    print_targets(result["targets"])
    env["loadavg_end"] = loadavg()
    env["uptime_end"] = _uptime()
    env["wall_s"] = time.perf_counter() - t_start
    path.write_text(json.dumps(result, indent=1))
    print(f"\nwall {env['wall_s']:.0f} s; wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
