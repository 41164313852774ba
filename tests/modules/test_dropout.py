"""Section 5.4: dropout at rate P_drop, drawn as uniform 32-bit integers on a CPU (modules/dropout.py)."""

import pytest
import torch

from attn_only_plugin.modules.dropout import Dropout, dropout, keep_threshold, uniform_int32


def test_threshold_hand_computed():
    assert keep_threshold(0.0) == -(2**31)  # every int32 is kept
    assert keep_threshold(0.5) == 0  # the non-negative half is kept
    assert keep_threshold(0.1) == -(2**31) + 429496730  # round(0.1 * 2^32)
    assert keep_threshold(1.0) == 2**31  # no int32 is kept


def test_uniform_int32_uses_all_bits_and_the_seed():
    torch.manual_seed(3)
    a = uniform_int32((1001,))  # odd: the last word is half used
    torch.manual_seed(3)
    b = uniform_int32((1001,))
    assert a.dtype == torch.int32 and a.shape == (1001,) and torch.equal(a, b)
    big = uniform_int32((200_000,))
    assert big.min() < -(2**31) * 0.99 and big.max() > 2**31 * 0.99  # both signs, full range
    assert abs((big < 0).float().mean().item() - 0.5) < 0.01
    low = (big & 0xFFFF).float()  # the low 16 bits are uniform too
    assert abs(low.mean().item() / 65535 - 0.5) < 0.01


def test_dropout_is_the_threshold_on_the_same_draws():
    x = torch.arange(1.0, 13.0).view(3, 4)
    torch.manual_seed(0)
    y = dropout(x, 0.25)
    torch.manual_seed(0)
    keep = uniform_int32((3, 4)) >= 2**30 - 2**31  # round(0.25 2^32) = 2^30
    assert torch.equal(y == 0, ~keep) and torch.allclose(y, torch.where(keep, x / 0.75, torch.zeros(())))


def test_keep_rate_scale_and_gradient():
    torch.manual_seed(1)
    x = torch.full((400, 500), 2.0, requires_grad=True)
    y = dropout(x, 0.1)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.003  # 6 standard deviations of 200k draws
    assert torch.allclose(y[kept], torch.tensor(2.0 / 0.9))
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept) and torch.allclose(x.grad[kept], torch.tensor(1 / 0.9))
    assert abs(y.mean().item() - 2.0) < 0.02  # E[dropout(x)] = x


def test_module_eval_identity_and_edges():
    m = Dropout(0.3)
    x = torch.randn(5, 7)
    assert m.eval()(x) is x
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros(5, 7))  # torch's kernel for p = 1
    assert Dropout(0.0).train()(x) is x
    y = dropout(x.to(torch.bfloat16), 0.5)
    assert y.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)


def test_retain_dropout_contract_names():
    """fairseq's make_generation_fast_ contract (--retain-dropout, --retain-dropout-modules): on a
    model in eval mode, dropout stays off unless retained, for all modules or those named (fairseq's
    names or ours), and the attention's dropout too."""
    from attn_only_plugin.modules.dropout import module_names
    from helpers import build_model, make_dictionary, random_batch

    assert module_names("models.0.encoder.layers.1.sub_attn.dropout")[0] == "TransformerEncoderLayer"
    assert module_names("decoder.layers.0.ffn.relu_dropout")[0] == "TransformerDecoderLayer"
    assert module_names("decoder.layers.0.cross_attn")[0] == "MultiheadAttention"
    assert module_names("encoder.embed.dropout")[0] == "TransformerEncoder"
    d = make_dictionary()
    src, prev = random_batch(d)

    def outputs(retain, modules=None, p=0.3):
        model = build_model(d, dropout=p, attention_dropout=p, relu_dropout=p)
        if retain is not None:
            model.make_generation_fast_(retain_dropout=retain, retain_dropout_modules=modules)
        assert not model.training
        enc = model.encoder(src)
        return [model.decoder(prev, encoder_out=enc)[0] for _ in range(2)]

    a, b = outputs(None)
    assert torch.equal(a, b)  # eval: deterministic
    a, b = outputs(False)
    assert torch.equal(a, b)  # make_generation_fast_ without --retain-dropout
    a, b = outputs(True)
    assert not torch.allclose(a, b)  # every dropout retained: two passes differ
    a, b = outputs(True, ["TransformerEncoder"])  # only the encoder's embedding dropout: decoder passes agree
    assert torch.equal(a, b)
    for names in (["TransformerDecoderLayer"], ["DecoderLayer"], ["MultiheadAttention"]):
        model = build_model(d, dropout=0.0, attention_dropout=0.3)
        model.make_generation_fast_(retain_dropout=True, retain_dropout_modules=names)
        retained = [n for n, m in model.named_modules() if getattr(m, "apply_during_inference", False)]
        assert retained and all(n.startswith("decoder.layers") or "attn" in n for n in retained), retained
        if names == ["MultiheadAttention"]:
            assert all(n.endswith("attn") for n in retained) and len(retained) == 2 + 2 * 2
