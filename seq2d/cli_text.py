"""What the ``seq2d`` command line prints about a model: text reports, each a function of the
model or of numbers the library computes (the parser is in :mod:`seq2d.cli`).

- :func:`show_text`: what ``seq2d show`` prints: the block grid and slot table
  (``Sequential2D.summary``), one line per block, the trainable parameters by owner
  (:func:`param_breakdown`) and what the block graph says (acyclic, depth, recurrent cores,
  memory, distances from the inputs).
- :func:`stability_lines`: what ``seq2d stability`` prints: the certified and data-dependent
  contraction constants of every recurrent core and the truncation length ``k``.
- :func:`equivalence_table`: what ``seq2d equivalence`` prints: the max errors of every
  constructor against torch.nn.
- :func:`threads_line`, :func:`train_result_line`, :func:`interrupted_hint`: the one-line reports
  of ``seq2d mnist`` / ``seq2d train`` (the last: how to continue after Ctrl-C).

The reports only format numbers that the library computes; the parameter counts come from
the model's own ``num_parameters()`` / ``num_trainable()``. The results pages that experiments
write are :mod:`seq2d.results_page`'s.
"""

from __future__ import annotations

from typing import Iterator

from .core import core_of

__all__ = ["equivalence_table", "interrupted_hint", "param_breakdown", "show_text", "stability_lines", "threads_line",
           "train_result_line"]


def _yes(b: bool) -> str:
    return "yes" if b else "no"


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.6g}"


# ---------------------------------------------------------------------------- seq2d show
def _own_count(m) -> int:
    """Trainable parameters of module ``m``: its own count when it keeps one
    (``num_parameters()`` of a Sequential2D or a wrapper, ``num_trainable()`` of a block:
    masked and frozen entries excluded), else its parameters that require grad."""
    for name in ("num_parameters", "num_trainable"):
        fn = getattr(m, name, None)
        if callable(fn):
            return int(fn())
    return sum(p.numel() for p in m.parameters() if p.requires_grad)


def param_breakdown(core) -> list[tuple[str, int]]:
    """``[(owner, count)]``: trainable parameters by owner, each owner counted by its own
    ``num_parameters()`` / ``num_trainable()`` (tied blocks once), ending with the total
    ``core.num_parameters()``; an ``other`` row holds what the owners do not cover."""
    linear = core.store.num_trainable() if core.store is not None else 0
    modules = {id(blk): blk for _, _, kind, blk in core.positions() if kind == "module"}
    module = sum(_own_count(blk) for blk in modules.values())
    bias = core.slot_bias.num_trainable()
    acts = {id(a): a for a in core.acts}
    act = sum(_own_count(a) for a in acts.values())
    total = core.num_parameters()
    rows = [("linear blocks (masked/frozen entries excluded)", linear), ("module blocks", module),
            ("slot biases", bias), ("slot activations (LayerNorm)", act)]
    other = total - sum(n for _, n in rows)
    if other:
        rows.append(("other", other))
    rows.append(("total trainable (tied weights once)", total))
    return rows


def show_text(model) -> str:
    """What ``seq2d show`` prints for ``model`` (a Sequential2D or a wrapper with ``.core``)."""
    from . import graph as G

    core = core_of(model)
    g = G.to_networkx(core)
    lines = [type(model).__name__ + (f" (core: {type(core).__name__})" if core is not model else ""), core.summary(), ""]
    lines.append("blocks (F[i][j] maps slot j to slot i; shape = out x in):")
    head = f"  {'block':<10}{'kind':<14}{'shape':>13}{'stored':>12}{'density':>9}{'params':>12}  tie"
    lines.append(head)
    for i, j, kind, blk in core.positions():
        d = g.edges[j, i]
        shape = f"{d['shape'][0]} x {d['shape'][1]}"
        stored = "-" if d["stored"] is None else f"{d['stored']:,}"
        dens = "-" if d["density"] is None else f"{100 * d['density']:.3g}%"
        name = kind if kind != "module" else type(blk).__name__
        tie = "-" if d["tie"] is None else str(d["tie"])
        lines.append(f"  {f'F[{i}][{j}]':<10}{name:<14}{shape:>13}{stored:>12}{dens:>9}{d['params']:>12,}  {tie}")
    lines += ["", "trainable parameters:"]
    lines += [f"  {k:<44}{n:>12,}" for k, n in param_breakdown(core)]
    cores = G.recurrent_cores(g)
    mem = G.memory(core)
    dist = G.distances(core)
    lines += ["", "graph:"]
    lines.append(f"  acyclic: {_yes(G.is_acyclic(g))}; depth = {core.depth if core.depth is not None else 'none (cyclic)'}; "
                 f"steps = {core.steps}")
    lines.append("  recurrent cores: " + (", ".join("{" + ", ".join(map(str, sorted(c))) + "}" for c in
                                                    sorted(cores, key=min)) if cores else "none"))
    lines.append("  memory: " + (f"{mem} steps (after {mem} steps the outputs no longer depend on the initial "
                                 "state of any non-input slot)" if mem is not None else
                                 "none (the outputs depend on the initial state at every step)"))
    lines.append("  distance from the inputs: " + ", ".join(f"{v}:{'-' if d is None else d}" for v, d in sorted(dist.items())))
    return "\n".join(lines)


# ---------------------------------------------------------------------------- seq2d stability
def stability_lines(model, what: str, *, eps: float = 1e-3, input_bound: float = 1.0, data_steps: int = 100,
                    batch: int = 8, iters: int = 20, seed: int = 0) -> Iterator[str]:
    """The lines of ``seq2d stability`` for ``model`` (described as ``what``), one at a time as
    each number is computed: the certified lambda of every recurrent core
    (:func:`seq2d.stability.certified_lambda`), the data lambda on ``batch`` random input
    sequences of ``data_steps`` steps with ``||x_t|| <= input_bound``
    (:func:`seq2d.stability.data_lambda`, ``iters`` power-iteration rounds, generator seeded
    with ``seed``), and for an RNN the truncation length ``k`` for ``eps`` (Lemma 1)."""
    import torch

    from . import graph as G
    from .models.recurrent import RNN
    from .stability import certified_lambda, data_lambda, rnn_constants, stacked_truncation_length

    core = core_of(model)
    yield f"model: {what} ({type(model).__name__})"
    cores = G.recurrent_cores(core)
    if not cores:
        mem = G.memory(core)
        yield "recurrent cores: none (the block graph is acyclic)"
        yield "certified lambda: n/a (no recurrence)"
        yield "data lambda: n/a (no recurrence)"
        yield "truncation: n/a; memory is finite: " + (f"the outputs forget the initial state after {mem} step(s) (seq2d.graph.memory)"
                                                      if mem is not None else "none (a held non-input slot reaches an output)")
        return
    try:
        cert = certified_lambda(core)
    except ValueError as e:
        cert = None
        yield f"certified lambda: not certifiable ({e})"
    if cert is not None:
        for c in cert["cores"]:
            yield (f"core {{{', '.join(map(str, c['slots']))}}}: L_act = {_fmt(c['lipschitz_act'])}, ||W_rec||_2 = {c['norm']:.6g} "
                   f"({c['norm_method']}), certified lambda <= {_fmt(c['lambda'])}")
        yield (f"certified lambda (max over cores): {_fmt(cert['lambda'])}"
               + ("" if cert["lambda"] is None else ("  (stable)" if cert["stable"] else "  (not certified stable: >= 1)")))
    # random inputs uniform in the ball ||x_t|| <= B (the bound Lemma 1 assumes)
    g = torch.Generator().manual_seed(seed)
    T, Bn, n = data_steps, batch, core.in_features
    xs = torch.randn(T, Bn, n, generator=g, dtype=torch.float64)
    radius = input_bound * torch.rand(T, Bn, 1, generator=g, dtype=torch.float64) ** (1.0 / n)
    xs = xs / xs.norm(dim=-1, keepdim=True).clamp_min(1e-12) * radius
    data = data_lambda(core, xs, iters=iters, generator=g)
    for c in data["cores"]:
        yield (f"core {{{', '.join(map(str, c['slots']))}}}: data lambda max {c['max']:.6g}, mean {c['mean']:.6g} "
               f"(||d state_t / d state_(t-1)||_2 over {c['per_step'].shape[0]} steps x {Bn} random sequences, ||x_t|| <= {input_bound:g})")
    yield f"data lambda (max over cores): {data['max']:.6g}"
    if not isinstance(model, RNN):
        yield "k for eps: n/a (the Lemma 1 bound is implemented for RNN layers; see seq2d.stability.lemma1_bound)"
        return
    layers = [rnn_constants(model, l) for l in range(1, model.num_layers + 1)]
    unstable = [l + 1 for l, c in enumerate(layers) if c["lam"] >= 1]
    if unstable:
        yield f"k for eps={eps:g}: no guarantee: lambda >= 1 (layer(s) {unstable})"
    else:
        k = stacked_truncation_length(layers, eps, input_bound=input_bound)
        yield (f"k for eps={eps:g}: {k} (Lemma 1: ||h_t - h_t^k|| <= eps for every t when ||x_t|| <= {input_bound:g}; "
               f"seq2d.truncated_rnn(model, {k}))")
    data_max = [c["max"] for c in data["cores"]]
    if len(data_max) == len(layers) and all(v < 1 for v in data_max):
        est = [dict(c, lam=v) for c, v in zip(layers, data_max)]
        k = stacked_truncation_length(est, eps, input_bound=input_bound)
        yield f"k with the data lambda in place of the certified one: {k} (an estimate for inputs like these, not a guarantee)"
    else:
        yield "k with the data lambda in place of the certified one: n/a (data lambda >= 1 on these inputs)"


# ---------------------------------------------------------------------------- seq2d equivalence
def equivalence_table(seeds: int = 1) -> Iterator[tuple[str, bool]]:
    """``(line, within)`` pairs of ``seq2d equivalence``: a header saying what is compared and
    the tolerances, then per case of :data:`seq2d.equivalence.CASES` the max abs error against
    torch.nn over ``seeds`` seeds in float32 and float64; ``within`` is False when an error
    exceeds its tolerance."""
    import torch

    from .equivalence import CASES, TOLERANCE, compare  # imported lazily (slow deps)

    yield (f"every seq2d constructor vs its torch.nn reference (same weights, {len(CASES)} cases, "
           f"{seeds} seed{'s' if seeds != 1 else ''} each): max abs error of the outputs, the input gradient "
           "and the parameter gradients"), True
    yield (f"tolerance: float32 {TOLERANCE[torch.float32]:.0e}, float64 {TOLERANCE[torch.float64]:.0e} "
           "(seq2d.equivalence.TOLERANCE); exit status 1 when an error exceeds it"), True
    yield f"{'case':<46}{'float32':>12}{'float64':>12}", True
    for case in CASES:
        errs = []
        within = True
        for dtype in (torch.float32, torch.float64):
            e = max(max(compare(case, dtype, s).values()) for s in range(seeds))
            within &= e <= TOLERANCE[dtype]
            errs.append(e)
        yield f"{case.name:<46}{errs[0]:>12.2e}{errs[1]:>12.2e}", within


# ---------------------------------------------------------------------------- seq2d mnist / train
def threads_line(num_threads) -> str:
    """The torch thread count that the runs of ``seq2d mnist`` will use (``num_threads``: an
    int, or ``"auto"`` or None: chosen from the idle cores). Printed by ``seq2d mnist --quiet``
    only: without ``--quiet`` each run prints the count it chose (the trainer's
    ``torch threads: N (why)`` line), and a second line would only repeat it."""
    import torch

    if num_threads is not None and num_threads != "auto":  # None: "auto" (seq2d.train.loop.choose_threads)
        return f"torch threads: {num_threads}"
    from .threads import auto_threads, available_cores, cpu_limit

    avail = available_cores()
    n = auto_threads(available=avail, limit=torch.get_num_threads())
    return (f"torch threads: auto -> {n} now ({avail:.1f} of {cpu_limit()} cores idle); chosen again at the start of "
            "each run and recorded in its metrics (num_threads)")


def train_result_line(summary: dict) -> str:
    """One line from the summary that :func:`seq2d.train.trainer.run` returns."""
    threads = summary["num_threads"]
    return (f"final test accuracy {100 * summary['final_test_acc']:.2f}% (best {100 * summary['best_test_acc']:.2f}% "
            f"at epoch {summary['best_epoch']}), {summary['params']:,} trainable parameters, "
            f"{summary['time_per_epoch_s']:.2f} s/epoch on {summary['device']} ({threads} thread{'s' if threads != 1 else ''}); "
            f"outputs in {summary['out_dir']}")


def interrupted_hint(run_dir, command=None) -> str:
    """What ``seq2d train`` adds to ``seq2d: interrupted`` after Ctrl-C: the exact command that
    continues the run. ``command``: the interrupted command line as words (``["seq2d", "train",
    ...]``; None when unknown). With a checkpoint in ``run_dir`` that is the same command with
    ``--resume`` (``--overwrite`` dropped: it would delete the checkpoint); without one (stopped
    before the first checkpoint) the same command without ``--resume`` starts the run again."""
    import shlex
    from pathlib import Path

    run_dir = Path(run_dir)
    words = [w for w in (command or []) if w not in ("--resume", "--overwrite")]
    if (run_dir / "checkpoint.pt").is_file():
        how = shlex.join(words + ["--resume"]) if words else "the same command plus --resume"
        return f"its last checkpoint is in {run_dir}; continue with: {how}"
    how = shlex.join([w for w in (command or []) if w != "--resume"]) if command else "the same command"
    return f"no checkpoint was written yet in {run_dir}; start again with: {how}"
