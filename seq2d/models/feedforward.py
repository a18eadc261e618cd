"""Feed-forward models: ``mlp`` (block sub-diagonal), ``from_mask`` (any block or element mask)
and ``from_sequential`` (an ``nn.Sequential`` of Linear + activations, for ``from_torch``).

Each constructor is registered by name (``seq2d.create_model``) and proven equal to its
torch.nn counterpart in ``tests/`` (max abs error <= 1e-5 float32, <= 1e-10 float64,
outputs and gradients).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..errors import InvalidType, InvalidValue, renamed_keyword
from ..arguments import check_factory, check_seed
from ..blocks import LinearBlock
from ..core.checks import check_sizes
from ..core import Sequential2D
from .registry import register_model

__all__ = ["mlp", "from_mask", "from_sequential"]

_ACT_TYPES = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.LayerNorm, nn.Identity)
SUPPORTED = (
    "nn.Linear, nn.Sequential of Linear and activations (ReLU, Tanh, Sigmoid, GELU, LayerNorm, Identity), "
    "nn.RNN, nn.TransformerEncoderLayer, nn.TransformerEncoder"
)


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
    sizes = check_sizes(sizes)
    if len(sizes) < 2:
        raise InvalidValue(f"mlp needs at least two sizes (input and output), got {list(sizes)}")
    if not isinstance(bias, bool):
        raise InvalidType(f"mlp: bias must be a bool, got {type(bias).__name__} {bias!r}")
    check_factory(device, dtype, "mlp")
    L = len(sizes) - 1
    kw = {"device": device, "dtype": dtype}
    blocks = {(l + 1, l): LinearBlock(sizes[l], sizes[l + 1], **kw) for l in range(L)}
    acts = [None] + [activation] * (L - 1) + [final_activation]
    return Sequential2D(sizes, blocks, bias=bias, activations=acts, inputs=[0], outputs=[L], steps=L, **kw)


def _as_bool_mask(mask, what: str) -> Tensor:
    if not isinstance(mask, Tensor):
        try:
            mask = torch.as_tensor(mask)
        except Exception as e:  # ragged lists and the like
            raise InvalidType(f"{what} must be a bool tensor or a nested list of bools, got {type(mask).__name__}: {e}") from None
    if mask.dtype != torch.bool:
        raise InvalidType(f"{what} must have dtype torch.bool, got {mask.dtype}")
    if mask.dim() != 2:
        raise InvalidValue(f"{what} must be 2-D, got shape {tuple(mask.shape)}")
    return mask


@register_model
@renamed_keyword("backend", "store", "store choice")
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
    store: str = "dense",
    loop: bool = False,
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
    sizes = check_sizes(sizes)
    n = len(sizes)
    N = sum(sizes)
    check_seed(seed, "from_mask", optional=True)
    check_factory(device, dtype, "from_mask")
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
        raise InvalidValue(
            f"mask must be a block mask of shape ({n}, {n}) or an element mask of shape ({N}, {N}) "
            f"for sizes {list(sizes)}, got {shape}"
        )
    if not bool(elem.any()):
        raise InvalidValue(f"from_mask: mask has no True entry (shape {shape}): the model would have no block at all")
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
        sizes, blocks, bias=bias, activations=acts, inputs=inputs, outputs=outs, steps=steps, store=store, loop=loop, **kw
    )
    with torch.no_grad():
        for k, p in model.biases.items():
            i = int(k)
            p.copy_(b_full[off[i] : off[i + 1]])
    return model


def _copy_act(m: nn.Module) -> nn.Module:
    return copy.deepcopy(m)


def from_sequential(seq: nn.Sequential | nn.Linear) -> Sequential2D:
    mods = [seq] if isinstance(seq, nn.Linear) else list(seq)
    linears: list[nn.Linear] = []
    acts: list[list[nn.Module]] = []  # activations after each linear
    for k, m in enumerate(mods):
        if isinstance(m, nn.Linear):
            linears.append(m)
            acts.append([])
        elif isinstance(m, _ACT_TYPES):
            if not linears:
                raise InvalidType(
                    f"from_torch: nn.Sequential item {k} ({type(m).__name__}) comes before any nn.Linear; "
                    "the input slot of a Sequential2D is held and has no activation"
                )
            if not isinstance(m, nn.Identity):
                acts[-1].append(m)
        else:
            raise InvalidType(
                f"from_torch: unsupported module {type(m).__name__} at item {k} of nn.Sequential. Supported: {SUPPORTED}"
            )
    if not linears:
        raise InvalidType("from_torch: the nn.Sequential holds no nn.Linear")
    sizes = [linears[0].in_features] + [lin.out_features for lin in linears]
    for k in range(1, len(linears)):
        if linears[k].in_features != linears[k - 1].out_features:
            raise InvalidValue(
                f"from_torch: Linear {k} takes {linears[k].in_features} features but the previous one gives "
                f"{linears[k - 1].out_features}"
            )
    ref = linears[0].weight
    kw = {"device": ref.device, "dtype": ref.dtype}
    blocks = {}
    for l, lin in enumerate(linears):
        blk = LinearBlock(lin.in_features, lin.out_features, **kw)
        with torch.no_grad():
            blk.weight.copy_(lin.weight)
        blk.weight.requires_grad_(lin.weight.requires_grad)
        blocks[(l + 1, l)] = blk
    slot_acts: list = [None]
    for a in acts:
        if not a:
            slot_acts.append(None)
        elif len(a) == 1:
            slot_acts.append(_copy_act(a[0]))
        else:
            slot_acts.append(nn.Sequential(*[_copy_act(x) for x in a]))
    bias = [None] + [None if lin.bias is None else lin.bias.detach().clone() for lin in linears]
    L = len(linears)
    return Sequential2D(sizes, blocks, bias=bias, activations=slot_acts, inputs=[0], outputs=[L], steps=L, **kw)
