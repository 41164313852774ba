"""The converters (docs/export.md): exports of trained models to other inference engines, CTranslate2
(ctranslate2.py) and Hugging Face transformers' MarianMTModel (transformers.py), with what both share
(common.py); and weights between fairseq's built-in `transformer` and ours (fairseq.py,
attn-only-convert-checkpoint).

require_ctranslate2() and require_transformers() are the one place that says, in one line, what to
do when the engine is not installed; callers use them before importing export.ctranslate2 or
export.transformers, which import the engine themselves.
"""

from attn_only_tools.guards.errors import PluginError

CTRANSLATE2_VERSION = "4.8.5"  # pyproject.toml's pin (tests/export/test_pins.py); the export writes its format
# CTranslate2's weight types for --quantization (None: as trained, float32); here, where the
# script's argument parser can read them without importing CTranslate2
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
TRANSFORMERS_VERSION = "5.23.0"  # likewise for the transformers export
INFO_FILE = "attn_only_plugin.json"  # written beside CTranslate2's files: what the translator needs (position limits)


def require_ctranslate2():
    """The ctranslate2 module, or a PluginError saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise PluginError(
            f"ctranslate2 is not installed: run `bash scripts/install.sh` (or pip install "
            f"ctranslate2=={CTRANSLATE2_VERSION}) in this environment"
        ) from None
    return ctranslate2


def require_transformers():
    """The transformers module, or a PluginError saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise PluginError(
            f"transformers is not installed: run `bash scripts/install.sh` (or pip install "
            f"transformers=={TRANSFORMERS_VERSION}) in this environment"
        ) from None
    return transformers
