"""Constituency parsing for Section 6.3 of Vaswani et al. (2017), without fairseq or torch.

- ``ptb``: Penn Treebank reading; ``linearize``: the linearization of Vinyals et al. (2015) that
  the paper follows (and ours with the words in the target); ``data``: the splits and files the
  recipe prepares; ``pieces``: a subword source read back as words.
- ``evalb_input`` and ``evalb``: an EVALB-exact F1 scorer (reading, then scoring and report).
- ``grammar``, ``lexicon``, ``cky``, ``pcfg``: the treebank PCFG baseline (Klein & Manning 2003).

Nothing here imports fairseq or torch; the PCFG uses numpy.
"""
