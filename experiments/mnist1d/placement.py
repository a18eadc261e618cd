"""Placement and iterations where structure matters: MNIST-1D (issue 33, items 2 and 4).

The questions (the summary of Hershey et al., seeds/003_5467b9de8681185d.txt, Open Questions 1
and 2): how does the placement of trainable parameters affect training on another data set and
task, and how does the number of iterations relate to training performance? On MNIST-1D a
logistic regression reaches about 32% and an MLP about 66% (experiments/mnist1d/results/
baselines.md) while recurrent and convolutional models reach about 91-94% (the mnist1d README):
structure matters. At the MLP's trainable-parameter count, does random placement behave like
the MLP, like the recurrent model, or like neither?

Every cell has the trainable-parameter count of the baseline MLP [40, 100, 100, 10] (15,210):

``mlp``                            the MLP [40, 100, 100, 10] itself (3 iterations = its depth)
``{p}-h{h}-{region}-i{t}``         ``seq2d.randomize`` of the MLP's count, placement p (element,
                                   tile, block) over the block matrix [40, h, h, 10]: h = 100 (the
                                   MLP's own, density 0.286 over the default region) or h = 176
                                   (a larger one, density 0.101), region ``default`` (every
                                   non-input row) or ``no-shortcut`` (without the input -> output
                                   block), t iterations (item 2: t = 3, the MLP's depth)
``rnn``                            ``seq2d.rnn(1, 117)`` over the 40 samples as 40 time steps
                                   (weight-tied, tanh), a linear readout of the last hidden state
                                   (15,103 parameters: 0.70% under the MLP's count)
``rnn-lr0.001``                    the same at learning rate 1e-3: at the protocol's 1e-2 the
                                   tanh RNN stayed at chance (seed 0: 9.5% test accuracy after
                                   26 epochs) while 1e-3 learned (38.3% after 20 epochs); both
                                   are kept, the protocol's and one that trains
``trnn-k{k}``                      ``seq2d.truncated_rnn`` of such an RNN: the same tied weights
                                   and readout, seeing only the last k samples (its core runs
                                   k iterations); the same count as ``rnn``
``gru``                            ``torch.nn.GRU(1, 68)`` + a linear readout of the last hidden
                                   state (15,174 parameters: 0.24% under), the reference

Tiles: the kernels take tiles of 16, 32, 64 or 128 (``seq2d.sparse.TILE_SIZES``): 8, the
divisor of the 40-sample input, is not among them. Tile placement uses 16 x 16 tiles. On the
h = 176 matrix they divide both hidden slots (176 = 11 x 16); on the MLP's own matrix (h = 100)
they do not (100 = 6 x 16 + 4). The 40-sample input slot (2 x 16 + 8) and the 10-class output
slot are partial tiles on both: ``randomize`` draws tiles among every tile of the region
(partial ones included) and counts a partial tile's real entries only.

Item 4 (iterations): the default-region random cells at t = 1..8 iterations and the RNN form
at k = 1..8 (the truncated RNN whose core runs k iterations); the t = 3 and k = 2, 4, 8 cells
are shared with item 2. ``trnn-k{k}-lr0.001`` (k = 1..8): the same windows at learning rate
1e-3, added after the grid ran (:data:`ADDED_TRNN`).

Protocol (the baselines', the paper's): Adam, lr 1e-2, batch 100, ``--epochs`` (chosen by the
pilot, ``--pilot``: see :data:`PILOT_RULE`), the final model's test accuracy; every run's
learning curve kept (metrics.jsonl). The Sequential2D cells read the flat layout (N, 40), the
recurrent cells the sequence layout (N, 40, 1) of the same set.

    nice -n 10 python experiments/mnist1d/placement.py --jobs 1 --out runs/mnist1d             # the grid
    nice -n 10 python experiments/mnist1d/placement.py --pilot --out runs/mnist1d_pilot          # the pilot
    python experiments/mnist1d/placement.py --collect runs/mnist1d                             # small files -> results/placement
    python experiments/mnist1d/placement.py --quick --out /tmp/m1d_placement_quick              # CI: seconds

Item 5 (the iteration map as a dynamical system): every run ends by writing ``dynamics.json``,
the trained model's iteration map on a fixed batch of test inputs (:func:`iteration_dynamics`:
seq2d.dynamics' DMD and Jacobian spectral radius, the change per step, the accuracy by step
count; a few seconds), so the page can set the spectral radius beside the iteration curves.

A run folder ``OUT/<cell>/seed<k>/`` holds the Trainer's files (resumed from its checkpoint when
interrupted) and ``row.json`` when finished (then skipped). The checkpoint is kept (at most about
2 MB a run): a later call with a larger ``--epochs`` extends the finished runs instead of
retraining them (:func:`finished`). ``--collect`` never copies checkpoints.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "placement"))
from run import mlp_count, structure  # noqa: E402  (the MNIST placement study's helpers)
import grid  # noqa: E402  (cell selection, connectivity, launch and collect, shared with experiments/placement/study.py)

sys.path.insert(0, str(HERE))
from baselines import plateau_epoch  # noqa: E402  (the baselines' plateau rule: the first epoch within 1 point of the last)

from seq2d.lab.launch import add_launcher_args, jobs_arg, launcher_from_args  # noqa: E402

FEATURES, CLASSES = 40, 10
MLP_SIZES = [FEATURES, 100, 100, CLASSES]  # the baseline MLP (experiments/mnist1d/baselines.py)
PARAMS = mlp_count(MLP_SIZES)  # 15,210: every cell's trainable-parameter count
WIDTHS = (100, 176)  # hidden width h of the block matrix [40, h, h, 10]: the MLP's own, and a larger one (density 0.1)
PLACEMENTS = ("element", "tile", "block")
REGIONS = ("default", "no-shortcut")
TILE = 16
ITERATIONS = 3  # item 2: the MLP's depth
SWEEP = tuple(range(1, 9))  # item 4: iterations 1..8
TRUNCATIONS = (2, 4, 8, 16)  # item 2: the truncated RNN's window k
ADDED_TRNN = ("added 2026-11-30, after reading: every trnn-k cell of the grid (learning rate 1e-2) and rnn stayed "
              "at chance, so item 4's RNN-form curve measures nothing at the grid's rate; the window sweep once more "
              "at rnn-lr0.001's rate 1e-3, beside the grid's cells, not replacing them")
COUNT_TOLERANCE = 0.01  # the recurrent cells' count is within 1% of PARAMS (the hidden size closest to it)
PROTOCOL = {"optimizer": "adam", "lr": 1e-2, "batch_size": 100, "weight_decay": 0.0}
PILOT_RESULT = HERE / "results" / "pilot" / "pilot.json"  # the committed pilot (--pilot, then --collect)
EPOCHS = json.loads(PILOT_RESULT.read_text())["grid_epochs"]  # the grid's epochs by PILOT_RULE (300)
PILOT_EPOCHS = 300
PILOT_CELLS = ("mlp", "element-h176-default-i3", "rnn-lr0.001")
PILOT_SEEDS = (0, 1, 2)
PILOT_RULE = ("the grid's epochs E = the largest plateau epoch among the pilot cells, plus 20%, rounded up to a "
              "multiple of 10, at most the pilot's length; a cell's plateau epoch is the first epoch from which its "
              "seed-mean test accuracy stays within 1 point of its value at the pilot's last epoch. Amended after "
              "the RNN at lr 1e-2 stayed at chance for its first 26 epochs (where the rule finds a plateau in noise): "
              "a cell whose seed-mean never exceeds 20% does not learn and sets no epoch count; the pilot's RNN is "
              "the one at lr 1e-3")
LEARNS = 20.0  # percent: a seed-mean test accuracy never above this is "not learning" (chance is 10%)
RESULTS = HERE / "results" / "placement"
KEEP = ("row.json", "metrics.jsonl", "test_predictions.npz", "dynamics.json")  # what --collect copies (never checkpoints)
DYN_BATCH = 64  # item 5: the trained model's iteration map on the first 64 test inputs (fixed, no sampling): the DMD
# fits 15 increment pairs x 64 = 960 columns to at most 362 updated units; the exact Jacobians' eigenvalues cost
# most (about 0.1 s a sample at 362 units)
DYN_HORIZON = 16  # steps recorded for every Sequential2D run: twice the sweep's longest (8)
DYN_TOP = 8  # the largest DMD eigenvalue magnitudes kept


# ---------------------------------------------------------------------- the recurrent cells
def rnn_count(h: int) -> int:
    """seq2d.rnn(1, h) (W_ih, W_hh, one bias) + a linear readout h -> 10."""
    return h + h * h + h + h * CLASSES + CLASSES


def gru_count(h: int) -> int:
    """torch.nn.GRU(1, h) (three gates, two biases each) + a linear readout h -> 10."""
    return 3 * (h + h * h + 2 * h) + h * CLASSES + CLASSES


def closest_hidden(count, target: int = PARAMS) -> int:
    """The hidden size whose ``count(h)`` is closest to ``target``."""
    return min(range(1, 1000), key=lambda h: abs(count(h) - target))


RNN_H = closest_hidden(rnn_count)  # 117
GRU_H = closest_hidden(gru_count)  # 68


class Readout(nn.Module):
    """A recurrent body's last hidden state through a linear readout: ``(B, 40, 1) -> (B, 10)``.

    ``kind``: ``"rnn"`` (a seq2d.RNN over every step), ``"gru"`` (torch.nn.GRU), ``"truncated"``
    (a seq2d.TruncatedRNN: only its last window, ``core(x[:, -k:])``, i.e. the RNN run from a
    zero state over the last k samples)."""

    def __init__(self, body: nn.Module, kind: str, hidden: int, classes: int = CLASSES) -> None:
        super().__init__()
        self.body, self.kind = body, kind
        self.readout = nn.Linear(hidden, classes)

    def forward(self, x):  # x: (B, T, 1), batch first
        if self.kind == "truncated":
            k = self.body.k
            h = self.body.core(x[:, -k:, :].reshape(x.shape[0], -1))  # (B, H) after k iterations
        else:
            _, h_n = self.body(x)  # (layers, B, H)
            h = h_n[-1]
        return self.readout(h)


# ---------------------------------------------------------------------- the grid
def random_cell(placement: str, h: int, region: str, iterations: int) -> dict:
    return {"cell": f"{placement}-h{h}-{region}-i{iterations}", "family": "random", "placement": placement,
            "sizes": [FEATURES, h, h, CLASSES], "region": region, "iterations": iterations}


def cells(sweep=SWEEP, truncations=TRUNCATIONS) -> list[dict]:
    """Every cell of the grid: item 2's, then item 4's (iterations other than 3, windows
    other than item 2's); in each, the cheap ones first."""
    out = [{"cell": "mlp", "family": "mlp", "placement": "mlp", "sizes": list(MLP_SIZES), "iterations": ITERATIONS}]
    for h in WIDTHS:
        for p in PLACEMENTS:
            for region in REGIONS:
                out.append(random_cell(p, h, region, ITERATIONS))
    out.append({"cell": "gru", "family": "gru", "placement": "gru", "hidden": GRU_H})
    out.append({"cell": "rnn", "family": "rnn", "placement": "rnn", "hidden": RNN_H, "iterations": FEATURES})
    out.append({"cell": "rnn-lr0.001", "family": "rnn", "placement": "rnn", "hidden": RNN_H, "iterations": FEATURES,
                "lr": 1e-3})
    ks = list(truncations) + [k for k in sweep if k not in truncations]
    for k in ks:
        out.append({"cell": f"trnn-k{k}", "family": "trnn", "placement": "trnn", "hidden": RNN_H, "iterations": k})
    for t in sweep:
        if t != ITERATIONS:
            for h in WIDTHS:
                for p in PLACEMENTS:
                    out.append(random_cell(p, h, "default", t))
    for k in sweep:  # ADDED_TRNN: appended after the grid's own cells, so they run last
        out.append({"cell": f"trnn-k{k}-lr0.001", "family": "trnn", "placement": "trnn", "hidden": RNN_H,
                    "iterations": k, "lr": 1e-3, "added": ADDED_TRNN})
    return out


def build(cell: dict, seed: int) -> nn.Module:
    """The model of one run (its structure and initial values fixed by ``seed``)."""
    from seq2d import mlp, randomize, rnn, truncated_rnn

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        f = cell["family"]
        if f == "mlp":
            return mlp(cell["sizes"])
        if f == "random":
            return randomize(mlp(cell["sizes"]), cell["placement"], region=cell["region"], seed=seed, tile=TILE,
                             steps=cell["iterations"], params=PARAMS)
        if f == "gru":
            return Readout(nn.GRU(1, cell["hidden"], batch_first=True), "gru", cell["hidden"])
        body = rnn(1, cell["hidden"], batch_first=True)
        if f == "trnn":
            return Readout(truncated_rnn(body, cell["iterations"]), "truncated", cell["hidden"])
        return Readout(body, "rnn", cell["hidden"])


def num_parameters(model: nn.Module) -> int:
    """Trainable parameters, tied weights once (a Sequential2D's own count: masked entries excluded)."""
    own = getattr(model, "num_parameters", None)
    if callable(own):
        return own()
    if isinstance(model, Readout):
        return num_parameters(model.body) + num_parameters(model.readout)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def expected_count(cell: dict) -> int:
    """The cell's exact trainable-parameter count: PARAMS for the Sequential2D cells; for the
    truncated RNN the RNN's, except at k = 1, whose core has no W_hh (nothing precedes h_1)."""
    f, h = cell["family"], cell.get("hidden")
    if f == "gru":
        return gru_count(h)
    if f in ("rnn", "trnn"):
        return rnn_count(h) - (h * h if f == "trnn" and cell["iterations"] == 1 else 0)
    return PARAMS


def sequence_cell(cell: dict) -> bool:
    return cell["family"] in ("rnn", "trnn", "gru")


_DATA: dict = {}


def data_for(cell: dict, source: str) -> dict:
    """MNIST-1D in the layout the cell reads (``source`` "synthetic": a tiny stand-in, for tests)."""
    layout = "sequence" if sequence_cell(cell) else "flat"
    key = (source, layout)
    if key not in _DATA:
        if source == "synthetic":
            from seq2d.train import synthetic_data

            d = synthetic_data(FEATURES, CLASSES, n_train=200, n_test=100)
            if layout == "sequence":
                d = {**d, "train": (d["train"][0].unsqueeze(-1), d["train"][1]),
                     "test": (d["test"][0].unsqueeze(-1), d["test"][1])}
        else:
            from seq2d.data.mnist1d import get_mnist1d

            d = get_mnist1d(layout=layout, device="cpu")
        _DATA[key] = d
    return _DATA[key]


def config_for(cell: dict, seed: int, folder: Path, protocol: dict):
    """The TrainConfig of one run (the model is built by :func:`build`; the config records it)."""
    from seq2d.train import TrainConfig

    proto = {**protocol, **({"lr": cell["lr"]} if "lr" in cell else {})}  # a cell's own learning rate
    source = proto.pop("source", "mnist1d")
    f = cell["family"]
    return TrainConfig(model={"trnn": "truncated_rnn", "random": "random_model"}.get(f, f),
                       sizes=list(cell["sizes"]) if "sizes" in cell else [1, cell["hidden"], CLASSES],
                       activation="tanh" if f in ("rnn", "trnn") else "relu",
                       granularity=cell["placement"] if f == "random" else "element", tile=TILE,
                       region=cell.get("region", "default"), steps=cell.get("iterations"),
                       data="synthetic" if source == "synthetic" else "mnist1d", seed=seed, out_dir=str(folder),
                       name=f"{cell['cell']}-s{seed}", num_threads=1, quiet=True,
                       # a random draw whose output cannot see its input within its steps (no walk, or a walk
                       # longer than the steps) is part of its cell: trained (to a constant), counted, not refused
                       allow_constant_output=f == "random", **proto)


# ---------------------------------------------------------------------- item 5: the trained iteration map
def _radius(r) -> dict:
    """Per-sample spectral radii ``(B,)`` as their mean, median and max."""
    r = r.cpu()
    return {"mean": float(r.mean()), "median": float(r.median()), "max": float(r.max())}


def _recurrent_core(model: nn.Module):
    """The one-step RNN map (slots: the input sample, held; the hidden state) with ``model``'s
    weights: the RNN's own core, or for the truncated RNN an RNN built from its tied blocks
    (None for k = 1: no W_hh, nothing recurs)."""
    from seq2d import rnn

    body = model.body
    if model.kind == "rnn":
        return body.core
    c, k = body.core, body.k
    if k == 1:
        return None
    out = rnn(1, body.hidden_size, batch_first=True)
    wih, whh = out.layer_blocks(1)
    with torch.no_grad():
        wih.weight.copy_(c.block(k, 0).weight)  # h_1 <- x_1
        whh.weight.copy_(c.block(k + 1, k).weight)  # h_2 <- h_1
        out.core.bias(1).copy_(c.bias(k))
    return out.core


def iteration_dynamics(model: nn.Module, cell: dict, data: dict) -> dict:
    """Item 5 on one trained run: its iteration map on the first :data:`DYN_BATCH` test inputs
    (deterministic: a fixed batch, exact Jacobians, no sampling).

    Sequential2D cells (the MLP, the random placements): ``seq2d.dynamics.iteration_spectrum``
    over :data:`DYN_HORIZON` steps (the DMD of the updated slots' increments: its top-
    :data:`DYN_TOP` eigenvalue magnitudes, spectral radius and reconstruction error; the
    Jacobian's spectral radius at the last state; the change per step), the Jacobian's radius
    also at the state after the run's own iteration count (the state it reads its output from),
    and the test accuracy of the trained model read out after 1 .. DYN_HORIZON steps (a
    still-absent output slot reads as zeros, i.e. class 0). The DMD is fitted over the horizon
    only: at a trained count of 3 a batch gives 2 increment pairs per sample, fewer columns than
    the 210-362 updated units when the batch is small, and an exactly fitted DMD of that says
    nothing (it gave the MLP, whose map is nilpotent, a radius of 1.02 on a 100-sample batch).
    The recurrent cells: the spectral radius of the hidden-to-hidden Jacobian at the last
    transition the model makes (sample 40 after 39, or after the window's k - 1 from a zero
    state for ``trnn-k``); no DMD: the RNN is
    driven by a new sample each step, which one linear operator of the hidden state does not
    describe. The GRU: nothing (not a Sequential2D)."""
    from seq2d.core import core_of
    from seq2d.dynamics import iteration_spectrum, jacobian_spectral_radius, record_states

    x_all, y_all = data["test"]
    x = x_all[:DYN_BATCH]
    f = cell["family"]
    out = {"cell": cell["cell"], "family": f, "batch": int(x.shape[0]), "horizon": DYN_HORIZON}
    model.eval()
    if f in ("mlp", "random"):
        core = core_of(model)
        t = cell["iterations"]
        sp = iteration_spectrum(core, x, DYN_HORIZON)
        mags = sorted((float(v) for v in sp.dmd.eigenvalues.abs().cpu()), reverse=True)
        out.update({"iterations": t, "dmd_steps": DYN_HORIZON, "dmd_rank": sp.dmd.rank,
                    "dmd_spectral_radius": sp.dmd.spectral_radius, "dmd_abs_eigenvalues_top": mags[:DYN_TOP],
                    "dmd_reconstruction_error": sp.dmd.reconstruction_error, "dmd_residual": sp.dmd.residual,
                    "jacobian_radius_at_horizon": _radius(sp.jacobian_radius),
                    "jacobian_radius_at_iterations": _radius(jacobian_spectral_radius(core, sp.states[t])),
                    "change": [float(c) for c in sp.change.cpu()]})
        states = record_states(core, x_all, DYN_HORIZON)  # (H + 1, N_test, N)
        o = core.outputs[0]
        logits = states[1:, :, core.offsets[o]:core.offsets[o] + core.sizes[o]]
        out["test_acc_by_steps"] = [float((lg.argmax(-1) == y_all).float().mean()) for lg in logits]
    elif f in ("rnn", "trnn"):
        rc = _recurrent_core(model)
        out["iterations"] = cell["iterations"]
        if rc is None:
            out["recurrent_jacobian_radius"] = None
        else:
            seq = x[:, -cell["iterations"]:, :] if f == "trnn" else x  # what the model reads
            with torch.no_grad():
                hs = model.body(seq)[0] if f == "rnn" else _RNNView(rc)(seq)  # (B, T, H): h_1 .. h_T
            out["recurrent_jacobian_radius"] = _radius(jacobian_spectral_radius(rc, [seq[:, -1, :], hs[:, -2, :]]))
    return out


class _RNNView(nn.Module):
    """The hidden states ``h_1 .. h_T`` of the one-step map ``core`` run from a zero state."""

    def __init__(self, core) -> None:
        super().__init__()
        self.core = core

    def forward(self, seq):
        h, hs = None, []
        for t in range(seq.shape[1]):
            h = self.core([seq[:, t, :], h], steps=1)[1]
            hs.append(h)
        return torch.stack(hs, dim=1)


def write_dynamics(folder: Path, model: nn.Module, cell: dict, data: dict, epochs: int) -> None:
    from seq2d.fileio import atomic_write

    d = {**iteration_dynamics(model, cell, data), "epochs": epochs}
    atomic_write(folder / "dynamics.json", json.dumps(d, indent=1))


def run_one(cell: dict, seed: int, out: str, protocol: dict) -> dict:
    """Train one run to the end (resuming its checkpoint) or read its finished row.json."""
    from seq2d.fileio import atomic_write
    from seq2d.train import Trainer
    from seq2d.train.errors import DivergenceError

    folder = Path(out) / cell["cell"] / f"seed{seed}"
    done = folder / "row.json"
    source = protocol.get("source", "mnist1d")
    row = json.loads(done.read_text()) if done.is_file() else None
    if row is not None and trained_enough(folder, row, protocol["epochs"]):
        if dynamics_missing(folder, row):  # a run finished before item 5: its model from the checkpoint
            write_dynamics(folder, trained_model(cell, seed, folder, row), cell, data_for(cell, source), row["epochs"])
        return row
    model = build(cell, seed)
    params = num_parameters(model)
    if params != expected_count(cell):
        raise RuntimeError(f"{cell['cell']} seed {seed}: {params} parameters, expected {expected_count(cell)}")
    st = structure(model, cell) if cell["family"] in ("mlp", "random") else {"output_fixed": False}
    trainer = Trainer(config_for(cell, seed, folder, protocol), model, data_for(cell, source))
    diverged = None
    if st["output_fixed"]:  # nothing can change a constant output: record it untrained (chance)
        folder.mkdir(parents=True, exist_ok=True)  # no fit() made it
        e = trainer.evaluate()
        s = {"final_test_acc": e["acc"], "final_test_loss": e["loss"], "best_test_acc": e["acc"], "epochs": 0,
             "time_per_epoch_s": None, "history": []}
    else:
        try:
            s = trainer.fit(resume=(folder / "checkpoint.pt").is_file())
        except DivergenceError as err:  # recorded, not retried: the model as it stopped
            diverged = str(err).splitlines()[0]
            e = trainer.evaluate()
            s = {"final_test_acc": e["acc"], "final_test_loss": e["loss"], "best_test_acc": None,
                 "epochs": trainer.epoch, "time_per_epoch_s": None, "history": trainer.history}
    h = s.get("history") or []
    row = {**cell, "seed": seed, "params": params, "count_vs_mlp": params / PARAMS - 1, "test_acc": s["final_test_acc"],
           "test_loss": s["final_test_loss"], "best_test_acc": s["best_test_acc"], "epochs": s["epochs"],
           "final_train_acc": h[-1]["train_acc"] if h else None, "time_per_epoch_s": s["time_per_epoch_s"],
           "trained": not st["output_fixed"], "diverged": diverged, "protocol": {**protocol, "lr": cell.get("lr", protocol["lr"])},
           **{k: v for k, v in st.items() if k not in ("density",)}}
    if not diverged:  # before row.json: a finished run always has its dynamics (a diverged model has none)
        write_dynamics(folder, model, cell, data_for(cell, source), s["epochs"])
    atomic_write(done, json.dumps(row, indent=1))  # the checkpoint stays: a later, longer --epochs extends the run
    return row


def trained_model(cell: dict, seed: int, folder: Path, row: dict) -> nn.Module:
    """The finished run's model: built by :func:`build` and loaded from its checkpoint (an
    untrained run, ``row["trained"]`` false, is its initial model)."""
    from seq2d.train import load_checkpoint
    from seq2d.train.checkpoint import upgrade_checkpoint

    model = build(cell, seed)
    if row["trained"]:
        ckpt = load_checkpoint(folder / "checkpoint.pt")
        upgrade_checkpoint(ckpt, model)
        model.load_state_dict(ckpt["model"])
    return model


def finished(folder: Path, epochs: int) -> bool:
    """Whether the run in ``folder`` needs no more training for ``epochs``: its row.json says it
    trained at least that long, or it cannot train (a constant output, a divergence), or its
    checkpoint is gone (then it cannot be extended). A shorter finished run with its checkpoint
    is extended by :func:`run_one`: ``epochs`` may change on resume, and with a constant learning
    rate and a data order fixed by (seed, epoch), the extended run is the longer run. A run that
    finished before its ``dynamics.json`` was recorded (item 5) is not finished while its model
    can still be read: :func:`run_one` then records the dynamics without training."""
    done = folder / "row.json"
    if not done.is_file():
        return False
    row = json.loads(done.read_text())
    return trained_enough(folder, row, epochs) and not dynamics_missing(folder, row)


def trained_enough(folder: Path, row: dict, epochs: int) -> bool:
    """The finished ``row`` needs no more training for ``epochs`` (see :func:`finished`)."""
    return (row["epochs"] >= epochs or not row["trained"] or bool(row["diverged"])
            or not (folder / "checkpoint.pt").is_file())


def dynamics_missing(folder: Path, row: dict) -> bool:
    """The run has no ``dynamics.json`` and its model can still be read (not diverged; untrained,
    or trained with its checkpoint kept)."""
    return (not (folder / "dynamics.json").is_file() and not row["diverged"]
            and (not row["trained"] or (folder / "checkpoint.pt").is_file()))


def connectivity(cell: dict, draws: int) -> dict:
    """Over seeds 0..draws-1 of a random cell (untrained): how many draws leave the output row
    empty and how many have no input -> output walk within the cell's iterations."""
    return grid.connectivity(cell, draws, build)


# ---------------------------------------------------------------------- the pilot
def pilot_summary(runs: Path, cell_names, seeds, epochs: int) -> dict:
    """The pilot's seed-mean test curves, plateau epochs and the grid's epochs (:data:`PILOT_RULE`)."""
    from seq2d.train import read_metrics

    out = {"rule": PILOT_RULE, "pilot_epochs": epochs, "seeds": list(seeds), "cells": {}}
    for name in cell_names:
        curves = []
        for s in seeds:
            m = runs / name / f"seed{s}"
            if (m / "metrics.jsonl").is_file():
                rows = [r for r in read_metrics(m) if "test_acc" in r]
                curves.append([100 * r["test_acc"] for r in rows])
        curves = [c for c in curves if len(c) == epochs]
        if not curves:
            continue
        mean = [sum(v) / len(v) for v in zip(*curves)]
        out["cells"][name] = {"seeds_complete": len(curves), "plateau_epoch": plateau_epoch(mean),
                              "final_mean_test_acc": mean[-1], "max_mean_test_acc": max(mean),
                              "mean_test_acc_curve": [round(v, 3) for v in mean],
                              "test_acc_curves": [[round(v, 2) for v in c] for c in curves]}
    learning = [c for c in out["cells"].values() if c["max_mean_test_acc"] > LEARNS]
    if learning:
        worst = max(c["plateau_epoch"] for c in learning)
        out["grid_epochs"] = min(epochs, 10 * math.ceil(1.2 * worst / 10))
    return out


# ---------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--seeds", default="0-9", help="seeds: 'a-b' or a comma list (default 0-9)")
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--cells", default=None, help="comma-separated cell names (default: all, see the docstring)")
    ap.add_argument("--item", choices=("2", "4", "all"), default="all", help="only item 2's cells, only item 4's extra "
                                                                            "ones, or all (default)")
    ap.add_argument("--draws", type=int, default=100, help="untrained draws per random cell for the connectivity counts")
    ap.add_argument("--jobs", type=jobs_arg, default=1, metavar="INT|auto")
    ap.add_argument("--out", default="runs/mnist1d_placement")
    ap.add_argument("--pilot", action="store_true", help=f"the pilot: cells {', '.join(PILOT_CELLS)}, seeds "
                    f"{PILOT_SEEDS}, {PILOT_EPOCHS} epochs; writes OUT/pilot.json")
    ap.add_argument("--collect", default=None, metavar="RUNS", help="copy the finished runs' small files to --dest")
    ap.add_argument("--dest", default=str(RESULTS))
    ap.add_argument("--cache", default=None, help="MNIST-1D cache folder (sets $SEQ2D_CACHE)")
    ap.add_argument("--quick", action="store_true", help="CI smoke run: synthetic data, 2 epochs, seed 0, 5 cells")
    add_launcher_args(ap)
    args = ap.parse_args(argv)
    if args.cache:
        os.environ["SEQ2D_CACHE"] = args.cache
    if args.collect:
        grid.collect(Path(args.collect), Path(args.dest), KEEP, extra=("connectivity.json", "pilot.json"))
        return 0
    launcher = launcher_from_args(args, ap.error)
    if "-" in args.seeds:
        lo, hi = map(int, args.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(s) for s in args.seeds.split(",") if s]
    todo = cells()
    n2 = 1 + len(WIDTHS) * len(PLACEMENTS) * len(REGIONS) + 3 + len(TRUNCATIONS)  # item 2's cells come first
    source = "mnist1d"
    if args.pilot:
        seeds, args.epochs = list(PILOT_SEEDS), PILOT_EPOCHS
        todo = [c for c in todo if c["cell"] in PILOT_CELLS]
    elif args.quick:
        seeds, args.epochs, args.draws, source = [0], 2, 3, "synthetic"
        todo = [c for c in todo if c["cell"] in ("mlp", "tile-h100-no-shortcut-i3", "block-h176-default-i3", "gru",
                                                 "trnn-k2")]
    elif args.cells:
        todo = grid.select(todo, args.cells, ap.error)
    elif args.item != "all":
        todo = todo[:n2] if args.item == "2" else todo[n2:]
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    grid.write_connectivity(out, [c for c in todo if c["family"] == "random"], args.draws, build)
    protocol = {**PROTOCOL, "epochs": args.epochs, "source": source}
    item2 = {c["cell"] for c in cells()[:n2]}  # item 2's cells for every seed first, then item 4's
    groups = [[c for c in todo if c["cell"] in item2], [c for c in todo if c["cell"] not in item2]]
    tasks = [(c, s, str(out), protocol) for g in groups for s in seeds for c in g]
    res = grid.launch(launcher, run_one, tasks, out, done=lambda folder: finished(folder, args.epochs))
    if args.pilot:
        summary = pilot_summary(out, PILOT_CELLS, seeds, args.epochs)
        (out / "pilot.json").write_text(json.dumps(summary, indent=1) + "\n")
        for name, c in summary["cells"].items():
            print(f"pilot {name}: plateau epoch {c['plateau_epoch']}, final mean {c['final_mean_test_acc']:.2f}%")
        print(f"grid epochs by the rule: {summary.get('grid_epochs')}")
    return grid.failed(res)


if __name__ == "__main__":
    raise SystemExit(main())
