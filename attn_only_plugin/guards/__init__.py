"""The guards around fairseq's inputs and outputs (docs/reliability.md): bad input caught up front
(input_checks.py, data_checks.py), safe checkpoint loading (safe_load.py), the save dir's lock and
refusals (save_dir.py), whole results files (results_file.py), and wrap_once (wrap.py), by which they
hook into fairseq. PluginError, the one-line errors, atomic writes and hidden characters need no
fairseq: they are attn_only_tools/guards/, imported from there.

They import no model code (pyproject.toml's import contracts check it), and nothing is imported here.
"""
