"""Tree-constrained beam search for section 6.3 (tasks/constituency_parsing.py)."""

import random
from types import SimpleNamespace

import pytest
import torch
from fairseq.data import Dictionary

from attn_only_plugin.tasks.constituency_parsing import ConstituencyParsingTask, ParsingConfig, TreeConstraints
from attn_only_tools.parsing.linearize import delinearize
from helpers import build_model, make_dictionary, tree_dictionary

LABELS = ("S", "NP", "VP", "PP")


def source_batch(src_dict, *sentences):
    """(B, S) source tokens as fairseq batches them: words, EOS, left-padded."""
    width = max(len(words.split()) for words in sentences) + 1
    rows = [
        [src_dict.pad()] * (width - len(words.split()) - 1)
        + [src_dict.index(w) for w in words.split()]
        + [src_dict.eos()]
        for words in sentences
    ]
    return torch.tensor(rows)


def words(n):
    return " ".join(f"w{i}" for i in range(n))


def names(d, ids):
    return sorted(d[i] for i in ids)


def prefix(d, tokens):
    return torch.tensor([d.eos()] + [d.index(t) for t in tokens.split()])


@pytest.fixture
def constraints():
    d = tree_dictionary()
    c = TreeConstraints(d, make_dictionary())
    c.set_batch([7], source_batch(c.src_dict, "w0 w1"), max_len=50)
    return d, c


OPENS = sorted("(" + label for label in LABELS)


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ("", OPENS),  # a tree starts with a bracket; never (ORPHAN
        ("(S", ["XX"] + OPENS),  # no empty constituent: no )S yet
        ("(S XX", ["XX"] + OPENS),  # the outermost bracket waits for every word
        ("(S (NP XX", [")NP", "XX"] + OPENS),  # only the innermost bracket's label closes
        ("(S (NP XX XX", [")NP"]),  # both words placed: only closing brackets
        ("(S (NP XX XX )NP", [")S"]),
        ("(S XX XX", [")S"]),
        ("(S XX XX )S", ["</s>"]),  # nothing after the outermost bracket
    ],
)
def test_allowed_tokens_by_hand(constraints, tokens, expected):
    d, c = constraints
    assert names(d, c.allowed(7, prefix(d, tokens))) == sorted(expected)


def test_no_bracket_opens_without_room_to_close_it():
    d = tree_dictionary()
    c = TreeConstraints(d, make_dictionary())
    # 2 words, limit 7 tokens before the forced EOS: "(S (NP" + 2 XX + 2 closes = 6 fits, a third
    # bracket would need 8
    c.set_batch([0], source_batch(c.src_dict, "w0 w1"), max_len=7)
    assert "(VP" in names(d, c.allowed(0, prefix(d, "(S")))
    assert "(VP" not in names(d, c.allowed(0, prefix(d, "(S (NP")))
    c.set_batch([0], source_batch(c.src_dict, "w0 w1"), max_len=3)  # not even "(S XX XX )S" fits: give up at once
    assert names(d, c.allowed(0, prefix(d, ""))) == ["</s>"]


def test_random_walks_are_always_trees():
    """Whatever the model prefers, every path through the allowed sets is a tree over the words."""
    d, rng = tree_dictionary(), random.Random(0)
    c = TreeConstraints(d, make_dictionary())
    for trial in range(300):
        n = rng.randint(1, 12)
        max_len = rng.randint(2 * n + 2, 6 * n + 4)
        c.set_batch([trial], source_batch(c.src_dict, words(n)), max_len)
        tokens = [d.eos()]
        while True:
            choice = rng.choice(c.allowed(trial, torch.tensor(tokens)))
            if choice == d.eos():
                break
            tokens.append(choice)
            assert len(tokens) - 1 <= max_len
        tree = delinearize([d[t] for t in tokens[1:]], words(n).split())
        assert tree.words() == words(n).split()


@pytest.mark.parametrize("copy", [False, True])
def test_mask_equals_allowed_on_random_prefixes(copy):
    """The batched mask (the speed path) gives exactly allowed()'s tokens for every hypothesis of a
    step: a batch of sentences of 0-9 words, random walks of every length through the allowed sets,
    tight and loose length limits, XX and copy dictionaries, a vocabulary padded beyond the dictionary."""
    rng = random.Random(1)
    vocab = tuple(f"w{i}" for i in range(12))
    d = copy_dictionary(words=vocab[:8]) if copy else tree_dictionary()
    src = make_dictionary()
    c = TreeConstraints(d, src)
    for trial in range(40):
        lengths = [rng.randint(0, 9) for _ in range(4)]
        ids = [100 + 4 * trial + k for k in range(4)]
        width = max(lengths) + 1
        batch = torch.tensor(
            [
                [src.pad()] * (width - n - 1) + [src.index(f"w{rng.randrange(12)}") for _ in range(n)] + [src.eos()]
                for n in lengths
            ]
        )
        c.set_batch(ids, batch, max_len=rng.randint(2, 40))
        prefixes, sentence_ids, steps = [], [], rng.randint(0, 30)
        for sentence in ids * 3:
            tokens = [d.eos()]
            for _ in range(steps):
                choice = rng.choice(c.allowed(sentence, torch.tensor(tokens)))
                tokens.append(choice)  # after an EOS every next step allows EOS again, as in a padded beam
            prefixes.append(tokens)
            sentence_ids.append(sentence)
        lprobs = torch.zeros(len(prefixes), len(d) + 3)  # (H, V): fairseq may pad the output layer
        mask = c.mask(lprobs, torch.tensor(prefixes), sentence_ids)
        for row, (tokens, sentence) in enumerate(zip(prefixes, sentence_ids, strict=True)):
            expected = sorted(c.allowed(sentence, torch.tensor(tokens)))
            assert mask[row].eq(0).nonzero().squeeze(1).tolist() == expected, (trial, tokens)
        assert torch.isinf(mask[mask.ne(0)]).all()


def test_dictionary_without_placeholder_or_brackets_is_refused():
    with pytest.raises(ValueError, match="no XX and no brackets"):
        TreeConstraints(make_dictionary(), make_dictionary())


def test_constrained_beam_search_of_an_untrained_model_gives_trees():
    """fairseq's SequenceGenerator with beam 5 through the task: every hypothesis of a random model
    (which alone writes garbage) is a well-formed tree over exactly its sentence's words."""
    src_dict, tgt_dict = make_dictionary(), tree_dictionary()
    model = build_model(src_dict, tgt_dict, embedding_sharing="decoder")
    task = ConstituencyParsingTask(ParsingConfig(constrain_trees=True), src_dict, tgt_dict)
    args = SimpleNamespace(beam=5, lenpen=0.3, max_len_a=1, max_len_b=30, sampling=False)
    generator = task.build_generator([model], args)
    lengths = [5, 2, 1]  # words per sentence, left-padded as fairseq batches them
    src = torch.full((3, max(lengths) + 1), src_dict.pad())
    for row, n in enumerate(lengths):
        src[row, -n - 1 :] = torch.tensor([src_dict.index(f"w{i}") for i in range(n)] + [src_dict.eos()])
    sample = {
        "id": torch.tensor([40, 41, 42]),
        "net_input": {"src_tokens": src, "src_lengths": torch.tensor([n + 1 for n in lengths])},
    }
    hypos = task.inference_step(generator, [model], sample)
    for n, beam in zip(lengths, hypos, strict=True):
        assert len(beam) == 5
        for hypo in beam:
            tokens = [tgt_dict[t] for t in hypo["tokens"].tolist()]
            assert tokens[-1] == "</s>"
            words = [f"w{i}" for i in range(n)]
            assert delinearize(tokens[:-1], words).words() == words


def test_constrained_beam_search_of_an_ensemble_gives_trees():
    """fairseq-generate --path a:b (docs/parsing.md, "Ensembles of seeds"): two differently initialized
    models whose log-probabilities fairseq's EnsembleModel averages; the constraint still holds."""
    src_dict, tgt_dict = make_dictionary(), tree_dictionary()
    models = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        models.append(build_model(src_dict, tgt_dict, embedding_sharing="decoder"))
    task = ConstituencyParsingTask(ParsingConfig(constrain_trees=True), src_dict, tgt_dict)
    args = SimpleNamespace(beam=4, lenpen=0.3, max_len_a=1, max_len_b=30, sampling=False)
    generator = task.build_generator(models, args)
    assert type(generator.search).__name__ == "TreeConstrainedBeamSearch" and len(generator.model.models) == 2
    src = torch.tensor([[src_dict.index(f"w{i}") for i in range(4)] + [src_dict.eos()]])  # (1, T)
    sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": src, "src_lengths": torch.tensor([5])}}
    (beam,) = task.inference_step(generator, models, sample)
    assert len(beam) == 4
    for hypo in beam:
        tokens = [tgt_dict[t] for t in hypo["tokens"].tolist()]
        assert tokens[-1] == "</s>" and delinearize(tokens[:-1], words(4).split()).words() == words(4).split()


def test_unconstrained_by_default():
    src_dict, tgt_dict = make_dictionary(), tree_dictionary()
    task = ConstituencyParsingTask(ParsingConfig(), src_dict, tgt_dict)
    args = SimpleNamespace(beam=2, lenpen=0.3, max_len_a=1, max_len_b=30, sampling=False)
    generator = task.build_generator([build_model(src_dict, tgt_dict, embedding_sharing="decoder")], args)
    assert type(generator.search).__name__ == "BeamSearch"  # not TreeConstrainedBeamSearch


# The copy linearization (attn-only-prepare-ptb --target-words): no XX in the target dictionary, each
# word slot holds exactly the next source word.


def copy_dictionary(words=("The", "cat", "sat", "."), placeholder=False):
    d = tree_dictionary(with_orphan=False)
    if not placeholder:
        d = Dictionary()
        for symbol in [b + label for label in LABELS for b in "()"]:
            d.add_symbol(symbol)
    for word in words:
        d.add_symbol(word)
    return d


def source_dictionary(words=("The", "zebra", "sat", "cat")):
    d = Dictionary()
    for word in words:
        d.add_symbol(word)
    return d


def walk(d, c, sentence, tokens):
    return names(d, c.allowed(sentence, prefix(d, tokens)))


@pytest.mark.parametrize("left_pad", [True, False])
def test_copy_mode_forces_each_source_word_in_order(left_pad):
    tgt, src = copy_dictionary(), source_dictionary()
    c = TreeConstraints(tgt, src)
    batch = source_batch(src, "The zebra sat", "cat")  # "zebra" is not in the target dictionary
    if not left_pad:  # the same sentences padded on the right
        batch = torch.stack([torch.cat([row[row.ne(src.pad())], row[row.eq(src.pad())]]) for row in batch])
    c.set_batch([3, 5], batch, max_len=50)
    assert c.copy
    assert walk(tgt, c, 3, "") == OPENS
    assert walk(tgt, c, 3, "(S") == sorted(["The"] + OPENS)
    assert walk(tgt, c, 3, "(S The") == sorted(["<unk>"] + OPENS)  # an unknown word's slot is <unk>
    assert walk(tgt, c, 3, "(S The <unk> (VP") == sorted(["sat"] + OPENS)
    assert walk(tgt, c, 3, "(S The <unk> (VP sat") == [")VP"]  # every word placed: only closing
    assert walk(tgt, c, 3, "(S The <unk> (VP sat )VP )S") == ["</s>"]
    assert walk(tgt, c, 5, "(S") == sorted(["cat"] + OPENS)  # the other sentence of the batch
    assert walk(tgt, c, 5, "(S (NP cat") == [")NP"]


def test_copy_mode_with_a_joined_dictionary():
    """fairseq-preprocess --joined-dictionary: source and target are one dictionary (one object)."""
    d = copy_dictionary(words=("The", "cat", "sat", "zebra"))
    c = TreeConstraints(d, d)
    c.set_batch([0], source_batch(d, "The zebra sat"), max_len=50)
    assert walk(d, c, 0, "(S The") == sorted(["zebra"] + OPENS)
    assert walk(d, c, 0, "(S The zebra") == sorted(["sat"] + OPENS)
    joined_xx = copy_dictionary(words=("The", "cat", "sat", "zebra"), placeholder=True)  # XX: Vinyals et al.
    c = TreeConstraints(joined_xx, joined_xx)
    c.set_batch([0], source_batch(joined_xx, "The zebra sat"), max_len=50)
    assert not c.copy and walk(joined_xx, c, 0, "(S XX") == sorted(["XX"] + OPENS)


def test_a_source_word_spelled_like_a_bracket_gets_an_unk_slot():
    d = copy_dictionary(words=("The",))
    c = TreeConstraints(d, d)
    c.set_batch([0], source_batch(d, "The (S"), max_len=50)
    assert walk(d, c, 0, "(S The") == sorted(["<unk>"] + OPENS)


PIECES = ("\u2581The", "\u2581ze", "bra", "\u2581s", "at", "\u2581cat", "\u2581", ".")  # sentencepiece's


@pytest.mark.parametrize("copy", [True, False])
def test_a_source_of_pieces_gets_one_slot_per_word(copy):
    """attn-only-spm-prepare --source-only: the slots are the words the pieces spell, not the pieces
    ("\u2581ze bra" is "zebra"; a lone "\u2581" starts a word that the next piece spells)."""
    tgt, src = copy_dictionary(placeholder=not copy), source_dictionary(PIECES)
    c = TreeConstraints(tgt, src)
    c.set_batch([0, 1], source_batch(src, "\u2581The \u2581ze bra \u2581s at \u2581 .", "\u2581cat"), max_len=50)
    assert c.pieces and c.n_words.tolist() == [4, 1]
    slot = "The <unk> sat ." if copy else "XX XX XX XX"
    assert [tgt[t] for t in c.slots[0]] == slot.split()
    assert walk(tgt, c, 0, "(S " + " ".join(slot.split()[:3])) == sorted([slot.split()[3]] + OPENS)
    assert walk(tgt, c, 0, "(S " + slot) == [")S"]  # four words placed, whatever the seven pieces
    assert not TreeConstraints(tgt, source_dictionary()).pieces  # words: each symbol is a word


def test_constrained_beam_search_copies_the_source_words():
    """Through the task with beam 4: every hypothesis of a random model is a tree whose word slots are
    the source words in order (<unk> for the one the target dictionary lacks); --word-dropout, for
    training only, leaves them alone."""
    src_dict, tgt_dict = source_dictionary(), copy_dictionary()
    model = build_model(src_dict, tgt_dict, embedding_sharing="decoder")
    task = ConstituencyParsingTask(ParsingConfig(constrain_trees=True, word_dropout=0.9, seed=1), src_dict, tgt_dict)
    args = SimpleNamespace(beam=4, lenpen=0.3, max_len_a=1, max_len_b=30, sampling=False)
    generator = task.build_generator([model], args)
    sentences = ["The zebra sat", "cat"]
    src = source_batch(src_dict, *sentences)
    sample = {
        "id": torch.tensor([0, 1]),
        "net_input": {"src_tokens": src, "src_lengths": src.ne(src_dict.pad()).sum(1)},
    }
    for sentence, beam in zip(sentences, task.inference_step(generator, [model], sample), strict=True):
        for hypo in beam:
            tokens = [tgt_dict[t] for t in hypo["tokens"].tolist()][:-1]
            assert delinearize(tokens, sentence.split()).words() == sentence.split()
            assert [t for t in tokens if t[0] not in "()"] == sentence.replace("zebra", "<unk>").split()


def test_constrained_beam_search_over_a_source_of_pieces():
    """Through the task: each hypothesis places the words the pieces spell, and --max-len-a counts
    those words (3 + EOS -> 1 x 4 + 4 = 8), not the 5 pieces (1 x 6 + 4 = 10)."""
    src_dict, tgt_dict = source_dictionary(PIECES), copy_dictionary()
    model = build_model(src_dict, tgt_dict, embedding_sharing="decoder")
    task = ConstituencyParsingTask(ParsingConfig(constrain_trees=True), src_dict, tgt_dict)
    generator = task.build_generator([model], SimpleNamespace(beam=4, lenpen=0.3, max_len_a=1, max_len_b=4))
    src = source_batch(src_dict, "\u2581The \u2581ze bra \u2581s at")
    sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": src, "src_lengths": torch.tensor([6])}}
    (beam,) = task.inference_step(generator, [model], sample)
    assert generator.search.constraints.max_len == 8
    for hypo in beam:
        tokens = [tgt_dict[t] for t in hypo["tokens"].tolist()][:-1]
        assert [t for t in tokens if t[0] not in "()"] == ["The", "<unk>", "sat"] and len(tokens) <= 8


@pytest.mark.parametrize(
    "extra, problem",
    [
        ({"score_reference": True}, "--constrain-trees constrains beam search, and --score-reference does no search"),
        ({"no_repeat_ngram_size": 2}, "--no-repeat-ngram-size 2 would ban the repeated word slots"),
        (  # one bracket around 4 words takes 6 tokens; the cap is 1 x (4 + 1) + 0 = 5
            {"max_len_a": 1, "max_len_b": 0},
            r"sentence 7 has 4 words, and its smallest tree \(one bracket around them\) takes 6 tokens, more than "
            r"the length cap of 5 .*raise --max-len-b",
        ),
    ],
)
def test_options_no_tree_search_can_go_with_are_refused(extra, problem):
    """--constrain-trees with --score-reference (an AttributeError), --no-repeat-ngram-size or a length
    cap below the smallest tree (an AssertionError inside fairseq's beam search): one line each."""
    from attn_only_tools.guards.errors import PluginError

    src_dict, tgt_dict = make_dictionary(), tree_dictionary()
    model = build_model(src_dict, tgt_dict, embedding_sharing="decoder").eval()
    task = ConstituencyParsingTask(ParsingConfig(constrain_trees=True), src_dict, tgt_dict)
    args = SimpleNamespace(**{"beam": 3, "max_len_a": 1, "max_len_b": 30, **extra})
    sample = {
        "id": torch.tensor([7]),
        "net_input": {"src_tokens": source_batch(src_dict, words(4)), "src_lengths": torch.tensor([5])},
    }
    with pytest.raises(PluginError, match=problem):
        task.inference_step(task.build_generator([model], args), [model], sample)
    fits = SimpleNamespace(beam=3, max_len_a=1, max_len_b=1)  # 6 tokens: the one-bracket tree, and no more
    (beam,) = task.inference_step(task.build_generator([model], fits), [model], sample)
    assert [tgt_dict[t] for t in beam[0]["tokens"].tolist()][-1] == "</s>" and len(beam[0]["tokens"]) == 7
