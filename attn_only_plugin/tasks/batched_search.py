"""Beam search over a batch that keeps its size, `--batched-search` (off by default): section 6.1
of Vaswani et al. (2017), "beam search with a beam size of 4 and length penalty alpha = 0.6 [38]",
with fairseq 0.12's stopping rule (the default) or the paper's (`--beam-stop paper`,
tasks/paper_search.py), and the same hypotheses and scores as those searches.

Where it departs from fairseq's `SequenceGenerator` (speed only, not the paper's): fairseq drops a
sentence from the batch as soon as it is done, so the batch, its buffers and the decoder's caches
change shape from step to step, and it keeps finished hypotheses in Python lists. Here the batch
stays whole for the whole search: a done sentence stays in it, masked (its hypotheses take pad
tokens, keep their scores and their rows, and nothing it writes is kept), every buffer is made
once (tokens, scores, tasks/finished_hypotheses.py's slots) and updated in place by tensor
operations (tasks/beam_step.py, with the step read from a device tensor), with no Python loop over
sentences and no copy to the host in a step, but for an "all done?" test every SYNC_EVERY steps.
So every step has the same shapes, and with --static-decoding-cache the same cache buffers within
a chunk: what a CUDA graph of the decoder step needs (`--cuda-graph-decoding`,
tasks/decoder_step.py), or of the whole step, decoder and search (`--cuda-graph-search`). The
price: done sentences are decoded (and thrown away) until the whole batch is done or the test
comes round.

The encoder output is expanded to the beam once and never reordered again: a hypothesis never
leaves its sentence, and all of a sentence's hypotheses read the same encoder output. So the
decoder's caches are reordered within each sentence's k rows, which with --beam-reorder-kernel a
Triton kernel does in place in one pass (modules/beam_reorder.py); with --decode-attention-kernel
the decoding steps' self-attention reads only the cache positions written so far
(modules/decode_attention.py, turned on around the search).

With a graphed step the generator keeps the last batch's search (a Workspace: buffers, decoder
caches, encoder output, graphs), and a batch of the same shape (sentences, source length, length
cap) restarts in it in place and replays its graphs with no capture; fairseq-generate's
--batch-size with --required-seq-len-multiple gives batches of a few shapes. What a search returns
is its own copy, which later batches leave as it is.

What it does not do is refused in one line (check_options and the generator's own checks): the
search is fairseq's plain beam search only (no sampling, diverse beam search, constraints, prefix
tokens, language model fusion, n-gram blocking, --match-source-len, --print-alignment,
--beam-patience).

Tensor layout: B sentences, beam k, c = 2k candidates (fewer with a tiny vocabulary, as fairseq),
V the vocabulary; hypothesis buffers (B k, ...), row b k + j the j-th hypothesis of sentence b;
candidates (B, c) in score order; L = max_len + 1 target positions.
"""

import logging
import math
import weakref
from typing import Callable, NamedTuple, Optional

import torch
from fairseq.search import BeamSearch
from fairseq.sequence_generator import SequenceGenerator
from torch import Tensor

from attn_only_tools.guards.errors import PluginError

from ..modules import beam_reorder, decode_attention, static_cache
from ..modules.step_graph import StepGraph
from .beam_step import BeamStep
from .decoder_step import DecoderStep, check_graphable

logger = logging.getLogger(__name__)

SYNC_EVERY = 8  # steps between "all done?" tests (a copy to the host); not the paper's, not tuned
# option: (is it asked for, given the generation args; what to do instead)
UNSUPPORTED = {
    "--sampling": lambda a: getattr(a, "sampling", False),
    "--diverse-beam-groups": lambda a: getattr(a, "diverse_beam_groups", -1) > 0,
    "--diversity-rate": lambda a: getattr(a, "diversity_rate", -1) > -1,
    "--constraints": lambda a: bool(getattr(a, "constraints", False)),
    "--prefix-size": lambda a: getattr(a, "prefix_size", 0) > 0,
    "--print-alignment": lambda a: bool(getattr(a, "print_alignment", False)),
    "--match-source-len": lambda a: getattr(a, "match_source_len", False),
    "--no-repeat-ngram-size": lambda a: getattr(a, "no_repeat_ngram_size", 0) > 0,
    "--score-reference": lambda a: getattr(a, "score_reference", False),
    "--iter-decode-max-iter": lambda a: getattr(a, "iter_decode_max_iter", 10) != 10,
}


def refuse(option: str) -> PluginError:
    return PluginError(
        f"--batched-search does not support {option}: drop one of them "
        "(without --batched-search fairseq's SequenceGenerator decodes it)"
    )


def check_options(cfg, args, seq_gen_cls, extra_gen_cls_kwargs) -> None:
    """Refuse, in one line, a generation set-up the batched search would not honour."""
    for option, asked in UNSUPPORTED.items():
        if asked(args):
            raise refuse(option)
    if getattr(cfg, "beam_patience", 1.0) != 1:
        raise refuse("--beam-patience")
    if (extra_gen_cls_kwargs or {}).get("lm_model") is not None:
        raise refuse("--lm-path")
    if seq_gen_cls is not None:
        raise refuse(f"the generator {seq_gen_cls.__name__} this caller asks for")


class Workspace(NamedTuple):
    """One batch shape's search: its key (B, S, max_len, bos, device), its BeamStep, the encoder
    output it reads, the decoder states, its step (step, pos) -> order, and pos, the step (1,) on
    the device."""

    key: tuple
    beam: BeamStep
    encoder_outs: list
    states: list
    step_to_order: Callable[[int, Tensor], Tensor]
    pos: Tensor


def copy_into(kept: list, new: list) -> bool:
    """Each model's encoder output `new` (a dict of lists of tensors) copied into `kept`'s tensors
    in place, when both have the same fields and tensors of the same shapes and types (else
    False, nothing copied)."""
    pairs = [[(name, t) for out in outs for name, ts in out.items() for t in ts] for outs in (kept, new)]
    described = [[(name, t.shape, t.dtype, t.device) for name, t in tensors] for tensors in pairs]
    if described[0] != described[1]:
        return False
    for (_, old), (_, t) in zip(*pairs, strict=True):
        old.copy_(t)
    return True


class BatchedBeamSearch(SequenceGenerator):
    """fairseq's beam search with a batch of fixed size (module docstring). beam_stop: 'fairseq'
    or 'paper'; length_penalty(n, alpha): lp(|Y|) of the paper's rule (default n^alpha);
    exponent(n, alpha): with fairseq's rule, the power of n that a hypothesis of n tokens is
    divided by (default alpha, fairseq's; the task passes GNMT's); cuda_graph: the decoder step as
    a CUDA graph (--cuda-graph-decoding); graph_search: the whole step, decoder and search, as one
    (--cuda-graph-search); reorder_kernel: the fixed-size caches' beam reorder by
    modules/beam_reorder.py's kernel (--beam-reorder-kernel), and decode_kernel: the decoding
    steps' self-attention by modules/decode_attention.py's (--decode-attention-kernel), where
    Triton runs."""

    def __init__(
        self,
        models,
        tgt_dict,
        beam_stop: str = "fairseq",
        exponent: Optional[Callable[[int, float], float]] = None,
        length_penalty: Optional[Callable] = None,
        cuda_graph: bool = False,
        graph_search: bool = False,
        reorder_kernel: bool = False,
        decode_kernel: bool = False,
        **kwargs,
    ):
        super().__init__(models, tgt_dict, **kwargs)
        if type(self.search) is not BeamSearch:
            raise refuse(f"the search {type(self.search).__name__}")
        if self.lm_model is not None:
            raise refuse("--lm-path")
        if self.match_source_len:
            raise refuse("--match-source-len")
        if self.repeat_ngram_blocker is not None:
            raise refuse("--no-repeat-ngram-size")
        if getattr(self, "token_indices_to_suppress", None) is not None:
            raise refuse("tokens to suppress")
        self.paper = beam_stop == "paper"
        self.exponent = exponent
        self.length_penalty = length_penalty or (lambda n, alpha: n**alpha)
        self.graph_search = graph_search  # the whole step as one graph (steps below)
        self.cuda_graph = cuda_graph or graph_search  # the decoder step through tasks/decoder_step.py
        self.kept: Optional[Workspace] = None  # the last batch's search, kept for one of its shape
        if self.cuda_graph:
            check_graphable(models)
        self.reorder_kernel = reorder_kernel and kernel_runs(models, "--beam-reorder-kernel")
        self.decode_kernel = decode_kernel and kernel_runs(models, "--decode-attention-kernel")

    def divisor(self, step: int) -> float:
        """What this step's ended hypotheses (n = step + 1 tokens) are divided by, n^e computed as
        the searches this one reproduces compute it: fairseq's (e = alpha), GNMTSequenceGenerator's
        (e = exponent(n, alpha)), StoppingRuleGenerator's (e = log lp(n) / log n)."""
        n = step + 1
        if self.paper:
            return n ** (math.log(self.lp(n)) / math.log(n) if n > 1 else 0.0)
        return n ** (self.len_penalty if self.exponent is None else self.exponent(n, self.len_penalty))

    def lp(self, length: int) -> float:
        """The paper's bound's penalty (1 for --unnormalized), as tasks/paper_search.py's."""
        return float(self.length_penalty(length, self.len_penalty)) if self.normalize_scores else 1.0

    def _generate(self, sample, prefix_tokens=None, constraints=None, bos_token=None):
        if prefix_tokens is not None:
            raise refuse("--prefix-size")
        if constraints is not None:
            raise refuse("--constraints")
        src_tokens = sample["net_input"]["src_tokens"]
        (B, S), k, device = src_tokens.shape[:2], self.beam_size, src_tokens.device
        max_len = min(int(self.max_len_a * S + self.max_len_b), self.max_len - 1)
        if self.min_len > max_len:
            raise PluginError(f"--min-len {self.min_len} is above the maximum length {max_len}: lower it")
        with decode_attention.enabled(self.decode_kernel):
            return self.beam_search(sample, B, S, k, device, max_len, bos_token)

    def beam_search(self, sample, B: int, S: int, k: int, device, max_len: int, bos_token) -> list:
        """_generate's search (the class docstring) of B sentences of S tokens, beam k."""
        encoder_outs = self.model.forward_encoder(sample["net_input"])
        expand = torch.arange(B, device=device).repeat_interleave(k)  # (B k,) each sentence k times
        encoder_outs = self.model.reorder_encoder_out(encoder_outs, expand)
        work = self.workspace((B, S, max_len, self.eos if bos_token is None else bos_token, device), encoder_outs)
        for step in range(max_len + 1):  # one step more for the end-of-sentence
            work.pos.fill_(step)  # no copy from the host
            order = work.step_to_order(step, work.pos)  # (B k,)
            if step == max_len or ((step + 1) % SYNC_EVERY == 0 and bool(work.beam.done.all())):
                break
            self.reorder(work.states, order, step + 1, work.pos)
        return work.beam.finished.hypotheses()

    def workspace(self, key: tuple, encoder_outs) -> Workspace:
        """The search's buffers, its decoder states and its step for a batch of shape `key` (B, S,
        max_len, bos, device), holding encoder_outs. With a graphed step the last batch's are kept
        and, for a batch of the same shape, restarted in place with its encoder output copied in,
        so their graphs replay again with no capture (fairseq's --batch-size and
        --required-seq-len-multiple make batches of one shape); else new ones."""
        kept, self.kept = self.kept, None
        if kept is not None and kept.key == key and copy_into(kept.encoder_outs, encoder_outs):
            kept.beam.restart()
            self.kept = kept
            return kept
        del kept  # the old buffers go before new ones come
        B, _, max_len, bos, device = key
        beam = BeamStep(self, B, max_len, device, bos)
        states = [{} for _ in range(self.model.models_size)]
        pos = torch.zeros(1, dtype=torch.long, device=device)  # (1,) the step, on the device
        work = Workspace(key, beam, encoder_outs, states, self.steps(beam, encoder_outs, states, max_len), pos)
        self.kept = work if self.cuda_graph else None
        return work

    def steps(self, beam: BeamStep, encoder_outs, states, max_len: int) -> Callable[[int, Tensor], Tensor]:
        """(step, pos) -> order: the decoder's step, its log P masked as fairseq masks them, and the
        beam's step (beam_step.py). With --cuda-graph-decoding the decoder step through its own
        graph (decoder_step.py); with --cuda-graph-search both as one graph (modules/step_graph.py)
        per cache chunk, whose buffers it changes only when replayed, and eager where a step
        differs from its chunk's others: the first step (it makes the caches), the steps before
        --min-len and the length cap."""
        reserve = static_cache.capacity(max_len + 1)  # every step's position, room made at the first
        search = weakref.proxy(self)  # the step is kept in self.kept: a reference would make a cycle
        runner = DecoderStep(self.model.models[0], self.temperature, reserve) if self.cuda_graph else None

        def step_to_order(step: int, pos: Tensor) -> Tensor:
            if search.graph_search:
                lprobs = runner.eager(step, tokens_at(beam.tokens, pos), pos, encoder_outs, states)
            elif runner is not None:
                lprobs = runner(step, beam.tokens, encoder_outs, states)
            else:
                prefix = beam.tokens[:, : step + 1]  # (B k, step + 1)
                lprobs, _ = search.model.forward_decoder(prefix, encoder_outs, states, search.temperature)
            return beam(step, pos, search.mask(step, lprobs, max_len))  # (B k, V) -> (B k,)

        if not self.graph_search:
            return step_to_order
        now = [0]  # the step whose Python runs: this one eagerly, else the one its key's graph recorded
        captured_at = {}  # key: the step its graph was captured at
        graph = StepGraph(lambda pos: step_to_order(now[0], pos), state=beam.mutable)

        def graphed(step: int, pos: Tensor) -> Tensor:
            own = step == 0 or step < search.min_len or step >= max_len
            key = None if own else static_cache.capacity(step + 1)
            if key in graph.graphs:  # a replay runs no Python (a stand-in's reruns its capture's)
                now[0] = captured_at[key]
            else:  # eager, or captured now
                now[0] = captured_at[key] = step
            return graph(key, pos)

        return graphed

    def reorder(self, states, order: Tensor, written: int, pos: Tensor) -> None:
        """Each model's decoder state takes the hypotheses `order` (B k,): ours by its reorder
        within beams (no copy to the host; of fixed-size caches only the `written` positions
        decoded so far, the last one `pos` ((1,), on the device), by modules/beam_reorder.py's
        kernel with --beam-reorder-kernel), another's by fairseq's reorder."""
        if not self.model.has_incremental_states():
            return
        kernel = dict(group=self.beam_size, last=pos) if self.reorder_kernel else {}
        for model, state in zip(self.model.models, states, strict=True):
            if hasattr(model.decoder, "reorder_within_beams"):
                model.decoder.reorder_within_beams(state, order, written, **kernel)
            else:
                model.decoder.reorder_incremental_state_scripting(state, order)

    def mask(self, step: int, lprobs: Tensor, max_len: int) -> Tensor:
        """The next token's log P (B k, V) masked in place as fairseq masks them."""
        lprobs.masked_fill_(lprobs.isnan(), -math.inf)
        lprobs[:, self.pad] = -math.inf  # never pad
        lprobs[:, self.unk] -= self.unk_penalty
        if step >= max_len:  # the length cap: end-of-sentence only
            lprobs[:, : self.eos] = -math.inf
            lprobs[:, self.eos + 1 :] = -math.inf
        if step < self.min_len:
            lprobs[:, self.eos] = -math.inf
        return lprobs


def kernel_runs(models, flag: str) -> bool:
    """The check of a Triton kernel's flag (--beam-reorder-kernel, --decode-attention-kernel):
    refused in one line for a model of ours without the fixed-size caches, which the kernels are
    for; False, said once in the log, where Triton cannot run (a CPU, unless its interpreter is on,
    or no Triton): torch's ops then do the work."""
    for model in models:
        if hasattr(model.decoder, "reorder_within_beams") and not getattr(model.decoder, "static_cache", False):
            raise PluginError(
                f"{flag} works on the fixed-size caches: add --model-overrides "
                "\"{'static_decoding_cache': True}\" (or train with --static-decoding-cache)"
            )
    if beam_reorder.available(next(models[0].parameters())):
        return True
    logger.warning(f"{flag}: Triton cannot run on this device, so torch's ops do its work")
    return False


def tokens_at(tokens: Tensor, pos: Tensor) -> Tensor:
    """Column pos ((1,), on the device) of tokens (B k, L + 1): (B k, 1), read where it lies at every
    replay of a graph (a slice by a Python step would be the captured step's column forever)."""
    return tokens.index_select(1, pos)  # (B k, 1)
