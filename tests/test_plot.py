"""seq2d.plot: the block graph and the spy plot of every preset, saved as PNG and SVG;
the layout rules; the spy image against linear_weight(); pooling above N = 2000."""

import textwrap

import networkx as nx
import numpy as np
import pytest
import torch

import seq2d
from seq2d import graph as G
from seq2d.plot import SPY_DOWNSAMPLE_ABOVE, draw_graph, graph_layout, spy, spy_image
from seq2d.models.presets import build_preset

PRESETS = {
    "mlp": "mlp:64,32,10",
    "rnn": "rnn:8,16,layers=2",
    "truncated-rnn": "truncated-rnn:8,16,k=3,layers=2",
    "transformer": "transformer:16,2,32,norm_first=1",
    "encoder": "transformer:16,2,32,layers=2",
    "random": "masked-random:40,30,10,density=0.2",
    "blocksparse-random": "blocksparse-random:64,32,32,density=0.3,tile=16",
}

SPEC = textwrap.dedent("""
    steps = 3
    [[slots]]
    size = 16
    [[slots]]
    size = 16
    activation = "relu"
    bias = true
    [[slots]]
    size = 16
    activation = "tanh"
    [[slots]]
    size = 4
    bias = true
    [[blocks]]
    row = 1
    col = 0
    kind = "random"
    density = 0.25
    [[blocks]]
    row = 2
    col = 1
    kind = "mask"
    indices = [[0, 1], [1, 2], [2, 3]]
    tie = "shared"
    [[blocks]]
    row = 1
    col = 2
    tie = "shared"
    [[blocks]]
    row = 2
    col = 0
    kind = "identity"
    [[blocks]]
    row = 2
    col = 2
    kind = "diagonal"
    [[blocks]]
    row = 3
    col = 2
    kind = "per_row"
    n = 3
    [[blocks]]
    row = 3
    col = 0
    kind = "exact"
    n = 5
    trainable = false
""")


def _blocksparse_mlp():
    m = seq2d.mlp([40, 24, 10])
    return m.to_blocksparse(16)


def _models():
    out = {k: (lambda p=p: build_preset(p)) for k, p in PRESETS.items()}
    out["mlp-blocksparse"] = _blocksparse_mlp
    return out


MODELS = _models()


def _check_file(path):
    data = path.read_bytes()
    assert len(data) > 1024, (path, len(data))
    if path.suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert b"<svg" in data[:2000]


@pytest.mark.parametrize("name", list(MODELS))
def test_graph_and_spy_write_png_and_svg(name, tmp_path):
    model = MODELS[name]()
    for fn in (draw_graph, spy):
        for suffix in (".png", ".svg"):
            path = tmp_path / f"{name}-{fn.__name__}{suffix}"
            fig = fn(model, path=path, dpi=50)
            assert fig.axes, "the figure holds the drawing"
            _check_file(path)


def test_spec_file_model_with_frozen_identity_and_ties(tmp_path):
    spec = tmp_path / "m.toml"
    spec.write_text(SPEC)
    model = build_preset(str(spec))
    fig = draw_graph(model, path=tmp_path / "g.png", dpi=50)
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("tie group 0") for t in texts)
    assert "identity" in texts and any("back edge" in t for t in texts)
    fig = spy(model, path=tmp_path / "s.png", dpi=50)
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "frozen (fixed, non-zero)" in texts and "identity block" in texts
    train, frozen, f = spy_image(model)
    assert f == 1 and frozen.sum() == 5  # the 5 frozen entries of F[3][0]


@pytest.mark.parametrize("fn", [draw_graph, spy])
def test_bad_suffix_is_a_value_error_naming_the_valid_ones(fn, tmp_path):
    with pytest.raises(ValueError, match=r"\.png, \.svg"):
        fn(seq2d.mlp([4, 3]), path=tmp_path / "out.pdf")
    with pytest.raises(ValueError, match="without suffix"):
        fn(seq2d.mlp([4, 3]), path=tmp_path / "out")
    assert not list(tmp_path.iterdir())


def test_draws_into_the_callers_axes_and_closes_nothing(tmp_path):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    fig, (a, b) = plt.subplots(1, 2)
    try:
        assert draw_graph(seq2d.mlp([4, 3, 2]), ax=a) is fig
        assert spy(seq2d.mlp([4, 3, 2]), ax=b, path=tmp_path / "both.png") is fig
        assert plt.fignum_exists(fig.number)  # saved, not closed
        _check_file(tmp_path / "both.png")
    finally:
        plt.close(fig)
    draw_graph(seq2d.mlp([4, 3, 2]), path=tmp_path / "own.png")
    assert plt.get_fignums() == before  # own figures never reach pyplot's registry


def test_title_and_legend_of_the_graph():
    model = build_preset("truncated-rnn:8,16,k=3")
    fig = draw_graph(model)
    ax = fig.axes[0]
    assert ax.get_title() == "TruncatedRNN: 6 slots, steps = 3, depth = 3, 400 trainable parameters"
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "tie group 0: 128 params at 3 positions" in texts
    assert "tie group 1: 256 params at 2 positions" in texts


@pytest.mark.parametrize("name", ["mlp", "encoder", "truncated-rnn"])
def test_acyclic_layout_is_layered_by_depth(name):
    model = MODELS[name]()
    core = getattr(model, "core", model)
    pos = graph_layout(core)
    depth = G.depths(core)
    g = G.to_networkx(core)
    for v, (x, _) in pos.items():
        if g.in_degree(v) > 0:
            assert x == depth[v]
        else:  # a held source sits one column before its first reader
            assert x == min(depth[s] for s in g.successors(v)) - 1
    for u, v in g.edges:
        assert pos[u][0] < pos[v][0]
    ys = {}
    for v, (x, y) in pos.items():  # slots of one column never overlap
        assert all(abs(y - y2) >= 1.0 for y2 in ys.get(x, []))
        ys.setdefault(x, []).append(y)


@pytest.mark.parametrize("name", ["rnn", "random"])
def test_cyclic_layout_keeps_each_recurrent_core_in_consecutive_columns(name):
    model = MODELS[name]()
    core = getattr(model, "core", model)
    pos = graph_layout(core)
    g = G.to_networkx(core)
    cores = G.recurrent_cores(g)
    assert cores
    for c in cores:
        xs = sorted(pos[v][0] for v in c)
        assert xs == list(np.arange(xs[0], xs[0] + len(c)))
    cond = nx.condensation(g)
    for a, b in cond.edges:  # edges between cores (or slots) point right
        xa = max(pos[v][0] for v in cond.nodes[a]["members"])
        xb = min(pos[v][0] for v in cond.nodes[b]["members"])
        assert xa < xb


@pytest.mark.parametrize("name", ["mlp", "random", "truncated-rnn", "transformer"])
def test_spy_image_is_the_support_of_linear_weight(name):
    model = MODELS[name]()
    train, frozen, f = spy_image(model)
    core = getattr(model, "core", model)
    assert f == 1 and train.shape == (core.offsets[-1],) * 2
    assert np.array_equal(train | frozen, (core.linear_weight() != 0).numpy())


def test_blocksparse_spy_image_equals_the_dense_one():
    model = build_preset("masked-random:40,30,10,density=0.3")
    dense = spy_image(model)[0]
    model.to_blocksparse(16)
    assert np.array_equal(spy_image(model)[0], dense)


def _pooled_reference(mask: np.ndarray, f: int) -> np.ndarray:
    N = mask.shape[0]
    M = -(-N // f)
    pad = np.zeros((M * f, M * f), dtype=bool)
    pad[:N, :N] = mask
    return pad.reshape(M, f, M, f).any(axis=(1, 3))


@pytest.mark.parametrize("preset", ["mlp:2100,40,10", "blocksparse-random:1024,1024,64,density=0.05,tile=32"])
def test_spy_pools_above_2000(preset, tmp_path):
    model = build_preset(preset)
    N = model.offsets[-1]
    assert N > SPY_DOWNSAMPLE_ABOVE
    train, frozen, f = spy_image(model)
    assert f > 1 and max(train.shape) <= 1000 and train.shape == (-(-N // f),) * 2
    assert np.array_equal(train, _pooled_reference((model.linear_weight() != 0).numpy(), f))
    fig = spy(model, path=tmp_path / "big.png", dpi=50)
    assert "block-max pooled" in fig.axes[0].get_title()
    _check_file(tmp_path / "big.png")
    small = spy_image(model, max_size=100)
    assert max(small[0].shape) <= 100


def test_options_are_checked():
    with pytest.raises(ValueError, match="size_scale"):
        draw_graph(seq2d.mlp([4, 3]), size_scale="cubic")
    with pytest.raises(ValueError, match="max_size"):
        spy_image(seq2d.mlp([4, 3]), max_size=0)
    with pytest.raises(TypeError, match="Sequential2D"):
        spy(torch.nn.Linear(3, 4))
