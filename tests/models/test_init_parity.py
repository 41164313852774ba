"""Our initialisation against fairseq's built-in transformer (at equal work ours once learned
worse, and the cause was the initial scale of the FFN and the attention projections: docs/quality.md).

1. Statistics: every parameter role (a parameter name with its layer index removed, pooled over
   the layers) has the same mean and spread in our fresh model as in a fresh built-in converted to
   our layout. The tolerance is sampling noise, not a fudge: the sample sd of n uniform or normal
   draws has a relative standard error of at most 0.45 / sqrt(n) (uniform: sqrt(0.8 / n) / 2), and
   we allow 6 of them plus 2%. The differences this catches are 10% to 2.2x (FFN W_2 under Xavier:
   2.2x; the encoder-decoder W^Q fused the old way: 1.4x; zero against uniform biases: infinite),
   more than 6 standard errors at these sizes.
2. Learning: from their own fresh initialisations, the two models trained alike on the same batches
   reach the same loss after a few updates, within what seeds of one model differ by.
"""

import re
from types import SimpleNamespace

import torch

from attn_only_plugin.export.fairseq import fairseq_to_ours
from attn_only_plugin.models.transformer import AttnOnlyTransformer, TransformerConfig
from helpers import build_builtin, make_dictionary

SIZE = dict(d_model=64, d_ff=256, heads=4, layers=2)


def fresh_pair(seed: int, vocab: int = 200):
    """(ours, the built-in) freshly built with seed, learned positions (convertible), same sizes."""
    d = make_dictionary(vocab)
    theirs = build_builtin(d, **SIZE, seed=seed)
    cfg = TransformerConfig(
        encoder_layers=SIZE["layers"],
        decoder_layers=SIZE["layers"],
        d_model=SIZE["d_model"],
        d_ff=SIZE["d_ff"],
        heads=SIZE["heads"],
        dropout=0.0,
        learned_pos=True,
        max_source_positions=64,
        max_target_positions=64,
    )
    torch.manual_seed(seed)
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    return AttnOnlyTransformer.build_model(cfg, task), theirs, d


def by_role(state: dict) -> dict:
    """role -> all values of the parameters of that role, pooled over layers (pad rows dropped)."""
    roles = {}
    for name, value in state.items():
        role = re.sub(r"\.layers\.\d+\.", ".layers.*.", name)
        roles.setdefault(role, []).append(value.detach().flatten().double())
    return {role: torch.cat(values) for role, values in roles.items()}


def test_initial_statistics_match_the_builtin():
    ours, theirs, d = fresh_pair(seed=1)
    mine = by_role({k: v for k, v in ours.state_dict().items() if "embed.tokens" not in k})
    reference = by_role(
        {k: v for k, v in fairseq_to_ours(theirs.state_dict(), d.pad()).items() if "embed.tokens" not in k}
    )
    # the token table without its pad row (zero in both)
    rows = [i for i in range(len(d)) if i != d.pad()]
    mine["embed.tokens"] = ours.encoder.embed.tokens.weight[rows].detach().flatten().double()
    reference["embed.tokens"] = theirs.encoder.embed_tokens.weight[rows].detach().flatten().double()
    assert mine.keys() == reference.keys()
    for role, x in mine.items():
        y, n = reference[role], x.numel()
        assert n == y.numel(), role
        if y.std() == 0:  # LayerNorm gains and biases, out-projection biases: constants
            assert torch.equal(x, y), role
            continue
        tol = 6 * 0.45 / n**0.5 + 0.02
        assert abs(x.std() / y.std() - 1) < tol, f"{role}: sd {x.std():.4f} against the built-in's {y.std():.4f}"
        assert abs(x.mean() - y.mean()) < 6 * y.std() / n**0.5, role


def _train(model, batches, d, steps: int) -> float:
    """Adam (section 5.3's betas) at a fixed 1e-3 on the batches in turn; the mean loss (label
    smoothing 0.1, fairseq's criterion for both) over the last 5 updates."""
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    losses = []
    for step in range(steps):
        src, prev, tgt = batches[step % len(batches)]
        logits = model(src, src.ne(d.pad()).sum(1), prev)[0]
        lprobs = logits.log_softmax(-1).view(-1, logits.size(-1))
        loss, _ = label_smoothed_nll_loss(lprobs, tgt.view(-1), 0.1, ignore_index=d.pad())
        opt.zero_grad()
        (loss / tgt.ne(d.pad()).sum()).backward()
        opt.step()
        losses.append(loss.item() / tgt.ne(d.pad()).sum().item())
    return sum(losses[-5:]) / 5


def reversal_batches(d, n: int = 4, B: int = 16, seed: int = 0):
    """Sources of 5-12 random words (left-padded), targets their reversal (right-padded)."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        lengths = torch.randint(5, 13, (B,), generator=g).tolist()
        words = [torch.randint(d.nspecial, len(d), (t,), generator=g) for t in lengths]
        S = max(lengths) + 1
        src = torch.full((B, S), d.pad())
        prev, tgt = torch.full((B, S), d.pad()), torch.full((B, S), d.pad())
        for i, w in enumerate(words):
            src[i, S - len(w) - 1 :] = torch.cat([w, torch.tensor([d.eos()])])
            out = torch.cat([w.flip(0), torch.tensor([d.eos()])])
            tgt[i, : len(out)] = out
            prev[i, : len(out)] = torch.cat([torch.tensor([d.eos()]), out[:-1]])
        batches.append((src, prev, tgt))
    return batches


def test_loss_after_a_few_updates_matches_the_builtin():
    """Mean over three seeds of the loss after 30 updates: ours within 4% of the built-in's, either
    way. One model's seeds spread by ~3% here (sd ~1.7%, so ~2% for a mean of three): 4% is two sd
    of the mean. A Xavier FFN fails it (docs/development.md, "Measurements behind test thresholds")."""
    results = {"ours": [], "builtin": []}
    for seed in (1, 2, 3):
        ours, theirs, d = fresh_pair(seed, vocab=40)
        batches = reversal_batches(d)
        for name, model in (("ours", ours), ("builtin", theirs)):
            torch.manual_seed(seed)  # the same dropout-free training, the same batches
            results[name].append(_train(model, batches, d, steps=30))
    mean = {k: sum(v) / len(v) for k, v in results.items()}
    assert abs(mean["ours"] / mean["builtin"] - 1) < 0.04, results
