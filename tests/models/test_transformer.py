"""The model: parameter counts of Table 3, config errors, cached decoding, weight checks."""

import re
from types import SimpleNamespace

import pytest
import torch

from attn_only_plugin.models.transformer import AttnOnlyTransformer, TransformerConfig
from attn_only_tools.guards.errors import PluginError
from helpers import HostReads, build_model, check_cached_decoding, decode_with_reorders, make_dictionary, random_batch


@pytest.mark.parametrize("arch,paper_millions", [("transformer_base", 65), ("transformer_big", 213)])
def test_parameter_counts_table3(arch, paper_millions):
    from fairseq.models import ARCH_CONFIG_REGISTRY

    args = SimpleNamespace()
    ARCH_CONFIG_REGISTRY[arch](args)  # the preset, as --arch applies it
    joined = make_dictionary(37000 - 4)  # 37,000 types incl. fairseq's 4 specials (section 5.1)
    task = SimpleNamespace(source_dictionary=joined, target_dictionary=joined)
    model = AttnOnlyTransformer.build_model(TransformerConfig(**vars(args)), task)
    n = model.num_parameters()
    print(f"{arch}: {n / 1e6:.1f}M parameters (Table 3: {paper_millions}M)")
    assert abs(n / 1e6 - paper_millions) / paper_millions < 0.05


def test_parse_preset():
    from fairseq.models import ARCH_CONFIG_REGISTRY

    args = SimpleNamespace()
    ARCH_CONFIG_REGISTRY["transformer_parse"](args)
    cfg = TransformerConfig(**vars(args))
    assert (cfg.encoder_layers, cfg.d_model, cfg.d_ff, cfg.heads, cfg.dropout, cfg.attention_dropout) == (
        4,
        1024,
        2048,
        8,
        0.2,
        0.2,
    )


def test_relative_positions_beyond_the_longest_input_refused(dictionary):
    """--relative-positions 1000000000 tried to allocate 2K + 1 embeddings (64 GB)
    for distances no input has: bounded by the position limits, one line."""
    with pytest.raises(
        PluginError,
        match="^--relative-positions 1000000000 clips no distance: inputs are at most "
        "64 tokens, so give K < 64 \\(Shaw et al. use K = 16 or less\\)$",
    ):
        build_model(dictionary, relative_positions=10**9)
    build_model(dictionary, relative_positions=16)  # the control


def test_config_errors(dictionary):
    with pytest.raises(PluginError, match="not divisible by h"):
        build_model(dictionary, d_model=30, heads=4)
    other = make_dictionary(25)
    with pytest.raises(PluginError, match="joined dictionary"):
        build_model(dictionary, other)
    build_model(dictionary, other, embedding_sharing="decoder")  # allowed
    m = build_model(dictionary, d_model=30, heads=4, d_k=8, d_v=5)  # Table 3 rows A/B: free d_k, d_v
    assert m.encoder.layers[0].self_attn.qkv.weight.shape == (4 * (8 + 8 + 5), 30)


@pytest.mark.parametrize("flag,value", [("d_k", 0), ("d_v", 0), ("d_k", -8)])
def test_d_k_d_v_below_one_refused_not_read_as_default(dictionary, flag, value):
    """--d-k 0 used to mean d_model / h (`cfg.d_k or ...`) while the checkpoint stored 0; and
    --heads 0 ended in a ZeroDivisionError in the divisibility check."""
    with pytest.raises(
        PluginError,
        match=re.escape(
            f"--{flag.replace('_', '-')} must be >= 1, got {value}: leave it out for d_model / h = 8 (a checkpoint "
            f"that stores 0 was trained with d_model / h: load it with --model-overrides \"{{'{flag}': None}}\")"
        ),
    ):
        build_model(dictionary, **{flag: value})
    with pytest.raises(PluginError, match="^--heads must be >= 1, got 0$"):
        build_model(dictionary, heads=0)
    m = build_model(dictionary)  # left out: d_model / h = 32 / 4
    assert m.cfg.d_k is None and m.encoder.layers[0].self_attn.qkv.weight.shape == (3 * 32, 32)


@pytest.mark.parametrize(
    "flag,value,rest",
    [("attention_window", 0, "full self-attention"), ("relative_positions", -1, "no relative positions")],
)
def test_window_and_relative_below_one_refused(dictionary, flag, value, rest):
    with pytest.raises(
        PluginError, match=re.escape(f"--{flag.replace('_', '-')} must be >= 1, got {value}: leave it out for {rest}")
    ):
        build_model(dictionary, **{flag: value})


def test_relative_positions_are_per_layer_and_absolute_ones_can_go(dictionary):
    """a^K (2K + 1, d_k) and a^V (2K + 1, d_v) in every self-attention layer, none in
    encoder-decoder attention; --no-absolute-positions adds no encoding to the embeddings."""
    model = build_model(dictionary, relative_positions=3, no_absolute_positions=True, d_v=5)
    names = {n: tuple(p.shape) for n, p in model.named_parameters() if ".relative." in n}
    assert names == {
        f"{side}.layers.{i}.self_attn.relative.{a}": (7, 8 if a == "a_k" else 5)
        for side in ("encoder", "decoder")
        for i in range(2)
        for a in ("a_k", "a_v")
    }
    tokens = torch.tensor([[5, 6, 5, 6]])
    x = model.encoder.embed(tokens)
    assert torch.equal(x[0, 0], x[0, 2])  # the same token at two positions: the same vector


def test_sharing_is_three_way(dictionary):
    m = build_model(dictionary)
    assert m.encoder.embed.tokens.weight is m.decoder.embed.tokens.weight is m.decoder.output_weight


# restricted self-attention and relative positions (docs/attention_variants.md): R = 1 and K = 1
# are shorter than the test sentences, so every window and clipping is exercised
VARIANTS = [
    dict(attention_window=1),
    dict(attention_window=2),
    dict(relative_positions=1),
    dict(relative_positions=2, no_absolute_positions=True),
    dict(attention_window=2, relative_positions=1, learned_pos=True),
]


@pytest.mark.parametrize("pre_norm,learned,grad", [(False, False, True), (True, True, True), (False, False, False)])
def test_cached_decoding_equals_full(dictionary, pre_norm, learned, grad):
    """grad=False is generation's setting (torch.no_grad): caches grow in place in their buffers."""
    with torch.set_grad_enabled(grad):
        check_cached_decoding(build_model(dictionary, pre_norm=pre_norm, learned_pos=learned), dictionary)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={v[k]}" for k in v))
@pytest.mark.parametrize("grad", [True, False])
def test_variants_cached_decoding_equals_full(dictionary, variant, grad):
    """With a window or relative positions, one row per hypothesis: every step equals the full
    pass through the reorders, and a window's caches keep only its R + 1 steps."""
    model = build_model(dictionary, **variant)
    with torch.set_grad_enabled(grad):
        check_cached_decoding(model, dictionary)
        src, prev = random_batch(dictionary, B=2, T=8)
        _, state = decode_with_reorders(model, src, prev, model.encoder(src), {4: torch.tensor([1, 0])})
    R = variant.get("attention_window")
    cache = model.decoder.get_incremental_state(state, "cache")
    assert cache["1.self.v"].size(2) == (8 if R is None else R + 1)


def _beam_start(model, dictionary, src, prev, g, differ_from):
    """SequenceGenerator's start: each sentence's encoder output expanded to a beam of g (kept one
    row per sentence), sources copied per hypothesis, and the hypotheses' prefixes made to differ
    from position differ_from on. Returns expand (B g,) hypothesis -> sentence, enc, src, prev."""
    expand = torch.arange(src.size(0)).repeat_interleave(g)  # (B g,)
    enc = model.encoder.reorder_encoder_out(model.encoder(src), expand)
    prev = prev[expand].clone()
    words = (prev.size(0), prev.size(1) - differ_from)
    prev[:, differ_from:] = torch.randint(dictionary.nspecial, len(dictionary), words)
    return expand, enc, src[expand], prev


def test_float16_beam_decoding_follows_the_float32_model(dictionary, monkeypatch):
    """fairseq-generate --fp16 runs the model in float16 (on a GPU; a CPU has float16 kernels
    too): the decoding caches are float16, every attention mask is boolean or of the queries'
    dtype (what each of torch's fused GPU kernels takes as it is), and every step stays within
    float16's rounding of the float32 model's full pass."""
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def checked(q, k, v, attn_mask=None, **kw):
        assert attn_mask is None or attn_mask.dtype in (torch.bool, q.dtype), (attn_mask.dtype, q.dtype)
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", checked)
    model = build_model(dictionary)
    half = build_model(dictionary).half()
    src, prev = random_batch(dictionary, B=2)
    with torch.no_grad():
        _, enc, src, prev = _beam_start(half, dictionary, src, prev, g=3, differ_from=2)
        orders = {2: torch.tensor([2, 0, 2, 3, 5, 4]), 4: torch.tensor([4, 3, 3])}
        enc, state = decode_with_reorders(half, src, prev, enc, orders, reference=model, atol=2e-2)
        cache = half.decoder.get_incremental_state(state, "cache")
        assert cache["0.self.k"].dtype == cache["0.cross.k"].dtype == torch.float16


def test_training_under_float16_autocast(dictionary):
    """fairseq-train --amp trains under float16 autocast (on a GPU; checked on the CPU here): the
    products run in float16, the real-token loss stays within 1% of float32's, and every parameter
    gets a finite gradient."""
    from attn_only_plugin.criterions.label_smoothed_ce import label_smoothed_nll_loss, target_lprobs

    model, pad = build_model(dictionary).train(), dictionary.pad()
    src, prev = random_batch(dictionary)
    target = torch.cat([prev[:, 1:], torch.full((prev.size(0), 1), dictionary.eos())], 1)
    prev[1, 4:], target[1, 4:] = pad, pad  # a shorter target: the real-token path packs it
    sample = dict(
        net_input=dict(src_tokens=src, src_lengths=src.ne(pad).sum(1), prev_output_tokens=prev), target=target
    )
    dtypes = []
    model.decoder.layers[0].ffn.w1.register_forward_hook(lambda m, i, out: dtypes.append(out.dtype))
    with torch.autocast("cpu", dtype=torch.float16):
        loss16, _ = label_smoothed_nll_loss(*target_lprobs(model, sample, pad), 0.1, pad)
    loss16.backward()
    loss32, _ = label_smoothed_nll_loss(*target_lprobs(model, sample, pad), 0.1, pad)
    assert dtypes[0] == torch.float16 and abs(loss16.item() / loss32.item() - 1) < 1e-2
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("variant", [{}] + VARIANTS, ids=lambda v: "-".join(f"{k}={v[k]}" for k in v) or "paper")
def test_beam_shares_encoder_rows_and_equals_full(dictionary, variant):
    """SequenceGenerator's orders: expand 2 sentences to beam 3, reorder within the beams, drop the
    first sentence. The encoder output and encoder-decoder keys/values stay one row per sentence
    (no copies), and every step equals the full pass over per-hypothesis copies of the source.
    The self-attention caches are one row per hypothesis; a window's keep only its last R + 1 steps."""
    model = build_model(dictionary, **variant)
    src, prev = random_batch(dictionary, B=2)
    with torch.no_grad():
        _, enc, src, prev = _beam_start(model, dictionary, src, prev, g=3, differ_from=2)  # hypotheses 0-2, 3-5
        assert enc["encoder_out"][0].size(0) == 2 and int(enc["beam"][0]) == 3
        orders = {2: torch.tensor([2, 0, 2, 3, 5, 4]), 3: torch.tensor([0, 1, 2, 3, 3, 5]), 4: torch.tensor([4, 3, 3])}
        enc, state = decode_with_reorders(model, src, prev, enc, orders)
        cache = model.decoder.get_incremental_state(state, "cache")
        assert enc["encoder_out"][0].size(0) == cache["0.cross.k"].size(0) == 1 and int(enc["beam"][0]) == 3
        steps = prev.size(1) if "attention_window" not in variant else variant["attention_window"] + 1
        assert cache["0.self.k"].shape[:3] == (3, 4, steps)  # (B, h, t, d_k): the 3 hypotheses left


@pytest.mark.parametrize("variant", [{}] + VARIANTS[1:2], ids=["paper", "window"])
def test_beam_reorder_is_index_select_and_a_broken_beam_falls_back(dictionary, variant):
    """A reorder gives every self-attention cache its rows in the new order (index_select), the
    few rows that move copied in place in the same buffer; an order that mixes sentences within a
    beam turns the encoder-decoder keys and values into one row per hypothesis; every step still
    equals the full pass."""
    model = build_model(dictionary, **variant)
    src, prev = random_batch(dictionary, B=2, T=7)
    with torch.no_grad():
        expand, enc, src, prev = _beam_start(model, dictionary, src, prev, g=3, differ_from=1)
        enc, state = decode_with_reorders(model, src, prev[:, :3], enc, {})
        cache = model.decoder.get_incremental_state(state, "cache")
        for order in (torch.tensor([1, 1, 0, 5, 3, 4]), torch.tensor([0, 1, 1, 3, 4, 5])):
            before = {k: (v.data_ptr(), v.index_select(0, order)) for k, v in cache.items() if ".self." in k}
            model.decoder.reorder_incremental_state_scripting(state, order)
            assert all(torch.equal(cache[k], v) for k, (_, v) in before.items())
        assert all(cache[k].data_ptr() == p for k, (p, _) in before.items())  # one row of six moved: in place
        orders = {3: torch.tensor([1, 1, 0, 5, 3, 4]), 5: torch.tensor([0, 3, 1, 4, 2, 5])}  # step 5 mixes sentences
        enc, state = decode_with_reorders(
            model, src, prev, model.encoder.reorder_encoder_out(model.encoder(src[[0, 3]]), expand), orders
        )
        cache = model.decoder.get_incremental_state(state, "cache")
        assert cache["0.cross.k"].size(0) == cache["0.self.k"].size(0) == 6 and not enc["beam"]


def test_a_decoding_step_gives_each_hypothesis_its_own_weights(dictionary):
    """With the encoder output shared by a beam, the self-attention and encoder-decoder weights
    returned at a step are each hypothesis's, equal to the full pass's row."""
    model = build_model(dictionary)
    src, prev = random_batch(dictionary, B=2)
    with torch.no_grad():
        _, enc, expanded_src, prev = _beam_start(model, dictionary, src, prev, g=2, differ_from=1)
        order = torch.tensor([1, 1, 3, 2])
        state = {}
        for t in range(4):
            if t == 2:
                enc = model.encoder.reorder_encoder_out(enc, order)
                model.decoder.reorder_incremental_state_scripting(state, order)
                prev = prev[order]
            _, step = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state, need_all_weights=True)
        _, full = model.decoder(prev[:, :4], encoder_out=model.encoder(expanded_src[order]), need_all_weights=True)
        for kind in ("self_attn", "cross_attn"):  # (B, h, 1, T_all or S) vs (B, h, 4, T_all or S)
            for w_step, w_full in zip(step[kind], full[kind], strict=True):
                assert torch.allclose(w_step[:, :, 0], w_full[:, :, 3], atol=1e-6), kind


def test_a_reorder_is_one_call_not_a_walk_over_modules(dictionary, monkeypatch):
    """fairseq's reorder_incremental_state_scripting looks for reorder_incremental_state on
    every submodule, every step; ours goes straight to the decoder's."""
    model = build_model(dictionary)
    src, prev = random_batch(dictionary, B=2)

    def walk():
        raise AssertionError("walked the modules")

    monkeypatch.setattr(model.decoder, "modules", walk)
    with torch.no_grad():
        decode_with_reorders(model, src, prev, model.encoder(src), {2: torch.tensor([1, 1])})


def test_shared_memory_gives_the_same_weights(dictionary):
    model = build_model(dictionary)
    src, prev = random_batch(dictionary, B=2)
    expand = torch.arange(2).repeat_interleave(3)
    enc = model.encoder(src)
    shared = model.encoder.reorder_encoder_out(enc, expand)
    copied = model.encoder(src[expand])
    a, extra_a = model.decoder(prev[expand], encoder_out=shared, need_attn=True, need_all_weights=True)
    b, extra_b = model.decoder(prev[expand], encoder_out=copied, need_attn=True, need_all_weights=True)
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(extra_a["attn"][0], extra_b["attn"][0], atol=1e-6)
    pairs = zip(extra_a["cross_attn"], extra_b["cross_attn"], strict=True)
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in pairs)


def test_shared_rows_rule():
    from attn_only_plugin.models.encoder_decoder import shared_rows

    rows, g = shared_rows(torch.tensor([0, 0, 0, 1, 1, 1]), 1)
    assert rows.tolist() == [0, 1] and g == 3  # beam expansion: one row per sentence
    rows, g = shared_rows(torch.tensor([2, 0, 1, 5, 5, 3]), 3)
    assert rows.tolist() == [0, 1] and g == 3  # reorder within beams: rows stay
    rows, g = shared_rows(torch.tensor([4, 3, 3]), 3)
    assert rows.tolist() == [1] and g == 3  # sentence 0 finished
    rows, g = shared_rows(torch.tensor([1, 1, 3, 2]), 1)
    assert rows.tolist() == [1, 1, 3, 2] and g == 1  # uneven runs: one row per hypothesis


def test_a_reorder_of_the_encoder_output_reads_the_host_once_per_test(dictionary):
    """SequenceGenerator reorders the encoder output every step; on a GPU each test of the order
    on the host waits for the device: shared_rows' two, and one for all fields whether the rows
    stay in place (helpers.HostReads counts them at torch's aten ops), not one per field. (The
    number of hypotheses per row is a tensor on the host: reading it waits for nothing.)"""
    model = build_model(dictionary)
    src, _ = random_batch(dictionary, B=2)
    enc = model.encoder.reorder_encoder_out(model.encoder(src), torch.arange(2).repeat_interleave(3))
    order = torch.tensor([2, 0, 1, 5, 5, 3])  # within the beams
    with HostReads() as audit:
        out = model.encoder.reorder_encoder_out(enc, order)
    beam = ["aten._local_scalar_dense", "torch.tensor"]  # the beam's g: read and made on the host, where it lives
    tests = ["aten.equal", "aten.equal", "aten.unique_consecutive"]
    assert sorted(name for name, _ in audit.found) == sorted(beam + tests)
    assert all(out[k][0] is enc[k][0] for k in ("encoder_out", "encoder_padding_mask", "src_tokens"))


def test_weights_do_not_change_outputs(dictionary):
    model = build_model(dictionary)
    src, prev = random_batch(dictionary)
    enc = model.encoder(src)
    plain, _ = model.decoder(prev, encoder_out=enc)
    with_w, extra = model.decoder(
        prev, encoder_out=model.encoder(src, need_weights=True), need_all_weights=True, need_attn=True
    )
    assert torch.allclose(plain, with_w, atol=1e-5)
    w = model.attention_weights(src, prev)
    assert w["encoder"].shape == (2, 3, 4, 7, 7) and w["cross"].shape == (2, 3, 4, 6, 7)
    assert torch.allclose(w["cross"].sum(-1), torch.ones(2, 3, 4, 6), atol=1e-5)
    assert torch.all(w["decoder"].triu(diagonal=1) == 0)  # causal
    assert extra["attn"][0].shape == (3, 6, 7)  # alignment: last layer, mean over heads


def test_checkpoint_of_other_shape_refused(dictionary):
    small, wide = build_model(dictionary), build_model(dictionary, d_model=64)
    with pytest.raises(PluginError, match="checkpoint does not fit this model"):
        small.load_state_dict(wide.state_dict())
    deeper = build_model(dictionary, encoder_layers=3)
    with pytest.raises(PluginError, match="unexpected encoder.layers.2"):
        small.load_state_dict(deeper.state_dict())


def test_too_long_input(dictionary):
    model = build_model(dictionary, max_source_positions=5)
    with pytest.raises(PluginError, match="exceeds the model's maximum of 5"):
        model.encoder(torch.full((1, 6), 5))
