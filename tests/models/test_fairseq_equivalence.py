"""Our model computes the same function as fairseq's built-in transformer (to 1e-5) once its
weights are converted: same sizes, learned positions, shared embeddings, post-norm or pre-norm."""

import pytest
import torch

from attn_only_plugin.export.fairseq import fairseq_to_ours, ours_to_fairseq
from helpers import build_builtin, build_model, random_batch


@pytest.mark.parametrize("pre_norm", [False, True])
def test_equivalent_to_fairseq_transformer(dictionary, pre_norm):
    theirs = build_builtin(dictionary, normalize_before=pre_norm).eval()
    ours = build_model(dictionary, learned_pos=True, pre_norm=pre_norm)
    ours.load_state_dict(fairseq_to_ours(theirs.state_dict(), dictionary.pad()))
    src, prev = random_batch(dictionary)
    lengths = src.ne(dictionary.pad()).sum(1)
    real = src.ne(dictionary.pad())
    with torch.no_grad():
        enc_t = theirs.encoder(src, lengths)
        enc_o = ours.encoder(src, lengths)
        x_t = enc_t["encoder_out"][0].transpose(0, 1)  # fairseq is time first: (S, B, C) -> (B, S, C)
        assert torch.allclose(x_t[real], enc_o["encoder_out"][0][real], atol=1e-5)
        lp_t = theirs.get_normalized_probs(theirs.decoder(prev, encoder_out=enc_t), log_probs=True)
        lp_o = ours.get_normalized_probs(ours.decoder(prev, encoder_out=enc_o), log_probs=True)
        assert torch.allclose(lp_t, lp_o, atol=1e-5)
    # and back: ours -> fairseq gives the original fairseq weights
    back = ours_to_fairseq(ours.state_dict(), dictionary.pad(), d_k=8, d_v=8, heads=4)
    original = theirs.state_dict()
    for name, value in back.items():
        if name.endswith("embed_positions.weight"):
            value, ref = value[dictionary.pad() + 1 :], original[name][dictionary.pad() + 1 :]
        else:
            ref = original[name]
        assert torch.equal(value, ref), name
