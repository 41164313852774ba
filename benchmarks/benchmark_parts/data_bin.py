"""A synthetic translation data-bin for the benchmarks that run fairseq's own commands
(cli_train.py, cli_generate.py): binarized as fairseq-preprocess writes one, made in seconds on the
machine that measures, so that nothing has to be carried to it.

Sentences of 10-30 words as benchmarks/benchmark.py's batches. "random" pairs (speed only):
targets of random words within 25% of their source's length. "copy" pairs: the target is the
source, a task a model with learned positions learns in a few hundred updates (position t of the
target reads position t of the source), so that a trained model's beam search ends its hypotheses
where a translation would, near the source's length (a random model's run to the length cap); its
words come from the dictionary's first `words` symbols, which are learnt sooner than all of a 37k
vocabulary, while the output layer still scores every symbol.
"""

from pathlib import Path

SPLITS = {"valid": 16}  # besides train (and test, when asked): fairseq-train loads a valid split


def make_data(folder: Path, vocab: int, pairs: int, seed: int = 1, kind: str = "random", words=None, test=0):
    """folder/: dict.src.txt and dict.tgt.txt (one dictionary of `vocab` symbols for both sides: the
    big models share their embeddings) and the train (`pairs` sentence pairs), valid and, if `test`,
    test splits of `kind` ("random" or "copy") pairs, words drawn at random from the first
    `words` symbols (default all)."""
    import torch
    from fairseq.data import Dictionary, indexed_dataset

    if kind not in ("random", "copy"):
        raise ValueError(f"kind must be random or copy, got {kind!r}")
    d = Dictionary()
    for i in range(vocab - d.nspecial):
        d.add_symbol(f"w{i}")
    folder.mkdir(parents=True, exist_ok=True)
    for side in ("src", "tgt"):
        d.save(str(folder / f"dict.{side}.txt"))
    g = torch.Generator().manual_seed(seed)
    top = d.nspecial + (words or len(d) - d.nspecial)
    splits = {"train": pairs, **SPLITS, **({"test": test} if test else {})}
    for split, n in splits.items():
        lengths = torch.randint(10, 31, (n,), generator=g)  # (n,) words a source
        sources = torch.randint(d.nspecial, top, (int(lengths.sum()),), generator=g).split(lengths.tolist())
        if kind == "copy":
            targets = sources
        else:
            tl = lengths + ((torch.rand(n, generator=g) - 0.5) * (lengths // 2 + 1)).round().long()
            targets = torch.randint(d.nspecial, top, (int(tl.sum()),), generator=g).split(tl.tolist())
        for side, sentences in (("src", sources), ("tgt", targets)):
            prefix = folder / f"{split}.src-tgt.{side}"
            builder = indexed_dataset.make_builder(f"{prefix}.bin", impl="mmap", vocab_size=len(d))
            for sentence in sentences:
                builder.add_item(torch.cat([sentence, torch.tensor([d.eos()])]))
            builder.finalize(f"{prefix}.idx")
    return d
