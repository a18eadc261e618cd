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
    "truncated-rnn": "truncated_rnn:8,16,k=3,layers=2",
    "transformer": "transformer_layer:16,2,32,norm_first=1",
    "encoder": "transformer_encoder:16,2,32,layers=2",
    "random": "random_mask:40,30,10,density=0.2",
    "blocksparse-random": "random_tiles:64,32,32,density=0.3,tile=16",
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
    model = build_preset("truncated_rnn:8,16,k=3")
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
    model = build_preset("random_mask:40,30,10,density=0.3")
    dense = spy_image(model)[0]
    model.to_blocksparse(16)
    assert np.array_equal(spy_image(model)[0], dense)


def _pooled_reference(mask: np.ndarray, f: int) -> np.ndarray:
    N = mask.shape[0]
    M = -(-N // f)
    pad = np.zeros((M * f, M * f), dtype=bool)
    pad[:N, :N] = mask
    return pad.reshape(M, f, M, f).any(axis=(1, 3))


@pytest.mark.parametrize("preset", ["mlp:2100,40,10", "random_tiles:1024,1024,64,density=0.05,tile=32"])
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


# ---------------------------------------------------------------------------- pictures for a paper (issue 22 item 6)
def _rendered(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _margins_px(path):
    """The white border around a saved PNG, in pixels (the smallest of the four sides)."""
    import matplotlib.image as mpimg

    img = mpimg.imread(path)[..., :3]
    ink = np.argwhere((img < 0.98).any(axis=2))
    (r0, c0), (r1, c1) = ink.min(axis=0), ink.max(axis=0)
    return min(r0, c0, img.shape[0] - 1 - r1, img.shape[1] - 1 - c1)


@pytest.mark.parametrize("epochs", [[1], [1, 2, 3, 4, 5], list(range(1, 101))])
def test_integer_ticks_on_an_epoch_axis(epochs):
    from seq2d.plot import integer_ticks
    from seq2d.plot.common import new_figure

    fig, ax = new_figure((7, 4))
    ax.plot(epochs, [0.9] * len(epochs), marker="o")
    integer_ticks(ax.xaxis)
    _rendered(fig)
    lo, hi = ax.get_xlim()
    shown = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert shown and all(float(t).is_integer() for t in shown)  # never 0.96 .. 1.04 or 1.25


@pytest.mark.parametrize("fn", [draw_graph, spy])
def test_paper_style_has_larger_fonts_tight_margins_and_no_generated_title(fn, tmp_path):
    model = build_preset("mlp:784,256,10")
    default = fn(model, path=tmp_path / "default.png", dpi=100)
    paper = fn(model, path=tmp_path / "paper.png", dpi=100, style="paper")

    def sizes(fig):  # the labels the plot writes: slot and block labels, legend entries
        return [t.get_fontsize() for t in fig.axes[0].texts + fig.axes[0].get_legend().get_texts()]

    assert min(sizes(paper)) >= 1.3 * max(sizes(default))
    assert default.axes[0].get_title() and paper.axes[0].get_title() == ""
    assert fn(model, style="paper", title="mine").axes[0].get_title() == "mine"  # a given title stays
    assert _margins_px(tmp_path / "paper.png") <= 3 < 8 <= _margins_px(tmp_path / "default.png")
    with pytest.raises(ValueError, match=r"Unknown style 'journal'. Select from 'default' or 'paper'"):
        fn(model, style="journal")


def test_slot_labels_in_the_graph_and_the_spy_plot():
    model = build_preset("mlp:784,256,10")
    g = draw_graph(model, slot_labels=["x", "h", "y"])
    assert {"x: 784\nidentity", "h: 256\nrelu", "y: 10\nidentity"} <= {t.get_text() for t in g.axes[0].texts}
    ax = spy(model, slot_labels=["x", "h", "y"]).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x\n784", "h\n256", "y\n10"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x: 784", "h: 256", "y: 10"]
    assert "label" in ax.get_xlabel()
    with pytest.raises(ValueError, match=r"slot_labels: expected 3 labels"):
        spy(model, slot_labels=["x", "y"])
    with pytest.raises(TypeError, match=r"slot_labels must be a sequence"):
        draw_graph(model, slot_labels="xhy")


def _strips(ax):
    """(top, bottom) of each slot's strip of rows in the spy plot, from its images (drawn units)."""
    return sorted({(im.get_extent()[3], im.get_extent()[2]) for im in ax.images})


def test_spy_draws_small_slots_wider_and_names_their_true_size():
    model = build_preset("mlp:784,256,10")
    ax = spy(model).axes[0]
    total = ax.get_xlim()[1]
    top, bottom = _strips(ax)[-1]  # slot 2, 10 rows
    assert bottom - top == pytest.approx(0.04 * total)  # at least 4% of the side, not a sliver of 10 / 1050
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "2\n10"  # the true size on the axis
    assert "drawn wider" in ax.get_title()
    exact = spy(model, min_slot=0).axes[0]
    assert [b - t for t, b in _strips(exact)] == [784, 256, 10] and exact.get_xlim() == (0, 1050)
    with pytest.raises(ValueError, match="min_slot"):
        spy(model, min_slot=0.7)


def test_spy_widened_slot_shows_the_true_pattern():
    # a 3-unit slot drawn wider still shows which of its entries are stored: the image rows of
    # the strip repeat the true rows, in order
    mask = torch.zeros(203, 203, dtype=torch.bool)
    mask[200:, :200] = torch.eye(3, 200, dtype=torch.bool)  # output row r reads input r
    model = seq2d.from_mask([200, 3], mask)
    ax = spy(model, annotate=False).axes[0]
    strip = [im for im in ax.images if im.get_extent()[3] > 199][0].get_array()
    rows = [tuple(np.flatnonzero(r > 0)) for r in np.asarray(strip)]
    assert len(rows) > 3 and sorted(set(rows)) == sorted(set(rows), key=rows.index)  # each true row once, in order
    assert len(set(rows)) == 3


@pytest.mark.parametrize("preset", ["random_model:784,256,128,10", "random_mask:40,30,10,density=0.2", "transformer_layer:16,2,32",
                                    "rnn:8,16,layers=2"])
def test_spy_labels_never_overlap_each_other_or_the_entries(preset):
    fig = spy(build_preset(preset))
    ax = fig.axes[0]
    r = _rendered(fig)
    labels = [t.get_window_extent(r) for t in ax.texts]
    assert labels
    for k, a in enumerate(labels):
        assert not any(a.overlaps(b) for b in labels[k + 1:])
    for im in ax.images:  # the drawn entries
        x0, x1, y1, y0 = im.get_extent()
        (px0, py0), (px1, py1) = ax.transData.transform([(x0, y0), (x1, y1)])
        for a in labels:
            assert not (a.x0 < max(px0, px1) - 0.5 and a.x1 > min(px0, px1) + 0.5 and
                        a.y0 < max(py0, py1) - 0.5 and a.y1 > min(py0, py1) + 0.5), (a, im.get_extent())
    if preset.startswith("random:"):
        assert sorted(t.get_text()[-1] for t in ax.texts) == ["%"] * 12  # each of the 3 x 4 blocks is labelled


def test_graph_title_never_prints_none():
    assert draw_graph(build_preset("rnn:8,16")).axes[0].get_title() == \
        "RNN: 2 slots, one step per time step, depth = cyclic, 400 trainable parameters"
    core = build_preset("rnn:8,16").core
    title = draw_graph(core).axes[0].get_title()
    assert "None" not in title and "steps given per call" in title
