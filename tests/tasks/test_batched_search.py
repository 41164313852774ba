"""`--batched-search` (tasks/batched_search.py, tasks/finished_hypotheses.py): the same hypotheses,
scores and per-token scores as fairseq's SequenceGenerator (and the task's GNMT and paper-rule
generators) on a tiny random model whose end-of-sentence logit follows its decoder state (so
that hypotheses end at many lengths, some at the cap), over sentences of different lengths;
every step of the search has the same shapes; what it cannot do is refused in one line."""

from argparse import Namespace

import pytest
import torch

from attn_only_plugin.modules import beam_reorder, decode_attention, static_cache
from attn_only_plugin.modules.decoding_state import DecodingState
from attn_only_plugin.tasks import batched_search
from attn_only_plugin.tasks.batched_search import BatchedBeamSearch
from attn_only_plugin.tasks.finished_hypotheses import FinishedHypotheses
from attn_only_plugin.tasks.translation_paper import PaperTranslationConfig, PaperTranslationTask
from attn_only_tools.guards.errors import PluginError
from helpers import HostReads, build_builtin, ending_model, make_dictionary, random_batch

D = make_dictionary(30)


def sample(B=8, S=9):
    """B sources of different lengths (left-padded), shuffled ids as fairseq-generate passes them."""
    src, _ = random_batch(D, B=B, S=S, seed=3)
    for b in range(B):
        src[b, : b % 5] = D.pad()  # (B, S): 0 to 4 pads
    return {"id": torch.arange(B).flip(0), "net_input": {"src_tokens": src, "src_lengths": src.ne(D.pad()).sum(1)}}


def generator(
    batched,
    beam=4,
    lenpen=0.6,
    style="fairseq",
    stop="fairseq",
    models=None,
    graph_search=False,
    kernel=False,
    decode_kernel=False,
    **args,
):
    cfg = PaperTranslationConfig(
        lenpen_style=style,
        beam_stop=stop,
        batched_search=batched,
        cuda_graph_search=graph_search,
        beam_reorder_kernel=kernel,
        decode_attention_kernel=decode_kernel,
    )
    task = PaperTranslationTask(cfg, D, D)
    gen_args = dict(beam=beam, lenpen=lenpen, max_len_a=1, max_len_b=5, min_len=1, unkpen=0, unnormalized=False)
    return task.build_generator(models, Namespace(**dict(gen_args, **args)))


def decode(models, batched, **options):
    gen = generator(batched, models=models, **options)
    assert isinstance(gen, BatchedBeamSearch) == batched
    with torch.no_grad():
        return gen.generate(models, sample())


def assert_same(theirs, ours):
    """The same hypotheses in the same order; scores and per-token scores within 1e-5."""
    assert [[h["tokens"].tolist() for h in hyps] for hyps in ours] == [
        [h["tokens"].tolist() for h in hyps] for hyps in theirs
    ]
    for hyps, hyps_ref in zip(ours, theirs, strict=True):
        for h, ref in zip(hyps, hyps_ref, strict=True):
            assert abs(float(h["score"]) - float(ref["score"])) <= 1e-5
            torch.testing.assert_close(h["positional_scores"], ref["positional_scores"], rtol=0, atol=1e-5)


CASES = [
    dict(beam=4),
    dict(beam=1),
    dict(beam=5),
    dict(beam=4, style="gnmt"),
    dict(beam=5, style="gnmt", lenpen=1.0),
    dict(beam=4, max_len_a=0, max_len_b=3),  # every sentence at the cap
    dict(beam=4, min_len=4),
    dict(beam=4, unkpen=5.0),
    dict(beam=4, unnormalized=True, lenpen=1),
    dict(beam=4, stop="paper"),
    dict(beam=4, stop="paper", style="gnmt"),
    dict(beam=5, stop="paper", style="gnmt", lenpen=-0.5),
    dict(beam=4, stop="paper", max_len_a=0, max_len_b=3),
]


@pytest.mark.parametrize("options", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_the_same_hypotheses_as_fairseqs_search(options):
    model = ending_model(D)
    theirs = decode([model], False, **options)
    ours = decode([model], True, **options)
    assert_same(theirs, ours)
    lengths = {len(h["tokens"]) for hyps in theirs for h in hyps}
    if options.get("max_len_b", 5) == 5 and options["beam"] > 1:  # (greedy search: every sentence at the cap)
        assert len(lengths) > 3  # hypotheses of many lengths, not all at the cap


@pytest.mark.parametrize("chunk", [4, 64])
def test_with_the_static_cache_and_an_ensemble(chunk, monkeypatch):
    """Fixed-size caches across chunk boundaries (4) and within one (64); ensembles of two of ours,
    and of ours with fairseq's transformer."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", chunk)
    model = ending_model(D, static_decoding_cache=True)
    assert_same(decode([model], False), decode([model], True))
    other = ending_model(D)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1.1)
    assert_same(decode([model, other], False, stop="paper"), decode([model, other], True, stop="paper"))
    builtin = build_builtin(D).eval()  # fairseq's transformer: its own reorder of the decoder state
    assert_same(decode([model, builtin], False), decode([model, builtin], True))


def counting_kernel_calls(monkeypatch) -> list:
    """beam_reorder.reorder_within_groups' calls, counted (one item a call)."""
    calls, original = [], beam_reorder.reorder_within_groups
    monkeypatch.setattr(beam_reorder, "reorder_within_groups", lambda *a: calls.append(1) or original(*a))
    return calls


@pytest.mark.parametrize("options", [dict(beam=4), dict(beam=5, stop="paper"), dict(beam=4, graph_search=True)])
def test_the_reorder_kernel_gives_the_same_hypotheses(monkeypatch, options):
    """--beam-reorder-kernel, run by Triton's interpreter: every reorder of every layer's fixed-size
    caches by the kernel, across chunk boundaries, and fairseq's hypotheses."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    model = ending_model(D, static_decoding_cache=True)
    calls = counting_kernel_calls(monkeypatch)
    ours = decode([model], True, kernel=True, **options)
    assert len(calls) >= 2 * 2 * 8  # K and V of 2 layers, 8 steps at least
    options.pop("graph_search", None)
    assert_same(decode([model], False, **options), ours)


@pytest.mark.parametrize("options", [dict(beam=4, stop="paper"), dict(beam=1, graph_search=True)])
def test_the_decode_attention_kernel_gives_the_same_hypotheses(monkeypatch, options):
    """--decode-attention-kernel, run by Triton's interpreter: every decoding step's self-attention
    by the kernel, across chunk boundaries (chunks and the kernel's blocks of 4 positions here), and
    fairseq's hypotheses."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    monkeypatch.setattr(decode_attention, "BLOCK_N", 4)
    model = ending_model(D, static_decoding_cache=True)
    calls, attend = [], decode_attention.attend
    monkeypatch.setattr(decode_attention, "attend", lambda *a: calls.append(1) or attend(*a))
    ours = decode([model], True, decode_kernel=True, **options)
    assert len(calls) >= 2 * 8  # 2 layers, 8 steps at least
    options.pop("graph_search", None)
    assert_same(decode([model], False, **options), ours)


@pytest.mark.parametrize(
    "flag, options",
    [("--beam-reorder-kernel", dict(kernel=True)), ("--decode-attention-kernel", dict(decode_kernel=True))],
)
def test_the_kernels_where_triton_cannot_run(monkeypatch, caplog, flag, options):
    """On a CPU without Triton's interpreter, each kernel's flag says so once in the log and torch's
    ops do the work: fairseq's hypotheses, no kernel call."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    model = ending_model(D, static_decoding_cache=True)
    calls = counting_kernel_calls(monkeypatch)
    monkeypatch.setattr(decode_attention, "attend", lambda *a: calls.append(1))
    with caplog.at_level("WARNING"):
        ours = decode([model], True, **options)
    assert calls == [] and caplog.text.count(f"{flag}: Triton cannot run on this device, so torch's ops") == 1
    assert_same(decode([model], False), ours)


@pytest.mark.parametrize("graph_search", [False, True])
def test_a_dropped_generator_is_freed_at_once_with_its_kept_search(graph_search):
    """With Python's garbage collector off: a generator that keeps its last search (a graphed one's
    buffers, caches and graphs, self.kept) is freed as soon as it is dropped, its search with it; a
    reference cycle between them would hold both (GPU memory, with translate() building a generator
    per call) until the collector came round."""
    import gc
    import weakref

    model = ending_model(D, static_decoding_cache=True)
    gen = generator(True, models=[model], graph_search=graph_search)
    gc.disable()
    try:
        with torch.no_grad():
            gen.generate([model], sample())
        assert (gen.kept is not None) == graph_search
        dropped = weakref.ref(gen)
        kept = [weakref.ref(gen.kept.beam.tokens), weakref.ref(gen.kept.pos)] if graph_search else []
        del gen
        assert dropped() is None and all(tensor() is None for tensor in kept)
    finally:
        gc.enable()


def test_every_step_has_the_same_shapes_and_buffers(monkeypatch):
    """The decoder sees B k hypotheses at every step (fairseq's search drops done sentences); with
    the static cache each layer's key buffer is the same tensor at every step of a chunk, and new
    cache storage is made only when a chunk begins."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    model = ending_model(D, static_decoding_cache=True)
    rows, buffers = [], []
    original = DecodingState.self_attention

    def spy(state, layer, k, v, window):
        out = original(state, layer, k, v, window)
        if layer == "0.self":
            rows.append(k.size(0))
            buffers.append((int(state.step), out[0].data_ptr()))
        return out

    monkeypatch.setattr(DecodingState, "self_attention", spy)
    hypos = decode([model], True)
    assert set(rows) == {8 * 4} and len(rows) == 15  # steps 0 to max_len = 1 x 9 + 5: some sentence at the cap
    assert max(len(h[0]["tokens"]) for h in hypos) > 1
    for chunk_start in range(0, len(buffers), 4):
        chunk = buffers[chunk_start : chunk_start + 4]
        assert len({ptr for _, ptr in chunk}) == 1  # one buffer per chunk
    assert len({ptr for _, ptr in buffers}) <= len(range(0, len(buffers), 4))


def test_it_stops_when_every_sentence_is_done(monkeypatch):
    """A batch whose sentences are all done before the cap stops at the next "all done?" test."""
    model = ending_model(D)
    steps = []
    original = BatchedBeamSearch.mask  # once a step
    monkeypatch.setattr(
        BatchedBeamSearch, "mask", lambda self, step, *a: steps.append(step) or original(self, step, *a)
    )
    hypos = decode([model], True, beam=5, stop="paper", style="gnmt", lenpen=-0.5, max_len_b=40)
    longest = max(len(h["tokens"]) for hyps in hypos for h in hyps)
    assert len(steps) < 49 and len(steps) % batched_search.SYNC_EVERY == 0 and longest <= len(steps)


def test_no_copy_to_the_host_in_a_step_but_the_all_done_test(monkeypatch):
    """Within the search (the hypotheses' final copy aside), with our model and the fixed-size
    caches: no .item(), .tolist(), .nonzero(), .cpu() or truth test of a tensor but the "all
    done?" test every SYNC_EVERY steps (max_len 14: steps 0-14, the test after step 7)."""
    model = ending_model(D, static_decoding_cache=True)
    calls, counting = [], [True]
    for name in ("item", "tolist", "nonzero", "cpu", "__bool__", "__int__", "__float__"):
        original = getattr(torch.Tensor, name)

        def spy(self, *args, _original=original, _name=name, **kwargs):
            if counting:
                calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)
    hypotheses = FinishedHypotheses.hypotheses
    monkeypatch.setattr(FinishedHypotheses, "hypotheses", lambda self: counting.clear() or hypotheses(self))
    monkeypatch.setattr(batched_search, "SYNC_EVERY", 8)
    decode([model], True)
    assert calls == ["__bool__"]


@pytest.mark.parametrize("graphed", [False, True], ids=["eager", "the graph search's step, eagerly"])
def test_no_step_and_no_reorder_waits_for_the_host(monkeypatch, graphed):
    """Read at torch's aten ops (helpers.HostReads: what torch calls inside counts too), each step
    (decoder, search) and each reorder of the caches, with the fixed-size caches, runs nothing that
    waits for the device: so on a GPU the host queues step after step while the device works; the
    "all done?" test in between is the search's only wait."""
    model = ending_model(D, static_decoding_cache=True)
    found, steps, reorder = [], BatchedBeamSearch.steps, BatchedBeamSearch.reorder

    def audited(fn):
        def run(*args):
            with HostReads() as audit:
                out = fn(*args)
            found.extend(audit.found)
            return out

        return run

    monkeypatch.setattr(BatchedBeamSearch, "steps", lambda self, *a: audited(steps(self, *a)))
    monkeypatch.setattr(BatchedBeamSearch, "reorder", lambda self, *a: audited(reorder)(self, *a))
    hypos = decode([model], True, graph_search=graphed)
    assert found == [] and max(len(h[0]["tokens"]) for h in hypos) > 1


def test_hypotheses_are_views_of_one_copy_of_the_slots_with_two_copies_to_the_host(monkeypatch):
    """The end of a search: its hypotheses' tensors are views of one copy of the finished slots (no
    copy per hypothesis to or from the device), which the next search's restart of the slots leaves
    as they are, and the host gets the scores and lengths once each."""
    finished = FinishedHypotheses(2, 2, 4, D.pad(), torch.device("cpu"), paper=False)
    tokens = torch.tensor([[[5, 6, 2, 1], [7, 2, 1, 1]], [[8, 2, 1, 1], [1, 1, 1, 1]]])  # (B, c, L)
    ended = torch.tensor([[True, True], [True, False]])
    finished.add(ended, torch.tensor([[-1.0, -2.0], [-0.5, -9.0]]), tokens, torch.zeros(2, 2, 4), torch.tensor([3]))
    slots = {t.untyped_storage().data_ptr(): n for n, t in vars(finished).items() if isinstance(t, torch.Tensor)}
    copies = []  # (method, slot) of each call on a slot tensor that copies it elsewhere

    def spying(name):
        original = getattr(torch.Tensor, name)

        def spy(self, *args, **kwargs):
            if self.untyped_storage().data_ptr() in slots:
                copies.append((name, slots[self.untyped_storage().data_ptr()]))
            return original(self, *args, **kwargs)

        return spy

    for name in ("cpu", "to", "tolist", "clone", "item"):
        monkeypatch.setattr(torch.Tensor, name, spying(name))
    hyps = finished.hypotheses()
    clones = [("clone", "cumulative"), ("clone", "score"), ("clone", "tokens")]
    assert sorted(copies) == [*clones, ("cpu", "score"), ("tolist", "length")]
    monkeypatch.undo()
    finished.restart()
    assert [len(h) for h in hyps] == [2, 1] and hyps[0][0]["tokens"].tolist() == [5, 6, 2]
    assert [float(h["score"]) for s in hyps for h in s] == [-1.0, -2.0, -0.5]
    assert len({h["tokens"].untyped_storage().data_ptr() for s in hyps for h in s}) == 1


REFUSED = [
    (dict(sampling=True), "--sampling"),
    (dict(diverse_beam_groups=2), "--diverse-beam-groups"),
    (dict(diversity_rate=0.5), "--diversity-rate"),
    (dict(constraints="ordered"), "--constraints"),
    (dict(prefix_size=1), "--prefix-size"),
    (dict(print_alignment="hard"), "--print-alignment"),
    (dict(match_source_len=True), "--match-source-len"),
    (dict(no_repeat_ngram_size=2), "--no-repeat-ngram-size"),
    (dict(score_reference=True, lenpen=1), "--score-reference"),
]


@pytest.mark.parametrize("args, option", REFUSED, ids=[o for _, o in REFUSED])
def test_what_it_cannot_do_is_refused_in_one_line(args, option):
    with pytest.raises(PluginError) as e:
        generator(True, models=[ending_model(D)], **args)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"--batched-search does not support {option}:")


def test_other_refusals():
    model = ending_model(D)
    cfg = PaperTranslationConfig(batched_search=True, beam_patience=2.0)
    args = Namespace(beam=4, lenpen=1, max_len_a=1, max_len_b=5, min_len=1, unkpen=0)
    with pytest.raises(PluginError, match="^--batched-search does not support --beam-patience:"):
        PaperTranslationTask(cfg, D, D).build_generator([model], args)
    for flag in ("cuda_graph_decoding", "cuda_graph_search", "beam_reorder_kernel", "decode_attention_kernel"):
        cfg = PaperTranslationConfig(**{flag: True})
        name = "--" + flag.replace("_", "-")
        with pytest.raises(PluginError, match=f"^{name} is a speed path of --batched-search: add --batched-search$"):
            PaperTranslationTask(cfg, D, D).build_generator([model], args)
    for flag, options in (
        ("--beam-reorder-kernel", dict(kernel=True)),
        ("--decode-attention-kernel", dict(decode_kernel=True)),
    ):
        with pytest.raises(PluginError, match=f"^{flag} works on the fixed-size caches: add --model-overrides"):
            generator(True, models=[model], **options)
    gen = generator(True, models=[model])
    with pytest.raises(PluginError, match="^--batched-search does not support --prefix-size"):
        gen.generate([model], sample(), prefix_tokens=torch.ones(8, 1, dtype=torch.long))
    with pytest.raises(PluginError, match="^--min-len 30 is above the maximum length 14"):
        generator(True, models=[model], min_len=30).generate([model], sample())
