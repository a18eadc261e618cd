"""Malformed models and calls (issue 11): every one is refused with the exact Seq2DError subclass
and a message naming the place (slot i, block F[i][j], the argument), or, for the degenerate
models of docs/concepts.md ("Malformed models and calls"), warned about. Nothing listed here is
silently accepted."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import seq2d
from seq2d import ContextModule, LinearBlock, Sequential2D
from seq2d.attention import AttentionCore
from seq2d.errors import InvalidIndex, InvalidInput, InvalidType, InvalidValue, Seq2DError
from seq2d.core.reference import reference_forward
from seq2d.core.sequence import step_loop

I64 = torch.int64
NO_CUDA_99 = r"device 'cuda:99' (is not available|does not exist)"


def lin(i, o, **kw):
    return LinearBlock(i, o, **kw)


def S2D(sizes=(3, 2), blocks=None, **kw):
    return Sequential2D(list(sizes), {(1, 0): lin(3, 2)} if blocks is None else blocks, **kw)


def _no_warn(fn):
    """Run ``fn`` with every UserWarning an error (a malformed case must raise, not warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        return fn()


# ----------------------------------------------------------------------------- constructors
CONSTRUCTORS = {
    # mlp
    "mlp one size": (lambda: seq2d.mlp([3]), InvalidValue, r"at least two sizes"),
    "mlp zero size": (lambda: seq2d.mlp([3, 0]), InvalidValue, r"sizes\[1\] must be a positive int, got 0"),
    "mlp sizes str": (lambda: seq2d.mlp("3,2"), InvalidType, r"sizes must be a sequence"),
    "mlp activation": (lambda: seq2d.mlp([3, 4, 2], activation="relux"), InvalidValue,
                       r"Unknown activation 'relux' for slot 1"),
    "mlp bias": (lambda: seq2d.mlp([3, 2], bias="yes"), InvalidType, r"mlp: bias must be a bool"),
    "mlp int dtype": (lambda: seq2d.mlp([3, 2], dtype=I64), InvalidType, r"mlp: dtype must be a floating-point"),
    "mlp str dtype": (lambda: seq2d.mlp([3, 2], dtype="float32"), InvalidType, r"mlp: dtype must be a floating-point"),
    "mlp device gpu": (lambda: seq2d.mlp([3, 2], device="gpu"), InvalidValue, r"mlp: device 'gpu' is not a valid device"),
    "mlp device float": (lambda: seq2d.mlp([3, 2], device=1.5), InvalidType, r"mlp: device must be"),
    "mlp device cuda:99": (lambda: seq2d.mlp([3, 2], device="cuda:99"), InvalidValue, NO_CUDA_99),
    # from_mask
    "from_mask empty block mask": (lambda: seq2d.from_mask([3, 4, 2], torch.zeros(3, 3, dtype=torch.bool)),
                                   InvalidValue, r"from_mask: mask has no True entry"),
    "from_mask empty element mask": (lambda: seq2d.from_mask([3, 4], torch.zeros(7, 7, dtype=torch.bool)),
                                     InvalidValue, r"from_mask: mask has no True entry"),
    "from_mask float mask": (lambda: seq2d.from_mask([3, 4], torch.ones(2, 2)), InvalidType, r"mask must have dtype torch.bool"),
    "from_mask 3-D mask": (lambda: seq2d.from_mask([3, 4], torch.ones(2, 2, 2, dtype=torch.bool)), InvalidValue,
                           r"mask must be 2-D"),
    "from_mask mask shape": (lambda: seq2d.from_mask([3, 4], torch.ones(5, 5, dtype=torch.bool)), InvalidValue,
                             r"block mask of shape \(2, 2\) or an element mask of shape \(7, 7\)"),
    "from_mask seed float": (lambda: seq2d.from_mask([3, 4], seed=1.5), InvalidType, r"from_mask: seed must be an int"),
    "from_mask seed str": (lambda: seq2d.from_mask([3, 4], seed="3"), InvalidType, r"from_mask: seed must be an int"),
    "from_mask seed bool": (lambda: seq2d.from_mask([3, 4], seed=True), InvalidType, r"from_mask: seed must be an int"),
    "from_mask seed huge": (lambda: seq2d.from_mask([3, 4], seed=2**70), InvalidValue, r"from_mask: seed must lie in"),
    "from_mask outputs empty": (lambda: seq2d.from_mask([3, 4], outputs=[]), InvalidValue,
                                r"outputs must name at least one slot"),
    "from_mask inputs empty": (lambda: seq2d.from_mask([3, 4], inputs=[]), InvalidValue,
                               r"inputs must name at least one slot"),
    "from_mask outputs missing slot": (lambda: seq2d.from_mask([3, 4], outputs=[7]), InvalidIndex,
                                       r"outputs: slot 7 does not exist"),
    "from_mask inputs twice": (lambda: seq2d.from_mask([3, 4], inputs=[0, 0]), InvalidValue, r"inputs lists a slot twice"),
    "from_mask steps negative": (lambda: seq2d.from_mask([3, 4], steps=-1), InvalidValue, r"steps must be a non-negative"),
    "from_mask steps float": (lambda: seq2d.from_mask([3, 4], steps=1.5), InvalidType, r"steps must be a non-negative int"),
    "from_mask store": (lambda: seq2d.from_mask([3, 4], store="gpu"), InvalidValue, r"Unknown store 'gpu'"),
    "from_mask int dtype": (lambda: seq2d.from_mask([3, 4], dtype=torch.int32), InvalidType, r"from_mask: dtype"),
    "from_mask device": (lambda: seq2d.from_mask([3, 4], device="gpu"), InvalidValue, r"from_mask: device 'gpu'"),
    # rnn
    "rnn input_size": (lambda: seq2d.rnn(0, 4), InvalidValue, r"rnn: input_size must be a positive int, got 0"),
    "rnn hidden_size": (lambda: seq2d.rnn(3, -1), InvalidValue, r"rnn: hidden_size must be a positive int"),
    "rnn num_layers": (lambda: seq2d.rnn(3, 4, num_layers=0), InvalidValue, r"rnn: num_layers must be a positive int"),
    "rnn nonlinearity": (lambda: seq2d.rnn(3, 4, nonlinearity="gelu"), InvalidValue, r"Unknown nonlinearity 'gelu'"),
    "rnn bias": (lambda: seq2d.rnn(3, 4, bias="no"), InvalidType, r"rnn: bias must be a bool"),
    "rnn batch_first": (lambda: seq2d.rnn(3, 4, batch_first=1), InvalidType, r"rnn: batch_first must be a bool"),
    "rnn int dtype": (lambda: seq2d.rnn(3, 4, dtype=I64), InvalidType, r"rnn: dtype must be a floating-point"),
    "rnn device": (lambda: seq2d.rnn(3, 4, device="gpu"), InvalidValue, r"rnn: device 'gpu'"),
    "truncated_rnn k": (lambda: seq2d.truncated_rnn(nn.RNN(3, 4), 0), InvalidValue, r"truncated_rnn: k must be a positive"),
    # transformer
    "layer heads": (lambda: seq2d.transformer_layer(10, 3), InvalidValue, r"d_model \(10\) must be divisible by nhead \(3\)"),
    "layer nhead 0": (lambda: seq2d.transformer_layer(8, 0), InvalidValue, r"nhead must be a positive int"),
    "layer dim_feedforward": (lambda: seq2d.transformer_layer(8, 2, 0), InvalidValue, r"dim_feedforward must be a positive"),
    "layer eps": (lambda: seq2d.transformer_layer(8, 2, 16, layer_norm_eps=0.0), InvalidValue,
                  r"layer_norm_eps must be a positive"),
    "layer activation name": (lambda: seq2d.transformer_layer(8, 2, 16, activation="swish"), InvalidValue,
                              r"unknown activation 'swish'"),
    "layer activation type": (lambda: seq2d.transformer_layer(8, 2, 16, activation=5), InvalidType,
                              r"activation must be a str"),
    "layer int dtype": (lambda: seq2d.transformer_layer(8, 2, 16, dtype=I64), InvalidType,
                        r"TransformerEncoderLayer: dtype must be a floating-point"),
    "layer device": (lambda: seq2d.transformer_layer(8, 2, 16, device="gpu"), InvalidValue,
                     r"TransformerEncoderLayer: device 'gpu'"),
    "encoder num_layers": (lambda: seq2d.transformer_encoder(8, 2, 0, 16), InvalidValue, r"num_layers must be a positive"),
    "encoder device": (lambda: seq2d.transformer_encoder(8, 2, 1, 16, device="gpu"), InvalidValue,
                       r"TransformerEncoder: device 'gpu'"),
    # randomize and the random constructors
    "randomize granularity": (lambda: seq2d.randomize(seq2d.mlp([6, 4, 2]), "tiles"), InvalidValue,
                              r"Unknown granularity 'tiles'"),
    "randomize region": (lambda: seq2d.randomize(seq2d.mlp([6, 4, 2]), region="everything"), InvalidValue,
                         r"Unknown region 'everything'"),
    "randomize region shape": (lambda: seq2d.randomize(seq2d.mlp([6, 4, 2]), region=torch.ones(2, 2, dtype=torch.bool)),
                               InvalidValue, r"region must be an \(3, 3\) bool block mask"),
    "randomize seed": (lambda: seq2d.randomize(seq2d.mlp([6, 4, 2]), seed=1.5), InvalidType, r"randomize: seed must be an int"),
    "randomize dtype": (lambda: seq2d.randomize(seq2d.mlp([6, 4, 2]), dtype=I64), InvalidType, r"randomize: dtype"),
    "randomize device": (lambda: seq2d.randomize(seq2d.mlp([6, 4, 2]), device="gpu"), InvalidValue, r"randomize: device"),
    "randomize template": (lambda: seq2d.randomize(nn.Linear(3, 2)), InvalidType, r"randomize expects a Sequential2D"),
    "random seed": (lambda: seq2d.create_model("random_model", sizes=[6, 4, 2], seed=None), InvalidType,
                    r"random_model: seed must be an int"),
    "random_mask density": (lambda: seq2d.create_model("random_mask", sizes=[6, 4, 2], density=0), InvalidValue,
                            r"density must be in \(0, 1\]"),
    "random_mask density str": (lambda: seq2d.create_model("random_mask", sizes=[6, 4, 2], density="0.1"), InvalidValue,
                                r"density must be a number"),
    "random_mask seed": (lambda: seq2d.create_model("random_mask", sizes=[6, 4, 2], seed=0.5), InvalidType,
                         r"random_mask: seed must be an int"),
    "random_tiles seed": (lambda: seq2d.create_model("random_tiles", sizes=[6, 4, 2], tile=16, seed="0"), InvalidType,
                          r"random_tiles: seed must be an int"),
    # Sequential2D itself
    "S2D sizes empty": (lambda: Sequential2D([], {}), InvalidValue, r"sizes must name at least one slot"),
    "S2D sizes zero": (lambda: Sequential2D([3, 0], {(1, 0): "identity"}), InvalidValue, r"sizes\[1\] must be a positive"),
    "S2D sizes int": (lambda: Sequential2D(5, {}), InvalidType, r"sizes must be a sequence of positive ints"),
    "S2D no block": (lambda: Sequential2D([3, 2], {}), InvalidValue, r"blocks: the model has no block at all"),
    "S2D no block list": (lambda: Sequential2D([3, 2], [[None, None], [None, None]]), InvalidValue, r"no block at all"),
    "S2D grid rows": (lambda: Sequential2D([3, 3], [[None, None]]), InvalidValue, r"blocks must be an 2 x 2 grid"),
    "S2D grid row length": (lambda: Sequential2D([3, 3], [[None, None], [None]]), InvalidValue,
                            r"blocks row 1 must hold 2 entries"),
    "S2D grid position": (lambda: Sequential2D([3, 3], {(2, 0): "identity"}), InvalidIndex,
                          r"block position \(2, 0\) is outside the 2 x 2 grid"),
    "S2D grid key": (lambda: Sequential2D([3, 3], {"1,0": "identity"}), InvalidType, r"block keys must be \(row, col\)"),
    "S2D block name": (lambda: Sequential2D([3, 3], {(1, 0): "dense"}), InvalidValue, r"block F\[1\]\[0\]: unknown block name"),
    "S2D block type": (lambda: Sequential2D([3, 3], {(1, 0): 3}), InvalidType, r"block F\[1\]\[0\] must be None"),
    "S2D identity sizes": (lambda: Sequential2D([3, 2], {(1, 0): "identity"}), InvalidValue,
                           r"block F\[1\]\[0\] is an identity, but slot 0 has size 3 and slot 1 has size 2"),
    "S2D linear in": (lambda: Sequential2D([3, 2], {(1, 0): lin(4, 2)}), InvalidValue,
                      r"block F\[1\]\[0\] takes 4 input features, but slot 0 has size 3"),
    "S2D linear out": (lambda: Sequential2D([3, 2], {(1, 0): lin(3, 5)}), InvalidValue,
                       r"block F\[1\]\[0\] gives 5 output features, but slot 1 has size 2"),
    "S2D module out": (lambda: Sequential2D([3, 2], {(1, 0): nn.Linear(3, 4)}), InvalidValue,
                       r"block F\[1\]\[0\] gives 4 output features"),
    "S2D bias length": (lambda: S2D(bias=[True]), InvalidValue, r"bias must be a bool or a list of 2 entries"),
    "S2D bias held slot": (lambda: S2D(bias=[True, True]), InvalidValue, r"slot 0 has no incoming blocks .* cannot have a bias"),
    "S2D bias shape": (lambda: S2D(bias=[None, torch.zeros(3)]), InvalidValue, r"bias of slot 1 must have shape \(2,\)"),
    "S2D bias type": (lambda: S2D(bias="yes"), InvalidType, r"bias must be a bool or a per-slot list"),
    "S2D bias entry": (lambda: S2D(bias=[None, 1.0]), InvalidType, r"bias of slot 1 must be a bool, a tensor or None"),
    "S2D activation name": (lambda: S2D(activations="relux"), InvalidValue, r"Unknown activation 'relux' for slot 1"),
    "S2D activation type": (lambda: S2D(activations=[None, 3]), InvalidType, r"activation for slot 1 must be a name"),
    "S2D activation length": (lambda: S2D(activations=["relu"]), InvalidValue, r"activations must be one spec or a list of 2"),
    "S2D activation held": (lambda: S2D(activations=["relu", None]), InvalidValue,
                            r"slot 0 has no incoming blocks \(it is held\), so its activation 'relu'"),
    "S2D inputs empty": (lambda: S2D(inputs=[]), InvalidValue, r"inputs must name at least one slot"),
    "S2D outputs empty": (lambda: S2D(outputs=[]), InvalidValue, r"outputs must name at least one slot"),
    "S2D outputs tuple empty": (lambda: S2D(outputs=()), InvalidValue, r"outputs must name at least one slot"),
    "S2D outputs index": (lambda: S2D(outputs=[5]), InvalidIndex, r"outputs: slot 5 does not exist \(the model has 2 slots\)"),
    "S2D outputs str": (lambda: S2D(outputs="1"), InvalidType, r"outputs must be a slot index or a list"),
    "S2D inputs bool": (lambda: S2D(inputs=[True]), InvalidType, r"inputs must hold slot indices \(ints\), got True"),
    "S2D inputs float": (lambda: S2D(inputs=0.0), InvalidType, r"inputs must be a slot index or a list"),
    "S2D steps negative": (lambda: S2D(steps=-1), InvalidValue, r"steps must be a non-negative int, got -1"),
    "S2D steps float": (lambda: S2D(steps=2.0), InvalidType, r"steps must be a non-negative int, got float"),
    "S2D store": (lambda: S2D(store="gpu"), InvalidValue, r"Unknown store 'gpu'"),
    "S2D int dtype": (lambda: S2D(blocks={(1, 0): "identity"}, sizes=(3, 3), dtype=I64), InvalidType,
                      r"Sequential2D: dtype must be a floating-point torch.dtype \(e.g. torch.float32\), got torch.int64"),
    "S2D bool dtype": (lambda: S2D(dtype=torch.bool), InvalidType, r"Sequential2D: dtype must be a floating-point"),
    "S2D str dtype": (lambda: S2D(dtype="float32"), InvalidType, r"Sequential2D: dtype must be a floating-point"),
    "S2D device gpu": (lambda: S2D(device="gpu"), InvalidValue, r"Sequential2D: device 'gpu' is not a valid device"),
    "S2D device list": (lambda: S2D(device=[0]), InvalidType, r"Sequential2D: device must be a torch.device"),
    "S2D device cuda:99": (lambda: S2D(device="cuda:99"), InvalidValue, NO_CUDA_99),
    "LinearBlock int dtype": (lambda: LinearBlock(3, 2, dtype=I64), InvalidType, r"LinearBlock: dtype must be a floating"),
    "LinearBlock device": (lambda: LinearBlock(3, 2, device="gpu"), InvalidValue, r"LinearBlock: device 'gpu'"),
    "LinearBlock mask shape": (lambda: LinearBlock(3, 2, mask=torch.ones(3, 2, dtype=torch.bool)), InvalidValue,
                               r"mask must have shape \(2, 3\)"),
}


@pytest.mark.parametrize("name", list(CONSTRUCTORS))
def test_malformed_constructor(name):
    build, exc, match = CONSTRUCTORS[name]
    with pytest.raises(exc, match=match) as info:
        _no_warn(build)
    assert type(info.value) is exc and isinstance(info.value, Seq2DError)


# ----------------------------------------------------------------------------- calls
def _mlp():
    return seq2d.mlp([3, 4, 2])


def _layer():
    return seq2d.transformer_layer(8, 2, 16).eval()


def _encoder():
    return seq2d.transformer_encoder(8, 2, 2, 16).eval()


X = lambda *shape, **kw: torch.randn(*shape, **kw)  # noqa: E731

CALLS = {
    # unknown keywords and misspelled context keys
    "forward stepz": (lambda: _mlp()(X(2, 3), stepz=5), InvalidType,
                      r"Sequential2D.forward\(\) got an unexpected keyword argument 'stepz'; this model takes no context "
                      r"keys .*did you mean 'steps'\?"),
    "forward list holds": (lambda: _mlp()([X(2, 3), None, None], holds=[1]), InvalidType,
                           r"unexpected keyword argument 'holds'.*did you mean 'hold'\?"),
    "step unknown": (lambda: _mlp().step([X(2, 3), None, None], src_mask=None), InvalidType,
                     r"Sequential2D.step\(\) got an unexpected keyword argument 'src_mask'"),
    "forward_flat unknown": (lambda: _mlp().forward_flat(X(2, 9), stpes=1), InvalidType,
                             r"Sequential2D.forward_flat\(\) got an unexpected keyword argument 'stpes'.*'steps'"),
    "step_flat unknown": (lambda: _mlp().step_flat(X(2, 9), mask=None), InvalidType,
                          r"Sequential2D.step_flat\(\) got an unexpected keyword argument 'mask'"),
    "sequence pipline": (lambda: seq2d.rnn(3, 4).core.sequence(X(5, 2, 3), pipline=False), InvalidType,
                         r"Sequential2D.sequence\(\) got an unexpected keyword argument 'pipline'.*did you mean 'pipeline'"),
    "core src_msk": (lambda: _layer().core(X(2, 5, 8), src_msk=torch.zeros(5, 5)), InvalidType,
                     r"unexpected keyword argument 'src_msk'; this model takes the context keys \['is_causal', 'mask', "
                     r"'src_key_padding_mask', 'src_mask'\]; did you mean 'src_mask'\?"),
    "core two unknown": (lambda: _layer().core(X(2, 5, 8), a=1, is_casual=True), InvalidType,
                         r"unexpected keyword arguments 'a', 'is_casual'.*did you mean 'is_causal'"),
    "encoder core kpm": (lambda: _encoder().core(X(2, 5, 8), key_padding_mask=None), InvalidType,
                         r"unexpected keyword argument 'key_padding_mask'.*did you mean 'src_key_padding_mask'"),
    "layer src_msk": (lambda: _layer()(X(2, 5, 8), src_msk=None), InvalidType,
                      r"TransformerEncoderLayer.forward\(\) got an unexpected keyword argument 'src_msk'.*'src_mask'"),
    "encoder src_mask": (lambda: _encoder()(X(2, 5, 8), src_mask=None), InvalidType,
                         r"TransformerEncoder.forward\(\) got an unexpected keyword argument 'src_mask'.*did you mean 'mask'"),
    "rnn h0": (lambda: seq2d.rnn(3, 4)(X(5, 2, 3), h0=None), InvalidType,
               r"RNN.forward\(\) got an unexpected keyword argument 'h0'; it takes input and hx"),
    "truncated hx": (lambda: seq2d.truncated_rnn(nn.RNN(3, 4), 2)(X(5, 2, 3), hx=None), InvalidType,
                     r"TruncatedRNN.forward\(\) got an unexpected keyword argument 'hx'"),
    "attention core unknown": (lambda: AttentionCore(8, 2)(X(2, 5, 24), causal=True), InvalidType,
                               r"AttentionCore.forward\(\) got an unexpected keyword argument 'causal'"),
    # states
    "state length": (lambda: _mlp()([X(1, 3), None]), InvalidValue, r"state must have 3 slots \(sizes \[3, 4, 2\]\), got 2"),
    "state width": (lambda: _mlp()([X(1, 3), X(1, 5), None]), InvalidInput, r"slot 1 expects shape \(\*batch, 4\), got \(1, 5\)"),
    "state scalar": (lambda: _mlp()([torch.tensor(1.0), None, None]), InvalidInput, r"slot 0 expects shape \(\*batch, 3\)"),
    "state batch": (lambda: _mlp()([X(1, 3), X(2, 4), None]), InvalidInput, r"slot 1 has batch dims \(2,\) but slot 0 has \(1,\)"),
    "state dtypes": (lambda: _mlp()([X(1, 3), X(1, 4, dtype=torch.float64), None]), InvalidType,
                     r"slot 1 has dtype torch.float64 but slot 0 has torch.float32"),
    "state model dtype": (lambda: _mlp()([X(1, 3, dtype=torch.float64), None, None]), InvalidType,
                          r"the state has dtype torch.float64 but the model's parameters are torch.float32"),
    "state devices": (lambda: _mlp()([X(1, 3), torch.empty(1, 4, device="meta"), None]), InvalidInput,
                      r"slot 1 is on meta but slot 0 is on cpu"),
    "state model device": (lambda: _mlp()([torch.empty(1, 3, device="meta"), None, None]), InvalidInput,
                           r"the state is on meta but the model's parameters are on cpu"),
    "state tensor to step": (lambda: _mlp().step(X(1, 3)), InvalidType, r"state must be a list of 3 tensors"),
    "state entry list": (lambda: _mlp()([[1.0, 2.0, 3.0], None, None]), InvalidType,
                         r"slot 0 of the state must be a tensor or None, got list"),
    "state all None": (lambda: _mlp()([None, None, None]), InvalidValue, r"every slot of the state is None"),
    # tensor calls, steps, hold
    "input width": (lambda: _mlp()(X(2, 4)), InvalidInput, r"expected input of shape \(\*batch, 3\) \(input slots \[0\]"),
    "input scalar": (lambda: _mlp()(torch.tensor(1.0)), InvalidInput, r"expected input of shape \(\*batch, 3\)"),
    "input dtype": (lambda: _mlp()(X(2, 3, dtype=torch.float64)), InvalidType, r"the model's parameters are torch.float32"),
    "steps negative": (lambda: _mlp()(X(2, 3), steps=-1), InvalidValue, r"steps must be a non-negative int, got -1"),
    "steps float": (lambda: _mlp()(X(2, 3), steps=1.5), InvalidType, r"steps must be a non-negative int, got float"),
    "steps unset (cyclic)": (lambda: seq2d.rnn(3, 4).core(X(2, 3)), InvalidValue, r"steps is not set: this model has a cycle"),
    "hold index": (lambda: _mlp()(X(2, 3), hold=[9]), InvalidIndex, r"hold: slot 9 does not exist"),
    "hold str": (lambda: _mlp()(X(2, 3), hold="1"), InvalidType, r"hold must be a slot index or a list"),
    "flat width": (lambda: _mlp().forward_flat(X(2, 8)), InvalidInput, r"the flat state must have shape \(\*batch, 9\)"),
    "flat type": (lambda: _mlp().step_flat([0.0] * 9), InvalidType, r"the flat state must be a tensor"),
    "flat dtype": (lambda: _mlp().forward_flat(X(2, 9, dtype=torch.float64)), InvalidType, r"the flat state is torch.float64"),
    # sequence mode and the RNN wrappers
    "sequence T=0": (lambda: seq2d.rnn(3, 4).core.sequence(X(0, 2, 3)), InvalidInput, r"xs has T = 0 time steps"),
    "sequence 1-D": (lambda: seq2d.rnn(3, 4).core.sequence(X(3)), InvalidInput, r"xs must have shape \(T, \*batch, 3\)"),
    "sequence width": (lambda: seq2d.rnn(3, 4).core.sequence(X(5, 2, 4)), InvalidInput, r"xs must have shape \(T, \*batch, 3\)"),
    "sequence list": (lambda: seq2d.rnn(3, 4).core.sequence([X(2, 3)]), InvalidType, r"xs must be a tensor"),
    "sequence state tensor": (lambda: seq2d.rnn(3, 4).core.sequence(X(5, 2, 3), X(2, 2, 4)), InvalidType,
                              r"state must be None or a list of 2 tensors"),
    "sequence state length": (lambda: seq2d.rnn(3, 4).core.sequence(X(5, 2, 3), [None]), InvalidValue,
                              r"state must have 2 slots"),
    "rnn T=0": (lambda: seq2d.rnn(3, 4)(X(0, 2, 3)), InvalidInput, r"RNN: input has sequence length 0"),
    "rnn T=0 unbatched": (lambda: seq2d.rnn(3, 4)(X(0, 3)), InvalidInput, r"RNN: input has sequence length 0"),
    "rnn T=0 batch_first": (lambda: seq2d.rnn(3, 4, batch_first=True)(X(2, 0, 3)), InvalidInput,
                            r"RNN: input has sequence length 0"),
    "rnn features": (lambda: seq2d.rnn(3, 4)(X(5, 2, 7)), InvalidInput, r"RNN: input must have 3 features \(input_size\)"),
    "rnn dims": (lambda: seq2d.rnn(3, 4)(X(5, 2, 2, 3)), InvalidInput, r"RNN: expected input of 2 \(unbatched\) or 3 dims"),
    "rnn input type": (lambda: seq2d.rnn(3, 4)([1.0]), InvalidType, r"RNN: input must be a tensor"),
    "rnn hx shape": (lambda: seq2d.rnn(3, 4)(X(5, 2, 3), X(1, 3, 4)), InvalidInput, r"RNN: expected hx of shape \(1, 2, 4\)"),
    "rnn hx type": (lambda: seq2d.rnn(3, 4)(X(5, 2, 3), [0.0]), InvalidType, r"RNN: hx must be a tensor or None"),
    "truncated T=0": (lambda: seq2d.truncated_rnn(nn.RNN(3, 4), 2)(X(0, 2, 3)), InvalidInput,
                      r"TruncatedRNN: input has sequence length 0"),
    "truncated type": (lambda: seq2d.truncated_rnn(nn.RNN(3, 4), 2)("x"), InvalidType, r"TruncatedRNN: input must be a tensor"),
    "truncated features": (lambda: seq2d.truncated_rnn(nn.RNN(3, 4), 2)(X(5, 2, 4)), InvalidInput,
                           r"TruncatedRNN: input must have 3 features"),
    # transformers
    "layer src width": (lambda: _layer()(X(2, 5, 7)), InvalidInput, r"src must have shape \(\*batch, T, 8\)"),
    "layer src type": (lambda: _layer()("src"), InvalidType, r"src must be a torch.Tensor"),
    "layer mask shape": (lambda: _layer()(X(2, 5, 8), src_mask=torch.zeros(4, 4)), InvalidInput,
                         r"src_mask must have shape \(5, 5\)"),
    "layer mask dtype": (lambda: _layer()(X(2, 5, 8), src_mask=torch.zeros(5, 5, dtype=I64)), InvalidType,
                         r"src_mask must have dtype torch.bool or a floating-point dtype"),
    "layer kpm shape": (lambda: _layer()(X(2, 5, 8), src_key_padding_mask=torch.zeros(2, 4, dtype=torch.bool)), InvalidInput,
                        r"src_key_padding_mask must have shape \(\*batch, T\) = \(2, 5\)"),
    "core both masks": (lambda: _layer().core(X(2, 5, 8), src_mask=torch.zeros(5, 5), mask=torch.zeros(5, 5)), InvalidValue,
                        r"give the attention mask as src_mask or as mask, not both"),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_malformed_call(name):
    call, exc, match = CALLS[name]
    with pytest.raises(exc, match=match) as info:
        _no_warn(call)
    assert type(info.value) is exc and isinstance(info.value, Seq2DError)


def test_zero_length_like_torch():
    """nn.RNN refuses a sequence of length 0 (so do seq2d.RNN, TruncatedRNN and sequence mode);
    nn.TransformerEncoderLayer returns an empty output (so do the transformer wrappers)."""
    with pytest.raises(RuntimeError, match="sequence length"):
        nn.RNN(3, 4)(X(0, 2, 3))
    layer, enc = _layer(), _encoder()
    assert layer(X(2, 0, 8)).shape == (2, 0, 8)
    assert enc(X(2, 0, 8)).shape == (2, 0, 8)
    ref = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    assert ref(X(2, 0, 8)).shape == (2, 0, 8)


# ----------------------------------------------------------------------------- module blocks' outputs
class Narrow(nn.Module):
    """A module block without in/out_features (so construction cannot check it) returning width 1."""

    def __init__(self, width=1, drop_batch=False, as_tuple=False):
        super().__init__()
        self.width, self.drop_batch, self.as_tuple = width, drop_batch, as_tuple
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        y = x[..., : self.width] * self.scale
        if self.drop_batch:
            y = y.sum(0)
        return (y,) if self.as_tuple else y


class NarrowCtx(ContextModule):
    context_keys = ("alpha",)

    def forward(self, x, alpha=1.0):
        return x[..., :1] * alpha


def _acyclic(blk):  # slot 2 (size 4) reads the module block F[2][1] from slot 1 (size 4)
    return Sequential2D([3, 4, 4], {(1, 0): lin(3, 4), (2, 1): blk}, inputs=[0], outputs=[2])


def _cyclic(blk):  # an RNN-like cycle with the module block on the recurrence F[1][1]
    return Sequential2D([3, 4], {(1, 0): lin(3, 4), (1, 1): blk}, inputs=[0], outputs=[1], activations=[None, "tanh"])


WIDTH = r"block F\[2\]\[1\] must map \(\*batch, 4\) to \(\*batch, 4\): for an input of shape \(2, 4\) it should return " \
        r"\(2, 4\), got \(2, 1\)"
WIDTH_C = r"block F\[1\]\[1\] must map \(\*batch, 4\) to \(\*batch, 4\)"


def _sequence_by_components(m):
    return m.sequence(X(3, 2, 3))


def _sequence_step_loop(m):
    with step_loop():
        return m.sequence(X(3, 2, 3))


MODULE_OUTPUTS = {
    "tensor call": (lambda: _acyclic(Narrow())(X(2, 3)), InvalidInput, WIDTH),
    "state list": (lambda: _acyclic(Narrow())([X(2, 3), None, None], steps=2), InvalidInput, WIDTH),
    "step": (lambda: _acyclic(Narrow()).step([X(2, 3), X(2, 4), None]), InvalidInput, WIDTH),
    "forward_flat": (lambda: _acyclic(Narrow()).forward_flat(X(2, 11)), InvalidInput, r"block F\[2\]\[1\] must map"),
    "reference loop": (lambda: reference_forward(_acyclic(Narrow()), [X(2, 3), None, None], 2), InvalidInput, WIDTH),
    "block-sparse": (lambda: _acyclic(Narrow()).to_blocksparse(16)(X(2, 3)), InvalidInput, WIDTH),
    "dropped batch dims": (lambda: _acyclic(Narrow(width=4, drop_batch=True))(X(2, 3)), InvalidInput,
                           r"block F\[2\]\[1\] must map .* should return \(2, 4\), got \(4,\)"),
    "tuple output": (lambda: _acyclic(Narrow(as_tuple=True))(X(2, 3)), InvalidType,
                     r"block F\[2\]\[1\] must return a tensor of shape \(\*batch, 4\), got tuple"),
    "context module": (lambda: _acyclic(NarrowCtx())(X(2, 3), alpha=2.0), InvalidInput, WIDTH),
    "sequence by components": (lambda: _sequence_by_components(_cyclic(Narrow())), InvalidInput, WIDTH_C),
    "sequence step loop": (lambda: _sequence_step_loop(_cyclic(Narrow())), InvalidInput, WIDTH_C),
    "sequence held source": (lambda: Sequential2D([3, 4, 4], {(1, 0): lin(3, 4), (1, 2): Narrow()}, inputs=[0],
                                                  outputs=[1]).sequence(X(3, 2, 3), [None, None, X(2, 4)]),
                             InvalidInput, r"block F\[1\]\[2\] must map"),
    "sequence feed-forward": (lambda: _sequence_by_components(_acyclic(Narrow())), InvalidInput,
                              r"block F\[2\]\[1\] must map \(\*batch, 4\) to \(\*batch, 4\)"),
}


@pytest.mark.parametrize("name", list(MODULE_OUTPUTS))
def test_module_block_output_refused(name):
    call, exc, match = MODULE_OUTPUTS[name]
    with pytest.raises(exc, match=match) as info:
        _no_warn(call)
    assert type(info.value) is exc


def test_module_block_output_refused_on_loop_store():
    m = _acyclic(Narrow())
    m.loop = True
    with pytest.raises(InvalidInput, match=WIDTH):
        m(X(2, 3))


def test_module_block_right_width_still_runs():
    m = _acyclic(Narrow(width=4))
    out = m(X(2, 3))
    assert out.shape == (2, 4)
    ref = reference_forward(m, [X(2, 3), None, None], 2)
    assert ref[2].shape == (2, 4)


def _wide():  # declares 5 input features through its first layer; slot 1 (its input) has width 4
    return nn.Sequential(nn.Tanh(), nn.Linear(5, 4))


IN_WIDTH = r"block F\[2\]\[1\] \(Sequential\) expects inputs of width 5, but slot 1 has width 4 \(input of shape \(2, 4\)\)"
IN_WIDTH_C = r"block F\[1\]\[1\] \(Sequential\) expects inputs of width 5, but slot 1 has width 4"

MODULE_INPUTS = {
    "tensor call": lambda: _acyclic(_wide())(X(2, 3)),
    "state list": lambda: _acyclic(_wide())([X(2, 3), None, None], steps=2),
    "step": lambda: _acyclic(_wide()).step([X(2, 3), X(2, 4), None]),
    "reference loop": lambda: reference_forward(_acyclic(_wide()), [X(2, 3), None, None], 2),
    "block-sparse": lambda: _acyclic(_wide()).to_blocksparse(16)(X(2, 3)),
    "sequence by components": lambda: _sequence_by_components(_cyclic(_wide())),
    "sequence step loop": lambda: _sequence_step_loop(_cyclic(_wide())),
    "sequence feed-forward": lambda: _sequence_by_components(_acyclic(_wide())),
}


@pytest.mark.parametrize("name", list(MODULE_INPUTS))
def test_module_block_input_width_refused(name):
    """A module block that reads a slot of another width than its first layer declares: a typed
    error naming F[i][j], the width expected and the width the slot has (not torch's matmul message)."""
    with pytest.raises(InvalidInput, match=IN_WIDTH_C if "sequence" in name and "feed" not in name else
                       IN_WIDTH.split(r" \(input")[0]):
        _no_warn(MODULE_INPUTS[name])


def test_module_block_loop_store_input_width_and_other_errors():
    m = _acyclic(_wide())
    m.loop = True
    with pytest.raises(InvalidInput, match=IN_WIDTH):
        m(X(2, 3))

    class Opaque(nn.Module):  # declares no width: its own error, unchanged, with a note naming the block
        def forward(self, x):
            return x @ torch.ones(5, 4)

    with pytest.raises(RuntimeError, match="mat1 and mat2") as info:
        _acyclic(Opaque())(X(2, 3))
    assert type(info.value) is RuntimeError
    assert any("block F[2][1]" in n for n in info.value.__notes__)


# ----------------------------------------------------------------------------- context keys
class Alpha(ContextModule):
    context_keys = ("alpha",)

    def forward(self, x, alpha=1.0):  # no **context: it only ever receives its own key
        return x * alpha


class Beta(ContextModule):
    context_keys = ("beta",)

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, x, beta=0.0):
        return x * self.w + beta


class Open(ContextModule):
    """Declares no context_keys: receives every keyword, and its model accepts any."""

    seen: dict = {}

    def forward(self, x, **context):
        Open.seen = dict(context)
        return x


def _keyed():
    inner = Sequential2D([4, 4], {(1, 0): Beta()}, inputs=[0], outputs=[1])
    return Sequential2D([4, 4, 4, 4], {(1, 0): lin(4, 4), (2, 1): Alpha(), (3, 2): inner}, inputs=[0], outputs=[3])


def test_context_keys_are_the_union_over_blocks_nested_included():
    m = _keyed()
    assert m.context_keys == frozenset({"alpha", "beta"})
    x = X(2, 4)
    base = m(x)
    assert torch.allclose(m(x, alpha=2.0, beta=1.0), 2 * base + 1)  # each block got its own key only
    with pytest.raises(InvalidType, match=r"unexpected keyword argument 'gamma'; this model takes the context keys "
                                          r"\['alpha', 'beta'\]"):
        m(x, gamma=1.0)
    with pytest.raises(InvalidType, match=r"'alpah'.*did you mean 'alpha'\?"):
        m(x, alpah=2.0)


def test_undeclared_context_module_accepts_any_key():
    m = Sequential2D([4, 4, 4], {(1, 0): lin(4, 4), (2, 1): Open()}, inputs=[0], outputs=[2])
    assert m.context_keys is None
    m(X(2, 4), anything=1, other="x")  # the old behaviour: no check
    assert Open.seen == {"anything": 1, "other": "x"}
    outer = Sequential2D([4, 4], {(1, 0): m}, inputs=[0], outputs=[1])
    assert outer.context_keys is None  # an open block makes every enclosing model open
    outer(X(2, 4), whatever=3)
    assert Open.seen == {"whatever": 3}


def test_context_keys_cached_and_forgotten_when_the_grid_changes():
    m = _keyed()
    assert m.context_keys is m.context_keys  # computed once
    assert "_context_keys_v" in m.__dict__
    m.to_blocksparse(16)
    assert "_context_keys_v" not in m.__dict__
    assert m.context_keys == frozenset({"alpha", "beta"})
    with pytest.raises(InvalidType, match="'gamma'"):
        m(X(2, 4), gamma=1)


def test_no_context_costs_nothing_and_models_without_context_modules_take_no_keys():
    m = _mlp()
    assert m.context_keys == frozenset()
    m(X(2, 3))  # no keywords: no check at all
    with pytest.raises(InvalidType, match="takes no context keys"):
        m(X(2, 3), alpha=1)


def test_transformer_context_keys_are_what_attention_reads():
    assert AttentionCore.context_keys == ("src_mask", "mask", "src_key_padding_mask", "is_causal")
    layer = _layer()
    x = X(2, 5, 8)
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    torch.testing.assert_close(layer.core(x, mask=causal), layer.core(x, src_mask=causal))
    torch.testing.assert_close(layer.core(x, is_causal=True), layer(x, src_mask=causal))


# ----------------------------------------------------------------------------- degenerate models
def test_no_trainable_parameter_warns():
    with pytest.warns(UserWarning, match=r"this Sequential2D \(sizes \[3, 3\]\) has no trainable parameter") as rec:
        Sequential2D([3, 3], {(1, 0): "identity"})
    assert rec[0].filename == __file__  # points at the caller's line
    with pytest.warns(UserWarning, match="no trainable parameter"):  # every entry frozen (mask all False)
        Sequential2D([3, 2], {(1, 0): LinearBlock(3, 2, mask=torch.zeros(2, 3, dtype=torch.bool),
                                                  frozen=torch.ones(2, 3))})
    with pytest.warns(UserWarning, match="no trainable parameter"):  # a parameter-free module block
        Sequential2D([3, 3], {(1, 0): nn.Tanh()})
    with pytest.warns(UserWarning, match="no trainable parameter"):  # a module whose parameters are frozen
        Sequential2D([3, 2], {(1, 0): nn.Linear(3, 2).requires_grad_(False)})
    _no_warn(lambda: Sequential2D([3, 3], {(1, 0): "identity"}, bias=True))  # a bias is a parameter


def test_steps_below_the_input_output_distance_warns_once_per_model():
    m = seq2d.mlp([3, 4, 4, 4, 2])  # output slot 4 is 4 blocks from the input
    m.steps = 1  # as `--steps 1` does
    x = X(2, 3)
    with pytest.warns(UserWarning, match=r"steps=1 is smaller than the distance from the input slots \[0\] to output "
                                         r"slot 4 \(4 blocks\).*needs steps >= 4"):
        m(x)
    _no_warn(lambda: m(x))  # once per model
    _no_warn(lambda: m(x, steps=2))
    m2 = seq2d.mlp([3, 4, 4, 4, 2])
    with pytest.warns(UserWarning, match=r"steps=3 is smaller .* output slot 4 \(4 blocks\)"):
        m2(x, steps=3)
    m3 = seq2d.mlp([3, 4, 4, 4, 2])
    _no_warn(lambda: m3(x, steps=4))
    _no_warn(lambda: m3(x, steps=9))
    _no_warn(lambda: m3([x, None, None, None, None], steps=1))  # a state list may carry every slot: no warning
    _no_warn(lambda: m3.step([x, None, None, None, None]))


def test_unreachable_output_warns_at_the_tensor_call():
    m = Sequential2D([3, 4, 4], {(1, 0): lin(3, 4), (2, 2): lin(4, 4)}, inputs=[0], outputs=[2], steps=3)
    with pytest.warns(UserWarning, match=r"output slot 2 cannot be reached from any input slot \[0\]"):
        m(X(2, 3))
    _no_warn(lambda: m(X(2, 3)))


def test_the_rnn_and_transformer_wrappers_do_not_warn():
    # _no_warn turns a UserWarning into an error; the outputs are checked too
    out, h = _no_warn(lambda: seq2d.rnn(3, 4, num_layers=3)(X(5, 2, 3)))
    assert out.shape == (5, 2, 4) and h.shape == (3, 2, 4)
    t = _no_warn(lambda: seq2d.truncated_rnn(nn.RNN(3, 4, num_layers=2), 3)(X(5, 2, 3)))
    assert t.shape[-1] == 4 and torch.isfinite(t).all()
    assert _no_warn(lambda: _encoder()(X(2, 5, 8))).shape == (2, 5, 8)
    assert _no_warn(lambda: seq2d.mlp([3, 4, 4, 4, 2])(X(2, 3))).shape == (2, 2)


def test_malformed_case_count():
    """The brief asks for at least 60 parametrized malformed inputs."""
    assert len(CONSTRUCTORS) + len(CALLS) + len(MODULE_OUTPUTS) >= 60


@pytest.mark.parametrize("tile", [0, -16, 7, 48, True, "64"])
def test_to_blocksparse_refuses_a_tile_size_naming_the_allowed_ones(tile):
    model = seq2d.mlp([4, 3])
    with pytest.raises(InvalidValue, match=r"to_blocksparse: tile must be one of 16, 32, 64, 128"):
        model.to_blocksparse(tile)
