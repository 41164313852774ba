"""The converters (docs/export.md): to the CTranslate2 inference engine (ctranslate2.py), and weights
between fairseq's built-in `transformer` and ours (fairseq.py, scripts/convert_checkpoint.py).

require_ctranslate2() is the one place that says, in one line, what to do when the engine is not
installed; callers use it before importing export.ctranslate2, which imports the engine itself.
"""
from ..guards.errors import PluginError

CTRANSLATE2_VERSION = "4.8.5"  # the version scripts/install.sh pins; the export writes its format
# CTranslate2's weight types for --quantization (None: as trained, float32); here, where the
# script's argument parser can read them without importing CTranslate2
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
                 "float32")
INFO_FILE = "attn_only_plugin.json"  # written beside CTranslate2's files: what the translator needs (position limits)


def require_ctranslate2():
    """The ctranslate2 module, or a PluginError saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise PluginError(f"ctranslate2 is not installed: run `bash scripts/install.sh` (or pip install "
                          f"ctranslate2=={CTRANSLATE2_VERSION}) in this environment") from None
    return ctranslate2
