"""`--cuda-graph-decoding` (tasks/decoder_step.py) without a GPU: its step, which hands the decoder
the last tokens and the step as a device tensor, gives fairseq's hypotheses eagerly on a CPU (said
once in the log); through a stand-in for torch.cuda whose "graph" reruns the step on the captured
inputs, one capture per cache chunk, the search's first step eager, and still the same hypotheses;
no later step makes cache storage; a batch of the same shape replays the last one's graphs; what
cannot be graphed is refused in one line."""

import gc
import logging
import weakref
from argparse import Namespace

import pytest
import torch

from attn_only_plugin.modules import static_cache
from attn_only_plugin.tasks.beam_step import BeamStep
from attn_only_plugin.tasks.decoder_step import DecoderStep
from attn_only_plugin.tasks.translation_paper import PaperTranslationConfig, PaperTranslationTask
from attn_only_tools.guards.errors import PluginError
from helpers import HOST_OPS, HostReads, StorageReads, ending_model, fake_cuda, make_dictionary, random_batch

D = make_dictionary(30)


def generator(models, batched, graph=False, whole=False, stop="fairseq", **options):
    cfg = PaperTranslationConfig(
        batched_search=batched, cuda_graph_decoding=graph, cuda_graph_search=whole, lenpen_style="gnmt", beam_stop=stop
    )
    args = dict(beam=4, lenpen=0.6, max_len_a=1, max_len_b=5, min_len=1, unkpen=0, temperature=1.3)
    return PaperTranslationTask(cfg, D, D).build_generator(models, Namespace(**dict(args, **options)))


def search(gen, models, seed=3, B=6, S=9):
    """gen's hypotheses for a random batch of B sentences of S tokens, 0 to 4 of them pads."""
    src, _ = random_batch(D, B=B, S=S, seed=seed)
    for b in range(B):
        src[b, : b % 5] = D.pad()  # (B, S)
    sample = {"id": torch.arange(B), "net_input": {"src_tokens": src, "src_lengths": src.ne(D.pad()).sum(1)}}
    with torch.no_grad():
        out = gen.generate(models, sample)
    return [[(h["tokens"].tolist(), float(h["score"]), h["positional_scores"]) for h in hyps] for hyps in out]


def decode(models, batched, graph=False, whole=False, stop="fairseq", **options):
    return search(generator(models, batched, graph, whole, stop, **options), models)


def assert_same(theirs, ours):
    assert [[h[0] for h in hyps] for hyps in ours] == [[h[0] for h in hyps] for hyps in theirs]
    for hyps, hyps_ref in zip(ours, theirs, strict=True):
        for (_, score, steps), (_, score_ref, steps_ref) in zip(hyps, hyps_ref, strict=True):
            assert abs(score - score_ref) <= 1e-5
            torch.testing.assert_close(steps, steps_ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("chunk", [4, 64])
def test_eager_on_a_cpu_gives_fairseqs_hypotheses_and_says_so(chunk, monkeypatch, caplog):
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", chunk)
    model = ending_model(D, static_decoding_cache=True)
    steps = []
    original = DecoderStep.__call__
    monkeypatch.setattr(DecoderStep, "__call__", lambda self, step, *a: steps.append(step) or original(self, step, *a))
    with caplog.at_level(logging.WARNING):
        ours = decode([model], True, graph=True)
    assert steps == list(range(len(steps))) and len(steps) > 5  # every step through DecoderStep
    assert [r.message for r in caplog.records if "cuda-graph" in r.message] == [
        "--cuda-graph-decoding: the model is not on a CUDA device, so its decoder step runs eagerly"
    ]
    assert_same(decode([model], False), ours)


def test_graphed_steps_one_capture_per_chunk(monkeypatch):
    """Chunks of 4 steps: step 0 runs eagerly and makes every cache, with room for the whole
    search; each chunk's first step after it (1, 4, 8, 12) is captured and the rest replay; no
    later step makes cache storage (a chunk's start widens the caches in place)."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    keys = fake_cuda(monkeypatch)
    model = ending_model(D, static_decoding_cache=True)
    made, write = [], static_cache.write

    def spy(buf, new, step, *rest):
        out = write(buf, new, step, *rest)
        if buf is None or out.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr():
            made.append(int(step))
        return out

    monkeypatch.setattr(static_cache, "write", spy)
    ours = decode([model], True, graph=True)
    assert keys == [4, 8, 12, 16]  # max_len 14: some sentence at the cap
    assert set(made) == {0}
    monkeypatch.undo()
    assert_same(decode([model], False), ours)


@pytest.mark.parametrize("stop", ["fairseq", "paper"])
def test_the_whole_search_step_graphed(monkeypatch, stop):
    """--cuda-graph-search: the decoder's and the search's step as one graph per chunk of 4 steps,
    captured at its first step (the search's first step eager), the search's buffers changed only
    by the replays (the stand-in's capture runs the step, as a real one does not: StepGraph puts
    them back), the Python of a replay the captured step's, as a real graph's (a tensor sliced by
    the step would be wrong), and the same hypotheses as fairseq's search, by either stopping rule."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    keys = fake_cuda(monkeypatch)
    model = ending_model(D, static_decoding_cache=True)
    ours = decode([model], True, whole=True, stop=stop)
    assert keys == [4, 8, 12, 16]  # steps 0 and the cap (14) eager; 1, 4, 8, 12 captured
    monkeypatch.undo()
    assert_same(decode([model], False, stop=stop), ours)


def audited_captures(monkeypatch) -> list:
    """fake_cuda whose captures each run under a HostReads audit (helpers.py), listed as they come."""
    audits = []
    fake_cuda(monkeypatch, graph=lambda g: audits.append(HostReads()) or audits[-1])
    return audits


@pytest.mark.parametrize("whole", [False, True], ids=["decoder step", "whole step"])
@pytest.mark.parametrize("stop", ["fairseq", "paper"])
def test_nothing_captured_waits_for_the_host(monkeypatch, whole, stop):
    """What a capture records, the decoder's step (--cuda-graph-decoding) or the decoder's and the
    search's (--cuda-graph-search), has no op that a CUDA graph's capture refuses or replays stale:
    no read of a tensor on the host, no op whose output's size depends on the data (a bool mask's
    index, nonzero, ...), no tensor made from Python data (helpers.HOST_OPS); read at the aten ops,
    so also those that torch's own Python calls."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    audits = audited_captures(monkeypatch)
    decode([ending_model(D, static_decoding_cache=True)], True, graph=not whole, whole=whole, stop=stop)
    assert len(audits) == 4 and [audit.found for audit in audits] == [[]] * 4


def test_the_capture_audit_sees_a_read_on_the_host(monkeypatch):
    """The audit above fails where a step reads a tensor on the host: here the search's step asks
    whether a sentence is done (a copy to the host and a wait on a GPU)."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    audits = audited_captures(monkeypatch)
    finish = BeamStep.finish
    monkeypatch.setattr(BeamStep, "finish", lambda self, *a: finish(self, *a) or bool(self.done.any()))
    decode([ending_model(D, static_decoding_cache=True)], True, whole=True)
    read = ("aten._local_scalar_dense", HOST_OPS["aten._local_scalar_dense"])
    assert [audit.found for audit in audits] == [[read]] * 4


def replay_audits(monkeypatch, whole: bool, stop: str = "fairseq") -> list:
    """Two batches of one shape searched by one generator through fake_cuda, chunks of 4 steps,
    with each capture and each replay (the step's Python rerun on the captured inputs) under a
    StorageReads audit (helpers.py): per capture, (its audit, its replays' audits, both batches')."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    captures, replays = [], {}
    keys = fake_cuda(
        monkeypatch,
        graph=lambda g: captures.append(StorageReads()) or captures[-1],
        replaying=lambda key: replays.setdefault(key, []).append(StorageReads()) or replays[key][-1],
    )
    model = ending_model(D, static_decoding_cache=True)
    gen = generator([model], True, graph=not whole, whole=whole, stop=stop)
    for seed in (3, 4):
        search(gen, [model], seed=seed)
    assert len(captures) == len(keys) == 4 and all(len(replays.get(key, [])) >= 2 for key in keys)
    return [(captured, replays[key]) for captured, key in zip(captures, keys, strict=True)]


@pytest.mark.parametrize("whole", [False, True], ids=["decoder step", "whole step"])
@pytest.mark.parametrize("stop", ["fairseq", "paper"])
def test_each_replay_touches_the_storages_of_its_capture(monkeypatch, whole, stop):
    """A real graph's replay runs its capture's kernels on the addresses they had then. Rerun at
    each replay, the step's Python must read and write, of what was there before it (the caches,
    the search's buffers, the encoder output, the graph's inputs), exactly the storages its capture
    did, in the batch it was captured in and in the next batch of the same shape, which replays
    it: else a real replay would work on memory the search no longer uses (which the stand-in's
    rerun, reading the new tensors, would not show in the hypotheses)."""
    for captured, replays in replay_audits(monkeypatch, whole, stop):
        assert captured.storages and all(replay.storages == captured.storages for replay in replays)


@pytest.mark.parametrize("whole", [False, True], ids=["decoder step", "whole step"])
def test_a_batch_of_the_same_shape_replays_the_last_ones_graphs(monkeypatch, whole):
    """Batches of one shape, as fairseq-generate makes them with --batch-size and
    --required-seq-len-multiple: the generator keeps the last batch's buffers and graphs, a batch
    of the same shape restarts in them and replays those graphs with no capture, and one of
    another shape makes its own. Each batch gets the hypotheses of fairseq's search, and an
    earlier batch's hypotheses stay as they were."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    keys = fake_cuda(monkeypatch)
    model = ending_model(D, static_decoding_cache=True)
    gen = generator([model], True, graph=not whole, whole=whole)
    ours = {(3, 6): search(gen, [model], seed=3)}
    assert keys == [4, 8, 12, 16]
    ours[4, 6] = search(gen, [model], seed=4)
    assert keys == [4, 8, 12, 16]  # nothing captured
    ours[5, 5] = search(gen, [model], seed=5, B=5)
    assert keys[4:] == [4, 8, 12, 16]  # another shape: its own graphs
    monkeypatch.undo()
    plain = generator([model], False)
    for (seed, B), hypotheses in ours.items():
        assert_same(search(plain, [model], seed=seed, B=B), hypotheses)


def test_the_storage_audit_sees_a_cache_replaced(monkeypatch):
    """The audit above fails where a step's caches are replaced between replays: here the beam
    reorder copies each fixed-size cache into a new tensor instead of in place (a new tensor may
    take a freed one's address, so not every replay differs)."""
    monkeypatch.setattr(static_cache, "reorder_in_place", lambda buffer, order, *_: buffer.index_select(0, order))
    graphs = replay_audits(monkeypatch, whole=True)
    assert any(replay.storages != captured.storages for captured, replays in graphs for replay in replays)


def test_refused_where_it_cannot_graph():
    plain, cached = ending_model(D), ending_model(D, static_decoding_cache=True)
    with pytest.raises(PluginError, match="^--cuda-graph-decoding needs the fixed-size caches: add --model-overrides"):
        decode([plain], True, graph=True)
    with pytest.raises(PluginError, match="^--cuda-graph-decoding graphs one model's step: give one --path"):
        decode([cached, cached], True, graph=True)


@pytest.mark.parametrize("whole", [False, True], ids=["decoder step", "whole step"])
def test_a_batch_of_another_shape_frees_the_last_ones_buffers_at_once(monkeypatch, whole):
    """The kept search of the last batch goes as soon as a batch of another shape comes, before
    the new one's buffers are made: nothing of it sits in a reference cycle that would hold its
    caches (GPU memory) until Python's garbage collector comes round."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", 4)
    fake_cuda(monkeypatch)
    model = ending_model(D, static_decoding_cache=True)
    gen = generator([model], True, graph=not whole, whole=whole)
    search(gen, [model], seed=3)
    cache = weakref.ref(next(t for t in gen.kept.states[0][next(iter(gen.kept.states[0]))].values() if t is not None))
    beam = weakref.ref(gen.kept.beam.tokens)
    gc.disable()
    try:
        search(gen, [model], seed=5, B=5)
        assert cache() is None and beam() is None
    finally:
        gc.enable()
