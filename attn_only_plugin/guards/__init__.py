"""The guards around fairseq's inputs and outputs (docs/reliability.md): one-line errors and what
they say (errors.py, explain.py), bad input caught up front (input_checks.py, data_checks.py,
hidden_chars.py), safe checkpoint loading (safe_load.py), the save dir's lock and refusals
(save_dir.py), whole results files (results_file.py), atomic writes and the rule for outputs
(atomic.py), and wrap_once (wrap.py), by which they hook into fairseq.

They import no model code (pyproject.toml's import contracts check it), and nothing is imported
here: scripts/_standalone.py loads single files of this folder without fairseq or torch.
"""
