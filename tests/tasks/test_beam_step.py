"""tasks/beam_step.py by hand: the penalty tables divide as torch divides by a Python number, and
one step of fairseq's rule on a 1-sentence beam of 2: its candidates, the ended one into the
finished slots with its penalised score, the alive ones written over the hypotheses, every
position read from the device tensor pos. (Against fairseq's whole search: test_batched_search.py.)"""

import math
from types import SimpleNamespace

import torch

from attn_only_plugin.tasks.beam_step import BeamStep, Penalties


def test_penalties_divide_as_torch_divides_by_a_number():
    values = [1.0, 2.0**0.6, 3.0**0.6]
    x = torch.tensor([[-1.3, -2.7], [-0.1, -5.0]])
    on_cpu = Penalties(values, torch.device("cpu"))
    for t, v in enumerate(values):
        assert torch.equal(on_cpu.divide(x, torch.tensor([t])), x / v)
    assert on_cpu.table.dtype == torch.float32 and not on_cpu.cuda
    # on CUDA torch multiplies by the float32 reciprocal of a Python divisor: the table holds those
    reciprocal = Penalties.__new__(Penalties)
    reciprocal.cuda, reciprocal.table = True, 1.0 / torch.tensor(values, dtype=torch.float32)
    assert torch.equal(reciprocal.divide(x, torch.tensor([2])), x * (1.0 / torch.tensor(3.0**0.6)))


def search(k=2, max_len=3):
    """What BeamStep reads of its generator: fairseq's rule, alpha 1 (divide by the length)."""
    return SimpleNamespace(
        beam_size=k,
        eos=2,
        pad=1,
        paper=False,
        normalize_scores=True,
        divisor=lambda t: float(t + 1),
        lp=lambda n: float(n),
    )


def test_one_step_by_hand():
    """Step 1 of one sentence, beam 2, vocabulary 5 (pad 1, eos 2): hypotheses "3" (log P -1) and
    "4" (-2). Candidates by summed log P: eos after "3" (-1.5), 4 after "4" (-2.1), 3 after "3"
    (-2.2), ... The first 2 candidates hold one eos: it ends with score -1.5 / 2 (2 tokens),
    and the first 2 alive candidates go on: "4 4" and "3 3"."""
    beam = BeamStep(search(), B=1, max_len=3, device=torch.device("cpu"), bos=2)
    beam.tokens[:, 1] = torch.tensor([3, 4])  # (B k, L + 1): bos, then the step-0 tokens
    beam.scores[:, 0] = torch.tensor([-1.0, -2.0])
    lprobs = torch.full((2, 5), -math.inf)
    lprobs[0, 2], lprobs[0, 3], lprobs[0, 0] = -0.5, -1.2, -3.0  # after "3": eos, 3, 0
    lprobs[1, 4], lprobs[1, 0] = -0.1, -2.5  # after "4": 4, 0
    order = beam(1, torch.tensor([1]), lprobs)
    assert order.tolist() == [1, 0]  # "4 4" from row 1, "3 3" from row 0
    assert beam.tokens[:, :3].tolist() == [[2, 4, 4], [2, 3, 3]]
    assert torch.allclose(beam.scores[:, :2], torch.tensor([[-2.0, -2.1], [-1.0, -2.2]]))
    hyps = beam.finished.hypotheses()[0]
    assert len(hyps) == 1 and hyps[0]["tokens"].tolist() == [3, 2] and float(hyps[0]["score"]) == -1.5 / 2
    assert torch.allclose(hyps[0]["positional_scores"], torch.tensor([-1.0, -0.5]))
    assert not beam.done.any()  # 1 of 2 finished
