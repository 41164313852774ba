"""Constituency parsing for Section 6.3 of Vaswani et al. (2017), in pure Python.

Penn Treebank reading (``ptb``), the linearization of Vinyals et al. (2015)
that the paper follows (``linearize``) and an EVALB-exact F1 scorer
(``evalb``). Nothing here imports fairseq or torch.
"""
