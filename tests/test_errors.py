"""Every malformed input gets a typed error naming the slot/block, expected vs given."""

import pytest
import torch
from torch import nn

import seq2d
from seq2d import LinearBlock, Sequential2D


def lin(i, o, **kw):
    return LinearBlock(i, o, **kw)


@pytest.mark.parametrize("sizes,exc,match", [
    ([3, 0], ValueError, r"sizes\[1\] must be a positive int, got 0"),
    ([3, -2], ValueError, r"sizes\[1\]"),
    ([3, 2.5], ValueError, r"sizes\[1\] must be a positive int, got 2.5"),
    ([3, True], ValueError, r"sizes\[1\]"),
    ([], ValueError, "at least one slot"),
    (5, TypeError, "sequence of positive ints"),
])
def test_bad_sizes(sizes, exc, match):
    with pytest.raises(exc, match=match):
        Sequential2D(sizes, {})


def test_linear_block_in_features_mismatch_names_block():
    with pytest.raises(ValueError, match=r"F\[1\]\[0\] takes 4 input features, but slot 0 has size 3"):
        Sequential2D([3, 2], {(1, 0): lin(4, 2)})


def test_linear_block_out_features_mismatch_names_block():
    with pytest.raises(ValueError, match=r"F\[1\]\[0\] gives 5 output features, but slot 1 has size 2"):
        Sequential2D([3, 2], {(1, 0): lin(3, 5)})


def test_module_block_features_checked():
    with pytest.raises(ValueError, match=r"F\[1\]\[0\] takes 7 input features"):
        Sequential2D([3, 2], {(1, 0): nn.Linear(7, 2)})


def test_identity_between_different_sizes():
    with pytest.raises(ValueError, match=r"F\[1\]\[0\] is an identity, but slot 0 has size 3 and slot 1 has size 2"):
        Sequential2D([3, 2], {(1, 0): "identity"})


def test_unknown_block_name_and_type():
    with pytest.raises(ValueError, match="unknown block name 'dense'"):
        Sequential2D([3, 3], {(1, 0): "dense"})
    with pytest.raises(TypeError, match=r"F\[1\]\[0\] must be None, 'identity' or an nn.Module, got int"):
        Sequential2D([3, 3], {(1, 0): 3})


def test_grid_shape_errors():
    with pytest.raises(ValueError, match="2 x 2 grid"):
        Sequential2D([3, 3], [[None, None]])
    with pytest.raises(ValueError, match="row 1 must hold 2 entries"):
        Sequential2D([3, 3], [[None, None], [None]])
    with pytest.raises(IndexError, match=r"\(2, 0\) is outside the 2 x 2 grid"):
        Sequential2D([3, 3], {(2, 0): "identity"})


def test_mask_wrong_shape_and_dtype():
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 3\).*got \(3, 2\)"):
        LinearBlock(3, 2, mask=torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must have dtype torch.bool, got torch.float32"):
        LinearBlock(3, 2, mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"element mask of shape \(7, 7\).*got \(5, 5\)"):
        seq2d.from_mask([3, 4], torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.bool"):
        seq2d.from_mask([3, 4], torch.ones(2, 2, dtype=torch.int64))


def test_frozen_errors():
    with pytest.raises(ValueError, match=r"frozen must have shape \(2, 3\)"):
        LinearBlock(3, 2, frozen=torch.ones(3, 2))
    with pytest.raises(TypeError, match="frozen must be a floating tensor, got torch.int64"):
        LinearBlock(3, 2, frozen=torch.ones(2, 3, dtype=torch.int64))


def test_steps_errors():
    m = seq2d.mlp([3, 2])
    with pytest.raises(ValueError, match="non-negative int, got -1"):
        m(torch.randn(1, 3), steps=-1)
    with pytest.raises(TypeError, match="non-negative int"):
        m(torch.randn(1, 3), steps=1.5)
    with pytest.raises(ValueError, match="non-negative"):
        Sequential2D([3], {}, steps=-2)


def test_state_wrong_number_of_slots():
    m = seq2d.mlp([3, 4, 2])
    with pytest.raises(ValueError, match=r"state must have 3 slots \(sizes \[3, 4, 2\]\), got 2"):
        m([torch.randn(1, 3), None])


def test_state_wrong_last_dim_names_slot():
    m = seq2d.mlp([3, 4, 2])
    with pytest.raises(RuntimeError, match=r"slot 1 expects shape \(\*batch, 4\), got \(1, 5\)"):
        m([torch.randn(1, 3), torch.randn(1, 5), None])
    with pytest.raises(RuntimeError, match=r"expected input of shape \(\*batch, 3\)"):
        m(torch.randn(2, 4))


def test_state_mismatched_batch_dims():
    m = seq2d.mlp([3, 4, 2])
    with pytest.raises(RuntimeError, match=r"slot 1 has batch dims \(2,\) but slot 0 has \(1,\)"):
        m([torch.randn(1, 3), torch.randn(2, 4), None])


def test_state_dtype_mismatch():
    m = seq2d.mlp([3, 4, 2])
    with pytest.raises(TypeError, match="slot 1 has dtype torch.float64 but slot 0 has torch.float32"):
        m([torch.randn(1, 3), torch.randn(1, 4, dtype=torch.float64), None])
    with pytest.raises(TypeError, match="the model's parameters are torch.float32"):
        m(torch.randn(1, 3, dtype=torch.float64))


def test_state_device_mismatch():
    m = seq2d.mlp([3, 4, 2])
    meta = torch.empty(1, 4, device="meta")
    with pytest.raises(RuntimeError, match="slot 1 is on meta but slot 0 is on cpu"):
        m([torch.randn(1, 3), meta, None])
    with pytest.raises(RuntimeError, match="the model's parameters are on cpu"):
        m([torch.empty(1, 3, device="meta"), None, None])


def test_state_not_a_list_or_bad_entry():
    m = seq2d.mlp([3, 2])
    with pytest.raises(TypeError, match="slot 0 of the state must be a tensor or None, got list"):
        m([[1, 2, 3], None])
    with pytest.raises(TypeError, match="state must be a list"):
        m.step(torch.randn(1, 3))
    with pytest.raises(ValueError, match="every slot of the state is None"):
        m([None, None])


def test_unknown_activation_lists_valid():
    with pytest.raises(ValueError, match=r"Unknown activation 'relux' for slot 1\. Select from 'identity', 'relu'"):
        Sequential2D([3, 2], {(1, 0): lin(3, 2)}, activations="relux")
    with pytest.raises(TypeError, match="activation for slot 1 must be a name"):
        Sequential2D([3, 2], {(1, 0): lin(3, 2)}, activations=[None, 3])
    with pytest.raises(ValueError, match="activations must be one spec or a list of 2"):
        Sequential2D([3, 2], {(1, 0): lin(3, 2)}, activations=["relu"])


def test_bias_and_activation_on_held_slot():
    with pytest.raises(ValueError, match="slot 0 has no incoming blocks .* cannot have a bias"):
        Sequential2D([3, 2], {(1, 0): lin(3, 2)}, bias=[True, True])
    with pytest.raises(ValueError, match="slot 0 has no incoming blocks .* activation 'relu'"):
        Sequential2D([3, 2], {(1, 0): lin(3, 2)}, activations=["relu", "relu"])
    with pytest.raises(ValueError, match=r"bias of slot 1 must have shape \(2,\), got \(3,\)"):
        Sequential2D([3, 2], {(1, 0): lin(3, 2)}, bias=[None, torch.zeros(3)])


def test_inputs_outputs_and_store_errors():
    with pytest.raises(IndexError, match="outputs: slot 5 does not exist"):
        Sequential2D([3, 2], {(1, 0): lin(3, 2)}, outputs=[5])
    with pytest.raises(ValueError, match="Unknown store 'cuda_magic'. Select from"):
        Sequential2D([3, 2], {(1, 0): lin(3, 2)}, store="cuda_magic")



def _old_keyword_calls():
    from seq2d.models.random import random_model, random_tile_matrix, random_tiles, randomize
    from seq2d.sparse import BlockSparseLinear

    grid = {(1, 0): lin(3, 2)}
    yield "Sequential2D", "store", lambda: Sequential2D([3, 2], grid, backend="dense")
    yield "from_mask", "store", lambda: seq2d.from_mask([3, 2], backend="dense")
    yield "from_iterativenn", "store", lambda: seq2d.from_iterativenn([3], [2], [["Linear"]], backend="dense")
    yield "Sequential2D.to_blocksparse", "kernel", lambda: Sequential2D([3, 2], grid).to_blocksparse(16, backend="cpu")
    yield "BlockSparseLinear", "kernel", lambda: BlockSparseLinear([3, 2], 16, [], [], backend="cpu")
    yield "random_model", "kernel", lambda: random_model(backend="cpu")
    yield "random_tiles", "kernel", lambda: random_tiles(backend="cpu")
    yield "random_tile_matrix", "kernel", lambda: random_tile_matrix([16, 16], 16, 1.0, backend="cpu")
    yield "randomize", "kernel", lambda: randomize(seq2d.mlp([3, 2]), backend="cpu")


@pytest.mark.parametrize("owner,new,call", list(_old_keyword_calls()), ids=[c[0] for c in _old_keyword_calls()])
def test_the_old_backend_keyword_names_its_new_name(owner, new, call):
    """``backend=`` meant the store choice or the kernel choice; each has its own name now, and the
    old keyword is refused (never used) with the new one in the message."""
    with pytest.raises(TypeError, match=rf"^{owner} got backend='[a-z]+'; the {new} choice is now {new}=$"):
        call()


def test_constructor_argument_errors():
    with pytest.raises(ValueError, match="Unknown nonlinearity 'gelu'. Select from 'tanh' or 'relu'"):
        seq2d.rnn(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="k must be a positive int, got 0"):
        seq2d.truncated_rnn(nn.RNN(3, 4), 0)
    with pytest.raises(ValueError, match="at least two sizes"):
        seq2d.mlp([3])
    with pytest.raises(ValueError, match="Unknown model 'resnet'. Select from"):
        seq2d.create_model("resnet")


def test_from_torch_unsupported_names_module():
    with pytest.raises(TypeError, match="unsupported module Conv2d"):
        seq2d.from_torch(nn.Conv2d(1, 1, 3))
    with pytest.raises(TypeError, match="unsupported module Dropout at item 1 of nn.Sequential"):
        seq2d.from_torch(nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.1)))
    with pytest.raises(TypeError, match="unsupported recurrent mode LSTM|unsupported module LSTM"):
        seq2d.from_torch(nn.LSTM(3, 3))
    with pytest.raises(ValueError, match="bidirectional"):
        seq2d.from_torch(nn.RNN(3, 3, bidirectional=True))


def test_rnn_call_errors():
    r = seq2d.rnn(3, 4, num_layers=2)
    with pytest.raises(RuntimeError, match=r"expected hx of shape \(2, 5, 4\)"):
        r(torch.randn(6, 5, 3), torch.randn(1, 5, 4))
    with pytest.raises(RuntimeError, match="2 \\(unbatched\\) or 3 dims"):
        r(torch.randn(3))


def test_one_did_you_mean_rule():
    """seq2d.errors.did_you_mean is the hint of every unknown-name error: '-' read as '_', a close
    spelling, or a valid name inside the word; nothing for a mere coincidence of letters."""
    from seq2d.errors import closest_name, did_you_mean

    assert closest_name("num-threads", ["num_threads", "seed"]) == "num_threads"
    assert closest_name("optimzer", ["optimizer", "lr"]) == "optimizer"
    assert closest_name("src_mask", ["mask", "src_key_padding_mask", "is_causal"]) == "mask"
    assert closest_name("middle", ["input", "hidden", "output"]) is None
    assert did_you_mean("relu6", ["relu", "tanh"]) == " (did you mean 'relu'?)"
    assert did_you_mean(3, ["a"]) == ""
