"""Label-smoothed cross-entropy, section 5.4 of Vaswani et al. (2017), registered as
`paper_label_smoothed_ce`.

Tensor layout: log-probabilities (M, V) over M target positions: the N real tokens of a batch
when the model gives only those (ours in training), else all B T positions, pads included.
"""

import math
from dataclasses import dataclass, field
from typing import Tuple

from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from omegaconf import II
from torch import Tensor

from attn_only_tools.guards.errors import PluginError

from .fused_softmax import fused_label_smoothed_loss


def label_smoothed_nll_loss(lprobs: Tensor, target: Tensor, eps: float, ignore_index: int):
    """Section 5.4 with the smoothing of its reference [36] (Szegedy et al. 2016, section 7):
    q'(k) = (1 - eps) * delta(k, y) + eps / K over all K = |V| classes, and the loss is the cross
    entropy H(q', p) = (1 - eps) * (-log p_y) + eps * mean_k(-log p_k).

    Departure from fairseq and tensor2tensor, said outright: both spread eps over the K-1 other
    classes (the true class gets exactly 1 - eps); [36] and we give it 1 - eps + eps/K. The
    difference is eps/K (2.7e-6 of mass for K = 37000).

    lprobs: (M, V) log-probabilities; target: (M,). Returns summed (loss, nll_loss) over the
    positions whose target is not ignore_index (the others are masked, not copied out).
    """
    ignored = target.eq(ignore_index)  # (M,)
    nll = -lprobs.gather(dim=-1, index=target.unsqueeze(-1)).squeeze(-1)  # (M,)
    uniform = -lprobs.mean(dim=-1)  # (M,) cross entropy with the uniform distribution
    loss = ((1.0 - eps) * nll + eps * uniform).masked_fill(ignored, 0.0)
    return loss.sum(), nll.masked_fill(ignored, 0.0).sum()


def target_lprobs(model, sample, pad: int, normalized: bool = True) -> Tuple[Tensor, Tensor]:
    """The model's log-probabilities for the target tokens, (M, V), and the targets (M,); with
    normalized=False its logits before the softmax instead (for fused_softmax.py).

    Our model (models/encoder_decoder.py, real_only) gives in training those of the N real tokens
    only: the pre-softmax map (section 3.4) and the softmax never run on a pad. Any other model
    gives all M = B T positions, and label_smoothed_nll_loss masks the pads."""
    real_only = {"real_only": True} if getattr(model, "gives_real_only", False) else {}
    net_output = model(**sample["net_input"], **real_only)
    lprobs = (
        model.get_normalized_probs(net_output, log_probs=True) if normalized else net_output[0]
    )  # (B, T, V) or (N, V)
    target = model.get_targets(sample, net_output).reshape(-1)  # (B T,)
    index = net_output[1].get("real_index") if isinstance(net_output[1], dict) else None
    if index is not None:
        real = target.index_select(0, index)  # (N,) the real tokens' targets
        if bool(real.eq(pad).any()) or index.numel() != int(target.ne(pad).sum()):
            raise PluginError(
                "the targets' real tokens are not the decoder inputs' (prev_output_tokens must be the "
                "targets shifted right by one, both right-padded as fairseq's collater makes them)"
            )
        target = real
    return lprobs.reshape(-1, lprobs.size(-1)), target  # (M, V), (M,)


@dataclass
class LabelSmoothedCEConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.1, metadata={"help": "eps_ls (section 5.4, Table 3 base)"})
    report_accuracy: bool = field(default=False, metadata={"help": "log token accuracy"})
    fused_softmax_loss: bool = field(
        default=False,
        metadata={
            "help": "speed only, not the paper's: the loss and its gradient straight from the logits, without the "
            "(tokens x vocabulary) log-probabilities, fused by torch.compile on CUDA; the same loss to float "
            "rounding (criterions/fused_softmax.py)"
        },
    )
    sentence_avg: bool = II("optimization.sentence_avg")


@register_criterion("paper_label_smoothed_ce", dataclass=LabelSmoothedCEConfig)
class LabelSmoothedCrossEntropy(FairseqCriterion):
    """Section 5.4. Logs loss and nll_loss in base 2 per token, as fairseq's own
    label_smoothed_cross_entropy does, so `ppl` (2^nll_loss) is comparable between the two."""

    def __init__(self, task, label_smoothing=0.1, report_accuracy=False, sentence_avg=False, fused_softmax_loss=False):
        super().__init__(task)
        self.fused = fused_softmax_loss
        if not 0.0 <= label_smoothing < 1.0:
            raise PluginError(
                f"--label-smoothing must be in [0, 1), got {label_smoothing} (the paper uses eps_ls = 0.1, section 5.4)"
            )
        self.eps, self.report_accuracy, self.sentence_avg = label_smoothing, report_accuracy, sentence_avg

    def forward(self, model, sample, reduce=True):
        # (M, V) log P, or with --fused-softmax-loss the logits (the same argmax); (M,)
        scores, target = target_lprobs(model, sample, self.padding_idx, normalized=not self.fused)
        smoothed = fused_label_smoothed_loss if self.fused else label_smoothed_nll_loss
        loss, nll_loss = smoothed(scores, target, self.eps, self.padding_idx)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if self.report_accuracy:
            keep = target.ne(self.padding_idx)
            logging_output["n_correct"] = scores.argmax(-1).eq(target).masked_select(keep).sum().data
            logging_output["total"] = keep.sum().data
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        loss, nll, ntokens, sample_size = total("loss"), total("nll_loss"), total("ntokens"), total("sample_size")
        metrics.log_scalar("loss", loss / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", nll / ntokens / math.log(2), ntokens, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
        n_total = total("total")
        if n_total > 0:
            metrics.log_scalar("total", n_total)
            metrics.log_scalar("n_correct", total("n_correct"))
            metrics.log_derived(
                "accuracy",
                lambda m: (
                    round(float(m["n_correct"].sum) * 100.0 / float(m["total"].sum), 3)
                    if m["total"].sum > 0
                    else float("nan")
                ),
            )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
