"""The equivalence cases: each seq2d constructor proven equal to its torch.nn reference.

One table (:data:`CASES`) of seq2d models next to their torch.nn references with the same
weights, used by the test suite (``tests/test_equivalence.py``), by ``seq2d equivalence``
and by ``experiments/equivalence.py`` (which print the measured max errors). A case builds,
for a dtype and seed,

- ``ours``: the seq2d model, ``ref``: the torch reference (weights copied),
- ``pairs``: ``(our_param, ref_param)`` whose gradients must agree,
- ``inputs``: positional inputs (the first is differentiated), ``kwargs`` for both calls.

:func:`compare` runs both, backpropagates one random linear functional of the
outputs and returns the max abs errors of the outputs, the input gradient and the
parameter gradients; :data:`TOLERANCE` is the error each dtype must stay under.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .core import Sequential2D
from .models.convert import from_torch
from .models.feedforward import from_mask, mlp
from .models.recurrent import truncated_rnn
from .testing import grads_of

__all__ = ["TOLERANCE", "Built", "EquivCase", "CASES", "compare"]

# Max abs error allowed for outputs and gradients vs the torch reference.
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


@dataclass
class Built:
    ours: Callable
    ref: Callable
    pairs: list[tuple[Tensor, Tensor]]
    inputs: list[Tensor]
    kwargs: dict = field(default_factory=dict)


@dataclass
class EquivCase:
    name: str
    build: Callable[[torch.dtype, int], Built]


def compare(case: EquivCase, dtype: torch.dtype = torch.float64, seed: int = 0) -> dict[str, float]:
    """Max abs errors ``{'output', 'grad_input', 'grad_params'}`` of ``case`` at ``dtype``."""
    torch.manual_seed(seed)
    b = case.build(dtype, seed)
    xs_o = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in b.inputs]
    xs_r = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in b.inputs]
    out_o, out_r = b.ours(*xs_o, **b.kwargs), b.ref(*xs_r, **b.kwargs)
    outs_o = out_o if isinstance(out_o, tuple) else (out_o,)
    outs_r = out_r if isinstance(out_r, tuple) else (out_r,)
    err_out = max(float((o - r).detach().abs().max()) for o, r in zip(outs_o, outs_r))
    g = torch.Generator().manual_seed(seed + 1)
    loss_o = loss_r = 0
    for o, r in zip(outs_o, outs_r):
        w = torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)
        loss_o = loss_o + (o * w).sum()
        loss_r = loss_r + (r * w).sum()
    go = grads_of(loss_o, [xs_o[0]] + [p for p, _ in b.pairs])
    gr = grads_of(loss_r, [xs_r[0]] + [p for _, p in b.pairs])

    def diff(a, c):
        a = torch.zeros(()) if a is None else a
        c = torch.zeros(()) if c is None else c
        return float((a - c).abs().max())

    err_gx = diff(go[0], gr[0])
    err_gp = max((diff(a, c) for a, c in zip(go[1:], gr[1:])), default=0.0)
    return {"output": err_out, "grad_input": err_gx, "grad_params": err_gp}


# ---------------------------------------------------------------------------- cases
def _mlp_case(activation: str, bias: bool):
    acts = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}

    def build(dtype, seed):
        sizes = [13, 11, 7, 5]
        ours = mlp(sizes, activation=activation, bias=bias, dtype=dtype)
        mods = []
        pairs = []
        for l in range(len(sizes) - 1):
            lin = nn.Linear(sizes[l], sizes[l + 1], bias=bias, dtype=dtype)
            with torch.no_grad():
                lin.weight.copy_(ours.block(l + 1, l).weight)
                if bias:
                    lin.bias.copy_(ours.bias(l + 1))
            pairs.append((ours.block(l + 1, l).weight, lin.weight))
            if bias:
                pairs.append((ours.bias(l + 1), lin.bias))
            mods.append(lin)
            if l < len(sizes) - 2:
                mods.append(acts[activation]())
        return Built(ours, nn.Sequential(*mods), pairs, [torch.randn(4, 3, sizes[0], dtype=dtype)])

    return EquivCase(f"mlp[{activation}{'' if bias else ',nobias'}]", build)


def _from_sequential_case():
    def build(dtype, seed):
        ref = nn.Sequential(
            nn.Linear(9, 12), nn.GELU(), nn.Linear(12, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 6), nn.Sigmoid()
        ).to(dtype)
        ours = from_torch(ref)
        pairs = [(ours.block(1, 0).weight, ref[0].weight), (ours.bias(1), ref[0].bias),
                 (ours.block(2, 1).weight, ref[2].weight), (ours.acts[2][0].weight, ref[3].weight),
                 (ours.block(3, 2).weight, ref[5].weight), (ours.bias(3), ref[5].bias)]
        return Built(ours, ref, pairs, [torch.randn(5, 9, dtype=dtype)])

    return EquivCase("from_torch[Sequential]", build)


def _rnn_case(num_layers: int, nonlinearity: str, with_h0: bool, batch_first: bool = False):
    def build(dtype, seed):
        ref = nn.RNN(6, 8, num_layers=num_layers, nonlinearity=nonlinearity, batch_first=batch_first, dtype=dtype)
        ours = from_torch(ref)
        pairs = []
        for l in range(num_layers):
            wih, whh = ours.layer_blocks(l + 1)
            pairs += [(wih.weight, getattr(ref, f"weight_ih_l{l}")), (whh.weight, getattr(ref, f"weight_hh_l{l}")),
                      (ours.core.bias(l + 1), getattr(ref, f"bias_ih_l{l}"))]
        T, B = 7, 3
        x = torch.randn(B, T, 6, dtype=dtype) if batch_first else torch.randn(T, B, 6, dtype=dtype)
        inputs = [x] + ([torch.randn(num_layers, B, 8, dtype=dtype)] if with_h0 else [])
        return Built(ours, ref, pairs, inputs)

    tag = f"rnn[L={num_layers},{nonlinearity}{',h0' if with_h0 else ''}{',batch_first' if batch_first else ''}]"
    return EquivCase(tag, build)


class _WindowedRNN(nn.Module):
    """Reference for a k-truncation: nn.RNN from a zero state over each window."""

    def __init__(self, rnn: nn.RNN, k: int):
        super().__init__()
        self.rnn, self.k = rnn, k

    def forward(self, x):  # (T, B, in)
        return torch.stack([self.rnn(x[max(0, t - self.k + 1) : t + 1])[0][-1] for t in range(x.shape[0])])


def _truncated_case(num_layers: int, k: int):
    def build(dtype, seed):
        ref = nn.RNN(5, 6, num_layers=num_layers, dtype=dtype)
        ours = truncated_rnn(ref, k)
        L = num_layers
        pairs = []
        for l in range(L):
            slot = k + l * k + (1 if k > 1 else 0)  # a hidden slot of layer l that has both blocks
            src = (slot - k) if l > 0 else (1 if k > 1 else 0)
            pairs.append((ours.core.block(slot, src).weight, getattr(ref, f"weight_ih_l{l}")))
            if k > 1:
                pairs.append((ours.core.block(slot, slot - 1).weight, getattr(ref, f"weight_hh_l{l}")))
            pairs.append((ours.core.bias(slot), getattr(ref, f"bias_ih_l{l}")))
        return Built(ours, _WindowedRNN(ref, k), pairs, [torch.randn(9, 2, 5, dtype=dtype)])

    return EquivCase(f"truncated_rnn[L={num_layers},k={k}]", build)


def _from_mask_build(element: bool, dtype, seed) -> Built:
    sizes = [6, 5, 4, 3]
    n, N = len(sizes), sum(sizes)
    g = torch.Generator().manual_seed(seed)
    if element:
        mask = torch.rand(N, N, generator=g) < 0.4
        mask[: sizes[0]] = False
    else:
        mask = torch.rand(n, n, generator=g) < 0.6
        mask[0] = False
        mask[1, 0] = mask[3, 2] = True
    ours = from_mask(sizes, mask, activations="tanh", bias=True, seed=seed, steps=3, dtype=dtype)
    ref = _MaskedDenseIteration(ours)
    pairs = [(blk.weight, ref.block_weight(i, j)) for i, j, _, blk in ours.positions()]
    pairs += [(ours.bias(i), ref.biases[i]) for i in range(n) if ours.bias(i) is not None]
    return Built(ours, ref, pairs, [torch.randn(4, sizes[0], dtype=dtype)])


class _MaskedDenseIteration(nn.Module):
    """Plain torch: iterate ``state <- act(state @ (W * M).T + b)`` over the N x N matrix."""

    def __init__(self, model: Sequential2D):
        super().__init__()
        self.model_sizes = model.sizes
        self.off = model.offsets
        self.n = model.n
        self.steps = model.steps
        self.held = set(model.held())
        self.acts = [model.acts[i] for i in range(model.n)]
        N = self.off[-1]
        W = torch.zeros(N, N, dtype=next(model.parameters()).dtype)
        M = torch.zeros(N, N, dtype=torch.bool)
        self._slices = {}
        for i, j, _, blk in model.positions():
            r, c = slice(self.off[i], self.off[i + 1]), slice(self.off[j], self.off[j + 1])
            W[r, c] = blk.weight.detach()
            M[r, c] = blk.trainable_mask()
            self._slices[(i, j)] = (r, c)
        self._W = W
        self.register_buffer("M", M)
        self.biases = {i: nn.Parameter(model.bias(i).detach().clone()) for i in range(model.n) if model.bias(i) is not None}
        self._block_views: dict = {}

    def block_weight(self, i, j):
        # a leaf per block: the reference assembles W from these, so grads land here
        if (i, j) not in self._block_views:
            r, c = self._slices[(i, j)]
            self._block_views[(i, j)] = nn.Parameter(self._W[r, c].clone())
        return self._block_views[(i, j)]

    def forward(self, x):
        N = self.off[-1]
        rows = []
        for i in range(self.n):
            row = []
            for j in range(self.n):
                if (i, j) in self._slices:
                    r, c = self._slices[(i, j)]
                    row.append(self.block_weight(i, j) * self.M[r, c])
                else:
                    row.append(x.new_zeros(self.model_sizes[i], self.model_sizes[j]))
            rows.append(torch.cat(row, dim=1))
        W = torch.cat(rows, dim=0)  # (N, N), masked
        b = torch.cat([self.biases[i] if i in self.biases else x.new_zeros(self.model_sizes[i]) for i in range(self.n)])
        state = torch.cat([x, x.new_zeros(*x.shape[:-1], N - x.shape[-1])], dim=-1)
        for _ in range(self.steps):
            pre = state @ W.T + b
            parts = []
            for i in range(self.n):
                sl = slice(self.off[i], self.off[i + 1])
                parts.append(state[..., sl] if i in self.held else self.acts[i](pre[..., sl]))
            state = torch.cat(parts, dim=-1)
        return state[..., self.off[self.n - 1] :]


def _transformer_case(norm_first: bool, activation: str, masked: bool, layers: int = 1, final_norm: bool = False):
    def build(dtype, seed):
        d, h, dff, T, B = 8, 2, 16, 5, 3
        layer = nn.TransformerEncoderLayer(d, h, dff, dropout=0.0, activation=activation, batch_first=True,
                                           norm_first=norm_first, dtype=dtype)
        if layers == 1:
            ref = layer
        else:
            norm = nn.LayerNorm(d, dtype=dtype) if final_norm else None
            ref = nn.TransformerEncoder(layer, layers, norm=norm, enable_nested_tensor=False)
        with torch.no_grad():  # move LayerNorms off ones/zeros so their gradients are tested
            for name, p in ref.named_parameters():
                if "norm" in name:
                    p.add_(0.1 * torch.randn_like(p))
        ref.eval()
        ours = from_torch(ref)
        named = ours.torch_named_parameters()
        pairs = [(named[n], p) for n, p in ref.named_parameters()]
        kw = {}
        if masked:
            mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=dtype)
            kw = {"src_mask" if layers == 1 else "mask": mask}
        return Built(ours, ref, pairs, [torch.randn(B, T, d, dtype=dtype)], kw)

    parts = ([] if layers == 1 else [f"L={layers}"] + (["norm"] if final_norm else []))
    parts += ["pre-norm" if norm_first else "post-norm", activation] + (["causal"] if masked else [])
    name = "transformer_layer" if layers == 1 else "transformer_encoder"
    return EquivCase(f"{name}[{','.join(parts)}]", build)


CASES: list[EquivCase] = [
    _mlp_case("relu", True),
    _mlp_case("tanh", False),
    _mlp_case("gelu", True),
    _from_sequential_case(),
    _rnn_case(1, "tanh", False),
    _rnn_case(1, "relu", True),
    _rnn_case(2, "tanh", True),
    _rnn_case(3, "relu", False, batch_first=True),
    _rnn_case(3, "tanh", True, batch_first=True),
    _truncated_case(1, 1),
    _truncated_case(1, 4),
    _truncated_case(2, 3),
    EquivCase("from_mask[block]", lambda dtype, seed: _from_mask_build(False, dtype, seed)),
    EquivCase("from_mask[element]", lambda dtype, seed: _from_mask_build(True, dtype, seed)),
    _transformer_case(False, "relu", False),
    _transformer_case(True, "gelu", True),
    _transformer_case(False, "gelu", True),
    _transformer_case(True, "relu", False, layers=2, final_norm=True),
    _transformer_case(False, "relu", True, layers=3),
]
