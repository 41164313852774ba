"""LayerDrop and pruning (Fan et al. 2019) and activation checkpointing, in the stack loops of
models/encoder_decoder.py: options fairseq's transformer has, not the paper's."""

import logging

import pytest
import torch
from omegaconf import OmegaConf

from attn_only_tools.guards.errors import PluginError
from helpers import build_model, check_cached_decoding, random_batch


def _count_layer_calls(model):
    calls = {"encoder": 0, "decoder": 0}
    for side in calls:
        for layer in getattr(model, side).layers:
            layer.register_forward_pre_hook(lambda *_, side=side: calls.__setitem__(side, calls[side] + 1))
    return calls


def test_layerdrop_skips_whole_layers_in_training_only(dictionary):
    model = build_model(dictionary, encoder_layers=4, decoder_layers=4, encoder_layerdrop=0.5, decoder_layerdrop=0.25)
    calls = _count_layer_calls(model)
    src, prev = random_batch(dictionary)
    model.train()
    torch.manual_seed(0)
    steps = 100
    for _ in range(steps):
        model(src, None, prev)
    assert abs(calls["encoder"] / (4 * steps) - 0.5) < 0.07  # kept with probability 1 - p
    assert abs(calls["decoder"] / (4 * steps) - 0.75) < 0.07
    model.eval()
    calls.update(encoder=0, decoder=0)
    with torch.no_grad():
        a, b = model(src, None, prev)[0], model(src, None, prev)[0]
    assert calls == {"encoder": 8, "decoder": 8} and torch.equal(a, b)  # every layer at inference


def test_layerdrop_off_changes_nothing(dictionary):
    """p = 0 (the default) draws nothing: the training step is the one without the option."""
    src, prev = random_batch(dictionary)
    outs = []
    for p in (0.0, None):
        model = build_model(dictionary, dropout=0.1, **({} if p is None else {"encoder_layerdrop": p})).train()
        torch.manual_seed(5)
        outs.append(model(src, None, prev)[0])
    assert torch.equal(*outs)


def test_layerdrop_out_of_range_refused(dictionary):
    with pytest.raises(PluginError, match=r"--decoder-layerdrop must be in \[0, 1\), got 1.0"):
        build_model(dictionary, decoder_layerdrop=1.0)


def _pruned(dictionary, full, caplog, **keep):
    cfg = OmegaConf.create({"_name": "transformer_base", **keep})
    model = build_model(dictionary, encoder_layers=3, decoder_layers=3, **keep)
    with caplog.at_level(logging.INFO):
        model.load_state_dict(full.state_dict(), model_cfg=cfg)
    return model, cfg


def test_layers_to_keep_prunes_on_load(dictionary, caplog):
    full = build_model(dictionary, encoder_layers=3, decoder_layers=3)
    model, cfg = _pruned(dictionary, full, caplog, encoder_layers_to_keep="0,2", decoder_layers_to_keep="1")
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (2, 1)
    assert torch.equal(model.encoder.layers[1].ffn.w1.weight, full.encoder.layers[2].ffn.w1.weight)
    assert torch.equal(model.decoder.layers[0].cross_attn.q.weight, full.decoder.layers[1].cross_attn.q.weight)
    assert "pruning the encoder to its layers 0,2 of 3" in caplog.text
    assert "pruning the decoder to its layers 1 of 3" in caplog.text
    assert cfg.encoder_layers_to_keep is None  # done: a second load does not prune again
    # the pruned model is the full model without the dropped layers
    for side, kept in (("encoder", [0, 2]), ("decoder", [1])):
        getattr(full, side).layers = torch.nn.ModuleList(getattr(full, side).layers[i] for i in kept)
    src, prev = random_batch(dictionary)
    assert torch.allclose(model(src, None, prev)[0], full(src, None, prev)[0], atol=1e-6)
    check_cached_decoding(model, dictionary)  # cached decoding equals the full pass on the pruned model


def test_pruning_one_side_keeps_the_other(dictionary, caplog):
    """fairseq's prune_state_dict alone would drop every layer of the side without a list."""
    full = build_model(dictionary, encoder_layers=3, decoder_layers=3)
    model, _ = _pruned(dictionary, full, caplog, encoder_layers_to_keep="1")
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (1, 3)
    assert torch.equal(model.decoder.layers[2].ffn.w2.weight, full.decoder.layers[2].ffn.w2.weight)


def test_layers_to_keep_refusals(dictionary, caplog):
    with pytest.raises(
        PluginError, match="--encoder-layers-to-keep 0,3: the model has 2 encoder layers, numbered 0 to 1"
    ):
        build_model(dictionary, encoder_layers_to_keep="0,3")
    with pytest.raises(PluginError, match="--decoder-layers-to-keep 0,x: give layer numbers separated by commas"):
        build_model(dictionary, decoder_layers_to_keep="0,x")
    full = build_model(dictionary, encoder_layers=2, decoder_layers=2)
    with pytest.raises(PluginError, match="--encoder-layers-to-keep 2: the checkpoint has 2 encoder layers"):
        _pruned(dictionary, full, caplog, encoder_layers_to_keep="2")


@pytest.mark.parametrize("option", ["checkpoint_activations", "offload_activations"])
def test_checkpointing_gives_the_same_loss_and_gradients(dictionary, option):
    """Recomputed layers (dropout included: torch restores the RNG state) give the loss and
    gradients of the run that keeps its activations."""
    src, prev = random_batch(dictionary)
    results = []
    for on in (False, True):
        model = build_model(dictionary, dropout=0.3, attention_dropout=0.1, relu_dropout=0.1, **{option: on}).train()
        calls = _count_layer_calls(model)
        torch.manual_seed(7)
        logits, _ = model(src, None, prev)
        loss = torch.log_softmax(logits, -1)[..., 4].sum()
        loss.backward()
        assert calls == ({"encoder": 4, "decoder": 4} if on else {"encoder": 2, "decoder": 2})  # run again in backward
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss0, grads0), (loss1, grads1) = results
    assert torch.equal(loss0, loss1)
    assert grads0.keys() == grads1.keys()
    for name in grads0:
        assert torch.allclose(grads0[name], grads1[name], atol=1e-6, rtol=1e-5), name
