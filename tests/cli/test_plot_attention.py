"""Attention figures (paper Figures 3-5) and the Python API's attention weights."""

import json
import struct

import pytest
import torch

from attn_only_tools.guards.errors import PluginError
from helpers import TINY, reversal_data, train  # noqa: E402


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    root = tmp_path_factory.mktemp("attn")
    reversal_data(root, 300)
    train(root / "bin", root / "ckpt", "--arch", "transformer_base", *TINY, "--warmup-updates", 10, max_update=5)
    import attn_only_plugin

    return attn_only_plugin.load(root / "ckpt", data=root / "bin")


def test_weights_shapes_rows_and_causality(translator):
    att = translator.attention("1 2 3 4", target="4 3 2 1")
    S, T = 5, 5  # four words + </s>
    assert att["encoder"].shape == (2, 4, S, S) and att["cross"].shape == (2, 4, T, S)
    assert att["decoder"].shape == (2, 4, T, T)
    for kind in ("encoder", "decoder", "cross"):
        assert torch.allclose(att[kind].sum(-1), torch.ones(att[kind].shape[:-1]), atol=1e-5)
    assert torch.all(att["decoder"].triu(diagonal=1) == 0)  # causal mask (section 3.2.3)
    assert att["source_tokens"] == ["1", "2", "3", "4", "</s>"]
    own = translator.attention("1 2 3")  # no target: the model's own beam output
    assert own["cross"].shape[-1] == 4


def test_figures_and_json(translator, tmp_path, script):
    plot = script("plot_attention")
    att = translator.attention("1 2 3 4 5", target="5 4 3 2 1")
    written = plot.render(att, tmp_path, layer=None, word="2", heads=[0, 1])  # a number is an index
    names = {p.name for p in written}
    assert {
        "lines_2.png",
        "heads.png",
        "grid_encoder.png",
        "grid_decoder.png",
        "grid_cross.png",
        "lines_2.svg",
        "attention.json",
    } <= names
    for png in tmp_path.glob("*.png"):
        data = png.read_bytes()
        width, height = struct.unpack(">II", data[16:24])
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and width >= 300 and height >= 200 and len(data) > 5000
    back = json.loads((tmp_path / "attention.json").read_text())
    assert torch.allclose(torch.tensor(back["cross"]), att["cross"]) and back["source_tokens"][0] == "1"
    with pytest.raises(PluginError, match="not a source token"):
        plot.render(att, tmp_path, layer=None, word="banana", heads=[0])
    with pytest.raises(PluginError, match="head 9 is out of range"):
        plot.render(att, tmp_path, layer=None, word="", heads=[9])
    for layer in (-5, -1, 2):  # --layer -5 used to mean the default silently
        with pytest.raises(
            PluginError,
            match=f"^--layer {layer} is out of range: the model has 2 encoder "
            r"layers, numbered 0-1 \(leave --layer out for 0, the second to last\)$",
        ):
            plot.render(att, tmp_path / "refused", layer=layer, word="", heads=[0])
    assert not (tmp_path / "refused").exists()


def test_labels_mark_word_pieces(script):
    assert script("plot_attention").labels(["▁Click", "ing", "▁OK", "</s>"]) == ["Click", "·ing", "OK", "</s>"]
