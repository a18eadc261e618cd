"""seq2d.dynamics: the recorded states against the docstring loop, exact / Hankel DMD against
known linear systems, the Jacobian's spectral radius against the weight matrix and a finite-
difference Jacobian, and the docs example as printed."""

import math
import pathlib
import re

import pytest
import torch
from torch import nn

import seq2d
from seq2d.core.reference import reference_step
from seq2d.dynamics import dmd, iteration_spectrum, jacobian_spectral_radius, record_states, updated_slots
from seq2d.errors import InvalidInput, InvalidValue

ROOT = pathlib.Path(__file__).resolve().parents[1]
F64 = torch.float64


def _linear_system(eigs, seed=0):
    """A real N x N matrix with the given spectrum (complex ones as (r, theta): the pair r e^{+-i theta})."""
    g = torch.Generator().manual_seed(seed)
    blocks, spectrum = [], []
    for e in eigs:
        if isinstance(e, tuple):
            r, th = e
            blocks.append(r * torch.tensor([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]], dtype=F64))
            spectrum += [complex(r * math.cos(th), r * math.sin(th)), complex(r * math.cos(th), -r * math.sin(th))]
        else:
            blocks.append(torch.tensor([[float(e)]], dtype=F64))
            spectrum.append(complex(e, 0))
    D = torch.block_diag(*blocks)
    V = torch.randn(D.shape[0], D.shape[0], generator=g, dtype=F64)
    return V @ D @ torch.linalg.inv(V), torch.tensor(spectrum, dtype=torch.complex128)


def _trajectories(A, M, T, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, A.shape[0], generator=g, dtype=A.dtype)
    out = [x]
    for _ in range(T):
        out.append(out[-1] @ A.T)
    return torch.stack(out)  # (T + 1, M, N)


def _match(found, expected):
    """Largest distance from an expected eigenvalue to the nearest found one, and vice versa."""
    d = (found[:, None] - expected[None, :]).abs()
    return max(float(d.min(0).values.max()), float(d.min(1).values.max()))


# ---------------------------------------------------------------------------- DMD
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-8), (torch.float32, 1e-3)])
def test_exact_dmd_recovers_a_known_spectrum(dtype, tol):
    A, spectrum = _linear_system([0.95, 0.5, -0.3, (0.7, 0.5), 0.1, (0.4, 2.0)])
    S = _trajectories(A, M=5, T=8).to(dtype)
    res = dmd(S)
    assert res.rank == 8
    assert _match(res.eigenvalues.cpu(), spectrum) < tol
    assert res.spectral_radius == pytest.approx(0.95, abs=tol)
    assert res.reconstruction_error < 10 * tol and res.residual < 10 * tol
    # exact modes: A phi = lambda phi; the amplitudes rebuild each trajectory's first snapshot
    Ac = A.to(torch.complex128)
    assert torch.allclose(Ac @ res.modes, res.modes * res.eigenvalues, atol=100 * tol)
    assert torch.allclose((res.modes @ res.amplitudes.T).real, S[0].to(F64).T, atol=100 * tol)


def test_dmd_of_one_trajectory_and_batch_shapes_agree():
    A, _ = _linear_system([0.9, 0.6, (0.8, 1.0)])
    S = _trajectories(A, M=6, T=6)
    flat = dmd(S)
    nested = dmd(S.reshape(7, 2, 3, 4))  # any batch shape: the trajectories are flattened
    assert torch.allclose(flat.eigenvalues, nested.eigenvalues)
    one = dmd(_trajectories(A, M=1, T=12)[:, 0])  # (T + 1, N): one trajectory
    assert one.rank == 4 and one.spectral_radius == pytest.approx(0.9, abs=1e-8)


def test_hankel_dmd_recovers_the_frequency_of_one_observable():
    omega, decay = 0.7, 0.97
    t = torch.arange(40, dtype=F64)
    phases = torch.tensor([0.0, 1.0, 2.5], dtype=F64)
    x = (decay ** t[:, None]) * torch.cos(omega * t[:, None] + phases)  # (T + 1, 3 trajectories)
    S = x.unsqueeze(-1)  # N = 1 observable
    plain = dmd(S)
    assert plain.rank == 1 and abs(float(plain.eigenvalues.imag.abs().max())) == 0  # no oscillation from one value
    res = dmd(S, delays=6)
    assert res.rank == 2 and res.delays == 6 and res.modes.shape == (6, 2)
    assert torch.allclose(res.eigenvalues.angle().abs(), torch.full((2,), omega, dtype=F64), atol=1e-9)
    assert res.spectral_radius == pytest.approx(decay, abs=1e-9)
    assert res.reconstruction_error < 1e-9


def test_reconstruction_error_separates_linear_from_nonlinear_maps():
    A, _ = _linear_system([0.9, -0.5, (0.8, 0.3)])
    linear = dmd(_trajectories(A, M=4, T=10))
    assert linear.reconstruction_error < 1e-10
    g = torch.Generator().manual_seed(3)
    x = torch.rand(8, 2, generator=g, dtype=F64)
    out = [x]
    for _ in range(10):  # a nonlinear map: coupled logistic maps
        u, v = out[-1].unbind(-1)
        out.append(torch.stack([3.7 * u * (1 - u) + 0.1 * v, 3.2 * v * (1 - v) * u], dim=-1))
    nonlinear = dmd(torch.stack(out))
    assert nonlinear.reconstruction_error > 0.1 and nonlinear.residual > 0.05


def test_rank_truncation_projects_the_operator_on_the_pod_basis():
    """For linear data ``Y = A X`` the rank-r operator is ``U_r^T A U_r`` (``X V_r S_r^{-1} = U_r``):
    a truncated fit is the system seen through its r most energetic directions, not its r slowest modes."""
    A, _ = _linear_system([0.99, 0.9, 0.05, 0.01])
    S = _trajectories(A, M=3, T=30)
    res = dmd(S, rank=2)
    assert res.rank == 2 and res.operator.shape == (2, 2) and res.eigenvalues.shape == (2,)
    U = torch.linalg.svd(S[:-1].reshape(-1, 4).T, full_matrices=False)[0][:, :2]
    torch.testing.assert_close(res.basis.abs(), U.abs())  # the leading left singular vectors (up to sign)
    torch.testing.assert_close(res.operator, res.basis.T @ A @ res.basis, rtol=1e-10, atol=1e-10)
    assert res.reconstruction_error > 1e-3  # a rank-2 model of a rank-4 system
    assert dmd(S).reconstruction_error < 1e-10


def test_dmd_refuses_what_it_cannot_fit():
    S = torch.randn(3, 4, 5)
    with pytest.raises(InvalidInput, match="at least delays \\+ 1 = 4 snapshots"):
        dmd(S, delays=3)
    with pytest.raises(InvalidValue, match="exceeds the numerical rank"):
        dmd(S, rank=50)
    with pytest.raises(InvalidValue, match="delays must be a positive int"):
        dmd(S, delays=0)
    zero = dmd(torch.zeros(4, 2, 3))
    assert zero.rank == 0 and zero.spectral_radius == 0.0 and zero.reconstruction_error == 0.0


def test_dmd_agrees_with_pydmd_where_installed():
    pydmd = pytest.importorskip("pydmd")
    A, _ = _linear_system([0.9, 0.4, (0.7, 0.8)])
    S = _trajectories(A, M=3, T=6)
    X = S[:-1].reshape(-1, 4).T.numpy()
    Y = S[1:].reshape(-1, 4).T.numpy()
    theirs = pydmd.DMD(svd_rank=4, exact=True).fit(X, Y)
    ours = dmd(S, rank=4)
    assert _match(ours.eigenvalues, torch.from_numpy(theirs.eigs)) < 1e-8


# ---------------------------------------------------------------------------- record_states
def _cyclic(dtype=F64, activations="tanh", store="dense"):
    """Slot 0 input; slots 1 and 2 feed each other and themselves; slot 3 reads both (3 x 3 cycle)."""
    mask = torch.tensor([[0, 0, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
    return seq2d.from_mask([5, 7, 6, 3], mask, activations=activations, seed=2, steps=6, dtype=dtype, store=store)


def _by_hand(model, x, steps):
    """The docs/concepts.md loop (seq2d.core.reference), slots concatenated, None as zeros."""
    state = model.split_inputs(x)
    like = x

    def cat(st):
        return torch.cat([s if s is not None else like.new_zeros(*like.shape[:-1], n)
                          for s, n in zip(st, model.sizes)], dim=-1)

    out = [cat(state)]
    for _ in range(steps):
        state = reference_step(model, state)
        out.append(cat(state))
    return torch.stack(out)


@pytest.mark.parametrize("kind", ["mlp", "cyclic", "cyclic-module"])
def test_record_states_equals_stepping_by_hand(kind):
    if kind == "mlp":
        model = seq2d.mlp([5, 7, 6, 3], dtype=F64)
    elif kind == "cyclic":
        model = _cyclic()
    if kind == "cyclic-module":  # a module block with a bias reads slot 2, absent at first: skipped
        sizes = [5, 7, 6, 3]
        blocks = {(i, j): seq2d.LinearBlock(sizes[j], sizes[i], dtype=F64)
                  for i, j in [(1, 0), (1, 1), (1, 2), (2, 1), (2, 2), (3, 1)]}
        blocks[(3, 2)] = nn.Linear(6, 3, dtype=F64)
        model = seq2d.Sequential2D(sizes, blocks, bias=True, activations="tanh", steps=6, dtype=F64)
    x = torch.randn(4, 5, dtype=F64)
    S = record_states(model, x, 7)
    assert S.shape == (8, 4, sum(model.sizes))
    torch.testing.assert_close(S, _by_hand(model, x, 7), rtol=1e-12, atol=1e-12)
    if kind == "mlp":  # an acyclic model stops moving after its depth
        assert torch.equal(S[3], S[7])


def test_record_states_of_a_tiled_model_drops_the_padding():
    dense = _cyclic(dtype=torch.float32)
    tiled = _cyclic(dtype=torch.float32).to_blocksparse(16)
    assert tiled.flat_size > sum(tiled.sizes)
    x = torch.randn(6, 5)
    torch.testing.assert_close(record_states(tiled, x, 5), record_states(dense, x, 5), rtol=1e-5, atol=1e-6)
    r_t = jacobian_spectral_radius(tiled, record_states(tiled, x, 5)[-1])
    r_d = jacobian_spectral_radius(dense, record_states(dense, x, 5)[-1])
    torch.testing.assert_close(r_t, r_d, rtol=1e-4, atol=1e-6)


def test_record_states_takes_a_state_list():
    model = _cyclic()
    x = torch.randn(3, 5, dtype=F64)
    start = model(model.split_inputs(x), 2)
    S = record_states(model, start, 3)
    torch.testing.assert_close(S[1:], record_states(model, x, 5)[3:], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------- the Jacobian
@pytest.mark.parametrize("exact_below", [512, 1])  # 1: the Arnoldi path (krylov = n: exact)
def test_jacobian_radius_of_a_linear_model_is_the_weights_radius(exact_below):
    model = _cyclic(activations="identity")
    W = model.linear_weight().detach().to(F64)  # held rows are zero: eig(W) = eig(W[upd, upd]) and zeros
    expected = float(torch.linalg.eigvals(W).abs().max())
    assert 0.3 < expected  # not a trivial model
    x = torch.randn(5, sum(model.sizes), dtype=F64)
    r = jacobian_spectral_radius(model, x, exact_below=exact_below, krylov=16)
    assert r.shape == (5,)
    torch.testing.assert_close(r, torch.full((5,), expected, dtype=F64), rtol=1e-9, atol=1e-12)


def _fd_jacobian(model, x, slots, h=1e-6):
    """Central differences of one step w.r.t. the slots' columns of the concatenated state (one sample)."""
    off = model.offsets
    idx = torch.cat([torch.arange(off[i], off[i + 1]) for i in slots])

    def f(v):
        st = list(v.unsqueeze(0).split(list(model.sizes), dim=-1))
        return torch.cat(model.step(st), dim=-1)[0, idx]

    cols = []
    for c in idx.tolist():
        e = torch.zeros_like(x)
        e[c] = h
        cols.append((f(x + e) - f(x - e)) / (2 * h))
    return torch.stack(cols, dim=1)


@pytest.mark.parametrize("exact_below", [512, 1])
def test_jacobian_radius_of_a_tanh_model_matches_finite_differences(exact_below):
    model = _cyclic()
    x = record_states(model, torch.randn(3, 5, dtype=F64), 4)[-1]
    slots = updated_slots(model)
    assert slots == [1, 2, 3]
    expected = torch.stack([torch.linalg.eigvals(_fd_jacobian(model, xb, slots)).abs().max() for xb in x])
    got = jacobian_spectral_radius(model, x, exact_below=exact_below, krylov=16)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-8)
    # a held slot included adds its eigenvalue 1
    with_input = jacobian_spectral_radius(model, x, slots=[0, 1, 2, 3])
    torch.testing.assert_close(with_input, torch.maximum(expected, torch.ones_like(expected)), rtol=1e-6, atol=1e-8)


def test_jacobian_radius_of_an_mlp_is_zero():
    model = seq2d.mlp([5, 7, 6, 3], dtype=F64)
    x = record_states(model, torch.randn(4, 5, dtype=F64), 3)[-1]
    assert float(jacobian_spectral_radius(model, x).max()) == 0.0  # exact path: block-triangular, exactly
    # Arnoldi stops when the Krylov space is invariant; what is left is the rounding of a
    # nilpotent matrix's eigenvalues, about eps ** (1 / depth)
    assert float(jacobian_spectral_radius(model, x, exact_below=1).max()) < 1e-4


def test_jacobian_radius_refuses_bad_arguments():
    model = _cyclic()
    with pytest.raises(InvalidValue, match="slots must name slots"):
        jacobian_spectral_radius(model, torch.zeros(2, 21, dtype=F64), slots=[9])
    with pytest.raises(InvalidInput, match=r"concatenated state \(B, 21\)"):
        jacobian_spectral_radius(model, torch.zeros(2, 5, dtype=F64))


# ---------------------------------------------------------------------------- together
def test_iteration_spectrum_of_a_linear_model_agrees_with_its_jacobian():
    model = _cyclic(activations="identity")
    spec = iteration_spectrum(model, torch.randn(16, 5, dtype=F64), 20)
    rho = float(spec.jacobian_radius.mean())
    # the increments of an affine map obey dz' = A dz whatever the input: DMD finds A's radius
    assert spec.dmd.spectral_radius == pytest.approx(rho, rel=1e-6)
    assert spec.dmd.reconstruction_error < 1e-6
    tail = spec.change[-5:]
    assert torch.allclose(tail[1:] / tail[:-1], torch.full((4,), rho, dtype=F64), rtol=1e-2)
    d = spec.as_dict()
    assert d["slots"] == [1, 2, 3] and d["steps"] == 20 and len(d["change"]) == 20
    # the states themselves: each sample's constant input term does not fit one linear map
    assert iteration_spectrum(model, torch.randn(16, 5, dtype=F64), 20, increments=False).dmd.reconstruction_error > 1e-3


def test_iteration_spectrum_names_too_few_steps():
    with pytest.raises(InvalidValue, match="needs steps >= 3 .delays = 2, fitted to the increments., got steps = 2"):
        iteration_spectrum(_cyclic(), torch.randn(2, 5, dtype=F64), 2, delays=2)


def test_iteration_spectrum_of_an_mlp_settles_at_its_depth():
    model = seq2d.mlp([5, 7, 6, 3], dtype=F64)
    spec = iteration_spectrum(model, torch.randn(8, 5, dtype=F64), 6)
    assert float(spec.jacobian_radius.max()) == 0.0
    assert torch.all(spec.change[:3] > 0) and torch.all(spec.change[3:] == 0)


# ---------------------------------------------------------------------------- the docs example
def test_docs_example_prints_what_the_page_shows(capsys):
    text = (ROOT / "docs" / "dynamics.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", text, re.S).group(1)
    exec(compile(code, "docs/dynamics.md", "exec"), {})
    assert capsys.readouterr().out == shown
