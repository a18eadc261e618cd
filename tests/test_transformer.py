"""The transformer encoder as a Sequential2D, proven equal to torch (outputs and gradients).

Every comparison copies the weights of a torch module (randomised, so that zero-initialised
biases and unit LayerNorm weights cannot hide a wrong mapping), runs both in eval mode with
gradients enabled (so torch takes its plain, non-fused path), and compares the output and the
gradients of a random linear functional of it w.r.t. the input and every parameter.
"""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seq2d.blocks import Identity, LinearBlock
from seq2d.core import Sequential2D
from seq2d.testing import grads_of, view_grad
from seq2d.models.registry import create_model, list_models
from seq2d.models.transformer import (
    AttentionCore,
    TransformerEncoder,
    TransformerEncoderLayer,
    encoder_from_torch,
    layer_from_torch,
    transformer_encoder,
    transformer_layer,
)

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
D, H, FF, T, B = 16, 2, 24, 5, 3
DTYPES = [torch.float32, torch.float64]
DTYPE_IDS = ["f32", "f64"]


# ---------------------------------------------------------------------------- helpers
def _randomise(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter random (nothing left at 0 or 1): matrices U(-1, 1) / sqrt(fan_in) like
    nn.Linear's init, vectors U(-0.5, 0.5), LayerNorm weights 1 + U(-0.5, 0.5)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            u = torch.rand(p.shape, generator=g, dtype=torch.float64) * 2 - 1
            if p.dim() == 2:
                u = u / math.sqrt(p.shape[1])
            else:
                u = u / 2 + (1.0 if "norm" in name and name.endswith("weight") else 0.0)
            p.copy_(u)
    return module.eval()


def _torch_layer(dtype, norm_first=False, activation="relu", bias=True, seed=0, batch_first=True, **kw) -> nn.TransformerEncoderLayer:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.1, activation=activation, batch_first=batch_first, norm_first=norm_first, bias=bias, dtype=dtype,
        **kw
    )
    return _randomise(layer, seed)


def _torch_encoder(dtype, norm_first=False, final_norm=False, num_layers=2, seed=0, activation="relu", batch_first=True):
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, activation=activation, batch_first=batch_first,
                                       norm_first=norm_first, dtype=dtype)
    norm = nn.LayerNorm(D, eps=1e-6, dtype=dtype) if final_norm else None
    enc = nn.TransformerEncoder(layer, num_layers, norm=norm, enable_nested_tensor=False)
    return _randomise(enc, seed)


def _layer_pairs(ours: TransformerEncoderLayer, ref: nn.TransformerEncoderLayer) -> list[tuple[str, nn.Parameter, nn.Parameter]]:
    """(name, our param, torch param), mapped by hand from the grid positions of the brief."""
    c = ours.core
    if ours.dropout:  # the grid with dropout slots (seq2d.models.transformer's docstring)
        if ours.norm_first:  # 0 x, 1 n1, 2 qkv, 3 attn, 4 sa, 5 h, 6 n2, 7 f, 8 fd, 9 ff, 10 y
            qkv, attn, h, f, y, ln1, ln2, src_qkv, src_ff, fd = 2, 3, 4, 7, 9, 1, 6, 1, 6, 8
        else:  # 0 x, 1 qkv, 2 attn, 3 sa, 4 h, 5 f, 6 fd, 7 ff, 8 y
            qkv, attn, h, f, y, ln1, ln2, src_qkv, src_ff, fd = 1, 2, 3, 5, 7, 4, 8, 0, 4, 6
    elif ours.norm_first:  # 0 x, 1 n1, 2 qkv, 3 attn, 4 h, 5 n2, 6 f, 7 y
        qkv, attn, h, f, y, ln1, ln2, src_qkv, src_ff, fd = 2, 3, 4, 6, 7, 1, 5, 1, 5, 6
    else:  # 0 x, 1 qkv, 2 attn, 3 h, 4 f, 5 y
        qkv, attn, h, f, y, ln1, ln2, src_qkv, src_ff, fd = 1, 2, 3, 4, 5, 3, 5, 0, 3, 4
    mine = {
        "self_attn.in_proj_weight": c.block(qkv, src_qkv).weight,
        "self_attn.in_proj_bias": c.bias(qkv),
        "self_attn.out_proj.weight": c.block(h, attn).weight,
        "self_attn.out_proj.bias": c.bias(h),
        "linear1.weight": c.block(f, src_ff).weight,
        "linear1.bias": c.bias(f),
        "linear2.weight": c.block(y, fd).weight,
        "linear2.bias": c.bias(y),
        "norm1.weight": c.acts[ln1].weight,
        "norm1.bias": c.acts[ln1].bias,
        "norm2.weight": c.acts[ln2].weight,
        "norm2.bias": c.acts[ln2].bias,
    }
    mine.update({f"activation.{n}": p for n, p in c.acts[f].named_parameters()})
    theirs = dict(ref.named_parameters())
    mine = {k: v for k, v in mine.items() if v is not None}
    assert set(mine) == set(theirs), (sorted(mine), sorted(theirs))
    return [(k, mine[k], theirs[k]) for k in sorted(theirs)]


def _encoder_pairs(ours: TransformerEncoder, ref: nn.TransformerEncoder):
    mine = ours.torch_named_parameters()
    theirs = dict(ref.named_parameters())
    assert set(mine) == set(theirs), (sorted(mine), sorted(theirs))
    return [(k, mine[k], theirs[k]) for k in sorted(theirs)]


def _compare(ours, ref, pairs, x, kw_ours, kw_ref=None, seed=1) -> dict[str, float]:
    """Max abs errors of output, input gradient and each parameter gradient."""
    kw_ref = kw_ours if kw_ref is None else kw_ref
    xo = x.detach().clone().requires_grad_(True)
    xr = x.detach().clone().requires_grad_(True)
    out_o, out_r = ours(xo, **kw_ours), ref(xr, **kw_ref)
    assert out_o.shape == out_r.shape and out_o.dtype == out_r.dtype
    assert torch.isfinite(out_r).all()
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out_r.shape, generator=g, dtype=torch.float64).to(out_r.dtype)
    go = grads_of((out_o * w).sum(), [xo] + [p for _, p, _ in pairs])
    gr = torch.autograd.grad((out_r * w).sum(), [xr] + [q for _, _, q in pairs])
    errs = {"output": float((out_o - out_r).detach().abs().max()), "grad_input": float((go[0] - gr[0]).abs().max())}
    for (name, _, _), a, b in zip(pairs, go[1:], gr[1:]):
        errs[name] = float((a - b).abs().max())
    return errs


def _assert_close(errs: dict[str, float], dtype) -> None:
    bad = {k: v for k, v in errs.items() if not v <= TOL[dtype]}
    assert not bad, f"errors above {TOL[dtype]:g} for {dtype}: {bad}"


def _masks(case: str, dtype) -> dict:
    g = torch.Generator().manual_seed(7)
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=dtype)
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[0, -1] = kpm[2, -3:] = True  # trailing padding; position 0 never padded, so no row is fully masked
    kpm_float = torch.zeros(B, T, dtype=dtype).masked_fill(kpm, float("-inf"))
    bool_mask = torch.rand(T, T, generator=g) < 0.4
    bool_mask.fill_diagonal_(False)  # every query keeps itself
    return {
        "none": {},
        "causal": {"src_mask": causal},
        "causal_hint": {"src_mask": causal, "is_causal": True},
        "bool": {"src_mask": bool_mask},
        "kpm": {"src_key_padding_mask": kpm},
        "kpm_causal": {"src_mask": causal, "src_key_padding_mask": kpm_float},
        "kpm_bool": {"src_mask": bool_mask, "src_key_padding_mask": kpm},
        "per_head_float": {"src_mask": torch.randn(B * H, T, T, generator=g, dtype=torch.float64).to(dtype)},
    }[case]


MASKS = ["none", "causal", "causal_hint", "bool", "kpm", "kpm_causal", "kpm_bool", "per_head_float"]


def _x(dtype, *shape, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*(shape or (B, T, D)), generator=g, dtype=torch.float64).to(dtype)


# ---------------------------------------------------------------------------- equality with torch
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_layer_matches_torch(norm_first, activation, mask, dtype):
    ref = _torch_layer(dtype, norm_first, activation)
    ours = layer_from_torch(ref)
    errs = _compare(ours, ref, _layer_pairs(ours, ref), _x(dtype), _masks(mask, dtype))
    _assert_close(errs, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_layer_without_bias_matches_torch(norm_first, dtype):
    ref = _torch_layer(dtype, norm_first, bias=False)
    ours = layer_from_torch(ref)
    assert not ours.use_bias and len(ours.core.biases) == 0
    errs = _compare(ours, ref, _layer_pairs(ours, ref), _x(dtype), _masks("kpm_causal", dtype))
    _assert_close(errs, dtype)


@pytest.mark.parametrize(
    "activation",
    [F.gelu, F.relu, nn.GELU(approximate="tanh"), nn.SiLU(), nn.PReLU()],
    ids=["F.gelu", "F.relu", "GELU_tanh", "SiLU", "PReLU"],
)
def test_layer_activation_callables_and_modules(activation):
    dtype = torch.float64
    ref = _torch_layer(dtype, activation=copy.deepcopy(activation).to(dtype) if isinstance(activation, nn.Module) else activation)
    ours = layer_from_torch(ref)
    f = ours.slots["f"]
    assert ours.activation is ours.core.acts[f]
    if activation is F.gelu:
        assert isinstance(ours.core.acts[f], nn.GELU) and ours.core.acts[f].approximate == "none"
    if activation is F.relu:
        assert isinstance(ours.core.acts[f], nn.ReLU)
    if isinstance(activation, nn.Module):  # copied, not shared
        assert type(ours.core.acts[f]) is type(activation) and ours.core.acts[f] is not ref.activation
    errs = _compare(ours, ref, _layer_pairs(ours, ref), _x(dtype), _masks("causal", dtype))
    _assert_close(errs, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mask", ["none", "kpm_causal", "bool"])
@pytest.mark.parametrize("final_norm", [False, True], ids=["no_final_norm", "final_norm"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_matches_torch(norm_first, final_norm, mask, dtype):
    ref = _torch_encoder(dtype, norm_first, final_norm)
    ours = encoder_from_torch(ref)
    kw = _masks(mask, dtype)
    kw = {("mask" if k == "src_mask" else k): v for k, v in kw.items()}
    errs = _compare(ours, ref, _encoder_pairs(ours, ref), _x(dtype), kw)
    _assert_close(errs, dtype)


def test_encoder_causal_detection_and_hint():
    dtype = torch.float64
    ref = _torch_encoder(dtype, num_layers=3)
    ours = encoder_from_torch(ref)
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=dtype)
    pairs = _encoder_pairs(ours, ref)
    for kw in ({"mask": causal}, {"mask": causal, "is_causal": True}, {"mask": causal, "is_causal": False}):
        _assert_close(_compare(ours, ref, pairs, _x(dtype), kw), dtype)
    # is_causal=True with no mask: torch needs the mask; here a causal mask is built
    _assert_close(_compare(ours, ref, pairs, _x(dtype), {"is_causal": True}, {"mask": causal}), dtype)


def test_encoder_with_module_activation_copies_each_layer():
    dtype = torch.float64
    ref = _torch_encoder(dtype, activation=nn.PReLU(dtype=dtype))
    ours = encoder_from_torch(ref)
    acts = [ours.core.acts[s["f"]] for s in ours.layer_slots]
    assert acts[0] is not acts[1]
    assert torch.equal(acts[0].weight, ref.layers[0].activation.weight)  # copied through: bitwise
    assert torch.equal(acts[1].weight, ref.layers[1].activation.weight)
    assert not torch.equal(acts[0].weight, acts[1].weight)  # each layer's own value
    _assert_close(_compare(ours, ref, _encoder_pairs(ours, ref), _x(dtype), {}), dtype)


def test_layer_is_causal_without_mask_builds_causal_mask():
    dtype = torch.float64
    ref = _torch_layer(dtype)
    ours = layer_from_torch(ref)
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=dtype)
    pairs = _layer_pairs(ours, ref)
    _assert_close(_compare(ours, ref, pairs, _x(dtype), {"is_causal": True}, {"src_mask": causal}), dtype)
    kpm = _masks("kpm", dtype)["src_key_padding_mask"]
    _assert_close(
        _compare(ours, ref, pairs, _x(dtype), {"is_causal": True, "src_key_padding_mask": kpm},
                 {"src_mask": torch.isinf(causal), "src_key_padding_mask": kpm}),
        dtype,
    )


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_fully_masked_query_row_matches_torch(norm_first):
    """Left padding + causal: query 0 of sequence 0 sees no key; both sides call SDPA."""
    dtype = torch.float64
    ref = _torch_encoder(dtype, norm_first)
    ours = encoder_from_torch(ref)
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[0, :2] = True
    kw = {"mask": nn.Transformer.generate_square_subsequent_mask(T, dtype=dtype),
          "src_key_padding_mask": torch.zeros(B, T, dtype=dtype).masked_fill(kpm, float("-inf"))}
    _assert_close(_compare(ours, ref, _encoder_pairs(ours, ref), _x(dtype), kw), dtype)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_unbatched_and_extra_batch_dims(norm_first):
    dtype = torch.float64
    ref = _torch_layer(dtype, norm_first)
    ours = layer_from_torch(ref)
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=dtype)
    x = _x(dtype, T, D)  # unbatched (T, d), as torch allows
    _assert_close(_compare(ours, ref, _layer_pairs(ours, ref), x, {"src_mask": causal}), dtype)
    x4 = _x(dtype, 2, B, T, D)  # (*batch, T, d) with two batch dims == torch on the flattened batch
    kpm = torch.zeros(2, B, T, dtype=torch.bool)
    kpm[1, 0, -2:] = True
    with torch.no_grad():
        got = ours(x4, src_key_padding_mask=kpm)
        want = ref(x4.reshape(2 * B, T, D), src_key_padding_mask=kpm.reshape(2 * B, T))
    assert (got.reshape(2 * B, T, D) - want).abs().max() <= TOL[dtype]


def test_matches_torch_fast_path_under_no_grad():
    """Under no_grad in eval mode torch uses its fused kernel; we still agree (float32)."""
    dtype = torch.float32
    ref = _torch_layer(dtype)
    ours = layer_from_torch(ref)
    with torch.no_grad():
        for kw in ({}, {"src_key_padding_mask": _masks("kpm", dtype)["src_key_padding_mask"]}):
            assert (ours(_x(dtype), **kw) - ref(_x(dtype), **kw)).abs().max() <= TOL[dtype]


def test_attention_core_against_explicit_formula():
    """softmax(q k^T / sqrt(d_head) + mask) v per head, written out (independent of SDPA)."""
    dtype = torch.float64
    core = AttentionCore(D, H)
    dh = D // H
    x = _x(dtype, B, T, 3 * D)
    bool_mask = _masks("bool", dtype)["src_mask"]
    kpm = _masks("kpm", dtype)["src_key_padding_mask"]
    out = core(x, src_mask=bool_mask, src_key_padding_mask=kpm)
    q, k, v = x.split(D, dim=-1)
    heads = []
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        s = q[..., sl] @ k[..., sl].transpose(-1, -2) / math.sqrt(dh)  # (B, T, T)
        s = s.masked_fill(bool_mask, float("-inf")).masked_fill(kpm[:, None, :], float("-inf"))
        heads.append(torch.softmax(s, dim=-1) @ v[..., sl])
    want = torch.cat(heads, dim=-1)
    assert out.shape == (B, T, D)
    assert (out - want).abs().max() <= 1e-12
    # mask alias and float masks give the same; no mask and is_causal=True == causal mask
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=dtype)
    assert torch.equal(core(x, mask=causal), core(x, src_mask=causal))  # one path, two keyword names: bitwise
    assert (core(x, is_causal=True) - core(x, src_mask=causal)).abs().max() <= 1e-12
    float_mask = torch.zeros(T, T, dtype=dtype).masked_fill(bool_mask, float("-inf"))
    assert (core(x, src_mask=float_mask) - core(x, src_mask=bool_mask)).abs().max() <= 1e-12
    # a model passes each block only the context keys it declares; a key no block reads is refused
    assert core.context_keys == ("src_mask", "mask", "src_key_padding_mask", "is_causal")
    with pytest.raises(TypeError, match="unexpected keyword argument 'unrelated_context'"):
        core(x, unrelated_context=1)


# ---------------------------------------------------------------------------- structure
def _expected_layer_grid(norm_first: bool):
    if norm_first:
        sizes = [D, D, 3 * D, D, D, D, FF, D]
        identity = {(1, 0), (4, 0), (5, 4), (7, 4)}
        linear = {(2, 1): (D, 3 * D), (4, 3): (D, D), (6, 5): (D, FF), (7, 6): (FF, D)}
        module = (3, 2)
        norms, biased, f = [1, 5], [2, 4, 6, 7], 6
    else:
        sizes = [D, 3 * D, D, D, FF, D]
        identity = {(3, 0), (5, 3)}
        linear = {(1, 0): (D, 3 * D), (3, 2): (D, D), (4, 3): (D, FF), (5, 4): (FF, D)}
        module = (2, 1)
        norms, biased, f = [3, 5], [1, 3, 4, 5], 4
    return sizes, identity, linear, module, norms, biased, f


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_layer_grid_structure(norm_first):
    ours = transformer_layer(D, H, FF, activation="gelu", norm_first=norm_first, layer_norm_eps=1e-6)
    c = ours.core
    assert isinstance(c, Sequential2D)
    sizes, identity, linear, module, norms, biased, f = _expected_layer_grid(norm_first)
    assert list(c.sizes) == sizes
    kinds = {(i, j): (kind, blk) for i, j, kind, blk in c.positions()}
    assert {p for p, (k, _) in kinds.items() if k == "module"} == {module}
    assert isinstance(kinds[module][1], AttentionCore)
    assert (kinds[module][1].d_model, kinds[module][1].nhead) == (D, H)
    assert {p for p, (k, _) in kinds.items() if k == "identity"} == identity
    assert all(isinstance(kinds[p][1], Identity) for p in identity)
    assert {p for p, (k, _) in kinds.items() if k == "linear"} == set(linear)
    for p, (fin, fout) in linear.items():
        blk = kinds[p][1]
        assert isinstance(blk, LinearBlock) and (blk.in_features, blk.out_features) == (fin, fout)
        assert blk.mask is None and blk.frozen is None
    assert sorted(int(k) for k in c.biases) == biased
    for i in range(c.n):
        if i in norms:
            assert isinstance(c.acts[i], nn.LayerNorm) and c.acts[i].eps == 1e-6
        elif i == f:
            assert isinstance(c.acts[i], nn.GELU)
        else:
            assert isinstance(c.acts[i], nn.Identity)
    assert c.inputs == (0,) and c.outputs == (c.n - 1,) and c.held() == (0,)
    assert c.depth == (7 if norm_first else 5) and c.steps == c.depth == ours.steps
    assert "AttentionCore(d_model=16, nhead=2)" in repr(ours)


@pytest.mark.parametrize("final_norm", [False, True], ids=["no_final_norm", "final_norm"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_grid_structure(norm_first, final_norm):
    L = 3
    ours = transformer_encoder(D, H, L, FF, norm_first=norm_first, final_norm=final_norm)
    c = ours.core
    per = 7 if norm_first else 5
    assert c.n == 1 + L * per + final_norm
    assert c.depth == c.steps == ours.steps == L * per + final_norm
    cores = [blk for _, _, kind, blk in c.positions() if kind == "module"]
    assert len(cores) == L and all(isinstance(b, AttentionCore) for b in cores)
    assert ours.layer_slots[0]["x"] == 0
    for l in range(L - 1):
        assert ours.layer_slots[l + 1]["x"] == ours.layer_slots[l]["y"]
    last = ours.layer_slots[-1]["y"]
    if final_norm:
        assert ours.norm_slot == c.n - 1 and isinstance(c.acts[c.n - 1], nn.LayerNorm)
        assert isinstance(c.block(c.n - 1, last), Identity) and c.bias(c.n - 1) is None
    else:
        assert ours.norm_slot is None and last == c.n - 1
    assert c.outputs == (c.n - 1,) and c.held() == (0,)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_num_parameters_equals_torch(norm_first, bias):
    ref = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, norm_first=norm_first, bias=bias)
    ours = transformer_layer(D, H, FF, norm_first=norm_first, bias=bias)
    n_ref = sum(p.numel() for p in ref.parameters())
    assert ours.num_parameters() == ours.core.num_parameters() == n_ref
    assert sum(p.numel() for p in ours.parameters()) == n_ref
    enc = nn.TransformerEncoder(ref, 2, norm=nn.LayerNorm(D, bias=bias), enable_nested_tensor=False)
    ours_enc = transformer_encoder(D, H, 2, FF, norm_first=norm_first, final_norm=True, bias=bias)
    assert ours_enc.num_parameters() == sum(p.numel() for p in enc.parameters())


def test_converters_copy_parameters():
    ref = _torch_encoder(torch.float32, final_norm=True)
    ours = encoder_from_torch(ref)
    layer = layer_from_torch(ref.layers[0])
    ptrs = {p.data_ptr() for p in ref.parameters()}
    assert not ptrs & {p.data_ptr() for p in ours.parameters()}
    assert not ptrs & {p.data_ptr() for p in layer.parameters()}
    before = ours.torch_named_parameters()["layers.0.self_attn.in_proj_weight"].detach().clone()
    with torch.no_grad():
        ref.layers[0].self_attn.in_proj_weight.add_(1.0)
    assert torch.equal(ours.torch_named_parameters()["layers.0.self_attn.in_proj_weight"], before)  # untouched
    assert ours.core.acts[ours.norm_slot].eps == 1e-6  # enc.norm's eps, not the layers'


def test_fresh_model_init_dtype_and_gradients_reach_every_parameter():
    ours = transformer_encoder(D, H, 2, FF, norm_first=True, final_norm=True, dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in ours.parameters())
    named = ours.torch_named_parameters()
    bases = {id(p if p._base is None else p._base) for p in named.values()}  # views into the stores
    assert bases == {id(p) for p in ours.parameters()}  # the map covers every parameter
    assert torch.all(named["layers.0.self_attn.in_proj_bias"] == 0)  # torch's init
    assert torch.all(named["layers.1.norm2.weight"] == 1)
    assert not torch.equal(named["layers.0.linear1.weight"], named["layers.1.linear1.weight"])
    x = _x(torch.float64)
    ours(x, mask=nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)).square().sum().backward()
    for name, p in named.items():
        g = view_grad(p)
        assert g is not None and torch.isfinite(g).all(), name


def test_registry_state_dict_and_pickle():
    assert {"transformer_layer", "transformer_encoder"} <= set(list_models())
    layer = create_model("transformer_layer", d_model=16, nhead=2, dim_feedforward=32)
    assert isinstance(layer, TransformerEncoderLayer) and layer.d_model == 16
    enc = create_model("transformer_encoder", d_model=8, nhead=2, num_layers=2, dim_feedforward=16, norm_first=True)
    assert isinstance(enc, TransformerEncoder) and enc.num_layers == 2
    x = _x(torch.float32, B, T, 16)
    other = transformer_layer(16, 2, 32)
    other.load_state_dict(layer.state_dict())
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    with torch.no_grad():
        # bitwise: copies of one model (state_dict, pickle) run the same kernels
        assert torch.equal(other(x), layer(x)) and torch.equal(loaded(x), layer(x))
        assert torch.allclose(layer.double()(x.double()), layer(x.double()))


# ---------------------------------------------------------------------------- torch's default layout
@pytest.mark.parametrize("mask", ["none", "kpm_causal", "per_head_float"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_batch_first_false_layer_matches_torch(norm_first, mask):
    """torch's default layout (T, B, d), issue 31: it used to be refused; now the layer is
    transposed to batch first at the boundary and equals torch's (outputs and gradients)."""
    dtype = torch.float64
    ref = _torch_layer(dtype, norm_first, batch_first=False)
    ours = layer_from_torch(ref)
    assert ours.batch_first is False and "batch_first=False" in repr(ours)
    x = _x(dtype, T, B, D)  # (T, B, d); the masks are the same in both layouts
    _assert_close(_compare(ours, ref, _layer_pairs(ours, ref), x, _masks(mask, dtype)), dtype)
    _assert_close(_compare(ours, ref, _layer_pairs(ours, ref), _x(dtype, T, D), {}), dtype)  # unbatched (T, d)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_batch_first_false_encoder_matches_torch(norm_first):
    dtype = torch.float64
    ref = _torch_encoder(dtype, norm_first, final_norm=True, batch_first=False)
    ours = encoder_from_torch(ref)
    assert ours.batch_first is False
    kw = _masks("kpm_causal", dtype)
    kw = {("mask" if k == "src_mask" else k): v for k, v in kw.items()}
    _assert_close(_compare(ours, ref, _encoder_pairs(ours, ref), _x(dtype, T, B, D), kw), dtype)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_batch_first_false_in_training_mode_draws_torchs_dropout(norm_first):
    """In torch's layout every dropout draws in (T, B) memory order: the converted layer and
    encoder draw the same masks from the same RNG state."""
    dtype = torch.float64
    x = _x(dtype, T, B, D)
    ref = _torch_layer(dtype, norm_first, batch_first=False).train()
    (yo, go), (yr, gr) = _train_pair(layer_from_torch(ref), ref, x, {}, 5)
    assert (yo - yr).abs().max() <= TOL[dtype] and (go - gr).abs().max() <= TOL[dtype]
    assert (ref.eval()(x) - yr).abs().max() > 1e-3  # dropout really was live
    enc = _torch_encoder(dtype, norm_first, num_layers=3, batch_first=False).train()
    (yo, go), (yr, gr) = _train_pair(encoder_from_torch(enc), enc, x, {}, 9)
    assert (yo - yr).abs().max() <= TOL[dtype] and (go - gr).abs().max() <= TOL[dtype]


def test_batch_first_false_constructors_and_shapes():
    layer = transformer_layer(D, H, FF, batch_first=False)
    enc = transformer_encoder(D, H, 2, FF, batch_first=False)
    assert layer.batch_first is False and enc.batch_first is False and "batch_first=False" in repr(enc)
    assert "batch_first" not in repr(transformer_layer(D, H, FF))  # seq2d's default: True
    x = _x(torch.float32, T, B, D)
    with torch.no_grad():
        for m in (layer, enc):
            assert m(x).shape == (T, B, D)
            m.batch_first = True  # the same core, batch first: the transposed input gives the transposed output
            torch.testing.assert_close(m(x.transpose(0, 1)).transpose(0, 1), (setattr(m, "batch_first", False), m(x))[1])
    with pytest.raises(RuntimeError, match=r"\(T, B, 16\) or \(T, 16\) \(batch_first=False"):
        layer(_x(torch.float32, 2, T, B, D))  # torch's layout has one batch dim
    with pytest.raises(TypeError, match="batch_first must be a bool"):
        transformer_layer(D, H, FF, batch_first="no")


# ---------------------------------------------------------------------------- errors
def test_converter_refuses_other_modules():
    with pytest.raises(TypeError, match="nn.TransformerEncoderLayer"):
        layer_from_torch(nn.Linear(2, 2))


def test_d_model_not_divisible_by_nhead_raises():
    for make in (lambda: transformer_layer(10, 3), lambda: transformer_encoder(10, 3, 2), lambda: AttentionCore(10, 3)):
        with pytest.raises(ValueError, match=r"d_model \(10\).*nhead \(3\)"):
            make()
    with pytest.raises(ValueError, match="nhead"):
        transformer_layer(16, 0)
    with pytest.raises(ValueError, match="num_layers"):
        transformer_encoder(16, 2, 0)


def test_bad_activation_raises():
    with pytest.raises(ValueError, match="'relu', 'gelu'"):
        transformer_layer(D, H, activation="tanh")
    with pytest.raises(ValueError, match="unsupported activation callable"):
        transformer_layer(D, H, activation=lambda t: t * 2)
    with pytest.raises(ValueError, match="unsupported activation callable"):
        layer_from_torch(_torch_layer(torch.float32, activation=torch.tanh))
    with pytest.raises(TypeError, match="activation"):
        transformer_layer(D, H, activation=3)


def test_bad_inputs_and_masks_raise():
    ours = transformer_layer(D, H, FF)
    x = _x(torch.float32)
    with pytest.raises(RuntimeError, match=r"\(\*batch, T, 16\)"):
        ours(torch.randn(B, T, D + 1))
    with pytest.raises(TypeError, match="src"):
        ours([1.0])
    with pytest.raises(RuntimeError, match="src_mask must have shape"):
        ours(x, src_mask=torch.zeros(T, T + 1))
    with pytest.raises(TypeError, match="torch.bool or a floating-point"):
        ours(x, src_mask=torch.zeros(T, T, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="src_key_padding_mask must have shape"):
        ours(x, src_key_padding_mask=torch.zeros(B, T + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="not both"):
        AttentionCore(D, H)(torch.randn(B, T, 3 * D), src_mask=torch.zeros(T, T), mask=torch.zeros(T, T))
    with pytest.raises(ValueError, match="all layers must match"):
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF, batch_first=True), 2, enable_nested_tensor=False)
        enc.layers[1].norm_first = True
        encoder_from_torch(enc)


# ---------------------------------------------------------------------------- dropout (issue 18)
def _train_pair(ours, ref, x, kw, seed):
    """(ours, torch) outputs and input gradients in training mode from the same RNG state."""
    outs = []
    for m in (ours, ref):
        xi = x.detach().clone().requires_grad_(True)
        torch.manual_seed(seed)
        y = m(xi, **kw)
        (g,) = torch.autograd.grad((y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view(y.shape)).sum(), [xi])
        outs.append((y.detach(), g))
    return outs


@pytest.mark.parametrize("shape", [(B, T, D), (T, D)], ids=["batched", "unbatched"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_converted_layer_in_training_mode_draws_torchs_dropout(norm_first, shape):
    """torch's default dropout=0.1 used to be dropped silently in training mode: now every dropout
    sits where torch applies it and draws torch's mask from the same RNG state."""
    dtype = torch.float64
    ref = _torch_layer(dtype, norm_first).train()  # dropout=0.1, torch's default
    ours = layer_from_torch(ref)
    assert ours.training and ours.dropout == 0.1 and {"sa", "fd", "ff"} <= set(ours.slots)
    x = _x(dtype, *shape)
    (yo, go), (yr, gr) = _train_pair(ours, ref, x, {"src_mask": nn.Transformer.generate_square_subsequent_mask(T, dtype=dtype)}, 5)
    assert (yo - yr).abs().max() <= TOL[dtype] and (go - gr).abs().max() <= TOL[dtype]
    (y2, _), _ = _train_pair(ours, ref, x, {}, 6)
    assert (y2 - yr).abs().max() > 1e-3  # another draw (and no mask): another output
    assert (ref.eval()(x) - yr).abs().max() > 1e-3  # dropout really was live


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_converted_encoder_in_training_mode_draws_torchs_dropout(norm_first):
    dtype = torch.float32
    ref = _torch_encoder(dtype, norm_first, final_norm=True, num_layers=3).train()
    ours = encoder_from_torch(ref)
    assert ours.training and ours.dropout == 0.1
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, -2:] = True
    (yo, go), (yr, gr) = _train_pair(ours, ref, _x(dtype), {"src_key_padding_mask": kpm}, 11)
    assert (yo - yr).abs().max() <= TOL[dtype] and (go - gr).abs().max() <= TOL[dtype]


def test_dropout_of_the_constructors():
    x = _x(torch.float32)
    m = TransformerEncoderLayer(D, H, FF, dropout=0.5)
    assert m.steps == 8 and "dropout=0.5" in repr(m) and m.core.block(m.slots["attn"], m.slots["qkv"]).dropout == 0.5
    assert not torch.equal(m(x), m(x))  # training mode: fresh masks
    m.eval()
    assert torch.equal(m(x), m(x))
    assert TransformerEncoderLayer(D, H, FF).steps == 5  # no dropout: the 6-slot grid
    enc = create_model("transformer_encoder", d_model=D, nhead=H, num_layers=2, dim_feedforward=FF, dropout=0.2)
    assert enc.dropout == 0.2 and enc.steps == 16
    for bad, exc in ((1.5, ValueError), (-0.1, ValueError), ("0.1", TypeError), (True, TypeError)):
        with pytest.raises(exc, match=r"TransformerEncoderLayer: dropout must be"):
            TransformerEncoderLayer(D, H, FF, dropout=bad)


def test_layer_with_unequal_dropouts_is_refused():
    ref = _torch_layer(torch.float32)
    ref.dropout2 = nn.Dropout(0.3)
    with pytest.raises(ValueError, match=r"the layer's dropouts must be nn.Dropout modules of one probability.*"
                                         r"'dropout2': 0.3"):
        layer_from_torch(ref)


# ---------------------------------------------------------------------------- torch's signature
def test_constructors_take_torchs_keywords_and_name_an_unknown_one():
    """The constructors take nn.TransformerEncoderLayer's own signature (read from torch, not
    restated): a torch keyword reaches the result, an unknown one is a TypeError naming it."""
    import inspect

    torch_names = set(inspect.signature(nn.TransformerEncoderLayer).parameters)
    assert set(inspect.signature(transformer_layer).parameters) == torch_names
    assert set(inspect.signature(TransformerEncoder).parameters) == torch_names | {"num_layers", "final_norm"}
    layer = transformer_layer(D, H, FF, norm_first=True, activation="gelu", layer_norm_eps=1e-3, bias=False)
    assert layer.norm_first and layer.layer_norm_eps == 1e-3 and not layer.use_bias and layer.steps == 7
    assert layer.core.acts[layer.slots["n1"]].eps == 1e-3 and layer.core.acts[layer.slots["n1"]].bias is None
    assert isinstance(layer.activation, nn.GELU)
    enc = transformer_encoder(D, H, 2, FF, norm_first=True, layer_norm_eps=1e-4, final_norm=True)
    assert all(enc.core.acts[s["n2"]].eps == 1e-4 for s in enc.layer_slots) and enc.norm_slot is not None
    # the same layer from torch's constructor with the same keywords: the same configuration
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", layer_norm_eps=1e-3, batch_first=True,
                                     norm_first=True, bias=False)
    assert repr(layer_from_torch(ref)) == repr(layer)
    for make in (lambda: transformer_layer(D, H, FF, norm_frist=True), lambda: TransformerEncoder(D, H, 2, norm_frist=True),
                 lambda: create_model("transformer_layer", d_model=D, nhead=H, norm_frist=True)):
        with pytest.raises(TypeError, match="unexpected keyword argument 'norm_frist'"):
            make()
    assert transformer_layer(D, H, FF, batch_first=False).batch_first is False  # torch's layout: taken (issue 31)
