"""attn_only_tools: the parts of the project that need neither fairseq nor torch.

The fairseq plugin (attn_only_plugin, loaded with --user-dir) imports from here; nothing here imports
it, fairseq or torch (pyproject.toml's import contracts check it, tests/tools/test_no_fairseq.py
imports every module with fairseq and torch made unimportable), so these import in a fraction of a
second and run where fairseq is not installed:

- ``guards``: PluginError and the one-line error hook with its readings of exceptions (errors.py,
  explain.py), atomic writes and the rule for outputs (atomic.py), hidden characters (hidden_chars.py);
- ``parsing``: Penn Treebank reading, linearization, EVALB, the treebank PCFG baseline;
- ``data``: the LibreOffice help corpus builder;
- ``generate_log``: the one reader of fairseq-generate's output (its H-, S-, T-, D-, P- lines);
- ``cli``: the fairseq-free commands, one module each, installed as ``attn-only-*`` console scripts.
"""
