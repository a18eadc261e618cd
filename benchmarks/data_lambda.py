"""What ``seq2d.stability.data_lambda`` and ``seq2d stability`` cost on toy RNNs, before and after
the closed-form path (issue 31: 19.5 s and 17.7 s reported).

    python benchmarks/data_lambda.py [--repeats 5] [--threads N] [--cases dl,lines,process] [--json PATH] [--quick]

Two variants of the same computation, interleaved round-robin (every round runs each case of each
variant once, the order rotating from round to round), median over ``--repeats`` rounds:

- ``autograd``: ``data_lambda(..., method="autograd")``, the computation before issue 31 (the
  state Jacobian applied through ``torch.func.jvp``/``vjp`` of the model's step, step by step);
- ``closed``: the default ``method="auto"``, which takes the closed form ``diag(act'(a)) W_rec``
  with every step's power iteration in one batch (one thread for products this small).

Cases: ``data_lambda`` of ``seq2d.rnn(8, 32)`` on 50 steps x 4 sequences (in this process; the
first call of each variant is reported apart, as it pays one-time imports); ``stability_lines``
of ``rnn:8,16`` with the CLI's defaults (100 steps x 8 sequences) in this process; and the whole
command ``seq2d stability rnn:8,16`` as a fresh process (Python and torch start-up included; the
``autograd`` variant runs the same command with ``data_lambda`` forced to that method), timed in
wall and in CPU seconds (user + system of the child: less sensitive to other processes' load),
next to a process that only imports torch (the floor of any ``seq2d`` command). The variants'
largest difference in ``per_step`` is printed as a check. ``--threads``: torch's thread count in
this process and the subprocesses (default: torch's own, as a user gets it).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import seq2d
import seq2d.stability as stability
from seq2d.cli_text import stability_lines
from seq2d.envinfo import cpu_name

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("autograd", "closed")
_CLI = ("import functools, sys, torch; import seq2d.stability as S\n"
        "if sys.argv[1] == 'autograd': S.data_lambda = functools.partial(S.data_lambda, method='autograd')\n"
        "if sys.argv[2] != 'default': torch.set_num_threads(int(sys.argv[2]))\n"
        "from seq2d.cli import main; sys.exit(main(['stability', 'rnn:8,16']))")


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="rounds (default 5); the median is reported")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--quick", action="store_true", help="CI smoke run: one round, no subprocess")
    ap.add_argument("--cases", default="dl,lines,process", help="which cases (default all: dl,lines,process)")
    ap.add_argument("--json", help="write the result here (default: benchmarks/results/data_lambda-cpu-<date>.json; "
                                   "none with --quick)")
    args = ap.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    repeats = 1 if args.quick else args.repeats
    torch.manual_seed(0)
    rnn = seq2d.rnn(8, 32)
    xs = torch.randn(50, 4, 8)
    small = seq2d.rnn(8, 16)
    method = {"autograd": "autograd", "closed": "auto"}

    def dl(v):
        return stability.data_lambda(rnn, xs, method=method[v])

    def lines(v):
        original = stability.data_lambda
        stability.data_lambda = functools.partial(original, method=method[v])
        try:
            return list(stability_lines(small, "rnn:8,16"))
        finally:
            stability.data_lambda = original

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cpu: dict[str, list[float]] = {v: [] for v in (*VARIANTS, "import torch")}

    def child(v, code, *argv):
        c0 = _children_cpu_s()
        subprocess.run([sys.executable, "-c", code, *argv], check=True, env=env, stdout=subprocess.DEVNULL, cwd=ROOT)
        cpu[v].append(_children_cpu_s() - c0)

    def process(v):
        child(v, _CLI, v, str(args.threads or "default"))

    load_before = os.getloadavg()
    first = {v: _timed(lambda v=v: dl(v)) for v in VARIANTS}  # one-time imports (torch.func loads torch._dynamo)
    check = max(float((a["per_step"] - b["per_step"]).abs().max())
                for a, b in zip(dl("autograd")["cores"], dl("closed")["cores"]))
    chosen = set(args.cases.split(","))
    cases = {name: f for key, name, f in (("dl", "data_lambda rnn(8, 32), 50 x 4", dl),
                                          ("lines", "stability_lines rnn:8,16, 100 x 8", lines),
                                          ("process", "seq2d stability rnn:8,16 (process)", process))
             if key in chosen and not (args.quick and key == "process")}
    floor: list[float] = []
    times = {c: {v: [] for v in VARIANTS} for c in cases}
    order = [(c, v) for c in cases for v in VARIANTS]
    for r in range(repeats):
        k = r % len(order)
        for c, v in order[k:] + order[:k]:
            times[c][v].append(_timed(lambda c=c, v=v: cases[c](v)))
        if "seq2d stability rnn:8,16 (process)" in cases:
            floor.append(_timed(lambda: child("import torch", "import torch")))
    load_after = os.getloadavg()
    med = {c: {v: statistics.median(t) for v, t in tv.items()} for c, tv in times.items()}
    print(f"torch {torch.__version__}, {threads} thread(s), load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; median of {repeats} interleaved rounds, seconds")
    print(f"{'case':38s}{'autograd':>10s}{'closed':>10s}{'speed-up':>10s}")
    print(f"{'data_lambda first call':38s}{first['autograd']:>10.3f}{first['closed']:>10.3f}"
          f"{first['autograd'] / first['closed']:>9.1f}x")
    for c in cases:
        a, b = med[c]["autograd"], med[c]["closed"]
        print(f"{c:38s}{a:>10.3f}{b:>10.3f}{a / b:>9.1f}x")
    if floor:
        a, b = statistics.median(cpu["autograd"]), statistics.median(cpu["closed"])
        print(f"{'  the same, CPU seconds of the process':38s}{a:>10.3f}{b:>10.3f}{a / b:>9.1f}x")
        label = "  python -c 'import torch' (process)"
        print(f"{label:38s}{statistics.median(floor):>10.3f} s wall, "
              f"{statistics.median(cpu['import torch']):.3f} s CPU")
    print(f"largest |autograd - closed| of per_step: {check:.2e}")
    result = {"date": datetime.date.today().isoformat(), "torch": torch.__version__, "threads": threads,
              "cpu": cpu_name(),
              "load_average_before": load_before, "load_average_after": load_after, "repeats": repeats,
              "first_call_s": first, "median_s": med, "times_s": times, "max_abs_diff": check,
              "process_cpu_s": cpu, "import_torch_wall_s": floor,
              "command": "python benchmarks/data_lambda.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    path = args.json or (None if args.quick else
                         ROOT / "benchmarks" / "results" / f"data_lambda-cpu-{result['date']}-t{threads}.json")
    if path:
        Path(path).write_text(json.dumps(result, indent=1))
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
