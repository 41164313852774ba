"""The package's two Python faces: `attn_only_plugin.load` (hub.py, the model through fairseq) and
`attn_only_plugin.load_ctranslate2` (hub_ctranslate2.py, a CTranslate2 export), both re-exported by
the package's __init__. Nothing else in the package imports them (pyproject.toml's import contracts).
"""
