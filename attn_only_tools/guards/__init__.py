"""The fairseq-free guards (docs/reliability.md): PluginError and the one-line error hook
(errors.py) with its readings of exceptions (explain.py), atomic writes and the rule for outputs
(atomic.py), and the hidden characters that bad input is checked for (hidden_chars.py). The
guards that hook into fairseq are attn_only_plugin/guards/.
"""
