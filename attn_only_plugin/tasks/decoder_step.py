"""The decoder step of `--batched-search` as a CUDA graph, `--cuda-graph-decoding` (speed only, not
the paper's; section 6.1's beam search runs one decoder step per output position, section 3.2.3).

fairseq's EnsembleModel.forward_decoder hands the decoder the whole prefix, a tensor one column
wider every step, and the decoder reads the step from its width; a graph needs inputs of one
shape. This step hands our decoder only the last tokens, (B k, 1), its python step (for the cache's
chunk) and the same step as a (1,) tensor on the device, `position`, which the graph reads (the
embedding's positions and the fixed-size cache's write position and mask, modules/static_cache.py),
then does what forward_decoder does with the logits (divided by the temperature, log-softmax in
float32). modules/step_graph.py's StepGraph replays it, one graph per cache chunk: the first step
runs eagerly (it projects the encoder-decoder keys and values, and makes the caches with room for
all `reserve` positions of the search, so that a new chunk widens them in place), a chunk's first
step is captured, and the rest of the chunk replays it. The graphs are kept for the next search
over the same buffers (tasks/batched_search.py's workspace).

Departs from fairseq (which graphs nothing) and needs what a graph needs: one model of ours with
--static-decoding-cache (refused otherwise, in one line). On a CPU the same step runs eagerly,
said once in the log: the results are those of fairseq's forward_decoder.

Tensor layout: hypotheses (B k, ...), as in tasks/batched_search.py; log-probabilities (B k, V).
"""

import logging

import torch
from torch import Tensor

from attn_only_tools.guards.errors import PluginError

from ..modules import static_cache
from ..modules.step_graph import StepGraph

logger = logging.getLogger(__name__)


def check_graphable(models) -> None:
    """Refuse, in one line, models whose decoder step cannot be graphed."""
    if len(models) != 1:
        raise PluginError("--cuda-graph-decoding graphs one model's step: give one --path, or drop it")
    if not getattr(models[0].decoder, "static_cache", False):
        raise PluginError(
            "--cuda-graph-decoding needs the fixed-size caches: add --model-overrides "
            "\"{'static_decoding_cache': True}\" (or train with --static-decoding-cache)"
        )
    if not next(models[0].parameters()).is_cuda:
        logger.warning("--cuda-graph-decoding: the model is not on a CUDA device, so its decoder step runs eagerly")


class Step:
    """One decoder step on last_tokens (B k, 1) at `position` ((1,), on the device): what
    EnsembleModel.forward_decoder computes, with the step, encoder output and decoder state of the
    call (begin). Apart from DecoderStep, whose graph holds it: no reference cycle keeps a search's
    caches alive after the search."""

    def __init__(self, model, temperature: float, reserve: int):
        self.model, self.temperature, self.reserve = model, temperature, reserve
        self.step, self.encoder_out, self.state = 0, None, None

    def begin(self, step: int, encoder_outs, states) -> None:
        self.step, self.encoder_out, self.state = step, encoder_outs[0], states[0]

    def __call__(self, last_tokens: Tensor, position: Tensor) -> Tensor:
        out = self.model.decoder(
            last_tokens,
            encoder_out=self.encoder_out,
            incremental_state=self.state,
            step=self.step,
            position=position,
            reserve=self.reserve,
        )  # (B k, 1, V) logits, extra
        scaled = (out[0][:, -1:, :].div_(self.temperature), out[1])  # (B k, 1, V)
        return self.model.get_normalized_probs(scaled, log_probs=True, sample=None)[:, -1, :]  # (B k, V)


class DecoderStep:
    """step(step, tokens, encoder_outs, states) -> (B k, V) log-probabilities of the next token,
    through a StepGraph keyed by the cache chunk, the caches with room for `reserve` positions;
    one per set of search buffers (tasks/batched_search.py's workspace)."""

    def __init__(self, model, temperature: float, reserve: int):
        self.run = Step(model, temperature, reserve)
        self.graph = StepGraph(self.run)
        self.position = None  # (1,) the step, on the device

    def eager(self, step: int, last_tokens: Tensor, position: Tensor, encoder_outs, states) -> Tensor:
        """The step on last_tokens (B k, 1) at `position` ((1,), on the device) without a graph of
        its own: inside a caller's graph of the whole search step (--cuda-graph-search). (B k, V)."""
        self.run.begin(step, encoder_outs, states)
        return self.run(last_tokens, position)

    def __call__(self, step: int, tokens: Tensor, encoder_outs, states) -> Tensor:
        self.run.begin(step, encoder_outs, states)
        if self.position is None:
            self.position = torch.zeros(1, dtype=torch.long, device=tokens.device)
        self.position.fill_(step)  # on the device: no copy from the host
        key = None if step == 0 else static_cache.capacity(step + 1)  # the first step eager
        return self.graph(key, tokens[:, step : step + 1], self.position)  # (B k, 1) -> (B k, V)
