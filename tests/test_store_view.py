"""Autograd with a handle's view as input (seq2d.store_view.StoreView): torch.autograd.grad and
backward(inputs=...) on ``blk.weight`` / ``model.bias(i)`` give the gradients of the same network
written in plain torch (float64), instead of "unused" / None / zeros."""

import pytest
import torch
import torch.nn.functional as F

import seq2d
from seq2d import LinearBlock, Sequential2D
from seq2d.errors import InvalidValue
from seq2d.store_view import StoreView

F64 = torch.float64
TOL = dict(rtol=1e-12, atol=1e-12)


def masked_tied_model():
    """x1 = tanh(W10 x0 + b1), x2 = tanh(T x1 + b2), x3 = T x2 + W30 x0 + b3 with T tied at
    (2, 1) and (3, 2) and W10 masked (a third of its entries fixed at zero)."""
    torch.manual_seed(0)
    mask = torch.rand(5, 4) > 0.33
    tied = LinearBlock(5, 5, dtype=F64)
    blocks = {(1, 0): LinearBlock(4, 5, mask=mask, dtype=F64), (2, 1): tied, (3, 2): tied,
              (3, 0): LinearBlock(4, 5, dtype=F64)}
    model = Sequential2D([4, 5, 5, 5], blocks, bias=True, activations=[None, "tanh", "tanh", None], dtype=F64)
    return model, mask


def handles(model):
    """``(views, plain)``: the handles' weights and biases, and leaf copies of their values."""
    b = model.blocks
    views = [b["1_0"].weight, b["2_1"].weight, b["3_0"].weight, model.bias(1), model.bias(2), model.bias(3)]
    return views, [v.detach().clone().requires_grad_() for v in views]


def reference(plain, mask, x):
    """The model of :func:`masked_tied_model` in plain torch, on leaf tensors."""
    W10, T, W30, b1, b2, b3 = plain
    x1 = torch.tanh(F.linear(x, W10 * mask, b1))
    x2 = torch.tanh(F.linear(x1, T, b2))
    return F.linear(x2, T, b3) + F.linear(x, W30)


def loss_of(y):
    return (y.sin() * torch.arange(1.0, y.shape[-1] + 1, dtype=y.dtype)).sum()


@pytest.fixture
def case():
    model, mask = masked_tied_model()
    views, plain = handles(model)
    x = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(x), reference(plain, mask, x), **TOL)  # the reference is the model
    return model, mask, views, plain, x


def test_handles_are_store_views(case):
    _, _, views, _, _ = case
    assert all(isinstance(v, StoreView) for v in views)
    assert all(not isinstance(v * 2, StoreView) for v in views)  # results are plain tensors


def test_autograd_grad_equals_plain_torch(case):
    model, mask, views, plain, x = case
    ours = torch.autograd.grad(loss_of(model(x)), views)
    ref = torch.autograd.grad(loss_of(reference(plain, mask, x)), plain)
    for a, b, v in zip(ours, ref, views):
        assert a.shape == v.shape and not isinstance(a, StoreView)
        torch.testing.assert_close(a, b, **TOL)
    assert bool((ours[0][~mask] == 0).all())  # masked entries get no gradient
    # the same numbers backward() leaves in the store, read through the handles
    loss_of(model(x)).backward()
    for a, v in zip(ours, views):
        torch.testing.assert_close(v.grad, a, rtol=0, atol=0)


def test_autograd_grad_second_order_and_batched(case):
    model, mask, views, plain, x = case
    # a gradient penalty: d/dW ||dL/dW||^2 (create_graph=True through the region)
    g, = torch.autograd.grad(loss_of(model(x)), views[1], create_graph=True)
    ours, = torch.autograd.grad(g.square().sum(), views[1])
    gr, = torch.autograd.grad(loss_of(reference(plain, mask, x)), plain[1], create_graph=True)
    ref, = torch.autograd.grad(gr.square().sum(), plain[1])
    torch.testing.assert_close(ours, ref, **TOL)
    # is_grads_batched: rows of the Jacobian of the output with respect to W30 and b3
    y, yr = model(x)[0], reference(plain, mask, x)[0]
    eye = torch.eye(5, dtype=F64)
    ours = torch.autograd.grad(y, [views[2], views[5]], eye, is_grads_batched=True)
    ref = torch.autograd.grad(yr, [plain[2], plain[5]], eye, is_grads_batched=True)
    for a, b in zip(ours, ref):
        assert a.shape[0] == 5
        torch.testing.assert_close(a, b, **TOL)


def test_unused_follows_torch():
    """A region the loss does not reach: zeros when its store Parameter is reached, else torch's
    own answers (an error, None under allow_unused, zeros under materialize_grads)."""
    torch.manual_seed(0)
    model = seq2d.mlp([3, 4, 2], dtype=F64)
    other = seq2d.mlp([3, 4, 2], dtype=F64)
    w = model.blocks["1_0"].weight
    loss = other(torch.randn(2, 3, dtype=F64)).sum()
    with pytest.raises(RuntimeError, match="not have been used"):
        torch.autograd.grad(loss, w, retain_graph=True)
    assert torch.autograd.grad(loss, w, retain_graph=True, allow_unused=True) == (None,)
    z, = torch.autograd.grad(loss, w, materialize_grads=True)
    assert z.shape == w.shape and not z.any()
    # the output slot's bias lies in the same bias vector as slot 1's; a loss on slot 1 alone
    state = model.step([torch.randn(2, 3, dtype=F64), None, None])
    g1, g2 = torch.autograd.grad(state[1].sum(), [model.bias(1), model.bias(2)])
    assert g1.shape == (4,) and g2.shape == (2,) and not g2.any() and g1.any()


def test_backward_inputs_fills_only_that_region(case):
    model, mask, views, plain, x = case
    xr = x.clone().requires_grad_()
    loss_of(model(xr)).backward(inputs=[views[1], xr])
    xp = x.clone().requires_grad_()
    ref = torch.autograd.grad(loss_of(reference(plain, mask, xp)), [plain[1], xp])
    torch.testing.assert_close(views[1].grad, ref[0], **TOL)
    torch.testing.assert_close(xr.grad, ref[1], **TOL)
    for v in (views[0], views[2]):  # other blocks: no gradient, or zeros when they share T's Parameter
        assert v.grad is None or not v.grad.any()
    assert model.bias(1).grad is None
    loss_of(model(x)).backward(inputs=[views[1]])  # accumulates, as backward does
    torch.testing.assert_close(views[1].grad, 2 * ref[0], **TOL)
    with pytest.raises(InvalidValue, match="create_graph"):
        loss_of(model(x)).backward(inputs=[views[1]], create_graph=True)


def test_grad_is_the_stores_region_in_place(case):
    model, _, views, _, x = case
    loss_of(model(x)).backward()
    views[1].grad.zero_()
    assert not model.blocks["2_1"].grad.any()
    with pytest.raises(InvalidValue, match="zero_grad"):
        views[1].grad = None


def test_tiled_block_weight_routes_to_the_matrix():
    """A tiled block's weight (its tiles assembled, a copy) routes the same way: autograd.grad
    and backward(inputs=...) give the gradients of the plain-torch net, .grad reads the matrix's."""
    torch.manual_seed(0)
    model = seq2d.mlp([4, 6, 5, 3], activation="tanh", dtype=F64).to_blocksparse(tile=16)
    blocks = [model.blocks[k] for k in ("1_0", "2_1", "3_2")]
    ws = [b.weight for b in blocks]
    assert all(isinstance(w, StoreView) for w in ws)
    plain = [w.detach().clone().requires_grad_() for w in ws] + [model.bias(i).detach().clone().requires_grad_()
                                                               for i in (1, 2, 3)]
    x = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(1))

    def ref():
        h = torch.tanh(F.linear(x, plain[0], plain[3]))
        h = torch.tanh(F.linear(h, plain[1], plain[4]))
        return F.linear(h, plain[2], plain[5])

    torch.testing.assert_close(model(x), ref(), **TOL)
    want = torch.autograd.grad(loss_of(ref()), plain[:3])
    got = torch.autograd.grad(loss_of(model(x)), ws)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)
    # (is_grads_batched is not tried here: the tiled kernels' backward has no vmap rule)
    loss_of(model(x)).backward(inputs=[ws[1]])
    torch.testing.assert_close(blocks[1].weight.grad, want[1], **TOL)
    assert not blocks[0].weight.grad.any() and not blocks[2].weight.grad.any()  # the other groups' tiles: zeros
