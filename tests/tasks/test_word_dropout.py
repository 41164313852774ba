"""--word-dropout of the constituency_parsing task (not in the paper): in training only, each source
word becomes <unk> with probability P, drawn reproducibly per (seed, update, sentence)."""

import pytest
import torch

from attn_only_plugin.tasks.constituency_parsing import ConstituencyParsingTask, ParsingConfig, drop_words
from attn_only_tools.guards.errors import PluginError
from helpers import make_dictionary


def batch(d, lengths, left_pad=True):
    """(B, S) source tokens: words w0.., EOS, padded on the left (fairseq's default) or right."""
    width = max(lengths) + 1
    rows = []
    for n in lengths:
        sentence = [d.index(f"w{i % 900}") for i in range(n)] + [d.eos()]
        pad = [d.pad()] * (width - n - 1)
        rows.append(pad + sentence if left_pad else sentence + pad)
    return torch.tensor(rows)


@pytest.fixture(scope="module")
def d():
    return make_dictionary(900)


def test_rate_is_p_and_specials_stay(d):
    src = batch(d, [50 - i % 7 for i in range(300)])
    src[:, -2] = d.unk()  # an <unk> already there stays one
    dropped = drop_words(src, list(range(300)), 0.3, seed=1, update_num=7, src_dict=d)
    words = src >= d.nspecial
    assert torch.equal(dropped[~words], src[~words])  # pad, EOS, <unk> untouched
    changed = dropped[words] != src[words]
    assert (dropped[words][changed] == d.unk()).all()
    rate = changed.float().mean().item()  # ~13,000 words: standard deviation of the rate 0.004
    assert abs(rate - 0.3) < 0.02, rate
    assert torch.equal(drop_words(src, list(range(300)), 0.0, 1, 7, d), src)


def test_draws_are_reproducible_and_independent_of_the_batch(d):
    src = batch(d, [9, 4, 12])
    ids = [10, 11, 12]
    first = drop_words(src, ids, 0.5, seed=3, update_num=100, src_dict=d)
    assert torch.equal(first, drop_words(src, ids, 0.5, seed=3, update_num=100, src_dict=d))  # resumable
    assert not torch.equal(first, drop_words(src, ids, 0.5, seed=3, update_num=101, src_dict=d))
    assert not torch.equal(first, drop_words(src, ids, 0.5, seed=4, update_num=100, src_dict=d))
    other = drop_words(batch(d, [9, 30], left_pad=False), [10, 99], 0.5, seed=3, update_num=100, src_dict=d)
    assert torch.equal(other[0, :10], first[0, 3:])  # sentence 10 in another batch, right-padded: the same drops


class Recorder(torch.nn.Module):
    """A model + criterion + optimizer stand-in that records the source tokens it is given."""

    def __init__(self):
        super().__init__()
        self.weight, self.seen = torch.nn.Parameter(torch.zeros(())), []

    def set_num_updates(self, num_updates):
        pass

    def __call__(self, model, sample):  # the criterion
        self.seen.append(sample["net_input"]["src_tokens"].clone())
        return self.weight * 1.0, 1, {}

    def backward(self, loss):  # the optimizer
        loss.backward()


def test_training_only(d):
    task = ConstituencyParsingTask(ParsingConfig(word_dropout=0.5, seed=1), d, d)
    src = batch(d, [30, 30])
    sample = {
        "id": torch.tensor([0, 1]),
        "net_input": {"src_tokens": src.clone(), "src_lengths": torch.tensor([31, 31])},
    }
    r = Recorder()
    task.train_step(sample, r, r, r, update_num=5)
    task.valid_step(sample, r, r)
    trained, validated = r.seen
    assert (trained == d.unk()).sum() > 10 and torch.equal(validated, src)
    assert torch.equal(sample["net_input"]["src_tokens"], src)  # the caller's batch is not changed
    task.train_step(sample, r, r, r, update_num=5)
    assert torch.equal(r.seen[-1], trained)  # the same update draws the same (a retried step)


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5])
def test_word_dropout_outside_0_1_is_refused(d, p):
    with pytest.raises(PluginError) as refused:
        ConstituencyParsingTask(ParsingConfig(word_dropout=p, seed=1), d, d)
    assert str(refused.value) == f"--word-dropout {p} is not a probability in [0, 1): give e.g. 0.1 (0 turns it off)"
