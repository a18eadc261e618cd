"""The named MNIST protocols (`seq2d mnist --protocol NAME`, seq2d.lab.mnist_comparison.PROTOCOLS):
the config fields each sets, the test-set switch, the MS-thesis randomized model, the CLI."""

import json

import pytest
import torch

from seq2d.cli import main
from seq2d.errors import InvalidValue
from seq2d.lab.mnist_comparison import MODELS, PROTOCOLS, SCALES, configs_for, protocol_config, protocol_table
from seq2d.models.random import random_blocks_density
from seq2d.train.config import TrainConfig, load_config
from seq2d.train.datasets import load_data, make_augment


def test_the_three_protocols_and_their_fields():
    assert list(PROTOCOLS) == ["ours", "paper", "ms-thesis"]
    for scale in SCALES:
        assert protocol_config("ours", scale) == SCALES[scale]  # today's default, unchanged
    ours = load_config(protocol_config("ours"))
    assert (ours.erasing_p, ours.perspective_p, ours.augment_test, ours.normalize, ours.lr) == (0, 0, False, True, 1e-3)
    paper = load_config(protocol_config("paper"))
    assert (paper.erasing_p, paper.perspective_p, paper.augment_test) == (0.5, 0.5, False)
    diff = {k for k, v in vars(paper).items() if v != getattr(ours, k)}
    assert diff == {"erasing_p", "perspective_p"}  # otherwise ours
    ms = load_config(protocol_config("ms-thesis", "full"))
    assert (ms.lr, ms.normalize, ms.data, ms.epochs) == (1e-4, False, "full", 100)
    assert {k for k, v in vars(ms).items() if v != getattr(load_config(SCALES["full"]), k)} == {"lr", "normalize"}
    assert PROTOCOLS["ms-thesis"].models == ("mlp", "random_density")
    cfgs = configs_for(ms, PROTOCOLS["ms-thesis"].models)
    assert cfgs["random_density"].model == "random_blocks_density" and cfgs["mlp"].model == "mlp"
    assert all(c.lr == 1e-4 and not c.normalize for c in cfgs.values())
    for name, p in PROTOCOLS.items():
        assert set(p.models) <= set(MODELS) and p.sets and p.source
        assert f"`{name}`" in protocol_table()
    assert "not re-read" in PROTOCOLS["ms-thesis"].source and "our reading" in PROTOCOLS["paper"].source
    with pytest.raises(InvalidValue, match="unknown protocol 'bogus'"):
        protocol_config("bogus")


def test_augment_test_switch():
    assert "augment_test" not in protocol_config("paper")
    assert protocol_config("paper", augment_test=True)["augment_test"] is True
    with pytest.raises(InvalidValue, match="augment_test"):  # nothing to apply: refused, not ignored
        load_config(protocol_config("ours", augment_test=True))
    base = dict(data="synthetic", sizes=[2500, 4], erasing_p=1.0, perspective_p=1.0, seed=3)
    plain = load_data(TrainConfig(**base))
    aug = load_data(TrainConfig(**base, augment_test=True))
    again = load_data(TrainConfig(**base, augment_test=True))
    assert torch.equal(plain["train"][0], aug["train"][0])  # training images untouched here (augmented per batch)
    assert torch.equal(plain["test"][1], aug["test"][1])
    assert not torch.equal(plain["test"][0], aug["test"][0])
    assert torch.equal(aug["test"][0], again["test"][0])  # one seeded draw
    other = load_data(TrainConfig(**{**base, "seed": 4}, augment_test=True))
    assert not torch.equal(aug["test"][0], other["test"][0])


def test_ms_thesis_data_is_unnormalised_and_borders_black():
    cfg = TrainConfig(data="subset", normalize=False, perspective_p=1.0)
    X = load_data(cfg, "cpu")["train"][0]
    assert float(X.min()) >= 0 and float(X.max()) <= 1
    assert make_augment(cfg).perspective_fill == 0.0
    assert make_augment(TrainConfig(perspective_p=1.0)).perspective_fill < 0  # the normalised black
    with pytest.raises(InvalidValue, match="normalize"):
        TrainConfig(data="synthetic", normalize=False)


def test_random_blocks_density_per_block_density_and_biases():
    sizes = [2500, 500, 200, 100, 10]
    m = random_blocks_density(sizes, seed=1)
    assert sorted(m.blocks) == sorted(f"{i}_{j}" for i in range(1, 5) for j in range(5))
    for key, blk in m.blocks.items():
        i, j = map(int, key.split("_"))
        total = sizes[i] * sizes[j]
        kept = int(blk.mask.sum())
        assert kept == round(0.5108 * total), key
        assert abs(kept / total - 0.5108) <= 0.5 / total + 1e-12
        assert int((blk.weight != 0).sum()) <= kept and blk.bias is not None and blk.bias.shape == (sizes[i],)
    assert len(list(m.slot_bias.parameters())) == 0  # biases per block only
    n_w = sum(round(0.5108 * sizes[i] * sizes[j]) for i in range(1, 5) for j in range(5))
    assert m.num_parameters() == n_w + 5 * sum(sizes[1:])
    assert [type(a).__name__ for a in m.acts] == ["Identity", "ReLU", "ReLU", "ReLU", "ReLU"]  # output too
    assert m.steps == 4
    out = m(torch.rand(2, 2500))
    assert out.shape == (2, 10) and float(out.detach().min()) >= 0  # ReLU on the logits
    small = random_blocks_density([6, 5, 3], density=0.25, output_activation=False, seed=0)
    assert type(small.acts[-1]).__name__ == "Identity"
    assert torch.equal(random_blocks_density([6, 5, 3], seed=2).blocks["1_0"].mask,
                       random_blocks_density([6, 5, 3], seed=2).blocks["1_0"].mask)


def _cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    return rc, *capsys.readouterr()


def test_cli_bogus_protocol_is_one_error_line(capsys, tmp_path):
    rc, _, err = _cli(["mnist", "--protocol", "bogus", "--out", str(tmp_path)], capsys)
    lines = [x for x in err.splitlines() if x.startswith("seq2d: error:")]
    assert rc == 2 and len(lines) == 1 and "--protocol" in lines[0] and "'bogus'" in lines[0]
    rc, _, err = _cli(["mnist", "--augment-test", "--out", str(tmp_path)], capsys)
    lines = [x for x in err.splitlines() if x.startswith("seq2d: error:")]
    assert rc == 2 and len(lines) == 1 and "augment_test" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "mlp").exists()


@pytest.mark.parametrize("protocol, extra", [("ours", []), ("paper", []), ("paper", ["--augment-test"]),
                                             ("ms-thesis", [])])
def test_quick_run_of_each_protocol(protocol, extra, capsys, tmp_path):
    models = "mlp,random_density" if protocol == "ms-thesis" else "mlp"
    rc, out, _ = _cli(["mnist", "--protocol", protocol, *extra, "--models", models, "--epochs", "1",
                       "--max-updates", "2", "--num-threads", "1", "--quiet", "--out", str(tmp_path)], capsys)
    assert rc == 0
    assert f"(protocol {protocol})" in out and ("test set augmented too" in out) == bool(extra)
    rec = json.loads((tmp_path / "results.json").read_text())
    assert rec["protocol_name"] == protocol and rec["models"] == models.split(",")
    want = protocol_config(protocol, augment_test=bool(extra))
    for row in rec["rows"]:
        assert row["test_acc"] is not None
        assert {k: row["config"][k] for k in want if k != "epochs"} == {k: v for k, v in want.items() if k != "epochs"}


def test_docs_show_the_protocol_table():
    import pathlib

    doc = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "results" / "mnist.md").read_text()
    assert protocol_table() in doc
    assert "we have not read the MS-thesis scripts" in doc
