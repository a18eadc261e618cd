r"""The transformer encoder as one Sequential2D, equal to ``nn.TransformerEncoderLayer``.

A post-norm layer (``norm_first=False``) is the 6-slot grid below (rows = outputs,
columns = inputs; ``W`` a :class:`~seq2d.LinearBlock`, ``I`` an identity block,
``M`` the :class:`AttentionCore`, the only module block)::

    slot  size      0    1    2    3    4    activation     bias
     0 x  d         .    .    .    .    .    (held input)
     1 qkv 3d       W    .    .    .    .    identity       in_proj_bias
     2 attn d       .    M    .    .    .    identity       -
     3 h  d         I    .    W    .    .    LayerNorm1     out_proj.bias
     4 f  dff       .    .    .    W    .    relu / gelu    linear1.bias
     5 y  d         .    .    .    I    W    LayerNorm2     linear2.bias

i.e. ``h = LN1(x + W_o attn + b_o)``, ``f = act(W_1 h + b_1)``, ``y = LN2(h + W_2 f + b_2)``.
A pre-norm layer (``norm_first=True``) has 8 slots: ``x, n1 = LN1(x), qkv = W_in n1 + b_in,
attn, h = x + W_o attn + b_o, n2 = LN2(h), f = act(W_1 n2 + b_1), y = h + W_2 f + b_2``
(``n1``/``n2`` are an identity block with a LayerNorm slot activation and no bias).

The graph is acyclic, so ``steps`` = depth (5 or 7) Jacobi steps give the exact
output. An encoder of ``L`` layers is ONE Sequential2D with the layers' slots stacked
(layer ``l``'s output slot is layer ``l+1``'s input slot), iterated ``L * depth``
steps (+1 for the optional final LayerNorm slot). The masks are call-time context
(``**context`` of ``Sequential2D.forward``) given to every :class:`AttentionCore`.

**Dropout** (``dropout=p > 0``) sits where ``nn.TransformerEncoderLayer`` applies it: on the
attention weights (in :class:`AttentionCore`), and in three more slots (docs/concepts.md)
``sa = drop1(W_o attn + b_o)``, ``fd = drop(f)``, ``ff = drop2(W_2 fd + b_2)`` (then
``h = LN1(x + sa)``, ``y = LN2(h + ff)``): depth 8 (pre-norm 10). With ``steps >= depth`` (the
default) each slot is computed once, in torch's order, on a tensor of torch's shape and memory
layout, so in training mode a converted layer equals torch's under the same RNG state (tested
on the CPU; untested on CUDA's fused dropout); other schedules draw afresh at every step.

**Layout.** The core is always batch first, ``(*batch, T, d_model)``: a slot holds
``(*batch, s_i)`` with free leading dimensions, and the attention core mixes over the last but
one, ``T``. ``batch_first=True`` (seq2d's default) takes that layout; ``batch_first=False``
(torch's default) takes torch's ``(T, B, d_model)`` (or unbatched ``(T, d_model)``) and
transposes at the boundary, in and out (a view each way); the masks read the same in both
layouts (``src_key_padding_mask (B, T)``). Its dropout slots draw in ``(T, B)`` memory order
there, as torch's do.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn

from ..errors import InvalidInput, InvalidType, InvalidValue
from ..core.checks import unexpected_keywords
from ..attention import AttentionCore, SequenceFirstDropout
from ..blocks import LinearBlock
from ..core import Sequential2D
from .registry import register_model
from .transformer_config import ENCODER_SIGNATURE, LAYER_SIGNATURE, layer_config, torch_layer_config
from .wrapper import CoreModel

__all__ = [
    "AttentionCore",
    "TransformerEncoderLayer",
    "TransformerEncoder",
    "transformer_layer",
    "transformer_encoder",
    "layer_from_torch",
    "encoder_from_torch",
]


# ---------------------------------------------------------------------------- grid building
class _Grid:
    """Accumulates slots (size, activation, bias) and blocks for one Sequential2D."""

    def __init__(self, d_model: int, factory_kwargs: dict):
        self.fk = factory_kwargs
        self.sizes: list[int] = [d_model]
        self.acts: list = [None]
        self.bias: list = [False]
        self.blocks: dict[tuple[int, int], object] = {}

    def slot(self, size: int, act=None, bias: bool = False) -> int:
        self.sizes.append(size)
        self.acts.append(act)
        self.bias.append(nn.Parameter(torch.empty(size, **self.fk)) if bias else False)
        return len(self.sizes) - 1

    def layer_norm(self, d: int, eps: float, bias: bool) -> nn.LayerNorm:
        return nn.LayerNorm(d, eps=eps, bias=bias, **self.fk)

    def add_layer(self, x: int, d: int, nhead: int, dff: int, act, norm_first: bool, eps: float, bias: bool,
                  dropout: float = 0.0, batch_first: bool = True) -> dict:
        """Append one encoder layer reading slot ``x``; return its slot indices by name. With
        ``dropout > 0`` the layer has the slots ``sa``, ``fd``, ``ff`` (module docstring); each
        draws its mask in the memory order of torch's tensor at that place: ``sa`` (the attention
        output) always sequence first, ``fd`` and ``ff`` in the input's layout."""
        late_drop = nn.Dropout if batch_first else SequenceFirstDropout
        lin = lambda i, o: LinearBlock(i, o, **self.fk)  # noqa: E731
        s = {"x": x}
        if norm_first:
            s["n1"] = self.slot(d, self.layer_norm(d, eps, bias))
            self.blocks[(s["n1"], x)] = "identity"
            src = s["n1"]
        else:
            src = x
        s["qkv"] = self.slot(3 * d, None, bias)
        s["attn"] = self.slot(d)
        self.blocks[(s["qkv"], src)] = lin(d, 3 * d)
        self.blocks[(s["attn"], s["qkv"])] = AttentionCore(d, nhead, dropout)
        if dropout:  # sa = drop1(W_o attn + b_o); h = [LN1](x + sa)
            s["sa"] = self.slot(d, SequenceFirstDropout(dropout), bias)
            self.blocks[(s["sa"], s["attn"])] = lin(d, d)
            s["h"] = self.slot(d, None if norm_first else self.layer_norm(d, eps, bias))
            self.blocks[(s["h"], s["sa"])] = "identity"
        else:
            s["h"] = self.slot(d, None if norm_first else self.layer_norm(d, eps, bias), bias)
            self.blocks[(s["h"], s["attn"])] = lin(d, d)
        self.blocks[(s["h"], x)] = "identity"
        if norm_first:
            s["n2"] = self.slot(d, self.layer_norm(d, eps, bias))
            self.blocks[(s["n2"], s["h"])] = "identity"
            src = s["n2"]
        else:
            src = s["h"]
        s["f"] = self.slot(dff, act, bias)
        self.blocks[(s["f"], src)] = lin(d, dff)
        if dropout:  # fd = drop(f); ff = drop2(W_2 fd + b_2); y = [LN2](h + ff)
            s["fd"] = self.slot(dff, late_drop(dropout))
            self.blocks[(s["fd"], s["f"])] = "identity"
            s["ff"] = self.slot(d, late_drop(dropout), bias)
            self.blocks[(s["ff"], s["fd"])] = lin(dff, d)
            s["y"] = self.slot(d, None if norm_first else self.layer_norm(d, eps, bias))
            self.blocks[(s["y"], s["ff"])] = "identity"
        else:
            s["y"] = self.slot(d, None if norm_first else self.layer_norm(d, eps, bias), bias)
            self.blocks[(s["y"], s["f"])] = lin(dff, d)
        self.blocks[(s["y"], s["h"])] = "identity"
        return s

    def build(self, out: int) -> Sequential2D:
        return Sequential2D(self.sizes, self.blocks, bias=self.bias, activations=self.acts,
                            inputs=[0], outputs=[out], **self.fk)


def _layer_param_map(core: Sequential2D, s: dict, prefix: str = "") -> dict[str, nn.Parameter]:
    """torch parameter name -> our parameter, for one layer with slot indices ``s``."""
    norm_first = "n1" in s
    src_qkv = s["n1"] if norm_first else s["x"]
    src_ff = s["n2"] if norm_first else s["h"]
    ln1 = core.acts[s["n1"] if norm_first else s["h"]]
    ln2 = core.acts[s["n2"] if norm_first else s["y"]]
    m: dict[str, nn.Parameter] = {}

    def put(name, p):
        if p is not None:
            m[prefix + name] = p

    sa = s.get("sa", s["h"])  # the slot of W_o attn + b_o (its own with dropout)
    ff, fd = s.get("ff", s["y"]), s.get("fd", s["f"])  # the slot of W_2 f + b_2, and the one W_2 reads
    put("self_attn.in_proj_weight", core.block(s["qkv"], src_qkv).weight)
    put("self_attn.in_proj_bias", core.bias(s["qkv"]))
    put("self_attn.out_proj.weight", core.block(sa, s["attn"]).weight)
    put("self_attn.out_proj.bias", core.bias(sa))
    put("linear1.weight", core.block(s["f"], src_ff).weight)
    put("linear1.bias", core.bias(s["f"]))
    put("linear2.weight", core.block(ff, fd).weight)
    put("linear2.bias", core.bias(ff))
    for name, p in ln1.named_parameters():
        put(f"norm1.{name}", p)
    for name, p in ln2.named_parameters():
        put(f"norm2.{name}", p)
    for name, p in core.acts[s["f"]].named_parameters():  # a module activation with parameters (PReLU)
        put(f"activation.{name}", p)
    return m


@torch.no_grad()
def _reset_like_torch(params: dict[str, nn.Parameter]) -> None:
    """torch's initialisation: xavier in_proj, zero attention biases, nn.Linear defaults, LN (1, 0)."""
    for name, p in params.items():
        leaf = name.rsplit(".", 2)
        key = ".".join(leaf[-2:]) if len(leaf) > 1 else name
        if key.endswith("in_proj_weight"):
            nn.init.xavier_uniform_(p)
        elif key.endswith("in_proj_bias") or key == "out_proj.bias":
            nn.init.zeros_(p)
        elif key in ("out_proj.weight", "linear1.weight", "linear2.weight"):
            nn.init.kaiming_uniform_(p, a=math.sqrt(5))
        elif key in ("linear1.bias", "linear2.bias"):
            w = params[name[: -len("bias")] + "weight"]
            bound = 1.0 / math.sqrt(w.shape[1])
            nn.init.uniform_(p, -bound, bound)
        elif key.startswith("norm") and key.endswith(".weight"):
            nn.init.ones_(p)
        elif key.startswith("norm") and key.endswith(".bias"):
            nn.init.zeros_(p)
        # anything else (a module activation's parameters) keeps its own init


def _layer_repr(d_model, nhead, dff, norm_first, act, eps, bias, dropout=0.0, batch_first=True) -> str:
    s = f"d_model={d_model}, nhead={nhead}, dim_feedforward={dff}"
    if dropout:
        s += f", dropout={dropout}"
    if act != "relu":
        s += f", activation={act!r}" if isinstance(act, str) else f", activation={type(act).__name__}"
    if norm_first:
        s += ", norm_first=True"
    if eps != 1e-5:
        s += f", layer_norm_eps={eps}"
    if not bias:
        s += ", bias=False"
    if not batch_first:
        s += ", batch_first=False"
    return s


# ---------------------------------------------------------------------------- wrappers
class TransformerEncoderLayer(CoreModel):
    r"""``nn.TransformerEncoderLayer`` as one Sequential2D.

    The whole layer is ``self.core``, a :class:`~seq2d.Sequential2D` of 6 slots
    (post-norm) or 8 slots (pre-norm) iterated ``depth`` (5 or 7) steps; see the module
    docstring for the grid. ``self.slots`` maps slot names (``x, n1, qkv, attn, h, n2,
    f, y``; with dropout also ``sa, fd, ff``: 3 more slots and steps) to indices.

    Args:
        those of ``nn.TransformerEncoderLayer``, read from torch's signature (so a new torch
        keyword reaches the result through :func:`layer_from_torch`'s reading, or is refused
        there), with two defaults of ours: ``dropout=0.0``, not torch's ``0.1`` (a layer has no
        dropout unless asked; :func:`seq2d.from_torch` copies the torch layer's value), and
        ``batch_first=True`` (torch's default is False; :func:`seq2d.from_torch` copies the torch
        layer's layout). ``activation`` is ``"relu"``, ``"gelu"``,
        ``F.relu``, ``F.gelu`` or an ``nn.Module``. Dropout is applied where torch applies it
        (attention weights, attention output, after the feed-forward activation, feed-forward
        output; module docstring), with torch's draws in training mode.

    Shape:
        src ``(*batch, T, d_model)`` -> ``(*batch, T, d_model)`` with ``batch_first=True``;
        ``(T, B, d_model)`` or ``(T, d_model)`` -> the same shape with ``batch_first=False``
        (transposed to batch first at the boundary: module docstring, "Layout").
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()
        cfg, factory_kwargs, _ = layer_config("TransformerEncoderLayer", LAYER_SIGNATURE, args, kwargs)
        d_model, nhead, dim_feedforward, act = cfg["d_model"], cfg["nhead"], cfg["dim_feedforward"], cfg["activation"]
        norm_first, layer_norm_eps, bias, self.dropout = cfg["norm_first"], cfg["layer_norm_eps"], cfg["bias"], cfg["dropout"]
        self.d_model, self.nhead, self.dim_feedforward = d_model, nhead, dim_feedforward
        self.norm_first, self.layer_norm_eps, self.use_bias = bool(norm_first), float(layer_norm_eps), bool(bias)
        self.batch_first = cfg["batch_first"]
        g = _Grid(d_model, factory_kwargs)
        self.slots = g.add_layer(0, d_model, nhead, dim_feedforward, act, self.norm_first, self.layer_norm_eps, self.use_bias,
                                 self.dropout, self.batch_first)
        self.core = g.build(self.slots["y"])
        self._repr = _layer_repr(d_model, nhead, dim_feedforward, self.norm_first, act, self.layer_norm_eps, self.use_bias,
                                 self.dropout, self.batch_first)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's initialisation (xavier in-projection, zero attention biases, nn.Linear defaults)."""
        _reset_like_torch(self.torch_named_parameters())

    def torch_named_parameters(self) -> dict[str, nn.Parameter]:
        """``nn.TransformerEncoderLayer`` parameter name -> the parameter of ``self.core``."""
        return _layer_param_map(self.core, self.slots)

    @property
    def steps(self) -> int:
        return self.core.steps

    @property
    def activation(self) -> nn.Module:
        """The feed-forward activation (the slot activation of ``f``)."""
        return self.core.acts[self.slots["f"]]

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        **unexpected,
    ) -> Tensor:
        if unexpected:
            raise InvalidType(unexpected_keywords("TransformerEncoderLayer.forward", unexpected, (), _LAYER_ARGS,
                                                  takes=f"it takes {', '.join(_LAYER_ARGS)}, as nn.TransformerEncoderLayer"))
        src = _batch_first(src, self.d_model, self.batch_first)
        out = self.core(src, src_mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
        return _batch_first(out, self.d_model, self.batch_first, check=False)

    def extra_repr(self) -> str:
        return self._repr


class TransformerEncoder(CoreModel):
    r"""``nn.TransformerEncoder`` of ``num_layers`` layers as ONE Sequential2D.

    ``self.core`` holds every layer's slots stacked: slot 0 is the input, layer ``l``'s
    output slot is layer ``l + 1``'s input slot, and the optional final LayerNorm is one
    more slot (identity block + LayerNorm activation). ``steps`` = ``num_layers * depth``
    (+1 with the final norm). ``self.layer_slots[l]`` maps layer ``l``'s slot names to
    indices; ``self.norm_slot`` is the final norm's slot or None.

    Unlike ``nn.TransformerEncoder`` (which deep-copies one layer), the layers are
    initialised independently.

    Args:
        num_layers: after ``d_model, nhead``; the other arguments are every layer's, those of
            :class:`TransformerEncoderLayer` (torch's, with ``dropout=0.0`` and
            ``batch_first=True``; ``batch_first=False`` takes ``(T, B, d_model)``, transposed once
            at each end); dropout applies where torch applies it, with torch's draws in training
            mode (the layers run in torch's order).
        final_norm: keyword only; add a final LayerNorm (torch's ``norm=nn.LayerNorm(d_model)``).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()
        what = "TransformerEncoder"
        cfg, factory_kwargs, own = layer_config(what, ENCODER_SIGNATURE, args, kwargs)
        d_model, nhead, dim_feedforward, act = cfg["d_model"], cfg["nhead"], cfg["dim_feedforward"], cfg["activation"]
        norm_first, layer_norm_eps, bias, self.dropout = cfg["norm_first"], cfg["layer_norm_eps"], cfg["bias"], cfg["dropout"]
        num_layers, final_norm = own["num_layers"], own["final_norm"]
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers <= 0:
            raise InvalidValue(f"{what}: num_layers must be a positive int, got {num_layers!r}")
        self.d_model, self.nhead, self.num_layers, self.dim_feedforward = d_model, nhead, num_layers, dim_feedforward
        self.norm_first, self.layer_norm_eps, self.use_bias = bool(norm_first), float(layer_norm_eps), bool(bias)
        self.batch_first = cfg["batch_first"]
        g = _Grid(d_model, factory_kwargs)
        self.layer_slots: list[dict] = []
        x = 0
        for l in range(num_layers):
            a = act if isinstance(act, str) or l == 0 else copy.deepcopy(act)  # each layer its own module
            s = g.add_layer(x, d_model, nhead, dim_feedforward, a, self.norm_first, self.layer_norm_eps, self.use_bias,
                            self.dropout, self.batch_first)
            self.layer_slots.append(s)
            x = s["y"]
        self.norm_slot = None
        if final_norm:
            self.norm_slot = g.slot(d_model, g.layer_norm(d_model, self.layer_norm_eps, self.use_bias))
            g.blocks[(self.norm_slot, x)] = "identity"
            x = self.norm_slot
        self.core = g.build(x)
        self._repr = _layer_repr(d_model, nhead, dim_feedforward, self.norm_first, act, self.layer_norm_eps, self.use_bias,
                                 self.dropout, self.batch_first)
        self._repr = f"num_layers={num_layers}, " + self._repr + (", final_norm=True" if final_norm else "")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_like_torch(self.torch_named_parameters())

    def torch_named_parameters(self) -> dict[str, nn.Parameter]:
        """``nn.TransformerEncoder`` parameter name (``layers.{l}.…``, ``norm.…``) -> our parameter."""
        m: dict[str, nn.Parameter] = {}
        for l, s in enumerate(self.layer_slots):
            m.update(_layer_param_map(self.core, s, prefix=f"layers.{l}."))
        if self.norm_slot is not None:
            for name, p in self.core.acts[self.norm_slot].named_parameters():
                m[f"norm.{name}"] = p
        return m

    @property
    def steps(self) -> int:
        return self.core.steps

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
        **unexpected,
    ) -> Tensor:
        if unexpected:
            raise InvalidType(unexpected_keywords("TransformerEncoder.forward", unexpected, (), _ENCODER_ARGS,
                                                  takes=f"it takes {', '.join(_ENCODER_ARGS)}, as nn.TransformerEncoder"))
        # torch's is_causal=None means "detect whether mask is causal"; a given mask is used
        # as is here, so detection is not needed: None acts as False.
        src = _batch_first(src, self.d_model, self.batch_first)
        out = self.core(src, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return _batch_first(out, self.d_model, self.batch_first, check=False)

    def extra_repr(self) -> str:
        return self._repr


_LAYER_ARGS = ("src", "src_mask", "src_key_padding_mask", "is_causal")
_ENCODER_ARGS = ("src", "mask", "src_key_padding_mask", "is_causal")


def _batch_first(src, d_model: int, batch_first: bool, check: bool = True) -> Tensor:
    """``src`` in the core's layout ``(*batch, T, d_model)`` (checked when ``check``): as it is with
    ``batch_first``, else torch's ``(T, B, d)`` transposed (a view; ``(T, d)`` is unbatched, the
    same in both layouts). The transposition is its own inverse: the output goes back the same way."""
    if check:
        shape = f"(*batch, T, {d_model}) (batch_first=True)" if batch_first else f"(T, B, {d_model}) or (T, {d_model}) " \
                                                                               "(batch_first=False, torch's default)"
        if not isinstance(src, Tensor):
            raise InvalidType(f"src must be a torch.Tensor of shape {shape}, got {type(src).__name__}")
        if src.dim() < 2 or src.shape[-1] != d_model or (not batch_first and src.dim() > 3):
            raise InvalidInput(f"src must have shape {shape}, got {tuple(src.shape)}")
    return src if batch_first or src.dim() == 2 else src.transpose(0, 1)


# ---------------------------------------------------------------------------- constructors
# Their signatures are the classes', i.e. torch's (``inspect.signature`` shows them, and
# ``resolve_model`` binds keyword arguments against them).
@register_model
def transformer_layer(*args, **kwargs) -> TransformerEncoderLayer:
    """A transformer encoder layer as one Sequential2D (see :class:`TransformerEncoderLayer`)."""
    return TransformerEncoderLayer(*args, **kwargs)


@register_model
def transformer_encoder(*args, **kwargs) -> TransformerEncoder:
    """A stack of encoder layers as ONE Sequential2D (see :class:`TransformerEncoder`)."""
    return TransformerEncoder(*args, **kwargs)


TransformerEncoderLayer.__signature__ = transformer_layer.__signature__ = LAYER_SIGNATURE
TransformerEncoder.__signature__ = transformer_encoder.__signature__ = ENCODER_SIGNATURE


# ---------------------------------------------------------------------------- converters
@torch.no_grad()
def _copy_params(ours: dict[str, nn.Parameter], src: nn.Module, what: str) -> None:
    theirs = dict(src.named_parameters())
    if set(ours) != set(theirs):
        missing, extra = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
        raise InvalidValue(
            f"{what}: parameters do not correspond; the torch module has {missing or 'nothing'} not modelled "
            f"here and lacks {extra or 'nothing'}"
        )
    for name, p in ours.items():
        if p.shape != theirs[name].shape:
            raise InvalidValue(f"{what}: {name} has shape {tuple(theirs[name].shape)}, expected {tuple(p.shape)}")
        p.copy_(theirs[name])


def _set_eps(core: Sequential2D, s: dict, layer: nn.TransformerEncoderLayer) -> None:
    norm_first = "n1" in s
    core.acts[s["n1"] if norm_first else s["h"]].eps = layer.norm1.eps
    core.acts[s["n2"] if norm_first else s["y"]].eps = layer.norm2.eps


def layer_from_torch(layer: nn.TransformerEncoderLayer) -> TransformerEncoderLayer:
    """An equal :class:`TransformerEncoderLayer` with the weights of ``layer`` copied (new tensors).

    The result takes ``layer``'s layout (``batch_first``, torch's default False included) and equals ``layer``, on the same device and dtype, in
    eval mode and, with its dropout (copied, e.g. torch's default 0.1), in training mode under
    the same RNG state (module docstring).
    """
    what = "layer_from_torch"
    cfg = torch_layer_config(layer, what)
    ref = layer.linear1.weight
    ours = TransformerEncoderLayer(**cfg, device=ref.device, dtype=ref.dtype)
    _copy_params(ours.torch_named_parameters(), layer, what)
    _set_eps(ours.core, ours.slots, layer)
    return ours.train(layer.training)  # the source's mode: dropout is live in training mode only


def encoder_from_torch(enc: nn.TransformerEncoder) -> TransformerEncoder:
    """An equal :class:`TransformerEncoder` (one Sequential2D) with the weights of ``enc`` copied.

    Every layer must share one configuration (dropout and ``batch_first`` included); ``enc.norm``
    must be None or an ``nn.LayerNorm(d_model)``. Equal to ``enc`` in eval mode and, with its
    dropout, in training mode under the same RNG state.
    """
    what = "encoder_from_torch"
    if not isinstance(enc, nn.TransformerEncoder):
        raise InvalidType(f"{what} expects an nn.TransformerEncoder, got {type(enc).__name__}")
    cfgs = [torch_layer_config(layer, f"{what} (layer {l})") for l, layer in enumerate(enc.layers)]
    if not cfgs:
        raise InvalidValue(f"{what}: the encoder has no layers")
    cfg = cfgs[0]
    key = lambda c: {k: (type(v) if isinstance(v, nn.Module) else v) for k, v in c.items() if k != "layer_norm_eps"}  # noqa: E731
    for l, c in enumerate(cfgs[1:], 1):
        if key(c) != key(cfg):
            raise InvalidValue(f"{what}: layer {l} is configured as {key(c)}, but layer 0 as {key(cfg)}; all layers must match")
    norm = enc.norm
    if norm is not None and not (
        isinstance(norm, nn.LayerNorm) and tuple(norm.normalized_shape) == (cfg["d_model"],) and norm.elementwise_affine
    ):
        raise InvalidValue(f"{what}: enc.norm must be None or an affine nn.LayerNorm({cfg['d_model']}), got {norm!r}")
    if norm is not None and (norm.bias is not None) != cfg["bias"]:
        raise InvalidValue(f"{what}: enc.norm has bias={norm.bias is not None} but the layers have bias={cfg['bias']}")
    ref = enc.layers[0].linear1.weight
    ours = TransformerEncoder(num_layers=len(cfgs), final_norm=norm is not None, **cfg, device=ref.device, dtype=ref.dtype)
    # per-layer module activations (PReLU, ...) are copied from their own layer
    for s, c in zip(ours.layer_slots, cfgs):
        if isinstance(c["activation"], nn.Module):
            ours.core.acts[s["f"]] = c["activation"]
    _copy_params(ours.torch_named_parameters(), enc, what)
    for s, layer in zip(ours.layer_slots, enc.layers):
        _set_eps(ours.core, s, layer)
    if norm is not None:
        ours.core.acts[ours.norm_slot].eps = norm.eps
    return ours.train(enc.training)  # the source's mode: dropout is live in training mode only
