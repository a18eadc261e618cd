"""Constructors: the classic networks written as Sequential2D block matrices.

Each is registered by name (``seq2d.create_model``) and proven equal to its
torch.nn counterpart in ``tests/`` (max abs error <= 1e-5 float32, <= 1e-10 float64,
outputs and gradients).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .blocks import LinearBlock
from .core import Sequential2D
from .registry import register_model
from .recurrent import RNN

__all__ = ["mlp", "rnn", "from_mask"]


@register_model
def mlp(
    sizes: Sequence[int] = (784, 256, 10),
    activation="relu",
    bias: bool = True,
    final_activation=None,
    *,
    device=None,
    dtype=None,
) -> Sequential2D:
    r"""A multi-layer perceptron as a block sub-diagonal Sequential2D.

    Slots are the layers (``sizes``); ``F[l+1][l]`` is the weight of layer ``l``;
    ``steps = len(sizes) - 1``. ``mlp(sizes)(x)`` equals
    ``nn.Sequential(Linear(s0, s1), act, ..., Linear(s_{L-1}, s_L))(x)`` with the same
    weights, and the initialisation has the same distribution as ``nn.Linear``'s::

        F = [[ .   .   .   . ]          x0: input (held)
             [ W1  .   .   . ]          x1 = act(W1 x0 + b1)
             [ .   W2  .   . ]          x2 = act(W2 x1 + b2)
             [ .   .   W3  . ]]         x3 = W3 x2 + b3      (final_activation)
    """
    sizes = Sequential2D._check_sizes(sizes)
    if len(sizes) < 2:
        raise ValueError(f"mlp needs at least two sizes (input and output), got {list(sizes)}")
    L = len(sizes) - 1
    kw = {"device": device, "dtype": dtype}
    blocks = {(l + 1, l): LinearBlock(sizes[l], sizes[l + 1], **kw) for l in range(L)}
    acts = [None] + [activation] * (L - 1) + [final_activation]
    return Sequential2D(sizes, blocks, bias=bias, activations=acts, inputs=[0], outputs=[L], steps=L, **kw)


@register_model
def rnn(
    input_size: int = 8,
    hidden_size: int = 16,
    num_layers: int = 1,
    nonlinearity: str = "tanh",
    bias: bool = True,
    batch_first: bool = False,
    *,
    device=None,
    dtype=None,
) -> RNN:
    r"""An Elman RNN (``nn.RNN``) as a Sequential2D run in sequence mode.

    Slots ``[x, h_1, ..., h_L]``; ``F[l][l-1] = W_ih^l`` and ``F[l][l] = W_hh^l``;
    one bias per hidden slot (``b_ih + b_hh`` of ``nn.RNN``)::

        F = [[ .      .      .    ]     x: input, refilled each step
             [ W_ih1  W_hh1  .    ]     h1 = tanh(W_ih1 x + W_hh1 h1 + b1)
             [ .      W_ih2  W_hh2]]    h2 = tanh(W_ih2 h1 + W_hh2 h2 + b2)

    Layer ``l`` sits at pipeline delay ``l - 1``; :meth:`Sequential2D.sequence` aligns
    the outputs. Returns an :class:`~seq2d.RNN` called exactly like ``nn.RNN``.
    Weights start U(-1/sqrt(H), 1/sqrt(H)) like ``nn.RNN``'s; the single slot bias too.
    """
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"Unknown nonlinearity {nonlinearity!r}. Select from 'tanh' or 'relu'.")
    for name, v in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"rnn: {name} must be a positive int, got {v!r}")
    kw = {"device": device, "dtype": dtype}
    H = hidden_size
    sizes = [input_size] + [H] * num_layers
    blocks = {}
    for l in range(1, num_layers + 1):
        blocks[(l, l - 1)] = LinearBlock(sizes[l - 1], H, **kw)
        blocks[(l, l)] = LinearBlock(H, H, **kw)
    core = Sequential2D(
        sizes, blocks, bias=bias, activations=[None] + [nonlinearity] * num_layers,
        inputs=[0], outputs=[num_layers], steps=None, **kw,
    )
    bound = 1.0 / math.sqrt(H)
    with torch.no_grad():
        for p in core.parameters():
            p.uniform_(-bound, bound)
    return RNN(core, batch_first=batch_first, nonlinearity=nonlinearity)


def _as_bool_mask(mask, what: str) -> Tensor:
    if not isinstance(mask, Tensor):
        try:
            mask = torch.as_tensor(mask)
        except Exception as e:  # ragged lists and the like
            raise TypeError(f"{what} must be a bool tensor or a nested list of bools, got {type(mask).__name__}: {e}") from None
    if mask.dtype != torch.bool:
        raise TypeError(f"{what} must have dtype torch.bool, got {mask.dtype}")
    if mask.dim() != 2:
        raise ValueError(f"{what} must be 2-D, got shape {tuple(mask.shape)}")
    return mask


@register_model
def from_mask(
    sizes: Sequence[int] = (16, 8, 8, 4),
    mask=None,
    activations="relu",
    bias: bool = True,
    seed: int | None = None,
    *,
    inputs: Sequence[int] | None = None,
    outputs: Sequence[int] | None = None,
    steps: int | None = None,
    backend: str = "dense",
    device=None,
    dtype=None,
) -> Sequential2D:
    r"""A linear-block Sequential2D from a boolean mask.

    ``mask`` is either a **block mask** ``(n, n)`` (``mask[i, j]``: a dense linear block
    from slot ``j`` to slot ``i``) or an **element mask** ``(N, N)`` over the
    concatenated state, ``N = sum(sizes)`` (``mask[r, c]``: entry ``r, c`` is trainable;
    blocks with no True entry are absent). Rows = outputs, columns = inputs.

    ``activations``: one spec for the non-held, non-output slots (output slots get the
    identity), or a per-slot list. Initialisation (reproducible from ``seed``): each
    trainable weight and bias of output unit ``r`` is drawn U(-1/sqrt(m_r), 1/sqrt(m_r)),
    where ``m_r`` is the number of trainable weights in row ``r`` of the N x N matrix (the
    unit's actual fan-in; 1 if it has none). For a dense MLP mask this is exactly
    ``nn.Linear``'s distribution. Default ``mask=None`` is a block sub-diagonal (MLP) mask.
    """
    sizes = Sequential2D._check_sizes(sizes)
    n = len(sizes)
    N = sum(sizes)
    if mask is None:
        mask = torch.zeros(n, n, dtype=torch.bool)
        for l in range(n - 1):
            mask[l + 1, l] = True
    mask = _as_bool_mask(mask, "mask")
    shape = tuple(mask.shape)
    if shape == (n, n):
        off = [0]
        for s in sizes:
            off.append(off[-1] + s)
        elem = torch.zeros(N, N, dtype=torch.bool)
        for i, j in mask.nonzero().tolist():
            elem[off[i] : off[i + 1], off[j] : off[j + 1]] = True
    elif shape == (N, N):
        elem = mask.cpu()
    else:
        raise ValueError(
            f"mask must be a block mask of shape ({n}, {n}) or an element mask of shape ({N}, {N}) "
            f"for sizes {list(sizes)}, got {shape}"
        )
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    fan = elem.sum(dim=1).clamp(min=1).to(torch.float64)  # (N,) trainable fan-in per output unit
    bound = fan.rsqrt()
    u = torch.rand(N, N, generator=gen, dtype=torch.float64) * 2 - 1  # U(-1, 1)
    w_full = (u * bound[:, None]) * elem
    b_full = (torch.rand(N, generator=gen, dtype=torch.float64) * 2 - 1) * bound

    off = [0]
    for s in sizes:
        off.append(off[-1] + s)
    kw = {"device": device, "dtype": dtype}
    blocks = {}
    for i in range(n):
        for j in range(n):
            sub = elem[off[i] : off[i + 1], off[j] : off[j + 1]]
            if not bool(sub.any()):
                continue
            blk = LinearBlock(sizes[j], sizes[i], mask=None if bool(sub.all()) else sub.clone(), **kw)
            with torch.no_grad():
                blk.weight.copy_(w_full[off[i] : off[i + 1], off[j] : off[j + 1]])
            blocks[(i, j)] = blk
    rows = {i for i, _ in blocks}
    held = [i for i in range(n) if i not in rows]
    outs = [n - 1] if outputs is None else list(outputs)
    if isinstance(activations, Sequence) and not isinstance(activations, str):
        acts = activations
    else:
        acts = [None if (i in held or i % n in [o % n for o in outs]) else activations for i in range(n)]
    model = Sequential2D(
        sizes, blocks, bias=bias, activations=acts, inputs=inputs, outputs=outs, steps=steps, backend=backend, **kw
    )
    with torch.no_grad():
        for k, p in model.biases.items():
            i = int(k)
            p.copy_(b_full[off[i] : off[i + 1]])
    return model
